"""Steps 1 and 6, ``ytk embedded compile``: check the plugins against the ONNX, build, profile, bundle.

Every custom-op node is matched to a supplied plugin on (namespace, name, version), arity and
dtypes, read from each .so's own self-description, before the engine backend is called: a
mismatch found here costs nothing, the same mismatch found by the engine costs a compile.
"""

from __future__ import annotations

import io
import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ytk_hookspecs.models import (NETWORK_OUTPUTS, ArtifactError, CompileRequest, CompileResult, PluginArtifact,
                                  ProfileRequest, ProfileResult, sha256_file)
from ytk_hookspecs.plugin_info import PluginInfoError, read_plugin_description
from ytk_hookspecs.models.base import problem

from ..bundle import (BENCHMARK, BUILD_LOG, ENGINE, LAYER_INFO, OUTPUTS, PROFILE, RAW_PROFILE, TAPS, TAPS_REFERENCE,
                      BenchmarkRecord, BundleManifest, BundlePlugin, EngineBundle, LayerProfile, write_bundle)
from ytk_hookspecs.nodes import CustomNode, PluginFile, custom_nodes, match_plugins, plugin_label
from ..errors import BackendError, UsageError, YtkError
from ..runtime import runtime
from ..thresholds import profile_disagreement
from .inputs import bundle_label, existing_file, output_file, parse_arch, parse_precision


@dataclass
class CompileOutcome:
    """What a compile produced: the bundle on disk and what went into it."""

    bundle: Path
    manifest: BundleManifest
    profile: LayerProfile
    benchmark: BenchmarkRecord
    engine_selection: str
    warnings: list[str] = field(default_factory=list)
    plugin_nodes: dict[str, list[str]] = field(default_factory=dict)  # plugin name -> node names

    def totals(self) -> dict[str, Any]:
        it = self.benchmark.iterations_ms
        return {
            "iterations": len(it), "median_ms": statistics.median(it), "mean_ms": statistics.fmean(it),
            "min_ms": min(it), "max_ms": max(it), "layers": len(self.profile.layers),
            "layers_sum_ms": self.profile.total_ms,
            "reformat_layers": sum(1 for lay in self.profile.layers if lay.name.startswith("Reformatting")),
            "plugin_layers": sum(len(v) for v in self.plugin_nodes.values()), "simulated": self.manifest.simulated,
        }


def _read_plugins(paths: list[Path]) -> list[PluginFile]:
    out = []
    for p in paths:
        existing_file(p, "--custom-plugin", "Build it with `ytk embedded build-plugin`.")
        try:
            out.append(PluginFile(Path(p), read_plugin_description(p)))
        except PluginInfoError as e:
            raise UsageError(f"--custom-plugin: {e}") from None
    return out


def _check_against_regions(onnx: Path, match: Any, precision: str) -> list[str]:
    """Each matched plugin's contract (carried in its self-description) against the carved region it
    replaces, from the ``candidates.json`` beside the ONNX: the check build-plugin makes with --candidates,
    made here too, so a plugin built without it (output shapes that do not evaluate, or evaluate to
    another shape than the region's) never reaches an engine."""
    from ytk_hookspecs.contract import check_meta_against_candidate
    from ytk_hookspecs.models import CandidatesFile

    cj = Path(onnx).parent / "candidates.json"
    if not cj.is_file():
        return []
    try:
        cands = {c.name: c for c in CandidatesFile.read(cj).candidates}
    except ArtifactError:
        return []  # a carve's record that does not read: the plugins are matched to the nodes as they are
    errors: list[str] = []
    for pf in {str(pf.path): pf for pf in match.matches.values()}.values():
        d, cand = pf.description, cands.get(pf.description.name)
        if cand is None or not d.meta_yaml:
            continue
        try:
            meta = d.plugin_meta()
        except (ValueError, TypeError) as e:
            errors.append(f"plugin {plugin_label(d)} ({pf.path}): its plugin_meta does not read ({problem(e)})")
            continue
        errors += [f"plugin {plugin_label(d)} ({pf.path}): {e}"
                   for e in check_meta_against_candidate(meta, cand, precision).errors]
    return errors


