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


def plugin_meta(region: Region, plugin_name: str, namespace: str = "yasp", version: str = "1",
                candidate: Candidate | None = None, deployment_target: str = "tensorrt") -> PluginMeta:
    """The contract of the kernel generated for ``region`` (perf is filled in after scoring)."""
    launcher, workspace = launcher_symbols(plugin_name)
    if isinstance(region, DwConvRegion):
        k, s, p = region.k, region.stride, region.pad
        n_in = 3 if region.has_bias else 2
        (x, w, *rest), y = _names(candidate, n_in, ["x", "weight", "bias"][:n_in], "y")
        inputs = [TensorContract(name=x, dtype="float16", format="kHWC8", role="activation",
                                 shape=["N", "C", "H", "W"]),
                  TensorContract(name=w, dtype="float32", format="kLINEAR", role="weight",
                                 shape=["C", "1", str(k), str(k)])]
        if region.has_bias:
            inputs.append(TensorContract(name=rest[0], dtype="float32", format="kLINEAR", role="bias", shape=["C"]))
        extents = {"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]",
                   "HO": f"(H + {2 * p} - {k})//{s} + 1", "WO": f"(W + {2 * p} - {k})//{s} + 1"}
        constraints = ["C % 8 == 0"] + ([f"C == {region.channels}"] if region.channels else [])
        outputs = [TensorContract(name=y, dtype="float16", format="kHWC8", shape=["N", "C", "HO", "WO"])]
        return PluginMeta(plugin_name=plugin_name, plugin_namespace=namespace, plugin_version=version,
                          deployment_target=deployment_target, inputs=inputs, outputs=outputs,
                          accumulation="float32", extents=extents, launcher=launcher, workspace=None,
                          constraints=constraints)
    if isinstance(region, Conv1x1Region):
        return _conv1x1_meta(region, plugin_name, namespace, version, candidate, deployment_target)
    if isinstance(region, SERegion):
        return _se_meta(region, plugin_name, namespace, version, candidate, deployment_target)
    if isinstance(region, DwConvLNRegion):
        return _dwln_meta(region, plugin_name, namespace, version, candidate, deployment_target)
    assert isinstance(region, LiteMLARegion)
    d = region.dim
    if region.joined:
        (qkv, agg), y = _names(candidate, 2, ["qkv", "agg"], "y")
        inputs = [TensorContract(name=n, dtype="float16", format="kHWC8", role="activation", shape=["N", "C", "H", "W"])
                  for n in (qkv, agg)]
        out_c = "(2*C)//3"
        constraints = [f"C % {3 * d} == 0"]
    else:
        (x,), y = _names(candidate, 1, ["qkv_agg"], "y")
        inputs = [TensorContract(name=x, dtype="float16", format="kHWC8", role="activation",
                                 shape=["N", "C", "H", "W"])]
        out_c = "C//3"
        constraints = [f"C % {3 * d} == 0", "C % 8 == 0"]
    if region.channels:
        constraints.append(f"C == {region.channels}")
    outputs = [TensorContract(name=y, dtype="float16", format="kHWC8", shape=["N", out_c, "H", "W"])]
    return PluginMeta(plugin_name=plugin_name, plugin_namespace=namespace, plugin_version=version,
                      deployment_target=deployment_target, inputs=inputs, outputs=outputs, accumulation="float32",
                      extents={"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]"},
                      launcher=launcher, workspace=workspace, constraints=constraints)


def _conv1x1_meta(region: Conv1x1Region, plugin_name: str, namespace: str, version: str,
                  candidate: Candidate | None, deployment_target: str) -> PluginMeta:
    launcher, _ = launcher_symbols(plugin_name)
    n_in = 3 if region.has_bias else 2
    (x, w, *rest), y = _names(candidate, n_in, ["x", "weight", "bias"][:n_in], "y")
    per_group = str(region.group_in) if region.grouped else "C"
    inputs = [TensorContract(name=x, dtype="float16", format="kHWC8", role="activation", shape=["N", "C", "H", "W"]),
              TensorContract(name=w, dtype="float32", format="kLINEAR", role="weight",
                             shape=["CO", per_group, "1", "1"])]
    if region.has_bias:
        inputs.append(TensorContract(name=rest[0], dtype="float32", format="kLINEAR", role="bias", shape=["CO"]))
    constraints = ["C % 8 == 0", "CO % 8 == 0"]
    if region.grouped:
        constraints += [f"C % {region.group_in} == 0", f"CO * {region.group_in} == C * {region.group_out}"]
    if region.cin:
        constraints += [f"C == {region.cin}", f"CO == {region.cout}"]
    outputs = [TensorContract(name=y, dtype="float16", format="kHWC8", shape=["N", "CO", "H", "W"])]
    return PluginMeta(plugin_name=plugin_name, plugin_namespace=namespace, plugin_version=version,
                      deployment_target=deployment_target, inputs=inputs, outputs=outputs, accumulation="float32",
                      extents={"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]", "CO": "in1[0]"},
                      launcher=launcher, workspace=None, constraints=constraints)


