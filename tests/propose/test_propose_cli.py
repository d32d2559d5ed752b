"""`ytk embedded propose` as users type it: tables, --json, --verbose, --top/--depth, --emit-prepare, errors."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from ytk_core.propose import ProposeReport


def _args(d: Path, bundle: str = "base.tgz") -> list[str]:
    return ["embedded", "propose", "--profile", d / bundle, "--onnx", d / "model.onnx",
            "--fx-nodes", d / "fx_nodes.json"]


def test_tables_as_in_the_spec(ytk, worked):
    r = ytk(*_args(worked))
    assert r.code == 0, r.stderr
    out = r.stdout
    assert out.startswith("measured: base.tgz (SIMULATED: mock engine")
    assert "model total 88.3 ms" in out
    head = next(line for line in out.splitlines() if line.startswith("WHAT TO PLUG"))
    assert head.split() == ["WHAT", "TO", "PLUG", "SITES", "TRT", "ms", "plug", "as", "(names", "are", "yours)"]
    row = next(line for line in out.splitlines() if line.startswith("LiteMLA region (C=384)"))
    assert row.split()[3:5] == ["3", "15.7"] and row.endswith(
        "yasp::LiteMLAC384=LiteMLA:around@where=*.2.blocks.*.context_module.main")
    assert "NOT WORTH PLUGGING" in out and "1x1 / dense GEMMs" in out and "unattributed glue" in out
    assert "candidates covering" in out.splitlines()[-1]


def test_json_is_the_versioned_report(ytk, worked):
    r = ytk(*_args(worked), "--json")
    assert r.code == 0, r.stderr
    rep = ProposeReport.model_validate_json(r.stdout)
    assert rep.schema_version == 4 and rep.candidates and rep.simulated
    # asked the mock (a simulator): what the real chain would take of the same rows is in the document too
    assert rep.real_support is not None and rep.real_support.chain == "templates"
    assert set(rep.real_support.takes) | set(rep.real_support.refuses) == {p.name for p in rep.candidates}
    assert "WHAT TO PLUG" not in r.stdout


def test_verbose_top_and_depth(ytk, worked):
    r = ytk(*_args(worked), "--verbose", "--top", "8", "--depth", "1")
    assert r.code == 0, r.stderr
    out = r.stdout
    classes = out.split("time by torch class")[1].split("time by module")[0]
    assert "LiteMLA" in classes and "ConvNormAct" in classes
    modules = out.split("time by module (depth 1)")[1].split("\n\n")[0]
    assert "m.stages" not in modules and "(model)" in modules and "  m " in modules
    assert "more row(s); raise --top" in out
    assert "plug as    yasp::LiteMLAC384" in out and "roofline " in out and "SITE" in out


def test_raw_trtexec_files(ytk, small):
    r = ytk("embedded", "propose", "--profile", small / "trt86_profile.json", "--layer-info",
            small / "trt86_layers.json", "--onnx", small / "model.onnx", "--fx-nodes", small / "fx_nodes.json",
            "-a", "arm64-sm87-dos6010-cu114-trt86", "--min-ms", "0.01", "--json")
    assert r.code == 0, r.stderr
    rep = ProposeReport.model_validate_json(r.stdout)
    assert rep.engine == "tensorrt" and not rep.simulated and rep.total_ms == pytest.approx(0.53)
    assert {p.name for p in rep.candidates} >= {"LiteMLAC384"}


@pytest.mark.parametrize("extra, words", [
    (["--roofline", "1.5"], "--roofline"),
    (["--min-ms", "-1"], "--min-ms"),
    (["--precision", "int8"], "--precision"),
])
def test_bad_flags(ytk, worked, extra, words):
    r = ytk(*_args(worked), *extra)
    assert r.code == 2 and words in r.stderr and "Traceback" not in r.stderr


def test_missing_inputs_are_one_paragraph(ytk, worked, tmp_path):
    r = ytk("embedded", "propose", "--profile", worked / "base.tgz", "--onnx", worked / "model.onnx",
            "--fx-nodes", tmp_path / "fx_nodes.json")
    assert r.code == 2 and "fx_nodes.json" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "bad.tgz").write_bytes(b"\x1f\x8b garbage")
    r = ytk("embedded", "propose", "--profile", tmp_path / "bad.tgz", "--onnx", worked / "model.onnx",
            "--fx-nodes", worked / "fx_nodes.json")
    assert r.code == 2 and "bad.tgz" in r.stderr and "Traceback" not in r.stderr


def _fake_ytk(tmp_path: Path) -> Path:
    fake = tmp_path / "fake-ytk"
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$FAKE_OUT"\n'
                    'echo "YTK_EXAMPLE_SIZE=${YTK_EXAMPLE_SIZE:-}" >> "$FAKE_OUT"\n')
    fake.chmod(0o755)
    return fake


def test_emit_prepare_writes_a_runnable_script(ytk, worked, tmp_path):
    script = tmp_path / "run_prepare.sh"
    model = tmp_path / "model.py"
    model.write_text("# stand-in\n")
    r = ytk(*_args(worked), "--model", model, "--emit-prepare", script, "--json")
    assert r.code == 0, r.stderr
    rep = ProposeReport.model_validate_json(r.stdout)
    assert os.stat(script).st_mode & stat.S_IXUSR
    text = script.read_text()
    top = text.split('YTK="${YTK:-ytk}"')[0]
    for p in rep.candidates:
        assert f'{p.name}="{p.name}"' in top
    # rename one plugin the way the comment tells users to, then run the script
    script.write_text(text.replace('LiteMLAC384="LiteMLAC384"', 'LiteMLAC384="MyAttention"'))
    out = tmp_path / "args.txt"
    env = {**os.environ, "YTK": str(_fake_ytk(tmp_path)), "FAKE_OUT": str(out)}
    subprocess.run([str(script), "--json"], check=True, env=env, cwd="/")
    args = out.read_text().splitlines()
    # paths are relative to the script, which changes to its own directory first
    assert args[:2] == ["embedded", "prepare"] and (script.parent / args[2]).resolve() == model.resolve()
    onnx_out = script.parent / args[args.index("--onnx-out") + 1]
    assert onnx_out.parent.resolve() == (worked.parent / "gaia").resolve()
    plugs = [args[i + 1] for i, a in enumerate(args) if a == "--plugin"]
    expected = [p.selector for p in rep.candidates]
    expected[[p.name for p in rep.candidates].index("LiteMLAC384")] = \
        "yasp::MyAttention=LiteMLA:around@where=*.2.blocks.*.context_module.main"
    assert plugs == expected
    assert "--json" in args


def test_emit_prepare_with_nothing_to_carve_writes_nothing(ytk, worked, tmp_path):
    """Nothing worth a kernel is propose's answer, not bad input: the report prints, no script, exit 0."""
    script = tmp_path / "run_prepare.sh"
    (tmp_path / "m.py").write_text("# stand-in\n")
    r = ytk(*_args(worked), "--model", tmp_path / "m.py", "--emit-prepare", script, "--min-ms", "1000")
    assert r.code == 0 and "no region to carve" in r.stderr and not script.exists()
    assert "(nothing)" in r.stdout


