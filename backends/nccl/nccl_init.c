/* NCCL's init of a created communicator's pair (the plan's, non-blocking,
 * and the user's, blocking), bounded by the creation's timeout. NCCL's init
 * waits for every rank (its bootstrap): a rank that stalls before it or in
 * it leaves the others there for ever. The plan's init goes on in NCCL's
 * thread; the user's blocking one runs on a thread of its own, so that this
 * rank can poll both, answer the other ranks' roll calls and give up at the
 * deadline. A blocking init cannot be aborted from outside (there is no
 * handle until it returns): a thread given up on aborts its communicator
 * itself if its init ever returns. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <threads.h>
#include <time.h>

#include "error.h"
#include "nccl_backend.h"
#include "nccl_check.h"

enum { USER_INIT_RUNNING, USER_INIT_DONE, USER_INIT_GIVEN_UP };

/* Whoever of the creator and the thread comes last frees it. */
typedef struct user_init {
  atomic_int state;
  int device, size, rank;
  ncclUniqueId id;
  ncclComm_t comm;
  int has_comm; /* NCCL handed out a communicator: to abort unless used */
  ncclResult_t result;
} user_init_t;

static int still_wanted(void *ctx) { return atomic_load(&((user_init_t *)ctx)->state) != USER_INIT_GIVEN_UP; }

static void init_blocking(user_init_t *u) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  if (cudaSetDevice(u->device) != cudaSuccess) { /* a new thread starts on device 0 */
    u->result = ncclUnhandledCudaError;
    return;
  }
  ncclResult_t r = ncclCommInitRankConfig(&u->comm, u->size, u->id, u->rank, &config);
  u->has_comm = r == ncclSuccess || r == ncclInProgress;
  /* NCCL_COMM_BLOCKING=0 overrides the setting: then settled here, until
   * given up on */
  const cg_wait_t wait = {still_wanted, u};
  u->result = r == ncclInProgress ? cg_nccl_settle_within(u->comm, r, &wait) : r;
}

static int user_init_main(void *arg) {
  user_init_t *u = arg;
  init_blocking(u);
  int running = USER_INIT_RUNNING;
  if (atomic_compare_exchange_strong(&u->state, &running, USER_INIT_DONE)) return 0;
  /* given up on: nobody uses this communicator, and its peers gave up too */
  if (u->has_comm) ncclCommAbort(u->comm);
  free(u);
  return 0;
}

/* The plan's init's state, settled or ncclInProgress. */
static ncclResult_t plan_state(ncclComm_t comm, ncclResult_t r) {
  if (r != ncclInProgress) return r;
  ncclResult_t state = ncclSuccess, asked = ncclCommGetAsyncError(comm, &state);
  return asked != ncclSuccess ? asked : state;
}

ncclResult_t cg_nccl_init_pair(cg_nccl_comm_t *n, int size, int rank, const ncclUniqueId ids[2], MPI_Comm mpi,
                               double timeout_s, char *why, size_t why_size) {
  user_init_t *u = calloc(1, sizeof *u);
  if (!u) {
    snprintf(why, why_size, "the user's communicator (no memory for its init)");
    return ncclSystemError;
  }
  atomic_init(&u->state, USER_INIT_RUNNING);
  u->device = n->device, u->size = size, u->rank = rank, u->id = ids[1];
  ncclConfig_t plan_config = NCCL_CONFIG_INITIALIZER;
  plan_config.blocking = 0;
  ncclResult_t plan = ncclCommInitRankConfig(&n->nccl, size, ids[0], rank, &plan_config);
  /* a communicator whose init call failed is NCCL's; one whose init fails
   * later is to be aborted */
  if (plan != ncclSuccess && plan != ncclInProgress) n->nccl = NULL;
  thrd_t thread;
  if (thrd_create(&thread, user_init_main, u) == thrd_success) {
    thrd_detach(thread);
  } else { /* on this thread, then: unbounded, as NCCL's blocking init is */
    init_blocking(u);
    atomic_store(&u->state, USER_INIT_DONE);
  }
  char waiting_in[CG_WAITING_IN_BYTES];
  snprintf(waiting_in, sizeof waiting_in, "cg_comm_create (NCCL's init of the communicators on device %d)", n->device);
  double end = MPI_Wtime() + timeout_s;
  int timed_out = 0;
  for (;;) {
    plan = plan_state(n->nccl, plan);
    if (plan != ncclInProgress && atomic_load(&u->state) == USER_INIT_DONE) break;
    cg_mpi_answer_roll_calls(mpi, waiting_in);
    if (timeout_s > 0 && MPI_Wtime() >= end) {
      timed_out = 1;
      break;
    }
    struct timespec nap = {0, 50000};
    nanosleep(&nap, NULL);
  }
  if (timed_out) {
    char left[400];
    snprintf(left, sizeof left, "This rank's NCCL init is given up (the plan's communicator aborted%s%s; the user's, "
             "whose blocking init NCCL cannot interrupt, aborted by its own thread if that init ever returns)",
             plan != ncclSuccess && plan != ncclInProgress ? ", its init having failed: " : "",
             plan != ncclSuccess && plan != ncclInProgress ? ncclGetErrorString(plan) : "");
    /* the roll call first, while this rank still is where it waited */
    cg_mpi_setup_timeout(mpi, timeout_s, waiting_in, left);
    int running = USER_INIT_RUNNING;
    if (atomic_compare_exchange_strong(&u->state, &running, USER_INIT_GIVEN_UP)) {
      n->user_nccl = NULL; /* the thread's now */
    } else {
      n->user_nccl = u->has_comm ? u->comm : NULL; /* the caller aborts it */
      free(u);
    }
    if (n->nccl) ncclCommAbort(n->nccl);
    n->nccl = NULL;
    return ncclInProgress;
  }
  ncclResult_t user = u->result;
  n->user_nccl = u->has_comm ? u->comm : NULL; /* on failure the caller aborts it */
  free(u);
  if (plan != ncclSuccess) {
    snprintf(why, why_size, "the plan's communicator");
    return plan;
  }
  if (user != ncclSuccess) snprintf(why, why_size, "the user's communicator (cg_comm_nccl)");
  return user;
}
