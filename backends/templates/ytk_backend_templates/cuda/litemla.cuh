// EfficientViT's LiteMLA ReLU linear attention on NHWC fp16 (kHWC8), fp32 accumulation.
//
// Instantiated once per variant by emit_litemla.py, inside the variant's own namespace. Before this
// text the instantiation defines the variant's parameters, all constexpr: int D (head dim); int
// P1_WARPS (pass-1 warps per block, one group each), NCHUNK (pixel chunks per (batch, group) in
// pass 1), U1 (pixels per lane per pass-1 step); int P2_THREADS, PPT (pixels per pass-2 thread: kv
// loads shared between them), P2_PIX (pixels per pass-2 block); bool JOINED (two inputs qkv and agg;
// else one pre-joined input); float EPS.
//
// Two passes, each reading its inputs once: pass 1 reads k and v of every pixel and writes, per
// (batch, group, pixel chunk), the partial sums kv = sum_n relu(k_n)^T [v_n, 1] in fp32 into the
// workspace; a small kernel sums each group's partials in a fixed order (so repeated runs are
// bit-identical; no atomics); pass 2 reads q and writes out_n = (relu(q_n) kv)[:d] / ((relu(q_n) kv)[d]
// + eps) in fp32. The denominator is formed in fp32, so eps = 1e-15 is not flushed to zero as it
// would be in fp16, and a pixel whose q is all zero yields exactly 0 (0 / eps), never NaN.
//
// Group g of the joined 6C channels is channels [3d*g, 3d*g + 3d) of qkv for g < G/2 and of agg
// after that (for the pre-joined form both halves are in one tensor); q, k, v are its three
// d-channel thirds; out channels [d*g, d*g + d).
constexpr int GS = 3 * D;              // channels per group (q, k, v)
constexpr int DP = D + 1;              // kv columns (v and the ones column)
constexpr int KVN = D * DP;            // kv entries per group
constexpr int ROWS = D / 4;            // kv rows per pass-1 thread (4 threads per pixel)
constexpr int KVS = (DP + 3) / 4 * 4;  // padded kv row stride in shared memory (16-byte rows)

__device__ __forceinline__ const __half* group_base(const __half* a, const __half* b, int g, int half_groups) {
  return (g < half_groups ? a : b) + (size_t)GS * (g < half_groups ? g : g - half_groups);
}

// Pass 1: one warp = one group; lanes = 4 kv-row quarters x 8 pixel lanes.
__global__ void __launch_bounds__(P1_WARPS * 32)
kv_partial(const __half* __restrict__ a, const __half* __restrict__ b, int64_t pix_stride, int half_groups,
           int G, int npix, int chunk_pix, float* __restrict__ partial) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Group block fastest: blocks running together read the k, v of all groups of the same pixels.
  const int g = blockIdx.x * P1_WARPS + warp;
  const int n = blockIdx.z, chunk = blockIdx.y;
  if (g >= G) return;
  const int quarter = lane & 3, pl = lane >> 2;
  const __half* src = group_base(a, b, g, half_groups) + (size_t)n * npix * pix_stride;
  float acc[ROWS][DP];
#pragma unroll
  for (int i = 0; i < ROWS; ++i)
