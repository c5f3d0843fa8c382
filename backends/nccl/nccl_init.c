/* NCCL's init of a created communicator's pair (the plan's, non-blocking,
 * and the user's, blocking), bounded by the creation's timeout. NCCL's init
 * waits for every rank (its bootstrap): a rank that stalls before it or in
 * it leaves the others there for ever. Each init runs on a thread of its
 * own, which also settles it (a non-blocking one, or any under
 * NCCL_COMM_BLOCKING=0), so that this rank can wait for both, answer the
 * other ranks' roll calls and give up at the deadline whatever NCCL's
 * blocking setting. A blocking init cannot be aborted from outside (there is
 * no handle until it returns): a thread given up on aborts its communicator
 * itself once NCCL hands it out. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_thread.h"
#include "error.h"
#include "nccl_backend.h"
#include "nccl_check.h"

enum { INIT_RUNNING, INIT_DONE, INIT_GIVEN_UP };

/* One communicator's init; whoever of the creator and the thread comes
 * last frees it. */
typedef struct init_job {
  atomic_int state;
  int device, size, rank, blocking;
  ncclUniqueId id;
  ncclComm_t comm;
  int has_comm; /* NCCL handed out a communicator: to abort unless used */
  ncclResult_t result;
} init_job_t;

/* The settling thread's wait: until given up on, 50 us between polls. */
static int still_wanted(void *ctx) {
  if (atomic_load(&((init_job_t *)ctx)->state) == INIT_GIVEN_UP) return 0;
  struct timespec nap = {0, 50000};
  nanosleep(&nap, NULL);
  return 1;
}

static void run_init(init_job_t *j) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = j->blocking;
  if (cudaSetDevice(j->device) != cudaSuccess) { /* a new thread starts on device 0 */
    j->result = ncclUnhandledCudaError;
    return;
  }
  ncclResult_t r = ncclCommInitRankConfig(&j->comm, j->size, j->id, j->rank, &config);
  j->has_comm = r == ncclSuccess || r == ncclInProgress; /* a failed call's communicator is NCCL's */
  const cg_wait_t wait = {still_wanted, j};
  j->result = r == ncclInProgress ? cg_nccl_settle_within(j->comm, r, &wait) : r;
}

/* A job given up on: nobody uses its communicator, and its peers gave up
 * too. */
static void *end_given_up(void *arg) {
  init_job_t *j = arg;
  cg_cuda_thread_relax_capture(); /* a thread of ours: its calls leave the program's captures alone */
  if (j->has_comm && cudaSetDevice(j->device) == cudaSuccess) ncclCommAbort(j->comm);
  free(j);
  return NULL;
}

static void *init_main(void *arg) {
  init_job_t *j = arg;
  cg_cuda_thread_relax_capture();
  run_init(j);
  int running = INIT_RUNNING;
  if (!atomic_compare_exchange_strong(&j->state, &running, INIT_DONE)) end_given_up(j);
  return NULL;
}

static init_job_t *start_init(const cg_nccl_comm_t *n, int size, int rank, const ncclUniqueId *id, int blocking) {
  init_job_t *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  atomic_init(&j->state, INIT_RUNNING);
  j->device = n->device, j->size = size, j->rank = rank, j->id = *id, j->blocking = blocking;
  if (!cg_cuda_thread_start_detached(init_main, j)) { /* here, then: unbounded, as NCCL's blocking init is */
    run_init(j);
    atomic_store(&j->state, INIT_DONE);
  }
  return j;
}

/* The creator done waiting for j: a finished init's communicator (NULL if
 * none) and result, j freed; or, still running, j handed to its thread
 * (*comm NULL, ncclInProgress). */
static ncclResult_t take_init(ncclComm_t *comm, init_job_t *j) {
  int running = INIT_RUNNING;
  *comm = NULL;
  if (atomic_compare_exchange_strong(&j->state, &running, INIT_GIVEN_UP)) return ncclInProgress;
  ncclResult_t result = j->result;
  if (j->has_comm) *comm = j->comm;
  free(j);
  return result;
}

/* The creator gave up at its deadline: a running init is left to its
 * thread, which aborts the communicator once NCCL hands it out; a finished
 * one is aborted on a thread of its own (NCCL's abort takes a second or more
 * over its sockets), so that the timeout comes back on time. */
static void give_up(init_job_t *j) {
  int running = INIT_RUNNING;
  if (atomic_compare_exchange_strong(&j->state, &running, INIT_GIVEN_UP)) return;
  if (!j->has_comm)
    free(j);
  else if (!cg_cuda_thread_start_detached(end_given_up, j))
    end_given_up(j); /* inline, then: late, but aborted */
}

ncclResult_t cg_nccl_init_pair(cg_nccl_comm_t *n, int size, int rank, const ncclUniqueId ids[2], MPI_Comm mpi,
                               double timeout_s, char *why, size_t why_size) {
  n->nccl = n->user_nccl = NULL;
  init_job_t *plan_job = start_init(n, size, rank, &ids[0], 0);
  init_job_t *user_job = plan_job ? start_init(n, size, rank, &ids[1], 1) : NULL;
  if (!user_job) {
    if (plan_job) take_init(&n->nccl, plan_job); /* the caller aborts what it made */
    snprintf(why, why_size, "the communicators (no memory for their init)");
    return ncclSystemError;
  }
  char waiting_in[CG_WAITING_IN_BYTES];
  snprintf(waiting_in, sizeof waiting_in, "cg_comm_create (NCCL's init of the communicators on device %d)", n->device);
  double end = MPI_Wtime() + timeout_s;
  int timed_out = 0;
  while (atomic_load(&plan_job->state) != INIT_DONE || atomic_load(&user_job->state) != INIT_DONE) {
    cg_mpi_answer_roll_calls(mpi, waiting_in);
    if (timeout_s > 0 && MPI_Wtime() >= end) {
      timed_out = 1;
      break;
    }
    struct timespec nap = {0, 50000};
    nanosleep(&nap, NULL);
  }
  if (timed_out) { /* the roll call first, while this rank still is where it waited; nothing left for the caller */
    cg_mpi_setup_timeout(mpi, timeout_s, waiting_in, "This rank's NCCL init is given up (a communicator whose "
                         "init finished is aborted on a thread of its own; one whose init still runs, by its thread "
                         "once NCCL hands it out: a blocking init cannot be interrupted)");
    give_up(plan_job);
    give_up(user_job);
    return ncclInProgress;
  }
  ncclResult_t plan = take_init(&n->nccl, plan_job), user = take_init(&n->user_nccl, user_job);
  if (plan != ncclSuccess) {
    snprintf(why, why_size, "the plan's communicator");
    return plan;
  }
  if (user != ncclSuccess) snprintf(why, why_size, "the user's communicator (cg_comm_nccl)");
  return user;
}
