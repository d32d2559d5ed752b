"""Building a plugin on this host for a target of another CPU: DRIVE AGX Orin and Jetson (aarch64).

Device code needs nothing but nvcc (``-gencode ... sm_87``). Host code -- the launcher, the TensorRT
shim, the static CUDA runtime linked into the plugin -- must be compiled and linked for the target, from
three things that describe it (each a setting: ``[backends.nvcc]`` in ytk.toml, or the environment
variable, which wins):

``cross_cxx`` / ``YTK_CROSS_CXX``
    a C++ compiler that emits code for the target's CPU. Default: ``aarch64-linux-gnu-g++`` on PATH
    (Debian/Ubuntu: ``apt install g++-aarch64-linux-gnu``; DRIVE OS ships
    ``aarch64-buildroot-linux-gnu-g++`` in its toolchain directory).
``target_cuda`` / ``YTK_TARGET_CUDA``
    the CUDA runtime built for the target: a directory with ``lib/libcudart_static.a`` and
    ``lib/libcudadevrt.a`` (and, where it has them, the headers under ``include/``). Default: the
    toolkit's own cross target
    (``<CUDA>/targets/aarch64-linux``, which DRIVE OS and JetPack cross-development packages
    install), else the one inside the sysroot.
``target_sysroot`` / ``YTK_TARGET_SYSROOT``
    the target's root file system (DRIVE OS: ``/drive/drive-linux/filesystem/targetfs``; JetPack:
    the L4T ``rootfs``), passed to the compiler as ``--sysroot``: the plugin then links against the
    target's own C library. Optional, but without it the plugin needs the C library of the cross
    compiler's distribution, which :func:`check_output` compares with what the target's OS ships.

What is missing is reported all at once (:func:`cross_problems`), one line, before nvcc runs; what the
build produced is checked after it (:func:`check_output`): ELF machine, needed libraries, the
C/C++ library versions it requires, the symbols it exports.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import ArchSpec

#: setting name in ``[backends.nvcc]`` -> environment variable
SETTINGS = {"cross_cxx": "YTK_CROSS_CXX", "target_cuda": "YTK_TARGET_CUDA", "target_sysroot": "YTK_TARGET_SYSROOT"}

#: target CPU -> (compiler names looked for on PATH, nvcc's targets/ directory, ELF e_machine, readelf's name)
_CPUS = {
    "aarch64": (("aarch64-linux-gnu-g++", "aarch64-buildroot-linux-gnu-g++", "aarch64-none-linux-gnu-g++"),
                "aarch64-linux", 183, "AArch64"),
    "x86_64": (("x86_64-linux-gnu-g++",), "x86_64-linux", 62, "Advanced Micro Devices X86-64"),
}

#: The C and C++ runtime each target OS release ships (its Ubuntu base): the newest GLIBC_ / GLIBCXX_
#: symbol version a plugin may require there. DRIVE OS 6.0 and JetPack 5 are Ubuntu 20.04, JetPack 6
#: is 22.04, DRIVE OS 7 and JetPack 7 are 24.04.
_UBUNTU = {"20.04": ((2, 31), (3, 4, 28)), "22.04": ((2, 35), (3, 4, 30)), "24.04": ((2, 39), (3, 4, 33))}


def target_os_runtime(arch: ArchSpec) -> tuple[str, tuple[int, ...], tuple[int, ...]] | None:
    """(what the target OS is, its glibc version, its newest GLIBCXX) when the arch spec's OS names a
    release whose base is known; None for ``linux`` and others."""
    v = arch.os_version or ""
    if arch.os == "drive-os" and v:
        major = int(v.split(".")[0])
        base = {6: "20.04", 7: "24.04"}.get(major)
        name = f"DRIVE OS {v}"
    elif arch.os == "jetpack" and v.isdigit():
        # jp5 / jp512 = JetPack 5.x; l4t35 / l4t36 / l4t38 = L4T r35 (JetPack 5), r36 (6), r38 (7)
        if v.startswith("3") and len(v) == 2:
            major, name = {"35": 5, "36": 6, "38": 7}.get(v, 0), f"L4T r{v}"
        else:
            major, name = int(v[0]), f"JetPack {v[0]}"
        base = {5: "20.04", 6: "22.04", 7: "24.04"}.get(major)
    else:
        return None
    if base is None:
        return None
    glibc, glibcxx = _UBUNTU[base]
    return f"{name} (Ubuntu {base})", glibc, glibcxx


def setting(name: str, config: Mapping[str, Any] | None) -> str:
    """A cross-build setting: the environment variable, else ``[backends.nvcc]`` in ytk.toml, else ''."""
    env = os.environ.get(SETTINGS[name], "")
    if env:
        return env
    value = (config or {}).get(name, "")
    return str(value) if value else ""


@dataclass
class CrossSetup:
    """How nvcc builds host code for a foreign CPU: the compiler and the extra flags."""

    cpu_arch: str
    cxx: str
    cuda_lib: Path
    include: Path | None  # None: nvcc's own target directory has the headers
    sysroot: Path | None
    flags: list[str] = field(default_factory=list)


@lru_cache(maxsize=8)
def nvcc_top(nvcc: str) -> Path | None:
    """The toolkit root nvcc runs from (``TOP`` in its dry run; nvcc may be a wrapper script)."""
    try:
        p = subprocess.run([nvcc, "-dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"^#\$ TOP=(.+)$", p.stdout + p.stderr, re.M)
    return Path(m.group(1).strip()).resolve() if m else None


@lru_cache(maxsize=16)
def _compiler_target(cxx: str) -> str:
    """What ``cxx -dumpmachine`` says it builds for (``aarch64-linux-gnu``), or ''."""
    try:
        return subprocess.run([cxx, "-dumpmachine"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _archive_machine(path: Path) -> int | None:
    """e_machine of the first ELF object inside a static library (``!<arch>`` format), or None."""
    try:
        with path.open("rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return None
    i = data.find(b"\x7fELF")
    if i < 0 or len(data) < i + 20:
        return None
    return int.from_bytes(data[i + 18:i + 20], "little" if data[i + 5] == 1 else "big")


def _cudart_version(include: Path) -> str:
    try:
        text = (include / "cuda_runtime_api.h").read_text(errors="replace")
    except OSError:
        return ""
    m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", text)
    return f"{int(m.group(1)) // 1000}.{int(m.group(1)) % 1000 // 10}" if m else ""


def _cuda_candidates(arch: ArchSpec, nvcc: str, configured: str, sysroot: Path | None) -> list[Path]:
    if configured:
        return [Path(configured)]
    target_dir = _CPUS[arch.cpu_arch][1]
    out = []
    top = nvcc_top(nvcc)
    if top is not None:
        out.append(top / "targets" / target_dir)
    if sysroot is not None:
        out += [sysroot / "usr" / "local" / f"cuda-{arch.cuda}" / "targets" / target_dir,
                sysroot / "usr" / "local" / "cuda" / "targets" / target_dir]
    return out


#: the target's CUDA libraries nvcc links into a plugin (the static runtime, and the device runtime it
#: always passes to the linker)
CUDA_LIBS = ("libcudart_static.a", "libcudadevrt.a")


def _cudart_lib(root: Path) -> Path | None:
    for sub in ("lib", "lib64"):
        if all((root / sub / name).is_file() for name in CUDA_LIBS):
            return root / sub
    return None


def cross_problems(arch: ArchSpec, nvcc: str, config: Mapping[str, Any] | None = None,
                   nvcc_cuda: str = "") -> tuple[CrossSetup | None, list[str]]:
    """The setup for building host code for ``arch`` on this host, or everything that is missing."""
    if arch.cpu_arch not in _CPUS:
        return None, [f"no cross build for CPU {arch.cpu_arch}"]
    names, target_dir, machine, _ = _CPUS[arch.cpu_arch]
    problems: list[str] = []

    sysroot: Path | None = None
    configured_root = setting("target_sysroot", config)
    if configured_root:
        sysroot = Path(configured_root)
        if not (sysroot / "usr" / "lib").is_dir() and not (sysroot / "lib").is_dir():
            problems.append(f"the target sysroot {sysroot} ({SETTINGS['target_sysroot']}) has no usr/lib: point "
                            "it at the target's root file system")
            sysroot = None

    cxx = setting("cross_cxx", config)
    if cxx:
        found = shutil.which(cxx) or (cxx if Path(cxx).is_file() and os.access(cxx, os.X_OK) else None)
        if found is None:
            problems.append(f"the cross compiler {cxx} ({SETTINGS['cross_cxx']}) is not an executable")
        cxx = found or ""
    else:
        cxx = next((p for p in map(shutil.which, names) if p), "")
        if not cxx:
            problems.append(f"an {arch.cpu_arch} C++ cross compiler: none of {', '.join(names)} is on PATH (Debian/"
                            f"Ubuntu: apt install g++-{arch.cpu_arch.replace('_', '-')}-linux-gnu; or set "
                            f"{SETTINGS['cross_cxx']})")
    if cxx:
        dumped = _compiler_target(cxx)
        if not dumped.startswith(arch.cpu_arch):
            problems.append(f"{cxx} builds for {dumped or 'an unknown CPU'}, not {arch.cpu_arch}")

    configured_cuda = setting("target_cuda", config)
    candidates = _cuda_candidates(arch, nvcc, configured_cuda, sysroot)
    cuda_root = next((c for c in candidates if _cudart_lib(c)), None)
    cuda_lib = _cudart_lib(cuda_root) if cuda_root else None
    include = None
    if cuda_lib is None:
        where = (f"in {configured_cuda} ({SETTINGS['target_cuda']})" if configured_cuda
                 else f"in {', '.join(map(str, candidates)) or 'no candidate directory'}")
        problems.append(f"the CUDA {arch.cuda} runtime for {arch.cpu_arch} (lib/{' and lib/'.join(CUDA_LIBS)}) is not "
                        f"{where}; "
                        f"install the toolkit's {target_dir} cross target (DRIVE OS / JetPack cross-development "
                        f"packages) or set {SETTINGS['target_cuda']} to a directory holding it")
    else:
        got = _archive_machine(cuda_lib / "libcudart_static.a")
        if got is not None and got != machine:
            problems.append(f"{cuda_lib / 'libcudart_static.a'} is not built for {arch.cpu_arch} (ELF machine {got})")
        assert cuda_root is not None
        version = _cudart_version(cuda_root / "include")
        if version and nvcc_cuda and version.split(".")[0] != nvcc_cuda.split(".")[0]:
            problems.append(f"the target CUDA runtime in {cuda_root} is {version} but nvcc is {nvcc_cuda}: their major "
                            "versions must match")
        top = nvcc_top(nvcc)
        native = top is not None and (top / "targets" / target_dir / "include" / "cuda_runtime.h").is_file()
        if not native:
            # nvcc looks for headers in its own targets/<cpu>/ only; CUDA's headers are the same on every CPU,
            # so the target's are used when complete, else the host's (same CUDA major, checked above)
            if (cuda_root / "include" / "crt" / "host_config.h").is_file():
                include = cuda_root / "include"
            elif top is not None:
                hosts = [d for d in (top / "targets").glob("*") if (d / "include" / "crt" / "host_config.h").is_file()]
                include = hosts[0] / "include" if hosts else None
            if include is None:
                problems.append(f"the CUDA headers (crt/host_config.h) for {arch.cpu_arch}: neither nvcc's toolkit "
                                f"nor {cuda_root}/include has them")

    if problems:
        return None, problems
    assert cuda_lib is not None
    flags = ["-ccbin", cxx, "-L", str(cuda_lib)]
    if include is not None:
        flags += ["-I", str(include)]
        if (include / "cccl").is_dir():
            flags += ["-isystem", str(include / "cccl")]
    if sysroot is not None:
        flags += ["-Xcompiler", f"--sysroot={sysroot}", "-Xlinker", f"--sysroot={sysroot}"]
    return CrossSetup(cpu_arch=arch.cpu_arch, cxx=cxx, cuda_lib=cuda_lib, include=include, sysroot=sysroot,
                      flags=flags), []


def cross_setup(arch: ArchSpec, nvcc: str, config: Mapping[str, Any] | None = None,
                nvcc_cuda: str = "") -> CrossSetup:
    """The setup, or a StageError that lists, in one line, everything missing to build for ``arch`` here."""
    setup, problems = cross_problems(arch, nvcc, config, nvcc_cuda)
    if setup is None:
        raise StageError(missing_message(arch, problems))
    return setup


def missing_message(arch: ArchSpec, problems: list[str]) -> str:
    listed = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
    return f"cannot build for {arch.spec} ({arch.cpu_arch}) on this {host_arch()} host, missing: {listed}"


def host_arch() -> str:
    """This machine's CPU as arch specs name it (x86_64, aarch64)."""
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


