"""The one checker every kernel meets (ytk_hookspecs.admission.check_case), on the CPU with stand-in
kernels that misbehave on purpose: the exact one passes, each faulty one is caught with its reason."""

from __future__ import annotations

import sys
from typing import Any
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from standin_kernels import StandIn, tensor_at  # noqa: E402
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


class _Forger(StandIn):
    """A wrong kernel that also rewrites the reference (or the tolerance) in memory to match its output, as a
    kernel that found the buffer would: the checker compares in place, so only the fingerprint taken before
    the first launch can tell."""

    def __init__(self, case: AdmissionCase, what: str) -> None:
        super().__init__(_meta(), _fn, "wrong")
        self.case, self.what = case, what

    def launch(self, in_ptrs: list[int], out_ptrs: list[int], extents: list[int], ws: Any, stream: Any) -> None:
        super().launch(in_ptrs, out_ptrs, extents, ws, stream)
        if self.what == "reference":
            out = tensor_at(out_ptrs[0], list(self.case.refs[0].shape), torch.float16, True)
            self.case.refs[0].copy_(out.float())
        else:
            self.case.tols[0].fill_(1e9)


@pytest.mark.parametrize("what", ["reference", "tolerance"])
def test_a_kernel_that_rewrites_the_reference_is_caught(what: str) -> None:
    case = _case()
    r = check_case(_Forger(case, what), case, CPU)
    assert not r.ok
    assert any(f"the {what} of output 0 changed while the kernel ran" in p for p in r.problems), r.problems
    # the forgery did make its comparison pass: the fingerprint is what caught it
    assert not any("exceeds its budget" in p for p in r.problems), r.problems


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


# -- the gate's reference: inputs as the engine feeds them, by the plugin's declared dtypes ------------------
def _conv_meta() -> PluginMeta:
    shape = ["in0[0]", "in1[0]", "in0[2]", "in0[3]"]
    return PluginMeta(plugin_name="Conv1x1Relu6", inputs=[
        TensorContract(name="x", dtype="float16", format="kHWC8", role="activation",
                       shape=["in0[0]", "in0[1]", "in0[2]", "in0[3]"]),
        TensorContract(name="w", dtype="float32", format="kLINEAR", role="weight",
                       shape=["in1[0]", "in1[1]", "in1[2]", "in1[3]"]),
        TensorContract(name="b", dtype="float32", format="kLINEAR", role="weight", shape=["in2[0]"])],
        outputs=[TensorContract(name="y", dtype="float16", format="kHWC8", shape=shape)],
        extents={"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]"}, launcher="conv_launch")


def _conv_relu6(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.clamp(torch.nn.functional.conv2d(x, w, b), 0.0, 6.0)


class _Region(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _conv_relu6(x, w, b)


def _large_conv_case(seed: int) -> list[torch.Tensor]:
    """MobileNetV2's first pointwise conv (8 -> 48, folded BN, ReLU6) on the gate's 'large' draw (64x the
    activations' scale): the clamp keeps the outputs at most 6 while the terms summed are in the hundreds."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 8, 24, 40, generator=g) * 64.0
    w = torch.randn(48, 8, 1, 1, generator=g) / 8 ** 0.5
    b = torch.randn(48, generator=g) * 0.1
    return [x, w, b]


def _gate(lib: StandIn, logical: list[torch.Tensor], dtypes: list[str]) -> Any:
    from ytk_hookspecs.admission import kernel_inputs, low_precision, reference_and_tolerance

    program = _Region()
    refs, tols, why = reference_and_tolerance(program, low_precision(program, "fp16"), logical, "fp16", CPU,
                                              dtypes)
    assert why == ""
    return check_case(lib, AdmissionCase("large", kernel_inputs(lib.meta, logical, CPU), refs, tols), CPU)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_kernel_fed_fp32_weights_is_judged_against_a_reference_fed_the_same(seed: int) -> None:
    """The H100 gate rejected MobileNetV2's pointwise and depthwise kernels (3.5x-7.4x over budget on the large
    draw): its reference rounded the fp32 weights the kernel is fed to fp16, so the kernel was charged with the
    reference's own rounding. Fed as the contract declares, the exact kernel passes and a wrong one still fails."""
    meta = _conv_meta()
    dtypes = [c.dtype for c in meta.inputs]
    logical = _large_conv_case(seed)
    exact = StandIn(meta, _conv_relu6)
    assert _gate(exact, logical, dtypes).ok
    # the reference the old gate built (every float input at fp16) is off by more than its budget here
    assert not _gate(exact, logical, ["float16"] * len(logical)).ok

    def one_weight_wrong(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        w = w.clone()
        w[3, 5] *= 1.02
        return _conv_relu6(x, w, b)

    wrong = _gate(StandIn(meta, one_weight_wrong), logical, dtypes)
    assert not wrong.ok and any("exceeds its budget" in p for p in wrong.problems), wrong.problems


def test_the_fingerprint_is_exact_whatever_its_slices_and_sees_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from ytk_hookspecs import admission

    t = torch.randn(3, 5, 7, 11).half().contiguous(memory_format=torch.channels_last)
    whole = admission._fingerprint(t)
    monkeypatch.setattr(admission, "_FP_SLICE", 7)
    assert admission._fingerprint(t) == whole
    assert admission._fingerprint(t.contiguous()) == whole           # the logical order, not the memory's
    swapped = t.clone()
    swapped[0, 0, 0, 0], swapped[0, 0, 0, 1] = t[0, 0, 0, 1], t[0, 0, 0, 0]
    assert admission._fingerprint(swapped) != whole                   # same values, another order
    bumped = t.contiguous().clone()
    bumped.view(torch.int16).view(-1)[100] += 1
    assert admission._fingerprint(bumped) != whole


class _Normalised(torch.nn.Module):
    """LiteMLA's division: ``relu(x) / (sum relu(x) + 1e-15)`` per row; a row that ReLU zeroes whole is 0/0 at fp16,
    where the epsilon rounds to zero, and 0 in fp32."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = torch.relu(x)
        return r / (r.sum(-1, keepdim=True) + 1e-15)


class _Log(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


def test_a_case_the_regions_own_ops_cannot_compute_says_why() -> None:
    """A case is skipped when the region's own ops are not finite on it; the reason told "overflow" for a LiteMLA
    whose fp16 0/0 came from a rounded epsilon, and for a region not finite even in fp32."""
    from ytk_hookspecs.admission import low_precision, reference_and_tolerance

    x = torch.randn(4, 16)
    x[1] = -x[1].abs()  # a row that ReLU zeroes whole
    program = _Normalised()
    _, _, why = reference_and_tolerance(program, low_precision(program, "fp16"), [x], "fp16", CPU, ["float16"])
    assert why == "skipped: the region's own ops give inf or NaN at fp16 on these inputs (fp32 is finite)"
    _, _, why = reference_and_tolerance(program, low_precision(program, "fp16"), [x.abs() + 0.1], "fp16", CPU,
                                        ["float16"])
    assert why == ""
    program = _Log()
    _, _, why = reference_and_tolerance(program, low_precision(program, "fp16"), [x], "fp16", CPU, ["float16"])
    assert why == "skipped: the region's own ops are not finite on these inputs, even in fp32"
