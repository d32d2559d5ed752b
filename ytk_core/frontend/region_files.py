"""The kernel-generation inputs of one plugin: ``<Name>.pt2``, ``.io.npz``, ``.inputs.pt``, ``.reference.py``."""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import numpy as np

from ytk_hookspecs.models import CandidateFiles
from ytk_hookspecs.models.base import file_mode, write_text_atomic

from .selectors import Selector


def _export(gm: Any, example: list[Any], arg_names: list[str], dynamic: dict[str, list[int]]) -> tuple[Any, str | None]:
    import torch
    from torch.export import Dim

    if dynamic:
        shapes = tuple({a: Dim.AUTO for a in dynamic.get(n, [])} or None for n in arg_names)
        try:
            return torch.export.export(gm, tuple(example), dynamic_shapes=shapes, strict=False), None
        except Exception as e:  # shape-specialised ops (e.g. reshapes with baked sizes) cannot go dynamic
            note = (f"exported with the shapes of site 0: the region does not trace with dynamic "
                    f"{', '.join(dynamic)} ({type(e).__name__}); .io.npz carries every site's shapes")
            return torch.export.export(gm, tuple(example), strict=False), note
    return torch.export.export(gm, tuple(example), strict=False), None


def _check_every_site(sel: Selector, program: Any, site_inputs: list[list[Any]]) -> None:
    """A program exported with dynamic dims can still specialise on site 0 (a reshape's -1 becomes a
    guard such as ``C // (H * W * C // 1152) == 48``): run it on every other site's inputs so such a
    plugin is refused here, not at the engine compile after a kernel was generated and built."""
    import torch

    from ..errors import UsageError

    def shapes(ins: list[Any]) -> str:
        return ", ".join("x".join(map(str, t.shape)) for t in ins if hasattr(t, "shape"))

    mod = program.module()
    for k, ins in enumerate(site_inputs[1:], start=1):
        try:
            with torch.no_grad():
                mod(*ins)
        except Exception as e:  # a failed guard is an AssertionError; a shape error a RuntimeError
            detail = str(e).splitlines()[0][:160]
            raise UsageError(f"selector {sel.text!r}: its sites differ in a size the region's program fixes (site 0 "
                             f"takes {shapes(site_inputs[0])}, site {k} {shapes(ins)}), so one program cannot serve "
                             "both; split the selector by shape (@where) so that each gets a program of its own "
                             f"(torch.export: {type(e).__name__}: {detail})") from None


def _atomic(path: Path, write: Any, suffix: str = ".tmp") -> None:
    """``write(tmp_path)`` then rename: big captures stream to disk instead of through memory."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _save_pt2(program: Any, path: Path) -> None:
    import torch

    _atomic(path, lambda tmp: torch.export.save(program, tmp), suffix=".tmp.pt2")


def reference_source(sel: Selector, gm: Any, arg_names: list[str], shapes: list[list[list[int]]],
                     n_outputs: int = 1) -> str:
    code = gm.print_readable(print_output=False)
    site_lines = "\n".join(f"#   site {k}: " + ", ".join(f"{n}{list(s)}" for n, s in zip(arg_names, ss))
                           for k, ss in enumerate(shapes))
    outs = (f"Returns a tuple of {n_outputs} tensors, the custom-op node's outputs in order.\n" if n_outputs > 1
            else "")
    return (f'"""Torch reference of plugin {sel.name} (selector {sel.text}).\n\n'
            "Inputs, in the custom-op node's order: " + ", ".join(arg_names) + ".\n" + outs +
            "Load the runnable program with torch.export.load('<Name>.pt2').module().\n"
            '"""\n# Input shapes per site:\n' + site_lines
            + "\n\nimport torch\nfrom torch import device  # noqa: F401\n\n" + code + "\n")


def write_region_files(sel: Selector, gm: Any, site_inputs: list[list[Any]], site_outputs: list[list[Any]],
                       arg_names: list[str], dynamic: dict[str, list[int]], prep: Path,
                       cdir: Path, writer: Executor | None = None) -> tuple[CandidateFiles, list[str], list[Future]]:
    """Export and write one plugin's files. The large captures (io.npz, inputs.pt: GBs at full size)
    go through ``writer`` when given, so disk writes overlap the next region's export."""
    import torch

    notes: list[str] = []
    program, note = _export(gm, site_inputs[0], arg_names, dynamic)
    if note:
        notes.append(note)
    if dynamic:
        _check_every_site(sel, program, site_inputs)
    base = cdir / sel.name
    pt2 = base.with_suffix(".pt2")
    _save_pt2(program, pt2)
    arrays: dict[str, np.ndarray] = {}
    for k, (ins, outs) in enumerate(zip(site_inputs, site_outputs)):
        for i, t in enumerate(ins):
            arrays[f"site{k}.in{i}"] = t.detach().cpu().numpy()
        for j, t in enumerate(outs):
            arrays[f"site{k}.out{j}"] = t.detach().cpu().numpy()
    io_npz = Path(str(base) + ".io.npz")

    def _npz(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    inputs_pt = Path(str(base) + ".inputs.pt")
    payload = {"arg_names": arg_names, "sites": [[t.detach().cpu() for t in ins] for ins in site_inputs]}
    jobs = [(io_npz, _npz), (inputs_pt, lambda tmp: torch.save(payload, tmp))]
    futures: list[Future] = []
    for path, fn in jobs:
        if writer is None:
            _atomic(path, fn)
        else:
            futures.append(writer.submit(_atomic, path, fn))
    ref = Path(str(base) + ".reference.py")
    write_text_atomic(ref, reference_source(sel, gm, arg_names, [[list(t.shape) for t in ins] for ins in site_inputs],
                                            len(site_outputs[0])))
    rel = lambda p: str(p.relative_to(prep))  # noqa: E731
    return (CandidateFiles(pt2=rel(pt2), io_npz=rel(io_npz), inputs_pt=rel(inputs_pt), reference_py=rel(ref)), notes,
            futures)
