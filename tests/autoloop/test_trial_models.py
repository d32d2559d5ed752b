"""Models that new-user trials wrote (tests/data, 2026-12-05), run as those users ran them: the autoloop on
the mock engine ends faster with numerics intact, and what once went wrong on them stays fixed."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO
from tests.helpers import ytk_inproc

pytestmark = pytest.mark.slow

ORIN = "arm64-sm87-dos6010-cu114-trt86"
MOCK = ["--engine", "mock", "--kernelgen", "mock", "--builder", "mock"]
MOCK_ENV = {"YTK_ENGINE": "mock", "YTK_KERNELGEN": "mock", "YTK_BUILDER": "mock"}


@pytest.mark.parametrize("model, env", [("tiny_seg_unet_model.py", {"UNET_SIZE": "1x64x64"}),
                                        ("tiny_gpt_model.py", {})])
def test_a_trial_model_gets_faster_with_numerics_intact(tmp_path, model, env):
    r = ytk_inproc("autoloop", REPO / "tests" / "data" / model, "-a", ORIN, "--workdir", tmp_path / "w",
                   "--max-rounds", "1", *MOCK, "--json", **env)
    assert r.code == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    assert rep["speedup"] > 1.05 and rep["simulated"], (rep["speedup"], rep["state"]["stop_reason"])
    assert rep["state"]["best"]["plugins"]
    # the verdicts at the top of the document (schema 2), and what a GPU's generator would take of the plugins
    assert rep["schema_version"] == 2 and rep["numerics_passed"] is True
    assert rep["stop_reason"] == rep["state"]["stop_reason"] != ""
    assert rep["on_real_gpu"].startswith("on a GPU the automatic kernel generator (templates) would take "), rep
    assert not any(c["reason"] and "internal carve error" in c["reason"]
                   for rnd in rep["state"]["rounds"] for c in rnd["candidates"])


def test_token_ids_are_never_a_plugin_input(tmp_path):
    """The trial carved the embedding by hand; its int64 ids passed as fp16 (wrong past 2048)."""
    out = tmp_path / "p"
    r = ytk_inproc("embedded", "prepare", REPO / "tests" / "data" / "tiny_gpt_model.py", "--onnx-out", out / "m.onnx",
                   "--npz-out", out / "m.npz", "--reference-out", out / "r.npz", "--plugin", "yasp::Emb=Embedding",
                   **MOCK_ENV)
    assert r.code == 2 and "has the int64 input" in r.stderr, r.stderr[-1500:]


def test_around_on_a_block_of_linears_says_what_it_grows_from(tmp_path):
    """SwiGLU:around said 'no heavy op (matmul/attention/conv)' of a block holding three Linears."""
    out = tmp_path / "p"
    r = ytk_inproc("embedded", "prepare", REPO / "tests" / "data" / "tiny_gpt_model.py", "--onnx-out", out / "m.onnx",
                   "--npz-out", out / "m.npz", "--reference-out", out / "r.npz", "--plugin", "yasp::G=SwiGLU:around",
                   **MOCK_ENV)
    assert r.code == 2 and "nothing :around grows from" in r.stderr and "Linear projections" in r.stderr, \
        r.stderr[-1500:]


def test_interpolates_of_different_sizes_are_told_apart_by_size(tmp_path):
    """call:F.interpolate over the U-Net's sites said 'max diff inf; ... an index or a scale'."""
    out = tmp_path / "p"
    r = ytk_inproc("embedded", "prepare", REPO / "tests" / "data" / "tiny_seg_unet_model.py", "--onnx-out",
                   out / "m.onnx", "--npz-out", out / "m.npz", "--reference-out", out / "r.npz", "--plugin",
                   "yasp::Up=call:torch.nn.functional.interpolate", **MOCK_ENV, UNET_SIZE="1x64x64")
    line = next((ln for ln in r.stderr.splitlines() if ln.startswith("error: ")), "")
    assert r.code == 2 and "output sizes are baked in differently" in line and "max diff inf" not in line, \
        r.stderr[-1500:]
    assert "one selector per output size" in line