def test_a_model_that_prepare_would_refuse_is_refused_now(ytk, worked, tmp_path):
    """A new user passed --model base/model.onnx: propose wrote the script (exit 0), and only running it said
    "is not a Python file". propose refuses it itself, as prepare would, and writes nothing."""
    script = tmp_path / "run_prepare.sh"
    for bad, words in ((worked / "model.onnx", "is not a Python file"), (tmp_path / "none.py", "does not exist")):
        r = ytk(*_args(worked), "--model", bad, "--emit-prepare", script)
        assert r.code == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not script.exists()


def test_emit_prepare_reexports_the_size_prepare_recorded(ytk, small_base, tmp_path):
    from ytk_core.artifacts import PrepareManifest

    PrepareManifest(model=str(tmp_path / "model.py"), model_sha256="0" * 64, env={"YTK_EXAMPLE_SIZE": "1x64x96"},
                    onnx="model.onnx", npz="model.npz", reference="model.reference.npz", fx_nodes="fx_nodes.json",
                    torch_version="x").write(small_base / "prepare.json")
    try:
        script = tmp_path / "run.sh"
        r = ytk(*_args(small_base), "--min-ms", "0.03", "--family-min-ms", "0.1", "--emit-prepare", script)
        assert r.code == 0, r.stderr
        out = tmp_path / "args.txt"
        env = {k: v for k, v in os.environ.items() if k != "YTK_EXAMPLE_SIZE"}
        # OUT is commonly set in CI jobs and on the device machine: it must not redirect the carve.
        env.update(YTK=str(_fake_ytk(tmp_path)), FAKE_OUT=str(out), OUT="/somewhere/else")
        subprocess.run([str(script)], check=True, env=env)
        args = out.read_text().splitlines()
        assert args[-1] == "YTK_EXAMPLE_SIZE=1x64x96"
        assert not any("/somewhere/else" in a for a in args)
        assert (script.parent / args[2]).resolve() == (tmp_path / "model.py").resolve()
    finally:
        (small_base / "prepare.json").unlink()


