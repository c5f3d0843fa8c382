/* The NCCL backend's agreement of all ranks on a local outcome
 * (nccl_backend.h): over a control duplicate, never the data path. */
#include "nccl_backend.h"

int cg_nccl_all_ranks_ok(int ok, MPI_Comm mpi) {
  int all = 0;
  if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, mpi) != MPI_SUCCESS) return 0;
  return all;
}
