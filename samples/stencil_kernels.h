/* The Jacobi update of samples/stencil_halo.c, shared by its three users: the
 * host function of the host path, the single-process reference, and the CUDA
 * kernel of the GPU path (stencil_kernels.cu). They all compute a point with
 * stencil_point below, so the distributed result can be compared with the
 * reference bit for bit.
 *
 * Layout: a block of rows of `nx` floats, row after row. An update of `rows`
 * rows reads the row before the first and the row after the last too, and
 * writes columns 1 .. nx-2 of each row (columns 0 and nx-1 are fixed
 * boundary values). */
#ifndef STENCIL_KERNELS_H
#define STENCIL_KERNELS_H

#include <stddef.h>

#ifdef __CUDACC__
#define STENCIL_HD __host__ __device__
#else
#define STENCIL_HD
#endif

/* One point: the mean of the four neighbours, always summed in this order.
 * The multiply comes last, so no compiler can contract it into a fused
 * multiply-add, and multiplying by 0.25 is exact: host and device round the
 * same three additions and get the same bits. */
static inline STENCIL_HD float stencil_point(float up, float down, float left, float right) {
  return 0.25f * (((up + down) + left) + right);
}

#if defined(__CUDACC__) || defined(STENCIL_HAVE_KERNELS)
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues the update of `rows` rows on `stream`: dst row y (0 <= y < rows),
 * columns 1 .. nx-2, from src rows y-1, y, y+1. `src` and `dst` point at the
 * first updated row; src[-nx .. -1] must be readable. Returns the launch
 * error. Works inside a stream capture. */
cudaError_t stencil_update_launch(const float *src, float *dst, size_t rows, size_t nx, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif

#endif
