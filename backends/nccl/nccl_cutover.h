/* Where NCCL's symmetric kernels stop paying for an allreduce: measured on
 * the arena itself when cg_nccl_arena_create makes it. Inside a graph they
 * cut a small allreduce's time by a third and lose from some hundred KB on
 * (on 4 H100s, NCCL 2.28: 1 KB 9.0 against 14.2 us, 256 KB 18.0 against
 * 15.9 us), and the size differs per dtype, rank count and machine. */
#ifndef CG_BACKENDS_NCCL_CUTOVER_H
#define CG_BACKENDS_NCCL_CUTOVER_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "error.h"
#include "nccl_backend.h"

/* The measured sizes: 1 KB, 2 KB, ... 8 MB (nccl_windows.h). */
#define CG_CUTOVER_MIN_BYTES CG_NCCL_MEASURED_MIN_BYTES
#define CG_CUTOVER_MAX_SIZES CG_NCCL_MEASURED_SIZES

/* The cut-over from the times of `sizes` measured sizes (us[i][0]: the
 * symmetric kernels at CG_CUTOVER_MIN_BYTES << i, us[i][1]: the plain ones):
 * the size before the first at which the symmetric kernels lose there and at
 * the next measured size too (one loss alone is taken for noise), 0 when
 * that is the first size; SIZE_MAX when they never lose twice in a row, or
 * nothing was measured (an arena under 1 KB): beyond the measured sizes the
 * symmetric kernels keep what they won. */
size_t cg_nccl_cutover_pick(const double (*us)[2], int sizes);
/* The same with the first path handicapped: it loses a size unless
 * us[i][0] * handicap < us[i][1] (the one-shot kernel's 1.05: a near tie
 * goes to NCCL). cg_nccl_cutover_pick is handicap 1. */
size_t cg_nccl_cutover_pick_handicapped(const double (*us)[2], int sizes, double handicap);
/* ratio[i] = us[i][0] / us[i][1] for the `sizes` measured sizes (0 where
 * us[i][1] is not positive): what windows and the one-shot path keep. */
void cg_nccl_cutover_ratios(double *ratio, const double (*us)[2], int sizes);

/* One way of making a call, for timing: enqueue(ctx, stream) enqueues it
 * once (and says why not). */
typedef struct cg_nccl_call {
  cg_status_t (*enqueue)(const void *ctx, cudaStream_t stream);
  const void *ctx;
} cg_nccl_call_t;

/* An in-place sum ncclAllReduce on n's plan communicator; `what` words a
 * failure; a non-blocking communicator's call in progress is waited for under
 * `wait` (NULL: for ever; given up: CG_ERR_TIMEOUT). */
typedef struct cg_nccl_timed_allreduce {
  cg_nccl_comm_t *n;
  void *buf;
  size_t count;
  ncclDataType_t type;
  const char *what;
  const cg_wait_t *wait;
} cg_nccl_timed_allreduce_t;
cg_status_t cg_nccl_enqueue_allreduce(const void *ctx, cudaStream_t stream);

/* The time of one call each way (us[0], us[1]): each made once eagerly, then
 * captured 8 times in a graph; every rank agrees that all captured before any
 * launches (a rank that failed left eager calls the others wait in: all
 * fail, *abort_comm set); then the graphs launched in turn, 5 rounds, the
 * median. Collective over n's ranks; `what` words failures. The agreement and
 * every wait for the device poll under `wait` (NULL: no limit): a peer that
 * stopped makes it CG_ERR_TIMEOUT with *abort_comm set, and the caller's
 * timeout aborts the communicator. */
cg_status_t cg_nccl_time_two_ways(double us[2], int *abort_comm, cg_nccl_comm_t *n, cudaStream_t stream,
                                  cudaEvent_t start, cudaEvent_t stop, const cg_nccl_call_t call[2],
                                  const cg_wait_t *wait, const char *what);

/* Times captured in-place sum allreduces of 1 KB, 2 KB, ... up to `bytes`
 * (at most 8 MB) of float32, float16 and bfloat16 on `window` (in the
 * symmetric window) and on `plain` (the same memory through the plain view),
 * interleaved, takes the slowest rank's time of each and sets
 * symmetric_max[d] by cg_nccl_cutover_pick and ratio[d][i] to the symmetric
 * time over the plain one at each measured size (0 elsewhere): the same on
 * every rank. The
 * memory must hold zeros (sums of zeros leave it so). Collective over n's
 * ranks: NCCL on n->nccl, agreement over its control communicator after
 * every size, so a failure on one rank stops every rank there. *abort_comm
 * is set when NCCL work may be left waiting for a peer (a failure after the
 * first NCCL call): the caller then aborts the communicator, on every rank
 * alike. Every agreement and wait for the device polls under `wait` (NULL:
 * no limit) and gives up with CG_ERR_TIMEOUT. */
cg_status_t cg_nccl_cutover_measure(size_t symmetric_max[CG_NCCL_SYMMETRIC_DTYPES],
                                    double ratio[CG_NCCL_SYMMETRIC_DTYPES][CG_NCCL_MEASURED_SIZES], int *abort_comm,
                                    cg_nccl_comm_t *n, void *window, void *plain, size_t bytes,
                                    const cg_wait_t *wait, const char *where);

#endif
