/* The NCCL backend's private state: the plan's NCCL communicator and the
 * user's (cg_comm_nccl), whether commgraph owns them, the MPI duplicates that
 * carry control traffic (the cross-rank check; never data), and a small
 * device buffer for barriers (NCCL has none).
 *
 * cg_comm_create makes two NCCL communicators over the same ranks: the
 * plan's, non-blocking, so that a timed-out replay's ncclCommAbort never waits
 * behind a call; and the user's, blocking as ncclCommInitRank makes it, so
 * that a program's own NCCL calls on it never see ncclInProgress. Plans never
 * use the user's, so its calls never interleave with a capture. The first
 * device plan that carries the replay's fingerprint splits a third one off
 * the plan's (`print`), for the fingerprint's gathers alone: they then need
 * no order with the plan's collectives, which start without waiting for
 * them.
 * cg_comm_from_nccl has only the user's communicator, as the user made it:
 * `nccl` and `user_nccl` are then the same. */
#ifndef CG_BACKENDS_NCCL_BACKEND_H
#define CG_BACKENDS_NCCL_BACKEND_H

#include <mpi.h>
#include <nccl.h>
#include <stdatomic.h>

#include "backend.h"
#include "mpi/mpi_backend.h"
#include "nccl_oneshot.h"
#include "nccl_windows.h"

typedef struct cg_nccl_comm {
  cg_mpi_comm_t *control;
  ncclComm_t nccl;      /* the plan's: warm-up, capture, abort */
  ncclComm_t user_nccl; /* cg_comm_nccl's; commgraph makes no call on it but create and destroy */
  /* the fingerprint's, split off `nccl` with one CTA, non-blocking; NULL
   * until a plan needs it (cg_nccl_print_setup); the abort reads it from its
   * own thread */
  _Atomic(ncclComm_t) print;
  /* where NCCL's thread writes the fingerprint's communicator while its split
   * goes on: a split given up at the warm-up's timeout may still complete
   * before the abort, so not on the stack */
  ncclComm_t print_pending;
  /* the split was given up at a timeout: the abort ends print_pending too,
   * which NCCL's thread may have written or still be making */
  atomic_int print_given_up;
  /* CG_NCCL_USER_*: whether cg_comm_nccl handed user_nccl out, or the abort
   * of a timed-out replay took it along because nobody had it */
  atomic_int user_state;
  int owns_nccl;        /* 0 for cg_comm_from_nccl */
  int aborted;          /* ncclCommAbort ran on `nccl` (a replay timed out): nothing left to finalize */
  int device;
  void *barrier_word; /* device memory, one int32 */
  void *stranded;     /* scratch of a warm-up that timed out, still queued on its stream until the abort: freed
                         with the communicator */
  int peer_links;     /* every rank on one node, each GPU reaching the others directly (NVLink or PCIe
                         peer access); the same on every rank */
  cg_nccl_windows_t windows; /* symmetric windows on `nccl` (cg_nccl_arena_create) */
  cg_nccl_oneshot_t oneshot; /* small allreduces as commgraph's own kernel (nccl_oneshot.h) */
} cg_nccl_comm_t;

/* The bucket size the NCCL backend prefers (fusion). Between GPUs with direct
 * links NCCL reaches its full bus bandwidth only for collectives of a hundred
 * MB and more (each extra call of tens of MB costs some 25 us on 4 H200s), so
 * buckets are large. Across nodes, DDP's 25 MB. Measured with
 * tests/perf/cgbench --sweep (docs/results.md). */
#define CG_NCCL_BUCKET_BYTES_PEER ((size_t)256 << 20)
#define CG_NCCL_BUCKET_BYTES_NETWORK ((size_t)25 << 20)

enum { CG_NCCL_USER_UNTOUCHED, CG_NCCL_USER_HANDED_OUT, CG_NCCL_USER_ABORTED };

extern const cg_backend_t cg_nccl_backend;

