// Pointwise (1x1) convolution + bias + activation on NHWC fp16 (kHWC8), dense or grouped.
//
// Instantiated once per variant by emit_conv1x1.py, inside the variant's own namespace. Before this
// text the instantiation defines the variant's parameters:
//   macros     YTK_PW_MMA     1: the tensor-core kernel (pw_mma, dense only), 0: the SIMT one
//              YTK_PW_ROLL4   SIMT: 1 unrolls the input-channel loop by 4 (runtime or > 128 channels),
//                             0 unrolls it whole
//   constexpr  int CONST_C, CONST_CO (0: runtime extents); int GIN, GOUT (channels per group, 0:
//              dense); bool HAS_BIAS; SIMT: int NTHREADS, PPT (pixels per thread), COB (outputs per
//              block), KS (input channels per weight chunk); mma: int BM, BN, BK (block tile: pixels,
//              outputs, input channels), WM, WN (warps)
//   function   float act(float): the activation
//
// On NHWC memory a 1x1 convolution is a GEMM y[p, co] = act(b[co] + sum_k x[p, k] w[co, k]) over
// pixels p. At the channel counts where engines do badly (16..128 inputs at high resolution) it is
// memory-bound, so the kernels fuse bias and activation and read each pixel's channels once per
// output block. Weights stay fp32 (the contract's), so the only rounding is the fp16 output (the
// tensor-core kernel splits them into an exact hi + lo pair of fp16 halves).

#if YTK_PW_MMA
constexpr int NTHREADS = WM * WN * 32;
constexpr int MT = BM / WM / 16, NT = BN / WN / 8;   // m16n8k16 tiles per warp
constexpr int LDS = BK + 8;                           // smem row stride (halves): conflict-free fragments
constexpr int LDC = BN + 8;
constexpr int STAGE_HALVES = BM * LDS + 2 * BN * LDS;
constexpr int OUT_HALVES = BM * LDC;
constexpr int SMEM_HALVES = STAGE_HALVES > OUT_HALVES ? STAGE_HALVES : OUT_HALVES;

