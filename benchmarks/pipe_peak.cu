// Peak issue rates of the instructions the depthwise kernels are built from, measured on the GPU
// it runs on: the compute bound of a tap formulation is (its instruction count) / (these rates).
//
//   nvcc -O3 -arch=sm_90 -o /tmp/pipe_peak benchmarks/pipe_peak.cu && /tmp/pipe_peak
//
// Every SM runs WARPS warps; each warp loops over ILP independent chains of one instruction (mma
// m16n8k16 / m16n8k8 with fp16 inputs and fp32 accumulators, fp32 FFMA, ldmatrix.x4 from shared
// memory). The rate is per SM and clock: instructions (and MACs or bytes) over the SM cycles
// (clock64) the busiest block took, so it does not depend on the clock the GPU ran at; the wall time
// (CUDA events) and the clock it implies are printed beside it as a check. Results feed a sink so
// the compiler keeps every instruction.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

constexpr int ILP = 8, ITERS = 4096;

__device__ __forceinline__ void mma16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma8(float (&d)[4], const unsigned (&a)[4], unsigned b0) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(b0));
}

// kind 0: mma m16n8k16, 1: mma m16n8k8, 2: FFMA, 3: ldmatrix.x4
template <int KIND>
__global__ void peak(float* sink, long long* cycles, unsigned seed) {
  __shared__ __align__(128) unsigned char tile[16384];
  for (int i = threadIdx.x; i < 16384 / 4; i += blockDim.x) reinterpret_cast<unsigned*>(tile)[i] = seed + i;
  __syncthreads();
  const unsigned lane = threadIdx.x & 31;
  unsigned a[4] = {seed ^ lane, seed + lane, seed * 3u + lane, seed * 5u ^ lane};
  float acc[ILP][4];
#pragma unroll
  for (int c = 0; c < ILP; ++c)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[c][j] = (float)(c + j) * 1e-3f;
  // each lane's ldmatrix row: 16 bytes, 8 rows of a phase in distinct bank groups
  const unsigned base = (unsigned)__cvta_generic_to_shared(tile) + (threadIdx.x % 64) * 16;
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < ITERS; ++it) {
#pragma unroll
    for (int c = 0; c < ILP; ++c) {
      if (KIND == 0) mma16(acc[c], a, a[0] + c, a[1]);
      if (KIND == 1) mma8(acc[c], a, a[2] + c);
      if (KIND == 2) {  // four independent FFMAs per chain and step
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[c][j] = fmaf(acc[c][j], 1.0001f, 0.5f);
      }
      if (KIND == 3) {
        unsigned r[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(base + ((c * 1024 + it * 64) & 8191)));
        acc[c][0] += __uint_as_float(r[0] ^ r[1] ^ r[2] ^ r[3]);
      }
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < ILP; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  if (s == 1234.5f) sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int KIND>
void run(const char* name, const char* unit, double per_instr, int sms, int warps, float* sink, long long* cyc) {
  const int threads = 32 * warps;
  peak<KIND><<<sms, threads>>>(sink, cyc, 1u);  // warm-up
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  peak<KIND><<<sms, threads>>>(sink, cyc, 2u);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  long long* h = new long long[sms];
  CK(cudaMemcpy(h, cyc, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
  long long mx = 0;
  for (int i = 0; i < sms; ++i) mx = h[i] > mx ? h[i] : mx;
  delete[] h;
  const double instr_sm = (double)warps * ITERS * ILP * (KIND == 2 ? 4 : 1);  // warp instructions per SM
  const double per_clk = instr_sm / (double)mx;
  std::printf("%-22s %2d warps/SM  %7.3f warp-instr/clk/SM  %9.1f %s/clk/SM  (%.3f ms, %.2f GHz implied)\n", name,
              warps, per_clk, per_clk * per_instr, unit, ms, (double)mx / (ms * 1e6));
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs; %d chains per warp, %d steps\n", prop.name, sms, ILP, ITERS);
  float* sink;
  long long* cyc;
  CK(cudaMalloc(&sink, sizeof(float) * sms * 1024));
  CK(cudaMalloc(&cyc, sizeof(long long) * sms));
  for (int warps : {8, 16, 32}) {
    run<0>("mma m16n8k16 f16->f32", "MAC", 16 * 8 * 16, sms, warps, sink, cyc);
    run<1>("mma m16n8k8 f16->f32", "MAC", 16 * 8 * 8, sms, warps, sink, cyc);
    run<2>("FFMA fp32", "FMA", 32, sms, warps, sink, cyc);
    run<3>("ldmatrix.x4", "byte", 512, sms, warps, sink, cyc);
  }
  return 0;
}
