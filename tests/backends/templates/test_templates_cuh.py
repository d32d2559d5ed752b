"""The templates' CUDA lives in package data (``cuda/*.cuh``) and is instantiated per variant.

CPU only: the .cuh files ship in the wheel; every point of every variant space instantiates; a mixed
sample (every kind of variant of each family in one translation unit, so one variant's macros must
not leak into the next) compiles warning-free with nvcc; a variant's namespace follows its
parameters, so inserting a point into a space leaves every other variant's text as it was. PTX
identity across a refactor is a developer script (benchmarks/templates_ptx_identity.py), not a test:
golden hashes rot with every intended kernel change.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import zipfile
from dataclasses import FrozenInstanceError
from importlib import resources
from pathlib import Path

import pytest

from ytk_backend_nvcc.toolchain import find_nvcc
from ytk_backend_templates import emit_conv1x1, emit_dwconv, emit_dwln, emit_litemla
from ytk_backend_templates.build import library_groups, translation_unit
from ytk_backend_templates.contract import plugin_meta
from ytk_backend_templates.emit_common import PRELUDE, variant_namespace
from ytk_backend_templates.emit_dwconv import Ring, Strip, Tiled
from ytk_backend_templates.regions import Conv1x1Region, DwConvLNRegion, DwConvRegion, LiteMLARegion
from ytk_backend_templates.variants import region_variants
from ytk_hookspecs.models import ArchSpec

PACKAGE = Path(emit_dwconv.__file__).parent
CUH = sorted(p.name for p in (PACKAGE / "cuda").glob("*.cuh"))


def _regions() -> list[object]:
    """A region of every kind the recogniser emits: depthwise k, stride, activation, channels
    (runtime, thin, odd multiples of 8, wide), with and without bias; 1x1 dense, grouped, dynamic;
    LiteMLA joined and pre-joined; depthwise + LayerNorm in either form."""
    dw = [DwConvRegion(k, s, act, c, has_bias=bias)
          for k, s, act, c, bias in itertools.product((3, 5, 7), (1, 2), ("hardswish", "gelu_tanh"),
                                                      (None, 16, 24, 64, 96, 256, 768), (True, False))]
    channels = ((None, None, 0, 0), (32, 128, 0, 0), (1024, 256, 0, 0), (None, None, 16, 16), (384, 384, 8, 8))
    pw = [Conv1x1Region(act, cin, cout, gi, go)
          for act, (cin, cout, gi, go) in itertools.product(("none", "relu6"), channels)]
    dwln = [DwConvLNRegion(k, s, 1e-6, c, has_bias=bias, closed=closed)
            for k, s, c, bias, closed in itertools.product((3, 7), (1, 2), (None, 24, 40, 88, 768), (True, False),
                                                            (True, False))]
    return [*dw, *pw, LiteMLARegion(16, 1e-15, True, 384), LiteMLARegion(32, 1e-6, False, None), *dwln]


def test_cuda_templates_ship_as_package_data(tmp_path: Path) -> None:
    from hatchling.builders.wheel import WheelBuilder

    assert {"prelude.cuh", "dwconv.cuh", "dwconv_ring_trace.cuh", "conv1x1.cuh", "litemla.cuh"} <= set(CUH)
    # what an installed (or editable) package reads: importlib.resources, not a path beside the source
    files = resources.files("ytk_backend_templates") / "cuda"
    assert PRELUDE == (files / "prelude.cuh").read_text(encoding="utf-8")
    wheel = next(iter(WheelBuilder(str(PACKAGE.parent)).build(directory=str(tmp_path), versions=["standard"])))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"ytk_backend_templates/cuda/{n}" for n in CUH} <= names, sorted(names)


@pytest.mark.parametrize("sm", [0, 87, 90])
def test_every_point_of_every_space_instantiates(sm: int) -> None:
    """Every variant of every region kind and both spaces emits: its namespace is ytk_<name>, its
    name unique in its space, its parameters map back to its point, nothing is left of the old
    placeholder syntax, and the developer-only timeline is not in the product's text."""
    total = 0
    for region in _regions():
        for wide in (False, True):
            variants = region_variants(region, sm=sm, wide=wide)  # type: ignore[arg-type]
            names = [v.name for v in variants]
            assert len(set(names)) == len(names), (region, names)
            for v in variants:
                assert v.namespace == variant_namespace(v.name) and v.launcher == f"{v.namespace}_launch"
                assert f"namespace {v.namespace} {{" in v.body and not re.search(r"@\w+@", v.body)
                assert "trace_items" not in v.body and "YTK_RING_TRACE_ITEM(k, j) \\" not in v.body
                emitter = (emit_dwconv if isinstance(region, DwConvRegion)
                           else emit_conv1x1 if isinstance(region, Conv1x1Region)
                           else emit_dwln if isinstance(region, DwConvLNRegion) else emit_litemla)
                assert emitter.point(v.params).params == v.params and emitter.variant_name(v.params) == v.name
            total += len(variants)
    assert total > 2000


