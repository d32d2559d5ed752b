"""Known TensorRT failures explained in one line: on public logs, and on their line shapes with our plugins."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stages.carved_fixture import make_fixture
from trt_helpers import SAMPLES, describe
from ytk_backend_tensorrt.explain import LoadContext, explain, last_error
from ytk_backend_tensorrt.versions import TrtVersion
from ytk_hookspecs.models import PluginArtifact

DYN86 = LoadContext(version=TrtVersion(8, 6, 1), flag="--dynamicPlugins")
DYN10 = LoadContext(version=TrtVersion(10, 14, 1), flag="--dynamicPlugins")


@pytest.fixture(scope="module")
def carved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ONNX with two custom-op nodes yasp::DwConv3x3C16 v1 (DwConv3x3C16_0/_1), 3 inputs each."""
    return make_fixture(tmp_path_factory.mktemp("fx")) / "carved" / "model.onnx"


def artifact(**kw) -> PluginArtifact:  # type: ignore[no-untyped-def]
    name = kw.get("name", "DwConv3x3C16")
    return PluginArtifact(path=Path(f"/plugins/{name}.so"), sha256="0" * 64, description=describe(**kw))


def one(log: str, plugins: list[PluginArtifact], onnx: Path | None, precision: str = "fp16",
        load: LoadContext = DYN86) -> str:
    lines = explain(log, plugins, onnx, precision, load)
    assert len(lines) == 1, lines
    assert "\n" not in lines[0]
    return lines[0]


# -- Error 9 ---------------------------------------------------------------------------------------------------
def error9(layer: str) -> str:
    """The two lines trtexec prints (line shape of DerryHub/BEVFormer_tensorrt#105, TensorRT 10.0.1.6)."""
    return (f"[12/04/2026-10:00:00] [E] Error[9]: {layer}: could not find any supported formats consistent with "
            "input/output data types\n[12/04/2026-10:00:00] [E] Error[9]: [pluginV2Builder.cpp::reportPluginError::23] "
            f"Error Code 9: Internal Error ({layer}: could not find any supported formats consistent with input/output "
            "data types)\n")


def test_public_error9_names_the_layer(carved: Path) -> None:
    for rel, layer in (("10.0/error9_public.log", "/MultiScaleDeformableAttnTRT"),
                       ("8.4/error9_public.log", "PillarScatterPlugin_0")):
        msg = one((SAMPLES / rel).read_text(), [artifact()], carved)
        assert f"Error 9 at layer '{layer}'" in msg
        assert "DwConv3x3C16_0 (yasp::DwConv3x3C16 v1)" in msg  # what the ONNX does have


def test_error9_arity(carved: Path) -> None:
    msg = one(error9("DwConv3x3C16_0"), [artifact(num_inputs=1)], carved)
    assert msg.startswith("TensorRT Error 9 at plugin yasp::DwConv3x3C16 v1 (DwConv3x3C16.so), node DwConv3x3C16_0")
    assert "3 inputs (1 activation(s) + 2 lifted weight(s))" in msg and "declares 1 input(s)" in msg
    assert "arity mismatch" in msg and "[float16/kLINEAR] -> [float16/kLINEAR]" in msg


def test_error9_fp16_plugin_in_fp32_engine(carved: Path) -> None:
    msg = one(error9("DwConv3x3C16_1"), [artifact()], carved, precision="fp32")
    assert "node DwConv3x3C16_1" in msg and "input 0 (c3) is declared float16" in msg and "built fp32" in msg


def test_error9_format_bound_to_fp16(carved: Path) -> None:
    p = artifact(input_dtypes=["float32", "float32", "float32"], input_formats=["kHWC8", "kLINEAR", "kLINEAR"])
    msg = one(error9("DwConv3x3C16_0"), [p], carved)
    assert "input 0 is declared float32/kHWC8" in msg and "FP16 only" in msg


def test_error9_with_nothing_to_blame(carved: Path) -> None:
    msg = one(error9("DwConv3x3C16_0"), [artifact(input_formats=["kHWC8", "kLINEAR", "kLINEAR"])], carved)
    assert ("arity and dtypes match node DwConv3x3C16_0" in msg
            and "[float16/kHWC8, float32/kLINEAR, float32/kLINEAR]" in msg)


def test_error9_of_an_unnamed_v3_layer_with_one_plugin_node(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Scale", ["x"], ["y"], name="scale0", domain="trt.plugins", plugin_namespace="yasp",
                            plugin_version="1")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])])
    onnx.save(helper.make_model(g), str(tmp_path / "m.onnx"))
    log = ("Error Code 9: Internal Error ((Unnamed Layer* 1) [PluginV3_V3ONE]: could not find any supported formats "
           "consistent with input/output data types)")
    msg = one(log, [artifact(name="Scale", num_inputs=2, engine_api="trt10-IPluginV3")], tmp_path / "m.onnx",
              load=DYN10)
    assert "node scale0 has 1 inputs" in msg and "declares 2 input(s)" in msg


