/* The interface between the scheduler and a backend: a versioned table of
 * function pointers. A communicator points at its backend's table; the
 * scheduler calls only through it and never names a communication library.
 *
 * Every entry may be NULL where the backend has no such ability (an offline
 * communicator has no control channel and runs nothing); the scheduler reports
 * CG_ERR_UNSUPPORTED then. A backend built against another interface version is
 * refused by cg_compile, naming the node. */
#ifndef CG_SCHED_BACKEND_H
#define CG_SCHED_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "plan_internal.h"
#include "wait.h"

#define CG_BACKEND_INTERFACE_VERSION 10u

/* Where a backend's steps may read and write. */
#define CG_BACKEND_HOST_MEMORY 1u
#define CG_BACKEND_DEVICE_MEMORY 2u

struct cg_backend {
  uint32_t interface_version; /* CG_BACKEND_INTERFACE_VERSION */
  const char *name;
  uint32_t memory;      /* CG_BACKEND_*_MEMORY bits */
  uint32_t node_kinds;  /* bit (1u << kind) per cg_node_kind_t it runs */
  uint32_t dtypes;      /* bit (1u << dtype) per cg_dtype_t it runs */

  /* Control channel for the cross-rank check: a nonblocking allgather of
   * `bytes` from every rank of the communicator into `all` (size * bytes, in
   * rank order). Requests on different communicators may be outstanding
   * together and completed in any order. control_test releases the request
   * once *done is 1. */
  cg_status_t (*control_allgather_start)(void **request, void *comm_impl, const void *mine, void *all,
                                         size_t bytes);
  cg_status_t (*control_test)(int *done, void *comm_impl, void *request);
  /* A round that does not complete in time. While a rank waits for rounds
   * it calls control_answer on their communicators, so that ranks whose wait
   * timed out learn where it is (waiting_in: what it waits in). After its own
   * timeout (of timeout_s), control_roll_call asks every rank of the
   * communicator, waits a short grace time for the answers and writes a
   * sentence naming the ranks that did not answer and what the others wait
   * in; control_abandon then keeps the round (request, may be NULL) for good,
   * since it cannot be cancelled, and, unless `why` is NULL, fails every later
   * round on the communicator at once with `why`. */
  void (*control_answer)(void *comm_impl, const char *waiting_in);
  void (*control_roll_call)(char *report, size_t size, void *comm_impl, const char *waiting_in, double timeout_s);
  /* Whether control_answer and control_roll_call may run on a thread of the
   * library's beside the program's own calls (the device watchdog's monitor
   * thread; MPI: only under MPI_THREAD_MULTIPLE, and not once MPI is
   * finalized). NULL or 0: only on the thread that waits in the plan. */
  int (*control_any_thread)(void *comm_impl);
  void (*control_abandon)(void *comm_impl, void *request, const char *why);
  /* The same allgather on the channel host plan steps use, so it is ordered
   * with the plan's collectives on every rank (the replay's fingerprint);
   * completed with control_test, kept with control_abandon. */
  cg_status_t (*replay_allgather_start)(void **request, void *comm_impl, const void *mine, void *all,
                                        size_t bytes);

  /* Host execution. host_check_thread runs when a plan starts, on the calling
   * thread. host_step_prepare runs at compile time and may allocate what the
   * step needs on every run (scratch buffers, requests); host_step_release frees
   * it. host_step_start posts the step without waiting; host_step_test
   * progresses it and sets *done once its buffers hold the result. */
  cg_status_t (*host_check_thread)(void *comm_impl);
  cg_status_t (*host_step_prepare)(void **state, void *comm_impl, const cg_step_t *step);
  void (*host_step_release)(void *comm_impl, void *state);
  cg_status_t (*host_step_start)(void *comm_impl, const cg_step_t *step, void *state);
  cg_status_t (*host_step_test)(int *done, void *comm_impl, const cg_step_t *step, void *state);

