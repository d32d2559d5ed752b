"""Emission and nvcc compilation of every template variant, for sm_90 (H100/H200) and sm_87 (Orin).

CPU only: device code of every variant of every region family is compiled with ptxas (cubin) for
sm_90, in parallel, and checked for register spills that would make a variant pointless; for sm_87
the variants are a subset of sm_90's from the same text (only the prelude reads ``__CUDA_ARCH__``),
so one variant per family and stage is compiled there. One winner bundle per family is built into
a real plugin .so through the nvcc builder.
"""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from ytk_backend_nvcc.toolchain import find_nvcc
from ytk_backend_templates.build import winner_source
from ytk_backend_templates.contract import plugin_meta
from ytk_backend_templates.emit_common import PRELUDE
from ytk_backend_templates.emit_dwconv import DwPoint, Ring, Strip, Tiled
from ytk_backend_templates.regions import Conv1x1Region, DwConvLNRegion, DwConvRegion, LiteMLARegion, SERegion
from ytk_backend_templates.variants import region_variants
from ytk_hookspecs import StageContext
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import BuildRequest
from ytk_hookspecs.plugin_info import read_plugin_description

pytestmark = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")

FAMILIES = {
    "dw3x3s1_static": DwConvRegion(3, 1, "hardswish", 256),
    "dw5x5s1_static": DwConvRegion(5, 1, "none", 384),
    "dw3x3s2_static": DwConvRegion(3, 2, "hardswish", 64),
    "dw3x3s1_dynamic": DwConvRegion(3, 1, "hardswish", None),
    "dw7x7s2_gelu": DwConvRegion(7, 2, "gelu", 64, has_bias=False),
    "litemla_joined": LiteMLARegion(16, 1e-15, True, 384),
    "litemla_prejoined": LiteMLARegion(16, 1e-15, False, None),
    "pw_c32to128_hardswish": Conv1x1Region("hardswish", 32, 128),
    "pw_dynamic": Conv1x1Region("none", None, None),
    "pw_grouped_dynamic": Conv1x1Region("none", None, None, 16, 16),
    "se_c96_silu_sigmoid": SERegion("silu", "sigmoid", 96, 24),
    "se_dynamic_relu_hardsigmoid_nobias": SERegion("relu", "hardsigmoid", None, None, False, False),
    "dwln_7x7_c96": DwConvLNRegion(7, 1, 1e-6, 96),
    "dwln_dynamic_3x3s2_nobias_nhwc": DwConvLNRegion(3, 2, 1e-5, None, has_bias=False, closed=False),
}


def _one_per_stage(variants: list) -> list:  # type: ignore[type-arg]
    seen: dict[object, object] = {}
    for v in variants:
        seen.setdefault(v.params.get("stage"), v)
    return list(seen.values())


def _cubin(args: tuple[str, int, Path]) -> tuple[str, int, int, str]:
    family, sm, out = args
    variants = region_variants(FAMILIES[family], sm=sm)
    if sm != 90:
        variants = _one_per_stage(variants)
    cu = out / f"{family}_{sm}.cu"
    cu.write_text(PRELUDE + "\n".join(v.body for v in variants))
    # every nvcc and ptxas warning an error (test_templates_cuh.py's sample relies on this for these families)
    p = subprocess.run([find_nvcc(), "-cubin", "-O3", "-std=c++17", f"-arch=sm_{sm}", "-Werror", "all-warnings",
                        "-Xptxas", "-v", "-o", str(out / f"{family}_{sm}.cubin"), str(cu)], capture_output=True,
                       text=True)
    return family, sm, p.returncode, p.stdout + p.stderr


def test_every_variant_compiles_for_sm90_and_sm87(tmp_path: Path) -> None:
    jobs = [(f, sm, tmp_path) for f in FAMILIES for sm in (90, 87)]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(_cubin, jobs))
    failed = [(f, sm, log[-1500:]) for f, sm, rc, log in results if rc != 0]
    assert not failed, failed
    kernels = 0
    for f, sm, _, log in results:
        kernels += len(re.findall(r"Compiling entry function", log))
        spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", log)]
        # Register-capped variants may spill a few words; none may spill heavily.
        assert max(spills, default=0) <= 64, (f, sm, max(spills))
    n_variants = sum(len(region_variants(r, sm=90)) for r in FAMILIES.values())
    n_sm87 = sum(len(_one_per_stage(region_variants(r, sm=87))) for r in FAMILIES.values())
    assert n_variants >= 60 and n_sm87 >= len(FAMILIES)
    assert kernels >= n_variants + n_sm87  # one or two kernels per variant compiled


