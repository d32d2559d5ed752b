// Depthwise k x k convolution + bias + activation (+ the input, a residual add) on NHWC fp16 (kHWC8), fp32
// weights and accumulation.
//
// Instantiated once per variant by emit_dwconv.py, inside the variant's own namespace. Before this
// text the instantiation defines the variant's parameters:
//   macros     YTK_DW_STAGE   0 direct (taps from global through L1), 1 smem (tile copied to shared
//                             memory), 2 pipe (cp.async ring), 3 strip, 4 tma (TMA ring), 5 mma (TMA
//                             ring, taps on the tensor cores); selects the sections below
//              YTK_DW_PINNED  1 for k >= 7: taps' weights read with pinned loads and the input-row
//                             loop left rolled (else all 49 taps x VEC weights and every input row
//                             are kept in registers and spill)
//   constexpr  int K, S, P; int VEC, CB, TW, TH, RPT, CPT (vector width, channels per block, tile,
//              rows and columns per thread); int CONST_C (0: C at run time); bool HAS_BIAS;
//              bool RESIDUAL (stride 1: the output adds the input at the same pixel, after the activation);
//              int NSTAGE (ring buffers: items in flight + 1); bool CAP; int MB (minimum resident
//              blocks per SM, 0: see MIN_BLOCKS); strip: int WREG, PF; tma, mma: bool OUT_TMA;
//              mma: bool HILO
//   function   float act(float): the activation
// and the ring stages need <cuda.h> and <cudaTypedefs.h> included before the namespace.
//
// A block owns an output tile of TH x TW pixels and CB channels. Stage smem first copies the input
// tile with its halo into shared memory once (cp.async, zero-filled outside the image), so every
// input byte crosses DRAM about once; stage pipe does the same in persistent blocks that fetch the
// next NSTAGE - 1 tiles while computing this one (memory and arithmetic overlap within a block, and
// enough bytes are in flight to cover DRAM latency); stage direct reads taps straight from global
// memory and L1 absorbs the overlap. Each thread then computes RPT rows x CPT columns of outputs for
// VEC channels (one 16- or 8-byte vector), keeping a sliding row of inputs in registers. Weights are
// transposed into shared memory as [tap][channel] so a thread reads its VEC weights of a tap with
// 16-byte loads. Stages strip, tma and mma are described at their sections.

constexpr int STAGE = YTK_DW_STAGE;
constexpr int CVB = CB / VEC;
// mma: a warp per channel group of 8 and per CPT 16-pixel column segments; else a thread per VEC
// channels, CPT columns and RPT rows
constexpr int NTHREADS = STAGE == 5 ? 32 * (CB / 8) * (TW / (16 * CPT)) : CVB * (TW / CPT) * (TH / RPT);
constexpr int IW = (TW - 1) * S + K, IH = (TH - 1) * S + K;
constexpr int NIR = (RPT - 1) * S + K;   // input rows one thread reads
constexpr int NIC = (CPT - 1) * S + K;   // input columns one thread reads per row
[[maybe_unused]] constexpr int TILE_HALVES = IH * IW * CB;  // (stage mma sizes its swizzled tile itself)
// With CAP, at least 512 resident threads per SM (<= 128 registers each) for latency hiding;
// without, the compiler may keep every weight of the thread's channels in registers (no spills).
// A strip or ring variant may instead name its minimum resident blocks per SM (MB).
constexpr int MIN_BLOCKS = MB ? MB : (!CAP || NTHREADS >= 512) ? 1 : 512 / NTHREADS;
using VT = typename ytk_tpl::HVec<VEC>::T;
static_assert(!RESIDUAL || S == 1, "a residual add needs the output's shape: stride 1");

// RESIDUAL: o[0..N) += the input's N channels at `src` (the output pixel's own input pixel, stride 1),
// read only where `ok` (a staged output tile's pixels outside the image are never stored).
template <int N>
__device__ __forceinline__ void add_residual(float* o, const __half* src, bool ok = true) {
  if (!RESIDUAL) return;
  float r[N];
  if (ok) {
    ytk_tpl::unpack(__ldg(reinterpret_cast<const typename ytk_tpl::HVec<N>::T*>(src)), r);
  } else {
#pragma unroll
    for (int v = 0; v < N; ++v) r[v] = 0.f;
  }
#pragma unroll
  for (int v = 0; v < N; ++v) o[v] += r[v];
}

// Copy the input tile (with halo, zero outside the image) of the tile at (oy0, ox0) into smem.
__device__ __forceinline__ void stage_tile(__half* tile, const __half* x, const __half* xn, int c_base, int C, int H,
                                           int W, int iy0, int ix0) {
  for (int i = threadIdx.x; i < IH * IW * CVB; i += NTHREADS) {
    const int cv = i % CVB, p = i / CVB;
    const int ix = p % IW, iy = p / IW;
    const int gy = iy0 + iy, gx = ix0 + ix, c = c_base + cv * VEC;
    const bool ok = (gy >= 0) & (gy < H) & (gx >= 0) & (gx < W) & (c < C);
    const __half* src = ok ? xn + ((size_t)gy * W + gx) * C + c : x;
    ytk_tpl::cp_async<VEC * 2>(&tile[p * CB + cv * VEC], src, ok);
  }
}

__device__ __forceinline__ void stage_weights(float* sw, float* sb, const float* w, const float* b, int c_base, int C) {
  for (int i = threadIdx.x; i < CB * K * K; i += NTHREADS) {
    const int cl = i / (K * K), tap = i - cl * (K * K), c = c_base + cl;
    sw[tap * CB + cl] = (c < C) ? w[(size_t)c * (K * K) + tap] : 0.f;
  }
  for (int i = threadIdx.x; i < CB; i += NTHREADS) sb[i] = (HAS_BIAS && c_base + i < C) ? b[c_base + i] : 0.f;
}

// One thread's RPT x CPT outputs of VEC channels: sliding input rows in registers, fp32 accumulation.
__device__ __forceinline__ void compute_store(const __half* tile, const float* sw, const float* sb, const __half* xn,
                                              __half* yn, int C, int H, int W, int HO, int WO, int oy0, int ox0,
                                              int c_base) {
  const int cv = threadIdx.x % CVB;
  const int rest = threadIdx.x / CVB;
  const int cg = rest % (TW / CPT), rg = rest / (TW / CPT);
  const int c = c_base + cv * VEC;
  if (c >= C) return;
  const int iy0 = oy0 * S - P, ix0 = ox0 * S - P;
  float acc[RPT][CPT][VEC];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int q = 0; q < CPT; ++q)