def test_plugged_rows_in_the_table(ytk, plugged):
    r = ytk(*_args(plugged, "gaia.tgz"), "--verbose")
    assert r.code == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("LiteMLAC384 (already plugged)"))
    assert "re-optimize:" in row and "ms/site to beat" in row
    assert "plugin_candidates/LiteMLAC384.pt2" in r.stdout


def test_plugins_json_from_elsewhere(ytk, plugged, tmp_path):
    import shutil

    for f in ("model.onnx", "fx_nodes.json", "gaia.tgz"):
        shutil.copy(plugged / f, tmp_path / f)
    args = _args(tmp_path, "gaia.tgz")
    r = ytk(*args, "--json")
    assert r.code == 0 and all(p["selector"] == "" for p in r.json()["proposals"] if p["already_plugged"])
    r = ytk(*args, "--plugins", plugged / "plugins.json", "--json")
    assert r.code == 0, r.stderr
    rows = [p for p in r.json()["proposals"] if p["already_plugged"]]
    assert rows and all(p["selector"].startswith("yasp::") for p in rows)
    r = ytk(*args, "--plugins", tmp_path / "nope.json")
    assert r.code == 2 and "plugins.json not found" in r.stderr


def test_warnings_go_to_stderr_and_keep_brackets(ytk, small, tmp_path):
    import json

    fx = json.loads((small / "fx_nodes.json").read_text())
    fx["onnx_sha256"] = "0" * 64
    (tmp_path / "fx_nodes.json").write_text(json.dumps(fx))
    r = ytk("embedded", "propose", "--profile", small / "trt86_profile.json", "--onnx", small / "model.onnx",
            "--fx-nodes", tmp_path / "fx_nodes.json", "--json")
    assert r.code == 0, r.stderr
    assert "warning: fx_nodes.json was written for a different ONNX" in r.stderr
    assert "no target GPU known" in r.stderr           # a raw profile without -a: roofline not judged
    assert r.json()["warnings"]


def test_profile_of_another_model_is_flagged(ytk, small, worked):
    # EfficientViT's TensorRT profile against the tiny ViT's ONNX: most layer names match nothing there
    from .conftest import unpack

    vit = unpack("tinyvit_2x64x64", worked.parent.parent / "vit_for_mismatch")
    r = ytk("embedded", "propose", "--profile", small / "trt86_profile.json", "--onnx", vit / "model.onnx",
            "--fx-nodes", vit / "fx_nodes.json", "--json")
    assert r.code == 0, r.stderr
    assert "match no ONNX node" in r.stderr


def test_min_ms_as_a_share_of_the_model(ytk, worked):
    """--min-ms 5% is 5% of this profile's total; at 100% nothing qualifies and propose says what sits under it
    and which flag lists it."""
    r = ytk(*_args(worked), "--min-ms", "5%", "--json")
    assert r.code == 0, r.stderr
    rep = ProposeReport.model_validate_json(r.stdout)
    assert rep.options.min_ms == pytest.approx(0.05 * rep.total_ms) and rep.options.min_pct == 5
    assert rep.candidates and all(p.ms >= 0.05 * rep.total_ms for p in rep.candidates)
    r = ytk(*_args(worked), "--min-ms", "100%")
    assert r.code == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("(nothing)"))
    assert "region families" in line and "under --min-ms" in line and "--min-ms 0 lists them" in line


@pytest.mark.parametrize("bad", ["abc", "-1", "150%", "1 s"])
def test_min_ms_that_is_neither_ms_nor_a_share_is_one_line(ytk, worked, bad):
    r = ytk(*_args(worked), "--min-ms", bad)
    assert r.code == 2 and "--min-ms" in r.stderr and "Traceback" not in r.stderr


def test_a_bundle_compiled_from_another_onnx_is_an_error(ytk, worked, tmp_path):
    """The bundle records the sha256 of the ONNX it was built from: any other graph gets wrong attributions."""
    import onnx

    m = onnx.load(str(worked / "model.onnx"))
    m.doc_string = "re-exported"  # the same graph, another file: what a re-run of prepare can give
    other = tmp_path / "model.onnx"
    onnx.save(m, str(other))
    r = ytk("embedded", "propose", "--profile", worked / "base.tgz", "--onnx", other, "--fx-nodes",
            worked / "fx_nodes.json")
    assert r.code == 2 and "was compiled from a different ONNX" in r.stderr and "Traceback" not in r.stderr


