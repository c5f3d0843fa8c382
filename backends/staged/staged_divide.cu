/* Device-side division for averages over MPI on device buffers
 * (staged_divide.h). The arithmetic types match cg_host_divide, so both paths
 * give the same bits. */
#include <stdint.h>

#include "staged_divide.h"

template <typename T, typename As>
__global__ void cg_divide_kernel(T *x, size_t n, int divisor) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = (T)((As)x[i] / (As)divisor);
}

template <typename T, typename As>
static cudaError_t launch(void *buf, size_t n, int divisor, cudaStream_t stream) {
  const unsigned threads = 256;
  size_t blocks = (n + threads - 1) / threads;
  if (blocks > 1024) blocks = 1024; /* grid-stride beyond that */
  cg_divide_kernel<T, As><<<(unsigned)blocks, threads, 0, stream>>>((T *)buf, n, divisor);
  return cudaGetLastError();
}

extern "C" cudaError_t cg_staged_divide_launch(void *buf, size_t n, cg_dtype_t dtype, int divisor,
                                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case CG_INT8: return launch<int8_t, int>(buf, n, divisor, stream);
    case CG_UINT8: return launch<uint8_t, int>(buf, n, divisor, stream);
    case CG_INT32: return launch<int32_t, int64_t>(buf, n, divisor, stream);
    case CG_UINT32: return launch<uint32_t, uint64_t>(buf, n, divisor, stream);
    case CG_INT64: return launch<int64_t, int64_t>(buf, n, divisor, stream);
    case CG_UINT64: return launch<uint64_t, uint64_t>(buf, n, divisor, stream);
    case CG_FLOAT32: return launch<float, float>(buf, n, divisor, stream);
    case CG_FLOAT64: return launch<double, double>(buf, n, divisor, stream);
    default: return cudaErrorInvalidValue;
  }
}
