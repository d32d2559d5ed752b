"""The kernel cache: same region problem -> reused and renamed; any difference -> a different key."""

from __future__ import annotations

from pathlib import Path

from ytk_core.stages import kernel_cache
from ytk_hookspecs import fingerprint
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import Candidate, PluginMeta, SiteInfo, TensorContract, TensorInfo


def _cand(name="A", c=64):
    s = SiteInfo(index=0, module_path="m.x", onnx_node=f"{name}_0", inputs=[TensorInfo(name="x", shape=[1, c, 8, 8],
                 dtype="float32")], outputs=[TensorInfo(name="y", shape=[1, c, 8, 8], dtype="float32")],
                 replaced_onnx_nodes=["n"], fx_nodes=["f"])
    return Candidate(name=name, namespace="yasp", selector=f"yasp::{name}=X", ops_name="X", lift="none",
                     input_roles=["activation"], sites=[s], op_inventory={"aten.relu.default": 1},
                     constant_axes=[[True] * 4])


def _src(name):
    meta = PluginMeta(plugin_name=name, inputs=[TensorContract(name="x", dtype="float16", shape=["in0[0]"])],
                      outputs=[TensorContract(name="y", dtype="float16", shape=["in0[0]"])], extents={"N": "in0[0]"},
                      launcher="launch")
    return KernelSource(header="", source="// k", meta=meta)


def test_reuse_is_renamed_and_keys_separate_problems(tmp_path):
    k1 = kernel_cache.cache_key(_cand("A"), "templates", "1", "H200", None, "fp16", {"deployment_target": "tensorrt"})
    assert k1 == kernel_cache.cache_key(_cand("B"), "templates", "1", "H200", None, "fp16",
                                        {"deployment_target": "tensorrt"})  # the name is not the problem
    assert k1 != kernel_cache.cache_key(_cand("A", c=128), "templates", "1", "H200", None, "fp16", {})
    assert k1 != kernel_cache.cache_key(_cand("A"), "templates", "2", "H200", None, "fp16",
                                        {"deployment_target": "tensorrt"})
    src = _src("A").write(tmp_path / "A.module_source.py")
    (tmp_path / "A.report.json").write_text("{}")
    kernel_cache.store(tmp_path / "cache", k1, src, tmp_path / "A.report.json")
    out = tmp_path / "out" / "B.module_source.py"
    out.parent.mkdir()
    rep = kernel_cache.lookup(tmp_path / "cache", k1, "B", out)
    assert rep is not None and rep.name == "B.report.json"
    assert KernelSource.read(out).meta.plugin_name == "B"
    assert kernel_cache.lookup(tmp_path / "cache", "nope", "B", out) is None


def test_a_source_changed_or_planted_in_the_cache_is_a_miss(tmp_path):
    key = kernel_cache.cache_key(_cand("A"), "templates", "1", "H200", None, "fp16", {})
    src = _src("A").write(tmp_path / "A.module_source.py")
    kernel_cache.store(tmp_path / "cache", key, src, None)
    entry = tmp_path / "cache" / "kernels" / key
    out = tmp_path / "B.module_source.py"
    assert kernel_cache.lookup(tmp_path / "cache", key, "B", out) is None  # no report: not a finished job
    assert out.is_file()
    out.unlink()
    planted = _src("A")
    planted.source = "// planted"
    planted.write(entry / "source.module_source.py")
    assert kernel_cache.lookup(tmp_path / "cache", key, "B", out) is None and not out.exists()
    other = tmp_path / "cache" / "kernels" / ("0" * 24)
    other.mkdir()
    _src("A").write(other / "source.module_source.py")  # an entry no store() wrote: no recorded hash
    assert kernel_cache.lookup(tmp_path / "cache", "0" * 24, "B", out) is None and not out.exists()


