"""What a candidate says its ops compute (op_attrs.region_ops), on graphs built as the carve builds them."""

from __future__ import annotations

import operator

import pytest
import torch
from torch import fx, nn

from ytk_core.frontend.op_attrs import region_ops


@pytest.mark.parametrize("channels,per_group,groups", [(72, 1, 72), (64, 16, 4)])
def test_groups_computed_from_the_input_are_read_as_their_value(channels: int, per_group: int, groups: int) -> None:
    # region_module.build_module ties a depthwise conv's groups to sym_size(x, 1), a grouped one's to
    # sym_size(x, 1) // (input channels per group): numbers, not tensors, which torch 2.11's FakeTensorProp
    # does not keep on the node
    g = fx.Graph()
    x, w, b = g.placeholder("in0"), g.placeholder("w0"), g.placeholder("b0")
    c_in = g.call_function(torch.ops.aten.sym_size.int, (x, 1))
    grp = c_in if per_group == 1 else g.call_function(operator.floordiv, (c_in, per_group))
    y = g.call_function(torch.ops.aten.conv2d.default, (x, w, b, [2, 2], [1, 1], [1, 1], grp))
    g.output(g.call_function(torch.ops.aten.relu.default, (y,)))
    gm = fx.GraphModule(nn.Module(), g)
    ins = [torch.randn(1, channels, 16, 16), torch.randn(channels, per_group, 3, 3), torch.randn(channels)]
    (op,) = region_ops(gm, ins)
    assert op.model_dump(exclude_none=True) == dict(op="conv", kernel=[3, 3], stride=[2, 2], padding=[1, 1],
                                                    dilation=[1, 1], groups=groups, channels_in=channels,
                                                    channels_out=channels, activation="relu", transposed=False)


def test_a_transposed_conv_says_so_and_counts_its_output_channels():
    """ConvTranspose2d(48 -> 32): the record said channels_out 48 (the weight's first dim, which for a
    transposed conv is its input channels) and nothing marked it transposed, so a generator deciding from
    the record alone would take it for a forward conv."""
    import torch

    from ytk_core.frontend.op_attrs import region_ops

    class Up(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.ConvTranspose2d(48, 32, 4, stride=2, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.up(x)

    x = torch.randn(1, 48, 8, 8)
    gm = torch.export.export(Up().eval(), (x,)).run_decompositions().module()
    (op,) = region_ops(gm, [x])
    assert op.op == "conv" and op.transposed and (op.channels_in, op.channels_out) == (48, 32), op