def _check_inputs(onnx: Path, npz: Path) -> None:
    """Every caller (the CLI, the autoloop) gets the same check: the ONNX reads, and the npz holds
    exactly its inputs, numeric, of their dtype and shape (a crafted npz is one clear error)."""
    from .npz_inputs import check_npz_inputs

    check_npz_inputs(onnx, npz)


def run_compile(arch: str, precision: str, onnx: Path, npz: Path, output: Path,
                custom_plugins: list[Path] | None = None, iterations: int = 10, warmup: int = 3,
                engine: str | None = None, allow_unused_plugin: bool = False,
                allow_unverified: bool = False, worker: str | None = None) -> CompileOutcome:
    """Check, build, profile and write the engine bundle atomically; returns what was written.

    A plugin that serves no custom-op node of ``onnx`` is an error (the engine would be the
    baseline under an optimised name) unless ``allow_unused_plugin``, when it is a warning. A real
    (not simulated) engine loads only plugins the admission gate admitted (:mod:`.admission`), or
    unverified ones with ``allow_unverified``. With ``worker`` (a Kronos worker's URL) the engine is
    the worker's, on its target (:mod:`ytk_core.kronos.remote_compile`); the bundle is the same."""
    if iterations < 1:
        raise UsageError(f"--iterations {iterations}: must be at least 1")
    if warmup < 0:
        raise UsageError(f"--warmup {warmup}: must be 0 or more")
    if worker is not None:
        from ..kronos.remote_compile import compile_on_worker

        return compile_on_worker(worker, arch, precision, onnx, npz, output, list(custom_plugins or []), iterations,
                                 warmup, engine, allow_unused_plugin, allow_unverified)
    rt = runtime()
    target = parse_arch(arch)
    prec = parse_precision(precision)
    sel = rt.select("engine", engine, target)
    onnx = existing_file(onnx, "--onnx", "Run `ytk embedded prepare` first.")
    npz = existing_file(npz, "--npz", "Run `ytk embedded prepare` first.")
    output = output_file(output, "-o/--output")
    label = bundle_label(output)
    _check_inputs(onnx, npz)
    plugins = _read_plugins(list(custom_plugins or []))
    nodes = custom_nodes(onnx)
    match = match_plugins(nodes, plugins, prec, sm=target.sm, simulated_engine=sel.backend.info.simulated)
    match.errors += _check_against_regions(onnx, match, prec)
    if match.errors:
        raise YtkError(f"{len(match.errors)} plugin problem(s) found before building the engine (nothing was "
                       "compiled):\n  - " + "\n  - ".join(match.errors))
    if match.unused and not allow_unused_plugin:
        raise UsageError(_unused_message(match.unused, nodes, onnx))
    warnings = list(match.warnings)
    admission: dict[str, str] = {}
    if plugins and not sel.backend.info.simulated:
        from .admission import gate_plugins

        with rt.context(None, "admission").progress("admission gate") as task:
            admission, more = gate_plugins([(pf.path, pf.description.name) for pf in plugins], onnx, prec,
                                           allow_unverified, progress=lambda m: task.update(description=m))
        warnings += more
    for w in warnings:
        rt.warn_once(w)
    plugin_nodes: dict[str, list[str]] = {}
    for node_name, pf in match.matches.items():
        plugin_nodes.setdefault(pf.description.name, []).append(node_name)
    artifacts = [PluginArtifact(path=pf.path.resolve(), sha256=sha256_file(pf.path), description=pf.description)
                 for pf in plugins]
    tapped = taps_of(onnx)
    taps, taps_warning = debug_outputs(onnx, tapped)
    if taps_warning:
        rt.warn_once(taps_warning)
        warnings.append(taps_warning)
    workdir = output.parent / f".{output.name}.build-{rt.run_id}"
    try:
        workdir.mkdir(parents=True)
    except OSError as e:
        raise UsageError(f"-o/--output {output}: cannot create files in {output.parent} ({e.strerror or e}); "
                         "choose another path") from None
    try:
        req = CompileRequest(onnx=onnx.resolve(), npz=npz.resolve(), arch=target.spec, precision=prec,  # type: ignore[arg-type]
                             plugins=artifacts, workdir=workdir.resolve(), debug_outputs=taps)
        cres = sel.backend.impl.compile(req, rt.context(sel, "compile", workdir))
        if not isinstance(cres, CompileResult):
            raise BackendError(f"engine backend {sel.name!r} returned {type(cres).__name__} from compile, "
                               "not a CompileResult")
        if cres.debug_outputs_note:
            rt.warn_once(cres.debug_outputs_note)
            warnings.append(cres.debug_outputs_note)
        pres = sel.backend.impl.profile(ProfileRequest(compile=cres, request=req, iterations=iterations,
                                                       warmup=warmup), rt.context(sel, "profile", workdir))
        if not isinstance(pres, ProfileResult):
            raise BackendError(f"engine backend {sel.name!r} returned {type(pres).__name__} from profile, "
                               "not a ProfileResult")
        _check_honest(sel.name, sel.backend.info.simulated, cres, pres, iterations)
        disagree = profile_disagreement(sum(lay.median_ms for lay in pres.layers),
                                        statistics.median(pres.iterations_ms) if pres.iterations_ms else None,
                                        [statistics.median(v) for v in pres.alternatives.values() if v])
        if disagree:
            rt.warn_once(disagree)
            warnings.append(disagree)
        from ..target import off_target_note

        off = off_target_note(pres.device, target.spec, pres.simulated)  # a CPU's timings under a GPU target's arch
        if off:
            rt.warn_once(off)
            warnings.append(off)
        _check_outputs(onnx, Path(pres.outputs), sel.name)
        manifest = BundleManifest(
            arch=target.spec, precision=prec, engine_backend=cres.backend, engine_version=cres.backend_version,
            device=pres.device, simulated=pres.simulated, onnx=onnx.name, onnx_sha256=sha256_file(onnx),
            npz_sha256=sha256_file(npz), label=label,
            taps_exposed_as=(cres.debug_outputs_as or NETWORK_OUTPUTS) if tapped is not None else None,
            taps_note=cres.debug_outputs_note,
            plugins=[BundlePlugin(name=a.description.name, namespace=a.description.namespace,
                                  version=a.description.version, sha256=a.sha256, file=a.path.name,
                                  engine_api=a.description.engine_api,
                                  admission=admission.get(a.description.name, "unverified")) for a in artifacts])
        profile = LayerProfile(device=pres.device, simulated=pres.simulated, iterations=len(pres.iterations_ms),
                               layers=pres.layers)
        bench = BenchmarkRecord(device=pres.device, simulated=pres.simulated, warmup=warmup,
                                iterations_ms=pres.iterations_ms, alternatives=pres.alternatives)
        members: dict[str, Path | bytes] = {ENGINE: Path(cres.engine),
                                            PROFILE: profile.model_dump_json(indent=1).encode(),
                                            BENCHMARK: bench.model_dump_json(indent=1).encode(),
                                            OUTPUTS: Path(pres.outputs)}
        for name, path in ((LAYER_INFO, cres.layer_info), (BUILD_LOG, cres.build_log), (RAW_PROFILE, pres.raw_profile)):
            if path is not None and Path(path).is_file():
                members[name] = Path(path)
        members.update(tap_members(tapped))
        with rt.context(None, "bundle").progress(f"writing {output}"):
            write_bundle(output, manifest, members)
        manifest = EngineBundle.open(output).manifest  # as written: with every member's sha256
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return CompileOutcome(bundle=output, manifest=manifest, profile=profile, benchmark=bench,
                          engine_selection=sel.describe(), warnings=warnings, plugin_nodes=plugin_nodes)