def _se_meta(region: SERegion, plugin_name: str, namespace: str, version: str, candidate: Candidate | None,
             deployment_target: str) -> PluginMeta:
    launcher, workspace = launcher_symbols(plugin_name)
    roles = (["x", "w1"] + (["b1"] if region.has_bias1 else []) + ["w2"] + (["b2"] if region.has_bias2 else []))
    names, y = _names(candidate, len(roles), roles, "y")
    shapes = {"x": ["N", "C", "H", "W"], "w1": ["CR", "C", "1", "1"], "b1": ["CR"], "w2": ["C", "CR", "1", "1"],
              "b2": ["C"]}
    inputs = [TensorContract(name=names[0], dtype="float16", format="kHWC8", role="activation", shape=shapes["x"])]
    inputs += [TensorContract(name=n, dtype="float32", format="kLINEAR", role="weight" if r[0] == "w" else "bias",
                              shape=shapes[r]) for n, r in zip(names[1:], roles[1:])]
    constraints = ["C % 8 == 0"]
    if region.channels:
        constraints += [f"C == {region.channels}", f"CR == {region.reduced}"]
    outputs = [TensorContract(name=y, dtype="float16", format="kHWC8", shape=["N", "C", "H", "W"])]
    return PluginMeta(plugin_name=plugin_name, plugin_namespace=namespace, plugin_version=version,
                      deployment_target=deployment_target, inputs=inputs, outputs=outputs, accumulation="float32",
                      extents={"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]", "CR": "in1[0]"},
                      launcher=launcher, workspace=workspace, constraints=constraints)


def _dwln_meta(region: DwConvLNRegion, plugin_name: str, namespace: str, version: str, candidate: Candidate | None,
               deployment_target: str) -> PluginMeta:
    """Inputs x (fp16 kHWC8), the conv's w0 (+ b0) and the norm's w1, b1 (fp32). The output is the same NHWC
    bytes in either form: logical NCHW in kHWC8 (closed, LayerNorm2d) or the NHWC tensor itself in kLINEAR."""
    launcher, _ = launcher_symbols(plugin_name)
    k, s, p = region.k, region.stride, region.pad
    roles = ["x", "w0"] + (["b0"] if region.has_bias else []) + ["w1", "b1"]
    names, y = _names(candidate, len(roles), roles, "y")
    shapes = {"x": ["N", "C", "H", "W"], "w0": ["C", "1", str(k), str(k)], "b0": ["C"], "w1": ["C"], "b1": ["C"]}
    inputs = [TensorContract(name=names[0], dtype="float16", format="kHWC8", role="activation", shape=shapes["x"])]
    inputs += [TensorContract(name=n, dtype="float32", format="kLINEAR", role="weight" if r[0] == "w" else "bias",
                              shape=shapes[r]) for n, r in zip(names[1:], roles[1:])]
    extents = {"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]",
               "HO": f"(H + {2 * p} - {k})//{s} + 1", "WO": f"(W + {2 * p} - {k})//{s} + 1"}
    constraints = ["C % 8 == 0"] + ([f"C == {region.channels}"] if region.channels else [])
    out = (TensorContract(name=y, dtype="float16", format="kHWC8", shape=["N", "C", "HO", "WO"]) if region.closed
           else TensorContract(name=y, dtype="float16", format="kLINEAR", shape=["N", "HO", "WO", "C"]))
    return PluginMeta(plugin_name=plugin_name, plugin_namespace=namespace, plugin_version=version,
                      deployment_target=deployment_target, inputs=inputs, outputs=[out], accumulation="float32",
                      extents=extents, launcher=launcher, workspace=None, constraints=constraints)


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
