// Squeeze-excite on NHWC fp16 (kHWC8), fp32 accumulation:
//   y = x * gate(w2 . act(w1 . mean_hw(x) + b1) + b2)
//
// Instantiated once per variant by emit_se.py, inside the variant's own namespace. Before this text
// the instantiation defines float act(float) and float gate(float) and the variant's parameters, all
// constexpr: int CV (channel vectors of 8 per pool block row), int U (pixels in flight per pool
// thread), int VPT (16-byte vectors per apply thread); bool HAS_B1, HAS_B2.
//
// Four kernels, no atomics, fixed summation orders (repeated runs are bit-identical):
//   pool:    per (batch, chunk of pixels, CV*8 channels) a partial sum over the chunk's pixels, fp32,
//            into the workspace. The chunk count follows the grid's need for blocks, not a constant.
//   squeeze: a block per (hidden unit, batch): its threads split the channels, sum each channel's
//            partials and its weight, and reduce in shared memory (by linearity w1 . mean is the
//            chunks' sums dotted with w1, over H*W).
//   excite:  a thread per (batch, channel): its gate from the hidden layer.
//   apply:   y = x * gate, 16-byte vectors, a grid row per batch.
// The small kernels are latency-bound: every loop issues its loads before it sums them. x is read
// twice (pool, apply); on late stages it is in L2 for the second read.
constexpr int POOL_THREADS = 256;
constexpr int PL = POOL_THREADS / CV;    // pixel lanes of a pool block
constexpr int NCHUNK_MAX = 256;          // most pixel chunks per batch (sizes the workspace)
constexpr int SQ_THREADS = 256;
constexpr int EX_THREADS = 256;
constexpr int AP_THREADS = 256;

