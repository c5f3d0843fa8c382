/* cg_mpi_before_finalize through libcommgraph_pmpi's MPI_Finalize
 * (backends/mpi/mpi_finalize_gate.c): a second thread answers roll calls on a
 * communicator's control channel in a loop (MPI_Improbe, as the device
 * watchdog's monitor does while replays are in flight) and never stops on its
 * own, while the program calls MPI_Finalize. Without the gate such a thread
 * broke MPICH's finalize in 8 of 10 runs (docs/watchdog.md); with it the
 * finalize waits for the call in flight, and the thread makes no MPI call
 * after. MPI starts once per process, so this is a program of its own (no
 * Check runner, which starts MPI); ctest runs it several times. Every rank
 * says what failed; the exit status is the verdict. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <threads.h>
#include <time.h>

#include "backend.h"
#include "comm_internal.h"
#include "commgraph/mpi.h"

static int failures;
static atomic_int stop;
static atomic_long answered;

static void expect(int ok, const char *what) {
  if (ok) return;
  failures++;
  fprintf(stderr, "test_mpi_finalize_gate: FAILED: %s (last error: %s)\n", what, cg_error_last());
}

static int answer_forever(void *arg) {
  cg_comm_t *comm = arg;
  const cg_backend_t *b = comm->ops->backend;
  while (!atomic_load(&stop)) {
    b->control_answer(comm->impl, "test_mpi_finalize_gate's second thread");
    atomic_fetch_add(&answered, 1);
  }
  return 0;
}

static void nap_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
  int provided = 0, rank = 0, size = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (provided < MPI_THREAD_MULTIPLE) {
    printf("test_mpi_finalize_gate: skipped: MPI gives no MPI_THREAD_MULTIPLE\n");
    MPI_Finalize();
    return 77;
  }
  cg_comm_t *comm = NULL;
  expect(cg_comm_create(&comm, MPI_COMM_WORLD, NULL) == CG_SUCCESS, "cg_comm_create");
  if (!comm) {
    MPI_Finalize();
    return 1;
  }
  const cg_backend_t *b = comm->ops->backend;
  expect(b->control_any_thread && b->control_any_thread(comm->impl) == 1,
         "the control channel may be used from a second thread before the finalize");
  thrd_t thread;
  expect(thrd_create(&thread, answer_forever, comm) == thrd_success, "thrd_create");
  while (atomic_load(&answered) < 1000) nap_ms(1);
  MPI_Barrier(MPI_COMM_WORLD); /* every rank's thread is in its loop */
  nap_ms(5 + 3 * rank);
  long before = atomic_load(&answered);
  expect(MPI_Finalize() == MPI_SUCCESS, "MPI_Finalize (libcommgraph_pmpi's) returns MPI_SUCCESS");
  int finalized = 0;
  MPI_Finalized(&finalized);
  expect(finalized, "MPI is finalized");
  expect(b->control_any_thread(comm->impl) == 0, "no second thread's MPI call after the finalize");
  /* the thread goes on calling: each call now returns without MPI */
  nap_ms(20);
  expect(atomic_load(&answered) > before, "the second thread kept running through the finalize");
  atomic_store(&stop, 1);
  thrd_join(thread, NULL);
  cg_comm_destroy(comm); /* frees no MPI object once MPI is finalized */
  if (failures) return 1;
  printf("test_mpi_finalize_gate: rank %d of %d: the finalize waited for the second thread's call, %ld calls\n",
         rank, size, atomic_load(&answered));
  return 0;
}
