#include "cuda_check.h"

#include <stdarg.h>
#include <stdio.h>

cg_status_t cg_cuda_status(cudaError_t err) {
  if (err == cudaSuccess) return CG_SUCCESS;
  return err == cudaErrorMemoryAllocation ? CG_ERR_NO_MEMORY : CG_ERR_BACKEND;
}

const char *cg_cuda_error_text(cudaError_t err, char *buf, size_t size) {
  if (buf && size) snprintf(buf, size, "%s (%s)", cudaGetErrorString(err), cudaGetErrorName(err));
  return buf;
}

static cg_status_t fail_cuda(cg_status_t status, cudaError_t err, const char *call, const char *fmt, va_list args)
    CG_PRINTF_LIKE(4, 0);
static cg_status_t fail_cuda(cg_status_t status, cudaError_t err, const char *call, const char *fmt, va_list args) {
  char context[2048], text[512];
  vsnprintf(context, sizeof context, fmt, args);
  return cg_fail(status, "%s: %s: %s", context, call, cg_cuda_error_text(err, text, sizeof text));
}

cg_status_t cg_fail_cuda(cudaError_t err, const char *call, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  cg_status_t st = fail_cuda(cg_cuda_status(err), err, call, fmt, args);
  va_end(args);
  return st;
}

cg_status_t cg_fail_cuda_as(cg_status_t status, cudaError_t err, const char *call, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  cg_status_t st = fail_cuda(status, err, call, fmt, args);
  va_end(args);
  return st;
}
