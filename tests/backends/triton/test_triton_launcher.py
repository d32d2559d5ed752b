"""The triton generator's run-time half on the CPU: a Triton kernel compiled ahead of time for sm_90 and
sm_87 (Triton's own ptxas, no GPU), its launch plan, the generated C launcher with the cubins embedded,
built into a plugin by the nvcc builder -- for this host and, cross-compiled, for an aarch64 Orin.
Launching it needs a GPU (the test marked gpu)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ytk_backend_nvcc.toolchain import find_nvcc
from ytk_backend_triton.launcher import launcher_source
from ytk_hookspecs.kernel_source import launcher_header
from ytk_backend_triton.plan import Arg, KernelBinary, Launch, LaunchPlan, PlanError, ShapeCase, ptx_entry
from ytk_hookspecs import StageContext
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import BuildRequest, PluginMeta, TensorContract
from ytk_hookspecs.plugin_info import read_plugin_description

triton = pytest.importorskip("triton", reason="Triton is not installed (requirements/test.txt pins it)")
tl = pytest.importorskip("triton.language")

BLOCK = 256


@triton.jit
def relu_fp16(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0).to(tl.float16), mask=m)


@triton.jit
def scale_add(x_ptr, t_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    t = tl.load(t_ptr + offs, mask=m).to(tl.float32)
    tl.store(y_ptr + offs, (x + alpha * t).to(tl.float16), mask=m)


SHAPES = [(1, 16, 8, 8), (2, 16, 9, 7)]


@pytest.fixture(scope="module")
def relu_plan() -> LaunchPlan:
    from ytk_backend_triton.aot import compile_jit, triton_version

    kb = compile_jit(relu_fp16, {"x_ptr": "*fp16", "y_ptr": "*fp16", "n": "i32", "BLOCK": "constexpr"},
                     {"BLOCK": BLOCK}, sms=[87, 90], num_warps=4)
    cases = []
    for s in SHAPES:
        n = s[0] * s[1] * s[2] * s[3]
        cases.append(ShapeCase(extents=list(s), launches=[Launch(
            kernel=kb.name, grid=(-(-n // BLOCK), 1, 1),
            args=[Arg(kind="input", index=0), Arg(kind="output", index=0), Arg(kind="scalar", value=n)])]))
    return LaunchPlan(kernels=[kb], cases=cases, n_inputs=1, n_outputs=1, triton_version=triton_version())


@pytest.fixture(scope="module")
def two_kernel_plan(relu_plan: LaunchPlan) -> LaunchPlan:
    """y = x + 0.5 * relu(x): relu into a workspace slice (at an offset), then a second kernel reads it back."""
    from ytk_backend_triton.aot import compile_jit

    relu = relu_plan.kernels[0]
    sa = compile_jit(scale_add, {"x_ptr": "*fp16", "t_ptr": "*fp16", "y_ptr": "*fp16", "n": "i32", "alpha": "fp32",
                                 "BLOCK": "constexpr"}, {"BLOCK": BLOCK}, sms=[87, 90], num_warps=4)
    cases = []
    for s in SHAPES:
        n = s[0] * s[1] * s[2] * s[3]
        g = (-(-n // BLOCK), 1, 1)
        ws = Arg(kind="workspace", offset=512)
        cases.append(ShapeCase(extents=list(s), workspace_bytes=512 + 2 * n, launches=[
            Launch(kernel=relu.id, grid=g, args=[Arg(kind="input", index=0), ws, Arg(kind="scalar", value=n)]),
            Launch(kernel=sa.id, grid=g, args=[Arg(kind="input", index=0), ws, Arg(kind="output", index=0),
                                                Arg(kind="scalar", value=n), Arg(kind="scalar", value=0.5)])]))
    return LaunchPlan(kernels=[relu, sa], cases=cases, n_inputs=1, n_outputs=1)


def _meta(workspace: str | None = None) -> PluginMeta:
    t = [TensorContract(name=n, dtype="float16", format="kLINEAR", role="activation", shape=["N", "C", "H", "W"])
         for n in ("x", "y")]
    return PluginMeta(plugin_name="TrRelu", inputs=[t[0]], outputs=[t[1]],
                      extents={"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]"},
                      launcher="ytk_launch_TrRelu", workspace=workspace)


def _bundle(plan: LaunchPlan, path: Path) -> Path:
    meta = _meta("ytk_workspace_TrRelu" if any(c.workspace_bytes for c in plan.cases) else None)
    src = launcher_source(plan, "ytk_tr_TrRelu", meta.launcher, meta.workspace)
    return KernelSource(header=launcher_header(meta.launcher, meta.workspace), source=src, meta=meta).write(path)


def test_the_compiled_kernel_and_its_plan(relu_plan: LaunchPlan) -> None:
    kb = relu_plan.kernels[0]
    assert relu_plan.sms == [87, 90] and kb.num_warps == 4
    # the PTX entry: the three parameters the caller binds, then Triton's scratch pointers
    assert kb.user_params == 3 and [p.ptx_type for p in kb.params[:3]] == ["u64", "u64", "u32"]
    assert all(p.pointer for p in kb.params[3:])
    assert kb.cubin(90)[:4] == b"\x7fELF" and kb.cubin(87) != kb.cubin(90)
    again = LaunchPlan.model_validate_json(relu_plan.model_dump_json())
    assert again == relu_plan
    with pytest.raises(PlanError, match="no cubin for sm_80"):
        kb.cubin(80)


def test_a_plan_that_would_launch_wrongly_is_refused(relu_plan: LaunchPlan) -> None:
    bad = relu_plan.model_dump()
    bad["cases"][0]["launches"][0]["args"][2] = {"kind": "input", "index": 0}  # a pointer for the i32
    with pytest.raises(ValueError, match="a input for a u32 parameter"):
        LaunchPlan.model_validate(bad)
    bad = relu_plan.model_dump()
    bad["cases"][1]["extents"] = bad["cases"][0]["extents"]
    with pytest.raises(ValueError, match="two shape cases for the same extents"):
        LaunchPlan.model_validate(bad)
    with pytest.raises(PlanError, match="expected one .entry"):
        ptx_entry(".version 8.0\n.target sm_90\n")


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["x86_64-sm90-linux-cu130-trt10", "arm64-sm87-linux-cu130-trt10"])
def test_the_launcher_builds_into_a_plugin_with_the_cubins_inside(relu_plan: LaunchPlan, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch, arch: str) -> None:
    from ytk_backend_nvcc.plugin import NvccBuilder

    if arch.startswith("arm64"):
        target = Path(__file__).parents[2] / "data" / "cross" / "cuda-13.0-aarch64"
        if shutil.which("aarch64-linux-gnu-g++") is None or not (target / "lib" / "libcudadevrt.a").is_file():
            pytest.skip("the aarch64 cross toolchain or target CUDA is missing (tests/data/cross/README.md)")
        monkeypatch.setenv("YTK_TARGET_CUDA", str(target))
    src = _bundle(relu_plan, tmp_path / "TrRelu.module_source.py")
    so = tmp_path / "TrRelu.so"
    NvccBuilder().build_plugin(BuildRequest(source=src, plugin_name="TrRelu", arch=arch, output=so), StageContext())
    desc = read_plugin_description(so)
    assert desc.launcher == "ytk_launch_TrRelu"
    data = so.read_bytes()
    sm = int(arch.split("-")[1][2:])
    assert data.find(relu_plan.kernels[0].cubin(sm)) >= 0, "the target's cubin is embedded byte for byte"
    from ytk_backend_nvcc.cross import elf_facts

    needed = elf_facts(so).needed
    assert needed and not [n for n in needed if "cuda" in n], "the driver API comes through the runtime, not libcuda"


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_a_plan_of_two_kernels_through_a_workspace_builds(two_kernel_plan: LaunchPlan, tmp_path: Path) -> None:
    from ytk_backend_nvcc.plugin import NvccBuilder

    src = _bundle(two_kernel_plan, tmp_path / "TrRelu.module_source.py")
    text = KernelSource.read(src).source
    assert "(void*)((char*)ws + 512)" in text and "0.5f" in text and "case 1: return " in text
    so = tmp_path / "TrRelu.so"
    NvccBuilder().build_plugin(BuildRequest(source=src, plugin_name="TrRelu", arch="x86_64-sm90-linux-cu130-trt10",
                                            output=so), StageContext())
    assert read_plugin_description(so).launcher == "ytk_launch_TrRelu"


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_each_sm_launches_with_its_own_builds_shared_memory(relu_plan: LaunchPlan, tmp_path: Path) -> None:
    """On an H100 targeting Orin, Triton's sm_87 build of a conv kernel needed 16384 B of shared memory and the
    sm_90 one 8192: the plan refused every such region. The launcher now takes the loaded cubin's own."""
    from ytk_backend_nvcc.plugin import NvccBuilder
    from ytk_backend_triton.aot import binary

    kb = relu_plan.kernels[0]
    with pytest.raises(ValueError, match="shared memory given for sm \\[80\\], cubins for \\[87, 90\\]"):
        KernelBinary.model_validate({**kb.model_dump(), "shared_by_sm": {80: 1024}})
    plan = relu_plan.model_copy(update={"kernels": [kb.model_copy(update={"shared_by_sm": {87: 65536}})]})
    assert plan.kernels[0].shared(87) == 65536 and plan.kernels[0].shared(90) == kb.shared_bytes
    src = _bundle(plan, tmp_path / "TrRelu.module_source.py")
    text = KernelSource.read(src).source
    assert f"{{65536u, {kb.shared_bytes}u}}" in text and ", sh[0], (CUstream)stream" in text
    so = tmp_path / "TrRelu.so"
    NvccBuilder().build_plugin(BuildRequest(source=src, plugin_name="TrRelu", arch="x86_64-sm90-linux-cu130-trt10",
                                            output=so), StageContext())
    assert read_plugin_description(so).launcher == "ytk_launch_TrRelu"
    # binary(): builds whose shared memory differs make one kernel with a per-SM amount; warps may not differ
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src_ast = ASTSource(fn=relu_fp16, signature={"x_ptr": "*fp16", "y_ptr": "*fp16", "n": "i32", "BLOCK": "constexpr"},
                        constexprs={"BLOCK": BLOCK})
    built = {sm: triton.compile(src_ast, target=GPUTarget("cuda", sm, 32), options={"num_warps": 4}) for sm in (87, 90)}
    built[87].metadata = built[87].metadata._replace(shared=built[90].metadata.shared + 4096)
    got = binary(built, user_params=3)
    assert got.shared(87) == built[90].metadata.shared + 4096 and got.shared(90) == built[90].metadata.shared
    built[90].metadata = built[90].metadata._replace(num_warps=8)
    with pytest.raises(PlanError, match="its sm_90 build needs 8 warps, the others 4"):
        binary(built, user_params=3)