#pragma unroll
      for (int v = 0; v < VEC; ++v) acc[r][q][v] = sb[cv * VEC + v];

  const int ly0 = rg * RPT * S, lx0 = cg * CPT * S;
#if YTK_DW_PINNED
#pragma unroll 1
#else
#pragma unroll
#endif
  for (int ir = 0; ir < NIR; ++ir) {
    float xin[NIC][VEC];
#pragma unroll
    for (int j = 0; j < NIC; ++j) {
      VT raw;
      if (STAGE != 0) {
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
#if YTK_DW_PINNED
            const float4 t = ytk_tpl::lds128_pinned(&sw[(ky * K + kx) * CB + cv * VEC + 4 * v4]);
#else
            const float4 t = *reinterpret_cast<const float4*>(&sw[(ky * K + kx) * CB + cv * VEC + 4 * v4]);
#endif
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
        add_residual<VEC>(o, xn + ((size_t)oy * W + ox) * C + c);
        ytk_tpl::store_half<VEC>(yn + ((size_t)oy * WO + ox) * C + c, o);
      }
    }
  }
}

#if YTK_DW_STAGE <= 1  // direct, smem
// One block per (channel block, tile, image), channel block fastest: blocks running together read
// all channels of the same pixels, so DRAM pages are opened once instead of once per channel block.
__global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
dw_kernel(const __half* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
          __half* __restrict__ y, int C, int H, int W, int HO, int WO, int tiles_x, int cblocks) {
  __shared__ __align__(16) __half tile[STAGE == 1 ? TILE_HALVES : 8];
  __shared__ __align__(16) float sw[K * K * CB];
  __shared__ __align__(16) float sb[CB];
  const int cblk = blockIdx.x % cblocks, t = blockIdx.x / cblocks;
  const int n = blockIdx.z, c_base = cblk * CB;
  const int ty = t / tiles_x, tx = t - ty * tiles_x;
  const int oy0 = ty * TH, ox0 = tx * TW;
  const __half* xn = x + (size_t)n * H * W * C;
  if (STAGE == 1) stage_tile(tile, x, xn, c_base, C, H, W, oy0 * S - P, ox0 * S - P);
  stage_weights(sw, sb, w, b, c_base, C);
  if (STAGE == 1) ytk_tpl::cp_async_wait_all();
  __syncthreads();
  compute_store(tile, sw, sb, xn, y + (size_t)n * HO * WO * C, C, H, W, HO, WO, oy0, ox0, c_base);
}
#endif  // direct, smem

#if YTK_DW_STAGE == 2  // pipe
// Persistent blocks; item i = (channel block fastest, then tile, then image), block b takes items
// b, b + grid, ... so the blocks running together cover all channels of neighbouring tiles (DRAM
// pages opened once), and with grid a multiple of the channel blocks a block keeps its weights.
// The next NSTAGE - 1 items' tiles are in flight (cp.async, one commit group each) while this one is
// computed; item k lives in buffer k % NSTAGE.
__global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
dw_pipe(const __half* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
        __half* __restrict__ y, int C, int H, int W, int HO, int WO, ytk_tpl::FastDiv tiles_x,
        ytk_tpl::FastDiv tiles_img, ytk_tpl::FastDiv cblocks, int items) {
  extern __shared__ __align__(16) unsigned char dsmem[];
  __half* tiles = reinterpret_cast<__half*>(dsmem);
  float* sw = reinterpret_cast<float*>(dsmem + NSTAGE * TILE_HALVES * sizeof(__half));
  float* sb = sw + K * K * CB;
  const int step = gridDim.x;
  if ((int)blockIdx.x >= items) return;
  // item -> (channel block, image, tile row, tile column)
  auto split = [&](int item, int& cblk, int& n, int& ty, int& tx) {
    const int rest = cblocks.div(item);
    cblk = item - rest * (int)cblocks.d;
    n = tiles_img.div(rest);
    const int t = rest - n * (int)tiles_img.d;
    ty = tiles_x.div(t);
    tx = t - ty * (int)tiles_x.d;
  };
  auto issue = [&](int item, __half* buf) {
    int cblk, n, ty, tx;
    split(item, cblk, n, ty, tx);
    stage_tile(buf, x, x + (size_t)n * H * W * C, cblk * CB, C, H, W, ty * TH * S - P, tx * TW * S - P);
  };
#pragma unroll
  for (int j = 0; j < NSTAGE - 1; ++j) {
    const int pre = (int)blockIdx.x + j * step;
    if (pre < items) issue(pre, tiles + j * TILE_HALVES);
    ytk_tpl::cp_async_commit();  // empty groups keep the count uniform
  }
  int loaded = -1, k = 0;
  for (int it = blockIdx.x; it < items; it += step, ++k) {
    const int cur = k % NSTAGE;
    const int ahead = it + (NSTAGE - 1) * step;
    // buffer (k - 1) % NSTAGE: computed in the previous iteration, freed by its trailing barrier
    if (ahead < items) issue(ahead, tiles + ((k + NSTAGE - 1) % NSTAGE) * TILE_HALVES);
    ytk_tpl::cp_async_commit();
    int cblk, n, ty, tx;
    split(it, cblk, n, ty, tx);
    if (cblk != loaded) {  // uniform over the block; the barrier at the loop's end made sw free
      stage_weights(sw, sb, w, b, cblk * CB, C);
      loaded = cblk;
    }
    ytk_tpl::cp_async_wait_prior<NSTAGE - 1>();
    __syncthreads();
    compute_store(tiles + cur * TILE_HALVES, sw, sb, x + (size_t)n * H * W * C, y + (size_t)n * HO * WO * C,
                  C, H, W, HO, WO, ty * TH, tx * TW, cblk * CB);
    __syncthreads();  // every thread is done with buffer `cur` before the next issue overwrites it
  }
}

constexpr size_t PIPE_SMEM = NSTAGE * TILE_HALVES * sizeof(__half) + (K * K * CB + CB) * sizeof(float);
#endif  // pipe