def test_an_entry_planted_whole_or_with_an_edited_report_is_a_miss(tmp_path):
    """A trust trial planted a source with its matching sha256 file, and edited a report: both were served.
    Entries are sealed with the cache's own owner-only key; one from another cache is a miss as well."""
    import shutil
    import stat

    key = kernel_cache.cache_key(_cand("A"), "templates", "1", "H200", None, "fp16", {})
    src = _src("A").write(tmp_path / "A.module_source.py")
    (tmp_path / "A.report.json").write_text('{"winner": "v1"}')
    cache, other = tmp_path / "cache", tmp_path / "other"
    kernel_cache.store(cache, key, src, tmp_path / "A.report.json")
    assert stat.S_IMODE((cache / kernel_cache.KEY_FILE).stat().st_mode) == 0o600
    out = tmp_path / "out" / "B.module_source.py"
    out.parent.mkdir()
    assert kernel_cache.lookup(cache, key, "B", out) is not None
    entry = cache / "kernels" / key
    (entry / "report.json").write_text('{"winner": "TAMPERED"}')
    assert kernel_cache.lookup(cache, key, "B", out) is None
    kernel_cache.store(other, key, src, tmp_path / "A.report.json")  # sealed under the other cache's key
    shutil.rmtree(entry)
    shutil.copytree(other / "kernels" / key, entry)
    assert kernel_cache.lookup(cache, key, "B", out) is None


def test_a_key_that_is_not_the_caches_own_seals_nothing_and_costs_no_job(tmp_path):
    """A key file others can read, a symlink, a short one or a folder: store() says why it keeps nothing
    (the job is not failed), and lookup() reuses nothing."""
    import os

    key = kernel_cache.cache_key(_cand("A"), "templates", "1", "H200", None, "fp16", {})
    src = _src("A").write(tmp_path / "A.module_source.py")
    (tmp_path / "A.report.json").write_text("{}")
    out = tmp_path / "B.module_source.py"
    for n, plant in enumerate(("readable", "symlink", "short", "folder")):
        cache = tmp_path / f"c{n}"
        assert kernel_cache.store(cache, key, src, tmp_path / "A.report.json") is None
        k = cache / kernel_cache.KEY_FILE
        if plant == "readable":
            k.chmod(0o644)
        elif plant == "symlink":
            (tmp_path / f"elsewhere{n}").write_bytes(k.read_bytes())
            k.unlink()
            k.symlink_to(tmp_path / f"elsewhere{n}")
        elif plant == "short":
            k.write_bytes(b"x")
        else:
            k.unlink()
            k.mkdir()
        assert kernel_cache.lookup(cache, key, "B", out) is None, plant
        why = kernel_cache.store(cache, key, src, tmp_path / "A.report.json")
        assert why and "key" in why, (plant, why)
        assert os.path.lexists(k)  # never replaced behind the user's back


def test_the_key_holds_the_heavy_ops_attributes():
    from ytk_hookspecs.models import RegionOp

    a = _cand("A").model_copy(update={"ops": [RegionOp(op="conv", kernel=[3, 3], padding=[1, 1], dilation=[1, 1])]})
    b = _cand("A").model_copy(update={"ops": [RegionOp(op="conv", kernel=[3, 3], padding=[2, 2], dilation=[2, 2])]})
    assert kernel_cache.cache_key(a, "t", "1", "H200", None, "fp16", {}) != \
        kernel_cache.cache_key(b, "t", "1", "H200", None, "fp16", {})
    assert kernel_cache.region_digest(a) != kernel_cache.region_digest(b)


def test_a_store_killed_half_way_leaves_nothing_behind_for_long(tmp_path):
    """A kill inside store() leaves its temp entry; the next store sweeps temp entries of dead processes
    (and never a live writer's)."""
    import os

    kernels = tmp_path / "cache" / "kernels"
    dead = kernels / f"{kernel_cache.TMP_PREFIX}999999999-1-abc"
    live = kernels / f"{kernel_cache.TMP_PREFIX}{os.getppid()}-1-def"
    for d in (dead, live):
        d.mkdir(parents=True)
        (d / "source.module_source.py").write_text("# half")
    src = _src("A").write(tmp_path / "A.module_source.py")
    kernel_cache.store(tmp_path / "cache", "k1", src, None)
    assert not dead.exists() and live.exists()
    assert sorted(p.name for p in kernels.iterdir()) == sorted(["k1", live.name])


