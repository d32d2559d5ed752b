"""Region fixtures following the carve contract: a torch.export .pt2 plus its candidates.json entry.

Until real carves exist in a test, these small modules stand in for them: inputs in the node's
order (activations first, then lifted weight and bias), logical NCHW float32.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F

from ytk_hookspecs.models import Candidate, CandidateFiles, SiteInfo, TensorInfo

ACTS = {
    "none": lambda x: x,
    "relu": F.relu,
    "relu6": F.relu6,
    "hardtanh": lambda x: F.hardtanh(x, 0.0, 6.0),
    "clamp": lambda x: torch.clamp(x, 0.0, 6.0),
    "hardswish": F.hardswish,
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "hardsigmoid": F.hardsigmoid,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


class DwConv(torch.nn.Module):
    """``residual``: "after" adds the input to the activated result as timm's ResidualDrop does
    (``x + m(x)``), "before" adds it ahead of the activation (not a template), "" none."""

    def __init__(self, k: int, stride: int, act: str, bias: bool = True, residual: str = "") -> None:
        super().__init__()
        self.k, self.stride, self.act, self.bias, self.residual = k, stride, act, bias, residual

    def forward(self, x, w, b=None):  # type: ignore[no-untyped-def]
        y = F.conv2d(x, w, b if self.bias else None, self.stride, self.k // 2, 1, x.shape[1])
        if self.residual == "before":
            return ACTS[self.act](y + x)
        y = ACTS[self.act](y)
        return x + y if self.residual == "after" else y


class PwConv(torch.nn.Module):
    """A folded ConvNormAct 1x1 as the carve lifts it; grouped as a dynamic carve writes it."""

    def __init__(self, act: str, group_in: int = 0, bias: bool = True) -> None:
        super().__init__()
        self.act, self.group_in, self.bias = act, group_in, bias

    def forward(self, x, w, b=None):  # type: ignore[no-untyped-def]
        groups = x.shape[1] // self.group_in if self.group_in else 1
        return ACTS[self.act](F.conv2d(x, w, b if self.bias else None, 1, 0, 1, groups))


class LiteMLARegion(torch.nn.Module):
    """EfficientViT LiteMLA's attention math on (qkv, agg) or on the pre-joined tensor."""

    def __init__(self, dim: int = 16, eps: float = 1.0e-15, joined: bool = True) -> None:
        super().__init__()
        self.dim, self.eps, self.joined = dim, eps, joined

    def forward(self, *xs):  # type: ignore[no-untyped-def]
        qkv = torch.cat(list(xs), dim=1) if self.joined else xs[0]
        b, _, h, w = qkv.shape
        qkv = torch.reshape(qkv, (b, -1, 3 * self.dim, h * w)).transpose(-1, -2)
        q, k, v = qkv[..., : self.dim], qkv[..., self.dim: 2 * self.dim], qkv[..., 2 * self.dim:]
        q, k = F.relu(q), F.relu(k)
        v = F.pad(v, (0, 1), mode="constant", value=1.0)
        kv = torch.matmul(k.transpose(-1, -2), v)
        out = torch.matmul(q, kv)
        out = out[..., :-1] / (out[..., -1:] + self.eps)
        return torch.reshape(out.transpose(-1, -2), (b, -1, h, w))


class SqueezeExcite(torch.nn.Module):
    """Squeeze-excite with lifted weights, as timm writes it (``x.mean((2, 3), keepdim=True)``, ``x * gate``)
    or as torchvision does (``adaptive_avg_pool2d(x, 1)``, ``scale * input``)."""

    def __init__(self, act: str, gate: str, bias: bool = True, style: str = "timm") -> None:
        super().__init__()
        self.act, self.gate, self.bias, self.style = act, gate, bias, style

    def forward(self, x, w1, *rest):  # type: ignore[no-untyped-def]
        b1, w2, b2 = rest if self.bias else (None, rest[0], None)
        s = x.mean((2, 3), keepdim=True) if self.style == "timm" else F.adaptive_avg_pool2d(x, 1)
        s = ACTS[self.gate](F.conv2d(ACTS[self.act](F.conv2d(s, w1, b1)), w2, b2))
        return x * s if self.style == "timm" else s * x


