/* The division that turns a sum into an average, on device memory: MPI has
 * no average, so a step whose MPI call runs on device buffers
 * (CG_STAGING_DIRECT) sums and then divides here, inside the plan's graph. */
#ifndef CG_BACKENDS_STAGED_DIVIDE_H
#define CG_BACKENDS_STAGED_DIVIDE_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "commgraph/types.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Divides `n` elements of `dtype` at `buf` by `divisor` as cg_host_divide
 * does (integers truncate); float16 and bfloat16 are refused with
 * cudaErrorInvalidValue (their sums never run on device memory). */
cudaError_t cg_staged_divide_launch(void *buf, size_t n, cg_dtype_t dtype, int divisor, cudaStream_t stream);
#ifdef __cplusplus
}
#endif

#endif
