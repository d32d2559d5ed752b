"""CUDA template for depthwise k x k convolution + bias + activation on NHWC fp16 (kHWC8).

A block owns an output tile of TH x TW pixels and CB channels. With ``stage=smem`` it first copies
the input tile with its halo into shared memory once (cp.async, zero-filled outside the image),
so every input byte crosses DRAM about once; with ``stage=direct`` taps are read straight from
global memory and L1 absorbs the overlap. Each thread then computes RPT rows x CPT columns of
outputs for VEC channels (one 16- or 8-byte vector), keeping a sliding row of inputs in registers
and accumulating in fp32. Weights are transposed into shared memory as [tap][channel] so a thread
reads its VEC weights of a tap with 16-byte loads.
"""

from __future__ import annotations

from .emit_common import ACTIVATION_CODE, Variant
from .regions import DwConvRegion

SMEM_LIMIT = 48 * 1024  # static shared memory; larger tiles would need an opt-in attribute

_KERNEL = r"""
namespace @NS@ {
constexpr int K = @K@, S = @S@, P = @P@;
constexpr int VEC = @VEC@, CB = @CB@, TW = @TW@, TH = @TH@, RPT = @RPT@, CPT = @CPT@;
constexpr int CONST_C = @CONST_C@;
constexpr bool HAS_BIAS = @HAS_BIAS@;
constexpr bool STAGE_SMEM = @STAGE_SMEM@;
constexpr int CVB = CB / VEC;
constexpr int NTHREADS = CVB * (TW / CPT) * (TH / RPT);
constexpr int IW = (TW - 1) * S + K, IH = (TH - 1) * S + K;
constexpr int NIR = (RPT - 1) * S + K;   // input rows one thread reads
constexpr int NIC = (CPT - 1) * S + K;   // input columns one thread reads per row
constexpr int TILE_HALVES = STAGE_SMEM ? IH * IW * CB : 8;
// With CAP, at least 512 resident threads per SM (<= 128 registers each) for latency hiding;
// without, the compiler may keep every weight of the thread's channels in registers (no spills).
constexpr bool CAP = @CAP@;
constexpr int MIN_BLOCKS = (!CAP || NTHREADS >= 512) ? 1 : 512 / NTHREADS;
using VT = typename ytk_tpl::HVec<VEC>::T;

__device__ __forceinline__ float act(float v) { @ACT@ }

__global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
dw_kernel(const __half* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
          __half* __restrict__ y, int C, int H, int W, int HO, int WO, int tiles_x) {
  __shared__ __align__(16) __half tile[TILE_HALVES];
  __shared__ __align__(16) float sw[K * K * CB];
  __shared__ __align__(16) float sb[CB];
  const int n = blockIdx.z;
  const int c_base = blockIdx.y * CB;
  const int ty = blockIdx.x / tiles_x, tx = blockIdx.x - ty * tiles_x;
  const int oy0 = ty * TH, ox0 = tx * TW;
  const int iy0 = oy0 * S - P, ix0 = ox0 * S - P;
  const __half* xn = x + (size_t)n * H * W * C;

  if (STAGE_SMEM) {
    for (int i = threadIdx.x; i < IH * IW * CVB; i += NTHREADS) {
      const int cv = i % CVB, p = i / CVB;
      const int ix = p % IW, iy = p / IW;
      const int gy = iy0 + iy, gx = ix0 + ix, c = c_base + cv * VEC;
      const bool ok = (gy >= 0) & (gy < H) & (gx >= 0) & (gx < W) & (c < C);
      const __half* src = ok ? xn + ((size_t)gy * W + gx) * C + c : x;
      ytk_tpl::cp_async<VEC * 2>(&tile[p * CB + cv * VEC], src, ok);
    }
  }
  for (int i = threadIdx.x; i < CB * K * K; i += NTHREADS) {
    const int cl = i / (K * K), tap = i - cl * (K * K), c = c_base + cl;
    sw[tap * CB + cl] = (c < C) ? w[(size_t)c * (K * K) + tap] : 0.f;
  }
  for (int i = threadIdx.x; i < CB; i += NTHREADS) sb[i] = (HAS_BIAS && c_base + i < C) ? b[c_base + i] : 0.f;
  if (STAGE_SMEM) ytk_tpl::cp_async_wait_all();
  __syncthreads();

  const int cv = threadIdx.x % CVB;
  const int rest = threadIdx.x / CVB;
  const int cg = rest % (TW / CPT), rg = rest / (TW / CPT);
  const int c = c_base + cv * VEC;
  if (c >= C) return;

  float acc[RPT][CPT][VEC];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int q = 0; q < CPT; ++q)
#pragma unroll
      for (int v = 0; v < VEC; ++v) acc[r][q][v] = sb[cv * VEC + v];

  const int ly0 = rg * RPT * S, lx0 = cg * CPT * S;
#pragma unroll
  for (int ir = 0; ir < NIR; ++ir) {
    float xin[NIC][VEC];
#pragma unroll
    for (int j = 0; j < NIC; ++j) {
      VT raw;
      if (STAGE_SMEM) {
        raw = *reinterpret_cast<const VT*>(&tile[((ly0 + ir) * IW + lx0 + j) * CB + cv * VEC]);
      } else {
        const int gy = iy0 + ly0 + ir, gx = ix0 + lx0 + j;
        if ((gy >= 0) & (gy < H) & (gx >= 0) & (gx < W)) {
          raw = __ldg(reinterpret_cast<const VT*>(xn + ((size_t)gy * W + gx) * C + c));
        } else {
          raw = VT{};
        }
      }
      ytk_tpl::unpack(raw, xin[j]);
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const int ky = ir - r * S;
      if (ky >= 0 && ky < K) {
#pragma unroll
        for (int kx = 0; kx < K; ++kx) {
          float wv[VEC];
#pragma unroll
          for (int v4 = 0; v4 < VEC / 4; ++v4) {
            const float4 t = *reinterpret_cast<const float4*>(&sw[(ky * K + kx) * CB + cv * VEC + 4 * v4]);
            wv[4 * v4] = t.x; wv[4 * v4 + 1] = t.y; wv[4 * v4 + 2] = t.z; wv[4 * v4 + 3] = t.w;
          }
#pragma unroll
          for (int q = 0; q < CPT; ++q)
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[r][q][v] = fmaf(wv[v], xin[q * S + kx][v], acc[r][q][v]);
        }
      }
    }
  }

  __half* yn = y + (size_t)n * HO * WO * C;
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    const int oy = oy0 + rg * RPT + r;
#pragma unroll
    for (int q = 0; q < CPT; ++q) {
      const int ox = ox0 + cg * CPT + q;
      if (oy < HO && ox < WO) {
        float o[VEC];
#pragma unroll
        for (int v = 0; v < VEC; ++v) o[v] = act(acc[r][q][v]);
        VT* dst = reinterpret_cast<VT*>(yn + ((size_t)oy * WO + ox) * C + c);
        if (VEC == 8) *reinterpret_cast<uint4*>(dst) = ytk_tpl::pack8(o);
        else *reinterpret_cast<uint2*>(dst) = ytk_tpl::pack4(o);
      }
    }
  }
}

// extents: N, C, H, W, HO, WO (logical NCHW); inputs x, w[, b]; output y.
int launch(const void* const* inputs, void* const* outputs, const int64_t* e, cudaStream_t stream) {
  const int64_t N = e[0], C = e[1], H = e[2], W = e[3], HO = e[4], WO = e[5];
  if ((CONST_C && C != CONST_C) || C % VEC != 0 || C <= 0) return (int)cudaErrorInvalidValue;
  if (HO != (H + 2 * P - K) / S + 1 || WO != (W + 2 * P - K) / S + 1) return (int)cudaErrorInvalidValue;
  if (N == 0 || HO <= 0 || WO <= 0) return 0;
  if ((int64_t)N * H * W * C > INT64_C(1) << 40 || H > INT32_MAX || W > INT32_MAX) return (int)cudaErrorInvalidValue;
  const int64_t tiles_x = (WO + TW - 1) / TW, tiles_y = (HO + TH - 1) / TH, cblocks = (C + CB - 1) / CB;
  if (tiles_x * tiles_y > INT32_MAX || cblocks > 65535 || N > 65535) return (int)cudaErrorInvalidConfiguration;
  const dim3 grid((unsigned)(tiles_x * tiles_y), (unsigned)cblocks, (unsigned)N);
  dw_kernel<<<grid, NTHREADS, 0, stream>>>(
      static_cast<const __half*>(inputs[0]), static_cast<const float*>(inputs[1]),
      HAS_BIAS ? static_cast<const float*>(inputs[2]) : nullptr, static_cast<__half*>(outputs[0]),
      (int)C, (int)H, (int)W, (int)HO, (int)WO, (int)tiles_x);
  return (int)cudaGetLastError();
}
}  // namespace @NS@
"""

