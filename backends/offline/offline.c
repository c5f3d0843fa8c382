/* The offline backend: a communicator that knows its rank and size and moves no
 * data. Used to record, validate and draw a graph as one rank of a job. */
#include <stddef.h>

#include "comm_internal.h"
#include "error.h"

static const cg_comm_ops_t offline_ops = {.backend_name = "offline", .destroy_impl = NULL};

cg_status_t cg_comm_create_offline(cg_comm_t **out, int rank, int size) {
  if (!out) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create_offline: NULL out");
  if (size < 1) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create_offline: size %d is not positive", size);
  if (rank < 0 || rank >= size)
    return cg_fail(CG_ERR_OUT_OF_RANGE, "cg_comm_create_offline: rank %d outside [0, %d)", rank, size);
  cg_comm_t *comm = cg_comm_alloc(rank, size, &offline_ops, NULL);
  if (!comm) return cg_fail(CG_ERR_NO_MEMORY, "cg_comm_create_offline: allocating the communicator");
  *out = comm;
  return CG_SUCCESS;
}