/* Every rank learns whether all ranks succeeded so far, so a local failure
 * (a bad device ordinal on one rank) fails every rank instead of leaving the
 * others waiting in the next collective. 1 when all are fine; collective
 * over `mpi` (a control duplicate, never the data path). */
int cg_nccl_all_ranks_ok(int ok, MPI_Comm mpi);
/* The same agreements for a warm-up, whose peers may have stopped: each is
 * one allgather on n's control channel that gives up when `wait` says so
 * (cg_mpi_control_allgather_within: CG_ERR_TIMEOUT naming `what`, the round
 * abandoned; NULL: never). A gather hands back every rank's `bytes` in rank
 * order (*all, to free); agree sets *all_ok to whether every rank's ok was
 * set; max takes the largest of each of `count` values over the ranks. */
cg_status_t cg_nccl_gather_within(void **all, const void *mine, size_t bytes, cg_nccl_comm_t *n,
                                  const cg_wait_t *wait, const char *what);
cg_status_t cg_nccl_agree_within(int *all_ok, int ok, cg_nccl_comm_t *n, const cg_wait_t *wait, const char *what);
cg_status_t cg_nccl_max_within(double *slowest, const double *mine, int count, cg_nccl_comm_t *n,
                               const cg_wait_t *wait, const char *what);

/* cg_comm_create's NCCL path: opts already checked; collective over `mpi`;
 * each wait for the other ranks (NCCL's init among them) at most timeout_s
 * (0: none). */
cg_status_t cg_nccl_comm_create(cg_comm_t **out, MPI_Comm mpi, int device, int thread_level, double timeout_s);
/* NCCL's init of a created communicator's pair on n->device (nccl_init.c):
 * the plan's communicator (non-blocking) into n->nccl and the user's
 * (blocking) into n->user_nccl, each on a thread of its own, both at once,
 * waited for at most timeout_s (0: for ever) while the rank answers roll
 * calls on `mpi`. Returns ncclSuccess; NCCL's error, *why naming the
 * communicator (one whose init failed after NCCL handed it out is left in n
 * for the caller to abort); or ncclInProgress when the time ran out:
 * CG_ERR_TIMEOUT is then reported (a roll call), an init still running is
 * left to its thread and a finished one aborted on a thread of its own
 * (n holds neither). */
ncclResult_t cg_nccl_init_pair(cg_nccl_comm_t *n, int size, int rank, const ncclUniqueId ids[2], MPI_Comm mpi,
                               double timeout_s, char *why, size_t why_size);
/* The NCCL state of a communicator of this backend; NULL for other backends. */
cg_nccl_comm_t *cg_nccl_comm_of(const cg_comm_t *comm);
/* The control part of an NCCL communicator; NULL for other backends. */
const cg_mpi_comm_t *cg_nccl_comm_control(const cg_comm_t *comm);

/* Steps (nccl_steps.c), referenced by the backend table. */
cg_status_t cg_nccl_warmup(void *comm_impl, const cg_plan_t *plan, uint32_t comm_index, void *stream,
                           const cg_wait_t *wait);
cg_status_t cg_nccl_group_start(void *comm_impl);
cg_status_t cg_nccl_group_end(void *comm_impl);
cg_status_t cg_nccl_step_enqueue(void *comm_impl, const cg_step_t *step, void *stream);
/* The fingerprint's communicator, split off the plan's the first time a
 * plan needs it: collective over the communicator (a compile's warm-up). */
cg_status_t cg_nccl_print_setup(void *comm_impl, const cg_wait_t *wait);
/* ncclAllGather of `bytes` bytes on the fingerprint's communicator (the
 * device plan's fingerprint). */
cg_status_t cg_nccl_allgather_enqueue(void *comm_impl, const void *mine, void *all, size_t bytes, void *stream,
                                      const cg_wait_t *wait);
const char *cg_nccl_step_call(const cg_step_t *step);
/* Whether commgraph's one-shot or two-shot kernel runs the step (the
 * backend's step_on_own_path). */
int cg_nccl_step_on_own_kernel(const cg_step_t *step);

#endif
