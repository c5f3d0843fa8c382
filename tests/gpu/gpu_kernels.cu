/* Kernels behind gpu_kernels.h: grid-stride loops, plain CUDA C. */
#include "gpu_kernels.h"

enum { THREADS = 256, MAX_BLOCKS = 4096 };

static unsigned blocks_for(size_t n) {
  size_t b = (n + THREADS - 1) / THREADS;
  if (b > MAX_BLOCKS) b = MAX_BLOCKS;
  return b ? (unsigned)b : 1u;
}

static __global__ void fill_kernel(void *buf, int as_float, size_t n, uint64_t seed, int rank, uint64_t first) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int32_t v = cg_gpu_value(seed, rank, first + i);
    if (as_float)
      ((float *)buf)[i] = (float)v;
    else
      ((int32_t *)buf)[i] = v;
  }
}

static __global__ void check_sum_kernel(const void *buf, int as_float, size_t n, size_t period, uint64_t seed,
                                        int first_rank, int ranks, unsigned long long *bad) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  unsigned long long wrong = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int32_t want = cg_gpu_value_sum(seed, first_rank, ranks, i % period);
    int ok = as_float ? ((const float *)buf)[i] == (float)want : ((const int32_t *)buf)[i] == want;
    wrong += ok ? 0u : 1u;
  }
  if (wrong) atomicAdd(bad, wrong);
}

cudaError_t cg_gpu_fill(void *buf, int as_float, size_t n, uint64_t seed, int rank, uint64_t first,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(n), THREADS, 0, stream>>>(buf, as_float, n, seed, rank, first);
  return cudaGetLastError();
}

cudaError_t cg_gpu_check_sum(const void *buf, int as_float, size_t n, size_t period, uint64_t seed, int first_rank,
                             int ranks, unsigned long long *bad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (period == 0) return cudaErrorInvalidValue;
  check_sum_kernel<<<blocks_for(n), THREADS, 0, stream>>>(buf, as_float, n, period, seed, first_rank, ranks, bad);
  return cudaGetLastError();
}
