// Squeeze-excite on NHWC fp16 (kHWC8), fp32 accumulation:
//   y = x * gate(w2 . act(w1 . mean_hw(x) + b1) + b2)
//
// Instantiated once per variant by emit_se.py, inside the variant's own namespace. Before this text
// the instantiation defines float act(float) and float gate(float) and the variant's parameters, all
// constexpr: int CV (channel vectors of 8 per pool block row), int U (pixels in flight per pool
// thread), int VPT (16-byte vectors per apply thread); bool HAS_B1, HAS_B2.
//
// Three kernels, no atomics, fixed summation orders (repeated runs are bit-identical):
//   pool:   per (batch, chunk of pixels, CV*8 channels) a partial sum over the chunk's pixels, fp32,
//           into the workspace. The chunk count follows the grid's need for blocks, not a constant.
//   excite: per (batch, slice of channels) a block sums the partials into the mean, computes all of
//           the hidden layer (each block of a batch recomputes it: it is C*CR MACs read from L2), then
//           the gates of its slice; gates go to the workspace.
//   apply:  y = x * gate, 16-byte vectors.
// x is read twice (pool, apply); on late stages it is in L2 for the second read.
constexpr int POOL_THREADS = 256;
constexpr int PL = POOL_THREADS / CV;    // pixel lanes of a pool block
constexpr int NCHUNK_MAX = 64;           // most pixel chunks per batch (sizes the workspace)
constexpr int EX_THREADS = 256;          // excite block
constexpr int EX_SLICE = 256;            // gates per excite block
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

// A block = (batch n, gates [slice * EX_SLICE, +EX_SLICE)). Dynamic shared memory: mean[C], hidden[CR].
__global__ void __launch_bounds__(EX_THREADS)
excite(const float* __restrict__ partial, int nchunk, int C, int CR, float inv_npix, const float* __restrict__ w1,
       const float* __restrict__ b1, const float* __restrict__ w2, const float* __restrict__ b2,
       float* __restrict__ gates) {
  extern __shared__ float sm[];
  float* mean = sm;
  float* hidden = sm + C;
  const int n = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int WARPS = EX_THREADS / 32;
  for (int c = threadIdx.x; c < C; c += EX_THREADS) {
    const float* pp = partial + (size_t)n * nchunk * C + c;
    float s = 0.f;
    for (int k = 0; k < nchunk; ++k) s += pp[(size_t)k * C];
    mean[c] = s * inv_npix;
  }
  __syncthreads();
  for (int j = warp; j < CR; j += WARPS) {  // a warp per hidden unit, lanes over the channels
    const float* row = w1 + (size_t)j * C;
    float s = 0.f;
    for (int c = lane; c < C; c += 32) s = fmaf(row[c], mean[c], s);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) hidden[j] = act(HAS_B1 ? s + b1[j] : s);
  }
  __syncthreads();
  const int c_end = min(C, (blockIdx.x + 1) * EX_SLICE);
  for (int c = blockIdx.x * EX_SLICE + warp; c < c_end; c += WARPS) {  // a warp per gate, lanes over hidden
    const float* row = w2 + (size_t)c * CR;
    float s = 0.f;
    for (int j = lane; j < CR; j += 32) s = fmaf(row[j], hidden[j], s);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) gates[(size_t)n * C + c] = gate(HAS_B2 ? s + b2[c] : s);
  }
}

