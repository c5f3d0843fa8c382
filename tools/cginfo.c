/* cginfo: what this commgraph build and this machine offer: versions of the
 * libraries it was built with and runs with, the backends built in, the CG_*
 * environment variables (a bad value marked BAD: the call that reads it would
 * refuse it), which GPU and NUMA node each rank would take, and the machine's
 * topology. Run it under the launcher a job uses (mpiexec -n N cginfo) to see
 * the placement and environment that job gets: rank 0 prints the machine-wide
 * part and one line per rank.
 * It never needs a GPU: without one it says so and still prints the rest. */
#include <mpi.h>
#include <stdio.h>

#include "commgraph/mpi.h"

int main(int argc, char **argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  /* the report is the library's (backends/info.c), so the Python package's is the same */
  cg_status_t st = cg_info_write(stdout, MPI_COMM_WORLD);
  if (st != CG_SUCCESS) fprintf(stderr, "cginfo: %s: %s\n", cg_status_string(st), cg_error_last());
  MPI_Finalize();
  return st == CG_SUCCESS ? 0 : 1;
}
