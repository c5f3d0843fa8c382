/* The waits of a communicator's creation for the other ranks, bounded by the
 * creation's timeout: the arrival, and every agreement after a step a rank
 * can stall in on its own (a CUDA device's set-up, NCCL's init). Each is a
 * nonblocking collective on the application's communicator, polled while
 * the rank answers the others' roll calls with the stage it waits in; when
 * the time is up a roll call names the ranks that did not come. MPI cannot
 * take the collective back, so it stays posted and the job is to end. With
 * no timeout they are MPI's blocking collectives, as before. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_backend.h"

cg_status_t cg_mpi_setup_timeout(MPI_Comm comm, double timeout_s, const char *waiting_in, const char *left) {
  int me = 0, n = 0;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &n);
  char roll[768];
  cg_mpi_roll_call(roll, sizeof roll, comm, waiting_in, timeout_s);
  cg_status_t st = cg_fail(CG_ERR_TIMEOUT, "%s: timed out after %g s waiting for the other ranks on rank %d of %d: "
                           "%s. %s: end the job (MPI_Abort)", waiting_in, timeout_s, me, n, roll, left);
  fprintf(stderr, "commgraph: %s\n", cg_error_last());
  return st;
}

/* Polls `request` (what `call` started) until it completes or timeout_s
 * (> 0) passed: then CG_ERR_TIMEOUT, and the request stays posted with its
 * buffers (release()). */
static cg_status_t wait_setup(MPI_Request *request, MPI_Comm comm, double timeout_s, const char *where,
                              const char *stage, const char *call) {
  char waiting_in[CG_WAITING_IN_BYTES];
  snprintf(waiting_in, sizeof waiting_in, "%s (%s)", where, stage);
  double end = MPI_Wtime() + timeout_s;
  for (;;) {
    int done = 0;
    MPI_Status status;
    int err = cg_mpi_request_error(MPI_Test(request, &done, &status), &status);
    if (err != MPI_SUCCESS) return cg_fail_mpi(err, call, "%s", waiting_in);
    if (done) return CG_SUCCESS;
    cg_mpi_answer_roll_calls(comm, waiting_in);
    if (MPI_Wtime() < end) {
      struct timespec nap = {0, 20000}; /* a core left to the others' progress */
      nanosleep(&nap, NULL);
      continue;
    }
    char left[160];
    snprintf(left, sizeof left, "The %s stays posted on this MPI communicator", call);
    return cg_mpi_setup_timeout(comm, timeout_s, waiting_in, left);
  }
}

cg_status_t cg_mpi_setup_barrier(MPI_Comm comm, double timeout_s, const char *where, const char *stage) {
  if (timeout_s <= 0) return CG_SUCCESS;
  MPI_Request request;
  int err = MPI_Ibarrier(comm, &request);
  if (err != MPI_SUCCESS) return cg_fail_mpi(err, "MPI_Ibarrier", "%s: %s", where, stage);
  return wait_setup(&request, comm, timeout_s, where, stage, "MPI_Ibarrier");
}

cg_status_t cg_mpi_arrive(MPI_Comm comm, double timeout_s, const char *where) {
  return cg_mpi_setup_barrier(comm, timeout_s, where, "the ranks' arrival");
}

/* A request's buffers once wait_setup is done with it: freed if MPI let go
 * of the request, kept for good if it stays posted (a timeout, or an error
 * that left it to MPI). */
static void release(void *buffers, MPI_Request request) {
  if (request == MPI_REQUEST_NULL)
    free(buffers);
  else
    cg_mpi_keep_posted(buffers);
}

