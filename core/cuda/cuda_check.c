#include "cuda_check.h"

#include <stdarg.h>
#include <stdio.h>

cg_status_t cg_cuda_status(cudaError_t err) {
  if (err == cudaSuccess) return CG_SUCCESS;
  return err == cudaErrorMemoryAllocation ? CG_ERR_NO_MEMORY : CG_ERR_BACKEND;
}

cg_status_t cg_fail_cuda(cudaError_t err, const char *call, const char *fmt, ...) {
  char context[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(context, sizeof context, fmt, args);
  va_end(args);
  return cg_fail(cg_cuda_status(err), "%s: %s: %s (%s)", context, call, cudaGetErrorString(err),
                 cudaGetErrorName(err));
}
