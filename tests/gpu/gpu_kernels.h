/* Small CUDA kernels for the GPU suites (gpu_kernels.cu), callable from C:
 * they write inputs and check outputs on the device, in stream order, so a
 * test can interleave them with plan launches without synchronizing the host.
 * Each function enqueues its kernel on `stream` and returns the launch error. */
#ifndef CG_GPU_KERNELS_H
#define CG_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __CUDACC__
#define CG_GPU_HD __host__ __device__
#else
#define CG_GPU_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Element i of rank `rank`'s input under `seed`: an integer in [-100, 100]
 * (a splitmix64 hash), so sums over up to 8 ranks are exact in int32 and
 * float32. The same code runs on the host and on the device. */
static inline CG_GPU_HD int32_t cg_gpu_value(uint64_t seed, int rank, uint64_t i) {
  uint64_t x = seed ^ ((uint64_t)(rank + 1) * 0x9E3779B97F4A7C15ull) ^ (i * 0xD1B54A32D192ED03ull);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return (int32_t)(x % 201u) - 100;
}

/* Sum over ranks first_rank .. first_rank + ranks - 1 of cg_gpu_value(seed, r, i). */
static inline CG_GPU_HD int32_t cg_gpu_value_sum(uint64_t seed, int first_rank, int ranks, uint64_t i) {
  int32_t sum = 0;
  for (int r = first_rank; r < first_rank + ranks; r++) sum += cg_gpu_value(seed, r, i);
  return sum;
}

/* buf[i] = cg_gpu_value(seed, rank, first + i) for i < n, stored as int32
 * (as_float 0) or float32 (as_float 1). */
cudaError_t cg_gpu_fill(void *buf, int as_float, size_t n, uint64_t seed, int rank, uint64_t first,
                        cudaStream_t stream);

/* Adds to *bad the number of i < n where buf[i] (int32 or float32) differs
 * from cg_gpu_value_sum(seed, first_rank, ranks, i % period). */
cudaError_t cg_gpu_check_sum(const void *buf, int as_float, size_t n, size_t period, uint64_t seed, int first_rank,
                             int ranks, unsigned long long *bad, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