// Tensor cores: y[p, co] = act(b + x[p, :] . w[co, :]) with fp16 x, and the fp32 weights split into
// hi + lo fp16 halves (two MMAs, fp32 accumulation), so weights keep ~22 bits as in the contract.
// grid.x = pixel tiles x output blocks, output block fastest.
__global__ void __launch_bounds__(NTHREADS)
pw_mma(const __half* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
       __half* __restrict__ y, int C, int CO, long long P, int oblocks) {
  __shared__ __align__(16) __half smem[SMEM_HALVES];
  __half* As = smem;
  __half* Bh = smem + BM * LDS;
  __half* Bl = Bh + BN * LDS;
  const int ob = blockIdx.x % oblocks;
  const long long p0 = (long long)(blockIdx.x / oblocks) * BM;
  const int n0 = ob * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const int wm0 = (warp / WN) * (BM / WM), wn0 = (warp % WN) * (BN / WN);
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;

  const int Cr = CONST_C ? CONST_C : C;
  for (int k0 = 0; k0 < Cr; k0 += BK) {
    if (k0 > 0) __syncthreads();
    for (int i = threadIdx.x; i < BM * (BK / 8); i += NTHREADS) {
      const int r = i / (BK / 8), cv = i % (BK / 8);
      const bool ok = (p0 + r < P) & (k0 + cv * 8 < Cr);
      const __half* src = ok ? x + (p0 + r) * Cr + k0 + cv * 8 : x;
      ytk_tpl::cp_async<16>(&As[r * LDS + cv * 8], src, ok);
    }
    ytk_tpl::cp_async_commit();
    for (int i = threadIdx.x; i < BN * (BK / 8); i += NTHREADS) {
      const int r = i / (BK / 8), cv = i % (BK / 8);
      float f[8];
      if ((n0 + r < CO) & (k0 + cv * 8 < Cr)) {
        const float4* src = reinterpret_cast<const float4*>(w + (size_t)(n0 + r) * Cr + k0 + cv * 8);
        const float4 u = __ldg(src), v = __ldg(src + 1);
        f[0] = u.x; f[1] = u.y; f[2] = u.z; f[3] = u.w; f[4] = v.x; f[5] = v.y; f[6] = v.z; f[7] = v.w;
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) f[j] = 0.f;
      }
      float lo[8];
      uint4 hi = ytk_tpl::pack8(f);
      float back[8];
      ytk_tpl::unpack(hi, back);
#pragma unroll
      for (int j = 0; j < 8; ++j) lo[j] = f[j] - back[j];
      *reinterpret_cast<uint4*>(&Bh[r * LDS + cv * 8]) = hi;
      *reinterpret_cast<uint4*>(&Bl[r * LDS + cv * 8]) = ytk_tpl::pack8(lo);
    }
    ytk_tpl::cp_async_wait_all();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const __half* a = &As[(wm0 + i * 16 + gid) * LDS + kk + 2 * tig];
        af[i][0] = *reinterpret_cast<const uint32_t*>(a);
        af[i][1] = *reinterpret_cast<const uint32_t*>(a + 8 * LDS);
        af[i][2] = *reinterpret_cast<const uint32_t*>(a + 8);
        af[i][3] = *reinterpret_cast<const uint32_t*>(a + 8 * LDS + 8);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int off = (wn0 + j * 8 + gid) * LDS + kk + 2 * tig;
        const uint32_t h0 = *reinterpret_cast<const uint32_t*>(&Bh[off]);
        const uint32_t h1 = *reinterpret_cast<const uint32_t*>(&Bh[off + 8]);
        const uint32_t l0 = *reinterpret_cast<const uint32_t*>(&Bl[off]);
        const uint32_t l1 = *reinterpret_cast<const uint32_t*>(&Bl[off + 8]);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          ytk_tpl::mma_m16n8k16(acc[i][j], af[i], l0, l1);
          ytk_tpl::mma_m16n8k16(acc[i][j], af[i], h0, h1);
        }
      }
    }
  }
  __syncthreads();  // the staging buffers become the output tile
  __half* Cs = smem;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = wn0 + j * 8 + 2 * tig;
    const float b0 = (HAS_BIAS && n0 + col < CO) ? __ldg(b + n0 + col) : 0.f;
    const float b1 = (HAS_BIAS && n0 + col + 1 < CO) ? __ldg(b + n0 + col + 1) : 0.f;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int row = wm0 + i * 16 + gid;
      *reinterpret_cast<__half2*>(&Cs[row * LDC + col]) = __floats2half2_rn(act(acc[i][j][0] + b0), act(acc[i][j][1] + b1));
      *reinterpret_cast<__half2*>(&Cs[(row + 8) * LDC + col]) =
          __floats2half2_rn(act(acc[i][j][2] + b0), act(acc[i][j][3] + b1));
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < BM * (BN / 8); i += NTHREADS) {
    const int r = i / (BN / 8), cv = i % (BN / 8);
    if ((p0 + r < P) & (n0 + cv * 8 < CO))
      *reinterpret_cast<uint4*>(y + (p0 + r) * CO + n0 + cv * 8) = *reinterpret_cast<const uint4*>(&Cs[r * LDC + cv * 8]);
  }
}

constexpr int TILE_ROWS = BM, TILE_CO = BN;
#define YTK_PW_KERNEL pw_mma
#else
// A block owns NTHREADS * PPT pixels and COB output channels (of one group when grouped). Each
// thread accumulates PPT pixels x COB outputs in fp32 registers; the block stages the weights of its
// outputs into shared memory as [k][co] in chunks of KS input channels, so every thread of a warp
// reads the same weights (a broadcast) while reading its own pixels' inputs with 16-byte loads.
// Blocks with the same pixels and different output blocks are launched next to each other, so the
// inputs they share come from L2.
constexpr int TILE_P = NTHREADS * PPT;
constexpr int NCV = COB / 8;                                 // 8-channel output vectors per pixel

