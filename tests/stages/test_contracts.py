"""Contract checks: plugin vs node (compile), kernel vs region (kernelgen / build-plugin), kernel alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stages.carved_fixture import PLUGIN
from ytk_hookspecs.nodes import CustomNode, NodeInput, PluginFile, custom_nodes, match_plugins
from ytk_hookspecs.contract import check_meta, check_meta_against_candidate, check_source
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import CandidatesFile, PluginDescription, TensorContract
from ytk_backend_mock.kernelgen import make_meta


def _desc(**kw) -> PluginDescription:
    d = dict(name=PLUGIN, namespace="yasp", version="1", num_inputs=3, num_outputs=1,
             input_dtypes=["float16", "float32", "float32"], output_dtypes=["float16"],
             input_formats=["kHWC8", "kLINEAR", "kLINEAR"], output_formats=["kHWC8"], sm=87, cpu_arch="x86_64",
             engine_api="mock-cpu", launcher="l", builder="test", source_sha256="0" * 64)
    d.update(kw)
    return PluginDescription(**d)


def _node(name=f"{PLUGIN}_0", ns="yasp", ver="1") -> CustomNode:
    return CustomNode(name=name, op_type=PLUGIN, namespace=ns, version=ver, domain="trt.plugins",
                      inputs=[NodeInput("h", "float32", False), NodeInput("w", "float32", True),
                              NodeInput("b", "float32", True)], outputs=["d"])


def _pf(**kw) -> PluginFile:
    return PluginFile(Path(f"/p/{kw.pop('file', 'a.so')}"), _desc(**kw))


def test_custom_nodes_are_read_with_their_weights(fixture_dir):
    nodes = custom_nodes(fixture_dir / "carved" / "model.onnx")
    assert [n.name for n in nodes] == [f"{PLUGIN}_0", f"{PLUGIN}_1"]
    n = nodes[0]
    assert n.key == ("yasp", PLUGIN, "1")
    assert [i.is_weight for i in n.inputs] == [False, True, True]
    assert custom_nodes(fixture_dir / "base" / "model.onnx") == []


def test_exact_match_resolves_every_node():
    res = match_plugins([_node(), _node(f"{PLUGIN}_1")], [_pf()], "fp16", sm=87)
    assert res.errors == [] and res.warnings == []
    assert set(res.matches) == {f"{PLUGIN}_0", f"{PLUGIN}_1"}


def test_missing_plugin_lists_what_was_supplied():
    res = match_plugins([_node(), _node(f"{PLUGIN}_1")], [_pf(name="Other")], "fp16", sm=87)
    assert len(res.errors) == 1, "the sites of one plugin are reported together"
    msg = res.errors[0]
    assert f"2 nodes ({PLUGIN}_0, {PLUGIN}_1)" in msg and "yasp::Other v1" in msg and "--plugin-name" in msg
    assert any("matches no custom-op node" in w for w in res.warnings)


@pytest.mark.parametrize("kw, what", [({"namespace": "abc"}, "namespace 'abc' (node wants 'yasp')"),
                                      ({"version": "2"}, "version '2' (node wants '1')")])
def test_name_match_with_other_namespace_or_version_says_what_differs(kw, what):
    res = match_plugins([_node()], [_pf(**kw)], "fp16", sm=87)
    assert len(res.errors) == 1 and what in res.errors[0] and f"node {PLUGIN}_0" in res.errors[0]


def test_arity_mismatch_is_explained_as_error_9():
    res = match_plugins([_node()], [_pf(num_inputs=1, input_dtypes=["float16"], input_formats=["kHWC8"])],
                        "fp16", sm=87)
    (msg,) = res.errors
    assert f"node {PLUGIN}_0" in msg and "/p/a.so" in msg
    assert "3 inputs (1 activation(s) + 2 lifted weight(s))" in msg and "num_inputs=1" in msg
    assert "Error 9" in msg and "arity problem" in msg


def test_fp32_plugin_in_fp16_engine_is_refused():
    res = match_plugins([_node()], [_pf(input_dtypes=["float32"] * 3, output_dtypes=["float32"],
                                        input_formats=["kLINEAR"] * 3, output_formats=["kLINEAR"])], "fp16", sm=87)
    assert res.errors and all("float32" in e and "fp16" in e for e in res.errors)
    assert match_plugins([_node()], [_pf()], "fp32", sm=87).errors, "and an fp16 plugin in an fp32 engine"


def test_sm_mismatch_duplicates_and_mock_plugins_in_real_engines():
    assert any("sm86" in e for e in match_plugins([_node()], [_pf(sm=86)], "fp16", sm=87).errors)
    dup = match_plugins([_node()], [_pf(), _pf(file="b.so")], "fp16", sm=87)
    assert any("both register" in e for e in dup.errors)
    real = match_plugins([_node()], [_pf()], "fp16", sm=87, simulated_engine=False)
    assert any("mock-cpu" in e for e in real.errors)


@pytest.mark.parametrize("api", ["trt8-IPluginV2DynamicExt", "trt10-IPluginV3"])
def test_tensorrt_shims_of_one_name_in_two_namespaces_cannot_both_load(api):
    # each shim also registers in the empty namespace: the second library's loadLibrary would fail
    nodes = [_node(), _node(f"{PLUGIN}_1", ns="other")]
    clash = match_plugins(nodes, [_pf(engine_api=api), _pf(file="b.so", namespace="other", engine_api=api)],
                          "fp16", sm=87, simulated_engine=False)
    (msg,) = [e for e in clash.errors if "empty namespace" in e]
    assert "/p/b.so" in msg and "/p/a.so" in msg and "--plugin-name" in msg
    # another version, or plugins that are not TensorRT shims, do not collide
    assert not [e for e in match_plugins(nodes[:1], [_pf(engine_api=api), _pf(file="b.so", namespace="other",
                                                                              version="2", engine_api=api)],
                                         "fp16", sm=87, simulated_engine=False).errors if "empty namespace" in e]
    assert not [e for e in match_plugins(nodes, [_pf(), _pf(file="b.so", namespace="other")], "fp16",
                                         sm=87).errors if "empty namespace" in e]


def _cand(fixture_dir: Path):
    return CandidatesFile.read(fixture_dir / "carved" / "candidates.json").candidates[0]


def test_mock_meta_satisfies_its_region(fixture_dir):
    cand = _cand(fixture_dir)
    meta = make_meta(cand, "fp16", 87, 0.7)
    rep = check_meta_against_candidate(meta, cand, "fp16")
    assert rep.ok, rep.errors
    assert rep.warnings == []


def test_kernel_without_lifted_weights_is_refused_with_error_9(fixture_dir):
    cand = _cand(fixture_dir)
    meta = make_meta(cand, "fp16", 87, 0.7)
    meta = meta.model_copy(update={"inputs": meta.inputs[:1]})
    rep = check_meta_against_candidate(meta, cand, "fp16")
    assert not rep.ok and "Error 9" in rep.errors[0] and "1 activation(s) + 2 lifted weight(s)" in rep.errors[0]


def test_wrong_output_shape_layout_and_precision(fixture_dir):
    cand = _cand(fixture_dir)
    meta = make_meta(cand, "fp16", 87, 0.7)
    out = meta.outputs[0].model_copy(update={"shape": ["in0[0]", "in0[1]", "in0[2]", "in0[2]"]})
    rep = check_meta_against_candidate(meta.model_copy(update={"outputs": [out]}), cand, "fp16")
    assert any("[1, 16, 6, 6]" in e and "[1, 16, 6, 10]" in e for e in rep.errors)
    fp32 = make_meta(cand, "fp32", 87, 0.7)
    rep = check_meta_against_candidate(fp32, cand, "fp16")
    assert any("fp32-only kernel cannot go into an fp16 engine" in e for e in rep.errors)
    lin = [t.model_copy(update={"format": "kLINEAR"}) if t.role == "activation" else t for t in meta.inputs]
    rep = check_meta_against_candidate(meta.model_copy(update={"inputs": lin}), cand, "fp16")
    assert rep.ok and any("reformat" in w for w in rep.warnings)


def test_intrinsic_checks(fixture_dir):
    meta = make_meta(_cand(fixture_dir), "fp16", 87, 0.7)
    bad = meta.model_copy(update={"inputs": [TensorContract(name="x", dtype="float32", format="kHWC8",
                                                             shape=["in0[0]", "in0[1]", "in0[2]", "in0[3]"])]
                                  + meta.inputs[1:],
                                  "extents": {"N": "in5[0]", "M": "Q + 1"}})
    errs = " | ".join(check_meta(bad).errors)
    assert "float32 in kHWC8" in errs and "refers to in5" in errs and "'Q'" in errs
    src = KernelSource(header="", source="// nothing here", meta=meta)
    assert any("not defined in the CUDA source" in e for e in check_source(src).errors)
    torch_target = meta.model_copy(update={"deployment_target": "torch"})
    assert any("deployment_target" in e for e in check_meta(torch_target).errors)


def test_the_layout_rule_is_one_function_every_backend_imports():
    """kHWC8 = channels-last with C % 8 == 0: the hookspecs rule the launcher, the torch engine and the
    templates all apply."""
    from ytk_hookspecs.contract import layout_error

    assert layout_error("kHWC8", [4, 64, 8, 8]) is None
    assert "divisible by 8, got 30" in layout_error("kHWC8", [4, 30, 8, 8])
    assert "4-D" in layout_error("kHWC8", [4, 64])
    assert layout_error("kHWC8", [4, "C", 8, 8]) is None  # symbolic: decided per site
    assert layout_error("kLINEAR", [3, 5]) is None


def test_a_report_lists_one_time_per_site_not_per_shape(fixture_dir):
    from ytk_hookspecs.contract import check_report_against_candidate
    from ytk_hookspecs.models import CandidateScore, KernelReport

    cand = _cand(fixture_dir)
    n = len(cand.sites)
    per_site = [0.1] * n
    ok = KernelReport(plugin_name=cand.name, backend="x", job_id="j", region_kind="compiled", measured_on="gpu",
                      simulated=False, error_budget="max abs 0.01",
                      candidates=[CandidateScore(variant="v", correct=True, time_ms_per_site=per_site),
                                  CandidateScore(variant="w", correct=False)],  # screened out: no times at all
                      winner="v", torch_ms_per_site=per_site, floor_ms_per_site=per_site)
    assert check_report_against_candidate(ok, cand).ok
    short = ok.model_copy(update={"candidates": [CandidateScore(variant="v", correct=True,
                                                                time_ms_per_site=per_site + [0.1])],
                                  "torch_ms_per_site": per_site[:-1] if n > 1 else per_site * 2})
    errors = check_report_against_candidate(short, cand).errors
    assert len(errors) == 2
    assert any(e.startswith(f"variant v time_ms_per_site has {n + 1} entries but region {cand.name} has {n} site(s)")
               for e in errors)
    assert any(e.startswith("torch_ms_per_site has") for e in errors)
    meta = make_meta(cand, "fp16", 87, 0.7)
    perf = meta.perf.model_copy(update={"time_ms_per_site": per_site * 2})
    rep = check_meta_against_candidate(meta.model_copy(update={"perf": perf}), cand, "fp16")
    assert any("perf.time_ms_per_site" in e for e in rep.errors)
