#include <stdlib.h>

#include "comm_internal.h"
#include "error.h"

static atomic_uint_fast64_t next_comm_serial = 1;

cg_comm_t *cg_comm_alloc(int rank, int size, const cg_comm_ops_t *ops, void *impl) {
  cg_comm_t *comm = calloc(1, sizeof *comm);
  if (!comm) return NULL;
  comm->serial = atomic_fetch_add(&next_comm_serial, 1);
  comm->rank = rank;
  comm->size = size;
  comm->device = CG_DEVICE_HOST;
  atomic_init(&comm->refs, 1);
  comm->ops = ops;
  comm->impl = impl;
  return comm;
}

void cg_comm_retain(cg_comm_t *comm) { atomic_fetch_add(&comm->refs, 1); }

void cg_comm_release(cg_comm_t *comm) {
  if (!comm || atomic_fetch_sub(&comm->refs, 1) != 1) return;
  if (comm->ops && comm->ops->destroy_impl) comm->ops->destroy_impl(comm->impl);
  free(comm);
}

void cg_comm_destroy(cg_comm_t *comm) { cg_comm_release(comm); }

cg_status_t cg_comm_rank(int *out, const cg_comm_t *comm) {
  if (!out || !comm) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_rank: NULL %s", out ? "comm" : "out");
  *out = comm->rank;
  return CG_SUCCESS;
}

cg_status_t cg_comm_size(int *out, const cg_comm_t *comm) {
  if (!out || !comm) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_size: NULL %s", out ? "comm" : "out");
  *out = comm->size;
  return CG_SUCCESS;
}

cg_status_t cg_comm_backend_name(const char **out, const cg_comm_t *comm) {
  if (!out || !comm)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_backend_name: NULL %s", out ? "comm" : "out");
  *out = comm->ops && comm->ops->backend_name ? comm->ops->backend_name : "none";
  return CG_SUCCESS;
}

cg_status_t cg_comm_device(int *out, const cg_comm_t *comm) {
  if (!out || !comm) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_device: NULL %s", out ? "comm" : "out");
  *out = comm->device;
  return CG_SUCCESS;
}
