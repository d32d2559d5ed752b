"""The ytk backend conformance suite (``pytest --ytk-backend NAME``; see :mod:`ytk_hookspecs.testing`).

The fixtures ``ytk_backend``, ``ytk_engine``, ``ytk_kernelgen`` and ``ytk_builder`` are parametrized
by the plugin over the backends asked for (or every installed one) that serve the role.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ..context import StageContext
from ..contract import check_meta_against_candidate, check_report_against_candidate, check_source
from ..kernel_source import KernelSource, KernelSourceError
from ..models import (Availability, CompileRequest, CompileResult, KernelGenResult, KernelReport, ProfileRequest,
                      ProfileResult, SupportAnswer)
from ..plugin_info import read_plugin_description
from ..roles import backend_problems
from . import host_target, loader, target_for

__all__ = [
    "test_a_region_refused_for_certain_gets_no_kernel", "test_a_simulated_backend_says_so",
    "test_availability_says_why", "test_builder_output_describes_itself", "test_builder_output_runs",
    "test_done_kernels_build_with_nvcc", "test_done_kernels_compile_with_nvcc_alone",
    "test_done_kernels_compute_their_region",
    "test_done_kernels_honour_their_contract", "test_engine_figures_are_honest_and_outputs_correct",
    "test_generator_answers_every_region", "test_generator_finishes_a_region_it_claims",
    "test_jobs_end_done_or_failed", "test_loads_without_warnings", "test_satisfies_the_protocols_of_its_roles",
]

#: fp16 engines carry ~3 significant digits per activation, so the bar is a percent of the output's range (max
#: |err| / max |ref|) with a cosine; fp32 engines differ from the reference by summation order only.
ENGINE_TOLERANCE = {"fp16": (1e-2, 0.999), "fp32": (1e-4, 0.99999)}


# -- every backend --------------------------------------------------------------------------------------------


def test_loads_without_warnings(ytk_backend: Any, request: pytest.FixtureRequest) -> None:
    """ytk loads the backend's distribution without disabling anything of it."""
    mine = [w for w in loader(request.config).warnings if ytk_backend.distribution in w]
    assert not mine, "loading " + ytk_backend.distribution + " warned:\n  " + "\n  ".join(mine)


def test_satisfies_the_protocols_of_its_roles(ytk_backend: Any) -> None:
    """The backend has roles and a description, and the methods (and signatures) of each role's protocol."""
    assert ytk_backend.info.roles and ytk_backend.info.description.strip()
    assert backend_problems(ytk_backend.impl) == []


def test_availability_says_why(ytk_backend: Any) -> None:
    """availability() answers with an Availability that gives its reason, available or not."""
    av = ytk_backend.availability()
    assert isinstance(av, Availability)
    assert av.reason, "availability() must say why, available or not"


def test_a_simulated_backend_says_so(ytk_backend: Any) -> None:
    """A simulated backend says so in its description, as every figure it prints must."""
    if ytk_backend.info.simulated:
        assert "simulat" in ytk_backend.info.description.lower(), "a simulated backend's description must say so"


