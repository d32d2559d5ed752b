"""Step 7, ``ytk embedded verify``: line several engine bundles up, and score their numerics.

Engine-agnostic: everything comes out of the bundles (benchmark iterations, per-layer profile,
outputs for model.npz, whether the figures are simulated), so a TensorRT bundle, a torch-engine
bundle and a simulated one sit in the same table, each labelled for what it is.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ytk_hookspecs.models import ArtifactError, LayerTime, Versioned, sha256_file

from ..bundle import TAPS, BundleManifest, EngineBundle
from ..errors import UsageError
from ..runtime import runtime
from .host_timing import HostTiming, find_prepare_manifest, time_torch_host
from .inputs import existing_file
from .numerics import OutputNumerics, compare, tolerance_for, unexpected
from .taps import TapLatency, TapVerdict, judge

if TYPE_CHECKING:
    from ..artifacts import PrepareManifest


class LatencyRow(BaseModel):
    """One row of the benchmark table (all times in ms)."""

    model_config = ConfigDict(extra="forbid")

    implementation: str
    label: str
    kind: str = Field(description="bundle, bundle-alternative (the same engine run another way) or torch-host")
    bundle: str | None = None
    engine: str = ""
    precision: str = ""
    plugins: int = Field(0, description="plugins the bundle's engine loads")
    device: str
    simulated: bool
    iterations: int
    min_ms: float
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


class Speedup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    baseline: str
    implementation: str
    baseline_p50_ms: float
    p50_ms: float
    speedup: float
    simulated: bool
    other_device: str = Field("", description="the baseline's device, when it is not the implementation's: "
                                              "the ratio then compares two machines, not two engines")


class BundleLayers(BaseModel):
    model_config = ConfigDict(extra="forbid")

    implementation: str
    total_ms: float
    simulated: bool
    layers: list[LayerTime]


class VerifyReport(Versioned):
    """What verify measured and scored; ``--json`` prints it, autoloop keeps it.

    Schema 2 added ``exposed_as``, ``exposure_note`` and ``untapped`` to each of ``taps`` (reports of schema 1 still
    read, with none of them said); schema 3 each tap verdict's ``fusion_note``; schema 4 ``output_labels``; schema
    5 each speedup's ``other_device``."""

    SCHEMA_VERSION: ClassVar[int] = 5

    reference: str
    rows: list[LatencyRow]
    speedups: list[Speedup]
    numerics: list[OutputNumerics]
    layers: list[BundleLayers]
    passed: bool
    host_note: str = ""
    #: one line per reason the outputs could not all be compared (empty reference, an output only
    #: one side has, a shape or dtype that differs); any of them fails verify
    problems: list[str] = Field(default_factory=list)
    #: per bundle compiled with debug taps: every tap scored, and the region that drifted first; a region
    #: named there (its output out of tolerance while its input holds) fails verify even when the model's
    #: outputs hold (a later layer, e.g. a pooling, can mask a wrong kernel)
    taps: list[TapVerdict] = Field(default_factory=list)
    #: ONNX output -> what the model calls it (a returned dict's key), from the prepare.json beside the reference
    output_labels: dict[str, str] = Field(default_factory=dict)

    def output_text(self, name: str) -> str:
        """``name`` as a user knows it: ``['seg'] (conv2d_1)`` where the model named it, else ``name``."""
        label = self.output_labels.get(name)
        return f"{label} ({name})" if label else name

    def failures(self) -> list[OutputNumerics]:
        return [n for n in self.numerics if not n.passed]

    def failure_lines(self) -> list[str]:
        """Every reason verify failed, one line each: ``problems``, then the outputs scored out of
        tolerance (or non-finite)."""
        scored = [n for n in self.failures() if n.problem in ("", "non-finite")]
        lines = list(self.problems)
        if scored:
            lines.append(f"numerics failed for {len(scored)} output(s): " + "; ".join(
                f"{n.implementation} {self.output_text(n.output)} ({n.detail}; tolerance {n.tolerance.describe()})"
                for n in scored))
        drifted = [v for v in self.taps if v.plugin]
        if not lines and drifted:  # the model's outputs hold, but a plugged region's own output does not
            lines.append("a plugged region is out of tolerance at its own boundary (masked further on)")
        if not lines and not self.passed:
            lines.append("verify failed")
        if lines:
            lines += [f"debug taps: {v.implementation}: {v.reason}" for v in self.taps]
            plugged = {r.implementation for r in self.rows if r.plugins}
            if not self.taps and any(n.problem in ("", "non-finite") and not n.passed and n.implementation in plugged
                                     for n in self.numerics):  # a base engine has no region to blame
                lines.append("to find the region that drifts: prepare the carve again with --debug-taps, compile "
                             "it, and verify that bundle (docs/byom.md, \"When numerics drift\")")
        return lines