_LAUNCHER = r"""
extern "C" int @SYM@(const void* const* inputs, void* const* outputs, const int64_t* extents,
                     void* workspace, cudaStream_t stream) {
  (void)workspace;
  return @NS@::launch(inputs, outputs, extents, stream);
}
"""


def smem_bytes(k: int, s: int, vec: int, cb: int, tw: int, th: int, stage: str) -> int:
    tile = ((th - 1) * s + k) * ((tw - 1) * s + k) * cb * 2 if stage == "smem" else 16
    return tile + k * k * cb * 4 + cb * 4


# (stage, vec, cb, th, tw, rpt, cpt): a deliberate spread over staging, vector width, channels per
# block, tile shape and outputs per thread; each region keeps the points that are legal for it.
_BASE_S1 = (
    ("smem", 8, 32, 8, 32, 4, 1), ("smem", 8, 64, 4, 32, 4, 1), ("smem", 8, 16, 16, 32, 4, 1),
    ("smem", 8, 32, 8, 32, 2, 1), ("smem", 8, 32, 8, 32, 4, 2), ("smem", 8, 32, 16, 32, 8, 1),
    ("smem", 4, 32, 8, 32, 4, 1), ("smem", 4, 16, 8, 32, 4, 1), ("smem", 8, 64, 8, 16, 4, 1),
    ("smem", 8, 32, 8, 16, 2, 1), ("smem", 8, 16, 8, 32, 2, 1), ("smem", 8, 8, 16, 32, 4, 1),
    ("direct", 8, 32, 4, 32, 4, 1), ("direct", 8, 32, 8, 32, 4, 1), ("direct", 8, 32, 8, 16, 1, 1),
    ("direct", 8, 16, 8, 32, 2, 1),
)
_BASE_S2 = (
    ("smem", 8, 32, 8, 16, 4, 1), ("smem", 8, 32, 8, 16, 2, 1), ("smem", 8, 64, 4, 16, 4, 1),
    ("smem", 8, 16, 8, 32, 4, 1), ("smem", 8, 16, 16, 16, 4, 1), ("smem", 8, 32, 4, 32, 2, 1),
    ("smem", 4, 32, 8, 16, 4, 1), ("smem", 8, 64, 8, 8, 4, 1), ("smem", 8, 8, 16, 32, 4, 1),
    ("smem", 8, 16, 8, 16, 2, 1), ("direct", 8, 32, 8, 16, 4, 1), ("direct", 8, 32, 8, 16, 1, 1),
    ("direct", 8, 16, 8, 32, 2, 1),
)


