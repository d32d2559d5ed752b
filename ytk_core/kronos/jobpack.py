"""Pack one compile into the job archive the Kronos worker takes.

The archive is deterministic (members in a fixed order, mtime 0, gzip without a timestamp): the same
inputs give the same bytes, so a resumed submit under the same idempotency key carries the same sha256.
It holds what the worker's compile reads and nothing else: the ONNX (with any external-data files it
names, and the debug taps of a prepare made with ``--debug-taps``), the npz, each plugin ``.so`` with
its admission verdict beside it, and the carve's records (``plugins.json``, ``candidates.json``) with
the region references a compile there needs: every region's for a simulated engine (it computes custom-
op nodes with them), and for a real engine those of plugins with no admitted verdict yet, so a worker
with a GPU of the plugin's SM runs the gate itself.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from ytk_hookspecs.models import AdmissionRecord, Candidate, CandidatesFile, PluginsFile, sha256_file
from ytk_hookspecs.service.archive import write_archive

from ..errors import UsageError
from .protocol import JOB_SPEC, JobPlugin, JobSpec

INPUTS = "inputs"


def pack_job(dest: Path, spec: JobSpec, onnx: Path, npz: Path, plugins: list[Path], plugin_names: list[str],
             simulated: bool) -> JobSpec:
    """Write the archive to ``dest``; returns ``spec`` with its plugins filled in (as it was packed)."""
    files: list[tuple[str, Path]] = [(spec.onnx, onnx), (spec.npz, npz)]
    files += [(f"{INPUTS}/{rel}", onnx.parent / rel) for rel in _external_data(onnx)]
    job_plugins = []
    for i, so in enumerate(plugins):
        arc = f"plugins/{i}/{so.name}"
        files.append((arc, so))
        verdict = AdmissionRecord.path_for(so)
        if verdict.is_file():
            files.append((f"plugins/{i}/{verdict.name}", verdict))
        job_plugins.append(JobPlugin(path=arc, sha256=sha256_file(so)))
    if simulated:  # a simulated engine computes each custom-op node with its region's reference
        files += _region_files(onnx, None)
    else:  # a plugin without an admitted verdict is gated on the worker, against its region
        cands = _candidates(onnx)
        unadmitted = [n for so, n in zip(plugins, plugin_names) if not _admitted(so, cands.get(n), spec.precision)]
        files += _region_files(onnx, unadmitted) if unadmitted else []
    spec = spec.model_copy(update={"plugins": job_plugins})
    members: list[tuple[str, bytes | Path]] = [(JOB_SPEC, spec.model_dump_json(indent=2).encode())]
    write_archive(dest, members + _tap_files(onnx, spec.onnx) + list(files))
    return spec


def _tap_files(onnx: Path, arc_onnx: str) -> list[tuple[str, bytes | Path]]:
    """A tapped prepare's ``taps.json`` and fp32 tap reference, beside the ONNX in the archive, so the worker's
    compile finds them as a local one does (its engine is told the taps; the bundle carries them); the taps
    file names the archive's ONNX, which may be called otherwise than the user's."""
    from ..stages.compile import taps_of
    from ..stages.taps import TAPS_FILE, TAPS_REFERENCE

    taps = taps_of(onnx)
    if taps is None:
        return []
    where = PurePosixPath(arc_onnx).parent
    shipped = taps.file.model_copy(update={"onnx": PurePosixPath(arc_onnx).name, "reference": TAPS_REFERENCE})
    return [(str(where / TAPS_FILE), shipped.model_dump_json(indent=1).encode()),
            (str(where / TAPS_REFERENCE), taps.reference)]


def _admitted(so: Path, cand: Candidate | None, precision: str) -> bool:
    """Whether ``so`` holds a verdict that covers the region it replaces at this precision."""
    from ..stages.admission import record_for

    rec = record_for(so, cand, precision)
    return rec is not None and rec.status == "admitted"


def _candidates(onnx: Path) -> dict[str, Candidate]:
    cj = onnx.parent / "candidates.json"
    try:
        return {c.name: c for c in CandidatesFile.read(cj).candidates} if cj.is_file() else {}
    except Exception:  # an unreadable carve record: the worker finds what a local compile would find
        return {}


def _external_data(onnx: Path) -> list[str]:
    """The external-data files the ONNX names (relative to it); one outside its folder is refused."""
    import onnx as onnx_lib

    model = onnx_lib.load(str(onnx), load_external_data=False)
    out: list[str] = []
    for t in model.graph.initializer:
        if t.data_location != onnx_lib.TensorProto.EXTERNAL:
            continue
        loc = {e.key: e.value for e in t.external_data}.get("location", "")
        p = PurePosixPath(loc)
        if not loc or p.is_absolute() or ".." in p.parts:
            raise UsageError(f"--onnx {onnx}: its external data {loc!r} lies outside its folder; a job can ship only "
                             "files beside the ONNX")
        if loc not in out:
            if not (onnx.parent / loc).is_file():
                raise UsageError(f"--onnx {onnx}: its external data file {onnx.parent / loc} is missing")
            out.append(loc)
    return out


def _region_files(onnx: Path, names: list[str] | None) -> list[tuple[str, Path]]:
    """The carve's records beside the ONNX (``plugins.json``, ``candidates.json``) and the region reference
    files of the plugins ``names`` (None: every region of the carve)."""
    prep = onnx.parent
    out: list[tuple[str, Path]] = []
    rels: list[str] = []
    pj, cj = prep / "plugins.json", prep / "candidates.json"
    try:
        entries = PluginsFile.read(pj).plugins if pj.is_file() else []
        cands = CandidatesFile.read(cj).candidates if cj.is_file() else []
    except Exception:  # an unreadable carve record: the worker finds what a local compile would find
        entries, cands = [], []
    for record in (pj, cj):
        if record.is_file():
            out.append((f"{INPUTS}/{record.name}", record))
    for e in entries:
        if names is None or e.name in names or e.op_type in names:
            rels += [e.kernelgen_input or f"plugin_candidates/{e.op_type}.pt2"]
    for c in cands:
        if names is None or c.name in names:
            rels += [r for r in (c.files.pt2, c.files.io_npz) if r]
    for rel in rels:
        p = PurePosixPath(rel)
        if not p.is_absolute() and ".." not in p.parts and (prep / rel).is_file():
            out.append((f"{INPUTS}/{rel}", prep / rel))
    return out
