"""Engine options: ``[backends.tensorrt]`` in ytk.toml (``ctx.config``), overridden by ``CompileRequest.options``.

==================  ==========================================================================
runner              ``trtexec`` or ``python`` (default: trtexec when found, else the package)
trtexec             path of the trtexec to run (default: found as ``probe`` says)
warmup_ms           trtexec ``--warmUp`` before the timed iterations (default 200, trtexec's own)
int8                ``1``: build with ``--int8`` too (the ONNX must carry Q/DQ or a calibration)
workspace_mib       ``--memPoolSize=workspace:<N>M``
cuda_graph          ``1``: time with ``--useCudaGraph``
spin_wait           ``1``: time with ``--useSpinWait`` (steadier figures on a busy host)
build_args          more trtexec arguments for the build (split like a shell would)
run_args            more trtexec arguments for the measuring run
build_timeout_s     default 7200 (a full-size engine with plugins takes minutes, on an Orin more)
run_timeout_s       default 3600
==================  ==========================================================================
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from ytk_hookspecs.errors import StageError


@dataclass(frozen=True)
class EngineOptions:
    runner: str = "auto"
    trtexec: str | None = None
    warmup_ms: int = 200
    int8: bool = False
    workspace_mib: int | None = None
    cuda_graph: bool = False
    spin_wait: bool = False
    build_args: tuple[str, ...] = field(default_factory=tuple)
    run_args: tuple[str, ...] = field(default_factory=tuple)
    build_timeout_s: int = 7200
    run_timeout_s: int = 3600


def _flag(raw: str, key: str) -> bool:
    v = raw.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise StageError(f"tensorrt engine option {key}={raw!r}: expected 1 or 0")


def _int(raw: str, key: str, minimum: int) -> int:
    try:
        v = int(raw)
    except ValueError:
        raise StageError(f"tensorrt engine option {key}={raw!r}: expected a whole number") from None
    if v < minimum:
        raise StageError(f"tensorrt engine option {key}={raw!r}: must be at least {minimum}")
    return v


def engine_options(config: dict[str, Any] | None, overrides: dict[str, str] | None) -> EngineOptions:
    merged = {str(k): str(v) for k, v in (config or {}).items() if not isinstance(v, dict)}
    merged.update(overrides or {})
    known = {"runner", "trtexec", "warmup_ms", "int8", "workspace_mib", "cuda_graph", "spin_wait", "build_args",
             "run_args", "build_timeout_s", "run_timeout_s"}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise StageError(f"unknown tensorrt engine option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    runner = merged.get("runner", "auto")
    if runner not in ("auto", "trtexec", "python"):
        raise StageError(f"tensorrt engine option runner={runner!r}: expected trtexec or python")
    return EngineOptions(
        runner=runner, trtexec=merged.get("trtexec") or None,
        warmup_ms=_int(merged["warmup_ms"], "warmup_ms", 0) if "warmup_ms" in merged else 200,
        int8=_flag(merged.get("int8", "0"), "int8"),
        workspace_mib=_int(merged["workspace_mib"], "workspace_mib", 1) if "workspace_mib" in merged else None,
        cuda_graph=_flag(merged.get("cuda_graph", "0"), "cuda_graph"),
        spin_wait=_flag(merged.get("spin_wait", "0"), "spin_wait"),
        build_args=tuple(shlex.split(merged.get("build_args", ""))),
        run_args=tuple(shlex.split(merged.get("run_args", ""))),
        build_timeout_s=_int(merged["build_timeout_s"], "build_timeout_s", 1) if "build_timeout_s" in merged else 7200,
        run_timeout_s=_int(merged["run_timeout_s"], "run_timeout_s", 1) if "run_timeout_s" in merged else 3600)
