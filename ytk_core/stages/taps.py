"""Debug taps: name the plugged region where an engine's numerics drift from torch.

``ytk embedded prepare ... --plugin ... --debug-taps`` exposes every plugin boundary (each custom-op
node's activation inputs and its outputs) as extra ONNX graph outputs and keeps the fp32 reference
at those tensors (the carve captured them from the traced model). ``compile`` ships both inside the
engine bundle, so ``verify`` scores every tap of a tapped bundle whatever reference it is given, and
walks the plugins in graph order: the first one whose output is out of tolerance while every input
it reads is still within it is the region that drifted.

The core tells the engine which graph outputs are taps (``CompileRequest.debug_outputs``, from
``taps.json``): mock and torch keep them as outputs; TensorRT 8.6 as network outputs; TensorRT 10 builds
the ONNX without them and marks each as a debug tensor (no extra binding), reading it back through a
debug listener (``backends/tensorrt``, docs/tensorrt.md). Either way the engine returns them in its
outputs under their names, and the bundle's manifest says how they were exposed.

A tapped tensor must be materialised, as an output or as a debug tensor (``markDebug`` keeps it
unfused), so a tapped engine's latency is not the plugged engine's: compile the same carve without
``--debug-taps`` and verify both bundles together; verify puts the two latencies side by side.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ytk_hookspecs.models import PLUGIN_DOMAIN, CandidatesFile, Versioned
from ytk_hookspecs.models.base import write_bytes_atomic

from ..errors import UsageError
from .numerics import OutputNumerics, Tolerance, compare

TAPS_FILE = "taps.json"
TAPS_REFERENCE = "model.taps.npz"

_ONNX_DTYPES = {"float32": 1, "float16": 10, "int64": 7, "int32": 6, "bool": 9, "float64": 11, "int8": 3}


class Tap(BaseModel):
    """One tensor at a plugin boundary."""

    model_config = ConfigDict(extra="forbid")

    tensor: str = Field(description="the ONNX tensor, now also a graph output")
    plugin: str = Field(description="the custom-op node's op type (the plugin's name)")
    onnx_node: str
    node_order: int = Field(description="the node's position among the custom-op nodes, in graph order")
    io: Literal["input", "output"]
    index: int = Field(description="which input or output of the node")
    graph_input: bool = Field(False, description="the tensor is a model input: it cannot have drifted")


class TapsFile(Versioned):
    """``taps.json`` beside a tapped ONNX: the taps in graph order and where their fp32 reference is.

    Schema 2 added ``model_outputs``, which tells the taps the ONNX has as outputs apart from the model's own
    (:meth:`debug_outputs`); a schema-1 file still reads, and its taps stay plain outputs."""

    SCHEMA_VERSION: ClassVar[int] = 2

    onnx: str
    reference: str = TAPS_REFERENCE
    taps: list[Tap]
    model_reference_sha256: str = Field("", description="sha256 of the model.reference.npz of the same prepare: "
                                                        "verify checks the REF it is given is that one")
    model_outputs: list[str] | None = Field(None, description="the carved ONNX's outputs before the taps were added "
                                                              "(the model's own); None in a schema-1 file")

    def debug_outputs(self, graph_outputs: list[str]) -> list[str]:
        """The graph outputs that are there only as taps, in graph-output order (what an engine is told in
        ``CompileRequest.debug_outputs``); none for a schema-1 file, which does not say which were the model's."""
        if self.model_outputs is None:
            return []
        tapped = {t.tensor for t in self.taps if not t.graph_input}
        own = set(self.model_outputs)
        return [o for o in graph_outputs if o in tapped and o not in own]


class TapLatency(BaseModel):
    """A tapped engine's latency beside the untapped engine of the same plugins, both among the bundles verified."""

    model_config = ConfigDict(extra="forbid")

    untapped: str = Field(description="the untapped bundle's implementation (its row in the latency table)")
    untapped_p50_ms: float
    tapped_p50_ms: float
    ratio: float = Field(description="tapped p50 / untapped p50: what exposing the taps costs")


