// Developer timeline of the ring kernels (dwconv.cuh, stages tma and mma) for benchmarks/dw_trace.py.
// Never part of the product: only emit_dwconv.emit(..., trace=True) puts this text into a variant's
// namespace, before dwconv.cuh. Thread 0 of every block records its SM, its start and end on the
// global timer and how many items it ran, and per item the SM clock when it starts waiting for the
// item's tile, when the tile has landed and after the slot's release; trace_copy reads them back.
constexpr int TRACE_BLOCKS = 1024, TRACE_ITEMS = 64;
__device__ unsigned long long trace_items[TRACE_BLOCKS][TRACE_ITEMS][3];
__device__ unsigned long long trace_blocks[TRACE_BLOCKS][4];  // smid, globaltimer start, end, items
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned long long smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__device__ __forceinline__ void trace_block(int j, unsigned long long v) {
  if (threadIdx.x == 0 && blockIdx.x < TRACE_BLOCKS) trace_blocks[blockIdx.x][j] = v;
}
#define YTK_RING_TRACE_START() (trace_block(0, smid()), trace_block(1, gtimer()))
#define YTK_RING_TRACE_ITEM(k, j) \
  if (threadIdx.x == 0 && blockIdx.x < TRACE_BLOCKS && (k) < TRACE_ITEMS) trace_items[blockIdx.x][k][j] = clock64()
#define YTK_RING_TRACE_END(items, step) \
  (trace_block(2, gtimer()), trace_block(3, ((items) - (int)blockIdx.x + (step) - 1) / (step)))
static int trace_copy(void* items, void* blocks) {
  const cudaError_t e = cudaMemcpyFromSymbol(items, trace_items, sizeof(trace_items));
  return (int)(e != cudaSuccess ? e : cudaMemcpyFromSymbol(blocks, trace_blocks, sizeof(trace_blocks)));
}