def variant_space(r: DwConvRegion) -> list[dict[str, int | str]]:
    """The tuning points legal for ``r``: channel blocking that tiles C, smem within the static
    limit, and a register estimate (fp32 accumulators + one input row) that leaves room to run."""
    out: list[dict[str, int | str]] = []
    for stage, vec, cb, th, tw, rpt, cpt in (_BASE_S1 if r.stride == 1 else _BASE_S2):
        threads = (cb // vec) * (tw // cpt) * (th // rpt)
        if threads not in (128, 256, 512):
            continue
        if r.channels and (cb > r.channels or r.channels % cb):
            continue
        if not r.channels and cb > 32:
            continue
        if smem_bytes(r.k, r.stride, vec, cb, tw, th, stage) > SMEM_LIMIT:
            continue
        if rpt * cpt * vec + ((cpt - 1) * r.stride + r.k) * vec > 112:
            continue
        out.append(dict(stage=stage, vec=vec, cb=cb, tw=tw, th=th, rpt=rpt, cpt=cpt))
    return out


def register_cap(r: DwConvRegion, p: dict[str, int | str]) -> bool:
    """Cap registers at 128 only where weights + accumulators + an input row fit (else it spills)."""
    vec, rpt, cpt = int(p["vec"]), int(p["rpt"]), int(p["cpt"])
    nic = (cpt - 1) * r.stride + r.k
    return r.k * r.k * vec + rpt * cpt * vec + nic * vec <= 140


def variant_name(p: dict[str, int | str]) -> str:
    return f"{p['stage']}_v{p['vec']}_cb{p['cb']}_t{p['th']}x{p['tw']}_r{p['rpt']}c{p['cpt']}"


def emit(r: DwConvRegion, p: dict[str, int | str], ns: str, launcher: str) -> Variant:
    """One variant's CUDA text (namespace ``ns``) with its extern "C" ``launcher``."""
    subs = {
        "NS": ns, "K": r.k, "S": r.stride, "P": r.pad, "VEC": p["vec"], "CB": p["cb"], "TW": p["tw"],
        "TH": p["th"], "RPT": p["rpt"], "CPT": p["cpt"], "CONST_C": r.channels or 0,
        "HAS_BIAS": "true" if r.has_bias else "false", "STAGE_SMEM": "true" if p["stage"] == "smem" else "false",
        "ACT": ACTIVATION_CODE[r.act], "SYM": launcher, "CAP": "true" if register_cap(r, p) else "false",
    }
    text = _KERNEL + _LAUNCHER
    for k, v in subs.items():
        text = text.replace(f"@{k}@", str(v))
    return Variant(name=variant_name(p), params=dict(p), body=text, launcher=launcher)
