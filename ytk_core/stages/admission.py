"""The admission gate: the core itself runs every built plugin before any engine may load it.

Whatever generated a kernel -- the templates, a compiler-backed generator, a third party's backend,
a cache entry -- the ``.so`` that ships is loaded here and its extern "C" launcher is run on the GPU
(:func:`ytk_hookspecs.admission.check_case`: canaries around every buffer, poisoned outputs, a
non-default stream, a graph capture replayed several times, inputs checked bit for bit) against the
region's own ``.pt2`` in fp32 on:

- the inputs captured at every distinct site shape during the carve, and
- inputs of three distributions at those shapes (the captured activations' scale, four times wider,
  shifted off zero, and 64 times wider, where an fp16 accumulation overflows), drawn with fresh seeds on every run
  (recorded in the verdict) so no kernel
  can have memorised them; lifted weights stay the captured ones so the region's arithmetic stays in
  its real range. A drawn case on which the region's own ops overflow at the engine precision is
  skipped (and says so); the captured case never is.

The per-element budget is ``rel*|ref| + 4*E + abs*max|ref| + 2^-24``, where ``E`` is the largest
error of the region's own torch ops at the engine's precision on the same inputs (what the engine
would have delivered without the plugin): a kernel may be as inexact as the engine's own arithmetic
with margin, and not more. A kernel whose timed replay beats a plain device copy of its bytes by
more than half is rejected as a measurement bug or a cheat. The verdict is written beside the .so as
``<plugin>.so.admission.json``, keyed by the .so's sha256, the region's digest and the precision: a changed
file, or the same file replacing another region or at another precision, needs a new verdict.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ytk_hookspecs.admission import ERROR_BUDGET, local_cuda
from ytk_hookspecs.candidates import captured_site_inputs
from ytk_hookspecs.models import AdmissionCaseRecord, AdmissionRecord, Candidate, sha256_file
from ytk_hookspecs.plugin_info import PluginInfoError, read_plugin_description

from ..errors import YtkError
from .kernel_cache import region_digest

#: drawn distributions, each relative to the captured activation's scale
DISTRIBUTIONS = ("normal", "wide", "offset", "large")
#: a timed replay under this fraction of a device copy of the same bytes is not believed
FLOOR_FRACTION = 0.5
SIMULATED_APIS = ("mock-cpu",)
#: the child running one plugin's gate is killed after this long (a kernel that never returns)
CHILD_TIMEOUT_S = 600


class AdmissionRefused(YtkError):
    """A plugin the gate rejected, or one it could not verify where verification is required."""

    exit_code = 5


def record_for(so: Path, cand: Candidate | None = None, precision: str | None = None) -> AdmissionRecord | None:
    """The verdict written beside ``so`` when it is about this very file (same sha256) and, when they are
    given, reached on the region ``cand`` at ``precision``; else None (the gate runs again). An admission
    on one region never covers another that the same .so would replace (another padding, another shape)."""
    p = AdmissionRecord.path_for(so)
    if not p.is_file() or not Path(so).is_file():
        return None
    try:
        rec = AdmissionRecord.read(p)
    except Exception:
        return None
    if rec.so_sha256 != sha256_file(so):
        return None
    if rec.status == "admitted" and ((cand is not None and rec.region != region_digest(cand))
                                     or (precision is not None and rec.precision != precision)):
        return None
    return rec


def _verdict(so: Path, digest: str) -> AdmissionRecord | None:
    """The verdict beside ``so`` about the bytes whose sha256 is ``digest`` (the file may have changed since)."""
    try:
        rec = AdmissionRecord.read(AdmissionRecord.path_for(so))
    except Exception:
        return None
    return rec if rec.so_sha256 == digest else None


def _unverified(so: Path, digest: str, name: str, reason: str) -> AdmissionRecord:
    rec = AdmissionRecord(plugin_name=name, so_sha256=digest, status="unverified", reason=reason,
                          error_budget=ERROR_BUDGET)
    rec.write(AdmissionRecord.path_for(so))
    return rec


def admit(so: Path, cand: Candidate | None, prep: Path | None, precision: str,
          progress: Callable[[str], None] | None = None) -> AdmissionRecord:
    """Run the gate on ``so`` (the region ``cand`` of the carve in ``prep``); write and return the verdict."""
    so = Path(so)
    digest = sha256_file(so)
    try:
        desc = read_plugin_description(so)
    except PluginInfoError as e:
        return _rejected(so, digest, so.stem, [str(e)])
    if desc.engine_api in SIMULATED_APIS:
        return _unverified(so, digest, desc.name, "a simulated plugin (no GPU code): only the mock engine runs it")
    if cand is None or prep is None or not cand.files.pt2:
        return _unverified(so, digest, desc.name, "no region reference to check it against (build it with "
                           "--candidates <prepare dir>/candidates.json)")
    here = local_cuda(desc.sm)
    if isinstance(here, str):
        return _unverified(so, digest, desc.name, f"the gate needs a GPU that runs it: {here}")
    return _run_isolated(so, digest, desc.name, cand, Path(prep), precision, progress)


def _run_isolated(so: Path, digest: str, name: str, cand: Candidate, prep: Path, precision: str,
                  progress: Callable[[str], None] | None) -> AdmissionRecord:
    """:func:`_run` in a child process: a kernel that faults (an illegal address leaves the CUDA context
    unusable) or hangs takes down the child, never the caller; its death is the verdict. Inside
    :func:`gate_session` the session's child is reused; otherwise a child serves this plugin alone."""
    job = {"so": str(so), "digest": digest, "name": name, "prep": str(prep), "precision": precision,
           "candidate": cand.model_dump(mode="json")}
    session = _SESSION.get()
    if session is not None:
        return session.gate(job, progress)
    with GateSession() as one:
        return one.gate(job, progress)


