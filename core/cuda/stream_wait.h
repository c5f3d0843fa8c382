/* Waiting for a stream under a cg_wait_t (wait.h): polled, so the wait can
 * end where cudaStreamSynchronize would block for ever on work that waits
 * for a rank that never comes. */
#ifndef CG_CORE_STREAM_WAIT_H
#define CG_CORE_STREAM_WAIT_H

#include <cuda_runtime_api.h>

#include "wait.h"

/* Waits until `stream` has done all it was given, or until `wait` gives up:
 * then *gave_up is 1 and cudaErrorNotReady comes back, the work still
 * queued. Otherwise the stream's own result (cudaSuccess, or the error of
 * its work). With a NULL wait, cudaStreamSynchronize. */
cudaError_t cg_cuda_stream_wait(int *gave_up, cudaStream_t stream, const cg_wait_t *wait);
/* The same under a deadline `timeout_s` from now (0 or less: none), no roll
 * calls answered: cudaErrorNotReady once it passed with work still queued. */
cudaError_t cg_cuda_stream_wait_for(cudaStream_t stream, double timeout_s);

#endif
