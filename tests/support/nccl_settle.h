/* Settling a call on a non-blocking NCCL communicator, for the test and
 * benchmark programs' own NCCL calls (the library settles its own in
 * backends/nccl). NCCL_COMM_BLOCKING=0 makes every communicator non-blocking,
 * the programs' too: a call may then return ncclInProgress, and NCCL asks the
 * caller to poll ncclCommGetAsyncError until it has finished. Header-only:
 * the GPU suites and the benchmarks share no support library. */
#ifndef CG_TESTS_NCCL_SETTLE_H
#define CG_TESTS_NCCL_SETTLE_H

#include <nccl.h>
#include <sched.h>

/* How `result`, a call on `comm`, ended; any result but ncclInProgress as it is. */
static inline ncclResult_t cg_test_nccl_settle(ncclComm_t comm, ncclResult_t result) {
  while (result == ncclInProgress) {
    ncclResult_t state = ncclSuccess, asked = ncclCommGetAsyncError(comm, &state);
    if (asked != ncclSuccess) return asked;
    result = state;
    if (result == ncclInProgress) sched_yield();
  }
  return result;
}

#endif