#: the session :func:`gate_session` opened in this context, if any
_SESSION: ContextVar["GateSession | None"] = ContextVar("ytk_gate_session", default=None)
#: a line the child prints when one plugin's verdict is written
_DONE = "@@ytk-gate-verdict"


@contextmanager
def gate_session() -> Iterator["GateSession"]:
    """Gate every plugin admitted inside this block in one child process, started at the first plugin that
    needs it: the child imports torch and opens its CUDA context once, not once per plugin (seconds each).
    A plugin the child rejects, or one that kills or hangs it, ends that child; the next plugin gets a fresh
    one, so no plugin is judged in a process another kernel may have corrupted."""
    if _SESSION.get() is not None:  # nested: the outer session serves
        yield _SESSION.get()  # type: ignore[misc]
        return
    with GateSession() as session:
        token = _SESSION.set(session)
        try:
            yield session
        finally:
            _SESSION.reset(token)


class GateSession:
    """A child process running the gate (``python -m ytk_core.stages.admission --serve``): one job (JSON)
    per line on its stdin; its stdout carries progress lines and, when the verdict is written beside the
    .so, a line starting with ``@@ytk-gate-verdict``."""

    def __init__(self) -> None:
        self.children = 0  # how many child processes this session started
        self.seconds = 0.0  # wall time spent gating, child starts included
        self._proc: Any = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._td: tempfile.TemporaryDirectory[str] | None = None  # made with the first child: a session that
        self._err = Path(os.devnull)                               # gates nothing leaves no folder behind

    def __enter__(self) -> "GateSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._stop()
        if self._td is not None:
            self._td.cleanup()

    def _start(self) -> None:
        if self._td is None:
            self._td = tempfile.TemporaryDirectory(prefix="ytk-admission-")
            self._err = Path(self._td.name) / "stderr.txt"
        self._lines = queue.Queue()
        with open(self._err, "w") as ef:
            self._proc = subprocess.Popen(_child_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=ef, text=True)
        self.children += 1
        threading.Thread(target=_pump_lines, args=(self._proc.stdout, self._lines), daemon=True).start()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def gate(self, job: dict[str, Any], progress: Callable[[str], None] | None) -> AdmissionRecord:
        """Gate one plugin (``job`` as :func:`_serve` reads it); returns the verdict written beside its .so."""
        t0 = time.monotonic()
        try:
            return self._gate(job, progress)
        finally:
            self.seconds += time.monotonic() - t0

    def _gate(self, job: dict[str, Any], progress: Callable[[str], None] | None) -> AdmissionRecord:
        so, digest, name = Path(job["so"]), job["digest"], job["name"]
        AdmissionRecord.path_for(so).unlink(missing_ok=True)
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._start()
        proc = self._proc
        try:
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
        except OSError:
            pass  # the child is gone: its end of the stream below says so
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        answered = False
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:  # a kernel that never returns
                proc.kill()
                proc.wait()
                self._proc = None
                return _rejected(so, digest, name, [f"the gate's process did not finish in {CHILD_TIMEOUT_S} s "
                                                    "(a kernel that never returns?) and was killed"])
            if line is None:
                break
            if line.startswith(_DONE):
                answered = True
                break
            if progress and line.strip():
                progress(line.strip())
        rec = _verdict(so, digest)
        if answered and rec is not None:
            if rec.status == "rejected":  # its kernel may have left the child's CUDA context unusable
                self._stop()
            return rec
        if answered:  # the child is alive and waiting for the next plugin: end it
            self._stop()
            return _rejected(so, digest, name, ["the gate finished but left no readable verdict"])
        try:  # its stdout closed: the child is gone, or about to be (or closed it and waits: ended here)
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        self._proc = None
        tail = [ln for ln in self._err.read_text(errors="replace").splitlines() if ln.strip()][-1:]
        if rc == 0:
            why = "the gate finished but left no readable verdict"
        else:
            why = (f"the gate's process died while running the kernel (exit {rc})"
                   + (f": {tail[0][:300]}" if tail else ""))
        return _rejected(so, digest, name, [why])


