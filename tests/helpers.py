"""Helpers shared across test modules: prepared directories (computed once) and test backends."""

from __future__ import annotations

import contextlib
import io
import types
from pathlib import Path
from typing import Any

from tests.conftest import REPO, Result
from ytk_core.config import env_overlay

EVIT = REPO / "contrib" / "models" / "efficientvit_b1" / "model.py"
MNV3 = REPO / "contrib" / "models" / "mobilenetv3" / "model.py"
VIT = REPO / "contrib" / "models" / "tiny_vit" / "model.py"

SPEC_SIX = [
    "yasp::LiteMLAC384=LiteMLA:around@where=*m.stages.2.blocks.*.context_module.main",
    "yasp::LiteMLAC768=LiteMLA:around@where=*m.stages.3.blocks.*.context_module.main",
    "yasp::DwConv3x3s1Dyn=ConvNormAct@where=*.0.blocks.1.main.depth_conv,*.local_module.main.depth_conv,"
    "*.res0.main.depth_conv",
    "yasp::DwConv5x5s1C384=Conv2d@where=*m.stages.2.blocks.*.context_module.main.aggreg.0.0",
    "yasp::DwConv5x5s1C768=Conv2d@where=*m.stages.3.blocks.*.context_module.main.aggreg.0.0",
    "yasp::DwConv3x3s1C256=ConvNormAct@where=*.1.blocks.1.main.depth_conv,*.2.main.depth_conv",
]


def ytk_inproc(*args: str, **envs: str) -> Result:
    from ytk_core.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with env_overlay(envs), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return Result(code, out.getvalue(), err.getvalue())


def prepare(model: Path, out: Path, selectors: list[str] = (), size: str = "1x64x96") -> Result:
    args = ["embedded", "prepare", model, "--onnx-out", out / "model.onnx", "--npz-out", out / "model.npz",
            "--reference-out", out / "model.reference.npz"]
    for s in selectors:
        args += ["--plugin", s]
    return ytk_inproc(*args, YTK_EXAMPLE_SIZE=size)


def backend_object(name: str, roles: list[str], *, description: str = "", simulated: bool = False,
                   available: bool = True, priority: int | None = None, **methods: Any) -> Any:
    """A backend object ``name`` serving ``roles`` with ``methods`` (plain functions taking the role
    methods' arguments, e.g. ``submit=lambda request, ctx: ...``), as a third-party package registers."""
    from ytk_hookspecs.models import Availability, BackendInfo

    info = BackendInfo(name=name, roles=roles, description=description or f"test {name}", simulated=simulated,
                       auto_priority={r: priority for r in roles} if priority is not None else {})

    def availability(arch: Any = None) -> Availability:
        return Availability(available=available, reason="test backend" if available else f"{name} missing")

    return types.SimpleNamespace(info=info, availability=availability, **methods)


def backend_plugin(*backends: Any) -> types.ModuleType:
    """A plugin module whose ``ytk_register_backends`` registers ``backends``, as an installed
    package's ``plugin.py`` does (pass it to ``BackendManager(extra_plugins=...)``)."""
    from ytk_hookspecs import hookimpl

    mod = types.ModuleType("test_backend_plugin")

    @hookimpl
    def ytk_register_backends(register):  # type: ignore[no-untyped-def]
        for b in backends:
            register(b)

    mod.ytk_register_backends = ytk_register_backends
    return mod


def simulated_plugin(name: str, role: str, **methods: Any) -> types.ModuleType:
    """A plugin registering a simulated test backend ``name`` in ``role`` with ``methods`` (usually
    wrapping the mock's); a kernel generator given no ``supports`` answers "supported, not certain"
    (its job decides) and one given no ``fetch`` knows no job."""
    from ytk_hookspecs.models import SupportAnswer

    if role == "kernelgen":
        methods.setdefault("supports", lambda request, ctx: SupportAnswer(supported=True, certain=False,
                                                                          why="test generator: its job decides"))
        methods.setdefault("fetch", lambda job_id, output, ctx: None)
    return backend_plugin(backend_object(name, [role], description=f"test {role} around the mock", simulated=True,
                                         **methods))


def as_real_source(path: Path) -> Path:
    """The mock generator's source at ``path`` rewritten without its SIMULATED marks, for tests of the build
    path that need a source a real builder compiles (its CUDA body still computes nothing; nothing runs it)."""
    from ytk_hookspecs.kernel_source import KernelSource

    src = KernelSource.read(path)
    real = [c for c in src.meta.constraints if not c.startswith("SIMULATED")]
    meta = src.meta.model_copy(update={"constraints": real, "perf": None})
    KernelSource(header=src.header, source=src.source, meta=meta, generator="test: a build-path fixture").write(path)
    return path


def autoloop_with_generator(workdir: Path, name: str, submit: Any, model: Path, rounds: int = 3,
                            kernelgen: str | None = None) -> Any:
    """``run_autoloop`` on the mock engine and builder for the simulated Orin, with a test kernel generator
    ``name`` whose ``submit`` is given (``kernelgen``: the chain to use, default ``name`` alone), --min-gain-ms
    0.001; the runtime is reset before and after."""
    from ytk_core.autoloop.run import run_autoloop
    from ytk_core.autoloop.state import BackendChoice
    from ytk_core.plugins import BackendManager
    from ytk_core.runtime import reset_runtime, runtime

    reset_runtime()
    runtime()._mgr = BackendManager(extra_plugins={name: simulated_plugin(name, "kernelgen", submit=submit)})
    try:
        return run_autoloop(model, "arm64-sm87-dos6010-cu114-trt86", "fp16", workdir,
                            BackendChoice(engine="mock", kernelgen=kernelgen or name, builder="mock"), rounds, 0.001,
                            2, None)
    finally:
        reset_runtime()


def site_env(site: Path) -> dict[str, str]:
    """This process's environment with ``site`` (a ``pip install --target`` folder) first on PYTHONPATH: a
    distribution installed there is found by ytk's entry-point discovery in a subprocess."""
    import os

    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
