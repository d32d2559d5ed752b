"""The kernel contract (plugin_meta) each region kind's kernel honours, and its physical floor.

Activations are fp16 kHWC8 (memory NHWC, channels a multiple of 8) with fp32 accumulation;
lifted weights and biases stay fp32 kLINEAR. Shapes are logical NCHW expressions over the
launcher's extents, which are evaluated from the runtime input dims.
"""

from __future__ import annotations

import re

from ytk_hookspecs.models import Candidate, PluginMeta, TensorContract

from .regions import (Conv1x1Region, DwConvLNRegion, DwConvRegion, LiteMLARegion, Region, SERegion, SiteShape,
                      is_weight)


def launcher_symbols(plugin_name: str) -> tuple[str, str]:
    safe = re.sub(r"[^A-Za-z0-9_]", "_", plugin_name)
    return f"ytk_launch_{safe}", f"ytk_workspace_{safe}"


def _names(candidate: Candidate | None, n_in: int, defaults: list[str], out_default: str) -> tuple[list[str], str]:
    ins = list(defaults)
    out = out_default
    if candidate is not None and candidate.sites:
        s = candidate.sites[0]
        if len(s.inputs) == n_in:
            ins = [t.name for t in s.inputs]
        if s.outputs:
            out = s.outputs[0].name
    return ins, out


#: the extents every kind reads off its first input (logical NCHW)
_NCHW = {"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]"}