def test_a_generator_refusing_every_proposal_hears_what_roofline_left_out(ytk, worked):
    """A generator of the user's own (contrib/backend-naive-dw takes depthwise convs only) may take nothing
    propose lists while the families it serves sit under NOT WORTH PLUGGING as at roofline: the table said
    "no" to every row and nothing else. propose asks it about those families too and names them."""
    from tests.helpers import simulated_plugin
    from ytk_core.plugins import BackendManager
    from ytk_core.runtime import reset_runtime, runtime
    from ytk_hookspecs.models import SupportAnswer

    def supports(request, ctx):  # type: ignore[no-untyped-def]
        s = request.sketch
        ok = s is not None and s.kind == "conv" and s.kernel == [1, 1]
        return SupportAnswer(supported=ok, certain=False, backend="pwonly",
                             why="a dense 1x1 conv" if ok else "not a dense 1x1 conv")

    reset_runtime()
    gen = simulated_plugin("pwonly", "kernelgen", supports=supports, submit=lambda request, ctx: None)
    runtime()._mgr = BackendManager(extra_plugins={"pwonly": gen})
    try:
        r = ytk(*_args(worked), "--kernelgen", "pwonly")
    finally:
        reset_runtime()
    assert r.code == 0 and "KERNEL GENERATOR (pwonly)" in r.stdout, r.stderr
    lines = r.stdout.splitlines()
    first = lines.index(next(ln for ln in lines if ln.startswith("KERNEL GENERATOR"))) + 1
    takes = [ln.split()[1] for ln in lines[first:first + 3]]
    assert takes == ["no", "no", "no"], r.stdout
    hint = [ln for ln in lines if ln.startswith("pwonly would also take 1x1 / dense GEMMs")]
    assert len(hint) == 1 and hint[0].endswith("left out below as at roofline: --roofline 1 lists it"), r.stdout
    # the trial's transformer: templates said "no" to all 7 rows under a summary that 55% could be taken over
    none = [ln for ln in lines if ln.startswith("pwonly takes none of the")]
    assert len(none) == 1 and "the autoloop would plug nothing (1.00x)" in none[0], r.stdout
    assert "ask another installed generator: " in none[0] and "--kernelgen templates" in none[0], none
    # gaia with no service configured is no generator to ask; templates and triton lack only a GPU here
    assert "--kernelgen gaia" not in none[0] and "--kernelgen triton" in none[0], none
    r = ytk(*_args(worked))  # the mock takes every proposal: nothing to add but what a GPU's generator takes
    assert r.code == 0 and "would also take" not in r.stdout and "takes none of" not in r.stdout
    real = [ln for ln in r.stdout.splitlines() if ln.startswith("mock is a simulator and takes every region; ")]
    assert len(real) == 1 and "on a GPU the automatic kernel generator (templates) would take " in real[0], r.stdout


def test_a_generator_taking_some_roofline_families_is_not_said_to_take_the_row(ytk, worked):
    """The roofline row "1x1 / dense GEMMs" holds several families: a generator taking one of them was said to
    "also take 1x1 / dense GEMMs" with the whole row's time (a new user's Conv1d, which the templates refuse,
    was counted in). The line names the families it takes, of how many."""
    import json

    from tests.helpers import simulated_plugin
    from ytk_core.plugins import BackendManager
    from ytk_core.runtime import reset_runtime, runtime
    from ytk_hookspecs.models import SupportAnswer

    def supports(request, ctx):  # type: ignore[no-untyped-def]
        s = request.sketch
        ok = (s is not None and s.kind == "conv" and s.kernel == [1, 1] and isinstance(s.channels_in, int)
              and isinstance(s.channels_out, int) and s.channels_out > s.channels_in)
        return SupportAnswer(supported=ok, certain=False, backend="expandonly",
                             why="an expanding 1x1 conv" if ok else "not an expanding 1x1 conv")

    def run(*extra):  # type: ignore[no-untyped-def]
        reset_runtime()
        gen = simulated_plugin("expandonly", "kernelgen", supports=supports, submit=lambda request, ctx: None)
        runtime()._mgr = BackendManager(extra_plugins={"expandonly": gen})
        try:
            return ytk(*_args(worked), "--kernelgen", "expandonly", *extra)
        finally:
            reset_runtime()

    j, r = run("--json"), run()
    assert r.code == 0 and j.code == 0, r.stderr + j.stderr
    row = next(x for x in json.loads(j.stdout)["not_worth"] if x["label"] == "1x1 / dense GEMMs")
    taken = row["supported_members"]
    assert 0 < len(taken) < len(row["members"]) and set(taken) <= set(row["members"]), row
    hint = [ln for ln in r.stdout.splitlines() if ln.startswith("expandonly would also take")]
    assert hint == [f"expandonly would also take 1x1 / dense GEMMs: {len(taken)} of its {len(row['members'])} "
                    f"families ({', '.join(taken)}; an expanding 1x1 conv), left out below as at roofline: "
                    "--roofline 1 lists it"], r.stdout


