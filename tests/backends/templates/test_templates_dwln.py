"""Depthwise conv + LayerNorm over the channels (ConvNeXt's block up to its MLP): recognition of both forms and
every spelling, the refusals' reasons, the contract, the reference, the error budget, the answer of
``supports()``, and the kernel's own text run on the host. CPU only."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "trust"))

from standin_kernels import StandIn  # noqa: E402
from templates_fixtures import cpu_case_setup, dwln_fixture, export_region  # noqa: E402
from ytk_backend_templates import harness  # noqa: E402
from ytk_backend_templates.cases import logical_inputs, reference_and_tolerance, to_kernel_layout  # noqa: E402
from ytk_backend_templates.contract import bytes_moved, output_shape, plugin_meta  # noqa: E402
from ytk_backend_templates.emit_common import cuda_text, float_literal  # noqa: E402
from ytk_backend_templates.emit_dwln import variant_space  # noqa: E402
from ytk_backend_templates.recognise import load_graph, recognise, site_shapes  # noqa: E402
from ytk_backend_templates.reference import torch_region, verify_against_pt2  # noqa: E402
from ytk_backend_templates.regions import DwConvLNRegion, SiteShape  # noqa: E402
from ytk_backend_templates.supports import supports  # noqa: E402
from ytk_backend_templates.variants import region_variants  # noqa: E402
from ytk_hookspecs.contract import check_meta, check_meta_against_candidate  # noqa: E402
from ytk_hookspecs.errors import UnsupportedRegion  # noqa: E402
from ytk_hookspecs.models import RegionSketch, SupportRequest  # noqa: E402

CPU = torch.device("cpu")


# -- recognition -----------------------------------------------------------------------------------
@pytest.mark.parametrize("closed", [True, False], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("native", [False, True], ids=["layer_norm", "native_layer_norm"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_both_forms_and_spellings_are_recognised(tmp_path: Path, closed: bool, native: bool, bias: bool) -> None:
    pt2, cand = dwln_fixture(tmp_path, "DwLn", 7, 1, [(1, 40, 9, 11), (2, 40, 5, 6)], bias=bias, closed=closed,
                             native=native)
    g = load_graph(pt2)
    r = recognise(g, cand)
    assert r == DwConvLNRegion(k=7, stride=1, eps=1e-6, channels=40, has_bias=bias, closed=closed)
    assert r.kind == "dwconv_ln" and "LayerNorm over the channels" in r.describe()
    verify_against_pt2(r, torch.export.load(str(pt2)).module(), g.input_shapes, CPU)
    # the other form's math gives another shape (open) or other values (closed): the check tells them apart
    with pytest.raises(UnsupportedRegion, match="recognised as"):
        from dataclasses import replace
        verify_against_pt2(replace(r, closed=not closed), torch.export.load(str(pt2)).module(), g.input_shapes, CPU)


@pytest.mark.parametrize("k,s", [(3, 1), (5, 1), (3, 2)])
def test_kernel_sizes_strides_and_eps(tmp_path: Path, k: int, s: int) -> None:
    pt2, cand = dwln_fixture(tmp_path, "DwLn", k, s, [(1, 24, 9, 11)], eps=1e-5)
    g = load_graph(pt2)
    r = recognise(g, cand)
    assert (r.k, r.stride, r.eps, r.channels) == (k, s, 1e-5, 24)
    verify_against_pt2(r, torch.export.load(str(pt2)).module(), g.input_shapes, CPU)


def test_a_dynamic_export_and_sites_of_several_widths_take_runtime_channels(tmp_path: Path) -> None:
    """The carve's dynamic remainder: groups and the norm's shape are sym_size(x, 1) in the graph."""
    pt2, cand = dwln_fixture(tmp_path, "DwLnDyn", 7, 1, [(1, 40, 9, 11), (1, 88, 5, 6), (1, 320, 3, 4)],
                             closed=False, dynamic=True)
    g = load_graph(pt2)
    ln = next(o for o in g.ops if o.target == "aten.layer_norm.default")
    assert isinstance(ln.args[1][0], str)  # the normalised shape is a size query, not a number
    r = recognise(g, cand)
    assert r == DwConvLNRegion(k=7, stride=1, eps=1e-6, channels=None, closed=False)
    meta = plugin_meta(r, cand.name, candidate=cand)
    assert not any(c.startswith("C ==") for c in meta.constraints)
    rep = check_meta_against_candidate(meta, cand, "fp16")
    assert rep.ok, rep.errors


class _NormOverW(torch.nn.Module):
    """A LayerNorm of the conv's NCHW output over its last dim: W, not the channels."""

    def forward(self, x, w0, b0, w1, b1):  # type: ignore[no-untyped-def]
        y = F.conv2d(x, w0, b0, 1, 3, 1, x.shape[1])
        return F.layer_norm(y, [y.shape[-1]], w1, b1, 1e-6)