# -- what came out ---------------------------------------------------------------------------------------------
@dataclass
class ElfFacts:
    machine: str
    needed: list[str]
    glibc: tuple[int, ...]
    glibcxx: tuple[int, ...]
    exported: list[str]

    def summary(self) -> str:
        def v(t: tuple[int, ...]) -> str:
            return ".".join(map(str, t)) if t else "none"

        return (f"{self.machine}; needs {', '.join(self.needed) or 'nothing'}; GLIBC {v(self.glibc)}, "
                f"GLIBCXX {v(self.glibcxx)}")


def _readelf(cxx: str | None) -> str | None:
    """binutils' readelf, preferring the cross toolchain's own (``aarch64-linux-gnu-readelf``)."""
    if cxx and cxx.endswith("g++"):
        cand = cxx[:-3] + "readelf"
        if shutil.which(cand) or Path(cand).is_file():
            return cand
    return shutil.which("readelf")


def elf_facts(so: Path, cxx: str | None = None) -> ElfFacts:
    """Machine, DT_NEEDED libraries, the newest GLIBC/GLIBCXX versions required and the exported functions
    of a shared object, read with readelf."""
    tool = _readelf(cxx)
    if tool is None:
        raise StageError("readelf (binutils) not found: it checks what a cross-built plugin needs on its target")
    p = subprocess.run([tool, "-h", "-d", "-V", "--dyn-syms", "-W", str(so)], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        raise StageError(f"readelf could not read {so}: {p.stderr.strip()[:300]}")
    out = p.stdout
    m = re.search(r"^\s*Machine:\s*(.+)$", out, re.M)

    def newest(prefix: str) -> tuple[int, ...]:
        found = [tuple(int(x) for x in v.split(".")) for v in re.findall(rf"\b{prefix}_([0-9.]+[0-9])\b", out)]
        return max(found, default=())

    exported = sorted({ln.split()[-1] for ln in out.splitlines()
                       if re.match(r"\s*\d+:", ln) and " FUNC " in ln and " GLOBAL " in ln and " UND " not in ln})
    return ElfFacts(machine=m.group(1).strip() if m else "unknown",
                    needed=re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out),
                    glibc=newest("GLIBC"), glibcxx=newest("GLIBCXX"),
                    exported=[s.split("@")[0] for s in exported])