class TapVerdict(BaseModel):
    """What the taps of one bundle say."""

    model_config = ConfigDict(extra="forbid")

    implementation: str
    plugin: str | None = Field(None, description="the first region in graph order that drifted, if one did")
    onnx_node: str | None = None
    reason: str
    failing: OutputNumerics | None = Field(None, description="the drifted output tap's figures")
    good_input: str | None = Field(None, description="the tensor at the region's input that was still good")
    numerics: list[OutputNumerics] = Field(default_factory=list, description="every tap, in graph order")
    boundaries: list[str] = Field(default_factory=list, description="per tap: which plugin's input or output")
    problem: str = Field("", description="why these taps cannot be trusted against the reference given")
    exposed_as: str | None = Field(None, description="how the engine exposed the taps: network outputs (extra "
                                                     "bindings) or TensorRT debug tensors; None for a bundle that "
                                                     "does not say (compiled before ytk recorded it: outputs)")
    exposure_note: str = Field("", description="why the taps were exposed that way, when not the engine's first "
                                               "choice")
    untapped: TapLatency | None = Field(None, description="the untapped engine of the same plugins, when it was "
                                                          "verified too")
    fusion_note: str = Field("", description="that exposing the taps can change what the engine fuses, so the tapped "
                                             "engine's latency is not the untapped one's")

    def set_fusion_note(self) -> None:
        from ytk_hookspecs.models import DEBUG_TENSORS

        how = ("as a debug tensor (no extra binding, but markDebug keeps the tensor unfused) or as an output"
               if self.exposed_as == DEBUG_TENSORS else "as an extra output")
        untapped = ("" if self.untapped else
                    " (compile the same carve without --debug-taps and verify both bundles together for that)")
        self.fusion_note = (f"a tapped engine materialises every plugin boundary {how}, which can change what it "
                            f"fuses; its latency is not the untapped engine's{untapped}")


def _figures(n: OutputNumerics) -> str:
    if n.max_rel_err is None:
        return n.detail or "no value"
    return f"max rel err {n.max_rel_err:.3g}, cosine {n.cosine:.6f}" if n.cosine is not None else n.detail