class _NormOverWC(torch.nn.Module):
    """The NHWC view normalised over (W, C), not the channels alone."""

    def forward(self, x, w0, b0, w1, b1):  # type: ignore[no-untyped-def]
        z = F.conv2d(x, w0, b0, 1, 3, 1, x.shape[1]).permute(0, 2, 3, 1)
        return F.layer_norm(z, list(z.shape[-2:]), w1, b1, 1e-6).permute(0, 3, 1, 2)


class _NormThenAct(torch.nn.Module):
    def forward(self, x, w0, b0, w1, b1):  # type: ignore[no-untyped-def]
        z = F.conv2d(x, w0, b0, 1, 3, 1, x.shape[1]).permute(0, 2, 3, 1)
        return F.gelu(F.layer_norm(z, [z.shape[-1]], w1, b1, 1e-6))


def _args(c: int, norm_shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, c, 6, 5), torch.randn(c, 1, 7, 7), torch.randn(c), torch.randn(norm_shape),
            torch.randn(norm_shape))


@pytest.mark.parametrize("module,args,reason", [
    (_NormOverW(), _args(16, (5,)), r"^a LayerNorm of the convolution's NCHW output over its trailing dims \[5\] "
                                    r"\(not the channels\): templates fuse a depthwise conv with a LayerNorm over"),
    (_NormOverWC(), _args(16, (5, 16)), r"^a LayerNorm over \[5, 16\] of the NHWC view \[N, H, W, C\] \(C = 16\): "
                                        r"templates normalise over the channels alone \(\[C\]\)$"),
    (_NormThenAct(), _args(16, (16,)), r"^aten.gelu.default after the LayerNorm: templates fuse"),
])
def test_norms_not_over_the_channels_alone_are_refused(tmp_path: Path, module, args, reason: str) -> None:  # type: ignore[no-untyped-def]
    pt2 = export_region(module, args, tmp_path / "r.pt2")
    with pytest.raises(UnsupportedRegion, match=reason):
        recognise(load_graph(pt2))


def test_an_activation_between_conv_and_norm_is_refused(tmp_path: Path) -> None:
    pt2, cand = dwln_fixture(tmp_path, "DwLn", 7, 1, [(1, 40, 9, 11)], act="gelu")
    with pytest.raises(UnsupportedRegion) as e:
        recognise(load_graph(pt2), cand)
    assert str(e.value) == ("an activation (gelu) between the depthwise conv and its LayerNorm: templates fuse a "
                            "depthwise conv with a LayerNorm over its channels: permute(0, 2, 3, 1), layer_norm over "
                            "[C] with its weight and bias, then optionally permute(0, 3, 1, 2) back, nothing between "
                            "them")
    ans = supports(SupportRequest(candidate=cand, reference=pt2))
    assert not ans.supported and ans.certain and "activation (gelu)" in ans.why


def test_channels_that_are_not_a_multiple_of_8_are_refused(tmp_path: Path) -> None:
    pt2, cand = dwln_fixture(tmp_path, "DwLn", 7, 1, [(1, 30, 9, 11)])
    with pytest.raises(UnsupportedRegion, match="^30 channels: the templates' kernels take fp16 kHWC8 activations, "
                                                "whose channels must be a multiple of 8$"):
        recognise(load_graph(pt2), cand)


