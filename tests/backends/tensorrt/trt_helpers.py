"""Helpers of the TensorRT engine's tests: plugin .so files that describe themselves, and the sample files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ytk_hookspecs.models import PluginArtifact, PluginDescription, sha256_file
from ytk_hookspecs.plugin_info import c_snippet

SAMPLES = Path(__file__).parents[2] / "data" / "trtexec"


def describe(name: str = "DwConv3x3C16", *, namespace: str = "yasp", version: str = "1", num_inputs: int = 3,
             input_dtypes: list[str] | None = None, input_formats: list[str] | None = None,
             engine_api: str = "trt8-IPluginV2DynamicExt", sm: int = 87,
             cpu_arch: str = "aarch64") -> PluginDescription:
    dts = input_dtypes or (["float16"] + ["float32"] * (num_inputs - 1))
    return PluginDescription(name=name, namespace=namespace, version=version, num_inputs=num_inputs, num_outputs=1,
                             input_dtypes=dts, output_dtypes=["float16"],
                             input_formats=input_formats or ["kLINEAR"] * num_inputs, output_formats=["kLINEAR"],
                             sm=sm, cpu_arch=cpu_arch, engine_api=engine_api, launcher=f"ytk_launch_{name}",
                             builder="tests (self-description only)", source_sha256="0" * 64)


def build_described_so(path: Path, desc: PluginDescription) -> PluginArtifact:
    """A shared object that carries ``desc`` as its ytk self-description (no plugin code: the stand-in
    trtexec reads the description, as the real one would call the entry points)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build a test plugin .so")
    src = path.with_suffix(".c")
    src.write_text(c_snippet(desc))
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(path), str(src)], check=True, capture_output=True)
    return PluginArtifact(path=path, sha256=sha256_file(path), description=desc)


def tap_carved_fixture(fx: Path) -> dict[str, Any]:
    """Make ``fx/carved`` a --debug-taps prepare, as prepare would (ytk_core.stages.taps.add_taps on the two
    DwConv3x3C16 sites: each one's activation input and output become graph outputs, with their fp32 values
    from torch); returns every output's reference value, the model's own (y, z) and the taps'."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from ytk_core.frontend.loader import load_model
    from ytk_core.stages.taps import add_taps
    from ytk_hookspecs.models import CandidatesFile

    carved = fx / "carved"
    lm = load_model(fx / "model.py")
    m = lm.model
    with torch.no_grad():
        h = F.hardswish(m.c1(lm.args[0]))
        d = m.dw1(h)
        c3 = m.c3(F.relu(d) + h)
        d2 = m.dw2(c3)
    io = {"site0.in0": h, "site0.out0": d, "site1.in0": c3, "site1.out0": d2}
    np.savez(carved / "plugin_candidates" / "io.npz", **{k: v.numpy() for k, v in io.items()})
    cands = CandidatesFile.read(carved / "candidates.json")
    cands.candidates[0].files.io_npz = "plugin_candidates/io.npz"
    cands.write(carved / "candidates.json")
    add_taps(carved / "model.onnx", carved, carved / "candidates.json", carved / "model.reference.npz")
    with np.load(carved / "model.reference.npz") as z:
        values = {k: z[k] for k in z.files}
    values.update({"h": h.numpy(), "d": d.numpy(), "c3": c3.numpy(), "d2": d2.numpy()})
    return values