#if YTK_DW_STAGE == 3  // strip
// Each thread owns VEC channels x CPT adjacent output columns x a strip of TH output rows and walks
// down it one input row at a time: the row's NIC vectors are loaded once (the next row's bytes are
// already in flight), converted to fp32 once and added into the <= ceil(K/S) output rows they touch;
// an output row is activated and stored as soon as its last input row is in, so only those rows'
// accumulators are live. No tile copy and no per-tap index math: the horizontal halo is re-read
// from L1 by the neighbouring column group, the vertical one from L2 by the strip below.
// Weights: 0 read from shared memory where used (the compiler may keep them in registers when they
// fit), 1 held in registers, 2 read from shared memory per tap (never hoisted: for 5x5, where all
// of them would not fit next to five accumulator rows). PF: input rows loaded ahead of the one
// being computed.
// The strip's rows for one thread. EDGE: some of its input columns lie outside the image (zero
// padding) or some of its output columns past the end; else every load and store is unconditional.
template <bool EDGE>
__device__ __forceinline__ void strip_rows(const __half* src, __half* dst, const float (*wr)[VEC], const float* sw,
                                           const float* bias, ptrdiff_t cs, ptrdiff_t rs, ptrdiff_t os, int H,
                                           int W, int WO, int HO, int iy0, int ix0, int oy0, int ox0, int cv) {
  // bit j: input column ix0 + j is inside the image (one register, tested per load, instead of NIC
  // predicates the compiler would spill into registers anyway)
  unsigned colok = 0;
#pragma unroll
  for (int j = 0; j < NIC; ++j) colok |= (unsigned)((unsigned)(ix0 + j) < (unsigned)W) << j;
  // input row ir's NIC vectors; rows outside the image (the strip's first and last only) are zero
  auto load = [&](int ir, VT* raw) {
    const __half* row = src + ir * rs;
    if ((unsigned)(iy0 + ir) < (unsigned)H) {  // block-uniform: the block's threads share their rows
#pragma unroll
      for (int j = 0; j < NIC; ++j) {
        if (!EDGE) {
          raw[j] = __ldg(reinterpret_cast<const VT*>(row + j * cs));
        } else {  // read a column inside the image, then zero what lies outside (no predicated loads)
          const int jc = min(max(ix0 + j, 0), W - 1) - ix0;
          const VT v = __ldg(reinterpret_cast<const VT*>(row + jc * cs));
          raw[j] = ((colok >> j) & 1u) ? v : VT{};
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < NIC; ++j) raw[j] = VT{};
    }
  };
  // acc += the taps of kernel row ky applied to the converted input row
  auto taps = [&](float (*acc)[VEC], const float (*xin)[VEC], int ky) {
    float wt[K][VEC];  // the kernel row's weights, all loads issued before the first FMA
#pragma unroll
    for (int kx = 0; kx < K; ++kx) {
      if (WREG == 1) {
#pragma unroll
        for (int v = 0; v < VEC; ++v) wt[kx][v] = wr[WREG == 1 ? ky * K + kx : 0][v];
      } else if (WREG == 2) {
        ytk_tpl::lds_pinned<VEC>(&sw[(ky * K + kx) * CB + cv * VEC], wt[kx]);  // not hoisted into registers
      } else {
        ytk_tpl::load_f32<VEC>(&sw[(ky * K + kx) * CB + cv * VEC], wt[kx]);
      }
    }
#pragma unroll
    for (int kx = 0; kx < K; ++kx)
#pragma unroll
      for (int q = 0; q < CPT; ++q)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[q][v] = fmaf(wt[kx][v], xin[q * S + kx][v], acc[q][v]);
  };
  auto store = [&](const float (*acc)[VEC], int r) {
    if (oy0 + r >= HO) return;
#pragma unroll
    for (int q = 0; q < CPT; ++q) {
      if (!EDGE || ox0 + q < WO) {
        float o[VEC];
#pragma unroll
        for (int v = 0; v < VEC; ++v) o[v] = act(acc[q][v]);
        add_residual<VEC>(o, src + (r + P) * rs + (q + P) * cs);  // stride 1: input row r + P, column q + P
        ytk_tpl::store_half<VEC>(dst + r * os + q * cs, o);
      }
    }
  };
  // Fully unrolled: each input row's taps and each row's store are placed at compile time, and the
  // accumulators of a stored row are free again (at most ceil(K / S) rows are live).
  float acc[TH][CPT][VEC];
#pragma unroll
  for (int r = 0; r < TH; ++r)
#pragma unroll
    for (int q = 0; q < CPT; ++q)
#pragma unroll
      for (int v = 0; v < VEC; ++v) acc[r][q][v] = bias[v];
  VT raw[PF + 1][NIC];
#pragma unroll
  for (int ir = 0; ir < PF; ++ir) load(ir, raw[ir]);
#pragma unroll
  for (int ir = 0; ir < NIR; ++ir) {
    if (ir + PF < NIR) load(ir + PF, raw[(ir + PF) % (PF + 1)]);
    float xin[NIC][VEC];
#pragma unroll
    for (int j = 0; j < NIC; ++j) ytk_tpl::unpack(raw[ir % (PF + 1)][j], xin[j]);
#pragma unroll
    for (int r = 0; r < TH; ++r) {
      const int ky = ir - r * S;
      if (ky < 0 || ky >= K) continue;
      taps(acc[r], xin, ky);
      if (ky == K - 1) store(acc[r], r);
    }
  }
}

__global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
dw_strip(const __half* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
         __half* __restrict__ y, int C, int H, int W, int HO, int WO, int cblocks) {
  __shared__ __align__(16) float sw[K * K * CB];
  __shared__ __align__(16) float sb[CB];
  const int cblk = blockIdx.x % cblocks, tx = blockIdx.x / cblocks;
  const int oy0 = blockIdx.y * TH, n = blockIdx.z, c_base = cblk * CB;
  stage_weights(sw, sb, w, b, c_base, C);
  __syncthreads();
  const int cv = threadIdx.x % CVB, cg = threadIdx.x / CVB;
  const int c = c_base + cv * VEC, ox0 = tx * TW + cg * CPT;
  if (c >= C || ox0 >= WO) return;
  const int ix0 = ox0 * S - P, iy0 = oy0 * S - P;
  // Element strides: a pixel (C, a compile-time immediate when C is constant), an input and an output row.
  const ptrdiff_t cs = CONST_C ? CONST_C : C, rs = (ptrdiff_t)W * cs, os = (ptrdiff_t)WO * cs;
  // The strip's first input row at column ix0 (may lie outside the image: nothing is read there) and
  // first output row at column ox0.
  const __half* src = x + (ptrdiff_t)n * H * rs + (ptrdiff_t)iy0 * rs + (ptrdiff_t)ix0 * cs + c;
  __half* dst = y + (ptrdiff_t)n * HO * os + (ptrdiff_t)oy0 * os + (ptrdiff_t)ox0 * cs + c;
  float wr[WREG == 1 ? K * K : 1][VEC];
  if (WREG == 1) {
#pragma unroll
    for (int t = 0; t < (WREG == 1 ? K * K : 1); ++t) ytk_tpl::load_f32<VEC>(&sw[t * CB + cv * VEC], wr[t]);
  }
  float bias[VEC];
  ytk_tpl::load_f32<VEC>(&sb[cv * VEC], bias);
  // Warps whose threads all lie inside the image (all but those at its left and right edges) run
  // the unchecked copy of the loop.
  const bool inside = ix0 >= 0 && ix0 + NIC <= W && ox0 + CPT <= WO;
  if (__all_sync(__activemask(), inside)) {
    strip_rows<false>(src, dst, wr, sw, bias, cs, rs, os, H, W, WO, HO, iy0, ix0, oy0, ox0, cv);
  } else {
    strip_rows<true>(src, dst, wr, sw, bias, cs, rs, os, H, W, WO, HO, iy0, ix0, oy0, ox0, cv);
  }
}
#endif  // strip

#if YTK_DW_STAGE >= 4  // tma, mma
// Persistent blocks fed by the Hopper tensor-memory accelerator (stages tma and mma): one thread
// issues each item's whole input tile (CB channels x IW x IH, halo included) as a single TMA box
// copy into a ring of NSTAGE buffers; pixels outside the image arrive as zeros (the convolution's
// padding, no index math). NSTAGE - 1 tiles are in flight while one is computed, so the bytes in
// flight do not depend on how many threads are resident (the strips' and the cp.async pipe's limit
// on small late-stage tensors). With the grid a multiple of the channel blocks a block keeps one
// channel block (and its weights in registers).
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"((unsigned)__cvta_generic_to_shared(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
  unsigned done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(a), "r"(parity) : "memory");
  }
}
// One box (CB, IW, IH, 1) at element coordinates (c, x, y, n) of the NHWC input into `dst`; the
// barrier completes when all `bytes` (zero-filled ones included) have landed.
__device__ __forceinline__ void tma_tile(void* dst, const CUtensorMap* map, uint64_t* bar, unsigned bytes, int c, int x,
                                         int y, int n) {
  const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(b), "r"(bytes) : "memory");
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
      :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c), "r"(x), "r"(y),
         "r"(n), "r"(b) : "memory");
}

