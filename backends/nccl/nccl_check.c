#include "nccl_check.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

cg_status_t cg_nccl_status(ncclResult_t result) { return result == ncclSuccess ? CG_SUCCESS : CG_ERR_BACKEND; }

ncclResult_t cg_nccl_settle_within(ncclComm_t comm, ncclResult_t r, const cg_wait_t *wait) {
  while (r == ncclInProgress && comm) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t asked = ncclCommGetAsyncError(comm, &state);
    if (asked != ncclSuccess) return asked;
    r = state;
    if (r != ncclInProgress) break;
    if (!cg_wait_go_on(wait)) return ncclInProgress;
    sched_yield();
  }
  return r;
}

ncclResult_t cg_nccl_settle(ncclComm_t comm, ncclResult_t r) { return cg_nccl_settle_within(comm, r, NULL); }

static const char *result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "an unknown ncclResult_t";
  }
}

cg_status_t cg_fail_nccl(ncclResult_t result, ncclComm_t comm, const char *call, const char *fmt, ...) {
  char context[2048], last[512] = "";
  va_list args;
  va_start(args, fmt);
  vsnprintf(context, sizeof context, fmt, args);
  va_end(args);
  const char *text = ncclGetLastError(comm);
  if (text) snprintf(last, sizeof last, "%s", text);
  size_t n = strlen(last);
  while (n && (last[n - 1] == '\n' || last[n - 1] == ' ')) last[--n] = '\0';
  return cg_fail(cg_nccl_status(result), "%s: %s: %s (%s)%s%s", context, call, ncclGetErrorString(result),
                 result_name(result), n ? ": " : "", last);
}
