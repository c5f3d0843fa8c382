/* bench_decode's layer kernel: writes the layer's partial activations from
 * the reduced ones before it, then spins until the layer's time has passed.
 * See decode_kernels.h. */
#include "decode_kernels.h"

static __device__ __forceinline__ unsigned long long global_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __global__ void __launch_bounds__(DECODE_THREADS)
    layer_kernel(const uint16_t *in, uint16_t *out, size_t count, int rank, int layer, unsigned long long ns) {
  unsigned long long start = threadIdx.x == 0 ? global_ns() : 0;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < count; j += stride)
    out[j] = decode_bf16_of(decode_layer_value(decode_int_of(in[j]), rank, layer, j));
  if (threadIdx.x == 0)
    while (global_ns() - start < ns) {
    }
  __syncthreads();
}

extern "C" cudaError_t decode_layer_launch(const uint16_t *in, uint16_t *out, size_t count, int rank, int layer,
                                           unsigned long long ns, cudaStream_t stream) {
  layer_kernel<<<DECODE_BLOCKS, DECODE_THREADS, 0, stream>>>(in, out, count, rank, layer, ns);
  return cudaGetLastError();
}