def test_points_are_frozen_named_records() -> None:
    p = Tiled(stage="pipe", vec=8, cb=32, th=8, tw=32, rpt=4, cpt=2, ns=3)
    with pytest.raises(FrozenInstanceError):
        p.vec = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        Tiled("pipe", 8, 32, 8, 32, 4, 2)  # type: ignore[misc]  # keywords only: no positional tuples
    assert p.name == "pipe3_v8_cb32_t8x32_r4c2" and p.params["ns"] == 3
    assert Strip(vec=2, cb=64, rows=8, tw=32, cpt=4, wreg=2, pf=2, mb=2).name == "stripsp2m2_v2_cb64_t8x32_r8c4"
    mma = Ring(stage="mma", vec=8, cb=64, th=4, tw=16, cpt=1, ns=3, mb=2, ot=True, weights="hilo")
    assert mma.name == "mma3m2ho_v8_cb64_t4x16_r4c1" and mma.threads == 256
    with pytest.raises(ValueError):
        Ring(stage="mma", vec=8, cb=64, th=4, tw=16, cpt=1)  # the tensor-core taps name their weights
    # a report's (or a developer tool's) parameter dict names the same point
    assert emit_dwconv.point(dict(stage="tma", vec=4, cb=32, tw=32, th=4, rpt=4, cpt=2)) == Ring(
        stage="tma", vec=4, cb=32, th=4, tw=32, cpt=2, ns=3)


def test_namespaces_follow_the_parameters_not_the_position(monkeypatch: pytest.MonkeyPatch) -> None:
    """A point inserted at the head of the depthwise space renames nothing: every other variant's
    text (namespace, launcher, kernels) is what it was, and so are most scoring libraries' sources
    (the build cache's key), where list positions used to shift every library after the insertion."""
    region = DwConvRegion(3, 1, "hardswish", 256)
    before = region_variants(region, sm=90)
    new = Tiled(stage="pipe", vec=8, cb=32, th=8, tw=32, rpt=4, cpt=2, ns=5)
    assert new.name not in {v.name for v in before}
    monkeypatch.setattr(emit_dwconv, "_TILED_S1", (new, *emit_dwconv._TILED_S1))
    after = region_variants(region, sm=90)
    assert [v.name for v in after if v.name != new.name] == [v.name for v in before]
    old = {v.name: v for v in before}
    for v in after:
        if v.name != new.name:
            assert (v.namespace, v.launcher, v.body) == (old[v.name].namespace, old[v.name].launcher, old[v.name].body)
    meta, arch = plugin_meta(region, "DwConv3x3s1C256"), ArchSpec.parse("x86_64-sm90-linux-cu130-trt10")
    libs_before = {translation_unit(g, meta, arch) for g in library_groups(before)}
    libs_after = [translation_unit(g, meta, arch) for g in library_groups(after)]
    changed = [t for t in libs_after if t not in libs_before]
    assert len(changed) <= 3 and len(libs_after) >= 10, (len(changed), len(libs_after))