def _child_command() -> list[str]:
    return [sys.executable, "-m", "ytk_core.stages.admission", "--serve"]


def _pump_lines(stream: Any, lines: "queue.Queue[str | None]") -> None:
    """Forward the child's stdout lines until it closes (then None)."""
    try:
        for line in stream:
            lines.put(line.rstrip("\n"))
    finally:
        lines.put(None)


def _serve() -> int:
    """The child's side of :class:`GateSession`: gate each job read from stdin, write its verdict, print the
    done line; stop after a rejection (a fresh process judges the next plugin) or at the end of stdin."""
    private = Path(tempfile.mkdtemp(prefix="ytk-gate-"))
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            rec = _gate_job(json.loads(line), private)
            print(_DONE, rec.status, flush=True)
            if rec.status == "rejected":
                break
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return 0


def _gate_job(job: dict[str, Any], private: Path) -> AdmissionRecord:
    """One plugin in the child. The .so is loaded from a private copy named by its sha256: the dynamic loader
    keeps a library by its path, so a plugin rebuilt at the same path must not find the old code loaded."""
    so, digest, name = Path(job["so"]), job["digest"], job["name"]
    copy = private / f"{digest}.so"
    if not copy.is_file():
        shutil.copyfile(so, copy)
    if sha256_file(copy) != digest:
        copy.unlink()
        return _rejected(so, digest, name, [f"{so} changed while it was being gated; build it again"])
    try:
        here = local_cuda(read_plugin_description(copy).sm)
    except PluginInfoError as e:
        return _rejected(so, digest, name, [str(e)])
    if isinstance(here, str):
        return _unverified(so, digest, name, f"the gate needs a GPU that runs it: {here}")
    device, gpu_name = here
    cand = Candidate.model_validate(job["candidate"])

    def say(msg: str) -> None:
        print(msg, flush=True)

    try:
        return _run(so, digest, name, cand, Path(job["prep"]), job["precision"], device, gpu_name, say, load=copy)
    except Exception as e:  # a gate that cannot finish admits nothing
        return _rejected(so, digest, name, [f"the gate could not run it: {type(e).__name__}: "
                                            f"{' '.join(str(e).split())[:300]}"], device=gpu_name)