#pragma unroll
    for (int j = 0; j < DP; ++j) acc[i][j] = 0.f;
  const int p_end = min(npix, (chunk + 1) * chunk_pix);
  // U pixels per lane per step, all loads issued before any use: a step costs one memory latency.
  for (int p0 = chunk * chunk_pix + pl; p0 < p_end; p0 += 8 * U1) {
    uint2 kraw[U1][ROWS / 4];
    uint4 vraw[U1][D / 8];
#pragma unroll
    for (int u = 0; u < U1; ++u) {
      const int p = p0 + 8 * u;
      const __half* px = src + (size_t)(p < p_end ? p : p0) * pix_stride;
#pragma unroll
      for (int i = 0; i < ROWS / 4; ++i) kraw[u][i] = *reinterpret_cast<const uint2*>(px + D + ROWS * quarter + 4 * i);
#pragma unroll
      for (int j = 0; j < D / 8; ++j) vraw[u][j] = *reinterpret_cast<const uint4*>(px + 2 * D + 8 * j);
    }
#pragma unroll
    for (int u = 0; u < U1; ++u) {
      if (p0 + 8 * u >= p_end) break;
      float k[ROWS], v[D];
#pragma unroll
      for (int i = 0; i < ROWS / 4; ++i) ytk_tpl::unpack(kraw[u][i], k + 4 * i);
#pragma unroll
      for (int j = 0; j < D / 8; ++j) ytk_tpl::unpack(vraw[u][j], v + 8 * j);
#pragma unroll
      for (int i = 0; i < ROWS; ++i) {
        const float ki = fmaxf(k[i], 0.f);
#pragma unroll
        for (int j = 0; j < D; ++j) acc[i][j] = fmaf(ki, v[j], acc[i][j]);
        acc[i][D] += ki;
      }
    }
  }
  // Fixed-order butterfly over the 8 pixel lanes: deterministic, no atomics.
#pragma unroll
  for (int off = 4; off < 32; off <<= 1)
#pragma unroll
    for (int i = 0; i < ROWS; ++i)
#pragma unroll
      for (int j = 0; j < DP; ++j) acc[i][j] += __shfl_xor_sync(0xffffffffu, acc[i][j], off);
  if (pl == 0) {
    float* dst = partial + (((size_t)n * G + g) * NCHUNK + chunk) * KVN + (size_t)quarter * ROWS * DP;
#pragma unroll
    for (int i = 0; i < ROWS; ++i)
#pragma unroll
      for (int j = 0; j < DP; ++j) dst[i * DP + j] = acc[i][j];
  }
}

// Between the passes: kv of each (batch, group) = its chunks' partials summed in a fixed order.
__global__ void __launch_bounds__(256)
kv_reduce(const float* __restrict__ partial, float* __restrict__ kvsum, int total) {
  const int e = blockIdx.x * 256 + threadIdx.x;
  if (e >= total) return;
  const int ng = e / KVN, k = e - ng * KVN;
  const float* pp = partial + (size_t)ng * NCHUNK * KVN + k;
  float s = 0.f;
#pragma unroll 8
  for (int c = 0; c < NCHUNK; ++c) s += pp[(size_t)c * KVN];
  kvsum[e] = s;
}