def test_library_groups_keep_order_and_size() -> None:
    variants = region_variants(DwConvRegion(3, 1, "hardswish", None), sm=90, wide=True)
    groups = library_groups(variants)
    assert [v for g in groups for v in g] == variants
    assert all(1 <= len(g) <= 6 for g in groups) and all(len(g) >= 2 for g in groups[:-1])


def test_the_developer_timeline_is_only_in_a_trace_build() -> None:
    region = DwConvRegion(3, 1, "hardswish", None)
    ring = next(v for v in region_variants(region, sm=90) if v.params["stage"] == "tma")
    traced = emit_dwconv.emit(region, ring.params, "v0", "v0_launch", trace=True).body
    assert "trace_copy" in traced and "trace_copy" not in ring.body
    with pytest.raises(ValueError):
        emit_dwconv.emit(region, region_variants(region)[0].params, "v0", "v0_launch", trace=True)


def _kinds(variants: list) -> list:  # type: ignore[type-arg]
    """The first variant of each kind (the name's stage prefix with its digits blanked: pipe3 and pipe4
    are one kind, stripsp2m2 and stripp2 two)."""
    seen: dict[str, object] = {}
    for v in variants:
        seen.setdefault(re.sub(r"\d+", "#", v.name.split("_")[0]), v)
    return list(seen.values())


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed: the sample cannot be compiled")
def test_a_sample_of_every_kind_compiles_warning_free_in_one_translation_unit(tmp_path: Path) -> None:
    """One translation unit per family holding one variant of each kind (each variant's #if sections
    and macros must stay its own), built to PTX for sm_90 with every nvcc warning an error; and the
    developer timeline build of a ring variant, which the product never compiles. The families
    test_templates_emit.py compiles (every variant, one unit per family, warnings as errors) are not compiled
    again here: these two are the ones it lacks (a relu6 epilogue, a LayerNorm width not a multiple of 16)."""
    families = {
        "pw_dense": (Conv1x1Region("relu6", 32, 128), 90),
        "dwln_c40": (DwConvLNRegion(7, 1, 1e-6, 40), 90),
    }
    for fam, (region, sm) in families.items():
        sample = _kinds(region_variants(region, sm=sm))  # type: ignore[arg-type]
        cu = tmp_path / f"{fam}.cu"
        cu.write_text(PRELUDE + "\n".join(v.body for v in sample))  # type: ignore[attr-defined]
        r = subprocess.run([find_nvcc(), "-ptx", "-O3", "-std=c++17", f"-arch=sm_{sm}", "-Werror", "all-warnings",
                            "-o", str(tmp_path / f"{fam}.ptx"), str(cu)], capture_output=True, text=True)
        assert r.returncode == 0, (fam, [v.name for v in sample], r.stderr[-2000:])  # type: ignore[attr-defined]
        entries = re.findall(r"\.entry (\w+)", (tmp_path / f"{fam}.ptx").read_text())
        assert len(entries) >= len(sample), (fam, entries)
    region = DwConvRegion(3, 1, "hardswish", None)
    ring = next(v for v in region_variants(region, sm=90) if v.params["stage"] == "mma")
    cu = tmp_path / "trace.cu"
    cu.write_text(PRELUDE + emit_dwconv.emit(region, ring.params, "v0", "v0_launch", trace=True).body
                  + 'extern "C" int v0_trace(void* i, void* b) { return v0::trace_copy(i, b); }\n')
    r = subprocess.run([find_nvcc(), "-ptx", "-O3", "-std=c++17", "-arch=sm_90", "-o", str(tmp_path / "trace.ptx"),
                        str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "%globaltimer" in (tmp_path / "trace.ptx").read_text()
