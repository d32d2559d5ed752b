// Shared by every template (emit_common.PRELUDE, once at the top of each translation unit): the
// includes and namespace ytk_tpl -- vector (un)packing, tensor-core tiles, fast division, cp.async,
// pinned shared-memory loads.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cstddef>

namespace ytk_tpl {

// 8 halves <-> 8 floats; 16-byte aligned vectors. The vector is taken by value: through a reference
// into memory the compiler splits its load into 4-byte pieces (2-4x the load instructions).
__device__ __forceinline__ void unpack(const uint4 r, float* f) {
  const __half2* h = reinterpret_cast<const __half2*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) { const float2 t = __half22float2(h[i]); f[2 * i] = t.x; f[2 * i + 1] = t.y; }
}
__device__ __forceinline__ void unpack(const uint2 r, float* f) {
  const __half2* h = reinterpret_cast<const __half2*>(&r);
#pragma unroll
  for (int i = 0; i < 2; ++i) { const float2 t = __half22float2(h[i]); f[2 * i] = t.x; f[2 * i + 1] = t.y; }
}
__device__ __forceinline__ void unpack(const unsigned r, float* f) {
  const float2 t = __half22float2(*reinterpret_cast<const __half2*>(&r)); f[0] = t.x; f[1] = t.y;
}
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint4 r; __half2* h = reinterpret_cast<__half2*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
  return r;
}
__device__ __forceinline__ uint2 pack4(const float* f) {
  uint2 r; __half2* h = reinterpret_cast<__half2*>(&r);
#pragma unroll
  for (int i = 0; i < 2; ++i) h[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
  return r;
}

// Tensor-core tiles (sm_80+), fp16 operands and fp32 accumulation in place: d += a (16 x 16, row) *
// (b0, b1) (16 x 8, col), and the k = 8 form. Register-only, so not volatile (the compiler schedules them).
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_m16n8k8(float (&d)[4], const unsigned (&a)[2], unsigned b) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(b));
}

// Division by a runtime divisor d >= 1 without the ~20-instruction integer divide, for 0 <= x < 2^31:
// q = (umulhi(x, m) + x) >> s with s = ceil(log2 d), m = 2^32 (2^s - d) / d + 1 (made once on the host).
struct FastDiv {
  unsigned d, m, s;
  __host__ explicit FastDiv(int divisor = 1) : d((unsigned)(divisor > 0 ? divisor : 1)), m(0), s(0) {
    while ((1u << s) < d && s < 31) ++s;
    m = (unsigned)((((unsigned long long)1 << 32) * (((unsigned long long)1 << s) - d)) / d + 1);
  }
  __host__ __device__ __forceinline__ int div(int x) const {
#ifdef __CUDA_ARCH__
    const unsigned hi = __umulhi((unsigned)x, m);
#else
    const unsigned hi = (unsigned)(((unsigned long long)(unsigned)x * m) >> 32);
#endif
    return (int)((hi + (unsigned)x) >> s);
  }
};

template <int V> struct HVec;
template <> struct HVec<8> { using T = uint4; };
template <> struct HVec<4> { using T = uint2; };
template <> struct HVec<2> { using T = unsigned; };

// VEC fp32 weights (16-byte aligned smem, VEC = 2, 4 or 8) into registers.
template <int VEC>
__device__ __forceinline__ void load_f32(const float* p, float* out) {
  if (VEC == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p); out[0] = t.x; out[1] = t.y;
  } else {
#pragma unroll
    for (int i = 0; i < VEC / 4; ++i) {
      const float4 t = reinterpret_cast<const float4*>(p)[i];
      out[4 * i] = t.x; out[4 * i + 1] = t.y; out[4 * i + 2] = t.z; out[4 * i + 3] = t.w;
    }
  }
}
// VEC fp32 values -> VEC halves stored with one 4-, 8- or 16-byte store.
template <int VEC>
__device__ __forceinline__ void store_half(__half* dst, const float* f) {
  if (VEC == 8) *reinterpret_cast<uint4*>(dst) = pack8(f);
  else if (VEC == 4) *reinterpret_cast<uint2*>(dst) = pack4(f);
  else *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(f[0], f[1]);
}

// Asynchronous global->shared copy; when !valid nothing is read and the bytes are zero-filled
// (that is how out-of-image taps become the convolution's zero padding).
template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? BYTES : 0;
  if (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(n));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(s), "l"(gmem), "n"(BYTES), "r"(n));
  }
}
// A shared-memory float4 load the compiler may not hoist out of a loop: used where keeping every
// loaded value live across iterations would exhaust the registers (e.g. a 16x17 matrix).
__device__ __forceinline__ float4 lds128_pinned(const float* p) {
  float4 v;
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a));
  return v;
}
// VEC fp32 values from shared memory (VEC = 2, 4 or 8; 8-byte aligned for 2, else 16), loaded where
// they are used: volatile loads (and the clobber) keep nvcc and ptxas from hoisting them out of a loop
// into registers.
template <int VEC>
__device__ __forceinline__ void lds_pinned(const float* p, float* out) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  if (VEC == 2) {
    asm volatile("ld.volatile.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(out[0]), "=f"(out[1]) : "r"(a) : "memory");
  } else {
#pragma unroll
    for (int i = 0; i < VEC / 4; ++i) {
      asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(out[4 * i]), "=f"(out[4 * i + 1]), "=f"(out[4 * i + 2]), "=f"(out[4 * i + 3])
                   : "r"(a + 16 * i) : "memory");
    }
  }
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_prior() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

}  // namespace ytk_tpl