# -- contract ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("closed", [True, False], ids=["nchw", "nhwc"])
def test_the_contract_of_either_form(tmp_path: Path, closed: bool) -> None:
    """Both forms read the same inputs and write the same NHWC bytes; the closed form's output is logical NCHW in
    kHWC8, the open form's the NHWC tensor in kLINEAR (a Linear reads it next)."""
    pt2, cand = dwln_fixture(tmp_path, "DwLn", 3, 2, [(1, 40, 9, 11), (2, 40, 6, 5)], closed=closed)
    g = load_graph(pt2)
    r = recognise(g, cand)
    meta = plugin_meta(r, cand.name, candidate=cand)
    rep = check_meta(meta)
    rep.extend(check_meta_against_candidate(meta, cand, "fp16"))
    assert rep.ok, rep.errors
    assert [(t.role, t.dtype, t.format, t.shape) for t in meta.inputs] == [
        ("activation", "float16", "kHWC8", ["N", "C", "H", "W"]),
        ("weight", "float32", "kLINEAR", ["C", "1", "3", "3"]), ("bias", "float32", "kLINEAR", ["C"]),
        ("weight", "float32", "kLINEAR", ["C"]), ("bias", "float32", "kLINEAR", ["C"])]
    assert meta.extents == {"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]", "HO": "(H + 2 - 3)//2 + 1",
                            "WO": "(W + 2 - 3)//2 + 1"}
    assert meta.workspace is None and "C == 40" in meta.constraints and "C % 8 == 0" in meta.constraints
    (out,) = meta.outputs
    if closed:
        assert (out.dtype, out.format, out.shape) == ("float16", "kHWC8", ["N", "C", "HO", "WO"])
    else:
        assert (out.dtype, out.format, out.shape) == ("float16", "kLINEAR", ["N", "HO", "WO", "C"])
    site = site_shapes(g, cand)[0]
    assert output_shape(r, site) == ((1, 40, 5, 6) if closed else (1, 5, 6, 40))
    # x and y once in fp16, the conv's 9 taps + bias and the norm's two vectors once in fp32
    assert bytes_moved(r, site) == 2 * 40 * (9 * 11 + 5 * 6) + 4 * 40 * (9 + 3)
    meta_nb = plugin_meta(DwConvLNRegion(3, 2, 1e-6, 40, has_bias=False), "DwLn")
    assert [t.shape for t in meta_nb.inputs[1:]] == [["C", "1", "3", "3"], ["C"], ["C"]]


# -- reference and error budget ------------------------------------------------------------------------
class _TorchConvNeXtHead(torch.nn.Module):
    """What timm builds: nn.Conv2d(groups=C) and a LayerNorm over the channels of the NCHW map."""

    def __init__(self, c: int, k: int, stride: int, eps: float) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, k, stride, k // 2, groups=c)
        self.norm = torch.nn.LayerNorm(c, eps=eps)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.norm(self.conv(x).permute(0, 2, 3, 1))


@pytest.mark.parametrize("closed", [True, False], ids=["nchw", "nhwc"])
def test_the_reference_is_torch_own_modules(closed: bool) -> None:
    torch.manual_seed(0)
    c, k, s = 48, 7, 1
    m = _TorchConvNeXtHead(c, k, s, 1e-6)
    with torch.no_grad():
        m.norm.weight.normal_()
        m.norm.bias.normal_()
    x = torch.randn(2, c, 11, 13)
    r = DwConvLNRegion(k, s, 1e-6, c, closed=closed)
    with torch.no_grad():
        want = m(x)
        want = want.permute(0, 3, 1, 2) if closed else want
        got = torch_region(r)(x, m.conv.weight, m.conv.bias, m.norm.weight, m.norm.bias)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _setup(tmp_path: Path, closed: bool):  # type: ignore[no-untyped-def]
    pt2, cand = dwln_fixture(tmp_path, "DwLnT", 7, 1, [(1, 40, 9, 7)], closed=closed)
    return cpu_case_setup(pt2, cand)


def _by_hand(region: DwConvLNRegion):  # type: ignore[no-untyped-def]
    """The kernel's arithmetic in another order: taps summed one by one, the moments in fp64."""
    def f(x, w0, b0, w1, b1):  # type: ignore[no-untyped-def]
        k, p = region.k, region.pad
        n, c, h, w = x.shape
        xp = F.pad(x, (p, p, p, p))
        y = b0.view(1, -1, 1, 1).expand(n, c, h, w).clone()
        for ky in range(k):
            for kx in range(k):
                y += xp[:, :, ky:ky + h, kx:kx + w] * w0[:, 0, ky, kx].view(1, -1, 1, 1)
        yd = y.double()
        m = yd.mean(1, keepdim=True)
        v = ((yd - m) ** 2).mean(1, keepdim=True)
        z = ((yd - m) / (v + region.eps).sqrt() * w1.view(1, -1, 1, 1) + b1.view(1, -1, 1, 1)).float()
        return z if region.closed else z.permute(0, 2, 3, 1)
    return f


