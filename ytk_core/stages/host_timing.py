"""The "torch host" row of verify: the prepared model.py timed on this machine, as torch runs it.

The model and its input size come from ``prepare.json`` beside the reference, so the row times the
same model at the same shapes the bundles were built from. It is this machine's figure (CPU or
its own GPU), not the target's, and verify labels it with the device it ran on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..artifacts import PREPARE_MANIFEST, PrepareManifest
from ..config import env_overlay
from ..runtime import runtime


@dataclass
class HostTiming:
    device: str
    iterations_ms: list[float]
    warmup: int
    note: str = ""


def find_prepare_manifest(reference: Path) -> Path | None:
    p = Path(reference).resolve().parent / PREPARE_MANIFEST
    return p if p.is_file() else None


def time_torch_host(prepare_json: Path, iterations: int, warmup: int = 2, budget_s: float = 120.0) -> HostTiming:
    """Time ``Model()(*get_fwd_args())`` of the prepared model.py on this machine.

    Stops early once ``budget_s`` has been spent (at least one measured iteration): a full-size
    model on a laptop CPU takes a minute per inference, and the row is a reference, not the result.
    """
    import hashlib

    import torch

    from ..frontend.loader import load_model

    pm = PrepareManifest.read(prepare_json)
    model_path = Path(pm.model)
    note = ""
    if model_path.is_file() and hashlib.sha256(model_path.read_bytes()).hexdigest() != pm.model_sha256:
        note = f"{model_path} changed since prepare; the torch host row times the current file"
    ctx = runtime().context(None, "verify")
    with env_overlay(pm.env), ctx.progress(f"loading {model_path.name} for the torch host row"):
        lm = load_model(model_path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = lm.model.to(device)
    args = tuple(a.to(device) for a in lm.args)
    times: list[float] = []

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    start = time.perf_counter()
    done_warmup = 0
    with torch.inference_mode(), ctx.progress(f"timing torch on {device}", total=warmup + iterations) as task:
        while len(times) < iterations:
            # Past the budget, what is left of the warm-up is skipped and one iteration is measured.
            in_warmup = done_warmup < warmup and time.perf_counter() - start <= budget_s
            sync()
            t0 = time.perf_counter()
            model(*args)
            sync()
            if in_warmup:
                done_warmup += 1
            else:
                times.append((time.perf_counter() - t0) * 1e3)
            task.advance()
            if times and time.perf_counter() - start > budget_s:
                break
    if len(times) < iterations:
        extra = f"stopped after {len(times)} of {iterations} iterations (--host-budget {budget_s:g} s)"
        note = f"{note}; {extra}" if note else extra
    return HostTiming(device=device, iterations_ms=times, warmup=done_warmup, note=note)
