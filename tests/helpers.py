"""Helpers for tests that need a prepared directory (shared across modules, computed once)."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from tests.conftest import REPO, Result

EVIT = REPO / "contrib" / "models" / "efficientvit_b1" / "model.py"
MNV3 = REPO / "contrib" / "models" / "mobilenetv3" / "model.py"
VIT = REPO / "contrib" / "models" / "tiny_vit" / "model.py"

SPEC_SIX = [
    "yasp::LiteMLAC384=LiteMLA:around@where=*m.stages.2.blocks.*.context_module.main",
    "yasp::LiteMLAC768=LiteMLA:around@where=*m.stages.3.blocks.*.context_module.main",
    "yasp::DwConv3x3s1Dyn=ConvNormAct@where=*.0.blocks.1.main.depth_conv,*.local_module.main.depth_conv,"
    "*.res0.main.depth_conv",
    "yasp::DwConv5x5s1C384=Conv2d@where=*m.stages.2.blocks.*.context_module.main.aggreg.0.0",
    "yasp::DwConv5x5s1C768=Conv2d@where=*m.stages.3.blocks.*.context_module.main.aggreg.0.0",
    "yasp::DwConv3x3s1C256=ConvNormAct@where=*.1.blocks.1.main.depth_conv,*.2.main.depth_conv",
]


@contextlib.contextmanager
def env(**kw: str):
    old = {k: os.environ.get(k) for k in kw}
    os.environ.update(kw)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def ytk_inproc(*args: str, **envs: str) -> Result:
    from ytk_core.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with env(**envs), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return Result(code, out.getvalue(), err.getvalue())


def prepare(model: Path, out: Path, selectors: list[str] = (), size: str = "1x64x96") -> Result:
    args = ["embedded", "prepare", model, "--onnx-out", out / "model.onnx", "--npz-out", out / "model.npz",
            "--reference-out", out / "model.reference.npz"]
    for s in selectors:
        args += ["--plugin", s]
    return ytk_inproc(*args, YTK_EXAMPLE_SIZE=size)