// Output through the TMA (OUT_TMA, stages tma and mma; tma_ring below does the bookkeeping): the
// warps write the item's TH x TW x CB output tile into one of two staging buffers (laid out as the
// stage's input tiles: swizzled for mma), every thread fences its shared stores for the async proxy,
// and after the item's barrier one thread issues the tile as a single bulk tensor store, which skips
// what lies outside the tensor (no per-pixel predicates). Whole 128-byte rows reach L2 instead of the
// 4- to 16-byte pieces one lane can store. Before the next item's barrier that thread waits until
// the previous store has read its buffer, so the buffer is free when it comes round again.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void tma_store(const CUtensorMap* map, const void* src, int c, int x, int y, int n) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
               :: "l"(reinterpret_cast<uint64_t>(map)), "r"((unsigned)__cvta_generic_to_shared(src)), "r"(c), "r"(x),
                  "r"(y), "r"(n) : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// The two staging buffers of the output tile, 1024-aligned (the swizzle's period).
[[maybe_unused]] constexpr int OBUF_STRIDE = OUT_TMA ? (TH * TW * CB * 2 + 1023) / 1024 * 1024 : 0;

// Developer timeline hooks, empty here: dwconv_ring_trace.cuh (benchmarks/dw_trace.py only) defines
// them before this text to record each block's SM, start and end and each item's wait and release.
#ifndef YTK_RING_TRACE_ITEM
#define YTK_RING_TRACE_START()
#define YTK_RING_TRACE_ITEM(k, j)
#define YTK_RING_TRACE_END(items, step)
#endif

// The ring loop of a persistent block: items blockIdx.x, +gridDim.x, ... (item = ((n * tiles_y + ty)
// * tiles_x + tx) * cblocks + cblk); prep(cblk) runs before the wait for the item's tile (a block's
// weights load while its first tile is in flight: the trace showed the two latencies in series),
// body(tile, out, cblk, n, ty, tx) once the tile (STRIDE bytes apart in `ring`, BYTES each) has
// landed, and the slot is released after every thread's body. With OUT_TMA, `out` is the item's
// output staging buffer (after the ring; the body fills it with ordinary stores, the ring stores it
// through `ymap` after the slot's barrier).
template <int BYTES, int STRIDE, typename Prep, typename Body>
__device__ __forceinline__ void tma_ring(const CUtensorMap* map, const CUtensorMap* ymap, unsigned char* ring,
                                         uint64_t* full, ytk_tpl::FastDiv tiles_x, ytk_tpl::FastDiv tiles_img,
                                         ytk_tpl::FastDiv cblocks, int items, Prep&& prep, Body&& body) {
  const int step = gridDim.x;
  if ((int)blockIdx.x >= items) return;
  YTK_RING_TRACE_START();
  auto split = [&](int item, int& cblk, int& n, int& ty, int& tx) {
    const int rest = cblocks.div(item);
    cblk = item - rest * (int)cblocks.d;
    n = tiles_img.div(rest);
    const int t = rest - n * (int)tiles_img.d;
    ty = tiles_x.div(t);
    tx = t - ty * (int)tiles_x.d;
  };
  auto issue = [&](int item, int slot) {
    int cblk, n, ty, tx;
    split(item, cblk, n, ty, tx);
    tma_tile(ring + slot * STRIDE, map, &full[slot], BYTES, cblk * CB, tx * TW * S - P, ty * TH * S - P, n);
  };
  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];\n" :: "l"(reinterpret_cast<uint64_t>(map)) : "memory");
