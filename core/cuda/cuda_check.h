/* The one place that turns a CUDA runtime error into the library's error
 * detail: the caller's context (node, rank, step, what it was doing), the
 * CUDA call, and CUDA's own name and text for the error. Out of memory
 * becomes CG_ERR_NO_MEMORY, every other error CG_ERR_BACKEND. */
#ifndef CG_CORE_CUDA_CHECK_H
#define CG_CORE_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "error.h"

/* cg_fail with "<context>: <call>: <text> (<cudaErrorName>)", the context
 * formatted from `fmt`. */
cg_status_t cg_fail_cuda(cudaError_t err, const char *call, const char *fmt, ...) CG_PRINTF_LIKE(3, 4);

/* cg_fail_cuda's detail with `status` instead of cg_cuda_status(err), for a
 * site whose status deliberately differs (a missing GPU is CG_ERR_UNSUPPORTED,
 * a user's object CUDA rejects CG_ERR_INVALID_ARGUMENT, ...). */
cg_status_t cg_fail_cuda_as(cg_status_t status, cudaError_t err, const char *call, const char *fmt, ...)
    CG_PRINTF_LIKE(4, 5);

/* The status a CUDA error maps to. */
cg_status_t cg_cuda_status(cudaError_t err);

/* "<text> (<cudaErrorName>)" in `buf` (cut to `size`); returns buf. For text
 * that is not an error detail, such as a description printed for the user. */
const char *cg_cuda_error_text(cudaError_t err, char *buf, size_t size);

#endif