@pytest.mark.parametrize("closed", [True, False], ids=["nchw", "nhwc"])
def test_the_budget_takes_the_exact_result_and_refuses_two_percent_off(tmp_path: Path, closed: bool) -> None:
    region, module, cases, meta = _setup(tmp_path, closed)
    assert {c.dist for c in cases} >= {"normal", "large", "offset"}
    for fn in (lambda *x: module(*x), _by_hand(region)):  # torch's fp32 result rounded to fp16, another order
        lib = StandIn(meta, fn)
        for case in cases:
            r = harness.check_case(lib, case, CPU)
            assert r.ok, r.problems
    for case in cases:
        r = harness.check_case(StandIn(meta, lambda *x: module(*x) * 1.02), case, CPU)
        assert not r.ok and any("exceeds its budget" in p for p in r.problems), r.problems

    def flipped(x, w0, b0, w1, b1):  # type: ignore[no-untyped-def]
        return module(x, torch.flip(w0, dims=[3]), b0, w1, b1)

    r = harness.check_case(StandIn(meta, flipped), cases[0], CPU)
    assert not r.ok and r.budget_used > 100


def test_the_budget_grows_where_the_norm_amplifies() -> None:
    """Where a pixel's conv outputs are equal across the channels (its variance 0), 1/sqrt(var + eps) = 1000
    amplifies any error of the conv: the budget grows there by orders of magnitude, and stays within a few
    fp16 roundings of the output at the pixels whose channels spread as usual."""
    r = DwConvLNRegion(3, 1, 1e-6, 16)
    site = SiteShape(((1, 16, 6, 9), (16, 1, 3, 3), (16,), (16,), (16,)))
    x, w0, b0, w1, b1 = logical_inputs(r, site, "normal", 0)
    x[..., :3] = 1.0  # columns 0 and 1 read only these (and the zero padding): every channel alike
    w0[:] = w0[:1].clone()
    b0[:] = 0.5
    ref, tol, _ = reference_and_tolerance(r, torch_region(r), [x, w0, b0, w1, b1], CPU)
    assert bool((tol >= 2.0 ** -10 * ref.abs()).all())
    torch.testing.assert_close(ref[..., :2], b1.view(1, -1, 1, 1).expand(1, 16, 6, 2))  # (y - mean) = 0 exactly
    flat, usual = tol[..., :2], tol[..., 4:]
    assert float(flat.mean()) > 100 * float(usual.mean())
    assert float((usual / (ref[..., 4:].abs() + 1e-3)).median()) < 2.0 ** -8


# -- variants and supports -----------------------------------------------------------------------------
def test_the_variant_space() -> None:
    for c in (24, 40, 88, 96, 320, 768):
        space = variant_space(DwConvLNRegion(7, 1, 1e-6, c))
        assert space and len({p.name for p in space}) == len(space)
        assert all(p.p % p.q == 0 and p.p * c * 4 <= 160 * 1024 for p in space)
        # lanes per pixel: the fewest powers of two (4..32) that take the 8-channel vectors
        assert {p.lg for p in space} == {{24: 4, 40: 8, 88: 16, 96: 16, 320: 32, 768: 32}[c]}
    dyn = region_variants(DwConvLNRegion(7, 1, 1e-6, None, closed=False))
    assert dyn and all("CONST_C = 0;" in v.body and v.workspace is None for v in dyn)
    v = region_variants(DwConvLNRegion(5, 2, 1e-5, 96, has_bias=False), limit=1)[0]
    for want in ("constexpr int K = 5;", "constexpr int S = 2;", "constexpr int PAD = 2;",
                 "constexpr int CONST_C = 96;", "constexpr bool HAS_BIAS = false;",
                 f"constexpr float EPS = {float_literal(1e-5)};"):
        assert want in v.body