#pragma unroll
    for (int s = 0; s < NSTAGE; ++s) mbar_init(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#pragma unroll
    for (int j = 0; j < NSTAGE - 1; ++j)
      if ((int)blockIdx.x + j * step < items) issue((int)blockIdx.x + j * step, j);
  }
  __syncthreads();
  for (int it = blockIdx.x, k = 0; it < items; it += step, ++k) {
    const int slot = k % NSTAGE;
    const int ahead = it + (NSTAGE - 1) * step;
    // slot (k - 1) % NSTAGE was computed in the previous iteration and freed by its trailing barrier
    if (threadIdx.x == 0 && ahead < items) issue(ahead, (k + NSTAGE - 1) % NSTAGE);
    int cblk, n, ty, tx;
    split(it, cblk, n, ty, tx);
    prep(cblk);
    YTK_RING_TRACE_ITEM(k, 0);
    mbar_wait(&full[slot], (unsigned)(k / NSTAGE) & 1u);
    YTK_RING_TRACE_ITEM(k, 1);
    unsigned char* out = ring + NSTAGE * STRIDE + (k & 1) * OBUF_STRIDE;
    body(ring + slot * STRIDE, out, cblk, n, ty, tx);
    if (OUT_TMA) {
      fence_async_smem();  // this thread's writes to `out`, visible to the TMA after the barrier
      if (threadIdx.x == 0) tma_store_wait_read();  // the previous item's store has read its buffer
    }
    __syncthreads();  // every thread is done with `slot` (and `out`) before a later issue overwrites it
    YTK_RING_TRACE_ITEM(k, 2);
    if (OUT_TMA && threadIdx.x == 0) tma_store(ymap, out, cblk * CB, tx * TW, ty * TH, n);
  }
  if (OUT_TMA && threadIdx.x == 0) tma_store_wait_all();
  YTK_RING_TRACE_END(items, step);
}

// The tensor map of an NHWC tensor (fp16, dims C, W, H, N; boxes of CB x box_w x box_h x 1: loads
// fill zeros outside, stores skip what lies outside), through the driver entry point the runtime
// hands out (no link against libcuda).
static int encode_map(CUtensorMap* map, const void* x, int64_t N, int64_t C, int64_t H, int64_t W, int box_w,
                      int box_h, CUtensorMapSwizzle swizzle) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;  // read even when the call fails
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess)
      fn = nullptr;
#else
    if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q) != cudaSuccess) fn = nullptr;
#endif
    return q == cudaDriverEntryPointSuccess ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn) : nullptr;
  }();
  if (!encode) return (int)cudaErrorNotSupported;
  const cuuint64_t dims[4] = {(cuuint64_t)C, (cuuint64_t)W, (cuuint64_t)H, (cuuint64_t)N};
  const cuuint64_t strides[3] = {(cuuint64_t)C * 2, (cuuint64_t)(W * C) * 2, (cuuint64_t)(H * W * C) * 2};
  const cuuint32_t box[4] = {CB, (cuuint32_t)box_w, (cuuint32_t)box_h, 1}, one[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, const_cast<void*>(x), dims, strides, box, one,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : (int)cudaErrorInvalidValue;
}
#endif  // tma, mma

#if YTK_DW_STAGE == 4  // tma
// Stage tma: each thread owns VEC channels x CPT columns over the tile's TH rows and walks down the
// tile one input row at a time as a strip does: the row's NIC vectors are read from shared memory
// once, converted once and added into the <= ceil(K/S) output rows they touch (fp32 FFMA); a
// finished row is activated and stored.
constexpr int BOX_W = IW;
constexpr int TILE_BYTES = TILE_HALVES * 2;
constexpr int TILE_STRIDE = (TILE_BYTES + 127) / 128 * 128;  // TMA destinations are 128-byte aligned
constexpr int RING_ALIGN = 128;
constexpr size_t TMA_SMEM = (size_t)NSTAGE * TILE_STRIDE + 2 * OBUF_STRIDE + RING_ALIGN;
constexpr CUtensorMapSwizzle TMA_SWIZZLE = CU_TENSOR_MAP_SWIZZLE_NONE, OUT_SWIZZLE = CU_TENSOR_MAP_SWIZZLE_NONE;

