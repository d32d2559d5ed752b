"""TensorRT plugin shims: generated from plugin_meta, compiled against real TensorRT headers.

No machine here has TensorRT, so what needs it is checked against NVIDIA's public headers of each
version under tests/data/tensorrt/<version>/include (fetched, never committed: see the README
there); a version that is not present is skipped with the reason. Compile errors fail the test.
"""

from __future__ import annotations

import itertools
import random
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ytk_hookspecs import StageContext, shape_expr
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import ArchSpec, BuildRequest, PluginMeta, TensorContract
from ytk_hookspecs.plugin_info import read_plugin_description

from ytk_backend_nvcc import trt_shim
from ytk_backend_nvcc.builder import build
from ytk_backend_nvcc.toolchain import find_nvcc
from ytk_backend_nvcc.trt_shim import (Const, ExprBuilderTranslator, InDim, Lowering, Op, ShimError, engine_api_for,
                                       format_table, shim_source)

sys.path.insert(0, str(Path(__file__).parent))
from test_nvcc_builder import scale_bundle  # noqa: E402

HEADERS = Path(__file__).parents[2] / "data" / "tensorrt"
#: header set -> (TensorRT major, minor, the engine APIs it can build)
VERSIONS = {"8.6": (8, 6, ["trt8-IPluginV2DynamicExt"]),
            "10.14": (10, 14, ["trt8-IPluginV2DynamicExt", "trt10-IPluginV3"])}
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")


def headers(version: str) -> Path:
    inc = HEADERS / version / "include"
    if not (inc / "NvInferRuntime.h").is_file():
        note = HEADERS / version / "FETCH_FAILED"  # `make test` fetches them; a failed fetch says why here
        why = f"; the fetch failed: {note.read_text().strip()}" if note.is_file() else ""
        pytest.skip(f"TensorRT {version} headers not present in {inc} (tests/data/tensorrt/README.md says how to "
                    f"fetch them; they are not committed){why}")
    return inc


def t(name: str, dtype: str, shape: list[str], fmt: str = "kLINEAR", role: str = "activation") -> TensorContract:
    return TensorContract(name=name, dtype=dtype, format=fmt, role=role, shape=shape)


NCHW = {"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]"}
METAS = {
    # one input, one output, no workspace
    "one_input": PluginMeta(plugin_name="Relu", inputs=[t("x", "float16", ["N", "C", "H", "W"])],
                            outputs=[t("y", "float16", ["N", "C", "H", "W"])], extents=NCHW,
                            launcher="ytk_launch_Relu"),
    # kHWC8 fp16 activation + fp32 weights, a strided output shape, a workspace
    "dw_stride2": PluginMeta(
        plugin_name="DwConv", plugin_version="2",
        inputs=[t("x", "float16", ["N", "C", "H", "W"], "kHWC8"),
                t("w", "float32", ["C", "1", "3", "3"], role="weight"), t("b", "float32", ["C"], role="weight")],
        outputs=[t("y", "float16", ["N", "C", "(H + 2*1 - 3)//2 + 1", "(W + 2*1 - 3)//2 + 1"], "kHWC8")],
        extents={**NCHW, "OH": "(in0[2] + 2*1 - 3)//2 + 1", "OW": "(in0[3] + 2*1 - 3)//2 + 1"},
        launcher="ytk_launch_DwConv", workspace="ytk_workspace_DwConv"),
    # two outputs of different types and ranks, cdiv/max/min, an outK reference, the empty namespace, a tensor
    # name that would end a C string or comment if pasted
    "two_outputs": PluginMeta(
        plugin_name="Split2", plugin_namespace="",
        inputs=[t("x", "float32", ["N", "C", "H", "W"]), t('idx"*/\n', "int32", ["N"])],
        outputs=[t("y", "float16", ["N", "cdiv(C, 2)", "max(H, 1)", "min(W, 4096)"], "kHWC8"),
                 t("z", "int8", ["N", "out0[1] * 2"])],
        extents=NCHW, launcher="ytk_launch_Split2"),
}


def stub(meta: PluginMeta) -> str:
    """A translation unit with a host-only stand-in for the launcher (the shim is what is compiled here)."""
    lines = ["#include <cuda_runtime.h>", "#include <cstdint>",
             f'extern "C" int {meta.launcher}(const void* const*, void* const*, const int64_t*, void*, cudaStream_t) '
             "{ return 0; }"]
    if meta.workspace:
        lines.append(f'extern "C" size_t {meta.workspace}(const int64_t* e) {{ return (size_t)e[0] * 64; }}')
    return "\n".join(lines) + "\n"