def add_taps(onnx_path: Path, prepare_dir: Path, candidates: Path, model_reference: Path | None = None) -> TapsFile:
    """Make every plugin boundary of the carved ``onnx_path`` a graph output (rewritten atomically) and
    write ``taps.json`` and ``model.taps.npz`` (the fp32 reference at each tap) into ``prepare_dir``."""
    import onnx
    from onnx import helper

    model = onnx.load(str(onnx_path))
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    graph_inputs = {i.name for i in graph.input}
    outputs = {o.name for o in graph.output}
    cands = CandidatesFile.read(candidates)
    site_of = {s.onnx_node: (c, s) for c in cands.candidates for s in c.sites}
    taps: list[Tap] = []
    values: dict[str, np.ndarray] = {}
    infos: dict[str, tuple[int, list[int]]] = {}
    customs = [n for n in graph.node if n.domain == PLUGIN_DOMAIN]
    if not customs:
        raise UsageError("--debug-taps: the carved ONNX has no custom-op node (pass --plugin selectors to carve)")
    for order, node in enumerate(customs):
        if node.name not in site_of:
            raise UsageError(f"--debug-taps: custom-op node {node.name} has no site in {candidates}")
        cand, site = site_of[node.name]
        with np.load(prepare_dir / cand.files.io_npz, allow_pickle=False) as z:  # type: ignore[operator]
            for io, names, infos_of, key in (("input", node.input, site.inputs, "in"),
                                             ("output", node.output, site.outputs, "out")):
                for i, (name, info) in enumerate(zip(names, infos_of)):
                    if io == "input" and (name in inits or cand.input_roles[i] != "activation"):
                        continue
                    # one plugin's output may be the next one's input: one graph output and one reference,
                    # but a tap for each side, so the next plugin knows its input was tapped
                    if name not in values:
                        values[name] = np.asarray(z[f"site{site.index}.{key}{i}"])
                        infos[name] = (_ONNX_DTYPES.get(info.dtype, 1), list(info.shape))
                    taps.append(Tap(tensor=name, plugin=node.op_type, onnx_node=node.name, node_order=order, io=io,
                                    index=i, graph_input=name in graph_inputs))
    model_outputs = [o.name for o in graph.output]
    for t in taps:
        if t.tensor not in outputs and not t.graph_input:
            elem, shape = infos[t.tensor]
            graph.output.append(helper.make_tensor_value_info(t.tensor, elem, shape))
            outputs.add(t.tensor)
    write_bytes_atomic(Path(onnx_path), model.SerializeToString())
    buf = Path(prepare_dir) / TAPS_REFERENCE
    tmp = buf.with_name(f".{buf.name}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **values)
    tmp.replace(buf)
    from ytk_hookspecs.models import sha256_file

    tf = TapsFile(onnx=Path(onnx_path).name, taps=taps, model_outputs=model_outputs,
                  model_reference_sha256=sha256_file(model_reference) if model_reference else "")
    tf.write(Path(prepare_dir) / TAPS_FILE)
    return tf


def _label(t: Tap, taps: list[Tap]) -> str:
    """``Att input 0``; where the plugin has several sites, which one in graph order: ``Att #2 input 0``."""
    nodes = sorted({(x.node_order, x.onnx_node) for x in taps if x.plugin == t.plugin})
    site = f" #{[n for _, n in nodes].index(t.onnx_node) + 1}" if len(nodes) > 1 else ""
    return f"{t.plugin}{site} {t.io} {t.index}"


def judge(implementation: str, taps: TapsFile, ref: dict[str, np.ndarray], got: dict[str, np.ndarray],
          tol: Tolerance) -> TapVerdict:
    """Score every tap and name the first region in graph order whose outputs drift while its inputs hold."""
    # a model input is what the engine was given: not an output, and it cannot have drifted
    scored = {t.tensor: compare(implementation, t.tensor, got.get(t.tensor), ref[t.tensor], tol)
              for t in taps.taps if t.tensor in ref and not t.graph_input}
    # a tensor between two plugins is one boundary (listed under the plugin that writes it)
    first = {}
    for t in taps.taps:
        if t.tensor in scored:
            first.setdefault(t.tensor, t)
    ordered = [scored[name] for name in first]
    labels = [_label(t, taps.taps) for t in first.values()]
    by_node: dict[str, list[Tap]] = {}
    for t in taps.taps:
        by_node.setdefault(t.onnx_node, []).append(t)
    first_bad_input: tuple[Tap, OutputNumerics] | None = None
    for node, node_taps in sorted(by_node.items(), key=lambda kv: kv[1][0].node_order):
        ins = [t for t in node_taps if t.io == "input"]
        outs = [t for t in node_taps if t.io == "output"]
        bad_in = [t for t in ins if not t.graph_input and t.tensor in scored and not scored[t.tensor].passed]
        bad_out = [t for t in outs if t.tensor in scored and not scored[t.tensor].passed]
        if bad_in and first_bad_input is None:
            first_bad_input = (bad_in[0], scored[bad_in[0].tensor])
        if bad_out and not bad_in:
            fig = scored[bad_out[0].tensor]
            good = next((t.tensor for t in ins), None)
            return TapVerdict(implementation=implementation, plugin=node_taps[0].plugin, onnx_node=node,
                              failing=fig, good_input=good, numerics=ordered, boundaries=labels,
                              reason=(f"{node_taps[0].plugin} (node {node}) drifts: its output {fig.output} has "
                                      f"{_figures(fig)} (tolerance {tol.describe()}) while its input "
                                      f"{good or '(none tapped)'} is within it"))
    if first_bad_input is not None:
        tap, fig = first_bad_input
        return TapVerdict(implementation=implementation, numerics=ordered, failing=fig, boundaries=labels,
                          reason=(f"no plugin is to blame: the drift is already in {tap.tensor}, the input of "
                                  f"{tap.plugin} ({_figures(fig)}), which the engine's own layers compute"))
    return TapVerdict(implementation=implementation, numerics=ordered, boundaries=labels,
                      reason=f"every tap of {len(ordered)} is within tolerance")