def test_supports_from_the_sketch_and_from_the_program(tmp_path: Path) -> None:
    def sketch(ops: dict[str, int], c: int = 96) -> RegionSketch:
        return RegionSketch(kind="depthwise_conv", kernel=[7, 7], stride=[1, 1], pads=[3, 3, 3, 3], channels_in=c,
                            onnx_ops=ops)

    for ops in ({"Conv": 1, "Transpose": 2, "LayerNormalization": 1}, {"Conv": 1, "Transpose": 1,
                                                                        "LayerNormalization": 1}):
        ans = supports(SupportRequest(sketch=sketch(ops)))
        assert ans.supported and not ans.certain and "LayerNorm" in ans.why, ans
    no = supports(SupportRequest(sketch=sketch({"Conv": 1, "LayerNormalization": 1})))
    assert not no.supported and "no Transpose" in no.why
    no = supports(SupportRequest(sketch=sketch({"Conv": 1, "Gelu": 1, "Transpose": 2, "LayerNormalization": 1})))
    assert not no.supported and "ops Gelu with the conv's LayerNorm" in no.why
    no = supports(SupportRequest(sketch=sketch({"Conv": 1, "Transpose": 2, "LayerNormalization": 1}, c=30)))
    assert not no.supported and "30 channels" in no.why
    no = supports(SupportRequest(sketch=sketch({"Conv": 1, "Transpose": 1})))
    assert not no.supported and "ops Transpose in the region" in no.why
    for closed in (True, False):
        pt2, cand = dwln_fixture(tmp_path / str(closed), "DwLn", 7, 1, [(1, 40, 9, 11)], closed=closed)
        ans = supports(SupportRequest(candidate=cand, reference=pt2))
        assert ans.supported and ans.certain and ans.kind == "dwconv_ln", ans
        assert f"closed={closed}" in ans.why and "eps=1e-06" in ans.why


# -- the kernel's text, run on the host --------------------------------------------------------------------
_SHIM = r"""
#include <cstdint>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <barrier>
#include <thread>
#include <vector>
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct __half { _Float16 v; };
struct Idx { unsigned x = 0, y = 0, z = 0; };
inline thread_local Idx threadIdx, blockIdx;
inline std::barrier<>* g_bar = nullptr;
inline float g_shuffle[1024];
#define __global__
#define __launch_bounds__(x)
#define __device__
#define __forceinline__ inline
#define __shared__
template <class T> T __ldg(const T* p) { return *p; }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int off) {  // every thread of the block must come
  const unsigned t = threadIdx.x;
  g_shuffle[t] = v;
  g_bar->arrive_and_wait();
  const float r = g_shuffle[(t & ~31u) | ((t & 31u) ^ (unsigned)off)];
  g_bar->arrive_and_wait();
  return r;
}
namespace ytk_tpl {
inline void unpack(const uint4 r, float* f) {
  _Float16 h[8];
  std::memcpy(h, &r, 16);
  for (int i = 0; i < 8; ++i) f[i] = (float)h[i];
}
inline uint4 pack8(const float* f) {
  _Float16 h[8];
  for (int i = 0; i < 8; ++i) h[i] = (_Float16)f[i];
  uint4 r;
  std::memcpy(&r, h, 16);
  return r;
}
}
"""
_MAIN = r"""
int main(int, char** argv) {
  int e[6]; FILE* f = fopen(argv[1], "rb");
  if (fread(e, 4, 6, f) != 6) return 2;
  const int N = e[0], C = e[1], H = e[2], W = e[3], HO = e[4], WO = e[5];
  std::vector<__half> x((size_t)N * H * W * C);
  std::vector<float> w0((size_t)C * K * K), b0(C), w1(C), b1(C);
  size_t got = fread(x.data(), 2, x.size(), f) + fread(w0.data(), 4, w0.size(), f);
  if (HAS_BIAS) got += fread(b0.data(), 4, C, f);
  got += fread(w1.data(), 4, C, f) + fread(b1.data(), 4, C, f);
  fclose(f);
  if (got != x.size() + w0.size() + (HAS_BIAS ? 3 : 2) * (size_t)C) return 3;
  std::vector<__half> y((size_t)N * HO * WO * C);
  for (auto& v : y) v.v = (_Float16)NAN;
  const int nseg = (WO + P - 1) / P;
  for (int b = 0; b < N * HO * nseg; ++b) {
    std::barrier<> bar(NTHREADS);
    g_bar = &bar;
    std::vector<std::thread> ts;
    for (int t = 0; t < NTHREADS; ++t) ts.emplace_back([&, t] {
      threadIdx.x = t; blockIdx.x = b;
      V::dwln(x.data(), w0.data(), HAS_BIAS ? b0.data() : nullptr, w1.data(), b1.data(), y.data(), C, H, W, HO,
              WO, nseg);
    });
    for (auto& th : ts) th.join();
  }
  f = fopen(argv[2], "wb");
  fwrite(y.data(), 2, y.size(), f);
  fclose(f);
  return 0;
}
"""