def nvcc_c(cu: str, inc: Path, out: Path) -> subprocess.CompletedProcess:
    src = out.with_suffix(".cu")
    src.write_text(cu)
    return subprocess.run([find_nvcc(), "-c", "-std=c++17", "-Xcompiler", "-fPIC,-Wall", "-I", str(inc), "-o", str(out),
                           str(src)], capture_output=True, text=True, timeout=300)


# -- compiled against the real headers -------------------------------------------------------------------------
@needs_nvcc
@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_shims_compile_against_real_headers(tmp_path: Path, version: str) -> None:
    inc = headers(version)
    major, minor, apis = VERSIONS[version]
    jobs = [(m, api) for m, api in itertools.product(METAS, apis)]

    def one(job: tuple[str, str]) -> tuple[str, subprocess.CompletedProcess]:
        m, api = job
        cu = stub(METAS[m]) + shim_source(METAS[m], api, major, minor)
        return f"{m}/{api}", nvcc_c(cu, inc, tmp_path / f"{m}-{api}.o")

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, jobs))
    failed = {k: r.stdout + r.stderr for k, r in results if r.returncode != 0}
    assert not failed, "\n\n".join(f"== {k}\n{v[-3000:]}" for k, v in failed.items())
    # our code compiles without warnings (those from the TensorRT headers' own inline code aside)
    ours = [line for _, r in results for line in (r.stdout + r.stderr).splitlines()
            if re.search(r"\.cu[:(]\d+", line) and "warning" in line]
    assert not ours, "\n".join(ours)


@needs_nvcc
@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_shim_refuses_headers_of_another_version(tmp_path: Path, version: str) -> None:
    inc = headers(version)
    major, _, apis = VERSIONS[version]
    meta = METAS["one_input"]
    wrong = nvcc_c(stub(meta) + shim_source(meta, apis[0], major + 1, -1), inc, tmp_path / "wrong.o")
    assert wrong.returncode != 0 and "not the target's version" in wrong.stdout + wrong.stderr
    if major < 10:  # IPluginV3 does not exist before TensorRT 10
        v3 = nvcc_c(stub(meta) + shim_source(meta, "trt10-IPluginV3", major, -1), inc, tmp_path / "v3.o")
        assert v3.returncode != 0 and "IPluginV3 needs TensorRT 10" in v3.stdout + v3.stderr


def _arch_for(version: str) -> str:
    major, minor, _ = VERSIONS[version]
    return f"x86_64-sm90-linux-cu130-trt{major}{minor if major < 10 else ''}"


@needs_nvcc
@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_built_plugin_exports_what_tensorrt_loads(tmp_path: Path, version: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    inc = headers(version)
    monkeypatch.setenv(trt_shim.INCLUDE_ENV, str(inc))
    arch = ArchSpec.parse(_arch_for(version))
    api = engine_api_for(arch)
    src = scale_bundle(tmp_path / "Scale.module_source.py")
    out = tmp_path / "Scale.so"
    res = build(BuildRequest(source=src, plugin_name="Scale", arch=arch.spec, output=out, engine_api=api),
                StageContext())
    desc = read_plugin_description(out)
    assert desc.engine_api == api == res.description.engine_api
    assert f"TensorRT {VERSIONS[version][0]}.{VERSIONS[version][1]}" in desc.builder
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) not installed")
    nm = subprocess.run(["nm", "-D", str(out)], capture_output=True, text=True, check=True).stdout
    defined = {ln.split()[-1] for ln in nm.splitlines() if re.match(r"^[0-9a-f]+ [TDBR] ", ln)}
    undefined = {ln.split()[-1] for ln in nm.splitlines() if ln.split()[0] in ("U", "w")}
    entry = trt_shim.TRT_APIS[api][1]
    assert set(entry) | {"ytk_launch_Scale", "ytk_workspace_Scale", "ytk_plugin_info"} <= defined
    other = {"trt8-IPluginV2DynamicExt": "getCreators", "trt10-IPluginV3": "getPluginCreators"}[api]
    assert other not in defined
    # nothing of TensorRT's is referenced: the loading process provides nothing the library needs
    assert not {s for s in undefined if re.search(r"nvinfer|getPluginRegistry|createInfer|getLogger", s)}
    assert not [s for s in defined if s.startswith("_Z") and "ytk" in s], "the shim classes leak as symbols"
    readelf = shutil.which("readelf")
    if readelf:
        needed = subprocess.run([readelf, "-d", str(out)], capture_output=True, text=True, check=True).stdout
        assert "nvinfer" not in needed