def test_tma_ring_variants_only_where_the_gpu_has_a_tensor_memory_accelerator() -> None:
    for family in ("dw3x3s1_static", "dw5x5s1_static", "dw3x3s2_static", "dw3x3s1_dynamic"):
        region = FAMILIES[family]
        sm90 = [v.name for v in region_variants(region, sm=90)]
        assert sm90[0].startswith("mma" if region.k == 5 else "tma"), (family, sm90[:3])  # measured best first
        for sm in (0, 87):
            names = [v.name for v in region_variants(region, sm=sm)]
            assert not [n for n in names if n.startswith(("tma", "mma"))] and set(names) < set(sm90)
    assert not [v for v in region_variants(FAMILIES["dw7x7s2_gelu"], sm=90) if v.name.startswith("tma")]


def test_tensor_core_taps_only_on_sm90_stride1_3x3_5x5_with_64_channel_blocks() -> None:
    """Stage mma: sm_90+ (it rides the TMA ring), stride 1, 3x3 or 5x5, C a multiple of 64 or
    runtime; every such variant declares its weights: fp16 (the harness widens the budget only for
    those) or an exact hi + lo pair; every ring point (mma and tma) stores its output through the TMA
    (16-channel blocks also without: their own stores measured faster at C = 16)."""
    def mma(region, sm=90):  # type: ignore[no-untyped-def]
        return [v for v in region_variants(region, sm=sm) if v.params["stage"] == "mma"]

    for region in (FAMILIES["dw5x5s1_static"], DwConvRegion(5, 1, "relu", None), DwConvRegion(5, 1, "none", 768),
                   FAMILIES["dw3x3s1_static"], FAMILIES["dw3x3s1_dynamic"]):
        got = mma(region)
        assert got and all(v.params["weights"] in ("fp16", "hilo") and v.params["cb"] == 64 for v in got), region
        assert {v.params["weights"] for v in got} == {"fp16", "hilo"}
        assert not mma(region, sm=87) and not mma(region, sm=0)
    for region in (FAMILIES["dw3x3s2_static"], FAMILIES["dw7x7s2_gelu"], DwConvRegion(5, 1, "relu", 96),
                   DwConvRegion(5, 2, "relu", 128), DwConvRegion(7, 1, "relu", 128)):
        assert not mma(region), region
    others = [v for v in region_variants(FAMILIES["dw5x5s1_static"], sm=90) if v.params["stage"] != "mma"]
    assert others and not [v for v in others if "weights" in v.params]
    for family in ("dw3x3s1_static", "dw5x5s1_static", "dw3x3s2_static", "dw3x3s1_dynamic"):
        ring = [v for v in region_variants(FAMILIES[family], sm=90) if v.params["stage"] in ("tma", "mma")]
        assert ring and all(v.params["ot"] == 1 or v.params["cb"] == 16 for v in ring), family


def test_a_tma_winner_builds_into_an_sm90_plugin(tmp_path: Path) -> None:
    from ytk_backend_nvcc.plugin import NvccBuilder

    region = FAMILIES["dw3x3s1_dynamic"]
    meta = plugin_meta(region, "TmaWinner")
    v = region_variants(region, limit=1, sm=90)[0]
    assert v.params["stage"] == "tma"
    header, source = winner_source(v, meta)
    src = KernelSource(header=header, source=source, meta=meta).write(tmp_path / "TmaWinner.module_source.py")
    so = tmp_path / "TmaWinner.so"
    NvccBuilder().build_plugin(BuildRequest(source=src, plugin_name="TmaWinner", arch="x86_64-sm90-linux-cu130-trt10",
                                            output=so), StageContext())
    assert read_plugin_description(so).sm == 90