def test_a_chain_of_generators_says_which_one_takes_each_row(ytk, worked):
    """--kernelgen a,b asks a, then b for what a refuses: the table names the generator of every row (it was
    headed by the first row's generator, over rows the second one took)."""
    from tests.helpers import simulated_plugin
    from ytk_core.plugins import BackendManager
    from ytk_core.runtime import reset_runtime, runtime
    from ytk_hookspecs.models import SupportAnswer

    def dw_only(request, ctx):  # type: ignore[no-untyped-def]
        ok = request.sketch is not None and request.sketch.kind == "depthwise_conv"
        return SupportAnswer(supported=ok, certain=True, backend="dwonly", why="depthwise" if ok else "not depthwise")

    def any_region(request, ctx):  # type: ignore[no-untyped-def]
        return SupportAnswer(supported=True, certain=False, backend="anygen", why="compiles anything")

    def propose(*args: str):  # type: ignore[no-untyped-def]
        reset_runtime()
        runtime()._mgr = BackendManager(extra_plugins={
            name: simulated_plugin(name, "kernelgen", supports=fn, submit=lambda request, ctx: None)
            for name, fn in (("dwonly", dw_only), ("anygen", any_region))})
        try:
            return ytk(*_args(worked), *args)
        finally:
            reset_runtime()

    r = propose("--kernelgen", "dwonly,anygen")
    alone = propose("--kernelgen", "dwonly", "--json")
    assert r.code == 0 and "KERNEL GENERATORS (the first that takes it)" in r.stdout, r.stdout + r.stderr
    assert "The kernel generator asked takes" not in r.stdout  # the chain takes every row
    # alone, dwonly takes the depthwise rows only: the closing line says how much of the share that is
    rep = alone.json()
    taken = [p for p in rep["proposals"] if p["supported"]]
    ms = sum(p["ms"] for p in taken)
    assert 0 < len(taken) < len(rep["proposals"]), [(p["name"], p["supported"]) for p in rep["proposals"]]
    assert f"The kernel generator asked takes {len(taken)} of the {len(rep['proposals'])} ({ms:.1f} ms, " \
        in rep["summary"], rep["summary"]
    lines = r.stdout.splitlines()
    first = lines.index(next(ln for ln in lines if ln.startswith("KERNEL GENERATORS"))) + 1
    rows = {ln.split()[0]: ln for ln in lines[first:] if ln.strip() and not ln.startswith(" ")}
    dw = [ln for n, ln in rows.items() if n.startswith("DwConv")]
    other = [ln for n, ln in rows.items() if n.startswith(("LiteMLA", "GConv", "Conv"))]
    assert dw and all(" yes " in ln and "dwonly: depthwise" in ln for ln in dw), dw
    assert other and all(" likely " in ln and "anygen: compiles anything" in ln for ln in other), other


def test_a_gaia_service_setting_that_is_wrong_stops_propose(ytk, worked, tmp_path, monkeypatch):
    """YTK_GAIA_URL at a Kronos worker: no Gaia service can be asked, and no job could run; propose says so (exit
    2) instead of printing "likely ... could not be asked" on every row."""
    from tests.gaia.conftest import KEY, client_env
    from tests.kronos.conftest import Worker

    w = Worker(tmp_path / "kronos")
    try:
        for k, v in client_env(w.url, key=KEY, retry_s="2").items():
            monkeypatch.setenv(k, v)
        r = ytk(*_args(worked), "--kernelgen", "gaia")
    finally:
        w.stop()
    assert r.code == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("error:"))
    assert f"YTK_GAIA_URL {w.url} is a kronos worker, not a gaia service" in line, line