def latency_row(implementation: str, label: str, kind: str, device: str, simulated: bool, times: list[float],
                **extra: object) -> LatencyRow:
    a = np.asarray(times, dtype=np.float64)
    return LatencyRow(implementation=implementation, label=label, kind=kind, device=device, simulated=simulated,
                      iterations=int(a.size), min_ms=float(a.min()), mean_ms=float(a.mean()),
                      p50_ms=float(np.percentile(a, 50)), p95_ms=float(np.percentile(a, 95)),
                      p99_ms=float(np.percentile(a, 99)), max_ms=float(a.max()), **extra)  # type: ignore[arg-type]


def _labels(bundles: list[EngineBundle]) -> list[str]:
    """Each bundle's label; bundles sharing one get their folder name prefixed to tell them apart."""
    base = [b.manifest.label or b.path.name for b in bundles]
    return [f"{b.path.resolve().parent.name}/{lab}" if base.count(lab) > 1 else lab for b, lab in zip(bundles, base)]


def load_reference(reference: Path) -> dict[str, np.ndarray]:
    existing_file(reference, "reference", "Pass the model.reference.npz written by `ytk embedded prepare`.")
    from .taps import TAPS_REFERENCE

    if Path(reference).name == TAPS_REFERENCE:
        raise UsageError(f"reference {reference} is the debug taps' reference (the values at plugin boundaries, "
                         "which compile ships inside a tapped bundle); pass the model.reference.npz beside it")
    if tarfile.is_tarfile(reference):
        raise UsageError(f"reference {reference} is an engine bundle: verify takes the model.reference.npz first, "
                         "then the bundles (ytk embedded verify model.reference.npz base.tgz plugged.tgz)")
    from ..npz import NpzError, read_npz

    try:
        return read_npz(reference)
    except NpzError as e:
        raise UsageError(f"reference {reference}: not a readable .npz ({e})") from None


def _score_bundle(b: EngineBundle, label: str, ref: dict[str, np.ndarray], max_rel_err: float | None,
                  min_cosine: float | None, layers_top: int, ref_sha: str = ""
                  ) -> tuple[LatencyRow, BundleLayers, list[OutputNumerics], TapVerdict | None]:
    m = b.manifest
    impl = f"{label} (simulated)" if m.simulated else label
    bench = b.benchmark
    if not bench.iterations_ms:
        raise UsageError(f"{b.path}: its benchmark holds no iterations")
    row = latency_row(impl, label, "bundle", m.device, m.simulated, bench.iterations_ms, bundle=str(b.path),
                      engine=f"{m.engine_backend} {m.engine_version}", precision=m.precision, plugins=len(m.plugins))
    prof = b.profile
    top = BundleLayers(implementation=impl, total_ms=prof.total_ms, simulated=m.simulated,
                       layers=sorted(prof.layers, key=lambda x: -x.median_ms)[:max(0, layers_top)])
    outs = b.outputs()
    tol = tolerance_for(m.precision, max_rel_err, min_cosine)
    tapped = b.taps()
    verdict = None
    if tapped is not None:  # the taps are the bundle's own extra outputs, scored apart from the model's
        taps, tap_ref = tapped
        verdict = judge(impl, taps, tap_ref, outs, tol)
        verdict.exposed_as, verdict.exposure_note = m.taps_exposed_as, m.taps_note
        if taps.model_reference_sha256 and ref_sha and ref_sha != taps.model_reference_sha256:
            verdict.problem = (f"{impl}: its debug taps were captured by another prepare than the reference given "
                               "(a different model.reference.npz); prepare again with --debug-taps, or pass that "
                               "prepare's model.reference.npz")
        tap_names = {t.tensor for t in taps.taps} - set(ref)
        outs = {k: v for k, v in outs.items() if k not in tap_names}
    scored = [compare(impl, name, outs.get(name), r, tol) for name, r in ref.items()]
    scored += [unexpected(impl, name, got, tol) for name, got in outs.items() if name not in ref]
    return row, top, scored, verdict


