/* The library's second threads against MPI_Finalize. The device watchdog's
 * monitor answers and calls roll calls on the control channel from a thread
 * of its own (under MPI_THREAD_MULTIPLE) while launched or embedded replays
 * are in flight; an MPI call of that thread still running when the program
 * calls MPI_Finalize broke MPICH 4.0.2's finalize in 8 of 10 runs (session
 * 14, docs/watchdog.md), and MPI's own hook for libraries (a delete callback
 * on MPI_COMM_SELF) runs too late: the finalize has begun. So the gate closes
 * before MPI_Finalize is called: cg_mpi_before_finalize, which
 * cg_mpi_finalize and the MPI_Finalize of libcommgraph_pmpi (the profiling
 * interface) call, waits for the call in flight and lets no new one start. */
#include <threads.h>

#include "commgraph/mpi.h"
#include "mpi_backend.h"

static mtx_t gate_lock;
static cnd_t gate_idle;
static once_flag gate_once = ONCE_FLAG_INIT;
static int gate_closed, gate_calls;

static void gate_init(void) {
  mtx_init(&gate_lock, mtx_plain);
  cnd_init(&gate_idle);
}

int cg_mpi_gate_enter(void) {
  call_once(&gate_once, gate_init);
  mtx_lock(&gate_lock);
  int open = !gate_closed;
  gate_calls += open;
  mtx_unlock(&gate_lock);
  return open;
}

void cg_mpi_gate_leave(void) {
  mtx_lock(&gate_lock);
  if (--gate_calls == 0) cnd_broadcast(&gate_idle);
  mtx_unlock(&gate_lock);
}

int cg_mpi_gate_closed(void) {
  call_once(&gate_once, gate_init);
  mtx_lock(&gate_lock);
  int closed = gate_closed;
  mtx_unlock(&gate_lock);
  return closed;
}

cg_status_t cg_mpi_before_finalize(void) {
  call_once(&gate_once, gate_init);
  mtx_lock(&gate_lock);
  gate_closed = 1;
  while (gate_calls > 0) cnd_wait(&gate_idle, &gate_lock);
  mtx_unlock(&gate_lock);
  return CG_SUCCESS;
}
