/* Small and mid-sized allreduces (sum, avg, min, max, prod of float32,
 * float16, bfloat16) as kernels of commgraph's own instead of NCCL's, on
 * ranks with peer links:
 * - the one-shot kernel (nccl_oneshot_kernel.cu), up to 1 MB: each rank
 *   writes its input into every peer's memory over NVLink and reduces what
 *   its peers wrote into its own, with no flag or barrier beside the data.
 *   Inside a CUDA graph NCCL's ring and tree kernels pay some 10 us for 1 KB
 *   on 4 H100s; writing a few kilobytes to three peers takes a few.
 * - the two-shot kernel (nccl_twoshot_kernel.cu), above the one-shot's size
 *   and up to 8 MB: a reduce-scatter and an allgather in one kernel, each one
 *   crossing of NVLink, sending 2 (n - 1) / n of the message as NCCL's ring
 *   does where the one-shot sends (n - 1) of it.
 *
 * Set up once per communicator, on the first compile whose plan has an
 * allreduce they could take (the warm-up, collective): every rank allocates a
 * staging buffer (2 MB per rank of the communicator for the one-shot kernel,
 * nccl_oneshot_kernel.h, and about 32 MB for the two-shot one unless
 * CG_TWOSHOT_MAX_BYTES is 0, nccl_twoshot_kernel.h), shares it with cudaIpc
 * handles over the control communicator and maps its peers'. Then, unless
 * CG_ONESHOT_MAX_BYTES gives it, the one-shot cut-over is measured: captured
 * calls of 1 KB, 2 KB, ... 1 MB of float32 against captured ncclAllReduce on
 * plain memory, the slowest rank's times, the same two-losses rule as the
 * symmetric cut-over with the kernel handicapped 5% (nccl_cutover.h); and,
 * unless CG_TWOSHOT_MAX_BYTES gives it, the two-shot's the same way over the
 * sizes above the one-shot's, up to 8 MB, from the first at which it wins.
 * Every rank takes the paths for the same allreduces or none does: ranks
 * without peer links, more than CG_ONESHOT_MAX_RANKS ranks, or a rank that
 * cannot map its peers (the other GPUs not visible to it) leave them off
 * everywhere, and NCCL runs them as before. Two plans on one communicator
 * must not run their collectives at the same time (as with NCCL's own
 * ordering): their calls share the epochs. The ranks must call them with the
 * same counts (the cross-rank check sees to it): where they do not, chunks
 * one rank sent and no rank read stay in the staging without the sentinel,
 * and a later larger call reads them as arrived, stale, instead of waiting. */
#ifndef CG_BACKENDS_NCCL_ONESHOT_H
#define CG_BACKENDS_NCCL_ONESHOT_H

#include <stddef.h>

#include "commgraph/types.h"
#include "error.h"
#include "wait.h"
#include "nccl_oneshot_kernel.h"
#include "nccl_twoshot_kernel.h"
#include "nccl_windows.h"

typedef enum cg_oneshot_state {
  CG_ONESHOT_UNTRIED, /* no plan has needed it yet */
  CG_ONESHOT_OFF,     /* tried: off on every rank (said on stderr where a rank could not set it up) */
  CG_ONESHOT_ON,
} cg_oneshot_state_t;

typedef struct cg_nccl_oneshot {
  cg_oneshot_state_t state;
  size_t max_bytes;  /* allreduces up to this many bytes per rank take the kernel; 0: none (agreed) */
  /* the kernel's time over ncclAllReduce's at each measured size (float32,
   * the slowest rank's; nccl_windows.h's sizes); 0: not measured */
  double ratio[CG_NCCL_MEASURED_SIZES];
  /* the two-shot kernel: allreduces above the one-shot's size (those it does
   * not take) up to twoshot_max_bytes, where measured only the sizes with a
   * twoshot_ratio (its time over ncclAllReduce's, as ratio); 0: none */
  size_t twoshot_max_bytes;
  int twoshot_forced; /* CG_TWOSHOT_MAX_BYTES gave the size: nothing measured */
  int twoshot_area;   /* the staging holds the two-shot kernel's area (CG_TWOSHOT_MAX_BYTES not 0) */
  double twoshot_ratio[CG_NCCL_MEASURED_SIZES];
  /* at each measured size that a kernel takes (measured, not given): that
   * kernel's time and ncclAllReduce's (us, the slowest rank's); 0 elsewhere.
   * What cg_plan_tune's cost model takes off the line it fits
   * (cg_nccl_oneshot_path_us). */
  double kernel_us[CG_NCCL_MEASURED_SIZES], nccl_us[CG_NCCL_MEASURED_SIZES];
  char *staging;     /* this rank's (device memory, cudaIpc-exported): the one-shot's, then the two-shot's if any */
  char *peers[CG_ONESHOT_MAX_RANKS]; /* every rank's staging as this process maps it; peers[rank] == staging */
  unsigned *epochs;  /* device memory: CG_ONESHOT_MAX_BLOCKS counters of the calls finished */
  unsigned *aborted; /* mapped host memory the kernel polls: set before ncclCommAbort */
  unsigned *aborted_dev;
  int rank, ranks;
} cg_nccl_oneshot_t;

