// The batched copy kernel behind a bucket's pack and unpack: one launch per
// step, one thread block per chunk of the step's chunk table (built at
// compile time, bucket_cuda.c), so a bucket of a hundred tensors costs one
// kernel node in the graph instead of a hundred memcpy nodes.
#include <cuda_runtime.h>
#include <stdint.h>

#include "bucket_copy.h"

__global__ void cg_copy_chunks_kernel(const cg_copy_chunk_t *table) {
  const cg_copy_chunk_t c = table[blockIdx.x];
  const char *src = (const char *)c.src;
  char *dst = (char *)c.dst;
  uint64_t bytes = c.bytes;
  uint64_t misalign = ((uintptr_t)src | (uintptr_t)dst | bytes);
  if ((misalign & 15) == 0) {
    const uint4 *s = (const uint4 *)src;
    uint4 *d = (uint4 *)dst;
    uint64_t n = bytes / 16, i = threadIdx.x;
    // four loads in flight per thread before the stores: a copy is bound by
    // memory latency, not by instructions
    for (; i + 3 * blockDim.x < n; i += 4 * blockDim.x) {
      uint4 a = s[i], b = s[i + blockDim.x], c = s[i + 2 * blockDim.x], e = s[i + 3 * blockDim.x];
      d[i] = a;
      d[i + blockDim.x] = b;
      d[i + 2 * blockDim.x] = c;
      d[i + 3 * blockDim.x] = e;
    }
    for (; i < n; i += blockDim.x) d[i] = s[i];
  } else if ((misalign & 3) == 0) {
    const uint32_t *s = (const uint32_t *)src;
    uint32_t *d = (uint32_t *)dst;
    for (uint64_t i = threadIdx.x; i < bytes / 4; i += blockDim.x) d[i] = s[i];
  } else if ((misalign & 1) == 0) {
    const uint16_t *s = (const uint16_t *)src;
    uint16_t *d = (uint16_t *)dst;
    for (uint64_t i = threadIdx.x; i < bytes / 2; i += blockDim.x) d[i] = s[i];
  } else {
    for (uint64_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  }
}

extern "C" cudaError_t cg_copy_chunks_launch(const cg_copy_chunk_t *table, unsigned n_chunks, cudaStream_t stream) {
  if (!n_chunks) return cudaSuccess;
  cg_copy_chunks_kernel<<<n_chunks, CG_COPY_THREADS, 0, stream>>>(table);
  return cudaGetLastError();
}
