"""What a backend object implements, one :class:`typing.Protocol` per role: the whole stage API.

A plugin registers objects from :func:`ytk_hookspecs.specs.ytk_register_backends`; each carries
its :class:`~ytk_hookspecs.models.BackendInfo` as ``info`` and implements the methods of every
role ``info.roles`` names:

=========  ======================================  ==========================
role       protocol                                methods
=========  ======================================  ==========================
frontend   :class:`FrontendBackend`                ``trace``, ``carve``
engine     :class:`EngineBackend`                  ``compile``, ``profile``
kernelgen  :class:`KernelGenBackend`               ``submit``, ``fetch``, ``supports``
builder    :class:`BuilderBackend`                 ``build_plugin``
=========  ======================================  ==========================

One object may serve several roles (the ``mock`` backend serves three); a distribution may
register any number of objects. Every method is required: ytk checks an object against the
protocols of its roles when it loads it (:func:`backend_problems`) and disables one that lacks a
method or whose method cannot take the protocol's arguments, with a warning naming it. The core
selects ONE backend per role and calls the method on that object only, positionally, with a
:class:`~ytk_hookspecs.context.StageContext` as the last argument. Methods may be called from
several threads at once (the autoloop runs kernel generation jobs concurrently).

An object may also define ``availability(arch)`` (see :class:`Backend`); without it, it is
always available.

Example::

    class MyGenerator:
        info = BackendInfo(name="mygen", roles=["kernelgen"], description="depthwise convs")

        def availability(self, arch=None):
            return Availability(available=shutil.which("nvcc") is not None, reason="needs nvcc")

        def supports(self, request, ctx): ...
        def submit(self, request, ctx): ...
        def fetch(self, job_id, output, ctx): return None   # synchronous: no job to fetch later
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from .models import BackendInfo

if TYPE_CHECKING:  # pragma: no cover
    from .context import StageContext
    from .models import (BuildRequest, BuildResult, CarveRequest, CarveResult,
                         CompileRequest, CompileResult, KernelGenRequest, KernelGenResult, ProfileRequest,
                         ProfileResult, SupportAnswer, SupportRequest, TraceRequest, TraceResult)

__all__ = ["Backend", "BuilderBackend", "EngineBackend", "FrontendBackend", "KernelGenBackend", "ROLE_PROTOCOLS",
           "backend_problems", "role_methods"]


class Backend(Protocol):
    """What every registered object carries.

    ``info`` names the backend, its roles and its automatic-choice priority per role.
    ``availability(arch=None)``, when defined, says whether the backend can run on this machine and
    why not (an :class:`~ytk_hookspecs.models.Availability`); with ``arch`` (an
    :class:`~ytk_hookspecs.models.ArchSpec`) it answers for that target, e.g. a builder that cannot
    cross-compile to aarch64 here. It runs lazily (``ytk backends``, automatic selection) and once
    per target, so keep imports of heavy libraries inside it; an exception it raises makes the
    backend unavailable with that reason.
    """

    info: BackendInfo


class FrontendBackend(Backend, Protocol):
    """Traces a user's model and carves regions out of it (the core's built-in ``torch-export``)."""

    def trace(self, request: "TraceRequest", ctx: "StageContext") -> "TraceResult":
        """Trace a user's model.py and export it (step 1, ``ytk embedded prepare``).

        Must write ``request.onnx_out`` (a flat ONNX graph), ``request.npz_out`` (inputs keyed by
        ONNX input name), ``request.reference_out`` (torch outputs keyed by ONNX output name) and
        ``fx_nodes.json`` beside the ONNX (:class:`~ytk_hookspecs.models.FxNodesFile`), all
        atomically, and return a :class:`~ytk_hookspecs.models.TraceResult`.
        """
        ...

    def carve(self, request: "CarveRequest", ctx: "StageContext") -> "CarveResult":
        """Replace each region matched by ``request.selectors`` with one custom-op node (step 3).

        Called after :meth:`trace` when ``prepare`` is given ``--plugin``. Rewrites ``request.onnx``
        in place (atomically), writes ``plugins.json``, ``candidates.json`` and
        ``plugin_candidates/<Name>.{pt2,io.npz,inputs.pt,reference.py}`` in ``request.prepare_dir``
        and returns a :class:`~ytk_hookspecs.models.CarveResult`. Must not touch other files there
        (generated kernels, reports, built plugins).
        """
        ...


class EngineBackend(Backend, Protocol):
    """Builds an engine from an ONNX file and plugins, and measures it on the target."""

    def compile(self, request: "CompileRequest", ctx: "StageContext") -> "CompileResult":
        """Build an engine (steps 1 and 6, ``ytk embedded compile``).

        Called after the core has matched every custom-op node to a plugin (``request.plugins``).
        Returns a :class:`~ytk_hookspecs.models.CompileResult` naming the engine file and the
        engine's raw layer info; ``simulated`` must be true for anything that is not real hardware.

        Example::

            def compile(self, request, ctx):
                run(["trtexec", f"--onnx={request.onnx}", "--fp16", f"--saveEngine={eng}", ...])
                return CompileResult(engine=eng, backend="tensorrt", ...)
        """
        ...

    def profile(self, request: "ProfileRequest", ctx: "StageContext") -> "ProfileResult":
        """Profile a compiled engine on the target: per-layer times, benchmark, outputs.

        Called right after :meth:`compile` on the same object. Runs the engine on the inputs of
        ``request.request.npz`` and returns per-layer median times (engine layer names, with the ONNX
        nodes each covers when the engine reports them), ``request.iterations`` end-to-end
        latencies in ms, and the outputs as an npz keyed by ONNX output name.
        """
        ...


class KernelGenBackend(Backend, Protocol):
    """Generates a CUDA kernel source bundle for a carved region."""

    def supports(self, request: "SupportRequest", ctx: "StageContext") -> "SupportAnswer":
        """Say whether this generator would take a region, without a GPU and without generating.

        Called by ``ytk embedded propose`` with ``request.sketch`` only (what propose knows before
        any carve), and by the autoloop and ``ytk kernelgen compile --dry-run`` after the carve with
        ``request.candidate`` and ``request.reference`` (the region's canonical ``.pt2``) too.
        Answer from the same rules :meth:`submit` applies, so that a region answered
        ``supported=False`` is one the job would refuse; set ``certain=False`` when what you were
        shown cannot decide (the job then does). Must be fast: no compile, no GPU. Always return a
        :class:`~ytk_hookspecs.models.SupportAnswer`; anything else counts as a refusal.

        Example::

            def supports(self, request, ctx):
                s = request.sketch
                if s is not None and s.kind != "depthwise_conv":
                    return SupportAnswer(supported=False, why=f"no kernel for {s.kind}", backend="mygen")
                return SupportAnswer(supported=True, certain=s is None, why="depthwise conv", backend="mygen")
        """
        ...

    def submit(self, request: "KernelGenRequest", ctx: "StageContext") -> "KernelGenResult":
        """Generate a kernel for a carved region (step 4, ``ytk kernelgen compile``).

        ``request.reference`` is the region's ``.pt2``; ``request.candidate`` (when known) is its
        ``candidates.json`` entry. A generator that finishes synchronously writes
        ``request.output`` (a kernel source bundle, :mod:`ytk_hookspecs.kernel_source`) and its
        ``report.json`` (:func:`ytk_hookspecs.kernel_source.report_path`) and returns
        ``status="done"``; a remote one may return ``status="running"`` with a ``job_id`` that
        :meth:`fetch` resolves later. A region it cannot handle is ``status="failed"`` with the
        reason in ``message``, never a made-up kernel.

        ``request.config`` holds the user's ``--config key=value`` pairs for this generator (only the
        keys its ``info.config_keys`` declares; the core refuses others); a value it cannot use is
        :class:`~ytk_hookspecs.errors.BadConfig` raised before any work (exit 2). What the core decides comes
        typed: ``request.deployment_target`` and, when ``ytk autoloop`` re-optimizes a kernel that is
        already plugged, ``request.reoptimize`` (a :class:`~ytk_hookspecs.models.Reoptimization`:
        ``ms_to_beat``, the region's engine time per site now, and when known ``kernel_ms_to_beat``,
        the plugged kernel's own time per site): search harder, and fail the job when nothing beats
        ``request.reoptimize.bar_ms()``. Read the ``.pt2`` with
        :func:`ytk_hookspecs.pt2.load_exported` (``torch.export.load`` is not thread-safe).

        Example::

            def submit(self, request, ctx):
                KernelSource(header=h, source=cu, meta=PluginMeta(...)).write(request.output)
                report = KernelReport(...).write(report_path(request.output))
                return KernelGenResult(job_id="mygen-1", status="done", source=request.output, report=report)
        """
        ...

    def fetch(self, job_id: str, output: Path, ctx: "StageContext") -> "KernelGenResult | None":
        """Fetch a job's result by id (``ytk kernelgen get JOB``).

        Writes the source bundle to ``output`` when the job is done and returns its
        :class:`~ytk_hookspecs.models.KernelGenResult`; ``status="running"`` while it is not; ``None``
        when this generator does not know the job (a synchronous generator that keeps no jobs
        always returns ``None``).
        """
        ...


class BuilderBackend(Backend, Protocol):
    """Builds a kernel source bundle into an engine plugin ``.so``."""

    def build_plugin(self, request: "BuildRequest", ctx: "StageContext") -> "BuildResult":
        """Build a plugin (step 5, ``ytk embedded build-plugin``).

        ``request.source`` is already renamed to ``request.plugin_name`` (in a copy) and
        contract-checked. Must write ``request.output`` atomically, embed the self-description
        (:mod:`ytk_hookspecs.plugin_info`) and return a :class:`~ytk_hookspecs.models.BuildResult`.
        """
        ...


#: The protocol each role's objects are checked against.
ROLE_PROTOCOLS: dict[str, type] = {"frontend": FrontendBackend, "engine": EngineBackend,
                                   "kernelgen": KernelGenBackend, "builder": BuilderBackend}


def role_methods(role: str) -> dict[str, int]:
    """The methods a ``role`` requires, each with the number of arguments the core passes it."""
    proto = ROLE_PROTOCOLS[role]
    return {name: len(inspect.signature(fn).parameters) - 1 for name, fn in vars(proto).items()
            if inspect.isfunction(fn) and not name.startswith("_")}


def backend_problems(obj: Any) -> list[str]:
    """Why ``obj`` cannot serve as a backend (empty when it can): no valid ``info``, or a method of one
    of its roles missing, not callable, or unable to take the arguments the core passes it."""
    try:
        info = obj.info if isinstance(obj.info, BackendInfo) else BackendInfo.model_validate(obj.info)
    except AttributeError:
        return [f"{type(obj).__name__} has no `info` (a BackendInfo)"]
    except ValidationError as e:
        return [f"its `info` is not a valid BackendInfo: {' '.join(str(e).split())[:300]}"]
    wanted = {"availability": 1} if hasattr(obj, "availability") else {}
    for role in info.roles:
        wanted.update(role_methods(role))
    missing = [f"{name}()" for name in wanted if getattr(obj, name, None) is None]
    problems: list[str] = []
    if missing:
        problems.append(f"it declares role(s) {', '.join(info.roles)} but has no method {', '.join(missing)}")
    for name, nargs in wanted.items():
        method = getattr(obj, name, None)
        if method is None:
            continue
        if not callable(method):
            problems.append(f"its {name} is not callable")
        else:
            try:
                inspect.signature(method).bind(*range(nargs))
            except TypeError as e:
                problems.append(f"its {name}() cannot take the {nargs} argument(s) ytk passes ({e})")
            except ValueError:  # a builtin without a signature: it is called and will say so
                pass
    return problems
