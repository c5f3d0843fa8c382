/* bench_train's kernels: a backward kernel per gradient (writes it, then spins
 * on %globaltimer until its share of the backward time has passed) and the
 * result check. See train_kernels.h. */
#include "train_kernels.h"

/* every thread of the grid writes elements j, j + STRIDE, ...: all with the
 * same j % 8, so all with the same value */
#define STRIDE ((size_t)TRAIN_BLOCKS * TRAIN_THREADS)
static_assert(STRIDE % 8 == 0, "train_value repeats every 8 elements");

static __device__ __forceinline__ unsigned long long global_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __global__ void __launch_bounds__(TRAIN_THREADS)
    backward_kernel(float *grad, size_t count, int tensor, float scale, unsigned long long ns,
                    unsigned long long *stamps, unsigned int *act) {
  unsigned long long start = threadIdx.x == 0 ? global_ns() : 0;
  size_t j = (size_t)blockIdx.x * TRAIN_THREADS + threadIdx.x;
  const float value = scale * train_value(tensor, j);
  for (; j + 3 * STRIDE < count; j += 4 * STRIDE) {
    grad[j] = value;
    grad[j + STRIDE] = value;
    grad[j + 2 * STRIDE] = value;
    grad[j + 3 * STRIDE] = value;
  }
  for (; j < count; j += STRIDE) grad[j] = value;
  if (threadIdx.x == 0)
    while (global_ns() - start < ns) {
    }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (stamps) {
      unsigned long long *mine = stamps + 2 * ((size_t)tensor * TRAIN_BLOCKS + blockIdx.x);
      mine[0] = start;
      mine[1] = global_ns();
    }
    if (act && blockIdx.x == 0) *act += 1;
  }
}

extern "C" cudaError_t train_backward_launch(float *grad, size_t count, int tensor, float scale,
                                             unsigned long long ns, unsigned long long *stamps, unsigned int *act,
                                             cudaStream_t stream) {
  backward_kernel<<<TRAIN_BLOCKS, TRAIN_THREADS, 0, stream>>>(grad, count, tensor, scale, ns, stamps, act);
  return cudaGetLastError();
}

static __global__ void check_kernel(const float *grad, size_t count, int tensor, float scale,
                                    unsigned long long *wrong) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < count; j += stride) {
    float got = grad[j];
    if (!(got == scale * train_value(tensor, j)) && atomicAdd(&wrong[0], 1ULL) == 0) {
      wrong[1] = (unsigned long long)tensor << 40 | (unsigned long long)j;
      wrong[2] = __float_as_uint(got);
    }
  }
}

extern "C" cudaError_t train_check_launch(const float *grad, size_t count, int tensor, float scale,
                                          unsigned long long *wrong, cudaStream_t stream) {
  size_t blocks = (count + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  if (blocks == 0) return cudaSuccess;
  check_kernel<<<(unsigned)blocks, 256, 0, stream>>>(grad, count, tensor, scale, wrong);
  return cudaGetLastError();
}

static __global__ void resolution_kernel(unsigned long long *out) {
  unsigned long long last = global_ns(), best = 0;
  int changes = 0;
  for (int i = 0; i < 1000000 && changes < 2000; i++) {
    unsigned long long now = global_ns();
    if (now != last) {
      if (!best || now - last < best) best = now - last;
      last = now;
      changes++;
    }
  }
  *out = best;
}

extern "C" cudaError_t train_timer_resolution(unsigned long long *ns) {
  unsigned long long *d = NULL;
  cudaError_t e = cudaMalloc((void **)&d, sizeof *d);
  if (e != cudaSuccess) return e;
  resolution_kernel<<<1, 1>>>(d);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(ns, d, sizeof *d, cudaMemcpyDeviceToHost); /* waits for the kernel */
  cudaError_t f = cudaFree(d);
  return e != cudaSuccess ? e : f;
}
