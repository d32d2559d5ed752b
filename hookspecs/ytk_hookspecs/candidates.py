"""Finding the region a kernel job is about: the ``candidates.json`` entry a ``.pt2`` was carved as.

``ytk embedded prepare --plugin`` writes ``<prepare>/candidates.json`` and the region files under
``<prepare>/plugin_candidates/``. The core passes the entry in ``KernelGenRequest.candidate``; a
generator run by hand, or by a service that received only the files, finds it with
:func:`request_candidate`. One rule for both, so they cannot disagree on which region a file is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .models import ArtifactError, Candidate, CandidatesFile, KernelGenRequest

__all__ = ["CANDIDATES_FILE", "captured_io_npz", "captured_site_inputs", "find_candidate", "request_candidate"]

CANDIDATES_FILE = "candidates.json"


def find_candidate(reference: Path, candidates_file: Path | None = None, prepare_dir: Path | None = None,
                   plugin_name: str | None = None) -> tuple[Candidate | None, Path | None]:
    """The entry whose region file is ``reference`` (else the one named ``plugin_name``, else the one named
    like the file, ``<Name>.pt2``) and the prepare dir holding its ``candidates.json``.

    ``candidates_file`` names the file; it must exist and be valid (:class:`ArtifactError` otherwise).
    Without it, ``candidates.json`` is looked for in ``prepare_dir``, then beside the region folder and
    beside the file itself; unreadable ones are skipped. ``(None, dir)`` when a file was read but has no
    such entry; ``(None, None)`` when none was found.
    """
    ref = Path(reference).resolve()
    if candidates_file is not None:
        files = [Path(candidates_file)]
        if not files[0].is_file():
            raise ArtifactError(f"{candidates_file}: file not found (expected a CandidatesFile JSON file)")
    else:
        roots = ([Path(prepare_dir)] if prepare_dir else []) + [ref.parent.parent, ref.parent]
        files = [r / CANDIDATES_FILE for r in roots if (r / CANDIDATES_FILE).is_file()]
    name = plugin_name or ref.name.split(".")[0]
    first_dir: Path | None = None
    for f in files:
        try:
            cf = CandidatesFile.read(f)
        except ArtifactError:
            if candidates_file is not None:
                raise
            continue
        prep = f.parent
        first_dir = first_dir or prep
        for c in cf.candidates:
            if c.files.pt2 and (prep / c.files.pt2).resolve() == ref:
                return c, prep
        named = next((c for c in cf.candidates if c.name == name), None)
        if named is not None:
            return named, prep
    return None, first_dir


def request_candidate(request: KernelGenRequest) -> Candidate | None:
    """A kernel job's region: the request's own ``candidate``, else found beside its ``.pt2``."""
    if request.candidate is not None:
        return request.candidate
    return find_candidate(Path(request.reference), prepare_dir=request.prepare_dir,
                          plugin_name=request.plugin_name)[0]


def captured_io_npz(request: KernelGenRequest, candidate: Candidate | None) -> Path | None:
    """The capture file a job's region names (``files.io_npz``, under the request's prepare dir, else beside the
    region folder of its ``.pt2``); None when it names none."""
    if candidate is None or not candidate.files.io_npz:
        return None
    root = Path(request.prepare_dir) if request.prepare_dir else Path(request.reference).parent.parent
    return root / candidate.files.io_npz


def captured_site_inputs(io_npz: Path | None) -> list[list[Any]]:
    """The inputs the carve captured at a region's sites (``site<K>.in<J>`` in its ``<Name>.io.npz``), one list
    per distinct input shape, in site order, as torch tensors of the captured dtype (logical layout);
    ``[]`` when there is no capture file."""
    import numpy as np
    import torch

    if io_npz is None or not Path(io_npz).is_file():
        return []
    out: list[list[Any]] = []
    seen: set[tuple[tuple[int, ...], ...]] = set()
    with np.load(io_npz, allow_pickle=False) as z:
        k = 0
        while f"site{k}.in0" in z.files:
            ins = []
            j = 0
            while f"site{k}.in{j}" in z.files:
                ins.append(torch.from_numpy(np.array(z[f"site{k}.in{j}"])))
                j += 1
            key = tuple(tuple(t.shape) for t in ins)
            if key not in seen:
                seen.add(key)
                out.append(ins)
            k += 1
    return out