# -- engine -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_engine_figures_are_honest_and_outputs_correct(ytk_engine: Any, precision: str, tmp_path: Path,
                                                       request: pytest.FixtureRequest) -> None:
    """A small network compiles and profiles into honest figures (labelled simulated where they are), with
    outputs within tolerance."""
    from .engine_model import write_engine_model

    arch = target_for(request.config, ytk_engine)
    model = write_engine_model(tmp_path / "model")
    ctx = StageContext(workdir=tmp_path / "work")
    req = CompileRequest(onnx=model.onnx, npz=model.npz, arch=arch, precision=precision,  # type: ignore[arg-type]
                         workdir=tmp_path / "engine")
    cres = ytk_engine.impl.compile(req, ctx)
    assert isinstance(cres, CompileResult), f"compile returned {type(cres).__name__}"
    assert cres.backend == ytk_engine.name and Path(cres.engine).exists()
    pres = ytk_engine.impl.profile(ProfileRequest(compile=cres, request=req, iterations=5, warmup=1), ctx)
    assert isinstance(pres, ProfileResult), f"profile returned {type(pres).__name__}"
    simulated = ytk_engine.info.simulated
    assert cres.simulated == pres.simulated == simulated, (
        "a simulated backend must label its figures simulated, a real one not")
    it = pres.iterations_ms
    assert len(it) == 5 and all(t > 0 for t in it), f"asked for 5 positive latencies, got {it}"
    assert pres.layers and all(lay.median_ms >= 0 for lay in pres.layers), "no per-layer profile"
    for lay in pres.layers:
        assert set(lay.onnx_nodes) <= model.node_names, f"layer {lay.name} names ONNX nodes that do not exist"
    total = sum(lay.median_ms for lay in pres.layers)
    assert total <= 1.5 * float(np.median(it)), f"per-layer medians sum to {total} ms, over the latency {it}"
    outs = dict(np.load(pres.outputs))
    rel_bar, cos_bar = ENGINE_TOLERANCE[precision]
    for name, ref in model.reference.items():
        assert name in outs, f"the engine returned no output {name!r} (it returned {sorted(outs)})"
        got = np.asarray(outs[name], dtype=np.float64)
        assert got.shape == ref.shape and np.all(np.isfinite(got)), f"output {name}: shape or non-finite values"
        r = ref.astype(np.float64)
        rel = float(np.abs(got - r).max() / np.abs(r).max())
        cos = float((got.ravel() @ r.ravel()) / (np.linalg.norm(got) * np.linalg.norm(r)))
        assert rel <= rel_bar and cos >= cos_bar, f"output {name}: max rel err {rel:.3g}, cosine {cos:.6f}"


# -- kernel generation ------------------------------------------------------------------------------------------


def _outcome(g: Any) -> str:
    if g.error:
        return f"raised {g.error}"
    if isinstance(g.result, KernelGenResult):
        return f"{g.result.status}" + (f": {g.result.message}" if g.result.message else "")
    return f"returned {type(g.result).__name__}"


def test_generator_answers_every_region(ytk_generation: Any) -> None:
    """supports() answers the sketch (before the carve) and the carved region with a SupportAnswer."""
    bad = []
    for g in ytk_generation.generated:
        for when, ans in (("the sketch", g.sketch_answer), ("the carved region", g.answer)):
            if not isinstance(ans, SupportAnswer) or not ans.why.strip():
                bad.append(f"{g.region.candidate.name} ({when}): {ans!r}")
    assert not bad, "supports() must return a SupportAnswer that says why:\n  " + "\n  ".join(bad)


def test_generator_finishes_a_region_it_claims(ytk_generation: Any) -> None:
    """At least one region the generator says it supports ends with a kernel (status done)."""
    answers = "\n  ".join(f"{g.region.candidate.name}: "
                          + (f"supported={g.answer.supported}, {g.answer.why}" if isinstance(g.answer, SupportAnswer)
                             else repr(g.answer)) for g in ytk_generation.generated)
    claimed = [g for g in ytk_generation.generated if g.claimed]
    assert claimed, f"{ytk_generation.backend.name} declines every region of the suite:\n  {answers}"
    assert ytk_generation.done, (f"{ytk_generation.backend.name} claims {len(claimed)} region(s) but finishes none:\n  "
                                 + "\n  ".join(f"{g.region.candidate.name}: {_outcome(g)}" for g in claimed))


def test_jobs_end_done_or_failed(ytk_generation: Any) -> None:
    """A job ends done or failed with a reason: a region the generator cannot handle is status failed, never an
    exception or a job that never ends."""
    def ended(g: Any) -> bool:
        r = g.result
        return not g.error and isinstance(r, KernelGenResult) and (r.status == "done" or (r.status == "failed"
                                                                                           and bool(r.message)))

    submitted = [g for g in ytk_generation.generated if g.result is not None or g.error]
    bad = [f"{g.region.candidate.name}: {_outcome(g)}" for g in submitted if not ended(g)]
    assert not bad, "\n  ".join(["jobs that did not end done or failed (with a message):", *bad])


