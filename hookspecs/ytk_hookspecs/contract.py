"""The kernel contract, executable: the checks every kernel source must pass, importable by any backend.

A generator runs these on what it emits before it reports ``done`` (the core runs them again on
everything it is handed):

* :func:`check_source` -- a ``module_source.py`` on its own: its ``plugin_meta`` and launcher;
* :func:`check_meta_against_candidate` -- that metadata against the carved region it is for
  (arity, roles, dtypes, shapes at every site, layouts, one measured time per site);
* :func:`check_report_against_candidate` -- the job's ``report.json`` against that region: every
  per-site list has one entry per site (the core sums them over the sites);
* :func:`report_path` (in :mod:`ytk_hookspecs.kernel_source`) -- where the job's ``report.json`` goes.

Layout rule: an fp16 engine keeps 4-D activations channels-last; ``kHWC8`` is that layout with the
channels padded to a multiple of 8, so a kernel that declares it can only take tensors whose channel
count is a multiple of 8 (:func:`layout_error`). Formats and the dtypes TensorRT accepts for each are
in :data:`FORMAT_DTYPES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from . import shape_expr
from .kernel_source import KernelSource
from .models import Candidate, KernelReport, PluginMeta

__all__ = ["ENGINE_DTYPE", "ERROR_9", "FORMAT_DTYPES", "SIMULATED_MARK", "ContractReport", "Finding", "check_dtypes",
           "check_meta", "check_meta_against_candidate", "check_report_against_candidate", "check_source",
           "layout_error", "simulated_kernel"]

#: The activation dtype an engine of each precision feeds a plugin.
ENGINE_DTYPE = {"fp16": "float16", "fp32": "float32"}

#: Which dtypes TensorRT accepts for each tensor format (TensorRT 8.6 / 10 format documentation).
FORMAT_DTYPES = {
    "kLINEAR": {"float16", "float32", "int32", "int8"},
    "kHWC8": {"float16"},
    "kCHW32": {"float16", "int8"},
    "kHWC": {"float16", "float32"},
}

ERROR_9 = ("TensorRT reports this as Error 9, \"could not find any supported formats consistent with input/output "
           "data types\": a format error for what is really an arity problem. Lifted weights are real inputs of the "
           "node, so the kernel must take them as inputs instead of baking them in.")


@dataclass
class Finding:
    level: Literal["error", "warning"]
    message: str


@dataclass
class ContractReport:
    """The findings of one check, with the subject it was about (a file or a node)."""

    subject: str
    findings: list[Finding] = field(default_factory=list)

    def error(self, msg: str) -> None:
        self.findings.append(Finding("error", msg))

    def warn(self, msg: str) -> None:
        self.findings.append(Finding("warning", msg))

    def extend(self, other: "ContractReport") -> None:
        self.findings.extend(other.findings)

    @property
    def errors(self) -> list[str]:
        return [f.message for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[str]:
        return [f.message for f in self.findings if f.level == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, object]:
        return {"subject": self.subject, "ok": self.ok, "errors": self.errors, "warnings": self.warnings}


# -- a kernel source on its own ------------------------------------------------------------------

#: How a simulated generator marks its kernels: a contract constraint, or where the time was measured.
SIMULATED_MARK = "SIMULATED"


def simulated_kernel(meta: PluginMeta) -> str | None:
    """Why a kernel is a simulator's placeholder (no real kernel inside), from its own contract; None for a
    real one. Only a simulated builder and engine may take such a kernel."""
    for c in meta.constraints:
        if c.startswith(SIMULATED_MARK):
            return c
    if meta.perf is not None and meta.perf.measured_on.startswith(SIMULATED_MARK):
        return f"its figures were {meta.perf.measured_on}"
    return None


def check_meta(meta: PluginMeta, subject: str = "") -> ContractReport:
    """Intrinsic checks of a plugin_meta: expressions parse, extents resolve, formats fit dtypes."""
    rep = ContractReport(subject or meta.plugin_name)
    if meta.deployment_target != "tensorrt":
        rep.error(f"plugin {meta.plugin_name}: deployment_target is {meta.deployment_target!r}; only a kernel "
                  "generated with --config deployment_target=tensorrt can be built into an engine plugin")
    names = [t.name for t in (*meta.inputs, *meta.outputs)]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        rep.error(f"plugin {meta.plugin_name}: tensor names repeat: {', '.join(dup)}")
    known: set[str] = set()
    for ext, expr in meta.extents.items():
        _check_expr(rep, meta, f"extent {ext}", expr, len(meta.inputs), known)
        known.add(ext)
    for kind, tensors in (("input", meta.inputs), ("output", meta.outputs)):
        for i, t in enumerate(tensors):
            if t.format not in FORMAT_DTYPES or t.dtype not in FORMAT_DTYPES[t.format]:
                rep.error(f"plugin {meta.plugin_name}: {kind} {i} ({t.name}) is {t.dtype} in {t.format}, a "
                          f"combination TensorRT does not support ({t.format} takes "
                          f"{', '.join(sorted(FORMAT_DTYPES.get(t.format, set())))})")
            if t.format == "kHWC8" and len(t.shape) != 4:
                rep.error(f"plugin {meta.plugin_name}: {kind} {i} ({t.name}) is kHWC8 but has rank {len(t.shape)}; "
                          "kHWC8 is a 4-D (NCHW logical) layout")
            for ax, expr in enumerate(t.shape):
                _check_expr(rep, meta, f"{kind} {i} ({t.name}) dim {ax}", expr, len(meta.inputs), known)
    if meta.accumulation == "float16":
        rep.warn(f"plugin {meta.plugin_name}: accumulates in float16; long reductions lose precision "
                 "(fp32 accumulation is the norm for fp16 kernels)")
    return rep


def _check_expr(rep: ContractReport, meta: PluginMeta, what: str, expr: str, n_inputs: int,
                known: set[str]) -> None:
    import ast

    try:
        tree = shape_expr.parse(expr)
    except shape_expr.ShapeExprError as e:
        rep.error(f"plugin {meta.plugin_name}: {what}: {e}")
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            ref = node.value.id
            if not ref.startswith("in") or not ref[2:].isdigit() or int(ref[2:]) >= n_inputs:
                rep.error(f"plugin {meta.plugin_name}: {what}: {expr!r} refers to {ref}, but the plugin has "
                          f"{n_inputs} input(s) (in0..in{n_inputs - 1})")
        elif isinstance(node, ast.Name) and node.id not in ("cdiv", "max", "min") \
                and not node.id.startswith(("in", "out")) and node.id not in known:
            rep.error(f"plugin {meta.plugin_name}: {what}: {expr!r} uses {node.id!r}, which is no extent declared "
                      "before it")


def check_source(src: KernelSource, subject: str = "") -> ContractReport:
    """Intrinsic checks of a kernel source bundle, including that its CUDA defines the launcher."""
    rep = check_meta(src.meta, subject)
    for sym, what in ((src.meta.launcher, "launcher"), (src.meta.workspace, "workspace function")):
        # A declaration in the header is not enough: the definition belongs to the CUDA source.
        if sym and f"{sym}(" not in src.source.replace(f"{sym} (", f"{sym}("):
            rep.error(f"plugin {src.meta.plugin_name}: the {what} {sym!r} declared in plugin_meta is not defined in "
                      "the CUDA source; the plugin could not be linked")
    return rep


# -- a kernel against its region ------------------------------------------------------------------

def check_meta_against_candidate(meta: PluginMeta, cand: Candidate, precision: str) -> ContractReport:
    """Arity, roles, dtypes, layouts and output shapes of a kernel against its carved region."""
    rep = ContractReport(f"{meta.plugin_name} vs region {cand.name}")
    n_node = len(cand.input_roles)
    n_act = cand.input_roles.count("activation")
    if len(meta.inputs) != n_node:
        rep.error(f"input arity: region {cand.name}'s ONNX node has {n_node} inputs ({n_act} activation(s) + "
                  f"{n_node - n_act} lifted weight(s)) but kernel {meta.plugin_name} declares {len(meta.inputs)}. "
                  + ERROR_9)
        return rep
    n_out = len(cand.sites[0].outputs) if cand.sites else len(meta.outputs)
    if len(meta.outputs) != n_out:
        rep.error(f"output arity: region {cand.name} has {n_out} output(s) but kernel {meta.plugin_name} declares "
                  f"{len(meta.outputs)}")
        return rep
    for i, (t, role) in enumerate(zip(meta.inputs, cand.input_roles)):
        if t.role != role:
            rep.error(f"input {i} ({t.name}): the region's node passes a {role} there but the kernel declares a "
                      f"{t.role} (inputs are the activations in first-use order, then each conv's weight and bias)")
    check_dtypes(rep, meta.plugin_name, [t.dtype for t in meta.inputs], cand.input_roles,
                  [t.dtype for t in meta.outputs], precision)
    _check_layouts(rep, meta, cand.input_roles, precision)
    if meta.perf is not None:
        _check_per_site(rep, "plugin_meta perf.time_ms_per_site", meta.perf.time_ms_per_site, cand)
    for site in cand.sites:
        shapes = [list(x.shape) for x in site.inputs]
        if any(not isinstance(d, int) for s in shapes for d in s):
            continue
        try:
            ext = shape_expr.evaluate_extents(meta.extents, shapes)
            for i, (t, want) in enumerate(zip(meta.outputs, site.outputs)):
                got = [shape_expr.evaluate(e, shapes, ext) for e in t.shape]
                if got != list(want.shape):
                    rep.error(f"output {i} ({t.name}) at site {site.index} ({site.module_path}): the kernel's shape "
                              f"expressions give {got} but the region produces {list(want.shape)}")
            for i, (t, have) in enumerate(zip(meta.inputs, site.inputs)):
                got = [shape_expr.evaluate(e, shapes, ext) for e in t.shape]
                if len(got) != len(have.shape) or got != list(have.shape):
                    rep.error(f"input {i} ({t.name}) at site {site.index} ({site.module_path}): the kernel expects "
                              f"shape {got} but the node feeds {list(have.shape)}")
        except (shape_expr.ShapeExprError, ZeroDivisionError) as e:
            rep.error(f"site {site.index} ({site.module_path}): the kernel's shape expressions do not evaluate: {e}")
    return rep


def check_report_against_candidate(report: KernelReport, cand: Candidate) -> ContractReport:
    """A job's report against its region: each per-site list (the winner's and every other variant's times,
    spreads and floors, the torch and copy times) holds one entry per site, in site order. A list per
    distinct shape instead would be summed as if it were the sites' and undercount a region shared by sites
    of one shape."""
    rep = ContractReport(f"report of {report.plugin_name} vs region {cand.name}")
    for what in ("torch_ms_per_site", "floor_ms_per_site", "copy_ms_per_site"):
        _check_per_site(rep, what, getattr(report, what), cand)
    for c in report.candidates:
        for what in ("time_ms_per_site", "spread_ms_per_site", "floor_ms_per_site"):
            _check_per_site(rep, f"variant {c.variant} {what}", getattr(c, what), cand)
    return rep


def _check_per_site(rep: ContractReport, what: str, values: Sequence[float], cand: Candidate) -> None:
    if values and cand.sites and len(values) != len(cand.sites):
        rep.error(f"{what} has {len(values)} entries but region {cand.name} has {len(cand.sites)} site(s): "
                  "one per site, in site order (a shape shared by several sites repeats its time)")


def check_dtypes(rep: ContractReport, plugin: str, in_dtypes: Sequence[str], roles: Sequence[str],
                  out_dtypes: Sequence[str], precision: str) -> None:
    """Add to ``rep`` every input and output dtype the engine at ``precision`` cannot feed or take (a weight
    may be fp32)."""
    want = ENGINE_DTYPE[precision]
    for i, (dt, role) in enumerate(zip(in_dtypes, roles)):
        if role == "activation" and dt != want:
            rep.error(f"precision: input {i} of {plugin} is {dt} but a {precision} engine feeds {want} activations"
                      + (" (an fp32-only kernel cannot go into an fp16 engine)" if precision == "fp16" else ""))
        elif role != "activation" and dt not in ("float16", "float32"):
            rep.error(f"precision: input {i} of {plugin} is a lifted {role} declared {dt}; weights are float tensors")
    for i, dt in enumerate(out_dtypes):
        if dt != want:
            rep.error(f"precision: output {i} of {plugin} is {dt} but a {precision} engine expects {want}")


def _check_layouts(rep: ContractReport, meta: PluginMeta, roles: Sequence[str], precision: str) -> None:
    if precision != "fp16":
        return
    linear = [f"input {i} ({t.name})" for i, (t, r) in enumerate(zip(meta.inputs, roles))
              if r == "activation" and len(t.shape) == 4 and t.format == "kLINEAR"]
    linear += [f"output {i} ({t.name})" for i, t in enumerate(meta.outputs)
               if len(t.shape) == 4 and t.format == "kLINEAR"]
    if linear:
        rep.warn(f"layout: {meta.plugin_name} takes {', '.join(linear)} as NCHW (kLINEAR); an fp16 engine keeps "
                 "4-D activations channels-last (kHWC8), so every such edge gets a reformat that can cost more "
                 "than the kernel saves")


def layout_error(fmt: str, shape: Sequence[int | str]) -> str | None:
    """Why a tensor of ``shape`` cannot be passed in format ``fmt`` (None when it can): ``kHWC8`` needs a
    4-D tensor whose channel count (dim 1 of the logical NCHW shape) is a multiple of 8."""
    if fmt == "kHWC8":
        if len(shape) != 4:
            return f"kHWC8 needs a 4-D tensor, not {len(shape)}-D"
        c = shape[1]
        if isinstance(c, int) and c % 8:
            return f"kHWC8 needs channels divisible by 8, got {c}"
    return None
