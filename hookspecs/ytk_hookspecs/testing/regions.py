"""The carved regions the conformance suite hands a kernel generator, written as the carve writes them.

Each region is a small torch program with the shapes and the files a real carve produces: the
canonical ``<Name>.pt2`` (lifted conv weights are inputs, as ``lift="fold_conv_bn"`` makes them),
``<Name>.io.npz`` with every site's inputs and outputs (``site{k}.in{i}``, ``site{k}.out{j}``), and
its ``candidates.json`` entry with the op attributes, plus the sketch propose would have asked about
before the carve. The set covers what generators in this domain take: depthwise and pointwise convs
with a fused activation, softmax attention, and a normalisation with baked weights. torch is
imported only when a region is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..models import Candidate, CandidateFiles, CandidatesFile, RegionOp, RegionSketch, SiteInfo, TensorInfo

__all__ = ["REGIONS", "SuiteRegion", "WrittenRegion", "write_regions"]

#: Where the region files go inside a prepare directory, as the carve puts them.
CANDIDATES_DIR = "plugin_candidates"


@dataclass(frozen=True)
class SuiteRegion:
    """One region: its program, the input shapes at each site, and what the carve records about it."""

    name: str
    ops_name: str
    program: Callable[[], Any]          # builds the torch module (a region's canonical program)
    site_shapes: tuple[tuple[tuple[int, ...], ...], ...]   # per site, per input
    input_roles: tuple[str, ...]
    lift: str
    ops: tuple[RegionOp, ...]
    sketch: RegionSketch
    around: bool = False
    replaced: tuple[str, ...] = ()      # the ONNX op types the custom-op node replaced


@dataclass
class WrittenRegion:
    """A region on disk: its candidate (paths relative to ``prepare_dir``) and the ``.pt2``."""

    region: SuiteRegion
    candidate: Candidate
    prepare_dir: Path
    pt2: Path
    io_npz: Path
    notes: list[str] = field(default_factory=list)


def _conv_program(stride: int, padding: int, groups: int, activation: str | None) -> Callable[[], Any]:
    def build() -> Any:
        import torch
        import torch.nn.functional as F

        act = {None: lambda t: t, "relu": F.relu, "hardswish": F.hardswish}[activation]

        class ConvRegion(torch.nn.Module):
            def forward(self, x, w, b):  # type: ignore[no-untyped-def]
                return act(F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups))

        return ConvRegion()

    return build


def _attention_program(heads: int) -> Callable[[], Any]:
    def build() -> Any:
        import torch

        class AttentionRegion(torch.nn.Module):
            """ViT-style: one qkv activation in, the heads' outputs concatenated out."""

            def forward(self, qkv):  # type: ignore[no-untyped-def]
                b, n, c3 = qkv.shape
                q, k, v = qkv.reshape(b, n, 3, heads, c3 // (3 * heads)).permute(2, 0, 3, 1, 4)
                attn = (q @ k.transpose(-2, -1)) * (c3 // (3 * heads)) ** -0.5
                return (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c3 // 3)

        return AttentionRegion()

    return build


def _layer_norm_program(channels: int) -> Callable[[], Any]:
    def build() -> Any:
        import torch

        gen = torch.Generator().manual_seed(7)
        norm = torch.nn.LayerNorm(channels)
        with torch.no_grad():  # weights baked into the program, as the carve leaves a norm's
            norm.weight.copy_(1 + 0.1 * torch.randn(channels, generator=gen))
            norm.bias.copy_(0.1 * torch.randn(channels, generator=gen))
        return norm.eval()

    return build


def _conv_op(k: int, stride: int, pad: int, cin: int, cout: int, groups: int, activation: str | None) -> RegionOp:
    return RegionOp(op="conv", kernel=[k, k], stride=[stride, stride], padding=[pad, pad], dilation=[1, 1],
                    groups=groups, channels_in=cin, channels_out=cout, activation=activation)


_CONV_ROLES = ("activation", "weight", "bias")

#: The suite's regions, at the sizes of the worked example's stages (batch 4, 1088x1920 input): large enough that a
#: real kernel can beat the region's own torch ops, which a generator may demand before it calls a job done.
REGIONS: tuple[SuiteRegion, ...] = (
    SuiteRegion(
        name="DwConv3x3C64", ops_name="Conv2d", program=_conv_program(1, 1, 64, None),
        site_shapes=(((4, 64, 68, 120), (64, 1, 3, 3), (64,)),) * 2, input_roles=_CONV_ROLES, lift="fold_conv_bn",
        ops=(_conv_op(3, 1, 1, 64, 64, 64, None),), replaced=("Conv",),
        sketch=RegionSketch(kind="depthwise_conv", ops_name="Conv2d", kernel=[3, 3], stride=[1, 1], dilation=[1, 1],
                            pads=[1, 1, 1, 1], groups=64, channels_in=64, channels_out=64, onnx_ops={"Conv": 1})),
    SuiteRegion(
        name="DwConv5x5s2C96HardSwish", ops_name="ConvNormAct", program=_conv_program(2, 2, 96, "hardswish"),
        site_shapes=(((4, 96, 68, 120), (96, 1, 5, 5), (96,)),), input_roles=_CONV_ROLES, lift="fold_conv_bn",
        ops=(_conv_op(5, 2, 2, 96, 96, 96, "hardswish"),), replaced=("Conv", "HardSwish"),
        sketch=RegionSketch(kind="depthwise_conv", ops_name="ConvNormAct", kernel=[5, 5], stride=[2, 2],
                            dilation=[1, 1], pads=[2, 2, 2, 2], groups=96, channels_in=96, channels_out=96,
                            onnx_ops={"Conv": 1, "HardSwish": 1})),
    SuiteRegion(
        name="Conv1x1C64to128Relu", ops_name="ConvNormAct", program=_conv_program(1, 0, 1, "relu"),
        site_shapes=(((4, 64, 68, 120), (128, 64, 1, 1), (128,)),), input_roles=_CONV_ROLES, lift="fold_conv_bn",
        ops=(_conv_op(1, 1, 0, 64, 128, 1, "relu"),), replaced=("Conv", "Relu"),
        sketch=RegionSketch(kind="conv", ops_name="ConvNormAct", kernel=[1, 1], stride=[1, 1], dilation=[1, 1],
                            pads=[0, 0, 0, 0], groups=1, channels_in=64, channels_out=128,
                            onnx_ops={"Conv": 1, "Relu": 1})),
    SuiteRegion(
        name="AttentionC192", ops_name="Attention", program=_attention_program(3), around=True,
        site_shapes=(((4, 196, 576),),), input_roles=("activation",), lift="none",
        ops=(RegionOp(op="matmul"), RegionOp(op="softmax"), RegionOp(op="matmul")),
        replaced=("Reshape", "Transpose", "MatMul", "Mul", "Softmax", "MatMul", "Transpose", "Reshape"),
        sketch=RegionSketch(kind="attention", ops_name="Attention", around=True,
                            onnx_ops={"MatMul": 2, "Softmax": 1, "Mul": 1, "Reshape": 2, "Transpose": 2})),
    SuiteRegion(
        name="LayerNormC96", ops_name="LayerNorm", program=_layer_norm_program(96),
        site_shapes=(((4, 784, 96),),), input_roles=("activation",), lift="none",
        ops=(RegionOp(op="layer_norm", channels_in=96, channels_out=96),), replaced=("LayerNormalization",),
        sketch=RegionSketch(kind="layer_norm", ops_name="LayerNorm", channels_in=96, channels_out=96,
                            onnx_ops={"LayerNormalization": 1})),
)


def _site_inputs(region: SuiteRegion, site: int) -> list[Any]:
    """Seeded fp32 inputs of one site: activations ~N(0, 1), conv weights scaled by 1/sqrt(fan-in)."""
    import torch

    gen = torch.Generator().manual_seed(1000 * site + sum(map(ord, region.name)))
    out = []
    for shape, role in zip(region.site_shapes[site], region.input_roles):
        t = torch.randn(shape, generator=gen)
        if role == "weight":
            t = t / math.sqrt(math.prod(shape[1:]))
        elif role == "bias":
            t = 0.1 * t
        out.append(t)
    return out


def write_region(region: SuiteRegion, prepare_dir: Path) -> WrittenRegion:
    """Export ``region``'s program and write its ``.pt2`` and ``.io.npz`` under ``prepare_dir``."""
    import numpy as np
    import torch

    cdir = Path(prepare_dir) / CANDIDATES_DIR
    cdir.mkdir(parents=True, exist_ok=True)
    module = region.program().eval()
    sites_in = [_site_inputs(region, k) for k in range(len(region.site_shapes))]
    with torch.no_grad():
        sites_out = [[module(*ins)] for ins in sites_in]
    program = torch.export.export(module, tuple(sites_in[0]), strict=False)
    pt2 = cdir / f"{region.name}.pt2"
    torch.export.save(program, str(pt2))
    arrays = {f"site{k}.in{i}": t.numpy() for k, ins in enumerate(sites_in) for i, t in enumerate(ins)}
    arrays.update({f"site{k}.out{j}": t.numpy() for k, outs in enumerate(sites_out) for j, t in enumerate(outs)})
    io_npz = cdir / f"{region.name}.io.npz"
    np.savez(io_npz, **arrays)
    inventory: dict[str, int] = {}
    for node in program.graph.nodes:
        if node.op == "call_function":
            inventory[str(node.target)] = inventory.get(str(node.target), 0) + 1
    sites = []
    for k, (ins, outs) in enumerate(zip(sites_in, sites_out)):
        names = ["x"] + [f"{region.name}.site{k}.{'w' if role == 'weight' else 'b'}0"
                         for role in region.input_roles[1:]]
        sites.append(SiteInfo(
            index=k, module_path=f"blocks.{k}.{region.ops_name.lower()}", onnx_node=f"{region.name}_{k}",
            inputs=[TensorInfo(name=f"{n}{k}" if n == "x" else n, shape=list(t.shape), dtype="float32")
                    for n, t in zip(names, ins)],
            outputs=[TensorInfo(name=f"y{k}", shape=list(t.shape), dtype="float32") for t in outs],
            replaced_onnx_nodes=[f"node_{op}_{k}_{i}" for i, op in enumerate(region.replaced)], fx_nodes=[]))
    selector = f"yasp::{region.name}={region.ops_name}" + (":around" if region.around else "")
    candidate = Candidate(
        name=region.name, namespace="yasp", version="1", selector=selector, ops_name=region.ops_name,
        around=region.around, lift=region.lift, input_roles=list(region.input_roles),  # type: ignore[arg-type]
        sites=sites,
        op_inventory=inventory, ops=list(region.ops),
        constant_axes=[[True] * len(s) for s in region.site_shapes[0]],
        files=CandidateFiles(pt2=f"{CANDIDATES_DIR}/{pt2.name}", io_npz=f"{CANDIDATES_DIR}/{io_npz.name}"))
    return WrittenRegion(region=region, candidate=candidate, prepare_dir=Path(prepare_dir), pt2=pt2, io_npz=io_npz)


def write_regions(prepare_dir: Path, names: list[str] | None = None,
                  regions: tuple[SuiteRegion, ...] = REGIONS) -> list[WrittenRegion]:
    """Write ``regions`` (those named, or all) and their ``candidates.json`` into ``prepare_dir``."""
    chosen = [r for r in regions if not names or r.name in names]
    written = [write_region(r, prepare_dir) for r in chosen]
    CandidatesFile(onnx="model.onnx", candidates=[w.candidate for w in written]).write(
        Path(prepare_dir) / "candidates.json")
    return written