def _gpu_plugin(plan: LaunchPlan, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The plan's plugin built for this GPU and loaded (skips where the plan has no cubin for it)."""
    import torch

    from ytk_backend_nvcc.plugin import NvccBuilder
    from ytk_hookspecs.launcher import LauncherLibrary

    major, minor = torch.cuda.get_device_capability()
    if major * 10 + minor not in plan.sms:
        pytest.skip(f"the fixture plan is compiled for {plan.sms}, this GPU is sm_{major}{minor}")
    src = _bundle(plan, tmp_path / "TrRelu.module_source.py")
    so = tmp_path / "TrRelu.so"
    NvccBuilder().build_plugin(BuildRequest(source=src, plugin_name="TrRelu",
                                            arch=f"x86_64-sm{major}{minor}-linux-cu130-trt10", output=so),
                               StageContext())
    return LauncherLibrary(so)


@pytest.mark.gpu
def test_a_plan_through_its_workspace_computes_on_the_gpu(two_kernel_plan: LaunchPlan, tmp_path: Path) -> None:
    import torch

    from ytk_hookspecs.launcher import torch_launch

    lib = _gpu_plugin(two_kernel_plan, tmp_path)
    for shape in SHAPES:
        x = torch.randn(shape, device="cuda").half()
        y = torch.full_like(x, float("nan"))
        torch_launch(lib, [x], [y])
        torch.cuda.synchronize()
        torch.testing.assert_close(y, (x.float() + 0.5 * torch.relu(x.float())).half())


@pytest.mark.gpu
def test_the_plugin_runs_the_kernel_on_the_gpu(relu_plan: LaunchPlan, tmp_path: Path) -> None:
    import torch

    from ytk_hookspecs.launcher import torch_launch

    lib = _gpu_plugin(relu_plan, tmp_path)
    for shape in SHAPES:
        x = torch.randn(shape, device="cuda").half()
        y = torch.full_like(x, float("nan"))
        torch_launch(lib, [x], [y])
        torch.cuda.synchronize()
        torch.testing.assert_close(y, torch.relu(x))
    x = torch.randn(3, 16, 8, 8, device="cuda").half()
    with pytest.raises(Exception, match="invalid argument|InvalidValue|1"):
        torch_launch(lib, [x], [torch.empty_like(x)])