# -- Plugin not found ------------------------------------------------------------------------------------------
def test_public_plugin_not_found_lists_what_is_registered(carved: Path) -> None:
    for rel, name in (("8.0/plugin_not_found_public.log", "Custom"), ("9.2/plugin_not_found_public.log", "DCNv2_TRT")):
        msg = one((SAMPLES / rel).read_text(), [artifact()], carved)
        assert msg.startswith(f"TensorRT found no plugin ::{name} v1: ")
        assert "DwConv3x3C16.so registers yasp::DwConv3x3C16 v1 and ::DwConv3x3C16 v1" in msg
        assert f"none registers {name}" in msg


# Reconstructions (tests/data/trtexec/README.md): the line shapes of the public 8.0/9.2 samples with the 8.6.1
# importer location, and TensorRT 10's registry and checker lines, each with ytk's plugin names.
NOT_FOUND_86 = """[I] [TRT] No importer registered for op: DwConv3x3C16. Attempting to import as plugin.
[I] [TRT] Searching for plugin: DwConv3x3C16, plugin_version: 1, plugin_namespace: yasp
[E] [TRT] 3: getPluginCreator could not find plugin: DwConv3x3C16 version: 1
[E] [TRT] ModelImporter.cpp:771: While parsing node number 2 [DwConv3x3C16 -> "d"]:
[E] [TRT] ModelImporter.cpp:777: ERROR: builtin_op_importers.cpp:5404 In function importFallbackPluginImporter:
[8] Assertion failed: creator && "Plugin not found, are the plugin name, version, and namespace correct?"
"""
NOT_FOUND_10 = """[E] [TRT] IPluginRegistry::getCreator: Error Code 4: API Usage Error (Cannot find plugin: \
DwConv3x3C16, version: 1, namespace:yasp.)
[E] [TRT] ModelImporter.cpp:949: While parsing node number 2 [DwConv3x3C16 -> "d"]:
[E] [TRT] ModelImporter.cpp:954: ERROR: onnxOpCheckers.cpp:781 In function checkFallbackPluginImporter:
[6] creator && "Plugin not found, are the plugin name, version, and namespace correct?"
"""


def test_plugin_not_found_version_differs(carved: Path) -> None:
    msg = one(NOT_FOUND_86, [artifact(version="2")], carved)
    assert msg.startswith("TensorRT found no plugin yasp::DwConv3x3C16 v1 for node DwConv3x3C16_0: ")
    assert ("registers yasp::DwConv3x3C16 v2 and ::DwConv3x3C16 v2" in msg
            and "has version '2' where the node asks '1'" in msg)


def test_plugin_not_found_tensorrt_10(carved: Path) -> None:
    msg = one(NOT_FOUND_10, [artifact(name="Other", engine_api="trt10-IPluginV3")], carved, load=DYN10)
    assert msg.startswith("TensorRT found no plugin yasp::DwConv3x3C16 v1 for node DwConv3x3C16_0: ")
    assert "Other.so registers yasp::Other v1 and ::Other v1" in msg and "none registers DwConv3x3C16" in msg


def test_plugin_not_found_because_of_how_it_was_loaded(carved: Path) -> None:
    old = one(NOT_FOUND_86, [artifact()], carved, load=LoadContext(TrtVersion(8, 5, 3), "--plugins"))
    assert "registers nothing when loaded with --plugins" in old and "from 8.6 on" in old
    bare = one(NOT_FOUND_86, [artifact(engine_api="torch-launcher")], carved)
    assert "registers nothing TensorRT can use (a bare launcher for the torch engine" in bare
    v3_on_86 = one(NOT_FOUND_86, [artifact(engine_api="trt10-IPluginV3")], carved)
    assert "an trt10-IPluginV3 plugin, which TensorRT 8.6.1 does not load" in v3_on_86
    none = one(NOT_FOUND_86, [], carved)
    assert "no plugin library was supplied" in none


def test_engine_load_without_the_creator(carved: Path) -> None:
    msg = one((SAMPLES / "8.5/deserialize_public.log").read_text(), [artifact()], carved)
    assert msg.startswith("TensorRT could not deserialize the engine") and "DwConv3x3C16.so registers" in msg


def test_missing_entry_point(carved: Path) -> None:
    log = (SAMPLES / "8.6/missing_symbol_public.log").read_text()
    msg = one(log, [artifact(), artifact(name="Bare", engine_api="torch-launcher")], carved)
    assert msg.startswith("TensorRT 8.6.1 loads plugin libraries through getPluginCreators, which is not there: ")
    assert "Bare.so is torch-launcher, exporting no TensorRT entry point" in msg and "DwConv3x3C16.so" not in msg


def test_nothing_known_and_the_last_error() -> None:
    log = ("[E] Error[2]: [builder.cpp::buildSerializedNetwork::743] Error Code 2: Internal Error (Assertion engine != "
           "nullptr failed. )\n[E] Engine could not be created from network\n[E] Engine set up failed\n"
           "&&&& FAILED TensorRT.trtexec [TensorRT v8601] # trtexec --onnx=m.onnx\n")
    assert explain(log, [], None, "fp16", DYN86) == []
    assert last_error(log).startswith("[E] Error[2]: [builder.cpp::buildSerializedNetwork::743]")
    assert last_error("&&&& FAILED TensorRT.trtexec # x\n").startswith("&&&& FAILED")