cg_status_t cg_mpi_setup_min(void *least, const void *mine, int count, MPI_Datatype type, MPI_Comm comm,
                             double timeout_s, const char *where, const char *stage) {
  int err, type_bytes = 0;
  size_t bytes = 0;
  char *owned = NULL; /* what this rank sends, then what it gets */
  if (timeout_s > 0 && MPI_Type_size(type, &type_bytes) == MPI_SUCCESS)
    bytes = (size_t)type_bytes * (size_t)count, owned = malloc(2 * bytes + 1);
  if (!owned) { /* no timeout, or no memory for the buffers: MPI's blocking collective, which needs none */
    if ((err = MPI_Allreduce(mine, least, count, type, MPI_MIN, comm)) != MPI_SUCCESS)
      return cg_fail_mpi(err, "MPI_Allreduce", "%s (%s)", where, stage);
    return CG_SUCCESS;
  }
  memcpy(owned, mine, bytes);
  MPI_Request request = MPI_REQUEST_NULL;
  if ((err = MPI_Iallreduce(owned, owned + bytes, count, type, MPI_MIN, comm, &request)) != MPI_SUCCESS) {
    free(owned);
    return cg_fail_mpi(err, "MPI_Iallreduce", "%s (%s)", where, stage);
  }
  cg_status_t st = wait_setup(&request, comm, timeout_s, where, stage, "MPI_Iallreduce");
  if (st == CG_SUCCESS) memcpy(least, owned + bytes, bytes);
  release(owned, request);
  return st;
}

cg_status_t cg_mpi_setup_all_ok(int *all_ok, int ok, MPI_Comm comm, double timeout_s, const char *where,
                                const char *stage) {
  *all_ok = 0;
  return cg_mpi_setup_min(all_ok, &ok, 1, MPI_INT, comm, timeout_s, where, stage);
}

cg_status_t cg_mpi_setup_bcast(void *buffer, int bytes, int root, MPI_Comm comm, double timeout_s,
                               const char *where, const char *stage) {
  int err;
  char *owned = timeout_s > 0 ? malloc((size_t)bytes + 1) : NULL;
  if (!owned) { /* as in cg_mpi_setup_min */
    if ((err = MPI_Bcast(buffer, bytes, MPI_BYTE, root, comm)) != MPI_SUCCESS)
      return cg_fail_mpi(err, "MPI_Bcast", "%s (%s)", where, stage);
    return CG_SUCCESS;
  }
  memcpy(owned, buffer, (size_t)bytes);
  MPI_Request request = MPI_REQUEST_NULL;
  if ((err = MPI_Ibcast(owned, bytes, MPI_BYTE, root, comm, &request)) != MPI_SUCCESS) {
    free(owned);
    return cg_fail_mpi(err, "MPI_Ibcast", "%s (%s)", where, stage);
  }
  cg_status_t st = wait_setup(&request, comm, timeout_s, where, stage, "MPI_Ibcast");
  if (st == CG_SUCCESS) memcpy(buffer, owned, (size_t)bytes);
  release(owned, request);
  return st;
}

cg_status_t cg_mpi_setup_dup(MPI_Comm *out, MPI_Comm comm, double timeout_s, const char *where, const char *stage) {
  int err;
  *out = MPI_COMM_NULL;
  /* MPI writes the new handle when the duplicate completes: into memory that
   * outlives a timeout */
  MPI_Comm *made = timeout_s > 0 ? malloc(sizeof *made) : NULL;
  if (!made) { /* as in cg_mpi_setup_min */
    if ((err = MPI_Comm_dup(comm, out)) != MPI_SUCCESS) {
      *out = MPI_COMM_NULL;
      return cg_fail_mpi(err, "MPI_Comm_dup", "%s (%s)", where, stage);
    }
    return CG_SUCCESS;
  }
  *made = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  if ((err = MPI_Comm_idup(comm, made, &request)) != MPI_SUCCESS) {
    free(made);
    return cg_fail_mpi(err, "MPI_Comm_idup", "%s (%s)", where, stage);
  }
  cg_status_t st = wait_setup(&request, comm, timeout_s, where, stage, "MPI_Comm_idup");
  if (st == CG_SUCCESS) *out = *made;
  release(made, request);
  return st;
}