  /* Device execution: the CUDA realizer captures each step's work on a lane
   * stream (a cudaStream_t passed as void *, so this header needs no CUDA).
   * device_warmup runs before capture, outside it, on every rank alike: it does
   * whatever lazy set-up the communicator's steps in `plan` would otherwise do
   * inside the capture, then waits for it. Every wait that depends on other
   * ranks polls and calls cg_wait_go_on(wait) between polls (wait.h; NULL:
   * no timeout); once that gives up it returns CG_ERR_TIMEOUT saying what it
   * waited for, leaving work queued on `stream` that only the communicator's
   * abort ends (the caller's). device_group_start / _end bracket
   * steps issued together (sends and receives of one communicator that must
   * progress concurrently). device_step_enqueue enqueues one step on `stream`. */
  cg_status_t (*device_warmup)(void *comm_impl, const cg_plan_t *plan, uint32_t comm_index, void *stream,
                               const cg_wait_t *wait);
  cg_status_t (*device_group_start)(void *comm_impl);
  cg_status_t (*device_group_end)(void *comm_impl);
  cg_status_t (*device_step_enqueue)(void *comm_impl, const cg_step_t *step, void *stream);
  /* An allgather of `bytes` from every rank of the communicator into `all`
   * (size * bytes, in rank order) on `stream`, in the plan's CUDA graph or
   * outside a capture (a device plan's fingerprint), on a channel of its own:
   * it needs no order with the communicator's steps, and two such gathers
   * pair up across ranks in the order each rank enqueues them. NULL: none
   * (a backend whose steps carry the gather instead, ordered with them).
   * device_allgather_setup makes that channel: collective over the
   * communicator, outside a capture, on every rank alike (a compile's
   * warm-up, before the first gather), its waits under `wait` as
   * device_warmup's; NULL where nothing is to make. The enqueue's own waits
   * (a transport still connecting) go under `wait` too: the warm-up's
   * outside a capture, NULL (for ever) in one. */
  cg_status_t (*device_allgather_setup)(void *comm_impl, const cg_wait_t *wait);
  cg_status_t (*device_allgather_enqueue)(void *comm_impl, const void *mine, void *all, size_t bytes, void *stream,
                                          const cg_wait_t *wait);

  /* The library call a step becomes ("ncclAllReduce", "MPI_Iallreduce"), for
   * DOT and dumps; static text. */
  const char *(*step_call)(const cg_step_t *step);

  /* The bucket size this communicator's transport prefers (fusion), from its
   * topology; the same on every rank of the communicator. 0: no preference. */
  size_t (*bucket_bytes)(void *comm_impl);

  /* A collective the backend runs by a path of its own rather than its
   * library's (the NCCL backend's one-shot and two-shot allreduce kernels):
   * 1 with *path_us, the path's time for a collective of this kind, dtype and
   * op of `bytes` per rank, and *library_us, the library's, both measured
   * alone on this communicator (the same on every rank); 0 where the library
   * runs it or nothing was measured. cg_plan_tune's cost model
   * (sched/compile/cost_model.h) fits a line to a profile's collectives,
   * mostly the library's, and takes the difference off. NULL: always 0. */
  int (*collective_path_us)(double *path_us, double *library_us, void *comm_impl, cg_node_kind_t kind,
                            cg_dtype_t dtype, cg_redop_t op, size_t bytes);
  /* Whether the plan's collective step runs on that path (1) or the
   * library's (0): it depends on more than the kind, dtype, op and size
   * (NCCL: buffers in a symmetric window keep NCCL's symmetric kernels where
   * they measured faster), and the cost model must not take a saving back
   * from a step that had none. NULL: as collective_path_us says. */
  int (*step_on_own_path)(const cg_step_t *step);

  /* cg_plan_rebind moved the step's buffers (same counts, same in-place
   * form): update whatever host_step_prepare derived from them in `state`,
   * keeping its allocations. Needed by every backend with step state; local,
   * not collective. */
  cg_status_t (*step_rebind)(void *comm_impl, void *state, const cg_step_t *step);

  /* A replay on this communicator timed out: make whatever it left on the
   * device stop waiting (NCCL: ncclCommAbort), so the process can go on or
   * exit. The communicator runs nothing afterwards. NULL: nothing to do.
   * Called once per communicator; on a thread of its own unless
   * abort_never_blocks, then inline, before the timeout is returned (so a
   * caller that destroys the plan next finds the communicator aborted). */
  void (*abort)(void *comm_impl);
  int abort_never_blocks;
};

typedef struct cg_backend cg_backend_t;

#endif
