"""The torch engine's inductor mode (the graph between plugins compiled with torch.compile), on the CPU.

On the CPU inductor emits C++ instead of Triton, but the engine's part is the same: where the graph is
cut (at every plugin), which tensors flow between the pieces, that plugins run as they are, and that
the fused engine computes what the op-by-op one does. Its speed is a GPU matter (benchmarks/).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_torch_engine_build import conv_model
from torch_engine_helpers import ort_run, rand

from ytk_backend_torch import plugin as torch_plugin
from ytk_backend_torch.fused import FusedProgram, engine_mode, split_segments
from ytk_backend_torch.program import Program, Step
from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import CompileRequest, ProfileRequest


def test_inductor_mode_end_to_end_on_cpu(tmp_path):
    p = conv_model(tmp_path, "model.onnx")
    x = rand(2, 3, 8, 10, seed=4)
    np.savez(tmp_path / "model.npz", x=x)
    req = CompileRequest(onnx=p, npz=tmp_path / "model.npz", arch="x86_64-sm90-linux-cu130-trt10", precision="fp32",
                         workdir=tmp_path / "work", options={"device": "cpu", "profile_iterations": "2",
                                                             "mode": "inductor"})
    res = torch_plugin.compile_engine(req, StageContext())
    assert res.extra["mode"] == "inductor" and "mode: inductor" in res.build_log.read_text()
    assert res.backend_version == f"{torch.__version__} (inductor)"
    prof = torch_plugin.profile_engine(ProfileRequest(compile=res, request=req, iterations=3, warmup=1),
                                       StageContext())
    # per-layer attribution is still op by op; latency and outputs come from the compiled engine
    assert {"node_Conv_1", "n0", "node_view"} <= {ly.name for ly in prof.layers}
    assert len(prof.iterations_ms) == 3
    assert list(prof.alternatives) == ["eager (op by op)"] and len(prof.alternatives["eager (op by op)"]) == 3
    out, ref = np.load(prof.outputs), ort_run(p, {"x": x})
    np.testing.assert_allclose(out["y"], ref[0], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(out["a"], ref[1], atol=1e-4, rtol=1e-4)


class _FakeProgram:
    """The parts of a Program the fused one reads: steps over slots, constants, inputs and outputs."""

    def __init__(self, steps: list[Step], n_slots: int, const: dict[int, torch.Tensor], outputs: list[int]) -> None:
        self.steps, self.n_slots, self.const_slots, self.output_slots = steps, n_slots, const, outputs
        self.input_slots, self.plan, self.device = [0], None, torch.device("cpu")
        last: dict[int, int] = {}
        for k, s in enumerate(steps):
            for j in s.in_slots:
                if j is not None:
                    last[j] = k
        for j, k in last.items():
            if j not in const and j not in outputs:
                steps[k].free.append(j)

    new_env = Program.new_env

    def __call__(self, inputs):  # type: ignore[no-untyped-def]
        env = self.new_env(inputs)
        for s in self.steps:
            s.run(env)
        return [env[j] for j in self.output_slots]


def test_the_graph_is_cut_at_every_plugin_and_plugins_run_as_they_are():
    calls = []

    def plugin(b):  # type: ignore[no-untyped-def]
        calls.append(1)  # a traced function would run this once, at compile time
        return b * 3

    # slots: 0 x, 1 a, 2 b, 3 c, 4 d, 5 the constant w
    steps = [Step("s0", "op", [], lambda x: x * 2, [0], [1]),
             Step("s1", "op", [], lambda a, w: a + w, [1, 5], [2]),
             Step("p", "plugin", [], plugin, [2], [3], kind="plugin"),
             Step("s3", "op", [], lambda c, a: c + a, [3, 1], [4])]
    fake = _FakeProgram(steps, 6, {5: torch.full((4,), 0.5)}, [4])
    segs = split_segments(fake)  # type: ignore[arg-type]
    assert [[s.name for s in seg.steps] for seg in segs] == [["s0", "s1"], ["p"], ["s3"]]
    assert (segs[0].in_slots, segs[0].out_slots) == ([0], [1, 2]), "a is read after the plugin, b by it"
    assert (segs[2].in_slots, segs[2].out_slots) == ([3, 1], [4])
    fused = FusedProgram(fake, "inductor")  # type: ignore[arg-type]
    assert [s.compiled for s in fused.segments] == [True, False, True] and fused.compiled_layers == 3
    x = torch.arange(4, dtype=torch.float32)
    for _ in range(2):
        torch.testing.assert_close(fused([x])[0], fake([x])[0])
    assert len(calls) == 4, "the plugin ran on every call of both programs, never traced away"


def test_an_unknown_mode_is_a_clear_error():
    assert engine_mode(None) == "eager" and engine_mode("inductor-max-autotune") == "inductor-max-autotune"
    with pytest.raises(StageError, match="mode='fast': expected one of eager, inductor, inductor-max-autotune"):
        engine_mode("fast")