// Pass 2: a block = P2_PIX pixels of one (batch, group); lanes = pixels, kv broadcast from smem.
__global__ void __launch_bounds__(P2_THREADS)
apply(const __half* __restrict__ a, const __half* __restrict__ b, int64_t pix_stride, int half_groups, int G,
      int npix, const float* __restrict__ kvsum, __half* __restrict__ out, int64_t out_stride) {
  __shared__ __align__(16) float kv[D * KVS];
  const int g = blockIdx.x % G, n = blockIdx.z;  // group fastest, as in pass 1
  for (int e = threadIdx.x; e < KVN; e += P2_THREADS) kv[(e / DP) * KVS + e % DP] = kvsum[((size_t)n * G + g) * KVN + e];
  __syncthreads();
  const __half* src = group_base(a, b, g, half_groups) + (size_t)n * npix * pix_stride;
  __half* dst = out + (size_t)n * npix * out_stride + (size_t)D * g;
  const int p_begin = (blockIdx.x / G) * P2_PIX, p_end = min(npix, p_begin + P2_PIX);
  for (int p0 = p_begin + threadIdx.x; p0 < p_end; p0 += P2_THREADS * PPT) {
    float q[PPT][D], o[PPT][KVS];
#pragma unroll
    for (int t = 0; t < PPT; ++t) {
      const int p = p0 + t * P2_THREADS;
#pragma unroll
      for (int j = 0; j < KVS; ++j) o[t][j] = 0.f;
      if (p < p_end) {
#pragma unroll
        for (int j = 0; j < D; j += 8) ytk_tpl::unpack(*reinterpret_cast<const uint4*>(src + (size_t)p * pix_stride + j), q[t] + j);
      } else {
#pragma unroll
        for (int j = 0; j < D; ++j) q[t][j] = 0.f;
      }
#pragma unroll
      for (int j = 0; j < D; ++j) q[t][j] = fmaxf(q[t][j], 0.f);
    }
#pragma unroll
    for (int i = 0; i < D; ++i) {
#pragma unroll
      for (int j4 = 0; j4 < KVS; j4 += 4) {
        const float4 w = ytk_tpl::lds128_pinned(&kv[i * KVS + j4]);
#pragma unroll
        for (int t = 0; t < PPT; ++t) {
          o[t][j4] = fmaf(q[t][i], w.x, o[t][j4]);
          if (j4 + 1 < DP) o[t][j4 + 1] = fmaf(q[t][i], w.y, o[t][j4 + 1]);
          if (j4 + 2 < DP) o[t][j4 + 2] = fmaf(q[t][i], w.z, o[t][j4 + 2]);
          if (j4 + 3 < DP) o[t][j4 + 3] = fmaf(q[t][i], w.w, o[t][j4 + 3]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < PPT; ++t) {
      const int p = p0 + t * P2_THREADS;
      if (p < p_end) {
        const float den = o[t][D] + EPS;   // fp32: eps survives, 0 / eps = 0
        float r[D];
#pragma unroll
        for (int j = 0; j < D; ++j) r[j] = o[t][j] / den;
#pragma unroll
        for (int j = 0; j < D; j += 8) *reinterpret_cast<uint4*>(dst + (size_t)p * out_stride + j) = ytk_tpl::pack8(r + j);
      }
    }
  }
}

// extents: N, C (channels of each input), H, W. Workspace: pass-1 partial sums.
size_t workspace_bytes(const int64_t* e) {
  const int64_t G = JOINED ? 2 * e[1] / GS : e[1] / GS;
  return (size_t)(e[0] * G * (NCHUNK + 1) * KVN) * sizeof(float);
}

int launch(const void* const* inputs, void* const* outputs, const int64_t* e, void* ws, cudaStream_t stream) {
  const int64_t N = e[0], C = e[1], H = e[2], W = e[3];
  const int64_t CT = JOINED ? 2 * C : C;  // joined channels
  if (C <= 0 || CT % GS != 0 || (JOINED && C % GS != 0) || C % 8 != 0) return (int)cudaErrorInvalidValue;
  const int64_t G = CT / GS, npix = H * W;
  if (N == 0 || npix == 0) return 0;
  if (ws == nullptr || npix > INT32_MAX || N > 65535 || G > 65535) return (int)cudaErrorInvalidValue;
  const __half* a = static_cast<const __half*>(inputs[0]);
  const __half* b = JOINED ? static_cast<const __half*>(inputs[1]) : a;
  const int half_groups = JOINED ? (int)(G / 2) : (int)G;
  const int chunk_pix = (int)((npix + NCHUNK - 1) / NCHUNK);
  float* partial = static_cast<float*>(ws);
  float* kvsum = partial + (size_t)N * G * NCHUNK * KVN;
  const int64_t p2_blocks = (npix + P2_PIX - 1) / P2_PIX;
  if (p2_blocks * G > INT32_MAX) return (int)cudaErrorInvalidConfiguration;
  const dim3 g1((unsigned)((G + P1_WARPS - 1) / P1_WARPS), NCHUNK, (unsigned)N);
  kv_partial<<<g1, P1_WARPS * 32, 0, stream>>>(a, b, C, half_groups, (int)G, (int)npix, chunk_pix, partial);
  const int total = (int)(N * G * KVN);
  kv_reduce<<<(total + 255) / 256, 256, 0, stream>>>(partial, kvsum, total);
  const dim3 g2((unsigned)(G * p2_blocks), 1, (unsigned)N);
  apply<<<g2, P2_THREADS, 0, stream>>>(a, b, C, half_groups, (int)G, (int)npix, kvsum,
                                       static_cast<__half*>(outputs[0]), CT / 3);
  return (int)cudaGetLastError();
}