def test_done_kernels_honour_their_contract(ytk_generation: Any) -> None:
    """Every done kernel passes the contract checks against its region and comes with its report."""
    if not ytk_generation.done:
        pytest.skip("no job finished")
    for g in ytk_generation.done:
        cand = g.region.candidate
        path = Path(g.result.source or g.output)
        try:
            src = KernelSource.read(path)
        except KernelSourceError as e:
            pytest.fail(f"{cand.name}: the job is done but its source is no kernel source bundle: {e}")
        rep = check_source(src, str(path))
        rep.extend(check_meta_against_candidate(src.meta, cand, "fp16"))
        assert rep.ok, f"{cand.name} breaks its contract:\n  " + "\n  ".join(rep.errors)
        assert src.meta.deployment_target == "tensorrt"
        assert g.result.report and Path(g.result.report).is_file(), f"{cand.name}: the done job names no report.json"
        report = KernelReport.read(g.result.report)
        assert report.plugin_name == cand.name
        rep = check_report_against_candidate(report, cand)
        assert rep.ok, f"{cand.name}'s report breaks its contract:\n  " + "\n  ".join(rep.errors)
        assert report.simulated == ytk_generation.backend.info.simulated, (
            f"{cand.name}: the report's simulated={report.simulated} disagrees with the backend's declaration")


def test_a_region_refused_for_certain_gets_no_kernel(ytk_generation: Any) -> None:
    """supports() answers from the rules the job applies: a region it refuses with certainty, submitted anyway,
    fails rather than coming back with a kernel."""
    refused = [g for g in ytk_generation.generated if not g.claimed and (g.result is not None or g.error)]
    if not refused:
        pytest.skip("the generator refused no region of the suite with certainty")
    for g in refused:
        assert not g.done and not g.output.exists(), (
            f"{g.region.candidate.name} was refused ({g.answer.why}) but its job delivered a kernel")


def test_done_kernels_build_with_nvcc(ytk_generation: Any, ytk_kernel_builds: Any) -> None:
    """Every done kernel compiles with nvcc (the installed nvcc builder) into a plugin describing itself."""
    from ..models import ArchSpec

    sm = ArchSpec.parse(ytk_kernel_builds.arch).sm
    failed = {n: r for n, r in ytk_kernel_builds.results.items() if isinstance(r, str)}
    assert not failed, f"built for {ytk_kernel_builds.arch}:\n  " + "\n  ".join(f"{n}: {r}" for n, r in failed.items())
    for g in ytk_generation.done:
        desc = read_plugin_description(ytk_kernel_builds.results[g.region.candidate.name])
        meta = KernelSource.read(Path(g.result.source or g.output)).meta
        assert (desc.name, desc.launcher, desc.sm) == (g.region.candidate.name, meta.launcher, sm)