def _rejected(so: Path, digest: str, name: str, problems: list[str], device: str = "",
              cases: list[AdmissionCaseRecord] | None = None) -> AdmissionRecord:
    rec = AdmissionRecord(plugin_name=name, so_sha256=digest, status="rejected", reason="; ".join(problems[:3]),
                          device=device, error_budget=ERROR_BUDGET, cases=cases or [])
    rec.write(AdmissionRecord.path_for(so))
    return rec


def _run(so: Path, digest: str, name: str, cand: Candidate, prep: Path, precision: str, device: Any,
         gpu_name: str, progress: Callable[[str], None] | None, load: Path | None = None) -> AdmissionRecord:
    from ytk_hookspecs.admission import (DEFAULT_REPEATS, AdmissionCase, check_case, copy_floor_ms, kernel_inputs,
                                         low_precision, reference_and_tolerance, time_replays)
    from ytk_hookspecs.launcher import LauncherLibrary
    from ytk_hookspecs.pt2 import load_exported

    lib = LauncherLibrary(load or so)
    program = load_exported(prep / str(cand.files.pt2)).module().to(device)
    low = low_precision(program, precision)
    sites = _site_inputs(cand, prep)
    if not sites:
        return _unverified(so, digest, name, "the carve kept no inputs of any site to check it with")
    roles = list(cand.input_roles)
    cases: list[AdmissionCaseRecord] = []
    kernel_ms: list[float] = []
    floor_ms: list[float] = []
    problems: list[str] = []
    for si, captured in enumerate(sites):
        shape_label = "x".join(str(d) for d in captured[0].shape)
        plans = [("captured", -1, captured)]
        # every drawn distribution on the first shape, the first one on the others
        for d in (DISTRIBUTIONS if si == 0 else DISTRIBUTIONS[:1]):
            seed = secrets.randbelow(2 ** 31)
            plans.append((d, seed, _seeded(captured, roles, d, seed)))
        timed = False
        for dist, seed, logical in plans:
            label = f"shape{si}({shape_label})/{dist}" + (f"/seed{seed}" if seed >= 0 else "")
            if progress:
                progress(f"admission {name}: {label}")
            ref, tol, overflow = reference_and_tolerance(program, low, logical, precision, device,
                                                        [c.dtype for c in lib.meta.inputs])
            if overflow and seed >= 0:
                cases.append(AdmissionCaseRecord(label=label, ok=True, skipped=overflow))
                continue
            ins = kernel_inputs(lib.meta, logical, device)
            out = check_case(lib, AdmissionCase(label, ins, ref, tol), device, repeats=DEFAULT_REPEATS)
            if out.ok and not timed:
                timed = True
                ms = time_replays(out)
                moved = sum(t.numel() * t.element_size() for t in ins) + sum(
                    r.numel() * {"float16": 2, "float32": 4, "int32": 4, "int8": 1}[c.dtype]
                    for r, c in zip(ref, lib.meta.outputs))
                floor = copy_floor_ms(moved, device)
                if ms is not None:
                    kernel_ms.append(round(ms, 6))
                    floor_ms.append(round(floor, 6))
                    if ms < FLOOR_FRACTION * floor:
                        out.fail(f"timed at {ms * 1e3:.2f} us per call, under half of a plain device copy of its "
                                 f"{moved / 1e6:.1f} MB ({floor * 1e3:.2f} us): not a believable time")
            cases.append(AdmissionCaseRecord(label=label, ok=out.ok, max_abs_err=out.max_abs_err,
                                             max_rel_err=out.max_rel_err, budget_used=out.budget_used,
                                             problems=out.problems))
            problems.extend(out.problems)
            del out, ins, ref, tol
            if problems:
                break
        if problems:
            break
    if problems:
        return _rejected(so, digest, name, problems, device=gpu_name, cases=cases)
    rec = AdmissionRecord(plugin_name=name, so_sha256=digest, status="admitted", device=gpu_name,
                          region=region_digest(cand), precision=precision,
                          error_budget=ERROR_BUDGET, repeats=DEFAULT_REPEATS, cases=cases,
                          kernel_ms_per_site=kernel_ms, floor_ms_per_site=floor_ms)
    rec.write(AdmissionRecord.path_for(so))
    return rec