def test_regions_baking_different_values_are_different_problems(tmp_path):
    """Same ops and shapes, different baked weights (per-site families): different keys; the same values in
    the same slots of an archive written from another folder: the same key; the same values in swapped slots
    (a model whose two weights trade places): different keys, or one region's kernel is reused, renamed,
    for the other."""
    import zipfile

    def pt2(name: str, members: dict[str, bytes]) -> Path:
        p = tmp_path / f"{name}.pt2"
        with zipfile.ZipFile(p, "w") as z:
            for k, v in members.items():
                z.writestr(k, v)
        return p

    a = pt2("a", {"x/data/weights/w0": b"\x01\x02", "x/data/weights/model_weights_config.json": b"{}"})
    b = pt2("b", {"x/data/weights/w0": b"\x01\x03", "x/data/weights/model_weights_config.json": b"{}"})
    a2 = pt2("a2", {"y/data/weights/w0": b"\x01\x02", "y/data/weights/model_weights_config.json": b"[]"})
    da, db, da2 = (kernel_cache.baked_digest(p) for p in (a, b, a2))
    assert da != db and da == da2 and da
    two = pt2("two", {"x/data/weights/weight_0": b"\x01", "x/data/weights/weight_1": b"\x02"})
    swapped = pt2("swapped", {"x/data/weights/weight_0": b"\x02", "x/data/weights/weight_1": b"\x01"})
    assert kernel_cache.baked_digest(two) != kernel_cache.baked_digest(swapped)
    key = lambda d: kernel_cache.cache_key(_cand("A"), "t", "1", "H200", None, "fp16", {}, baked=d)  # noqa: E731
    assert key(da) != key(db) and key(da) == key(da2)
    assert kernel_cache.baked_digest(tmp_path / "missing.pt2") == ""


def test_the_key_follows_the_generators_installed_code_not_its_version(tmp_path, monkeypatch):
    """Editing a generator in place (no version bump) gives its jobs new keys; a single-module backend
    hashes its own file, not its neighbours in site-packages."""
    import importlib
    import sys

    from ytk_hookspecs.models import Reoptimization

    pkg = tmp_path / "fp_gen_pkg"
    (pkg / "cuda").mkdir(parents=True)
    (pkg / "__init__.py").write_text("class Gen:\n    pass\n")
    (pkg / "cuda" / "k.cuh").write_text("// v1\n")
    (tmp_path / "fp_single.py").write_text("class Gen:\n    pass\n")
    (tmp_path / "fp_neighbour.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(fingerprint, "_FINGERPRINTS", {})

    def fp(module: str) -> str:
        fingerprint._FINGERPRINTS.clear()
        sys.modules.pop(module, None)
        return kernel_cache.code_fingerprint(importlib.import_module(module).Gen())

    before = fp("fp_gen_pkg")
    assert before == fp("fp_gen_pkg")
    (pkg / "cuda" / "k.cuh").write_text("// v2: a template edited, the version not bumped\n")
    after = fp("fp_gen_pkg")
    assert after != before
    single = fp("fp_single")
    (tmp_path / "fp_neighbour.py").write_text("x = 2\n")
    assert fp("fp_single") == single
    key = lambda code, r=None: kernel_cache.cache_key(_cand("A"), "g", code, "H200", None, "fp16", {},  # noqa: E731
                                                     reoptimize=r)
    assert key(before) != key(after)
    assert key(after) != key(after, Reoptimization(ms_to_beat=0.2)) != key(after, Reoptimization(ms_to_beat=0.1))


def test_core_config_keys_become_typed_request_fields():
    import pytest

    from ytk_core.errors import UsageError
    from ytk_core.stages.kernelgen import core_settings

    own, reopt = core_settings({"deployment_target": "tensorrt", "max_variants": "4"})
    assert own == {"max_variants": "4"} and reopt is None
    own, reopt = core_settings({"deployment_target": "tensorrt", "reoptimize": "1", "ms_to_beat": "0.25",
                                "kernel_ms_to_beat": "0.1"})
    assert own == {} and reopt is not None and reopt.bar_ms() == 0.1 and reopt.ms_to_beat == 0.25
    for bad, says in [({}, "deployment_target=tensorrt"), ({"deployment_target": "torch"}, "got deployment_target"),
                      ({"deployment_target": "tensorrt", "reoptimize": "1"}, "needs --config ms_to_beat"),
                      ({"deployment_target": "tensorrt", "ms_to_beat": "1"}, "only meaningful with"),
                      ({"deployment_target": "tensorrt", "reoptimize": "1", "ms_to_beat": "-1"}, "above 0"),
                      ({"deployment_target": "tensorrt", "reoptimize": "yes"}, "reoptimize=yes")]:
        with pytest.raises(UsageError, match=says):
            core_settings(bad)