// grid.x = pixel tiles x output blocks, output block fastest (blocks sharing pixels run together).
__global__ void __launch_bounds__(NTHREADS)
pw_kernel(const __half* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
          __half* __restrict__ y, int C, int CO, long long P, int oblocks) {
  __shared__ __align__(16) float sw[KS * COB];
  const int ob = blockIdx.x % oblocks;
  const long long tile = blockIdx.x / oblocks;
  const int co0 = ob * COB;
  // Input channels this block reads: its group's, or all of them (dense).
  const int kin = GIN ? GIN : (CONST_C ? CONST_C : C);
  const int kbase = GIN ? (co0 / GOUT) * GIN : 0;
  float acc[PPT][COB];
#pragma unroll
  for (int j = 0; j < COB; ++j) {
    const float bj = (HAS_BIAS && co0 + j < CO) ? __ldg(b + co0 + j) : 0.f;
#pragma unroll
    for (int p = 0; p < PPT; ++p) acc[p][j] = bj;
  }
  long long pix[PPT];
#pragma unroll
  for (int p = 0; p < PPT; ++p) pix[p] = tile * TILE_P + p * NTHREADS + threadIdx.x;

  for (int k0 = 0; k0 < kin; k0 += KS) {
    const int kn = min(KS, kin - k0);
    if (k0 > 0) __syncthreads();  // every thread is done with the previous chunk
    for (int i = threadIdx.x; i < KS * COB; i += NTHREADS) {
      const int co = i / KS, k = i - co * KS;
      sw[k * COB + co] = (k < kn && co0 + co < CO) ? __ldg(w + (size_t)(co0 + co) * kin + k0 + k) : 0.f;
    }
    __syncthreads();
#if YTK_PW_ROLL4
#pragma unroll 4
#else
#pragma unroll
#endif
    for (int k = 0; k < kn; k += 8) {
      float xf[PPT][8];
#pragma unroll
      for (int p = 0; p < PPT; ++p) {
        uint4 raw = make_uint4(0, 0, 0, 0);
        if (pix[p] < P) raw = __ldg(reinterpret_cast<const uint4*>(x + pix[p] * C + kbase + k0 + k));
        ytk_tpl::unpack(raw, xf[p]);
      }
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
        for (int j4 = 0; j4 < COB / 4; ++j4) {
          const float4 wv = *reinterpret_cast<const float4*>(&sw[(k + kk) * COB + 4 * j4]);
#pragma unroll
          for (int p = 0; p < PPT; ++p) {
            acc[p][4 * j4 + 0] = fmaf(xf[p][kk], wv.x, acc[p][4 * j4 + 0]);
            acc[p][4 * j4 + 1] = fmaf(xf[p][kk], wv.y, acc[p][4 * j4 + 1]);
            acc[p][4 * j4 + 2] = fmaf(xf[p][kk], wv.z, acc[p][4 * j4 + 2]);
            acc[p][4 * j4 + 3] = fmaf(xf[p][kk], wv.w, acc[p][4 * j4 + 3]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int p = 0; p < PPT; ++p) {
    if (pix[p] >= P) continue;
#pragma unroll
    for (int q = 0; q < NCV; ++q) {
      if (co0 + 8 * q >= CO) break;
      float o[8];
#pragma unroll
      for (int v = 0; v < 8; ++v) o[v] = act(acc[p][8 * q + v]);
      *reinterpret_cast<uint4*>(y + pix[p] * CO + co0 + 8 * q) = ytk_tpl::pack8(o);
    }
  }
}

constexpr int TILE_ROWS = TILE_P, TILE_CO = COB;
#define YTK_PW_KERNEL pw_kernel
#endif

// Either kernel (YTK_PW_KERNEL): the contract's checks on extents N, C, H, W, CO (logical NCHW; dense
// has GIN = 0), then one block per TILE_ROWS pixels x TILE_CO outputs, output block fastest.
// Inputs x, w[, b]; output y.
int launch(const void* const* inputs, void* const* outputs, const int64_t* e, cudaStream_t stream) {
  const int64_t N = e[0], C = e[1], H = e[2], W = e[3], CO = e[4];
  if ((CONST_C && C != CONST_C) || (CONST_CO && CO != CONST_CO) || C <= 0 || CO <= 0 || C % 8 || CO % 8)
    return (int)cudaErrorInvalidValue;
  if (GIN && (C % (GIN ? GIN : 1) || CO * GIN != C * GOUT)) return (int)cudaErrorInvalidValue;
  const int64_t P = N * H * W;
  if (P == 0) return 0;
  if (P * (C > CO ? C : CO) > INT64_C(1) << 40 || C > INT32_MAX || CO > INT32_MAX) return (int)cudaErrorInvalidValue;
  const int64_t tiles = (P + TILE_ROWS - 1) / TILE_ROWS, oblocks = (CO + TILE_CO - 1) / TILE_CO;
  if (tiles * oblocks > INT32_MAX) return (int)cudaErrorInvalidConfiguration;
  YTK_PW_KERNEL<<<(unsigned)(tiles * oblocks), NTHREADS, 0, stream>>>(
      static_cast<const __half*>(inputs[0]), static_cast<const float*>(inputs[1]),
      HAS_BIAS ? static_cast<const float*>(inputs[2]) : nullptr, static_cast<__half*>(outputs[0]),
      (int)C, (int)CO, (long long)P, (int)oblocks);
  return (int)cudaGetLastError();
}
#undef YTK_PW_KERNEL