def _same_plugged_engine(a: BundleManifest, b: BundleManifest) -> bool:
    """Two bundles of the same engine, target and plugins (one tapped, one not: the same carve)."""
    def key(m: BundleManifest) -> tuple[object, ...]:
        return (m.engine_backend, m.engine_version, m.arch, m.precision, m.device, m.simulated,
                sorted(p.sha256 for p in m.plugins))
    return key(a) == key(b)


def _problems(reference: Path, ref: dict[str, np.ndarray], numerics: list[OutputNumerics],
              impls: list[str]) -> list[str]:
    """One line per bundle and kind of structural failure, naming the outputs."""
    lines = []
    if not ref:
        made = sorted({n.output for n in numerics})
        lines.append(f"reference {reference} holds no outputs, so nothing was compared (the engine produces "
                     f"{', '.join(made) or 'none either'}); pass the model.reference.npz that `ytk embedded "
                     "prepare` wrote beside the ONNX")
    for impl in impls:
        mine = [n for n in numerics if n.implementation == impl]
        missing = [n.output for n in mine if n.problem == "missing"]
        extra = [n.output for n in mine if n.problem == "unexpected"]
        differ = [f"{n.output} ({n.detail})" for n in mine if n.problem in ("shape", "dtype")]
        if missing:
            lines.append(f"{impl}: the engine does not produce {len(missing)} output(s) the reference holds: "
                         + ", ".join(missing))
        if extra and ref:
            lines.append(f"{impl}: the reference lacks {len(extra)} output(s) the engine produces: "
                         + ", ".join(extra) + "; is it the reference of this model?")
        if differ:
            lines.append(f"{impl}: shape or dtype differs from the reference for {len(differ)} output(s): "
                         + "; ".join(differ))
    return lines


def _read_manifest(prepare_json: Path | None) -> PrepareManifest | None:
    """The prepare.json beside the reference, read once for every use verify makes of it; None when there is
    none or it cannot be read (the torch host row, which reads it itself, then says what is wrong with it)."""
    from ..artifacts import PrepareManifest

    if prepare_json is None:
        return None
    try:
        return PrepareManifest.read(prepare_json)
    except ArtifactError:
        return None


def _moved_model(manifest: PrepareManifest | None) -> str | None:
    """The model path prepare.json names when that file is gone (moved or deleted), else None."""
    if manifest is None:
        return None
    return None if Path(manifest.model).is_file() else manifest.model


def _check_same_inputs(reference: Path, pj: Path | None, manifest: PrepareManifest | None,
                       bundles: list[EngineBundle]) -> None:
    """The reference's own prepare (``manifest``, read from ``pj``, when it names this reference) ran the model on
    other inputs than a bundle was compiled and run with: its outputs are another computation's, whatever their
    shapes, so comparing them fails for no kernel's fault, or passes by chance where the outputs barely move with
    the inputs. A bad input (exit 2), not numerics. (np.savez writes the same bytes for the same arrays, so the
    npz files of two prepares of one model on its fixed inputs have one sha256.)"""
    if pj is None or manifest is None or manifest.reference != Path(reference).name:
        return
    npz = pj.parent / manifest.npz
    if not npz.is_file():
        return
    sha = sha256_file(npz)
    for b, label in zip(bundles, _labels(bundles)):
        if b.manifest.npz_sha256 and b.manifest.npz_sha256 != sha:
            raise UsageError(f"{reference} was computed by a prepare whose inputs ({npz}) are not the ones bundle "
                             f"{label} was compiled and run with (another model.npz): its outputs are another "
                             "run's, so no comparison means anything; pass the model.reference.npz of the prepare "
                             f"the bundle was compiled from, or compile the bundle with --npz {npz}")


