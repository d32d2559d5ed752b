"""The round's engine compiles are reused only for the very same plugin files."""

from __future__ import annotations

import types
from pathlib import Path

from ytk_core.autoloop.engines import EngineCompiler
from ytk_core.autoloop.state import PluginRecord


def test_a_re_optimization_with_its_plugins_name_is_not_taken_for_the_engine_it_replaces(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    """A re-optimization has the name of the plugin it replaces: matching compiles on names alone reused the
    engine with the new kernel as 'the engine without it', so a losing re-optimization was always kept."""
    import ytk_core.stages.compile as compile_mod
    import ytk_core.stages.verify as verify_mod

    calls = []

    def fake_compile(arch, precision, onnx, npz, out, plugins, engine=None, worker=None):  # type: ignore[no-untyped-def]
        calls.append([Path(p).name for p in plugins])
        Path(out).write_bytes(f"engine {len(calls)}".encode())
        return types.SimpleNamespace(benchmark=types.SimpleNamespace(iterations_ms=[float(len(calls))]))

    monkeypatch.setattr(compile_mod, "run_compile", fake_compile)
    monkeypatch.setattr(verify_mod, "run_verify", lambda *a, **k: types.SimpleNamespace(passed=True, failures=list))
    state = types.SimpleNamespace(arch="x86_64-sm90-linux-cu130-trt10", precision="fp16",
                                  backends=types.SimpleNamespace(engine="mock"), rounds=[types.SimpleNamespace(
                                      compiles=[])], round0_compiles=[])
    ws = types.SimpleNamespace(state=state, path=lambda rel: tmp_path / rel, save=lambda: None,
                               rel=lambda p: str(Path(p).relative_to(tmp_path)))
    eng = EngineCompiler(ws, carver=None)  # type: ignore[arg-type]
    old = PluginRecord(name="Dw", selector="s", origin_round=1, so="old/Dw.so", so_sha256="a" * 64)
    new = old.model_copy(update={"so": "new/Dw.so", "so_sha256": "b" * 64, "replaces": "Dw"})
    prep = tmp_path / "prep"
    a = eng.compile(tmp_path / "with_new.tgz", [new], 1, prep=prep)
    b = eng.compile(tmp_path / "with_old.tgz", [old], 1, prep=prep)
    assert a.bundle != b.bundle and len(calls) == 2  # two engines, both compiled
    assert eng.compile(tmp_path / "again.tgz", [old], 1, prep=prep) is b and len(calls) == 2  # reused
