"""Backend conformance as a pytest plugin: run it from your backend's own repository.

Install ytk-hookspecs and your backend (``pip install -e .``), then::

    pytest --ytk-backend mygen            # the suite, against the backend registered as "mygen"
    pytest --ytk-backend mygen --ytk-region DwConv3x3C64 --ytk-arch x86_64-sm90-linux-cu130-trt10

The plugin is registered through the ``pytest11`` entry point of ytk-hookspecs (``-p
ytk_hookspecs.testing`` loads it where entry points are off). With ``--ytk-backend`` it adds the
suite (:mod:`ytk_hookspecs.testing.suite`) to what pytest collects; a test module that imports the
suite's tests runs them against every installed backend instead. The backend is loaded exactly as
ytk loads it (:class:`ytk_hookspecs.loader.PluginLoader`); nothing here imports the ytk core.

What it requires, per role:

- every backend: it loads without a warning, satisfies the protocols of its roles
  (:mod:`ytk_hookspecs.roles`), its availability says why, and a simulated one says so;
- engine: a small network compiles and profiles into honest figures and outputs within tolerance,
  in fp16 and fp32;
- kernelgen: ``supports()`` answers every region of the suite (:mod:`ytk_hookspecs.testing.regions`),
  and at least one region it claims ends ``done`` -- a generator that declines every region fails;
  every done kernel passes the contract checks, builds with the ``nvcc`` builder when it is installed (and
  compiles with a bare ``nvcc`` on PATH when it is not),
  and computes its region on a GPU when there is one (:func:`ytk_hookspecs.admission.check_case`
  against the region's ``.pt2`` in fp32); a region it refuses with certainty gets no kernel;
- builder: a real kernel source builds into a ``.so`` that describes itself, and runs on a GPU.

A backend that cannot run on this machine (its availability says no for every target tried) is
skipped with its own reason, as GPU-only checks are without a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

__all__ = ["ROLE_FIXTURES", "TARGETS", "GenerationRun", "KernelBuilds", "gpu_name", "host_target", "loader",
           "session_cache", "target_for"]

#: Fixture name -> the role of the backends it is parametrized over (None: every backend).
ROLE_FIXTURES = {"ytk_backend": None, "ytk_engine": "engine", "ytk_kernelgen": "kernelgen", "ytk_builder": "builder"}

#: Targets a backend is judged for, the first it can serve wins (unless --ytk-arch names one): the DRIVE AGX
#: Orin of the worked example, then this host's GPU (when torch sees one), then x86 hosts of recent GPUs.
TARGETS = ("arm64-sm87-dos6010-cu114-trt86", "x86_64-sm90-linux-cu130-trt10", "x86_64-sm89-linux-cu124-trt10",
           "x86_64-sm86-linux-cu124-trt10")

_SUITE = Path(__file__).with_name("suite.py")
_LOADER = pytest.StashKey[Any]()
_CACHE = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ytk", "ytk backend conformance")
    group.addoption("--ytk-backend", action="append", default=[], metavar="NAME",
                    help="run the ytk conformance suite against the installed backend NAME (repeatable)")
    group.addoption("--ytk-arch", default=None, metavar="SPEC",
                    help="the target to judge backends for (default: the first each serves of " + TARGETS[0]
                         + ", this host's GPU, " + ", ".join(TARGETS[1:]) + ")")
    group.addoption("--ytk-region", action="append", default=[], metavar="NAME",
                    help="only these regions of the suite (repeatable; default: all)")
    group.addoption("--ytk-config", action="append", default=[], metavar="KEY=VALUE",
                    help="added to every kernel generation request's config, as `ytk kernelgen compile --config` "
                         "(repeatable)")
    group.addoption("--ytk-timeout", type=float, default=1800.0, metavar="S",
                    help="how long a kernel generation job may stay 'running' (default 1800 s)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.stash[_CACHE] = {}
    if config.getoption("ytk_backend") and str(_SUITE) not in config.args:
        config.args.append(str(_SUITE))


def loader(config: pytest.Config) -> Any:
    """The installed plugins, loaded once per session as ytk loads them."""
    if _LOADER not in config.stash:
        from ..loader import PluginLoader

        pl = PluginLoader()
        pl.add_entry_points()
        pl.collect()
        config.stash[_LOADER] = pl
    return config.stash[_LOADER]


def session_cache(config: pytest.Config) -> dict:
    """Results shared by the tests of one session (a generator's jobs run once per backend)."""
    return config.stash[_CACHE]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for fixture, role in ROLE_FIXTURES.items():
        if fixture not in metafunc.fixturenames:
            continue
        asked = list(metafunc.config.getoption("ytk_backend"))
        pl = loader(metafunc.config)
        names = asked or sorted(pl.backends)
        if role is not None:
            names = [n for n in names if n in pl.backends and role in pl.backends[n].info.roles]
        if names:
            metafunc.parametrize(fixture, names, indirect=True)
        else:
            why = f"no {role} backend among {', '.join(asked)}" if asked else f"no {role} backend installed"
            metafunc.parametrize(fixture, [pytest.param(None, marks=pytest.mark.skip(reason=why))], indirect=True,
                                 ids=["none"])


def _loaded(request: pytest.FixtureRequest) -> Any:
    name = request.param
    pl = loader(request.config)
    if name not in pl.backends:
        installed = ", ".join(sorted(pl.backends)) or "none"
        pytest.fail(f"no backend named {name!r} loaded (installed: {installed}). Load-time warnings:\n  "
                    + ("\n  ".join(pl.warnings) or "none: is its package installed (pip install -e .) with an entry "
                                                   "point in the group 'ytk'?"), pytrace=False)
    return pl.backends[name]


@pytest.fixture
def ytk_backend(request: pytest.FixtureRequest) -> Any:
    """The backend under test (a :class:`~ytk_hookspecs.loader.LoadedBackend`), any role."""
    return _loaded(request)


@pytest.fixture
def ytk_engine(request: pytest.FixtureRequest) -> Any:
    """An engine backend under test."""
    return _loaded(request)


@pytest.fixture
def ytk_kernelgen(request: pytest.FixtureRequest) -> Any:
    """A kernel generator under test."""
    return _loaded(request)


@pytest.fixture
def ytk_builder(request: pytest.FixtureRequest) -> Any:
    """A plugin builder under test."""
    return _loaded(request)


def host_target() -> str | None:
    """This host's GPU as a target spec (``x86_64-sm90-linux-cu130-trt10``), when torch sees one."""
    import platform

    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability(0)
        cuda = (torch.version.cuda or "12.4").split(".")
    except Exception:
        return None
    cpu = {"aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower(), "x86_64")
    return f"{cpu}-sm{major}{minor}-linux-cu{cuda[0]}{cuda[1] if len(cuda) > 1 else '0'}-trt10"


def target_for(config: pytest.Config, backend: Any) -> str:
    """The first target ``backend`` serves here; skips (with the backend's own reason) when it serves none."""
    from ..models import ArchSpec

    asked = config.getoption("ytk_arch")
    tried = [asked] if asked else [t for t in (TARGETS[0], host_target(), *TARGETS[1:]) if t]
    reasons = []
    for spec in dict.fromkeys(tried):
        av = backend.availability(ArchSpec.parse(spec))
        if av.available:
            return spec
        reasons.append(f"{spec}: {av.reason}")
    pytest.skip(f"backend {backend.name} cannot run here ({'; '.join(reasons)})")


def gpu_name(arch: str) -> str:
    """The ``gpu`` of a kernel generation request for ``arch``: Orin for sm87, else this host's GPU."""
    from ..models import ArchSpec

    if ArchSpec.parse(arch).sm == 87:
        return "Orin"
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:
        pass
    return {90: "H200", 89: "L4", 86: "A10"}.get(ArchSpec.parse(arch).sm, "H200")


class GenerationRun:
    """One generator's answers and jobs on the suite's regions (computed once per session)."""

    def __init__(self, backend: Any, arch: str, gpu: str, generated: list[Any]) -> None:
        self.backend, self.arch, self.gpu, self.generated = backend, arch, gpu, generated

    @property
    def done(self) -> list[Any]:
        return [g for g in self.generated if g.done]


@pytest.fixture
def ytk_generation(ytk_kernelgen: Any, request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> GenerationRun:
    """The generator under test, asked about every region of the suite and given a job for each it claims."""
    cache = session_cache(request.config)
    key = ("generation", ytk_kernelgen.name)
    if key not in cache:
        arch = target_for(request.config, ytk_kernelgen)
        from .kernels import generate
        from .regions import REGIONS, write_regions

        names = request.config.getoption("ytk_region")
        unknown = sorted(set(names) - {r.name for r in REGIONS})
        if unknown:
            pytest.fail(f"--ytk-region {', '.join(unknown)}: no such region (the suite's: "
                        f"{', '.join(r.name for r in REGIONS)})", pytrace=False)
        try:
            import torch  # noqa: F401  (the regions are torch programs)
        except ImportError:
            pytest.fail("kernel generator conformance needs torch: the suite writes each region's .pt2 with "
                        "torch.export (pip install torch)", pytrace=False)
        config = {}
        for pair in request.config.getoption("ytk_config"):
            k, sep, v = pair.partition("=")
            if not sep or not k.strip():
                pytest.fail(f"--ytk-config {pair!r}: expected KEY=VALUE", pytrace=False)
            config[k.strip()] = v.strip()
        root = tmp_path_factory.mktemp(f"ytk-{ytk_kernelgen.name}")
        regions = write_regions(root / "prepare", names or None)
        gpu = gpu_name(arch)
        cache[key] = GenerationRun(ytk_kernelgen, arch, gpu, generate(
            ytk_kernelgen, regions, arch, gpu, root, request.config.getoption("ytk_timeout"), config))
    return cache[key]


class KernelBuilds:
    """The done kernels of one generator built with the nvcc builder: region name -> .so path or error."""

    def __init__(self, arch: str, results: dict[str, Any]) -> None:
        self.arch, self.results = arch, results


def _build_arch(builder: Any, target: str) -> str:
    """``target`` when the builder builds for it here, else the same sm for this host's CPU (a cross target
    whose toolchain is missing still compiles its device code); skips when neither builds."""
    import platform

    from ..models import ArchSpec

    spec = ArchSpec.parse(target)
    av = builder.availability(spec)
    if av.available:
        return target
    cuda = (builder.availability().details.get("cuda") or "12.4").split(".")
    cpu = {"aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower(), "x86_64")
    host = f"{cpu}-sm{spec.sm}-linux-cu{cuda[0]}{cuda[1] if len(cuda) > 1 else '0'}-trt10"
    av_host = builder.availability(ArchSpec.parse(host))
    if av_host.available:
        return host
    pytest.skip(f"the {builder.name} builder cannot build here ({target}: {av.reason}; {host}: {av_host.reason})")


@pytest.fixture
def ytk_kernel_builds(ytk_generation: GenerationRun, request: pytest.FixtureRequest,
                      tmp_path_factory: pytest.TempPathFactory) -> KernelBuilds:
    """Every done kernel of the generator under test, built with the installed ``nvcc`` builder."""
    cache = session_cache(request.config)
    key = ("builds", ytk_generation.backend.name)
    if key not in cache:
        builder = loader(request.config).get("nvcc")
        if builder is None or "builder" not in builder.info.roles:
            pytest.skip("no nvcc builder installed to build the kernels with (pip install ytk-backend-nvcc)")
        if not ytk_generation.done:
            pytest.skip("no kernel to build: the generator finished no job")
        arch = _build_arch(builder, ytk_generation.arch)
        from .kernels import build_kernel

        out = tmp_path_factory.mktemp(f"ytk-{ytk_generation.backend.name}-builds")
        results: dict[str, Any] = {}
        for g in ytk_generation.done:
            name = g.region.candidate.name
            try:
                results[name] = build_kernel(builder, Path(g.result.source or g.output), name, arch, out / name)
            except Exception as e:
                results[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:1500]}"
        cache[key] = KernelBuilds(arch, results)
    return cache[key]