def run_verify(reference: Path, bundle_paths: list[Path], host_iterations: int = 20, no_host: bool = False,
               max_rel_err: float | None = None, min_cosine: float | None = None,
               layers_top: int = 10, host_budget_s: float = 120.0) -> VerifyReport:
    """Benchmark rows, speedups, per-layer tops and numerics for ``bundle_paths`` against ``reference``."""
    if not bundle_paths:
        raise UsageError("verify needs at least one engine bundle (.tgz from `ytk embedded compile`)")
    ref = load_reference(Path(reference))
    ref_sha = sha256_file(Path(reference))
    bundles = []
    for p in bundle_paths:
        try:
            bundles.append(EngineBundle.open(p))
        except ArtifactError as e:
            raise UsageError(str(e)) from None
    if any(b.manifest.npz_sha256 == ref_sha for b in bundles):
        raise UsageError(f"reference {reference} is the model's inputs (the .npz the engines were compiled and run "
                         "with), not its outputs: pass the model.reference.npz that `ytk embedded prepare` wrote "
                         "beside it")
    rows: list[LatencyRow] = []
    host_note = ""
    pj = find_prepare_manifest(Path(reference))
    prepared = _read_manifest(pj)
    _check_same_inputs(Path(reference), pj, prepared, bundles)
    if not no_host:
        if host_iterations < 1:
            raise UsageError("--host-iterations must be at least 1 (or pass --no-host)")
        moved = _moved_model(prepared)
        if pj is None:
            host_note = (f"no prepare.json beside {reference}: the torch host row was skipped (it times the "
                         "prepared model.py on this machine)")
        elif moved is not None:
            host_note = (f"{moved} (the model prepare.json names) is not there any more: the torch host row was "
                         "skipped; the engine rows and numerics do not need it")
        else:
            ht: HostTiming = time_torch_host(pj, host_iterations, budget_s=host_budget_s)
            host_note = ht.note
            rows.append(latency_row(f"torch host ({ht.device})", f"torch host ({ht.device})", "torch-host",
                                    ht.device, False, ht.iterations_ms, engine="torch (eager)"))
    numerics: list[OutputNumerics] = []
    layer_tops: list[BundleLayers] = []
    bundle_rows: list[LatencyRow] = []
    impls: list[str] = []
    tapped: list[tuple[TapVerdict, EngineBundle, LatencyRow]] = []
    progress = runtime().context(None, "verify").progress("scoring bundles", total=len(bundles))
    with progress as task:
        for b, label in zip(bundles, _labels(bundles)):
            row, top, scored, verdict = _score_bundle(b, label, ref, max_rel_err, min_cosine, layers_top,
                                                      ref_sha=ref_sha)
            if verdict is not None:
                tapped.append((verdict, b, row))
            impls.append(row.implementation)
            bundle_rows.append(row)
            layer_tops.append(top)
            numerics.extend(scored)
            task.advance()
    rows.extend(bundle_rows)
    verdicts = [v for v, _, _ in tapped]
    for verdict, b, row in tapped:  # the latency the taps cost, where the untapped engine was verified too
        same = [r for other, r in zip(bundles, bundle_rows) if not other.has(TAPS) and _same_plugged_engine(
            b.manifest, other.manifest)]
        if same:
            verdict.untapped = TapLatency(untapped=same[0].implementation, untapped_p50_ms=same[0].p50_ms,
                                          tapped_p50_ms=row.p50_ms, ratio=row.p50_ms / same[0].p50_ms)
        verdict.set_fusion_note()
    # the same engine run another way, measured beside each bundle (the torch engine's op-by-op run of an
    # inductor-mode bundle): rows of their own, and the gain of every later bundle against the first's
    alt_rows: list[list[LatencyRow]] = []
    for b, row in zip(bundles, bundle_rows):
        alts = b.benchmark.alternatives
        alt_rows.append([latency_row(f"{row.implementation} [{name}]", f"{row.label} [{name}]", "bundle-alternative",
                                     row.device, row.simulated, times, bundle=row.bundle, engine=row.engine,
                                     precision=row.precision) for name, times in alts.items() if times])
        rows.extend(alt_rows[-1])
    speedups = []
    if len(bundle_rows) > 1:
        for base in [bundle_rows[0], *alt_rows[0]]:
            for r in bundle_rows[1:]:
                other = "" if (base.device, base.simulated) == (r.device, r.simulated) else \
                    f"{base.device}{' (simulated)' if base.simulated else ''}"
                speedups.append(Speedup(baseline=base.implementation, implementation=r.implementation,
                                        baseline_p50_ms=base.p50_ms, p50_ms=r.p50_ms, speedup=base.p50_ms / r.p50_ms,
                                        simulated=base.simulated or r.simulated, other_device=other))
    problems = _problems(Path(reference), ref, numerics, impls) + [v.problem for v in verdicts if v.problem]
    return VerifyReport(reference=str(reference), rows=rows, speedups=speedups, numerics=numerics,
                        layers=layer_tops, passed=bool(ref) and not problems and all(n.passed for n in numerics)
                        and not any(v.plugin for v in verdicts),
                        host_note=host_note, problems=problems, taps=verdicts,
                        output_labels=dict(prepared.output_labels) if prepared is not None else {})
