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

/* ---- data that changes on every replay without the host (test_embed.c): the
 * kernels below take the replay number from a counter in device memory, so a
 * graph captured once writes and checks fresh values each time it is
 * launched, when a kernel captured with them advances the counter. */

/* The seed of replay k under `base`, on the host and on the device. */
static inline CG_GPU_HD uint64_t cg_gpu_round_seed(uint64_t base, uint64_t k) {
  uint64_t x = base + (k + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 29;
  x *= 0x165667B19E3779F9ull;
  return x ^ (x >> 32);
}

/* buf[i] = cg_gpu_value(cg_gpu_round_seed(base, *round), rank, i) for i < n,
 * int32 (as_float 0) or float32 (as_float 1). */
cudaError_t cg_gpu_fill_round(void *buf, int as_float, size_t n, uint64_t base, int rank,
                              const unsigned long long *round, cudaStream_t stream);

/* Counts the i < n where buf[i] (int32 or float32) differs from
 * mul * cg_gpu_value_sum(cg_gpu_round_seed(base, *round), first_rank, ranks, i % period) + add:
 * bad[0] += that count and, when it is not 0, bad[1] = min(bad[1], *round)
 * (start it at ULLONG_MAX: the first wrong replay). */
cudaError_t cg_gpu_check_round(const void *buf, int as_float, size_t n, size_t period, int32_t mul, int32_t add,
                               uint64_t base, int first_rank, int ranks, const unsigned long long *round,
                               unsigned long long *bad, cudaStream_t stream);

/* *counter += 1 (one thread). */
cudaError_t cg_gpu_bump(unsigned long long *counter, cudaStream_t stream);

/* out[i] = mul * in[i] + add for i < n (int32). */
cudaError_t cg_gpu_affine(const int32_t *in, int32_t *out, size_t n, int32_t mul, int32_t add, cudaStream_t stream);

/* For every i < n, `times` times over: reads buf[i], sleeps about delay_ns,
 * writes back what it read plus one. Not atomic on purpose: two of these
 * running at once on the same buffer lose increments. */
cudaError_t cg_gpu_slow_increment(int32_t *buf, size_t n, int times, unsigned delay_ns, cudaStream_t stream);

/* One thread spins at least `us` microseconds (by the GPU's global timer):
 * work that keeps `stream` busy for a known time. */
cudaError_t cg_gpu_sleep(unsigned us, cudaStream_t stream);

/* The same kernels as nodes of a graph built by hand (cudaGraphAddKernelNode),
 * after deps[0 .. n_deps). */
cudaError_t cg_gpu_graph_fill_round(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                    size_t n_deps, void *buf, int as_float, size_t n, uint64_t base, int rank,
                                    const unsigned long long *round);
cudaError_t cg_gpu_graph_check_round(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                     size_t n_deps, const void *buf, int as_float, size_t n, size_t period,
                                     int32_t mul, int32_t add, uint64_t base, int first_rank, int ranks,
                                     const unsigned long long *round, unsigned long long *bad);
cudaError_t cg_gpu_graph_bump(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n_deps,
                              unsigned long long *counter);

#ifdef __cplusplus
}
#endif
#endif