def _site_inputs(cand: Candidate, prep: Path) -> list[list[Any]]:
    """The captured inputs of each distinct site shape (fp32 torch tensors, logical layout)."""
    return captured_site_inputs(prep / cand.files.io_npz if cand.files.io_npz else None)


def _seeded(captured: list[Any], roles: list[str], dist: str, seed: int) -> list[Any]:
    """Inputs of one seeded distribution at the captured shapes: activations drawn at the captured scale,
    weights (and any non-float input) as captured."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for i, t in enumerate(captured):
        role = roles[i] if i < len(roles) else "activation"
        if role != "activation" or not t.is_floating_point():
            out.append(t)
            continue
        std = float(t.float().std()) if t.numel() > 1 else 1.0
        std = std if std > 0 and np.isfinite(std) else 1.0
        x = torch.randn(t.shape, generator=g)
        if dist == "wide":
            x = x * (4.0 * std)
        elif dist == "large":
            x = x * (64.0 * std)
        elif dist == "offset":
            x = x * (0.5 * std) + 2.0 * std
        else:
            x = x * std
        out.append(x.to(t.dtype))
    return out


def gate_plugins(plugins: list[tuple[Path, str]], onnx: Path, precision: str, allow_unverified: bool,
                 progress: Callable[[str], None] | None = None) -> tuple[dict[str, str], list[str]]:
    """Before a real engine loads ``plugins`` ((path, name) pairs): each must be admitted. A .so without a
    verdict for its current bytes is gated now, against the region in the candidates.json beside ``onnx``.
    Returns each plugin's status and the warnings; a rejected plugin is an error, an unverified one too
    unless ``allow_unverified``."""
    from ytk_hookspecs.models import CandidatesFile

    cands: dict[str, Candidate] = {}
    cj = Path(onnx).parent / "candidates.json"
    if cj.is_file():
        try:
            cands = {c.name: c for c in CandidatesFile.read(cj).candidates}
        except Exception:
            cands = {}
    status: dict[str, str] = {}
    warnings: list[str] = []
    with gate_session():  # one gate process for every plugin that needs a verdict
        for path, name in plugins:
            rec = record_for(path, cands.get(name), precision)
            if rec is None or rec.status == "unverified":
                rec = admit(path, cands.get(name), cj.parent if name in cands else None, precision, progress)
            status[name] = rec.status
            if rec.status == "rejected":
                problems = [p for c in rec.cases for p in c.problems] or [rec.reason]
                raise AdmissionRefused(f"plugin {name} ({path}) was rejected by the admission gate, so no engine may "
                                       f"load it (every case in {AdmissionRecord.path_for(path)}):\n  - "
                                       + "\n  - ".join(problems[:8]))
            if rec.status == "unverified":
                msg = f"plugin {name} ({path}) is unverified: {rec.reason}"
                if not allow_unverified:
                    raise AdmissionRefused(msg + ". A real engine loads only admitted plugins: run this on a GPU of "
                                           "the plugin's SM with the carved ONNX's candidates.json beside it, or pass "
                                           "--allow-unverified to load it unchecked", exit_code=2)
                warnings.append(msg + " (loaded unchecked: --allow-unverified)")
    return status, warnings


if __name__ == "__main__":
    sys.exit(_serve() if sys.argv[1:] == ["--serve"] else 2)