__global__ void __launch_bounds__(POOL_THREADS)
pool(const __half* __restrict__ x, int C, int npix, int chunk_pix, float* __restrict__ partial) {
  __shared__ float red[PL][CV * 8 + 1];
  const int v = threadIdx.x % CV, pl = threadIdx.x / CV;
  const int c8 = blockIdx.x * CV + v, n = blockIdx.z, chunk = blockIdx.y;
  const int C8 = C / 8;
  float acc[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.f;
  const int p_end = min(npix, (chunk + 1) * chunk_pix);
  if (c8 < C8) {
    const __half* src = x + (size_t)n * npix * C + 8 * c8;
    for (int p0 = chunk * chunk_pix + pl; p0 < p_end; p0 += PL * U) {
      uint4 raw[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {  // all loads issued before any use
        const int p = p0 + u * PL;
        raw[u] = p < p_end ? *reinterpret_cast<const uint4*>(src + (size_t)p * C) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float f[8];
        ytk_tpl::unpack(raw[u], f);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += f[j];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) red[pl][v * 8 + j] = acc[j];
  __syncthreads();
  for (int k = threadIdx.x; k < CV * 8; k += POOL_THREADS) {
    const int c = blockIdx.x * CV * 8 + k;
    if (c >= C) continue;
    float s = 0.f;
    for (int l = 0; l < PL; ++l) s += red[l][k];
    partial[((size_t)n * gridDim.y + chunk) * C + c] = s;
  }
}

// A block = (hidden unit j, batch n).
__global__ void __launch_bounds__(SQ_THREADS)
squeeze(const float* __restrict__ partial, int nchunk, int C, float inv_npix, const float* __restrict__ w1,
        const float* __restrict__ b1, float* __restrict__ hidden) {
  __shared__ float red[SQ_THREADS];
  const int j = blockIdx.x, n = blockIdx.y, CR = gridDim.x;
  const float* pn = partial + (size_t)n * nchunk * C;
  const float* row = w1 + (size_t)j * C;
  float acc = 0.f;
  for (int c = threadIdx.x; c < C; c += SQ_THREADS) {
    float s = 0.f;
    int k = 0;
    for (; k + 8 <= nchunk; k += 8) {  // eight loads in flight, summed in chunk order
      float v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = pn[(size_t)(k + u) * C + c];
#pragma unroll
      for (int u = 0; u < 8; ++u) s += v[u];
    }
    for (; k < nchunk; ++k) s += pn[(size_t)k * C + c];
    acc = fmaf(row[c], s, acc);
  }
  red[threadIdx.x] = acc;
  __syncthreads();
#pragma unroll
  for (int half = SQ_THREADS / 2; half > 0; half >>= 1) {  // fixed-order tree
    if (threadIdx.x < half) red[threadIdx.x] += red[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float v = red[0] * inv_npix;
    hidden[(size_t)n * CR + j] = act(HAS_B1 ? v + b1[j] : v);
  }
}

// A thread = (channel c, batch n): the gate from the hidden layer (in shared memory).
__global__ void __launch_bounds__(EX_THREADS)
excite(const float* __restrict__ hidden, int C, int CR, const float* __restrict__ w2, const float* __restrict__ b2,
       float* __restrict__ gates) {
  extern __shared__ float h[];
  const int n = blockIdx.y;
  for (int j = threadIdx.x; j < CR; j += EX_THREADS) h[j] = hidden[(size_t)n * CR + j];
  __syncthreads();
  const int c = blockIdx.x * EX_THREADS + threadIdx.x;
  if (c >= C) return;
  const float* row = w2 + (size_t)c * CR;
  float s = 0.f;
  int j = 0;
  for (; j + 8 <= CR; j += 8) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = row[j + u];
#pragma unroll
    for (int u = 0; u < 8; ++u) s = fmaf(v[u], h[j + u], s);
  }
  for (; j < CR; ++j) s = fmaf(row[j], h[j], s);
  gates[(size_t)n * C + c] = gate(HAS_B2 ? s + b2[c] : s);
}

// A grid row per batch; vectors of the batch grid-strided over the row's blocks.
__global__ void __launch_bounds__(AP_THREADS)
apply(const __half* __restrict__ x, const float* __restrict__ gates, int C8, int per_batch, __half* __restrict__ y) {
  const int n = blockIdx.y;
  const uint4* src = reinterpret_cast<const uint4*>(x) + (size_t)n * per_batch;
  uint4* dst = reinterpret_cast<uint4*>(y) + (size_t)n * per_batch;
  const float* gn = gates + (size_t)n * C8 * 8;
  const int stride = gridDim.x * AP_THREADS;
  for (int e0 = blockIdx.x * AP_THREADS + threadIdx.x; e0 < per_batch; e0 += stride * VPT) {
    uint4 raw[VPT];
#pragma unroll
    for (int t = 0; t < VPT; ++t) {
      const int e = e0 + t * stride;
      raw[t] = e < per_batch ? src[e] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int t = 0; t < VPT; ++t) {
      const int e = e0 + t * stride;
      if (e >= per_batch) break;
      const float4* g = reinterpret_cast<const float4*>(gn + 8 * (e % C8));
      const float4 g0 = g[0], g1 = g[1];
      float f[8];
      ytk_tpl::unpack(raw[t], f);
      f[0] *= g0.x; f[1] *= g0.y; f[2] *= g0.z; f[3] *= g0.w;
      f[4] *= g1.x; f[5] *= g1.y; f[6] *= g1.z; f[7] *= g1.w;
      dst[e] = ytk_tpl::pack8(f);
    }
  }
}

// extents: N, C, H, W, CR. Workspace: the pool's partial sums (at most NCHUNK_MAX chunks), the gates
// (16-byte aligned: C is a multiple of 8), then the hidden layer.
size_t workspace_bytes(const int64_t* e) {
  return (size_t)(e[0] * e[1] * (NCHUNK_MAX + 1) + e[0] * e[4]) * sizeof(float);
}

int launch(const void* const* inputs, void* const* outputs, const int64_t* e, void* ws, cudaStream_t stream) {
  const int64_t N = e[0], C = e[1], H = e[2], W = e[3], CR = e[4];
  if (C <= 0 || C % 8 != 0 || CR <= 0) return (int)cudaErrorInvalidValue;
  const int64_t npix = H * W;
  if (N == 0 || npix == 0) return 0;
  if (ws == nullptr || npix * C / 8 > INT32_MAX / 2 || N > 65535 || CR > 65535) return (int)cudaErrorInvalidValue;
  if ((size_t)CR * sizeof(float) > 48 * 1024) return (int)cudaErrorInvalidConfiguration;
  int k = 0;
  const __half* x = static_cast<const __half*>(inputs[k++]);
  const float* w1 = static_cast<const float*>(inputs[k++]);
  const float* b1 = HAS_B1 ? static_cast<const float*>(inputs[k++]) : nullptr;
  const float* w2 = static_cast<const float*>(inputs[k++]);
  const float* b2 = HAS_B2 ? static_cast<const float*>(inputs[k++]) : nullptr;
  const int64_t C8 = C / 8, cgroups = (C8 + CV - 1) / CV;
  // enough pool blocks to fill the GPU (~2048), each chunk at least one full step of its pixel lanes
  int64_t nchunk = (2048 + N * cgroups - 1) / (N * cgroups);
  nchunk = max((int64_t)1, min(nchunk, min((int64_t)NCHUNK_MAX, (npix + PL * U - 1) / (PL * U))));
  const int chunk_pix = (int)((npix + nchunk - 1) / nchunk);
  float* partial = static_cast<float*>(ws);
  float* gates = partial + (size_t)N * NCHUNK_MAX * C;
  float* hidden = gates + (size_t)N * C;
  pool<<<dim3((unsigned)cgroups, (unsigned)nchunk, (unsigned)N), POOL_THREADS, 0, stream>>>(
      x, (int)C, (int)npix, chunk_pix, partial);
  squeeze<<<dim3((unsigned)CR, (unsigned)N), SQ_THREADS, 0, stream>>>(partial, (int)nchunk, (int)C,
                                                                     1.f / (float)npix, w1, b1, hidden);
  excite<<<dim3((unsigned)((C + EX_THREADS - 1) / EX_THREADS), (unsigned)N), EX_THREADS,
           (size_t)CR * sizeof(float), stream>>>(hidden, (int)C, (int)CR, w2, b2, gates);
  const int64_t per_batch = npix * C8;
  const int64_t blocks = min((per_batch + (int64_t)AP_THREADS * VPT - 1) / ((int64_t)AP_THREADS * VPT),
                             (int64_t)1 << 16);
  apply<<<dim3((unsigned)blocks, (unsigned)N), AP_THREADS, 0, stream>>>(x, gates, (int)C8, (int)per_batch,
                                                                       static_cast<__half*>(outputs[0]));
  return (int)cudaGetLastError();
}