__global__ void __launch_bounds__(AP_THREADS)
apply(const __half* __restrict__ x, const float* __restrict__ gates, int C8, int64_t per_batch, int64_t total,
      __half* __restrict__ y) {
  const int64_t stride = (int64_t)gridDim.x * AP_THREADS;
  for (int64_t e0 = (int64_t)blockIdx.x * AP_THREADS + threadIdx.x; e0 < total; e0 += stride * VPT) {
    uint4 raw[VPT];
#pragma unroll
    for (int t = 0; t < VPT; ++t) {
      const int64_t e = e0 + t * stride;
      raw[t] = e < total ? reinterpret_cast<const uint4*>(x)[e] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int t = 0; t < VPT; ++t) {
      const int64_t e = e0 + t * stride;
      if (e >= total) break;
      const int64_t n = e / per_batch;
      const int c8 = (int)(e % C8);
      const float4* g = reinterpret_cast<const float4*>(gates + n * (int64_t)C8 * 8 + 8 * c8);
      const float4 g0 = g[0], g1 = g[1];
      float f[8];
      ytk_tpl::unpack(raw[t], f);
      f[0] *= g0.x; f[1] *= g0.y; f[2] *= g0.z; f[3] *= g0.w;
      f[4] *= g1.x; f[5] *= g1.y; f[6] *= g1.z; f[7] *= g1.w;
      reinterpret_cast<uint4*>(y)[e] = ytk_tpl::pack8(f);
    }
  }
}

// extents: N, C, H, W, CR. Workspace: the pool's partial sums (at most NCHUNK_MAX chunks), then the gates.
size_t workspace_bytes(const int64_t* e) {
  return (size_t)(e[0] * e[1] * (NCHUNK_MAX + 1)) * sizeof(float);
}

int launch(const void* const* inputs, void* const* outputs, const int64_t* e, void* ws, cudaStream_t stream) {
  const int64_t N = e[0], C = e[1], H = e[2], W = e[3], CR = e[4];
  if (C <= 0 || C % 8 != 0 || CR <= 0) return (int)cudaErrorInvalidValue;
  const int64_t npix = H * W;
  if (N == 0 || npix == 0) return 0;
  if (ws == nullptr || npix > INT32_MAX || N > 65535 || C > INT32_MAX / 8) return (int)cudaErrorInvalidValue;
  const size_t ex_smem = (size_t)(C + CR) * sizeof(float);
  if (ex_smem > 48 * 1024) return (int)cudaErrorInvalidConfiguration;
  int k = 0;
  const __half* x = static_cast<const __half*>(inputs[k++]);
  const float* w1 = static_cast<const float*>(inputs[k++]);
  const float* b1 = HAS_B1 ? static_cast<const float*>(inputs[k++]) : nullptr;
  const float* w2 = static_cast<const float*>(inputs[k++]);
  const float* b2 = HAS_B2 ? static_cast<const float*>(inputs[k++]) : nullptr;
  const int64_t C8 = C / 8, cgroups = (C8 + CV - 1) / CV;
  // enough pool blocks to fill the GPU (~1024), each chunk at least one full step of its pixel lanes
  int64_t nchunk = (1024 + N * cgroups - 1) / (N * cgroups);
  nchunk = max((int64_t)1, min(nchunk, min((int64_t)NCHUNK_MAX, (npix + PL * U - 1) / (PL * U))));
  const int chunk_pix = (int)((npix + nchunk - 1) / nchunk);
  float* partial = static_cast<float*>(ws);
  float* gates = partial + (size_t)N * NCHUNK_MAX * C;
  pool<<<dim3((unsigned)cgroups, (unsigned)nchunk, (unsigned)N), POOL_THREADS, 0, stream>>>(
      x, (int)C, (int)npix, chunk_pix, partial);
  excite<<<dim3((unsigned)((C + EX_SLICE - 1) / EX_SLICE), (unsigned)N), EX_THREADS, ex_smem, stream>>>(
      partial, (int)nchunk, (int)C, (int)CR, 1.f / (float)npix, w1, b1, w2, b2, gates);
  const int64_t total = N * npix * C8;
  const int64_t blocks = min((total + (int64_t)AP_THREADS * VPT - 1) / ((int64_t)AP_THREADS * VPT), (int64_t)1 << 20);
  apply<<<(unsigned)blocks, AP_THREADS, 0, stream>>>(x, gates, (int)C8, npix * C8, total,
                                                      static_cast<__half*>(outputs[0]));
  return (int)cudaGetLastError();
}
