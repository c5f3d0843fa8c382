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

/* ---- replay-driven data (test_embed.c) */

static __global__ void fill_round_kernel(void *buf, int as_float, size_t n, uint64_t base, int rank,
                                         const unsigned long long *round) {
  uint64_t seed = cg_gpu_round_seed(base, *round);
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int32_t v = cg_gpu_value(seed, rank, i);
    if (as_float)
      ((float *)buf)[i] = (float)v;
    else
      ((int32_t *)buf)[i] = v;
  }
}

static __global__ void check_round_kernel(const void *buf, int as_float, size_t n, size_t period, int32_t mul,
                                          int32_t add, uint64_t base, int first_rank, int ranks,
                                          const unsigned long long *round, unsigned long long *bad) {
  unsigned long long k = *round;
  uint64_t seed = cg_gpu_round_seed(base, k);
  size_t stride = (size_t)gridDim.x * blockDim.x;
  unsigned long long wrong = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int32_t want = mul * cg_gpu_value_sum(seed, first_rank, ranks, i % period) + add;
    int ok = as_float ? ((const float *)buf)[i] == (float)want : ((const int32_t *)buf)[i] == want;
    wrong += ok ? 0u : 1u;
  }
  if (wrong) {
    atomicAdd(&bad[0], wrong);
    atomicMin(&bad[1], k);
  }
}

static __global__ void bump_kernel(unsigned long long *counter) { *counter += 1; }

static __global__ void affine_kernel(const int32_t *in, int32_t *out, size_t n, int32_t mul, int32_t add) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = mul * in[i] + add;
}

static __global__ void slow_increment_kernel(int32_t *buf, size_t n, int times, unsigned delay_ns) {
  volatile int32_t *v = buf;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (int t = 0; t < times; t++)
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
      int32_t seen = v[i];
      __nanosleep(delay_ns);
      v[i] = seen + 1;
    }
}

/* __nanosleep may sleep anywhere in [0, 2t]: the global timer says when `us` have passed */
static __device__ unsigned long long global_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __global__ void sleep_kernel(unsigned us) {
  unsigned long long end = global_ns() + 1000ull * us;
  while (global_ns() < end) __nanosleep(1000);
}

cudaError_t cg_gpu_sleep(unsigned us, cudaStream_t stream) {
  sleep_kernel<<<1, 1, 0, stream>>>(us);
  return cudaGetLastError();
}

cudaError_t cg_gpu_fill_round(void *buf, int as_float, size_t n, uint64_t base, int rank,
                              const unsigned long long *round, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_round_kernel<<<blocks_for(n), THREADS, 0, stream>>>(buf, as_float, n, base, rank, round);
  return cudaGetLastError();
}

cudaError_t cg_gpu_check_round(const void *buf, int as_float, size_t n, size_t period, int32_t mul, int32_t add,
                               uint64_t base, int first_rank, int ranks, const unsigned long long *round,
                               unsigned long long *bad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (period == 0) return cudaErrorInvalidValue;
  check_round_kernel<<<blocks_for(n), THREADS, 0, stream>>>(buf, as_float, n, period, mul, add, base, first_rank,
                                                            ranks, round, bad);
  return cudaGetLastError();
}

cudaError_t cg_gpu_bump(unsigned long long *counter, cudaStream_t stream) {
  bump_kernel<<<1, 1, 0, stream>>>(counter);
  return cudaGetLastError();
}

cudaError_t cg_gpu_affine(const int32_t *in, int32_t *out, size_t n, int32_t mul, int32_t add, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  affine_kernel<<<blocks_for(n), THREADS, 0, stream>>>(in, out, n, mul, add);
  return cudaGetLastError();
}

cudaError_t cg_gpu_slow_increment(int32_t *buf, size_t n, int times, unsigned delay_ns, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  slow_increment_kernel<<<blocks_for(n), THREADS, 0, stream>>>(buf, n, times, delay_ns);
  return cudaGetLastError();
}

/* A kernel node of `blocks` x THREADS; the runtime copies the arguments. */
static cudaError_t add_kernel_node(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                   size_t n_deps, void *fn, unsigned blocks, unsigned threads, void **args) {
  cudaKernelNodeParams p = {};
  p.func = fn;
  p.gridDim = dim3(blocks);
  p.blockDim = dim3(threads);
  p.sharedMemBytes = 0;
  p.kernelParams = args;
  p.extra = NULL;
  return cudaGraphAddKernelNode(node, graph, deps, n_deps, &p);
}

cudaError_t cg_gpu_graph_fill_round(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                    size_t n_deps, void *buf, int as_float, size_t n, uint64_t base, int rank,
                                    const unsigned long long *round) {
  void *args[] = {&buf, &as_float, &n, &base, &rank, &round};
  return add_kernel_node(node, graph, deps, n_deps, (void *)fill_round_kernel, blocks_for(n), THREADS, args);
}

cudaError_t cg_gpu_graph_check_round(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                     size_t n_deps, const void *buf, int as_float, size_t n, size_t period,
                                     int32_t mul, int32_t add, uint64_t base, int first_rank, int ranks,
                                     const unsigned long long *round, unsigned long long *bad) {
  if (period == 0) return cudaErrorInvalidValue;
  void *args[] = {&buf, &as_float, &n, &period, &mul, &add, &base, &first_rank, &ranks, &round, &bad};
  return add_kernel_node(node, graph, deps, n_deps, (void *)check_round_kernel, blocks_for(n), THREADS, args);
}

cudaError_t cg_gpu_graph_bump(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n_deps,
                              unsigned long long *counter) {
  void *args[] = {&counter};
  return add_kernel_node(node, graph, deps, n_deps, (void *)bump_kernel, 1, 1, args);
}
