// Depthwise k x k convolution (+ bias), then a LayerNorm over the channels of each output pixel
// (ConvNeXt's conv_dw + LayerNorm2d, or the norm in NHWC before a Linear): NHWC fp16 in (kHWC8), fp32
// weights, fp32 accumulation, NHWC fp16 out. The output's bytes are the same whether the region returns
// the NCHW view (kHWC8) or the NHWC tensor (kLINEAR): this kernel writes both.
//
// Instantiated once per variant by emit_dwln.py, inside the variant's own namespace. Before this text the
// instantiation defines the variant's parameters, all constexpr: int K, S, PAD (the conv); int P (output
// pixels of one row per block), Q (pixels per conv item), NTHREADS, LG (lanes per pixel in the norm: 4, 8,
// 16 or 32); int CONST_C (0: C at run time); bool HAS_BIAS; float EPS.
//
// A block owns P consecutive output pixels of one row (the last segment of a row partial) and all C
// channels, in two phases:
//   conv: items (8-channel vector, Q pixels) over the block's threads, consecutive threads on consecutive
//         vectors (16-byte loads of one pixel's channels, coalesced); a thread walks the K input rows, holds
//         the row's K x 8 weights and its Q x 8 accumulators in registers, and reads the (Q - 1) S + K input
//         columns of that row once each (zero outside the image). Results, fp32, go to shared memory
//         [P][C] (pixels past the row's end as zeros);
//   norm: LG lanes per pixel: the mean over C, then the variance as the mean of squared deviations (two
//         exact passes over shared memory, fixed-order shuffle trees), then (v - mean) rsqrt(var + eps)
//         gamma + beta, 8 channels per 16-byte store.
// No atomics and fixed summation orders (repeated runs are bit-identical); no workspace.
constexpr int GROUPS = NTHREADS / LG;   // pixels the block normalises at once
constexpr int NIC = (Q - 1) * S + K;    // input columns of one item's row
static_assert(P % Q == 0, "an item's pixels lie in one block's segment");
static_assert(32 % LG == 0 && NTHREADS % 32 == 0, "a pixel's lanes lie in one warp");

__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int off = LG / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__global__ void __launch_bounds__(NTHREADS)
dwln(const __half* __restrict__ x, const float* __restrict__ w0, const float* __restrict__ b0,
     const float* __restrict__ w1, const float* __restrict__ b1, __half* __restrict__ y, int c_rt, int H, int W,
     int HO, int WO, int nseg) {
  extern __shared__ float4 smem4[];
  float* tile = reinterpret_cast<float*>(smem4);  // [P][C]
  const int C = CONST_C ? CONST_C : c_rt;
  const int C8 = C / 8;
  int b = blockIdx.x;
  const int seg = b % nseg;
  b /= nseg;
  const int ho = b % HO, n = b / HO;
  const int wo0 = seg * P;

  // conv
  const int items = C8 * (P / Q);
  for (int it = threadIdx.x; it < items; it += NTHREADS) {
    const int cv = it % C8, qg = it / C8;
    const int wq = wo0 + qg * Q;  // the item's first output column
    float acc[Q][8];
    float bias[8];
    if (HAS_BIAS) {
      const float4 t0 = __ldg(reinterpret_cast<const float4*>(b0 + 8 * cv));
      const float4 t1 = __ldg(reinterpret_cast<const float4*>(b0 + 8 * cv) + 1);
      bias[0] = t0.x; bias[1] = t0.y; bias[2] = t0.z; bias[3] = t0.w;
      bias[4] = t1.x; bias[5] = t1.y; bias[6] = t1.z; bias[7] = t1.w;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) bias[j] = 0.f;
    }
#pragma unroll
    for (int q = 0; q < Q; ++q) {
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[q][j] = bias[j];
    }
    if (wq < WO) {
#pragma unroll 1
      for (int ky = 0; ky < K; ++ky) {
        const int hi = ho * S - PAD + ky;
        if (hi < 0 || hi >= H) continue;
        const __half* row = x + ((size_t)n * H + hi) * W * C + 8 * cv;
        const float* wp = w0 + (size_t)8 * cv * (K * K) + ky * K;
        float wr[K][8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int kx = 0; kx < K; ++kx) wr[kx][j] = __ldg(wp + j * (K * K) + kx);
        }
#pragma unroll
        for (int ic = 0; ic < NIC; ++ic) {
          const int wi = wq * S - PAD + ic;
          const uint4 raw = (wi >= 0 && wi < W) ? __ldg(reinterpret_cast<const uint4*>(row + (size_t)wi * C))
                                                : make_uint4(0, 0, 0, 0);
          float f[8];
          ytk_tpl::unpack(raw, f);
#pragma unroll
          for (int q = 0; q < Q; ++q) {
            const int kx = ic - q * S;
            if (kx < 0 || kx >= K) continue;
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[q][j] = fmaf(wr[kx][j], f[j], acc[q][j]);
          }
        }
      }
    }
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      float4* dst = reinterpret_cast<float4*>(tile + (size_t)(qg * Q + q) * C + 8 * cv);
      const bool live = wq + q < WO;
      dst[0] = live ? make_float4(acc[q][0], acc[q][1], acc[q][2], acc[q][3]) : make_float4(0.f, 0.f, 0.f, 0.f);
      dst[1] = live ? make_float4(acc[q][4], acc[q][5], acc[q][6], acc[q][7]) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  __syncthreads();

  // norm: every lane of the block runs the same pixel rounds (the shuffles need the whole warp)
  const int lane = threadIdx.x % LG, grp = threadIdx.x / LG;
  const int C4 = C / 4;
  for (int p0 = 0; p0 < P; p0 += GROUPS) {
    const int p = p0 + grp;
    const bool live = p < P && wo0 + p < WO;
    const float4* v = reinterpret_cast<const float4*>(tile + (size_t)(p < P ? p : P - 1) * C);
    float s = 0.f;
    for (int c4 = lane; c4 < C4; c4 += LG) {
      const float4 t = v[c4];
      s += (t.x + t.y) + (t.z + t.w);
    }
    const float mean = group_sum(s) / (float)C;
    float ss = 0.f;
    for (int c4 = lane; c4 < C4; c4 += LG) {
      const float4 t = v[c4];
      const float d0 = t.x - mean, d1 = t.y - mean, d2 = t.z - mean, d3 = t.w - mean;
      ss += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
    }
    const float r = rsqrtf(group_sum(ss) / (float)C + EPS);
    if (!live) continue;
    __half* dst = y + (((size_t)n * HO + ho) * WO + wo0 + p) * C;
    for (int c8 = lane; c8 < C8; c8 += LG) {
      const float4 a0 = v[2 * c8], a1 = v[2 * c8 + 1];
      const float4 g0 = __ldg(reinterpret_cast<const float4*>(w1) + 2 * c8);
      const float4 g1 = __ldg(reinterpret_cast<const float4*>(w1) + 2 * c8 + 1);
      const float4 e0 = __ldg(reinterpret_cast<const float4*>(b1) + 2 * c8);
      const float4 e1 = __ldg(reinterpret_cast<const float4*>(b1) + 2 * c8 + 1);
      float o[8];
      o[0] = fmaf((a0.x - mean) * r, g0.x, e0.x); o[1] = fmaf((a0.y - mean) * r, g0.y, e0.y);
      o[2] = fmaf((a0.z - mean) * r, g0.z, e0.z); o[3] = fmaf((a0.w - mean) * r, g0.w, e0.w);
      o[4] = fmaf((a1.x - mean) * r, g1.x, e1.x); o[5] = fmaf((a1.y - mean) * r, g1.y, e1.y);
      o[6] = fmaf((a1.z - mean) * r, g1.z, e1.z); o[7] = fmaf((a1.w - mean) * r, g1.w, e1.w);
      *reinterpret_cast<uint4*>(dst + 8 * c8) = ytk_tpl::pack8(o);
    }
  }
}

