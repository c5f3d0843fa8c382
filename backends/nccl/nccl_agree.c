/* The NCCL backend's agreements of all ranks (nccl_backend.h): over a
 * control duplicate, never the data path. */
#include <stdlib.h>

#include "nccl_backend.h"

int cg_nccl_all_ranks_ok(int ok, MPI_Comm mpi) {
  int all = 0;
  if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, mpi) != MPI_SUCCESS) return 0;
  return all;
}

/* n's control communicator's size, or 0 */
static int ranks_of(const cg_nccl_comm_t *n) {
  int size = 0;
  return MPI_Comm_size(n->control->control, &size) == MPI_SUCCESS ? size : 0;
}

cg_status_t cg_nccl_gather_within(void **all, const void *mine, size_t bytes, cg_nccl_comm_t *n,
                                  const cg_wait_t *wait, const char *what) {
  *all = NULL;
  if (!n->control) return cg_fail(CG_ERR_INTERNAL, "%s: the communicator has no control channel", what);
  int size = ranks_of(n);
  if (size < 1) return cg_fail(CG_ERR_BACKEND, "%s: MPI_Comm_size of the control communicator failed", what);
  void *gathered = malloc(bytes * (size_t)size + 1);
  if (!gathered) return cg_fail(CG_ERR_NO_MEMORY, "%s: %zu bytes from each of %d ranks", what, bytes, size);
  cg_status_t st = cg_mpi_control_allgather_within(n->control, mine, gathered, bytes, wait, what);
  if (st != CG_SUCCESS) {
    free(gathered);
    return st;
  }
  *all = gathered;
  return CG_SUCCESS;
}

cg_status_t cg_nccl_agree_within(int *all_ok, int ok, cg_nccl_comm_t *n, const cg_wait_t *wait, const char *what) {
  int *all = NULL;
  *all_ok = 0;
  cg_status_t st = cg_nccl_gather_within((void **)&all, &ok, sizeof ok, n, wait, what);
  if (st != CG_SUCCESS) return st;
  int size = ranks_of(n);
  *all_ok = 1;
  for (int r = 0; r < size; r++) *all_ok &= all[r] != 0;
  free(all);
  return CG_SUCCESS;
}

cg_status_t cg_nccl_max_within(double *slowest, const double *mine, int count, cg_nccl_comm_t *n,
                               const cg_wait_t *wait, const char *what) {
  double *all = NULL;
  cg_status_t st = cg_nccl_gather_within((void **)&all, mine, (size_t)count * sizeof *mine, n, wait, what);
  if (st != CG_SUCCESS) return st;
  int size = ranks_of(n);
  for (int r = 0; r < size; r++) {
    const double *theirs = all + (size_t)r * (size_t)count;
    for (int i = 0; i < count; i++)
      if (r == 0 || theirs[i] > slowest[i]) slowest[i] = theirs[i];
  }
  free(all);
  return CG_SUCCESS;
}