def _host_build(r: DwConvLNRegion, p, out: Path) -> Path:  # type: ignore[no-untyped-def]
    """``cuda/dwln.cuh``'s kernel (the text before its launcher) as host C++: a std::thread per CUDA thread,
    barriers for __syncthreads and the warp shuffles, the block grid walked in turn."""
    kernel = cuda_text("dwln.cuh").split("// Shared memory past the 48 KB")[0]
    params = dict(K=r.k, S=r.stride, PAD=r.pad, P=p.p, Q=p.q, NTHREADS=p.t, LG=p.lg, CONST_C=r.channels or 0)
    consts = "".join(f"constexpr int {k} = {v};\n" for k, v in params.items())
    consts += f"constexpr bool HAS_BIAS = {'true' if r.has_bias else 'false'};\n"
    consts += f"constexpr float EPS = {float_literal(r.eps)};\n"
    src = _SHIM + "namespace V {\n" + consts + "float4 smem4[1 << 16];\n" + kernel + "}  // namespace V\n" \
        + "using namespace V;\n" + _MAIN
    cpp, exe = out / f"{p.name}.cpp", out / p.name
    cpp.write_text(src)
    b = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-Wall", "-Wno-unknown-pragmas", "-o", str(exe),
                        str(cpp)], capture_output=True, text=True)
    assert b.returncode == 0, b.stderr[-3000:]
    return exe


def _host_compiler_runs_cuda_text() -> bool:
    if shutil.which("g++") is None:
        return False
    probe = subprocess.run(["g++", "-std=c++20", "-x", "c++", "-fsyntax-only", "-"], input=(
        "#include <barrier>\n_Float16 h = 1;\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n"),
        capture_output=True, text=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _host_compiler_runs_cuda_text(), reason="no g++ with C++20 <barrier> and _Float16")
@pytest.mark.parametrize("region,shape", [
    (DwConvLNRegion(7, 1, 1e-6, 40), (1, 40, 5, 19)),                       # ConvNeXt-atto, a partial segment
    (DwConvLNRegion(7, 1, 1e-6, None, closed=False), (2, 88, 4, 37)),       # EdgeNeXt's width at a runtime C
    (DwConvLNRegion(3, 2, 1e-5, 96, has_bias=False), (1, 96, 7, 13)),       # stride 2, no conv bias
], ids=["c40", "dyn-c88-nhwc", "s2-c96-nobias"])
def test_the_kernel_text_run_on_the_host_is_within_budget(tmp_path: Path, region: DwConvLNRegion, shape) -> None:  # type: ignore[no-untyped-def]
    """The variants' device code, its index arithmetic, tiles, borders and lane groups, run as host C++ on
    every case distribution; the same budget as on the GPU decides (the GPU test runs every variant there)."""
    n, c, h, w = shape
    k = region.k
    site = SiteShape(((n, c, h, w), (c, 1, k, k)) + (((c,),) if region.has_bias else ()) + ((c,), (c,)))
    ho, wo = region.out_hw(h, w)
    points = variant_space(region)
    for p in {points[0].name: points[0], points[-1].name: points[-1]}.values():
        exe = _host_build(region, p, tmp_path)
        for dist, seed in (("normal", 0), ("large", 2), ("offset", 3)):
            ins = logical_inputs(region, site, dist, seed)
            ref, tol, _ = reference_and_tolerance(region, torch_region(region), ins, CPU)
            kin = to_kernel_layout(region, ins, CPU)
            with open(tmp_path / "in.bin", "wb") as f:
                f.write(np.array([n, c, h, w, ho, wo], dtype=np.int32).tobytes())
                f.write(kin[0].permute(0, 2, 3, 1).contiguous().numpy().tobytes())
                for t in kin[1:]:
                    f.write(t.contiguous().numpy().tobytes())
            run = subprocess.run([str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], capture_output=True,
                                 text=True, timeout=300)
            assert run.returncode == 0, (p.name, run.returncode, run.stderr[-1000:])
            y = torch.from_numpy(np.fromfile(tmp_path / "out.bin", dtype=np.float16).reshape(n, ho, wo, c)).float()
            got = y.permute(0, 3, 1, 2) if region.closed else y
            assert bool(torch.isfinite(got).all()), (p.name, dist)
            used = float(((got - ref).abs() / tol).max())
            assert used <= 1.0, (p.name, dist, used)
