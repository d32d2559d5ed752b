"""The hook specifications: the whole API a ytk backend implements.

A backend is a module (or object) registered under the entry-point group ``ytk``. It implements
:func:`ytk_register_backend` plus the stage hooks of the roles it serves:

=========  ==========================================================
role       stage hooks
=========  ==========================================================
frontend   :func:`ytk_trace`, :func:`ytk_carve`
engine     :func:`ytk_engine_compile`, :func:`ytk_engine_profile`
kernelgen  :func:`ytk_kernelgen_submit`, :func:`ytk_kernelgen_fetch`, :func:`ytk_kernelgen_supports`
builder    :func:`ytk_build_plugin`
=========  ==========================================================

The core selects ONE backend per role (flag > environment > ``ytk.toml`` > automatic) and calls
the stage hook on that backend only, so a stage hook is never a broadcast: every stage hook is
``firstresult`` and receives exactly the backend's own call. Every request and result is a
pydantic model from :mod:`ytk_hookspecs.models` carrying a ``schema_version``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .markers import hookspec

if TYPE_CHECKING:  # pragma: no cover
    from .context import StageContext
    from .models import (Availability, BackendInfo, BuildRequest, BuildResult, CarveRequest,
                         CarveResult, CompileRequest, CompileResult, KernelGenRequest,
                         KernelGenResult, ProfileRequest, ProfileResult, SupportAnswer, SupportRequest,
                         TraceRequest, TraceResult)

    RegisterFn = Callable[[BackendInfo, Callable[[], Availability] | None], None]


@hookspec
def ytk_register_backend(register: "RegisterFn") -> None:
    """Declare the backend this plugin provides.

    Called once per plugin when ytk starts. Call ``register(info, probe)`` exactly once, where
    ``info`` is a :class:`~ytk_hookspecs.models.BackendInfo` and ``probe`` is an optional
    callable returning :class:`~ytk_hookspecs.models.Availability`. The probe runs lazily
    (``ytk backends``, automatic selection), so keep imports of heavy libraries inside it. A probe
    may take one keyword argument ``arch`` (an :class:`~ytk_hookspecs.models.ArchSpec` or None)
    to answer for a specific target, e.g. a builder that cannot cross-compile to aarch64 here.
    An exception raised here disables this backend with a warning naming its distribution; the
    rest of ytk keeps working.

    Example::

        @hookimpl
        def ytk_register_backend(register):
            register(BackendInfo(name="mygpu", roles=["engine"], description="My engine"),
                     probe=lambda: Availability(available=shutil.which("myc") is not None,
                                                reason="myc not on PATH"))
    """


@hookspec(firstresult=True)
def ytk_trace(request: "TraceRequest", ctx: "StageContext") -> "TraceResult | None":
    """Trace a user's model.py and export it (step 1, ``ytk embedded prepare``).

    Called on the selected frontend with a :class:`~ytk_hookspecs.models.TraceRequest`. Must
    write ``request.onnx_out`` (a flat ONNX graph), ``request.npz_out`` (inputs keyed by ONNX input
    name), ``request.reference_out`` (torch outputs keyed by ONNX output name) and ``fx_nodes.json``
    beside the ONNX (:class:`~ytk_hookspecs.models.FxNodesFile`), all atomically, and return a
    :class:`~ytk_hookspecs.models.TraceResult`.

    Example::

        @hookimpl
        def ytk_trace(request, ctx):
            with ctx.progress("exporting"):
                ...
            return TraceResult(onnx=request.onnx_out, ...)
    """


@hookspec(firstresult=True)
def ytk_carve(request: "CarveRequest", ctx: "StageContext") -> "CarveResult | None":
    """Replace each region matched by ``request.selectors`` with one custom-op node (step 3).

    Called after :func:`ytk_trace` when ``prepare`` is given ``--plugin``. Rewrites
    ``request.onnx`` in place (atomically), writes ``plugins.json``, ``candidates.json`` and
    ``plugin_candidates/<Name>.{pt2,io.npz,inputs.pt,reference.py}`` in ``request.prepare_dir``,
    and returns a :class:`~ytk_hookspecs.models.CarveResult`. Must not touch other files there
    (generated kernels, reports, built plugins).

    Example::

        result = pm.call("frontend", "ytk_carve", request=CarveRequest(selectors=[
            "yasp::DwConv5x5s1C384=Conv2d@where=*m.stages.2.blocks.*.context_module.main.aggreg.0.0"],
            ...))
    """


@hookspec(firstresult=True)
def ytk_kernelgen_submit(request: "KernelGenRequest", ctx: "StageContext") -> "KernelGenResult | None":
    """Generate a kernel for a carved region (step 4, ``ytk kernelgen compile``).

    Called on the selected kernelgen backend. ``request.reference`` is the region's ``.pt2``;
    ``request.candidate`` (when known) is its ``candidates.json`` entry. A backend that finishes
    synchronously writes ``request.output`` (a kernel source bundle, see
    :mod:`ytk_hookspecs.kernel_source`) and a ``report.json`` beside it and returns
    ``status="done"``; a remote backend may return ``status="running"`` with a ``job_id`` that
    :func:`ytk_kernelgen_fetch` resolves later. A region the backend cannot handle is
    ``status="failed"`` with the reason in ``message``, never a made-up kernel.

    ``request.config`` holds the user's ``--config key=value`` pairs (``deployment_target`` is
    always there). When ``ytk autoloop`` re-optimizes a kernel that is already plugged it adds
    ``reoptimize=1``, ``ms_to_beat`` (the region's engine time per site now) and, when known,
    ``kernel_ms_to_beat`` (the plugged kernel's own measured time per site): search harder, and fail
    the job when nothing beats them. The hook may run in several threads at once (the autoloop
    generates concurrently): read the ``.pt2`` with :func:`ytk_hookspecs.pt2.load_exported`.

    Example::

        @hookimpl
        def ytk_kernelgen_submit(request, ctx):
            src = KernelSource(header=h, source=cu, meta=PluginMeta(...))
            src.write(request.output)
            report = KernelReport(...).write(report_path(request.output))
            return KernelGenResult(job_id="local-1", status="done", source=request.output, report=report)
    """


@hookspec(firstresult=True)
def ytk_kernelgen_supports(request: "SupportRequest", ctx: "StageContext") -> "SupportAnswer | None":
    """Say whether this generator would take a region, without a GPU and without generating.

    Called on the selected kernelgen backend by ``ytk embedded propose`` (``request.sketch`` only:
    what propose knows before any carve) and by the autoloop and ``ytk kernelgen compile --dry-run``
    after the carve (``request.candidate`` and ``request.reference``, the region's canonical ``.pt2``,
    too). Answer from the same rules :func:`ytk_kernelgen_submit` applies, so that a region answered
    ``supported=False`` is one the job would refuse; set ``certain=False`` when the sketch alone
    cannot decide. Must be fast (no compile, no GPU). Returning ``None`` means "not answered": the
    core then treats the region as supported and lets the job decide.

    Example::

        @hookimpl
        def ytk_kernelgen_supports(request, ctx):
            s = request.sketch
            if s is not None and s.kind != "depthwise_conv":
                return SupportAnswer(supported=False, why=f"no kernel for {s.kind}", backend="mygen")
            return SupportAnswer(supported=True, why="depthwise conv", backend="mygen")
    """


@hookspec(firstresult=True)
def ytk_kernelgen_fetch(job_id: str, output: "Any", ctx: "StageContext") -> "KernelGenResult | None":
    """Fetch a kernel generation job's result by id (``ytk kernelgen get JOB``).

    Called on the selected kernelgen backend. Writes the source bundle to ``output`` (a path) when
    the job is done and returns its :class:`~ytk_hookspecs.models.KernelGenResult`; returns
    ``status="running"`` while it is not; ``None`` when the backend does not know the job.

    Example::

        @hookimpl
        def ytk_kernelgen_fetch(job_id, output, ctx):
            return client.fetch(job_id, output)
    """


@hookspec(firstresult=True)
def ytk_build_plugin(request: "BuildRequest", ctx: "StageContext") -> "BuildResult | None":
    """Build a kernel source bundle into an engine plugin ``.so`` (step 5).

    Called on the selected builder with a :class:`~ytk_hookspecs.models.BuildRequest` whose
    ``source`` is already renamed to ``plugin_name`` (in a copy) and contract-checked. Must write
    ``request.output`` atomically, embed the self-description (:mod:`ytk_hookspecs.plugin_info`)
    and return a :class:`~ytk_hookspecs.models.BuildResult`.

    Example::

        @hookimpl
        def ytk_build_plugin(request, ctx):
            subprocess.run(["nvcc", ..., "-o", tmp], check=True)
            os.replace(tmp, request.output)
            return BuildResult(so_path=request.output, description=desc)
    """


@hookspec(firstresult=True)
def ytk_engine_compile(request: "CompileRequest", ctx: "StageContext") -> "CompileResult | None":
    """Build an engine from an ONNX file and plugins (steps 1 and 6, ``ytk embedded compile``).

    Called on the selected engine after the core has matched every custom-op node to a plugin.
    Returns a :class:`~ytk_hookspecs.models.CompileResult` naming the engine file and the engine's
    raw layer info; ``simulated`` must be true for anything that is not real hardware.

    Example::

        @hookimpl
        def ytk_engine_compile(request, ctx):
            run(["trtexec", f"--onnx={request.onnx}", "--fp16", f"--saveEngine={eng}", ...])
            return CompileResult(engine=eng, backend="tensorrt", ...)
    """


@hookspec(firstresult=True)
def ytk_engine_profile(request: "ProfileRequest", ctx: "StageContext") -> "ProfileResult | None":
    """Profile a compiled engine on the target: per-layer times, benchmark, outputs.

    Called right after :func:`ytk_engine_compile` on the same backend. Runs the engine on the
    inputs of ``request.request.npz``, returns per-layer median times (engine layer names, with
    the ONNX nodes each covers when the engine reports them), ``request.iterations`` end-to-end
    latencies in ms, and the outputs as an npz keyed by ONNX output name.

    Example::

        @hookimpl
        def ytk_engine_profile(request, ctx):
            return ProfileResult(layers=[LayerTime(name="/conv_7/Conv + PWN(...)", median_ms=0.8)],
                                 iterations_ms=[...], outputs=out_npz, device="Orin", simulated=False)
    """


@hookspec
def ytk_cli_commands(cli: "Any") -> None:
    """Add commands to the ``ytk`` CLI (called on every plugin, e.g. ``ytk worker kronos``).

    ``cli`` is the :class:`ytk_core.cli.CliExtension` with ``.worker`` (the ``ytk worker`` typer
    group) and ``.root`` (the top-level typer app). Add commands with the usual typer decorators.

    Example::

        @hookimpl
        def ytk_cli_commands(cli):
            @cli.worker.command("kronos")
            def kronos(port: int = 8470): ...
    """