// The stage's part of the ring kernel (dw_tma, below, sets up the ring and calls it).
__device__ __forceinline__ void ring_kernel(const CUtensorMap* map, const CUtensorMap* ymap, unsigned char* ring,
                                            uint64_t* full, const __half* __restrict__ x, const float* __restrict__ w,
                                            const float* __restrict__ b, __half* __restrict__ y, int C, int HO, int WO,
                                            ytk_tpl::FastDiv tiles_x, ytk_tpl::FastDiv tiles_img,
                                            ytk_tpl::FastDiv cblocks, int items) {
  const int cv = threadIdx.x % CVB, cg = threadIdx.x / CVB;
  float wr[K * K][VEC], bias[VEC];
  int loaded = -1;
  auto prep = [&](int cblk) {
    if (cblk == loaded) return;  // block-uniform
    loaded = cblk;
    const int c = cblk * CB + cv * VEC;
    const bool cok = c < C;  // C % VEC == 0: the thread's VEC channels are all in or all out
#pragma unroll
    for (int t = 0; t < K * K; ++t)
#pragma unroll
      for (int v = 0; v < VEC; ++v) wr[t][v] = cok ? __ldg(&w[(size_t)(c + v) * (K * K) + t]) : 0.f;
#pragma unroll
    for (int v = 0; v < VEC; ++v) bias[v] = HAS_BIAS && cok ? __ldg(&b[c + v]) : 0.f;
  };
  // OUT_TMA: in the staged tile [TH][TW][CB] (unswizzled), this thread's VEC channels of its first column
  const int omine = cg * CPT * CB + cv * VEC;
  tma_ring<TILE_BYTES, TILE_STRIDE>(map, ymap, ring, full, tiles_x, tiles_img, cblocks, items, prep,
                                    [&](const unsigned char* buf, unsigned char* out, int cblk, int n, int ty, int tx) {
    const int c = cblk * CB + cv * VEC;
    const bool cok = c < C;
    const __half* tile = reinterpret_cast<const __half*>(buf) + cg * CPT * S * CB + cv * VEC;
    const int oy0 = ty * TH, ox0 = tx * TW + cg * CPT;
    __half* dst = y + (((size_t)n * HO + oy0) * WO + ox0) * C + c;
    const __half* res = x + (dst - y);  // RESIDUAL, stride 1: the input has the output's shape
    float acc[TH][CPT][VEC];
#pragma unroll
    for (int r = 0; r < TH; ++r)
#pragma unroll
      for (int q = 0; q < CPT; ++q)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[r][q][v] = bias[v];
#pragma unroll
    for (int ir = 0; ir < IH; ++ir) {
      float xin[NIC][VEC];
#pragma unroll
      for (int j = 0; j < NIC; ++j) ytk_tpl::unpack(*reinterpret_cast<const VT*>(tile + (ir * IW + j) * CB), xin[j]);
#pragma unroll
      for (int r = 0; r < TH; ++r) {
        const int ky = ir - r * S;
        if (ky < 0 || ky >= K) continue;
#pragma unroll
        for (int kx = 0; kx < K; ++kx)
#pragma unroll
          for (int q = 0; q < CPT; ++q)
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[r][q][v] = fmaf(wr[ky * K + kx][v], xin[q * S + kx][v], acc[r][q][v]);
        if (OUT_TMA && ky == K - 1) {  // the TMA store skips what lies outside the tensor
#pragma unroll
          for (int q = 0; q < CPT; ++q) {
            float o[VEC];
#pragma unroll
            for (int v = 0; v < VEC; ++v) o[v] = act(acc[r][q][v]);
            add_residual<VEC>(o, res + ((size_t)r * WO + q) * C, cok && oy0 + r < HO && ox0 + q < WO);
            ytk_tpl::store_half<VEC>(reinterpret_cast<__half*>(out) + omine + (r * TW + q) * CB, o);
          }
        } else if (ky == K - 1 && cok && oy0 + r < HO) {
#pragma unroll
          for (int q = 0; q < CPT; ++q) {
            if (ox0 + q < WO) {
              float o[VEC];
#pragma unroll
              for (int v = 0; v < VEC; ++v) o[v] = act(acc[r][q][v]);
              add_residual<VEC>(o, res + ((size_t)r * WO + q) * C);
              ytk_tpl::store_half<VEC>(dst + ((size_t)r * WO + q) * C, o);
            }
          }
        }
      }
    }
  });
}
#endif  // tma

#if YTK_DW_STAGE == 5  // mma
// Stage mma (stride 1, odd K, CB = 64): the same TMA ring, the taps summed on the tensor cores.
// A warp owns one group of 8 channels and SEG 16-pixel column segments of the tile over its TH
// rows. Per input row it loads, for each segment, the 16 pixels x 8 channels at each tap column as
// ldmatrix fragments (two taps per m16n8k16 A operand, the odd last tap as an m16n8k8 one) and adds
// them into every output row they touch with a B operand that is diagonal in the channel: B[k][n] =
// w[channel n][tap of k] where k % 8 == n, else 0. So the mma computes, for 16 pixels and 8 channels,
// two taps at once with fp32 accumulation and no conversions. Weights enter as fp16 (as in
// TensorRT's own fp16 kernels; the scoring budget accounts for their rounding) or, with HILO, as
// an fp16 pair hi + lo summed by a second mma (fp32-exact to ~2^-22, twice the mmas). The tile is stored
// with the 128-byte swizzle (16-byte chunk j of pixel row R at chunk j ^ (R % 8)), so the 8 rows of
// each ldmatrix phase (8 consecutive pixels, one channel group) hit 8 distinct bank groups.
// The box is BOX_W = IW rounded up to 8 pixels wide, so a pixel's swizzle phase (R % 8) depends
// only on its column: every ldmatrix address of a lane is one of KP + 1 per-lane offsets plus a
// compile-time constant (no index math in the loop).
constexpr int BOX_W = (IW + 7) / 8 * 8;
constexpr int TILE_BYTES = IH * BOX_W * CB * 2;                // CB = 64: one 128-byte row per pixel
constexpr int TILE_STRIDE = (TILE_BYTES + 1023) / 1024 * 1024;  // the 128-byte swizzle repeats every 1024
constexpr int RING_ALIGN = 1024;
constexpr size_t TMA_SMEM = (size_t)NSTAGE * TILE_STRIDE + 2 * OBUF_STRIDE + RING_ALIGN;
constexpr CUtensorMapSwizzle TMA_SWIZZLE = CU_TENSOR_MAP_SWIZZLE_128B, OUT_SWIZZLE = CU_TENSOR_MAP_SWIZZLE_128B;
constexpr int NG = CB / 8, SEG = CPT, KP = K / 2;
constexpr int NW = HILO ? 2 : 1;  // weight parts: hi (fp16 of w), lo (fp16 of w - hi)
static_assert(CB == 64 && S == 1 && K % 2 == 1 && TW % (16 * SEG) == 0, "mma stage: CB 64, stride 1, odd K");
static_assert(NTHREADS == 32 * NG * (TW / (16 * SEG)), "mma stage: one warp per channel group and segment set");
static_assert(BOX_W <= 256 && IH <= 256, "a TMA box is at most 256 per dimension");

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm_x2(unsigned addr, unsigned (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr)
               : "memory");
}
// A 4-byte store under a predicate, without a branch around it.
__device__ __forceinline__ void st_pred(__half* p, __half2 v, bool ok) {
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n @q st.global.b32 [%0], %1;\n}\n"
               :: "l"(p), "r"(*reinterpret_cast<const unsigned*>(&v)), "r"((int)ok) : "memory");
}
// The B fragment register of this lane (n = gid, k = 2 tq and 2 tq + 1) holding part `part` of tap
// weight `wv` on the diagonal (0: fp16 of wv, 1: fp16 of the remainder).
__device__ __forceinline__ unsigned diag(float wv, int part, int gid, int tq) {
  if (part) wv -= __half2float(__float2half_rn(wv));
  const __half2 h = __floats2half2_rn(2 * tq == gid ? wv : 0.f, 2 * tq + 1 == gid ? wv : 0.f);
  return *reinterpret_cast<const unsigned*>(&h);
}

