"""Cross builds for DRIVE Orin / Jetson: a real generated kernel built on this x86 host into an aarch64 plugin.

Device code for sm_87 comes from nvcc; host code from Debian's aarch64 cross compiler, linked against the
CUDA 13.0 runtime built for aarch64 (NVIDIA's wheel on PyPI, fetched by ``make test`` into
tests/data/cross/: README.md there). What comes out is checked with binutils' readelf and file(1) as a
user would check a .so before copying it to the car: ELF machine, needed libraries, exported symbols.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ytk_backend_nvcc.cross import cross_problems, elf_facts, target_os_runtime
from ytk_backend_nvcc.plugin import NvccBuilder
from ytk_backend_nvcc.toolchain import find_nvcc
from ytk_backend_templates.build import winner_source
from ytk_backend_templates.contract import plugin_meta
from ytk_backend_templates.regions import DwConvRegion
from ytk_backend_templates.variants import region_variants
from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import ArchSpec, BuildRequest
from ytk_hookspecs.plugin_info import read_plugin_description

from tests.conftest import run_cli

DATA = Path(__file__).parents[2] / "data"
TARGET_CUDA = DATA / "cross" / "cuda-13.0-aarch64"
TRT10 = DATA / "tensorrt" / "10.14" / "include"
AARCH64 = "arm64-sm87-linux-cu130-trt10"
#: what a plugin may need on the target: the C/C++ runtime, nothing of CUDA (static) or TensorRT (the engine's)
RUNTIME_LIBS = {"libstdc++.so.6", "libgcc_s.so.1", "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1",
                "libpthread.so.0"}

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")


def _toolchain() -> None:
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("aarch64-linux-gnu-g++ is not installed (`make test` installs Debian's g++-aarch64-linux-gnu "
                    "where it may: apt-get as root)")
    if not (TARGET_CUDA / "lib" / "libcudart_static.a").is_file():
        note = DATA / "cross" / "cuda-13.0-aarch64.FETCH_FAILED"
        why = f": {note.read_text().strip()}" if note.is_file() else ""
        pytest.skip(f"the aarch64 CUDA runtime is not in {TARGET_CUDA} (`make test` fetches it; "
                    f"tests/data/cross/README.md){why}")


def _dw_bundle(tmp_path: Path) -> Path:
    """The winning variant of a real template family (depthwise 3x3 + hardswish), as kernelgen writes it."""
    region = DwConvRegion(3, 1, "hardswish", 256)
    meta = plugin_meta(region, "DwOrin")
    header, source = winner_source(region_variants(region, sm=87, limit=1)[0], meta)
    return KernelSource(header=header, source=source, meta=meta).write(tmp_path / "DwOrin.module_source.py")


def _readelf(*args: str) -> str:
    tool = shutil.which("aarch64-linux-gnu-readelf") or "readelf"
    return subprocess.run([tool, *args], capture_output=True, text=True, check=True).stdout


@needs_nvcc
@pytest.mark.parametrize("api,entry_points", [("trt10-IPluginV3", {"getCreators", "setLoggerFinder"}),
                                              ("trt8-IPluginV2DynamicExt", {"getPluginCreators", "setLoggerFinder"}),
                                              ("torch-launcher", set())])
def test_a_generated_kernel_builds_into_an_aarch64_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          api: str, entry_points: set[str]) -> None:
    _toolchain()
    config = {}
    if api == "torch-launcher":
        monkeypatch.setenv("YTK_TARGET_CUDA", str(TARGET_CUDA))  # from the environment ...
    else:
        if not (TRT10 / "NvInferRuntime.h").is_file():
            pytest.skip("TensorRT 10.14 headers not fetched (tests/data/tensorrt/README.md)")
        monkeypatch.setenv("YTK_TENSORRT_INCLUDE", str(TRT10))
        config = {"target_cuda": str(TARGET_CUDA)}  # ... or [backends.nvcc] in ytk.toml
    so = tmp_path / "DwOrin.so"
    res = NvccBuilder().build_plugin(BuildRequest(source=_dw_bundle(tmp_path), plugin_name="DwOrin", arch=AARCH64,
                                                  output=so, engine_api=api), StageContext(config=config))

    assert "ARM aarch64" in subprocess.run(["file", str(so)], capture_output=True, text=True).stdout
    header = _readelf("-h", str(so))
    assert re.search(r"Machine:\s+AArch64", header)
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", _readelf("-d", str(so))))
    assert needed and needed <= RUNTIME_LIBS, needed  # no libcudart.so, no libnvinfer: both come with the engine
    exported = {ln.split()[-1] for ln in _readelf("--dyn-syms", "-W", str(so)).splitlines()
                if " GLOBAL " in ln and " UND " not in ln}
    desc = read_plugin_description(so)
    assert {"ytk_plugin_info", desc.launcher, *entry_points} <= exported
    assert (desc.cpu_arch, desc.sm, desc.engine_api) == ("aarch64", 87, api)
    # the builder read the same facts and wrote them into the build log
    assert "cross build for aarch64: AArch64" in res.log
    assert set(elf_facts(so).needed) == needed


@needs_nvcc
def test_a_plugin_the_target_os_cannot_load_is_refused_on_the_host(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Debian 12's cross toolchain links against glibc 2.36: the plugin needs GLIBC_2.34 symbols, which the
    # Ubuntu 20.04 of JetPack 5 / DRIVE OS 6 does not have. Caught here, not at dlopen on the target.
    _toolchain()
    monkeypatch.setenv("YTK_TARGET_CUDA", str(TARGET_CUDA))
    so = tmp_path / "DwOrin.so"
    with pytest.raises(StageError, match=r"would not load on JetPack 5 \(Ubuntu 20.04\): it requires GLIBC 2\.3\d "
                                         r"\(it has 2\.31\); set YTK_TARGET_SYSROOT"):
        NvccBuilder().build_plugin(BuildRequest(source=_dw_bundle(tmp_path), plugin_name="DwOrin",
                                                arch="arm64-sm87-jp5-cu130-trt10", output=so), StageContext())
    assert not so.exists()
    assert "GLIBC" in (tmp_path / "DwOrin.so.build.log").read_text()


@needs_nvcc
def test_everything_missing_is_listed_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("YTK_CROSS_CXX", shutil.which("g++") or "g++")  # a compiler for this host, not the target
    monkeypatch.setenv("YTK_TARGET_CUDA", str(tmp_path / "nothing"))
    monkeypatch.setenv("YTK_TARGET_SYSROOT", str(tmp_path / "no-rootfs"))
    monkeypatch.setenv("YTK_TENSORRT_INCLUDE", str(tmp_path))
    src = tmp_path / "Scale.module_source.py"
    from test_nvcc_builder import scale_bundle

    scale_bundle(src)
    with pytest.raises(StageError) as e:
        NvccBuilder().build_plugin(BuildRequest(source=src, plugin_name="Scale", arch="arm64-sm87-dos6010-cu114-trt86",
                                                output=tmp_path / "Scale.so", engine_api="trt8-IPluginV2DynamicExt"),
                                   StageContext())
    msg = str(e.value)
    assert "\n" not in msg
    for part in ("(1) nvcc here is CUDA 13.0, the target runs CUDA 11.4",
                 "no-rootfs (YTK_TARGET_SYSROOT) has no usr/lib",
                 "builds for x86_64", "not aarch64", f"not in {tmp_path / 'nothing'} (YTK_TARGET_CUDA)",
                 "and the TensorRT 8.6 headers: $YTK_TENSORRT_INCLUDE"):
        assert part in msg, (part, msg)
    assert not (tmp_path / "Scale.so").exists()
    # the probe says the same before any build is tried
    av = NvccBuilder().availability(ArchSpec.parse("arm64-sm87-dos6010-cu114-trt86"))
    assert not av.available and "YTK_TARGET_SYSROOT" in av.reason


@needs_nvcc
def test_build_plugin_cli_names_what_is_missing_with_exit_3(tmp_path: Path) -> None:
    from test_nvcc_builder import scale_bundle

    src = scale_bundle(tmp_path / "Scale.module_source.py")
    r = run_cli("embedded", "build-plugin", "-a", AARCH64, "--plugin-name", "Scale", "-s", src, "-o",
                tmp_path / "Scale.so", env={"YTK_TARGET_CUDA": str(tmp_path / "none"), "YTK_BUILDER": "nvcc"})
    assert r.code == 3, (r.code, r.stderr)  # a backend that cannot run here (README, exit codes)
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "missing:" in r.stderr and "YTK_TARGET_CUDA" in r.stderr


def test_the_target_os_runtime_is_known_for_drive_os_and_jetpack_releases() -> None:
    def rt(spec: str):  # type: ignore[no-untyped-def]
        return target_os_runtime(ArchSpec.parse(spec))

    assert rt("arm64-sm87-dos6010-cu114-trt86") == ("DRIVE OS 6.0.10 (Ubuntu 20.04)", (2, 31), (3, 4, 28))
    assert rt("arm64-sm87-jp6-cu126-trt10")[1] == (2, 35)
    assert rt("arm64-sm87-l4t36-cu126-trt10")[0] == "L4T r36 (Ubuntu 22.04)"
    assert rt("arm64-sm87-jp512-cu114-trt85")[1] == (2, 31)
    assert rt(AARCH64) is None  # plain linux: nothing to compare against


def test_a_configured_cross_compiler_that_is_not_there_is_named() -> None:
    nvcc = find_nvcc() or "nvcc"
    setup, problems = cross_problems(ArchSpec.parse("arm64-sm87-linux-cu130-trt10"), nvcc,
                                     {"cross_cxx": "/nonexistent/g++"})
    assert setup is None and any("/nonexistent/g++ (YTK_CROSS_CXX) is not an executable" in p for p in problems)
