/* The one place that turns a CUDA runtime error into the library's error
 * detail: the caller's context (node, rank, step, what it was doing), the
 * CUDA call, and CUDA's own name and text for the error. Out of memory
 * becomes CG_ERR_NO_MEMORY, every other error CG_ERR_BACKEND. */
#ifndef CG_CORE_CUDA_CHECK_H
#define CG_CORE_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "error.h"

/* cg_fail with "<context>: <call>: <text> (<cudaErrorName>)", the context
 * formatted from `fmt`. */
cg_status_t cg_fail_cuda(cudaError_t err, const char *call, const char *fmt, ...) CG_PRINTF_LIKE(3, 4);

/* The status a CUDA error maps to. */
cg_status_t cg_cuda_status(cudaError_t err);

#endif