// The stage's part of the ring kernel (dw_tma, below, sets up the ring and calls it).
__device__ __forceinline__ void ring_kernel(const CUtensorMap* map, const CUtensorMap* ymap, unsigned char* ring,
                                            uint64_t* full, const __half* __restrict__ x, const float* __restrict__ w,
                                            const float* __restrict__ b, __half* __restrict__ y, int C, int HO, int WO,
                                            ytk_tpl::FastDiv tiles_x, ytk_tpl::FastDiv tiles_img,
                                            ytk_tpl::FastDiv cblocks, int items) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = warp % NG, col0 = (warp / NG) * SEG * 16;
  const int gid = lane >> 2, tq = lane & 3;
  // ldmatrix roles: lanes 0-7 / 8-15 address pixels 0-7 / 8-15 of the first tap, 16-31 of the second.
  // Byte offset of this lane's row at tile column x (row 0): x * 128 plus its swizzled channel group.
  const int lm = (lane & 7) + ((lane >> 3) & 1) * 8, lt = lane >> 4;
  auto lane_off = [&](int x) { return (unsigned)(x * 128 + ((g ^ (x & 7)) << 4)); };
  unsigned off2[KP], off1;
#pragma unroll
  for (int p = 0; p < KP; ++p) off2[p] = lane_off(col0 + lm + lt + 2 * p);
  off1 = lane_off(col0 + lm + K - 1);
  unsigned wb[NW][K][KP][2], wl[NW][K];
  float bias0 = 0.f, bias1 = 0.f;
  int loaded = -1;
  auto prep = [&](int cblk) {
    const int cg0 = cblk * CB + g * 8;
    if (cblk == loaded || cg0 >= C) return;
    loaded = cblk;
    const float* wc = w + (size_t)(cg0 + gid) * (K * K);
#pragma unroll
    for (int h = 0; h < NW; ++h)
#pragma unroll
      for (int ky = 0; ky < K; ++ky) {
#pragma unroll
        for (int p = 0; p < KP; ++p) {
          wb[h][ky][p][0] = diag(__ldg(&wc[ky * K + 2 * p]), h, gid, tq);
          wb[h][ky][p][1] = diag(__ldg(&wc[ky * K + 2 * p + 1]), h, gid, tq);
        }
        wl[h][ky] = diag(__ldg(&wc[ky * K + K - 1]), h, gid, tq);
      }
    bias0 = HAS_BIAS ? __ldg(&b[cg0 + 2 * tq]) : 0.f;
    bias1 = HAS_BIAS ? __ldg(&b[cg0 + 2 * tq + 1]) : 0.f;
  };
  tma_ring<TILE_BYTES, TILE_STRIDE>(map, ymap, ring, full, tiles_x, tiles_img, cblocks, items, prep,
                                    [&](const unsigned char* buf, unsigned char* out, int cblk, int n, int ty, int tx) {
    const int cg0 = cblk * CB + g * 8;  // the warp's first channel
    if (cg0 >= C) return;               // warp-uniform: C % 8 == 0, the group is all in or all out
    const unsigned base = (unsigned)__cvta_generic_to_shared(buf);
    float acc[TH][SEG][4];
#pragma unroll
    for (int r = 0; r < TH; ++r)
#pragma unroll
      for (int s = 0; s < SEG; ++s) {
        acc[r][s][0] = bias0; acc[r][s][1] = bias1; acc[r][s][2] = bias0; acc[r][s][3] = bias1;
      }
    const int oy0 = ty * TH, ox0 = tx * TW + col0;
    __half* dst = y + (((size_t)n * HO + oy0) * WO + ox0 + gid) * C + cg0 + 2 * tq;
    const __half* res = x + (dst - y);  // RESIDUAL, stride 1: the input has the output's shape
    const int rows = HO - oy0;  // output rows of this tile inside the image (may exceed TH)
    bool colok[SEG][2];
#pragma unroll
    for (int s = 0; s < SEG; ++s)
#pragma unroll
      for (int h = 0; h < 2; ++h) colok[s][h] = ox0 + s * 16 + gid + 8 * h < WO;
#pragma unroll
    for (int iy = 0; iy < IH; ++iy) {
      unsigned a2[SEG][KP][4], a1[SEG][2];
#pragma unroll
      for (int s = 0; s < SEG; ++s) {
        const unsigned at = base + (unsigned)((iy * BOX_W + s * 16) * 128);
#pragma unroll
        for (int p = 0; p < KP; ++p) ldsm_x4(at + off2[p], a2[s][p]);
        ldsm_x2(at + off1, a1[s]);
      }
      // tap pairs outermost: consecutive mmas accumulate into different rows and segments
#pragma unroll
      for (int h = 0; h < NW; ++h) {
#pragma unroll
        for (int p = 0; p <= KP; ++p)
#pragma unroll
          for (int r = 0; r < TH; ++r) {
            const int ky = iy - r;
            if (ky < 0 || ky >= K) continue;
#pragma unroll
            for (int s = 0; s < SEG; ++s) {
              if (p < KP) ytk_tpl::mma_m16n8k16(acc[r][s], a2[s][p], wb[h][ky][p][0], wb[h][ky][p][1]);
              else ytk_tpl::mma_m16n8k8(acc[r][s], a1[s], wl[h][ky]);
            }
          }
      }
      const int r = iy - (K - 1);  // the output row this input row completes
      if (r >= 0) {
#pragma unroll
        for (int s = 0; s < SEG; ++s)
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // pixels gid and gid + 8 of the segment
            float o[2] = {act(acc[r][s][2 * h]), act(acc[r][s][2 * h + 1])};
            add_residual<2>(o, res + ((size_t)r * WO + s * 16 + 8 * h) * C, colok[s][h] && r < rows);
            if (OUT_TMA) {  // the staged tile's pixel (row r, column col0 + 16 s + gid + 8 h), swizzled
              const int px = r * TW + col0 + s * 16 + gid + 8 * h;
              ytk_tpl::store_half<2>(reinterpret_cast<__half*>(out + px * 128 + ((g ^ (px & 7)) << 4) + tq * 4), o);
            } else {
              st_pred(dst + ((size_t)r * WO + s * 16 + 8 * h) * C, __floats2half2_rn(o[0], o[1]),
                      colok[s][h] && r < rows);
            }
          }
      }
    }
  });
}
#endif  // mma

