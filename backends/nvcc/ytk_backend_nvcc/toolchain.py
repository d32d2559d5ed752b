"""Finding nvcc and a host compiler for a target, and running one nvcc build atomically.

Shared by the builder (one plugin per call) and by kernel generators that build many variants
(``ytk-backend-templates`` imports :func:`compile_shared` so that what it scores is built exactly
the way ``build-plugin`` will build the winner).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ytk_hookspecs.models.base import file_mode, replace_file
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import ArchSpec

from .cross import CrossSetup, cross_problems, cross_setup, host_arch, missing_message


#: Flags every build uses. -O3 for host code, device code is optimised by default; fPIC for a .so.
BASE_FLAGS = ("-shared", "-Xcompiler", "-fPIC", "-O3", "-std=c++17", "-lineinfo")


class NvccError(StageError):
    """nvcc ran and failed; ``log`` holds its full output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


@dataclass
class NvccResult:
    output: Path
    cmd: list[str]
    log: str
    wall_s: float
    resources: dict[str, dict[str, int]] = field(default_factory=dict)


def find_nvcc() -> str | None:
    """``$YTK_NVCC``, else ``nvcc`` on PATH, else ``$CUDA_HOME/bin/nvcc`` or /usr/local/cuda/bin/nvcc."""
    env = os.environ.get("YTK_NVCC")
    if env:
        return env if Path(env).is_file() else None
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


@lru_cache(maxsize=8)
def nvcc_version(nvcc: str) -> str:
    """``13.0`` for the given nvcc, or ``unknown``."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else "unknown"


def target_problem(arch: ArchSpec, nvcc: str, config: Mapping[str, Any] | None = None) -> str:
    """Why nvcc here cannot build a plugin that loads on ``arch`` ('' when it can): a CUDA major that the
    target's driver cannot run, and for a target of another CPU everything its cross build lacks
    (:mod:`ytk_backend_nvcc.cross`), all in one line."""
    problems = []
    have = nvcc_version(nvcc)
    try:
        have_major, want_major = int(have.split(".")[0]), int(arch.cuda.split(".")[0])
    except ValueError:
        have_major = want_major = 0
    if have_major > want_major:
        # The static CUDA runtime linked into the plugin needs a driver of its own major version.
        problems.append(f"nvcc here is CUDA {have}, the target runs CUDA {arch.cuda}: a plugin linked against the "
                        f"CUDA {have_major} runtime does not load under a CUDA {arch.cuda} driver; install the CUDA "
                        f"{arch.cuda} toolkit (set YTK_NVCC) to build for it")
    if arch.cpu_arch != host_arch():
        _, missing = cross_problems(arch, nvcc, config, have)
        problems += missing
    if not problems:
        return ""
    return problems[0] if len(problems) == 1 and arch.cpu_arch == host_arch() else missing_message(arch, problems)


_RES = re.compile(r"Compiling entry function '(?P<fn>[^']+)' for '(?P<sm>sm_\d+)'|"
                  r"Used (?P<regs>\d+) registers|(?P<spill_st>\d+) bytes spill stores|"
                  r"(?P<stack>\d+) bytes stack frame")


def parse_ptxas(log: str) -> dict[str, dict[str, int]]:
    """Per kernel: registers, stack frame bytes, spill store bytes, from ``-Xptxas -v`` output."""
    out: dict[str, dict[str, int]] = {}
    cur: dict[str, int] | None = None
    for m in _RES.finditer(log):
        if m.group("fn"):
            cur = out.setdefault(f"{m.group('fn')}@{m.group('sm')}", {})
        elif cur is not None:
            for k in ("regs", "spill_st", "stack"):
                if m.group(k):
                    cur[k] = int(m.group(k))
    return out


def compile_shared(cu_text: str, output: str | Path, arch: ArchSpec, *, extra_flags: tuple[str, ...] = (),
                   ptxas_verbose: bool = False, timeout_s: float = 600, nvcc: str | None = None,
                   shared: bool = True, cross: CrossSetup | None = None) -> NvccResult:
    """Compile one CUDA translation unit into ``output`` (a .so, or an object with ``shared=False``).

    For a target of another CPU, host code is built with ``cross`` (resolved from the environment when
    not given: :func:`ytk_backend_nvcc.cross.cross_setup`).

    The result appears atomically: nvcc writes a temp file in the output's directory, renamed on
    success, so a failed or interrupted build never leaves a half-written plugin. Raises
    :class:`NvccError` (a :class:`StageError`) with nvcc's output when the build fails.
    """
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise StageError("nvcc not found (looked at $YTK_NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); "
                         "install the CUDA toolkit or point YTK_NVCC at nvcc")
    if cross is None and arch.cpu_arch != host_arch():
        cross = cross_setup(arch, nvcc, None, nvcc_version(nvcc))
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    flags = list(BASE_FLAGS if shared else ("-c", "-Xcompiler", "-fPIC", "-O3", "-std=c++17", "-lineinfo"))
    flags += arch.nvcc_arch_flags()
    if cross is not None:
        flags += cross.flags
    if ptxas_verbose:
        flags += ["-Xptxas", "-v"]
    flags += list(extra_flags)
    with tempfile.TemporaryDirectory(prefix="ytk-nvcc-") as td:
        src = Path(td) / f"{out.stem}.cu"
        src.write_text(cu_text)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
        cmd = [nvcc, *flags, "-o", tmp, str(src)]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=td)
        except subprocess.TimeoutExpired:
            Path(tmp).unlink(missing_ok=True)
            raise NvccError(f"nvcc did not finish building {out.name} within {timeout_s:.0f} s") from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        wall = time.perf_counter() - t0
        log = (p.stdout + p.stderr).replace(str(src), src.name)
        if p.returncode != 0:
            Path(tmp).unlink(missing_ok=True)
            tail = "\n".join(log.strip().splitlines()[-25:])
            raise NvccError(f"nvcc failed building {out.name} for {arch.spec} (exit {p.returncode}):\n{tail}", log)
        os.chmod(tmp, file_mode(executable=True))  # a linker's mode under the user's umask
        replace_file(tmp, out)
    return NvccResult(output=out, cmd=[Path(c).name if c == nvcc else c for c in cmd], log=log, wall_s=wall,
                      resources=parse_ptxas(log) if ptxas_verbose else {})
