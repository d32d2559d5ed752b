"""The eval harness's defences, exercised on the CPU with stand-in kernels that misbehave on purpose.

A stand-in "launches" by computing on the memory behind the pointers it is given, so every check of
the shared checker the harness calls (poison, canaries, input integrity, bit-identical repeats, the
templates' error budget) runs exactly as on the GPU. Each faulty kernel must be rejected with the
matching reason; the exact one must pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "trust"))

from standin_kernels import StandIn  # noqa: E402
from templates_fixtures import cpu_case_setup, dw_fixture, litemla_fixture  # noqa: E402
from ytk_backend_templates import harness  # noqa: E402

CPU = torch.device("cpu")


def _setup(tmp_path: Path, kind: str):  # type: ignore[no-untyped-def]
    if kind == "dw":
        pt2, cand = dw_fixture(tmp_path, "DwT", 3, 1, "hardswish", [(1, 16, 9, 7)])
    else:
        pt2, cand = litemla_fixture(tmp_path, "LT", [(1, 48, 5, 6)])
    return cpu_case_setup(pt2, cand)


@pytest.mark.parametrize("kind", ["dw", "litemla"])
def test_exact_kernel_passes_every_case(tmp_path: Path, kind: str) -> None:
    region, module, cases, meta = _setup(tmp_path, kind)
    assert {c.dist for c in cases} >= {"normal", "large", "offset"}
    lib = StandIn(meta, lambda *x: module(*x))
    for case in cases:
        r = harness.check_case(lib, case, CPU)
        assert r.ok, r.problems
        assert r.budget_used <= 1.0
    assert lib.calls == (1 + harness.SCORING_REPEATS) * len(cases)  # every case runs twice at least


@pytest.mark.parametrize("fault,reason", [
    ("wrong", "exceeds its budget"),
    ("nondeterministic", "differs bit-wise"),
    ("unwritten", "never written"),
    ("scribble", "changed input 0"),
    ("guard", "outside output 0"),
])
def test_faulty_kernels_are_rejected(tmp_path: Path, fault: str, reason: str) -> None:
    region, module, cases, meta = _setup(tmp_path, "dw")
    case = cases[0]
    case.kernel_inputs = [t.clone() for t in case.kernel_inputs]
    lib = StandIn(meta, lambda *x: module(*x), fault)
    r = harness.check_case(lib, case, CPU)
    assert not r.ok
    assert any(reason in p for p in r.problems), r.problems


def test_a_wrong_tap_is_far_over_budget(tmp_path: Path) -> None:
    region, module, cases, meta = _setup(tmp_path, "dw")

    def flipped(x, w, b):  # type: ignore[no-untyped-def]
        return F.hardswish(F.conv2d(x, torch.flip(w, dims=[3]), b, 1, 1, 1, x.shape[1]))

    lib = StandIn(meta, flipped)
    r = harness.check_case(lib, cases[0], CPU)
    assert not r.ok and r.budget_used > 100


def test_litemla_offset_case_has_dead_q_pixels_with_exact_zero_reference(tmp_path: Path) -> None:
    region, module, cases, meta = _setup(tmp_path, "litemla")
    off = next(c for c in cases if c.dist == "offset")
    assert bool((off.ref == 0).any()), "the offset case must contain pixels whose q is all zero after ReLU"
    assert bool(torch.isfinite(off.ref).all())


def test_scoring_is_serialised_across_concurrent_jobs(tmp_path: Path) -> None:
    """Two jobs must never time on the GPU at once: the second waits for the first's lock."""
    import threading
    import time as _time

    from ytk_backend_templates.generate import gpu_lock
    from ytk_hookspecs import StageContext

    ctx = StageContext(workdir=tmp_path)
    lock = tmp_path / "templates" / "gpu0.lock"
    inside: list[tuple[str, float, float]] = []

    def job(name: str) -> None:
        with gpu_lock(lock, ctx, name):
            t0 = _time.perf_counter()
            _time.sleep(0.2)
            inside.append((name, t0, _time.perf_counter()))

    threads = [threading.Thread(target=job, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (_, s0, e0), (_, s1, e1) = sorted(inside, key=lambda x: x[1])
    assert s1 >= e0  # no overlap


def test_fp16_weights_pass_only_with_their_declared_budget(tmp_path: Path) -> None:
    """A kernel that rounds its weights to fp16 (the tensor-core depthwise variants) is within the
    budget it declares, not within the fp32-weight one; a wrong tap stays far over even the looser one."""
    region, module, cases, meta = _setup(tmp_path, "dw")

    def w16(x, w, b):  # type: ignore[no-untyped-def]
        return F.hardswish(F.conv2d(x, w.half().float(), b, 1, 1, 1, x.shape[1]))

    def flipped(x, w, b):  # type: ignore[no-untyped-def]
        return F.hardswish(F.conv2d(x, torch.flip(w, dims=[3]).half().float(), b, 1, 1, 1, x.shape[1]))

    lib = StandIn(meta, w16)
    plain = []
    for case in cases:
        r = harness.check_case(lib, case, CPU, fp16_weights=True)
        assert r.ok, r.problems
        plain.append(harness.check_case(lib, case, CPU).ok)
    assert not all(plain), "fp16 weights should exceed the fp32-weight budget somewhere"
    bad = StandIn(meta, flipped)
    r = harness.check_case(bad, cases[0], CPU, fp16_weights=True)
    assert not r.ok and r.budget_used > 100