// Shared memory past the 48 KB a launch gets by default: the kernel is opted in once, to what the device
// allows (a non-stream call, made on the first launch that needs it: graph capture comes later).
static int opt_in(size_t smem) {
  static size_t granted = 48 * 1024;
  if (smem <= granted) return 0;
  int dev = 0, most = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (smem > (size_t)most) return (int)cudaErrorInvalidConfiguration;
  const cudaError_t err = cudaFuncSetAttribute(dwln, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  if (err != cudaSuccess) return (int)err;
  granted = (size_t)most;
  return 0;
}

// extents: N, C, H, W, HO, WO (logical NCHW); inputs x, w0[, b0], w1, b1; output y (NHWC bytes).
int launch(const void* const* inputs, void* const* outputs, const int64_t* e, cudaStream_t stream) {
  const int64_t N = e[0], C = e[1], H = e[2], W = e[3], HO = e[4], WO = e[5];
  if ((CONST_C && C != CONST_C) || C <= 0 || C % 8 != 0) return (int)cudaErrorInvalidValue;
  if (HO != (H + 2 * PAD - K) / S + 1 || WO != (W + 2 * PAD - K) / S + 1) return (int)cudaErrorInvalidValue;
  if (N == 0 || HO <= 0 || WO <= 0) return 0;
  if (N * H * W * C > (INT64_C(1) << 40) || H > INT32_MAX / 4 || W > INT32_MAX / 4 || C > INT32_MAX / 8)
    return (int)cudaErrorInvalidValue;
  const int64_t nseg = (WO + P - 1) / P, blocks = N * HO * nseg;
  if (blocks > INT32_MAX) return (int)cudaErrorInvalidConfiguration;
  const size_t smem = (size_t)P * (size_t)C * sizeof(float);
  const int rc = opt_in(smem);
  if (rc) return rc;
  int k = 0;
  const __half* x = static_cast<const __half*>(inputs[k++]);
  const float* w0 = static_cast<const float*>(inputs[k++]);
  const float* b0 = HAS_BIAS ? static_cast<const float*>(inputs[k++]) : nullptr;
  const float* w1 = static_cast<const float*>(inputs[k++]);
  const float* b1 = static_cast<const float*>(inputs[k++]);
  __half* y = static_cast<__half*>(outputs[0]);
  // 16-byte vectors of x, y, b0, w1 and b1
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(b0)
       | reinterpret_cast<uintptr_t>(w1) | reinterpret_cast<uintptr_t>(b1)) % 16 != 0)
    return (int)cudaErrorInvalidValue;
  dwln<<<(unsigned)blocks, NTHREADS, smem, stream>>>(x, w0, b0, w1, b1, y, (int)C, (int)H, (int)W, (int)HO,
                                                    (int)WO, (int)nseg);
  return (int)cudaGetLastError();
}
