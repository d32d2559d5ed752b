"""Is TensorRT here, and which: ``trtexec`` (its banner names the version) or the ``tensorrt`` package.

trtexec is looked for, first found wins: ``$YTK_TRTEXEC``, then ``PATH``, then ``$TENSORRT_HOME/bin``,
then where DRIVE OS, JetPack and the NGC containers put it (``/usr/src/tensorrt/bin``) and
``/usr/local/tensorrt/bin``. A run also honours ``trtexec = ...`` under ``[backends.tensorrt]`` in
ytk.toml, first of all (the availability check sees only the environment). Its version is
read from the ``[TensorRT vNNNN]`` banner that even ``trtexec --help`` prints, so probing needs no GPU; the
same help lists its flags, one ``  --name`` per line, which says what this trtexec takes (``--markDebug``
and ``--saveDebugTensors`` are in some TensorRT 10 releases and not in 8.6).
The package is found without importing it first (``importlib.util.find_spec``), then imported once for
its ``__version__``; neither is ever claimed present without being found.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ytk_hookspecs.models import ArchSpec, Availability

from .versions import TrtVersion

TRTEXEC_ENV = "YTK_TRTEXEC"
HOME_ENV = "TENSORRT_HOME"
STANDARD_TRTEXEC: tuple[str, ...] = ("/usr/src/tensorrt/bin/trtexec", "/usr/local/tensorrt/bin/trtexec")
PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class TrtexecTool:
    path: str
    version: TrtVersion | None
    banner: str = ""
    flags: frozenset[str] = frozenset()  # the options its --help lists (empty: the help could not be read)

    def takes(self, *flags: str) -> bool:
        """Whether this trtexec's help lists every one of ``flags``."""
        return all(f in self.flags for f in flags)


@dataclass
class Probe:
    trtexec: TrtexecTool | None = None
    python_version: TrtVersion | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def version(self) -> TrtVersion | None:
        """The TensorRT this machine runs (trtexec's when both are here)."""
        if self.trtexec is not None and self.trtexec.version is not None:
            return self.trtexec.version
        return self.python_version


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def find_trtexec(configured: str | None = None) -> tuple[str | None, str]:
    """(path, '') or (None, why not); a configured path that is not there is reported, never replaced."""
    for value, where in ((configured, "ytk.toml [backends.tensorrt] trtexec"),
                         (os.environ.get(TRTEXEC_ENV), f"${TRTEXEC_ENV}")):
        if value:
            p = Path(value).expanduser()
            if _executable(p):
                return str(p), ""
            found = shutil.which(value)
            if found:
                return found, ""
            return None, f"{where}={value} is not an executable file"
    on_path = shutil.which("trtexec")
    if on_path:
        return on_path, ""
    candidates = [Path(os.environ[HOME_ENV]) / "bin" / "trtexec"] if os.environ.get(HOME_ENV) else []
    candidates += [Path(p) for p in STANDARD_TRTEXEC]
    for p in candidates:
        if _executable(p):
            return str(p), ""
    return None, ("no trtexec on PATH" + (f", in ${HOME_ENV}/bin" if os.environ.get(HOME_ENV) else "")
                  + f" or in {', '.join(STANDARD_TRTEXEC)}")


_HELP_FLAG = re.compile(r"^\s{1,8}(--[A-Za-z][A-Za-z0-9]*)\b", re.M)


def help_flags(text: str) -> frozenset[str]:
    """The options a ``trtexec --help`` lists: each at the start of its line (``  --markDebug   Specify ...``;
    an alias after a comma, ``--versionCompatible, --vc``, is not needed here)."""
    return frozenset(_HELP_FLAG.findall(text))


@functools.lru_cache(maxsize=16)
def _trtexec_version(path: str, mtime_ns: int) -> tuple[TrtVersion | None, str, frozenset[str]]:
    try:
        p = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                           errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"`{path} --help` failed ({type(e).__name__})", frozenset()
    text = p.stdout + p.stderr
    banner = next((ln for ln in text.splitlines() if "TensorRT.trtexec" in ln), "")
    return TrtVersion.from_log(text), banner, help_flags(text)


def trtexec_tool(path: str) -> TrtexecTool:
    version, banner, flags = _trtexec_version(path, Path(path).stat().st_mtime_ns)
    return TrtexecTool(path=path, version=version, banner=banner, flags=flags)


def python_tensorrt() -> tuple[TrtVersion | None, str]:
    """(version, '') when ``import tensorrt`` works, else (None, why not)."""
    try:
        if importlib.util.find_spec("tensorrt") is None:
            return None, "no tensorrt Python package"
    except (ImportError, ValueError) as e:
        return None, f"tensorrt package not inspectable ({type(e).__name__})"
    try:
        import tensorrt  # noqa: PLC0415  -- heavy, and only when it is there
    except Exception as e:  # noqa: BLE001  -- a broken install must not take `ytk backends` down
        return None, f"the tensorrt package does not import ({type(e).__name__}: {str(e)[:120]})"
    try:
        return TrtVersion.parse(str(getattr(tensorrt, "__version__", ""))), ""
    except ValueError:
        return None, f"the tensorrt package reports no usable version ({getattr(tensorrt, '__version__', None)!r})"


def probe(configured_trtexec: str | None = None) -> Probe:
    result = Probe()
    path, why = find_trtexec(configured_trtexec)
    if path is not None:
        result.trtexec = trtexec_tool(path)
        if result.trtexec.version is None:
            result.problems.append(f"{path} printed no TensorRT version banner")
    else:
        result.problems.append(why)
    result.python_version, why_py = python_tensorrt()
    if result.python_version is None:
        result.problems.append(why_py)
    return result


def availability(arch: ArchSpec | None, configured_trtexec: str | None = None) -> Availability:
    p = probe(configured_trtexec)
    details: dict[str, str] = {}
    if p.trtexec is not None:
        details["trtexec"] = p.trtexec.path
        details["trtexec_version"] = str(p.trtexec.version or "unknown")
    if p.python_version is not None:
        details["tensorrt_python"] = str(p.python_version)
    if p.trtexec is None and p.python_version is None:
        return Availability(available=False, reason="TensorRT not found: " + "; ".join(p.problems), details=details)
    parts = []
    if p.trtexec is not None:
        parts.append(f"trtexec {p.trtexec.version or '(version unknown)'} at {p.trtexec.path}")
    if p.python_version is not None:
        parts.append(f"tensorrt {p.python_version} (Python)")
    reason = ", ".join(parts)
    version = p.version
    if arch is not None and version is not None and not _same_tensorrt(version, arch):
        reason += f"; it is TensorRT {version}, not the target's {arch.tensorrt}: figures are this machine's"
    return Availability(available=True, reason=reason, details=details)


def _same_tensorrt(version: TrtVersion, arch: ArchSpec) -> bool:
    parts = arch.tensorrt.split(".")
    if version.major != int(parts[0]):
        return False
    return len(parts) < 2 or version.minor == int(parts[1])