class Taps(NamedTuple):
    """The debug taps of a prepared ONNX: its ``taps.json`` (read and on disk) and the fp32 tap reference."""

    file: Any  # TapsFile
    path: Path
    reference: Path


def taps_of(onnx: Path) -> Taps | None:
    """The ``TapsFile`` of an ONNX prepared with --debug-taps (``taps.json`` naming this ONNX, beside it) and
    its fp32 tap reference; None for an ONNX without taps. An unreadable taps file, or one whose reference is
    missing, is a usage error before anything is built or sent."""
    from .taps import TAPS_FILE, TapsFile

    tf_path = Path(onnx).parent / TAPS_FILE
    if not tf_path.is_file():
        return None
    try:
        tf = TapsFile.read(tf_path)
    except ArtifactError as e:
        raise UsageError(f"{e}; prepare again with --debug-taps, or remove it to compile without taps") from None
    if tf.onnx != Path(onnx).name:
        return None
    ref = Path(onnx).parent / tf.reference
    if not ref.is_file():
        raise UsageError(f"{tf_path} names its reference {ref}, which is missing; prepare again with --debug-taps")
    return Taps(tf, tf_path, ref)


def tap_members(taps: Taps | None) -> dict[str, Path | bytes]:
    """The taps (from :func:`taps_of`) as bundle members; none for an ONNX without taps."""
    return {} if taps is None else {TAPS: taps.path.read_bytes(), TAPS_REFERENCE: taps.reference}


