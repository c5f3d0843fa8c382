/* libcommgraph_pmpi: MPI_Finalize through MPI's profiling interface, so that
 * a program that cannot call cg_mpi_before_finalize itself gets it: the
 * library's second threads stop their MPI calls before MPI ends
 * (mpi_finalize_gate.c). Linked before the MPI library (or preloaded), its
 * MPI_Finalize is the one the program calls; it then calls PMPI_Finalize.
 * Left out of libcommgraph itself: a library that defined MPI_Finalize would
 * take the place of every other profiling tool's. */
#include <mpi.h>

#include "commgraph/mpi.h"

int MPI_Finalize(void) {
  cg_mpi_before_finalize();
  return PMPI_Finalize();
}
