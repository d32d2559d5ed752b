"""The one checker every kernel meets (ytk_hookspecs.admission.check_case), on the CPU with stand-in
kernels that misbehave on purpose: the exact one passes, each faulty one is caught with its reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from standin_kernels import StandIn  # noqa: E402
from ytk_hookspecs.admission import AdmissionCase, check_case  # noqa: E402
from ytk_hookspecs.models import PluginMeta, TensorContract  # noqa: E402

CPU = torch.device("cpu")


def _meta() -> PluginMeta:
    shape = ["in0[0]", "in0[1]", "in0[2]", "in0[3]"]
    return PluginMeta(plugin_name="Scale", inputs=[
        TensorContract(name="x", dtype="float16", format="kHWC8", role="activation", shape=shape),
        TensorContract(name="w", dtype="float32", format="kLINEAR", role="weight", shape=["in1[0]"])],
        outputs=[TensorContract(name="y", dtype="float16", format="kHWC8", shape=shape)],
        extents={"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]"}, launcher="scale_launch")


def _fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * w.view(1, -1, 1, 1))


def _case(seed: int = 0) -> AdmissionCase:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 16, 5, 7, generator=g).half().contiguous(memory_format=torch.channels_last)
    w = torch.randn(16, generator=g)
    ref = _fn(x.float(), w)
    tol = ref.abs() * 2.0 ** -9 + 2.0 ** -12
    return AdmissionCase("case0", [x, w], [ref], [tol])


def test_the_exact_kernel_passes_and_runs_first_plus_repeats() -> None:
    lib = StandIn(_meta(), _fn)
    case = _case()
    r = check_case(lib, case, CPU, repeats=5)
    assert r.ok, r.problems
    assert r.budget_used <= 1.0
    assert lib.calls == 6
    assert torch.equal(r.outputs[0].float(), _fn(case.inputs[0].float(), case.inputs[1]).half().float())


@pytest.mark.parametrize("fault,reason", [
    ("wrong", "exceeds its budget"),
    ("zeros", "exceeds its budget"),
    ("nondeterministic", "differs bit-wise"),
    ("unwritten", "never written"),
    ("scribble", "changed input 0"),
    ("guard", "outside output 0"),
    ("first_only", "differs bit-wise"),
])
def test_each_faulty_kernel_is_caught(fault: str, reason: str) -> None:
    r = check_case(StandIn(_meta(), _fn, fault), _case(), CPU)
    assert not r.ok
    assert any(reason in p for p in r.problems), r.problems


def test_a_kernel_that_memorised_one_case_fails_the_next() -> None:
    seen = _case(0)
    memo = _fn(seen.inputs[0].float(), seen.inputs[1])
    lib = StandIn(_meta(), _fn, "memorised", memorised=memo)
    assert check_case(lib, seen, CPU).ok
    other = check_case(lib, _case(1), CPU)
    assert not other.ok and any("exceeds its budget" in p for p in other.problems)


def test_a_case_that_does_not_fit_the_plugin_is_a_failure_not_a_crash() -> None:
    case = _case()
    case.refs.append(case.refs[0])
    r = check_case(StandIn(_meta(), _fn), case, CPU)
    assert not r.ok and "the plugin takes 2 and gives 1" in r.problems[0]


def test_nan_tolerance_or_reference_never_passes() -> None:
    case = _case()
    case.refs[0][0, 0, 0, 0] = float("nan")
    r = check_case(StandIn(_meta(), _fn), case, CPU)
    assert not r.ok