@needs_nvcc
def test_v2_shim_for_trt10_target_also_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorRT 10 still loads IPluginV2DynamicExt; a request naming it gets it, with getPluginCreators."""
    inc = headers("10.14")
    monkeypatch.setenv(trt_shim.INCLUDE_ENV, str(inc))
    src = scale_bundle(tmp_path / "Scale.module_source.py")
    out = tmp_path / "Scale.so"
    build(BuildRequest(source=src, plugin_name="Scale", arch="x86_64-sm90-linux-cu130-trt10", output=out,
                       engine_api="trt8-IPluginV2DynamicExt"), StageContext())
    assert read_plugin_description(out).engine_api == "trt8-IPluginV2DynamicExt"
    if shutil.which("nm"):
        nm = subprocess.run(["nm", "-D", "--defined-only", str(out)], capture_output=True, text=True).stdout
        assert " getPluginCreators" in nm and " setLoggerFinder" in nm


# -- the expression translator -----------------------------------------------------------------------------------
def lower(expr: str, ranks: list[int] | None = None, names: dict[str, object] | None = None) -> object:
    lw = Lowering(ranks or [4, 4])
    lw.names.update(names or {})
    return lw.lower(expr, "test")


def test_constants_fold() -> None:
    assert lower("2*3 + 1") == Const(7)
    assert lower("cdiv(7, 2)") == Const(4) and lower("7 // 2") == Const(3) and lower("-7 // 2") == Const(-4)
    assert lower("max(3, 9) - min(3, 9)") == Const(6)
    assert lower("in0[2] * 1 + 0") == InDim(0, 2)
    assert lower("in0[2] // 1") == InDim(0, 2) and lower("in0[1] * 0") == Const(0)
    # (H + 2*1 - 3)//2 + 1: the padding arithmetic folds to one subtraction
    assert lower("(in0[2] + 2*1 - 3)//2 + 1") == Op("kSUM", Op("kFLOOR_DIV", Op("kSUB", InDim(0, 2), Const(1)),
                                                             Const(2)), Const(1))
    # extents are inlined, so constants fold across them
    assert lower("K - 1", names={"K": Const(3)}) == Const(2)


@pytest.mark.parametrize("expr,why", [("in0[1] // 0", "division by zero"), ("cdiv(in0[1], 2 - 2)", "division by zero"),
                                      ("in2[0]", "no input 2"), ("in0[4]", "no axis 4"), ("Q + 1", "unknown name"),
                                      ("in0[0] ** 2", "unsupported"), ("__import__('os')", "unsupported")])
def test_bad_expressions_are_refused(expr: str, why: str) -> None:
    with pytest.raises(ShimError, match=why):
        lower(expr)


def test_translator_emits_iexprbuilder_calls_once_per_subtree() -> None:
    tr = ExprBuilderTranslator()
    node = lower("(in0[2] + 2*1 - 3)//2 + 1")
    ref = tr.emit(node)
    again = tr.emit(lower("(in0[2] - 1)//2 + 1"))
    assert ref == again  # the same tree is built once
    text = "\n".join(tr.lines)
    assert "exprBuilder.constant(1)" in text and "exprBuilder.constant(2)" in text and "constant(3)" not in text
    assert text.count("exprBuilder.constant(1)") == 1  # the constant 1 is one expression, used twice
    assert "DimensionOperation::kSUB, *inputs[0].d[2]" in text and "kFLOOR_DIV" in text
    assert all(ln.startswith(("nvinfer1::IDimensionExpr const* t", "if (t")) for ln in tr.lines)
    with pytest.raises(ShimError, match="int32"):
        ExprBuilderTranslator().emit(Op("kSUM", InDim(0, 0), Const(2**40)))


def _eval(node: object, shapes: list[list[int]]) -> int:
    if isinstance(node, Const):
        return node.value
    if isinstance(node, InDim):
        return shapes[node.tensor][node.axis]
    assert isinstance(node, Op)
    a, b = _eval(node.a, shapes), _eval(node.b, shapes)
    return trt_shim._apply(node.op, a, b, "eval")


def test_lowering_keeps_the_meaning_of_every_expression() -> None:
    """Folded trees evaluate as shape_expr does, for random shapes (what IExprBuilder will compute)."""
    exprs = ["(in0[2] + 2*1 - 3)//2 + 1", "cdiv(in0[3] - 1, 2) * 2 + 0", "max(in0[1] - 4, 1) - -3",
             "min(in1[0] * 1, in0[0] + 0) + 2*3 - 6", "-(in0[2] - 10) // 3", "(in0[1] + 5 - 5 + 7 - 2) // 1"]
    rng = random.Random(0)
    for expr in exprs:
        node = lower(expr, [4, 1])
        for _ in range(50):
            shapes = [[rng.randint(1, 300) for _ in range(4)], [rng.randint(1, 300)]]
            assert _eval(node, shapes) == shape_expr.evaluate(expr, shapes), expr


# -- supportsFormatCombination ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(METAS))
def test_format_table_is_exactly_the_declared_one(name: str) -> None:
    meta = METAS[name]
    tensors = [*meta.inputs, *meta.outputs]
    dt = {"float16": "kHALF", "float32": "kFLOAT", "int32": "kINT32", "int8": "kINT8"}
    assert format_table(meta) == [(i, dt[x.dtype], x.format) for i, x in enumerate(tensors)]
    cpp = shim_source(meta, "trt10-IPluginV3", 10)
    types = re.search(r"kTypes\[\] = \{(.*?)\};", cpp, re.S).group(1)
    formats = re.search(r"kFormats\[\] = \{(.*?)\};", cpp, re.S).group(1)
    assert re.findall(r"DataType::(k\w+)", types) == [d for _, d, _ in format_table(meta)]
    assert re.findall(r"TensorFormat::(k\w+)", formats) == [f for _, _, f in format_table(meta)]
    # both interfaces decide through the one table: type and format equal at that position, nothing else
    assert "return type == kTypes[pos] && format == kFormats[pos];" in cpp


# -- strings reaching the C++ ------------------------------------------------------------------------------------
@pytest.mark.parametrize("field,value", [("plugin_namespace", 'yasp"; int x = 1; //'), ("plugin_namespace", "a b"),
                                         ("plugin_name", "Scale(){}"), ("plugin_name", "9lives"),
                                         ("plugin_version", '1"\n#include <x>'), ("launcher", "launch; system"),
                                         ("workspace", "ws()")])
def test_names_that_are_not_identifiers_are_refused(field: str, value: str) -> None:
    bad = METAS["one_input"].model_copy(update={field: value})  # model_copy does not validate: as a bad caller
    with pytest.raises(ShimError, match=field):
        shim_source(bad, "trt10-IPluginV3", 10)


def test_tensor_names_are_escaped_not_pasted() -> None:
    cpp = shim_source(METAS["two_outputs"], "trt8-IPluginV2DynamicExt", 8, 6)
    assert 'idx"*/\n' not in cpp
    assert r'"input 1 (idx\042*/\012)"' in cpp
    bad = METAS["one_input"].model_copy(update={"extents": {"N-1": "in0[0]"}})
    with pytest.raises(ShimError, match="extent name"):
        shim_source(bad, "trt10-IPluginV3", 10)
    with pytest.raises(ShimError, match="at least one input"):
        shim_source(METAS["one_input"].model_copy(update={"inputs": []}), "trt10-IPluginV3", 10)


# -- headers, versions, interfaces ---------------------------------------------------------------------------------
def test_interface_follows_the_arch() -> None:
    assert engine_api_for(ArchSpec.parse("arm64-sm87-dos6010-cu114-trt86")) == "trt8-IPluginV2DynamicExt"
    assert engine_api_for(ArchSpec.parse("x86_64-sm90-linux-cu130-trt10")) == "trt10-IPluginV3"
    assert "TensorRT 10" in trt_shim.api_problem("trt10-IPluginV3", ArchSpec.parse("arm64-sm87-dos6010-cu114-trt86"))
    assert "8.6" in trt_shim.api_problem("trt8-IPluginV2DynamicExt", ArchSpec.parse("x86_64-sm86-linux-cu118-trt85"))
    assert trt_shim.api_problem("trt8-IPluginV2DynamicExt", ArchSpec.parse("x86_64-sm90-linux-cu130-trt10")) == ""


def test_header_version_reads_both_spellings(tmp_path: Path) -> None:
    (tmp_path / "NvInferVersion.h").write_text(
        "#define NV_TENSORRT_MAJOR 8 //!< TensorRT major version.\n#define NV_TENSORRT_MINOR 6\n"
        "#define NV_TENSORRT_PATCH 1\n")
    assert trt_shim.header_version(tmp_path) == (8, 6, 1)
    (tmp_path / "NvInferVersion.h").write_text(
        "#define TRT_MAJOR_ENTERPRISE 10\n#define TRT_MINOR_ENTERPRISE 14\n#define TRT_PATCH_ENTERPRISE 1\n"
        "#define NV_TENSORRT_MAJOR TRT_MAJOR_ENTERPRISE //!< TensorRT major version.\n"
        "#define NV_TENSORRT_MINOR TRT_MINOR_ENTERPRISE\n#define NV_TENSORRT_PATCH TRT_PATCH_ENTERPRISE\n")
    assert trt_shim.header_version(tmp_path) == (10, 14, 1)


def _fake_headers(d: Path, major: int, minor: int) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "NvInferRuntime.h").write_text("")
    (d / "NvInferVersion.h").write_text(f"#define NV_TENSORRT_MAJOR {major}\n#define NV_TENSORRT_MINOR {minor}\n"
                                        "#define NV_TENSORRT_PATCH 0\n")
    return d


def test_missing_headers_name_the_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(trt_shim.INCLUDE_ENV, raising=False)
    monkeypatch.delenv(trt_shim.HOME_ENV, raising=False)
    monkeypatch.setattr(trt_shim, "STANDARD_INCLUDES", (str(tmp_path / "nothing"),))
    with pytest.raises(StageError, match=f"{trt_shim.INCLUDE_ENV}.*{trt_shim.HOME_ENV}"):
        trt_shim.find_tensorrt_include()
    monkeypatch.setenv(trt_shim.INCLUDE_ENV, str(tmp_path))
    with pytest.raises(StageError, match=f"\\${trt_shim.INCLUDE_ENV}=.*no NvInferRuntime.h"):
        trt_shim.find_tensorrt_include()
    monkeypatch.delenv(trt_shim.INCLUDE_ENV)
    monkeypatch.setenv(trt_shim.HOME_ENV, str(tmp_path / "trt"))
    _fake_headers(tmp_path / "trt" / "include", 8, 6)
    assert trt_shim.find_tensorrt_include() == tmp_path / "trt" / "include"
    # the headers must be the target's TensorRT
    with pytest.raises(StageError, match=r"are 8\.6\.0 but target .* runs TensorRT 10"):
        trt_shim.headers_for(ArchSpec.parse("x86_64-sm90-linux-cu130-trt10"))
    assert trt_shim.headers_for(ArchSpec.parse("arm64-sm87-dos6010-cu114-trt86"))[1] == (8, 6, 0)
    with pytest.raises(StageError, match="runs TensorRT 8.5"):
        trt_shim.headers_for(ArchSpec.parse("x86_64-sm86-linux-cu118-trt85"))


def test_generated_cpp_is_readable() -> None:
    cpp = shim_source(METAS["dw_stride2"], "trt8-IPluginV2DynamicExt", 8, 6)
    assert "e[4] = (floorDiv((dimOf(in, kNbInputs, 0, 2, ok) - INT64_C(1)), INT64_C(2), ok) + INT64_C(1));" in cpp
    assert "// OH = (in0[2] + 2 * 1 - 3) // 2 + 1" in cpp
    assert 'constexpr char kDisplayName[] = "yasp::DwConv v2";' in cpp
    assert "return ytk_workspace_DwConv(e);" in cpp
    for line in cpp.splitlines():
        assert len(line) <= 160, line


# -- with TensorRT itself (none here: skipped; runs unchanged on a machine that has it) ---------------------------
@needs_nvcc
def test_tensorrt_loads_the_library_and_finds_both_namespaces(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    trt = pytest.importorskip("tensorrt", reason="TensorRT's Python package is not installed here")
    major, minor = (int(x) for x in trt.__version__.split(".")[:2])
    version = next((v for v, (a, b, _) in VERSIONS.items() if (a, b) == (major, minor) or (a == major >= 10)), None)
    if version is None:
        pytest.skip(f"no header set here for TensorRT {trt.__version__}")
    monkeypatch.setenv(trt_shim.INCLUDE_ENV, str(headers(version)))
    arch = ArchSpec.parse(f"x86_64-sm90-linux-cu130-trt{major}{minor if major < 10 else ''}")
    api = engine_api_for(arch)
    src = scale_bundle(tmp_path / "Scale.module_source.py", name="YtkShimProbe")
    out = tmp_path / "YtkShimProbe.so"
    build(BuildRequest(source=src, plugin_name="YtkShimProbe", arch=arch.spec, output=out, engine_api=api),
          StageContext())
    registry = trt.get_plugin_registry()
    registry.load_library(str(out))
    find = registry.get_creator if api == "trt10-IPluginV3" else registry.get_plugin_creator
    for namespace in ("yasp", ""):
        assert find("YtkShimProbe", "1", namespace) is not None, namespace