def debug_outputs(onnx: Path, taps: Taps | None) -> tuple[list[str], str]:
    """The graph outputs of ``onnx`` that are debug taps (``taps`` from :func:`taps_of`), for
    ``CompileRequest.debug_outputs``, and a warning when there are taps the engine cannot be told of (a
    taps.json of schema 1)."""
    if taps is None:
        return [], ""
    tf = taps.file
    if tf.model_outputs is None:
        return [], (f"{taps.path} was written by an older ytk and does not say which outputs "
                    "are the model's own: its taps are compiled as plain outputs (on TensorRT 10 too); prepare again "
                    "with --debug-taps to have them exposed as debug tensors")
    import onnx as onnx_lib

    graph_outputs = [o.name for o in onnx_lib.load(str(onnx), load_external_data=False).graph.output]
    return tf.debug_outputs(graph_outputs), ""


def _unused_message(unused: list[PluginFile], nodes: list[CustomNode], onnx: Path) -> str:
    """One line: the plugins no node uses, and the custom-op nodes this ONNX does have."""
    plugins = ", ".join(f"{plugin_label(p.description)} ({p.path})" for p in unused)
    if nodes:
        by_label: dict[str, list[str]] = {}
        for n in nodes:
            by_label.setdefault(n.label, []).append(n.name)
        have = "; ".join(f"{label}: {', '.join(names)}" for label, names in by_label.items())
        has = f"its custom-op node(s) are {have}"
    else:
        has = "it has no custom-op node at all (is it the baseline, not the carved ONNX?)"
    return (f"--custom-plugin {plugins} matches no custom-op node of {onnx}, so the engine would not use it; "
            f"{has}. Pass the ONNX carved for it, or --allow-unused-plugin to compile anyway")


def _check_honest(name: str, declared_simulated: bool, cres: CompileResult, pres: ProfileResult,
                  iterations: int) -> None:
    """A backend that registered as simulated may never hand back figures that claim to be real."""
    if declared_simulated and not (cres.simulated and pres.simulated):
        raise BackendError(f"engine backend {name!r} registered as simulated but returned results marked real; "
                           "refusing to write a bundle that would pass simulated figures off as measurements")
    if not pres.layers:
        raise BackendError(f"engine backend {name!r} returned no per-layer profile")
    if len(pres.iterations_ms) != iterations or any(not (t > 0) for t in pres.iterations_ms):
        raise BackendError(f"engine backend {name!r} returned {len(pres.iterations_ms)} benchmark iterations "
                           f"(asked for {iterations}) or a non-positive latency")


def _check_outputs(onnx: Path, outputs: Path, name: str) -> None:
    import onnx as onnx_lib

    want = [o.name for o in onnx_lib.load(str(onnx), load_external_data=False).graph.output]
    try:
        with np.load(io.BytesIO(outputs.read_bytes()), allow_pickle=False) as z:
            have = set(z.files)
    except Exception as e:
        raise BackendError(f"engine backend {name!r} wrote unreadable outputs ({outputs}): {e}") from None
    missing = [w for w in want if w not in have]
    if missing:
        raise BackendError(f"engine backend {name!r} returned no value for output(s) {', '.join(missing)}")
