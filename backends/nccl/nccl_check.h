/* The one place that turns an NCCL result into the library's error detail:
 * the caller's context (device, communicator, what it was doing), the NCCL
 * call, NCCL's text and name for the result, and NCCL's last error message
 * when it has one. Every failed result is CG_ERR_BACKEND (cg_nccl_status), as
 * the backend has always reported them; ncclInProgress is settled first
 * (cg_nccl_settle) and is a failure only if it gets here. */
#ifndef CG_BACKENDS_NCCL_CHECK_H
#define CG_BACKENDS_NCCL_CHECK_H

#include <nccl.h>

#include "error.h"
#include "wait.h"

/* cg_fail with "<context>: <call>: <text> (<ncclResult name>): <NCCL's last
 * error>", the context formatted from `fmt`; the last part only when
 * ncclGetLastError(comm) has text. `comm` may be NULL (no communicator yet). */
cg_status_t cg_fail_nccl(ncclResult_t result, ncclComm_t comm, const char *call, const char *fmt, ...)
    CG_PRINTF_LIKE(4, 5);

/* The status an NCCL result maps to. */
cg_status_t cg_nccl_status(ncclResult_t result);

/* A non-blocking communicator's call may return ncclInProgress: waits until
 * the communicator has finished it (ncclCommGetAsyncError) and returns how it
 * ended; any other result as it is. Every NCCL call of the backend goes
 * through it, so the backend is right whether NCCL_COMM_BLOCKING (which
 * overrides config.blocking) is unset, 0 or 1, and whether a wrapped
 * communicator is blocking or not. */
ncclResult_t cg_nccl_settle(ncclComm_t comm, ncclResult_t result);

/* cg_nccl_settle under a cg_wait_t (wait.h), for calls that wait for other
 * ranks (a compile's warm-up, a split): ncclInProgress once `wait` gives up,
 * the call still under way in NCCL's thread (abort the communicator). */
ncclResult_t cg_nccl_settle_within(ncclComm_t comm, ncclResult_t result, const cg_wait_t *wait);

#endif