class DwConvLN(torch.nn.Module):
    """ConvNeXt's ``conv_dw`` + ``norm`` with the conv's and the norm's weights lifted: the depthwise conv, then
    ``permute(0, 2, 3, 1)``, ``layer_norm`` over the channels and, ``closed``, ``permute(0, 3, 1, 2)`` back (timm's
    LayerNorm2d; open: the NHWC result a Linear takes). ``native`` spells the norm ``aten.native_layer_norm``
    (the decomposed program's); ``act`` puts an activation between conv and norm (not a template)."""

    def __init__(self, k: int, stride: int = 1, eps: float = 1e-6, bias: bool = True, closed: bool = True,
                 native: bool = False, act: str = "") -> None:
        super().__init__()
        self.k, self.stride, self.eps, self.bias, self.closed, self.native, self.act = (k, stride, eps, bias, closed,
                                                                                        native, act)

    def forward(self, x, w0, p0, p1, p2=None):  # type: ignore[no-untyped-def]
        b0, w1, b1 = (p0, p1, p2) if self.bias else (None, p0, p1)
        y = F.conv2d(x, w0, b0, self.stride, self.k // 2, 1, x.shape[1])
        if self.act:
            y = ACTS[self.act](y)
        z = y.permute(0, 2, 3, 1)
        if self.native:
            z = torch.ops.aten.native_layer_norm(z, [z.shape[-1]], w1, b1, self.eps)[0]
        else:
            z = F.layer_norm(z, [z.shape[-1]], w1, b1, self.eps)
        return z.permute(0, 3, 1, 2) if self.closed else z


def _tinfo(name: str, shape) -> TensorInfo:  # type: ignore[no-untyped-def]
    return TensorInfo(name=name, shape=list(shape), dtype="float32")


def export_region(module: torch.nn.Module, example: tuple, path: Path,  # type: ignore[type-arg]
                  dynamic_shapes: tuple | None = None) -> Path:  # type: ignore[type-arg]
    ep = torch.export.export(module, example, dynamic_shapes=dynamic_shapes)
    torch.export.save(ep, str(path))
    return path


def candidate(name: str, pt2: Path, root: Path, site_inputs: list[list[tuple[int, ...]]],
              site_outputs: list[tuple[int, ...]], roles: list[str], inventory: dict[str, int]) -> Candidate:
    names = ["x", "weight", "bias"] if roles[0] == "activation" and len(roles) in (2, 3) and roles[1] == "weight" \
        else [f"in{i}" for i in range(len(roles))]
    sites = [SiteInfo(index=i, module_path=f"m.site{i}", onnx_node=f"{name}_{i}",
                      inputs=[_tinfo(f"{names[j]}_{i}", s) for j, s in enumerate(ins)],
                      outputs=[_tinfo(f"y_{i}", site_outputs[i])], replaced_onnx_nodes=[], fx_nodes=[])
             for i, ins in enumerate(site_inputs)]
    n_in = len(roles)
    constant = [[len({site[k][j] for site in site_inputs}) == 1 for j in range(len(site_inputs[0][k]))]
                for k in range(n_in)]
    dynamic = {f"{names[k]}": [j for j, c in enumerate(constant[k]) if not c] for k in range(n_in)
               if not all(constant[k])}
    return Candidate(name=name, namespace="yasp", selector=f"yasp::{name}=X", ops_name="X", lift="fold_conv_bn",
                     input_roles=roles, sites=sites, op_inventory=inventory, constant_axes=constant,
                     dynamic_dims=dynamic, files=CandidateFiles(pt2=str(pt2.relative_to(root))))


def dw_fixture(root: Path, name: str, k: int, stride: int, act: str, shapes: list[tuple[int, int, int, int]],
               bias: bool = True, residual: str = "", dynamic: bool = False) -> tuple[Path, Candidate]:
    """A depthwise region with one site per entry of ``shapes`` (N, C, H, W); ``residual`` as
    :class:`DwConv`'s; ``dynamic`` exports with symbolic channels, as the carve does for a dynamic
    remainder."""
    (root / "plugin_candidates").mkdir(parents=True, exist_ok=True)
    mod = DwConv(k, stride, act, bias, residual)
    # Exported at a small shape, as a carve of a big model may be: the generator must not rely on
    # the .pt2 running at the site shapes.
    c = shapes[0][1]
    ex = (torch.randn(1, c, 6, 5), torch.randn(c, 1, k, k)) + ((torch.randn(c),) if bias else ())
    ch = torch.export.Dim("c", min=2, max=4096)
    dyn = ({1: ch}, {0: ch}) + (({0: ch},) if bias else ()) if dynamic else None
    pt2 = export_region(mod, ex, root / "plugin_candidates" / f"{name}.pt2", dyn)
    ins, outs = [], []
    for (n, c, h, w) in shapes:
        ins.append([(n, c, h, w), (c, 1, k, k)] + ([(c,)] if bias else []))
        ho, wo = (h + 2 * (k // 2) - k) // stride + 1, (w + 2 * (k // 2) - k) // stride + 1
        outs.append((n, c, ho, wo))
    ep = torch.export.load(str(pt2))
    inv = dict(Counter(str(nd.target) for nd in ep.graph.nodes if nd.op == "call_function"))
    roles = ["activation", "weight"] + (["bias"] if bias else [])
    return pt2, candidate(name, pt2, root, ins, outs, roles, inv)


def pw_fixture(root: Path, name: str, act: str, shapes: list[tuple[int, int, int, int, int]], group_in: int = 0,
               group_out: int = 0, bias: bool = True, dynamic: bool = False) -> tuple[Path, Candidate]:
    """A 1x1 conv region with one site per entry of ``shapes`` (N, C, H, W, CO); ``dynamic``
    exports with symbolic channels as the carve does for a dynamic remainder (grouped: 16*g)."""
    (root / "plugin_candidates").mkdir(parents=True, exist_ok=True)
    mod = PwConv(act, group_in, bias)
    c, co = shapes[0][1], shapes[0][4]
    per = group_in or c
    ex = (torch.randn(1, c, 6, 5), torch.randn(co, per, 1, 1)) + ((torch.randn(co),) if bias else ())
    g = torch.export.Dim("g", min=1, max=512)
    dyn = ({1: group_in * g}, {0: group_out * g}) + (({0: group_out * g},) if bias else ()) if dynamic else None
    pt2 = export_region(mod, ex, root / "plugin_candidates" / f"{name}.pt2", dyn)
    ins, outs = [], []
    for (n, c, h, w, co) in shapes:
        ins.append([(n, c, h, w), (co, group_in or c, 1, 1)] + ([(co,)] if bias else []))
        outs.append((n, co, h, w))
    ep = torch.export.load(str(pt2))
    inv = dict(Counter(str(nd.target) for nd in ep.graph.nodes if nd.op == "call_function"))
    roles = ["activation", "weight"] + (["bias"] if bias else [])
    return pt2, candidate(name, pt2, root, ins, outs, roles, inv)


def litemla_fixture(root: Path, name: str, shapes: list[tuple[int, int, int, int]], joined: bool = True,
                    dim: int = 16) -> tuple[Path, Candidate]:
    """A LiteMLA region; ``shapes`` are each input's (N, C, H, W) per site."""
    (root / "plugin_candidates").mkdir(parents=True, exist_ok=True)
    mod = LiteMLARegion(dim=dim, joined=joined)
    c = shapes[0][1]
    ex = tuple(torch.randn(1, c, 4, 3) for _ in range(2 if joined else 1))
    pt2 = export_region(mod, ex, root / "plugin_candidates" / f"{name}.pt2")
    ins = [[s] * (2 if joined else 1) for s in shapes]
    outs = [(n, c * (2 if joined else 1) // 3, h, w) for (n, c, h, w) in shapes]
    ep = torch.export.load(str(pt2))
    inv = dict(Counter(str(nd.target) for nd in ep.graph.nodes if nd.op == "call_function"))
    return pt2, candidate(name, pt2, root, ins, outs, ["activation"] * (2 if joined else 1), inv)


def se_fixture(root: Path, name: str, act: str, gate: str, shapes: list[tuple[int, int, int, int, int]],
               bias: bool = True, style: str = "timm") -> tuple[Path, Candidate]:
    """A squeeze-excite region with one site per entry of ``shapes`` (N, C, H, W, CR)."""
    (root / "plugin_candidates").mkdir(parents=True, exist_ok=True)
    mod = SqueezeExcite(act, gate, bias, style)
    c, cr = shapes[0][1], shapes[0][4]
    ex = (torch.randn(1, c, 6, 5), torch.randn(cr, c, 1, 1)) + ((torch.randn(cr),) if bias else ()) \
        + (torch.randn(c, cr, 1, 1),) + ((torch.randn(c),) if bias else ())
    pt2 = export_region(mod, ex, root / "plugin_candidates" / f"{name}.pt2")
    ins, outs = [], []
    for (n, c, h, w, cr) in shapes:
        ins.append([(n, c, h, w), (cr, c, 1, 1)] + ([(cr,)] if bias else []) + [(c, cr, 1, 1)]
                   + ([(c,)] if bias else []))
        outs.append((n, c, h, w))
    ep = torch.export.load(str(pt2))
    inv = dict(Counter(str(nd.target) for nd in ep.graph.nodes if nd.op == "call_function"))
    roles = ["activation", "weight"] + (["bias"] if bias else []) + ["weight"] + (["bias"] if bias else [])
    return pt2, candidate(name, pt2, root, ins, outs, roles, inv)


def dwln_fixture(root: Path, name: str, k: int, stride: int, shapes: list[tuple[int, int, int, int]],
                 bias: bool = True, closed: bool = True, native: bool = False, dynamic: bool = False,
                 eps: float = 1e-6, act: str = "") -> tuple[Path, Candidate]:
    """A depthwise conv + LayerNorm-over-channels region with one site per entry of ``shapes`` (N, C, H, W),
    inputs (x, w0, b0, w1, b1) as the carve lifts them; ``dynamic`` exports with symbolic channels."""
    (root / "plugin_candidates").mkdir(parents=True, exist_ok=True)
    mod = DwConvLN(k, stride, eps, bias, closed, native, act)
    c = shapes[0][1]
    ex = (torch.randn(1, c, 6, 5), torch.randn(c, 1, k, k)) + ((torch.randn(c),) if bias else ()) \
        + (torch.randn(c), torch.randn(c))
    ch = torch.export.Dim("c", min=8, max=4096)
    dyn = tuple({1: ch} if i == 0 else {0: ch} for i in range(len(ex))) if dynamic else None
    pt2 = export_region(mod, ex, root / "plugin_candidates" / f"{name}.pt2", dyn)
    ins, outs = [], []
    for (n, c, h, w) in shapes:
        ins.append([(n, c, h, w), (c, 1, k, k)] + ([(c,)] if bias else []) + [(c,), (c,)])
        ho, wo = (h + 2 * (k // 2) - k) // stride + 1, (w + 2 * (k // 2) - k) // stride + 1
        outs.append((n, c, ho, wo) if closed else (n, ho, wo, c))
    ep = torch.export.load(str(pt2))
    inv = dict(Counter(str(nd.target) for nd in ep.graph.nodes if nd.op == "call_function"))
    roles = ["activation", "weight"] + (["bias"] if bias else []) + ["weight", "bias"]
    return pt2, candidate(name, pt2, root, ins, outs, roles, inv)


# Regions the GPU tests generate kernels for: (plugin name, k, stride, activation, channels, bias,
# small test shapes, max variants). Plugin and tensor names match the worked-example regions of
# benchmarks/kernels_regions.py, so a build cache prepared for one serves the other.
GPU_DW_REGIONS = [
    ("DwConv3x3s1C256", 3, 1, "hardswish", 256, True, [(1, 256, 13, 37), (2, 256, 9, 8)], 0),
    ("DwConv5x5s1C384", 5, 1, "none", 384, True, [(1, 384, 11, 19)], 0),
    ("DwConv3x3s2C64", 3, 2, "hardswish", 64, True, [(2, 64, 21, 35)], 0),
    ("DwConv3x3s1Dyn", 3, 1, "hardswish", None, True, [(1, 16, 19, 30), (1, 128, 9, 11), (1, 24, 5, 5)], 0),
    ("DwAct7x7s1relu6", 7, 1, "relu6", 32, True, [(1, 32, 10, 12)], 2),
    ("DwAct3x3s1silu", 3, 1, "silu", 64, True, [(1, 64, 7, 9)], 2),
    ("DwAct3x3s1gelu", 3, 1, "gelu", 64, True, [(1, 64, 7, 9)], 2),
    ("DwAct5x5s2relu", 5, 2, "relu", 64, False, [(1, 64, 15, 13)], 2),
    # channels no 16-wide block tiles (MobileNetV3's 72, EdgeNeXt's 88): the runtime-C kernels
    ("DwConv5x5s2C72", 5, 2, "hardswish", 72, True, [(1, 72, 13, 17)], 0),
    ("DwConv7x7s1C88", 7, 1, "gelu", 88, True, [(2, 88, 9, 13)], 3),
    ("DwAct3x3s1sigmoid", 3, 1, "sigmoid", 32, True, [(1, 32, 7, 9)], 2),
    # a depthwise 1x1 (FastViT's / MobileOne's conv_scale branches: a per-channel scale + bias)
    ("DwConv1x1s1C48", 1, 1, "none", 48, True, [(1, 48, 13, 37)], 0),
    ("DwConv1x1s2C64", 1, 2, "none", 64, True, [(2, 64, 11, 14)], 0),
]
# depthwise + residual add of the input (x + act(dw(x))): (plugin name, k, activation, channels (None: a
# dynamic remainder), shapes (N, C, H, W)); every variant is scored
GPU_DW_RESIDUAL_REGIONS = [
    ("DwRes3x3C128", 3, "none", 128, [(1, 128, 13, 37), (2, 128, 9, 8)]),
    ("DwRes7x7Dyn", 7, "gelu", None, [(1, 24, 10, 12), (1, 64, 7, 9)]),
]
# squeeze-excite: (plugin name, act, gate, bias, torch spelling, shapes (N, C, H, W, CR)); every variant scored
GPU_SE_REGIONS = [
    ("SEC96r24", "silu", "sigmoid", True, "timm", [(1, 96, 13, 37, 24), (2, 96, 150, 97, 24)]),
    ("SEDyn", "relu", "hardsigmoid", False, "torchvision",
     [(1, 32, 10, 12, 8), (1, 72, 7, 9, 18), (3, 1152, 5, 6, 48)]),
]
# 1x1 regions: (plugin name, activation, per-group in/out (0: dense), bias, shapes (N, C, H, W, CO), max variants)
GPU_PW_REGIONS = [
    ("Conv1x1s1C16to64", "hardswish", 0, 0, True, [(1, 16, 13, 37, 64), (2, 16, 9, 8, 64)], 0),
    ("Conv1x1s1Dyn", "none", 0, 0, True, [(1, 32, 9, 11, 16), (1, 128, 5, 7, 64), (1, 64, 3, 3, 256)], 0),
    ("GConv1x1s1Dyn", "none", 16, 16, True, [(1, 384, 7, 9, 384), (1, 768, 3, 5, 768)], 0),
    ("PwAct1x1relu6", "relu6", 0, 0, False, [(1, 24, 7, 5, 40)], 2),
    # squeeze-excite's expand conv on the pooled 1x1 map, gated: MobileNetV3 (hardsigmoid), EfficientNet (sigmoid)
    ("SeExpand1x1hardsigmoid", "hardsigmoid", 0, 0, True, [(2, 16, 1, 1, 64)], 2),
    ("SeExpand1x1sigmoid", "sigmoid", 0, 0, True, [(2, 40, 1, 1, 160)], 2),
]
GPU_LITEMLA_REGIONS = [
    ("LiteMLAC384", True, [(1, 384, 7, 9), (2, 384, 3, 5)], 0),
    ("LiteMLANoJoin", False, [(1, 96, 5, 7)], 2),
]
# depthwise conv + LayerNorm over the channels (ConvNeXt-atto C40/C320, EdgeNeXt C88): (plugin name, k, stride,
# closed (NCHW out; else NHWC), bias, torch spelling native_layer_norm, dynamic channels, shapes (N, C, H, W));
# every variant scored on odd shapes (rows of several partial pixel segments, widths no block tiles)
GPU_DWLN_REGIONS = [
    ("DwLn7x7C40", 7, 1, True, True, False, False, [(1, 40, 13, 37), (2, 40, 9, 70)]),
    ("DwLnNhwc7x7C88", 7, 1, False, True, True, False, [(2, 88, 11, 19)]),
    ("DwLn7x7C320", 7, 1, True, True, False, False, [(1, 320, 7, 9), (1, 320, 3, 65)]),
    ("DwLnNhwcDyn", 7, 1, False, True, False, True, [(1, 40, 10, 70), (1, 88, 9, 13), (1, 320, 5, 6)]),
    ("DwLn3x3s2C96NoBias", 3, 2, True, False, False, False, [(1, 96, 15, 13)]),
]


def cpu_case_setup(pt2: Path, cand: Candidate):  # type: ignore[no-untyped-def]
    """What the CPU harness tests start from: the fixture's region recognised and checked against its ``.pt2``,
    its torch module, the generator's cases for its sites and its plugin contract (all on the CPU)."""
    from ytk_backend_templates.cases import build_cases
    from ytk_backend_templates.contract import plugin_meta
    from ytk_backend_templates.recognise import load_graph, recognise, site_shapes
    from ytk_backend_templates.reference import torch_region, verify_against_pt2

    cpu = torch.device("cpu")
    g = load_graph(pt2)
    region = recognise(g, cand)
    verify_against_pt2(region, torch.export.load(str(pt2)).module(), g.input_shapes, cpu)
    module = torch_region(region)
    cases = build_cases(region, module, site_shapes(g, cand), cpu)
    return region, module, cases, plugin_meta(region, cand.name, candidate=cand)
