"""The hookspecs distribution: no torch, documented hooks, contract helpers."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

from ytk_hookspecs import specs
from ytk_hookspecs.kernel_source import KernelSource, KernelSourceError
from ytk_hookspecs.models import PluginMeta, TensorContract, Versioned
from ytk_hookspecs.models.base import ArtifactError
from ytk_hookspecs.roles import ROLE_PROTOCOLS, role_methods
from ytk_hookspecs.shape_expr import ShapeExprError, evaluate, evaluate_extents


def test_import_does_not_pull_torch():
    code = "import sys, ytk_hookspecs, ytk_hookspecs.models, ytk_hookspecs.kernel_source, ytk_hookspecs.plugin_info, " \
           "ytk_hookspecs.roles, ytk_hookspecs.loader, ytk_hookspecs.testing.suite; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("name", [n for n in dir(specs) if n.startswith("ytk_")])
def test_every_hookspec_is_documented_with_an_example(name):
    doc = inspect.getdoc(getattr(specs, name)) or ""
    assert "Example" in doc and ("Called" in doc or "called" in doc), name
    assert len(doc.splitlines()) >= 5


@pytest.mark.parametrize("role", sorted(ROLE_PROTOCOLS))
def test_every_role_method_is_documented(role):
    for name in role_methods(role):
        doc = inspect.getdoc(getattr(ROLE_PROTOCOLS[role], name)) or ""
        assert len(doc.splitlines()) >= 3, f"{role}.{name}"


def test_versioned_rejects_newer_schema(tmp_path):
    class Thing(Versioned):
        x: int

    p = tmp_path / "t.json"
    Thing(x=1).write(p)
    assert Thing.read(p).x == 1
    p.write_text('{"schema_version": 99, "x": 1}')
    with pytest.raises(ArtifactError, match="newer ytk"):
        Thing.read(p)
    p.write_text('{"schema_version": 1, "x": 1, "y": 2}')
    with pytest.raises(ArtifactError, match="Extra inputs|extra"):
        Thing.read(p)
    with pytest.raises(ArtifactError, match="not found"):
        Thing.read(tmp_path / "missing.json")


def test_shape_expressions_cover_strided_extents():
    shapes = [[4, 64, 135, 239]]
    assert evaluate("(in0[2] + 2*1 - 3)//2 + 1", shapes) == 68
    assert evaluate("cdiv(in0[3], 2)", shapes) == 120
    assert evaluate_extents({"N": "in0[0]", "C": "in0[1]", "HW": "in0[2]*in0[3]"}, shapes)["HW"] == 135 * 239
    with pytest.raises(ShapeExprError, match="unsupported"):
        evaluate("__import__('os')", shapes)
    with pytest.raises(ShapeExprError):
        evaluate("in0[9]", shapes)


def _meta(**kw):
    base = dict(plugin_name="DwConv3x3s1C256", inputs=[
        TensorContract(name="x", dtype="float16", format="kHWC8", shape=["N", "C", "H", "W"])],
        outputs=[TensorContract(name="y", dtype="float16", format="kHWC8", shape=["N", "C", "H", "W"])],
        extents={"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]"}, launcher="ytk_launch_dw")
    base.update(kw)
    return PluginMeta(**base)


def test_kernel_source_roundtrip_and_rename(tmp_path):
    src = KernelSource(header="#pragma once\n", source='extern "C" int f() { return 0; } // \'\'\' """',
                       meta=_meta(), generator="test")
    p = src.write(tmp_path / "a.module_source.py")
    back = KernelSource.read(p)
    assert back.source == src.source and back.meta == src.meta
    renamed = back.renamed("Other")
    assert renamed.meta.plugin_name == "Other" and back.meta.plugin_name == "DwConv3x3s1C256"


def test_kernel_source_is_never_executed(tmp_path):
    p = tmp_path / "evil.py"
    marker = tmp_path / "pwned"
    p.write_text(f"open({str(marker)!r}, 'w').write('x')\nCUDA_HEADER=''\n")
    with pytest.raises(KernelSourceError, match="missing CUDA_SOURCE"):
        KernelSource.read(p)
    assert not marker.exists()