@pytest.mark.parametrize("family", ["dw3x3s1_dynamic", "litemla_joined", "pw_grouped_dynamic",
                                    "dwln_dynamic_3x3s2_nobias_nhwc"])
def test_a_winner_bundle_builds_into_a_plugin(tmp_path: Path, family: str) -> None:
    from ytk_backend_nvcc.plugin import NvccBuilder

    region = FAMILIES[family]
    meta = plugin_meta(region, "Winner")
    v = region_variants(region, limit=1)[0]
    header, source = winner_source(v, meta)
    assert v.launcher not in source and meta.launcher in source
    src = KernelSource(header=header, source=source, meta=meta).write(tmp_path / "Winner.module_source.py")
    so = tmp_path / "Winner.so"
    NvccBuilder().build_plugin(BuildRequest(source=src, plugin_name="Winner", arch="x86_64-sm87-linux-cu130-trt10",
                                            output=so), StageContext())
    desc = read_plugin_description(so)
    assert desc.launcher == meta.launcher and desc.sm == 87
    assert desc.num_inputs == len(meta.inputs)


def test_per_shape_dispatch_is_emitted_only_when_it_pays_and_compiles(tmp_path: Path) -> None:
    from ytk_backend_templates.dispatch import dispatch_variant
    from ytk_backend_templates.regions import SiteShape
    from ytk_backend_templates.scoring import Scored
    from ytk_hookspecs.models import CandidateScore

    region = Conv1x1Region("none", None, None)
    meta = plugin_meta(region, "Conv1x1s1Dyn")
    shapes = [SiteShape(((4, 16, 64, 96), (16, 16, 1, 1), (16,)), 1),
              SiteShape(((4, 1024, 8, 12), (256, 1024, 1, 1), (256,)), 4)]
    a, b, c = region_variants(region)[:3]

    def scored(v, ms):  # type: ignore[no-untyped-def]
        return Scored(v, CandidateScore(variant=v.name), total_ms=ms[0] + 4 * ms[1], shape_ms=list(ms))

    # a is best in total, b is best on the big shape: dispatch a on shape 0, b on shape 1
    d = dispatch_variant([scored(a, (0.10, 0.05)), scored(b, (0.30, 0.02)), scored(c, (0.5, 0.5))], shapes, meta)
    assert d is not None and d.params["default"] == a.name
    assert d.params["dispatch"] == f"shape0={a.name};shape1={b.name}"
    assert "e[1] == 1024 && e[2] == 8 && e[3] == 12 && e[4] == 256" in d.body
    assert d.body.count('extern "C"') == 1 and c.name not in d.name
    header, source = winner_source(d, meta)
    assert meta.launcher in source and d.launcher not in source
    cu = tmp_path / "dispatch.cu"
    cu.write_text(source)
    p = subprocess.run([find_nvcc(), "-cubin", "-O3", "-arch=sm_90", "-o", str(tmp_path / "d.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    # one variant best everywhere, or a saving under 3%: no dispatch
    assert dispatch_variant([scored(a, (0.1, 0.02)), scored(b, (0.3, 0.05))], shapes, meta) is None
    assert dispatch_variant([scored(a, (0.10, 0.05)), scored(b, (0.30, 0.049))], shapes, meta) is None
    # a part that holds its weights in fp16 makes the dispatch one too (the harness judges it with that
    # rounding's budget; without, a shape routed to a tensor-core variant fails the fp32-weight budget)
    assert "weights" not in d.params
    dw = DwConvRegion(3, 1, "hardswish", None)
    dmeta = plugin_meta(dw, "DwConv3x3s1Dyn")
    ring = {v.params["stage"]: v for v in reversed(region_variants(dw, sm=90))}
    fp32, fp16 = ring["tma"], ring["mma"]
    assert fp16.params["weights"] == "fp16" and "weights" not in fp32.params
    dshapes = [SiteShape(((4, 16, 64, 96), (16, 9), (16,)), 1), SiteShape(((4, 512, 8, 12), (512, 9), (512,)), 4)]
    mixed = dispatch_variant([scored(fp32, (0.10, 0.05)), scored(fp16, (0.30, 0.02))], dshapes, dmeta)
    assert mixed is not None and mixed.params["weights"] == "fp16"


def test_fast_division_is_exact(tmp_path: Path) -> None:
    """The prelude's FastDiv (the pipelined kernels' item -> tile split) equals integer division for
    every divisor a launch can pass and dividends over the whole int range; built and run on the host."""
    src = tmp_path / "fastdiv.cu"
    src.write_text(PRELUDE + r"""
#include <cstdio>
int main() {
  const int xs[] = {0, 1, 2, 3, 7, 63, 64, 65, 1000, 65535, 65536, 123456789, 1 << 30, 2147483646, 2147483647};
  long long checked = 0;
  for (int d = 1; d <= 70000; d += (d < 4096 ? 1 : 97)) {
    ytk_tpl::FastDiv f(d);
    for (int x : xs) { if (f.div(x) != x / d) { printf("FAIL %d / %d = %d\n", x, d, f.div(x)); return 1; } ++checked; }
    for (int x = 0; x < 3 * d + 5; ++x) {
      if (f.div(x) != x / d) { printf("FAIL %d / %d\n", x, d); return 1; } ++checked;
    }
  }
  printf("ok %lld\n", checked);
  return 0;
}
""")
    exe = tmp_path / "fastdiv"
    p = subprocess.run([find_nvcc(), "-O2", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout


def test_ring_paths_outside_the_space_still_compile_without_warnings(tmp_path: Path) -> None:
    """The ring template's paths the measured space leaves out stay buildable: stage mma with hi + lo
    weights on a static C, both ring stages with the lanes' own stores (ot=0) and the FFMA ring on a
    static C, and the residual add at each store path (one point per path instead of its whole space);
    compiled for sm_90 with nvcc's warnings as errors (a constant or variable one stage's
    text leaves unused is a template bug)."""
    from ytk_backend_templates import emit_dwconv

    mma = Ring(stage="mma", vec=8, cb=64, tw=16, th=4, cpt=1, ns=2, mb=3, weights="fp16")
    points = [(DwConvRegion(3, 1, "hardswish", None), mma),
              (DwConvRegion(3, 1, "relu", 128), replace(mma, weights="hilo")),
              (DwConvRegion(5, 1, "none", 384), mma),
              (DwConvRegion(3, 1, "hardswish", 1024), Ring(stage="tma", vec=4, cb=32, tw=32, th=4, cpt=2, ns=3)),
              (DwConvRegion(5, 1, "none", 384), replace(mma, ot=False)),
              (DwConvRegion(3, 2, "relu6", 256), Ring(stage="tma", vec=8, cb=64, tw=16, th=4, cpt=1, ns=3, ot=True)),
              # a residual add at every store the template has: the ring's lanes and staged tile (FFMA and
              # tensor-core), a tile stage and a strip (the GPU test scores every variant)
              (DwConvRegion(3, 1, "relu", None, residual=True), replace(mma, ot=False)),
              (DwConvRegion(3, 1, "none", 128, residual=True), mma),
              (DwConvRegion(3, 1, "none", 128, residual=True),
               Ring(stage="tma", vec=4, cb=32, tw=32, th=4, cpt=2, ns=3, ot=True)),
              (DwConvRegion(3, 1, "hardswish", 64, residual=True),
               Tiled(stage="pipe", vec=8, cb=32, th=8, tw=32, rpt=4, cpt=2)),
              (DwConvRegion(3, 1, "hardswish", 64, residual=True),
               Strip(vec=4, cb=64, rows=8, tw=32, cpt=4, wreg=0, pf=2, mb=0)),
              (DwConvRegion(5, 1, "gelu", 64, residual=True),
               Ring(stage="tma", vec=2, cb=32, tw=32, th=8, cpt=2, ns=3))]
    for i, (region, p) in enumerate(points):
        cu = tmp_path / f"k{i}.cu"
        cu.write_text(PRELUDE + emit_dwconv.emit(region, p, f"v{i}", f"v{i}_launch").body)
        r = subprocess.run([find_nvcc(), "-cubin", "-O3", "-std=c++17", "-arch=sm_90a", "-Werror", "all-warnings",
                            "-Xptxas", "-v", "-o", str(tmp_path / f"k{i}.cubin"), str(cu)],
                           capture_output=True, text=True)
        name = p.name
        assert r.returncode == 0, (name, r.stderr[-2000:])
        spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", r.stdout + r.stderr)]
        assert max(spills, default=0) <= 64, (name, spills)


def _ptx(tmp_path: Path, region: DwConvRegion, p: DwPoint, name: str) -> str:
    """The PTX of one depthwise variant for sm_90a."""
    from ytk_backend_templates import emit_dwconv

    cu, ptx = tmp_path / f"{name}.cu", tmp_path / f"{name}.ptx"
    cu.write_text(PRELUDE + emit_dwconv.emit(region, p, "v0", "v0_launch").body)
    r = subprocess.run([find_nvcc(), "-ptx", "-O3", "-std=c++17", "-arch=sm_90a", "-o", str(ptx), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return ptx.read_text()


def test_ring_tile_rows_are_read_with_vector_loads(tmp_path: Path) -> None:
    """The FFMA ring reads each thread's VEC halves of a tile row as one shared-memory vector load
    (unpack takes the vector by value; through a reference into memory nvcc split it into 4-byte
    loads, doubling the ring's load instructions)."""
    p = Ring(stage="tma", vec=4, cb=32, tw=32, th=4, cpt=2, ns=3)
    text = _ptx(tmp_path, DwConvRegion(3, 1, "hardswish", None), p, "ring")
    loads = re.findall(r"ld\.shared(\.\w+)+", text)
    vec = re.findall(r"ld\.shared\.v2\.u32", text)
    # 6 input rows x 4 columns per thread; nothing else of the tile is loaded another way
    assert len(vec) == 24 and len(loads) == 24, (len(vec), len(loads))


def test_ring_output_through_the_tma_is_one_bulk_store_per_item(tmp_path: Path) -> None:
    """With ot=1 a ring kernel writes its output tile to shared memory (shared-space stores) and hands
    it to the TMA as one bulk tensor store (no per-lane global stores, which cost 2-7 us of a 13-29 us
    kernel on the H200); without, every lane stores its own pixels."""
    mma = Ring(stage="mma", vec=8, cb=64, tw=16, th=4, cpt=1, ns=2, mb=3, weights="fp16")
    tma = Ring(stage="tma", vec=4, cb=32, tw=32, th=4, cpt=2, ns=3)
    for region, p in ((DwConvRegion(5, 1, "hardswish", 768), mma), (DwConvRegion(3, 1, "hardswish", None), tma)):
        for ot in (False, True):
            text = _ptx(tmp_path, region, replace(p, ot=ot), f"{p.stage}{ot}")
            bulk = len(re.findall(r"cp\.async\.bulk\.tensor\.4d\.global\.shared::cta", text))
            stores = len(re.findall(r"\bst\.global", text))
            assert (bulk, stores > 0) == ((1, False) if ot else (0, True)), (p.stage, ot, bulk, stores)
            # the staging tile is written with ordinary C++ stores: nvcc must see they are shared-memory
            # ones (a generic st would cost an address-space check per store)
            generic = len(re.findall(r"^\s*st\.(?:v[248]\.)?[ub]\d+", text, re.M))
            assert generic == 0 and (len(re.findall(r"\bst\.shared", text)) > 0) == ot, (p.stage, ot, generic)


def test_every_activation_compiles_in_both_conv_families(tmp_path: Path) -> None:
    # one variant per (family, activation) in one translation unit: the activation bodies are device code
    # that only nvcc checks (squeeze-excite gates among them)
    from ytk_backend_templates.emit_common import ACTIVATION_CODE

    bodies = []
    for act in ACTIVATION_CODE:
        for region in (DwConvRegion(3, 1, act, 64), Conv1x1Region(act, 16, 64)):
            v = region_variants(region, sm=90, limit=1)[0]
            bodies.append(v.body.replace(f"ytk_{v.name}", f"ytk_{v.name}_{act}"))
    cu = tmp_path / "acts.cu"
    cu.write_text(PRELUDE + "\n".join(bodies))
    p = subprocess.run([find_nvcc(), "-cubin", "-O3", "-arch=sm_90", "-o", str(tmp_path / "acts.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    assert {"hardsigmoid", "sigmoid", "tanh"} <= set(ACTIVATION_CODE)
