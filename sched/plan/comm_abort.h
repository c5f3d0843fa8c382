/* Aborting communicators after a timeout, or a failure that leaves work
 * waiting for peers that will not come (cuda/comm_abort.c; CUDA builds): the
 * backends' abort hooks (backend.h), each communicator's once. The first to
 * mark a communicator (cg_comm_mark_aborted, with `status` and `report` for
 * later plans) aborts it: inline where the hook never blocks, else on a
 * thread of its own (NCCL's abort can take a second or more: its socket
 * transport's teardown, a blocking communicator's spinning kernels), so that
 * the caller reports its timeout on time. That thread holds no reference
 * (cg_comm_abort_begin): the caller's keeps the communicator alive until the
 * call returns, and a last release while the abort runs leaves the rest of
 * the destroy to the abort's end (comm_internal.h). Used for a timed-out
 * replay's plan, a compile's warm-up, an NCCL arena's set-up. */
#ifndef CG_SCHED_COMM_ABORT_H
#define CG_SCHED_COMM_ABORT_H

#include <stdint.h>

#include "commgraph/comm.h"
#include "commgraph/status.h"

/* The communicators comm_at(from, 0 .. n - 1); the thread works on `device`. */
void cg_comm_abort_each(cg_comm_t *(*comm_at)(const void *, uint32_t), const void *from, uint32_t n, int device,
                        cg_status_t status, const char *report);
/* The same for an array of communicators. */
void cg_comm_abort_list(cg_comm_t *const *comms, uint32_t n, int device, cg_status_t status, const char *report);

#endif