def plugin_meta(region: Region, plugin_name: str, namespace: str = "yasp", version: str = "1",
                candidate: Candidate | None = None, deployment_target: str = "tensorrt") -> PluginMeta:
    """The contract of the kernel generated for ``region`` (perf is filled in after scoring)."""
    def meta(roles: list[str], shapes: dict[str, list[str]], out: list[str], constraints: list[str], *,
             acts: int = 1, extents: dict[str, str] | None = None, workspace: bool = False,
             out_format: str = "kHWC8") -> PluginMeta:
        """``roles``: the inputs in the node's order, the first ``acts`` fp16 kHWC8 activations, the rest fp32
        kLINEAR lifted parameters (a role starting with ``w`` a weight, any other a bias); the names are the
        candidate's where it has as many inputs."""
        launcher, ws = launcher_symbols(plugin_name)
        names, y = _names(candidate, len(roles), roles, "y")
        inputs = [TensorContract(name=n, dtype="float16", format="kHWC8", role="activation", shape=shapes[r])
                  for n, r in zip(names[:acts], roles[:acts])]
        inputs += [TensorContract(name=n, dtype="float32", format="kLINEAR", role="weight" if r[0] == "w" else "bias",
                                  shape=shapes[r]) for n, r in zip(names[acts:], roles[acts:])]
        return PluginMeta(plugin_name=plugin_name, plugin_namespace=namespace, plugin_version=version,
                          deployment_target=deployment_target, inputs=inputs, accumulation="float32",
                          outputs=[TensorContract(name=y, dtype="float16", format=out_format, shape=out)],
                          extents={**_NCHW, **(extents or {})}, launcher=launcher, workspace=ws if workspace else None,
                          constraints=constraints)

    nchw = ["N", "C", "H", "W"]
    if isinstance(region, (DwConvRegion, DwConvLNRegion)):
        k, s, p = region.k, region.stride, region.pad
        conv = {"HO": f"(H + {2 * p} - {k})//{s} + 1", "WO": f"(W + {2 * p} - {k})//{s} + 1"}
        w = ["C", "1", str(k), str(k)]
        shapes = {"x": nchw, "weight": w, "bias": ["C"], "w0": w, "b0": ["C"], "w1": ["C"], "b1": ["C"]}
        constraints = ["C % 8 == 0"] + ([f"C == {region.channels}"] if region.channels else [])
        if isinstance(region, DwConvRegion):
            roles = ["x", "weight"] + (["bias"] if region.has_bias else [])
            return meta(roles, shapes, ["N", "C", "HO", "WO"], constraints, extents=conv)
        # + LayerNorm: its (weight, bias) after the conv's; the output is the same NHWC bytes in either form,
        # logical NCHW in kHWC8 (closed, LayerNorm2d) or the NHWC tensor itself in kLINEAR
        roles = ["x", "w0"] + (["b0"] if region.has_bias else []) + ["w1", "b1"]
        if region.closed:
            return meta(roles, shapes, ["N", "C", "HO", "WO"], constraints, extents=conv)
        return meta(roles, shapes, ["N", "HO", "WO", "C"], constraints, extents=conv, out_format="kLINEAR")
    if isinstance(region, Conv1x1Region):
        per_group = str(region.group_in) if region.grouped else "C"
        shapes = {"x": nchw, "weight": ["CO", per_group, "1", "1"], "bias": ["CO"]}
        constraints = ["C % 8 == 0", "CO % 8 == 0"]
        if region.grouped:
            constraints += [f"C % {region.group_in} == 0", f"CO * {region.group_in} == C * {region.group_out}"]
        if region.cin:
            constraints += [f"C == {region.cin}", f"CO == {region.cout}"]
        return meta(["x", "weight"] + (["bias"] if region.has_bias else []), shapes, ["N", "CO", "H", "W"],
                    constraints, extents={"CO": "in1[0]"})
    if isinstance(region, SERegion):
        roles = ["x", "w1"] + (["b1"] if region.has_bias1 else []) + ["w2"] + (["b2"] if region.has_bias2 else [])
        shapes = {"x": nchw, "w1": ["CR", "C", "1", "1"], "b1": ["CR"], "w2": ["C", "CR", "1", "1"], "b2": ["C"]}
        constraints = ["C % 8 == 0"]
        if region.channels:
            constraints += [f"C == {region.channels}", f"CR == {region.reduced}"]
        return meta(roles, shapes, nchw, constraints, extents={"CR": "in1[0]"}, workspace=True)
    assert isinstance(region, LiteMLARegion)
    d = region.dim
    constraints = [f"C % {3 * d} == 0"] + ([] if region.joined else ["C % 8 == 0"])
    if region.channels:
        constraints.append(f"C == {region.channels}")
    if region.joined:
        return meta(["qkv", "agg"], {"qkv": nchw, "agg": nchw}, ["N", "(2*C)//3", "H", "W"], constraints, acts=2,
                    workspace=True)
    return meta(["qkv_agg"], {"qkv_agg": nchw}, ["N", "C//3", "H", "W"], constraints, workspace=True)


def output_shape(region: Region, site: SiteShape) -> tuple[int, ...]:
    x = site.inputs[0]
    if isinstance(region, Conv1x1Region):
        return (x[0], site.inputs[1][0], x[2], x[3])
    if isinstance(region, DwConvRegion):
        ho, wo = region.out_hw(x[2], x[3])
        return (x[0], x[1], ho, wo)
    if isinstance(region, SERegion):
        return tuple(x)
    if isinstance(region, DwConvLNRegion):
        ho, wo = region.out_hw(x[2], x[3])
        return (x[0], x[1], ho, wo) if region.closed else (x[0], ho, wo, x[1])
    c_total = x[1] * (2 if region.joined else 1)
    return (x[0], c_total // 3, x[2], x[3])


def bytes_moved(region: Region, site: SiteShape) -> int:
    """The fewest bytes a kernel must move: each input read once, each output written once.

    Activations count at fp16, weights and biases at fp32, as the contract declares them.
    """
    def numel(s: tuple[int, ...]) -> int:
        n = 1
        for d in s:
            n *= d
        return n

    total = numel(output_shape(region, site)) * 2
    for i, shp in enumerate(site.inputs):
        total += numel(shp) * (4 if is_weight(region, i) else 2)
    return total