def check_output(so: Path, arch: ArchSpec, setup: CrossSetup) -> ElfFacts:
    """What a cross build produced, checked against the target: its CPU, and the C/C++ runtime versions
    the target's OS ships (when the arch spec names a release). Raises StageError naming the fix."""
    facts = elf_facts(so, setup.cxx)
    want = _CPUS[arch.cpu_arch][3]
    if want not in facts.machine:
        raise StageError(f"{so.name} was built for {facts.machine}, not {arch.cpu_arch}: the host compiler "
                         f"{setup.cxx} does not target {arch.cpu_arch}")
    target = target_os_runtime(arch)
    if target is not None:
        name, glibc, glibcxx = target
        too_new = []
        if facts.glibc and facts.glibc > glibc:
            too_new.append(f"GLIBC {'.'.join(map(str, facts.glibc))} (it has {'.'.join(map(str, glibc))})")
        if facts.glibcxx and facts.glibcxx > glibcxx:
            too_new.append(f"GLIBCXX {'.'.join(map(str, facts.glibcxx))} (it has {'.'.join(map(str, glibcxx))})")
        if too_new:
            hint = ("set YTK_TARGET_SYSROOT to the target's root file system so that the plugin links against its "
                    "own C library" if setup.sysroot is None else
                    f"the sysroot {setup.sysroot} is newer than {name}, or the compiler's own C++ library is: use the "
                    "target OS's cross toolchain (YTK_CROSS_CXX)")
            raise StageError(f"{so.name} would not load on {name}: it requires {' and '.join(too_new)}; {hint}")
    return facts
