"""The eval harness's defences, exercised on the CPU with stand-in kernels that misbehave on purpose.

A stand-in "launches" by computing on the tensors behind the pointers it is given, so every check of
:func:`check_case` (poison, guard zones, input integrity, bit-identical repeats, error budget) runs
exactly as on the GPU. Each faulty kernel must be rejected with the matching reason; the exact one
must pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from templates_fixtures import dw_fixture, litemla_fixture  # noqa: E402
from ytk_backend_templates import harness  # noqa: E402
from ytk_backend_templates.cases import build_cases  # noqa: E402
from ytk_backend_templates.contract import plugin_meta  # noqa: E402
from ytk_backend_templates.recognise import load_graph, recognise, site_shapes  # noqa: E402
from ytk_backend_templates.reference import torch_region, verify_against_pt2  # noqa: E402
from ytk_hookspecs import shape_expr  # noqa: E402

CPU = torch.device("cpu")


class StandIn:
    """Duck-types LauncherLibrary; ``fault`` picks how it misbehaves."""

    def __init__(self, meta, fn, fault: str, outputs: list) -> None:  # type: ignore[no-untyped-def]
        self.meta, self.fn, self.fault, self.outputs = meta, fn, fault, outputs
        self.calls = 0

    def extents(self, shapes):  # type: ignore[no-untyped-def]
        vals = shape_expr.evaluate_extents(self.meta.extents, shapes)
        return [vals[k] for k in self.meta.extents]

    def workspace_bytes(self, extents):  # type: ignore[no-untyped-def]
        return 0

    def launch(self, in_ptrs, out_ptrs, extents, ws, stream):  # type: ignore[no-untyped-def]
        self.calls += 1
        ins = [t for t in self._inputs if t.data_ptr() in in_ptrs]
        ins.sort(key=lambda t: in_ptrs.index(t.data_ptr()))
        buf, out = next((b, o) for b, o in self.outputs if o.data_ptr() == out_ptrs[0])
        y = self.fn(*[t.float() for t in ins])
        if self.fault == "wrong":
            y = y + 0.05 * y.abs().max()
        if self.fault == "nondeterministic":
            y = y * (1 + 1e-3 * (self.calls % 2))
        if self.fault == "unwritten":
            y = y.clone()
        out.copy_(y.half())
        if self.fault == "unwritten":
            out[..., -1, -1] = float("nan")
        if self.fault == "scribble":
            ins[0][0, 0, 0, 0] += 1
        if self.fault == "guard":
            buf[harness.GUARD - 1] = 0


@pytest.fixture
def recorded_outputs(monkeypatch):  # type: ignore[no-untyped-def]
    made: list = []
    real = harness.alloc_output

    def alloc(shape, device):  # type: ignore[no-untyped-def]
        pair = real(shape, device)
        made.append(pair)
        return pair

    monkeypatch.setattr(harness, "alloc_output", alloc)
    return made


def _setup(tmp_path: Path, kind: str):  # type: ignore[no-untyped-def]
    if kind == "dw":
        pt2, cand = dw_fixture(tmp_path, "DwT", 3, 1, "hardswish", [(1, 16, 9, 7)])
    else:
        pt2, cand = litemla_fixture(tmp_path, "LT", [(1, 48, 5, 6)])
    g = load_graph(pt2)
    region = recognise(g, cand)
    verify_against_pt2(region, torch.export.load(str(pt2)).module(), g.input_shapes, CPU)
    module = torch_region(region)
    cases = build_cases(region, module, site_shapes(g, cand), CPU)
    return region, module, cases, plugin_meta(region, cand.name, candidate=cand)


@pytest.mark.parametrize("kind", ["dw", "litemla"])
def test_exact_kernel_passes_every_case(tmp_path: Path, recorded_outputs: list, kind: str) -> None:
    region, module, cases, meta = _setup(tmp_path, kind)
    assert {c.dist for c in cases} >= {"normal", "large", "offset"}
    lib = StandIn(meta, lambda *x: module(*x), "none", recorded_outputs)
    for case in cases:
        lib._inputs = case.kernel_inputs
        r = harness.check_case(lib, case, CPU)
        assert r.ok, r.problems
        assert r.budget_used <= 1.0
    assert lib.calls == 2 * len(cases)  # every case is run twice


@pytest.mark.parametrize("fault,reason", [
    ("wrong", "exceeds the budget"),
    ("nondeterministic", "differ bit-wise"),
    ("unwritten", "never written"),
    ("scribble", "changed by the kernel"),
    ("guard", "guard zone"),
])
def test_faulty_kernels_are_rejected(tmp_path: Path, recorded_outputs: list, fault: str, reason: str) -> None:
    region, module, cases, meta = _setup(tmp_path, "dw")
    case = cases[0]
    case.kernel_inputs = [t.clone() for t in case.kernel_inputs]
    lib = StandIn(meta, lambda *x: module(*x), fault, recorded_outputs)
    lib._inputs = case.kernel_inputs
    r = harness.check_case(lib, case, CPU)
    assert not r.ok
    assert any(reason in p for p in r.problems), r.problems


def test_a_wrong_tap_is_far_over_budget(tmp_path: Path, recorded_outputs: list) -> None:
    region, module, cases, meta = _setup(tmp_path, "dw")

    def flipped(x, w, b):  # type: ignore[no-untyped-def]
        return F.hardswish(F.conv2d(x, torch.flip(w, dims=[3]), b, 1, 1, 1, x.shape[1]))

    lib = StandIn(meta, flipped, "none", recorded_outputs)
    lib._inputs = cases[0].kernel_inputs
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


def test_fp16_weights_pass_only_with_their_declared_budget(tmp_path: Path, recorded_outputs: list) -> None:
    """A kernel that rounds its weights to fp16 (the tensor-core depthwise variants) is within the
    budget it declares, not within the fp32-weight one; a wrong tap stays far over even the looser one."""
    region, module, cases, meta = _setup(tmp_path, "dw")

    def w16(x, w, b):  # type: ignore[no-untyped-def]
        return F.hardswish(F.conv2d(x, w.half().float(), b, 1, 1, 1, x.shape[1]))

    def flipped(x, w, b):  # type: ignore[no-untyped-def]
        return F.hardswish(F.conv2d(x, torch.flip(w, dims=[3]).half().float(), b, 1, 1, 1, x.shape[1]))

    lib = StandIn(meta, w16, "none", recorded_outputs)
    plain = []
    for case in cases:
        lib._inputs = case.kernel_inputs
        r = harness.check_case(lib, case, CPU, fp16_weights=True)
        assert r.ok, r.problems
        plain.append(harness.check_case(lib, case, CPU).ok)
    assert not all(plain), "fp16 weights should exceed the fp32-weight budget somewhere"
    bad = StandIn(meta, flipped, "none", recorded_outputs)
    bad._inputs = cases[0].kernel_inputs
    r = harness.check_case(bad, cases[0], CPU, fp16_weights=True)
    assert not r.ok and r.budget_used > 100
