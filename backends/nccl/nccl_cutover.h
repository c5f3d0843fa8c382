/* Where NCCL's symmetric kernels stop paying for an allreduce: measured on
 * the arena itself when cg_nccl_arena_create makes it. Inside a graph they
 * cut a small allreduce's time by a third and lose from some hundred KB on
 * (on 4 H100s, NCCL 2.28: 1 KB 7.7 against 12.5 us, 256 KB 16.7 against
 * 14.5 us), and the size differs per dtype, rank count and machine. */
#ifndef CG_BACKENDS_NCCL_CUTOVER_H
#define CG_BACKENDS_NCCL_CUTOVER_H

#include <stddef.h>

#include "error.h"
#include "nccl_backend.h"

/* Times captured in-place sum allreduces of 1 KB, 2 KB, ... up to `bytes`
 * (at most 8 MB) of float32, float16 and bfloat16 on `window` (in the
 * symmetric window) and on `plain` (the same memory through the plain view),
 * interleaved, the slowest rank's time of each, and sets symmetric_max[d] to
 * the largest size up to which the symmetric kernels won at every size (0
 * when they lost at 1 KB). The same result on every rank. The memory must
 * hold zeros (sums of zeros leave it so). Collective over n's ranks: NCCL on
 * n->nccl, the agreement over its control communicator. */
cg_status_t cg_nccl_cutover_measure(size_t symmetric_max[CG_NCCL_SYMMETRIC_DTYPES], cg_nccl_comm_t *n, void *window,
                                    void *plain, size_t bytes, const char *where);

#endif