struct cg_nccl_comm;
struct cg_plan;
struct cg_step;

/* The warm-up's part (nccl_steps.c): sets the path up and measures its
 * cut-over if the plan has an allreduce it may take and nobody tried yet.
 * Collective over the communicator's ranks; every agreement and every wait
 * for the device polls under `wait` (the warm-up's timeout; NULL: none) and
 * gives up with CG_ERR_TIMEOUT when a peer stopped. Sets *abort_comm when a
 * kernel or NCCL call may be left waiting for a peer that stopped. */
cg_status_t cg_nccl_oneshot_prepare(struct cg_nccl_comm *n, const struct cg_plan *plan, uint32_t ci, int *abort_comm,
                                    const cg_wait_t *wait, const char *where);
/* Whether the step (an allreduce) goes to the kernel: below its cut-over,
 * and, where its buffers lie in symmetric windows below their cut-over
 * (symmetric_ratio > 0, nccl_windows.h), only where the kernel measured
 * faster against NCCL's plain kernels than NCCL's symmetric ones did (its
 * ratio under theirs; without both measurements the
 * symmetric kernels keep it). */
int cg_nccl_oneshot_takes(const struct cg_nccl_comm *n, const struct cg_step *s, int in_window,
                          double symmetric_ratio);
/* Whether the step (an allreduce the one-shot kernel does not take) goes to
 * the two-shot kernel: within its cut-over, at a size it measured faster (or
 * any, where the size was given), and in symmetric windows below their
 * cut-over only where its ratio is under theirs, as above. */
int cg_nccl_twoshot_takes(const struct cg_nccl_comm *n, const struct cg_step *s, int in_window,
                          double symmetric_ratio);
/* 1 where an allreduce of `bytes` per rank of this kind, dtype and op,
 * outside symmetric windows, takes one of the kernels at a measured size:
 * *kernel_us and *nccl_us its measured times at that size (the next measured
 * size up, as the cut-overs count). 0 otherwise, and where the size was given
 * (nothing measured). The backend's collective_path_us. */
int cg_nccl_oneshot_path_us(double *kernel_us, double *nccl_us, const struct cg_nccl_comm *n, cg_node_kind_t kind,
                            cg_dtype_t dtype, cg_redop_t op, size_t bytes);
/* Enqueues the step on `stream` (captured into the plan's graph), on the
 * one-shot kernel or the two-shot one. */
cg_status_t cg_nccl_oneshot_enqueue(struct cg_nccl_comm *n, const struct cg_step *s, void *stream);
cg_status_t cg_nccl_twoshot_enqueue(struct cg_nccl_comm *n, const struct cg_step *s, void *stream);
/* Makes every kernel waiting for a peer give up (before ncclCommAbort). */
void cg_nccl_oneshot_abort(cg_nccl_oneshot_t *o);
/* Unmaps the peers once this rank's kernels are done, and frees (the
 * communicator goes). After an abort (`aborted`) nothing is freed: a peer's
 * kernel may still write into this rank's staging before it sees the abort.
 * Ranks free without waiting for each other, so a peer may still map the
 * staging freed here; its kernels are done by then (the communicator's
 * finalize ran first). */
void cg_nccl_oneshot_free(cg_nccl_oneshot_t *o, int aborted);

#endif