def test_kernel_source_bad_meta_is_clear(tmp_path):
    p = tmp_path / "b.py"
    p.write_text("CUDA_HEADER=''\nCUDA_SOURCE=''\nPLUGIN_META_YAML='plugin_name: 1x\\n'\n")
    with pytest.raises(KernelSourceError, match="not a valid contract"):
        KernelSource.read(p)


def test_kernel_report_reads_older_schemas(tmp_path):
    """report.json gained copy_ms_per_site in schema 2 and a candidate's note in 3: old reports still read,
    newer ones are refused."""
    from ytk_hookspecs.models import KernelReport

    rep = KernelReport(plugin_name="P", backend="templates", job_id="j", region_kind="dw", measured_on="GPU",
                       simulated=False, error_budget="e", candidates=[], winner=None, floor_ms_per_site=[0.01],
                       copy_ms_per_site=[0.012])
    p = rep.write(tmp_path / "new.report.json")
    back = KernelReport.read(p)
    assert back.schema_version == 3 and back.copy_ms_per_site == [0.012]
    old = rep.model_dump(mode="json")
    old.pop("copy_ms_per_site")
    old["schema_version"] = 1
    (tmp_path / "old.report.json").write_text(json.dumps(old))
    assert KernelReport.read(tmp_path / "old.report.json").copy_ms_per_site == []
    old["schema_version"] = 4
    (tmp_path / "newer.report.json").write_text(json.dumps(old))
    with pytest.raises(ArtifactError, match="newer ytk"):
        KernelReport.read(tmp_path / "newer.report.json")


def test_compile_request_and_result_schema_2_read_schema_1(tmp_path):
    """CompileRequest gained debug_outputs and CompileResult debug_outputs_as/_note in schema 2: files of schema 1
    still read (with none said), newer ones are refused."""
    from ytk_hookspecs.models import DEBUG_TENSORS, CompileRequest, CompileResult

    req = CompileRequest(onnx=tmp_path / "m.onnx", npz=tmp_path / "m.npz", arch="a", precision="fp16",
                         workdir=tmp_path, debug_outputs=["h", "d"])
    res = CompileResult(engine=tmp_path / "e.plan", backend="tensorrt", backend_version="10.14.1", simulated=False,
                        device="GPU", debug_outputs_as=DEBUG_TENSORS)
    for model, field, cls in ((req, "debug_outputs", CompileRequest), (res, "debug_outputs_as", CompileResult)):
        back = cls.read(model.write(tmp_path / f"{cls.__name__}.json"))
        assert back.schema_version == 2 and getattr(back, field) == getattr(model, field)
        old = model.model_dump(mode="json")
        old.pop(field)
        old.pop("debug_outputs_note", None)
        old["schema_version"] = 1
        (tmp_path / "old.json").write_text(json.dumps(old))
        assert getattr(cls.read(tmp_path / "old.json"), field) in ([], None)
        old["schema_version"] = 3
        (tmp_path / "newer.json").write_text(json.dumps(old))
        with pytest.raises(ArtifactError, match="newer ytk"):
            cls.read(tmp_path / "newer.json")
    with pytest.raises(ArtifactError, match="debug_outputs_as"):
        bad = res.model_dump(mode="json") | {"debug_outputs_as": "debug outputs"}
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        CompileResult.read(tmp_path / "bad.json")


def test_every_module_declares_its_public_names_and_documents_them():
    """As pluggy does: each module of ytk-hookspecs says what it exports (``__all__``), everything it names
    exists, and every exported class and function has a docstring (a backend author reads these)."""
    import importlib
    import inspect
    import pkgutil

    import ytk_hookspecs

    undocumented, missing, no_all = [], [], []
    for m in pkgutil.walk_packages(ytk_hookspecs.__path__, "ytk_hookspecs."):
        mod = importlib.import_module(m.name)
        names = getattr(mod, "__all__", None)
        if names is None:
            no_all.append(m.name)
            continue
        for n in names:
            if not hasattr(mod, n):
                missing.append(f"{m.name}.{n}")
                continue
            obj = getattr(mod, n)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == m.name and not obj.__doc__:
                undocumented.append(f"{m.name}.{n}")
    assert not no_all, f"no __all__: {no_all}"
    assert not missing, f"__all__ names what the module lacks: {missing}"
    assert not undocumented, f"exported without a docstring: {undocumented}"