#if YTK_DW_STAGE >= 4  // tma, mma
// The persistent ring kernel of stages tma and mma: its ring aligned to the stage's RING_ALIGN, the
// rest is the stage's ring_kernel.
__global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
dw_tma(const __grid_constant__ CUtensorMap map, const __grid_constant__ CUtensorMap ymap, const __half* __restrict__ x,
       const float* __restrict__ w, const float* __restrict__ b,
       __half* __restrict__ y, int C, int HO, int WO, ytk_tpl::FastDiv tiles_x, ytk_tpl::FastDiv tiles_img,
       ytk_tpl::FastDiv cblocks, int items) {
  extern __shared__ __align__(RING_ALIGN) unsigned char dsmem[];
  __shared__ __align__(8) uint64_t full[NSTAGE];
  unsigned char* ring = dsmem + ((RING_ALIGN - ((unsigned)__cvta_generic_to_shared(dsmem) & (RING_ALIGN - 1))) &
                                 (RING_ALIGN - 1));
  ring_kernel(&map, &ymap, ring, full, x, w, b, y, C, HO, WO, tiles_x, tiles_img, cblocks, items);
}
#endif  // tma, mma

// The grid of a persistent kernel (pipe, tma): at most one block per resident slot of this GPU (asked
// once per kernel: a process drives one kind of GPU), a multiple of the channel blocks when larger
// (a block then keeps one channel block and its weights); minus a cudaError_t when the opt-in to
// `smem` bytes of dynamic shared memory is refused.
template <typename Kern>
static int64_t persistent_grid(Kern* kernel, size_t smem, int64_t items, int64_t cblocks) {
  static int slots = 0;
  if (slots == 0) {
    int dev = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return -(int64_t)err;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, NTHREADS, smem);
    slots = (per_sm > 0 ? per_sm : 1) * (sms > 0 ? sms : 1);
  }
  int64_t grid = items < slots ? items : slots;
  if (grid > cblocks) grid -= grid % cblocks;
  return grid;
}

// extents: N, C, H, W, HO, WO (logical NCHW); inputs x, w[, b]; output y.
int launch(const void* const* inputs, void* const* outputs, const int64_t* e, cudaStream_t stream) {
  const int64_t N = e[0], C = e[1], H = e[2], W = e[3], HO = e[4], WO = e[5];
  if ((CONST_C && C != CONST_C) || C % VEC != 0 || C <= 0) return (int)cudaErrorInvalidValue;
  if (HO != (H + 2 * P - K) / S + 1 || WO != (W + 2 * P - K) / S + 1) return (int)cudaErrorInvalidValue;
  if (N == 0 || HO <= 0 || WO <= 0) return 0;
  if ((int64_t)N * H * W * C > INT64_C(1) << 40 || H > INT32_MAX || W > INT32_MAX) return (int)cudaErrorInvalidValue;
  const int64_t tiles_x = (WO + TW - 1) / TW, tiles_y = (HO + TH - 1) / TH, cblocks = (C + CB - 1) / CB;
  const __half* x = static_cast<const __half*>(inputs[0]);
  const float* w = static_cast<const float*>(inputs[1]);
  const float* b = HAS_BIAS ? static_cast<const float*>(inputs[2]) : nullptr;
  __half* y = static_cast<__half*>(outputs[0]);
#if YTK_DW_STAGE == 2  // pipe
  {
    const int64_t items = tiles_x * tiles_y * cblocks * N;
    if (items > INT32_MAX) return (int)cudaErrorInvalidConfiguration;
    const int64_t grid = persistent_grid(dw_pipe, PIPE_SMEM, items, cblocks);
    if (grid < 0) return (int)-grid;
    dw_pipe<<<(unsigned)grid, NTHREADS, PIPE_SMEM, stream>>>(x, w, b, y, (int)C, (int)H, (int)W, (int)HO, (int)WO,
        ytk_tpl::FastDiv((int)tiles_x), ytk_tpl::FastDiv((int)(tiles_x * tiles_y)), ytk_tpl::FastDiv((int)cblocks),
        (int)items);
    return (int)cudaGetLastError();
  }
#endif  // pipe
#if YTK_DW_STAGE >= 4  // tma, mma
  {
    const int64_t items = tiles_x * tiles_y * cblocks * N;
    // the tensor map's row strides are multiples of 16 bytes, its base 16-byte aligned
    if (C % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return (int)cudaErrorInvalidValue;
    if (items > INT32_MAX) return (int)cudaErrorInvalidConfiguration;
    const int64_t grid = persistent_grid(dw_tma, TMA_SMEM, items, cblocks);
    if (grid < 0) return (int)-grid;
    CUtensorMap map, ymap = {};
    int rc = encode_map(&map, x, N, C, H, W, BOX_W, IH, TMA_SWIZZLE);
    if (!rc && OUT_TMA) {
      if (reinterpret_cast<uintptr_t>(y) % 16 != 0) return (int)cudaErrorInvalidValue;
      rc = encode_map(&ymap, y, N, C, HO, WO, TW, TH, OUT_SWIZZLE);
    }
    if (rc) return rc;
    dw_tma<<<(unsigned)grid, NTHREADS, TMA_SMEM, stream>>>(map, ymap, x, w, b, y, (int)C, (int)HO, (int)WO,
        ytk_tpl::FastDiv((int)tiles_x), ytk_tpl::FastDiv((int)(tiles_x * tiles_y)), ytk_tpl::FastDiv((int)cblocks),
        (int)items);
    return (int)cudaGetLastError();
  }
#endif  // tma, mma
#if YTK_DW_STAGE == 3  // strip
  if (tiles_x * cblocks > INT32_MAX || tiles_y > 65535 || N > 65535) return (int)cudaErrorInvalidConfiguration;
  dw_strip<<<dim3((unsigned)(tiles_x * cblocks), (unsigned)tiles_y, (unsigned)N), NTHREADS, 0, stream>>>(
      x, w, b, y, (int)C, (int)H, (int)W, (int)HO, (int)WO, (int)cblocks);
  return (int)cudaGetLastError();
#endif  // strip
#if YTK_DW_STAGE <= 1  // direct, smem
  if (tiles_x * tiles_y * cblocks > INT32_MAX || N > 65535) return (int)cudaErrorInvalidConfiguration;
  const dim3 grid((unsigned)(tiles_x * tiles_y * cblocks), 1, (unsigned)N);
  dw_kernel<<<grid, NTHREADS, 0, stream>>>(x, w, b, y, (int)C, (int)H, (int)W, (int)HO, (int)WO, (int)tiles_x,
                                          (int)cblocks);
  return (int)cudaGetLastError();
#endif  // direct, smem
}