def test_done_kernels_compile_with_nvcc_alone(ytk_generation: Any, request: pytest.FixtureRequest,
                                             tmp_path: Path) -> None:
    """Where nvcc is on PATH but no nvcc builder is installed (a backend's own repository), every done kernel
    still compiles: the builder's includes, its header and its source, as one translation unit, for the
    target's SM, defining its launcher."""
    import shutil
    import subprocess

    from ..models import ArchSpec

    builder = loader(request.config).get("nvcc")
    if builder is not None and "builder" in builder.info.roles:
        pytest.skip("the installed nvcc builder builds the kernels (test_done_kernels_build_with_nvcc)")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH and no nvcc builder installed: the kernels are not compiled here")
    if not ytk_generation.done:
        pytest.skip("no kernel to compile: the generator finished no job")
    sm = ArchSpec.parse(ytk_generation.arch).sm
    failed = []
    for g in ytk_generation.done:
        src = KernelSource.read(Path(g.result.source or g.output))
        name = g.region.candidate.name
        cu, obj = tmp_path / f"{name}.cu", tmp_path / f"{name}.o"
        cu.write_text(src.compile_unit() + "\n")
        r = subprocess.run([nvcc, "-c", "-std=c++17", f"-arch=sm_{sm}", "-o", str(obj), str(cu)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            failed.append(f"{name}: nvcc exit {r.returncode}: {' '.join((r.stderr or r.stdout).split())[:1500]}")
            continue
        nm = shutil.which("nm")
        if nm is not None:
            syms = subprocess.run([nm, "-g", "--defined-only", str(obj)], capture_output=True, text=True).stdout
            if src.meta.launcher not in syms.split():
                failed.append(f"{name}: compiles but defines no extern \"C\" {src.meta.launcher}")
    assert not failed, f"compiled for sm_{sm} with {nvcc}:\n  " + "\n  ".join(failed)


@pytest.mark.gpu
def test_done_kernels_compute_their_region(ytk_generation: Any, ytk_kernel_builds: Any) -> None:
    """On a GPU, every done kernel matches its region's .pt2 (fp32) within the admission gate's budget, with
    canaries, poisoned outputs, a foreign stream and graph replays (ytk_hookspecs.admission.check_case)."""
    from ..launcher import LauncherLibrary
    from ..models import ArchSpec
    from .kernels import cuda_device, run_numerics

    if ytk_generation.backend.info.simulated:
        pytest.skip("a simulated generator's kernels are placeholders: there is nothing to run")
    device, why = cuda_device(ArchSpec.parse(ytk_kernel_builds.arch).sm)
    if device is None:
        pytest.skip(f"numerics need a GPU that runs the kernels: {why}")
    built = [(g, ytk_kernel_builds.results[g.region.candidate.name]) for g in ytk_generation.done]
    built = [(g, so) for g, so in built if not isinstance(so, str)]  # a failed build is the build test's failure
    if not built:
        pytest.skip("no kernel was built to run")
    problems = []
    for g, so in built:
        for case in run_numerics(LauncherLibrary(so), g.region, device):
            problems += case.problems
    assert not problems, "\n  ".join(["kernels that do not compute their region:", *problems])


# -- builder ----------------------------------------------------------------------------------------------------


def _built_relu(builder: Any, arch: str, tmp_path: Path) -> tuple[Path, Path, bytes]:
    from .kernels import relu_source

    src = relu_source("ConfRelu").renamed("Renamed").write(tmp_path / "src" / "Renamed.module_source.py")
    before = src.read_bytes()
    so = tmp_path / "out" / "Renamed.so"
    so.parent.mkdir(parents=True)
    from ..models import BuildRequest, BuildResult

    res = builder.impl.build_plugin(BuildRequest(source=src, plugin_name="Renamed", arch=arch, output=so),
                                    StageContext(workdir=tmp_path / "work"))
    assert isinstance(res, BuildResult), f"build_plugin returned {type(res).__name__}"
    assert Path(res.so_path) == so and so.is_file(), "the plugin must be written to request.output"
    return src, so, before


def test_builder_output_describes_itself(ytk_builder: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A real kernel source builds into a library whose self-description names the plugin, its launcher and SM."""
    from ..models import ArchSpec

    arch = target_for(request.config, ytk_builder)
    src, so, before = _built_relu(ytk_builder, arch, tmp_path)
    assert src.read_bytes() == before, "the builder must not change the source it is given"
    d = read_plugin_description(so)
    assert (d.name, d.namespace, d.version, d.num_inputs, d.num_outputs) == ("Renamed", "yasp", "1", 1, 1)
    assert (d.input_dtypes, d.output_dtypes, d.launcher) == (["float16"], ["float16"], "ConfRelu_launch")
    assert d.sm == ArchSpec.parse(arch).sm
    leftovers = [p.name for p in so.parent.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp")]
    assert leftovers == [], "no temporary files left behind"


@pytest.mark.gpu
def test_builder_output_runs(ytk_builder: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """On a GPU, the built ReLU computes ReLU through its launcher (ytk_hookspecs.admission.check_case)."""
    from ..admission import AdmissionCase, check_case
    from ..launcher import LauncherLibrary
    from ..models import ArchSpec
    from .kernels import cuda_device

    if ytk_builder.info.simulated:
        pytest.skip("a simulated builder's plugins run no GPU code")
    arch = request.config.getoption("ytk_arch") or host_target()
    if arch is None:
        pytest.skip("running a plugin needs a CUDA GPU that torch sees")
    av = ytk_builder.availability(ArchSpec.parse(arch))
    if not av.available:
        pytest.skip(f"{ytk_builder.name} cannot build for {arch} here: {av.reason}")
    device, why = cuda_device(ArchSpec.parse(arch).sm)
    if device is None:
        pytest.skip(f"running the plugin needs a GPU of its sm: {why}")
    import torch

    _, so, _ = _built_relu(ytk_builder, arch, tmp_path)
    x = torch.randn(64, 1000, generator=torch.Generator().manual_seed(0)).half()
    ref = x.float().clamp(min=0)
    exact = torch.full_like(ref, 2.0 ** -24)  # ReLU of fp16 is exact in fp16
    out = check_case(LauncherLibrary(so), AdmissionCase("relu", [x], [ref], [exact]), device)
    assert out.ok, "\n  ".join(out.problems)
