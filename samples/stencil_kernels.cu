/* The GPU path's Jacobi update (samples/stencil_halo.c): one thread per point,
 * through stencil_point, the same function the host path and the reference
 * use. */
#include "stencil_kernels.h"

enum { BLOCK_X = 32, BLOCK_Y = 8 };

static __global__ void stencil_update_kernel(const float *src, float *dst, size_t rows, size_t nx) {
  size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x + 1; /* columns 1 .. nx-2 */
  size_t y = (size_t)blockIdx.y * blockDim.y + threadIdx.y;
  if (y >= rows || x + 1 >= nx) return;
  const float *mid = src + y * nx, *up = mid - nx, *down = mid + nx;
  dst[y * nx + x] = stencil_point(up[x], down[x], mid[x - 1], mid[x + 1]);
}

extern "C" cudaError_t stencil_update_launch(const float *src, float *dst, size_t rows, size_t nx,
                                             cudaStream_t stream) {
  if (rows == 0 || nx < 3) return cudaSuccess;
  if ((rows + BLOCK_Y - 1) / BLOCK_Y > 65535 || (nx - 2 + BLOCK_X - 1) / BLOCK_X > 0x7fffffff)
    return cudaErrorInvalidValue; /* more blocks than a grid holds */
  dim3 block(BLOCK_X, BLOCK_Y);
  dim3 grid((unsigned)((nx - 2 + BLOCK_X - 1) / BLOCK_X), (unsigned)((rows + BLOCK_Y - 1) / BLOCK_Y));
  stencil_update_kernel<<<grid, block, 0, stream>>>(src, dst, rows, nx);
  return cudaGetLastError();
}
