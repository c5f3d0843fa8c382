/* One plan step as one nonblocking MPI call. In-place forms are NCCL's and map
 * onto MPI_IN_PLACE where MPI's meaning is the same; reduce_scatter in place
 * goes through a scratch buffer, because MPI's in-place reduce_scatter leaves
 * the result at the start of the buffer and overwrites bytes NCCL's form does
 * not touch. Average is a sum followed by a division on the ranks that receive
 * the result. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "host_reduce.h"
#include "mpi_backend.h"

typedef struct mpi_step {
  MPI_Request request;
  void *scratch;     /* reduce_scatter in place: the result before it is copied */
  size_t scratch_bytes;
  void *divide;      /* average: where this rank's result lands, or NULL */
} mpi_step_t;

static const char *at(const void *base, size_t elems, size_t elem_size) {
  return (const char *)base + elems * elem_size;
}

/* A reduce_scatter in place receives into scratch first (MPI has no in-place
 * form with the result at this rank's block of the input). */
static size_t scratch_bytes_of(const cg_step_t *s) {
  size_t es = cg_dtype_size(s->dtype);
  int in_place = (const char *)s->recv == at(s->send, (size_t)s->comm->rank * s->count, es);
  return s->op_kind == CG_NODE_REDUCE_SCATTER && s->count && in_place ? s->count * es : 0;
}

void *cg_mpi_average_target(const cg_step_t *s) {
  int is_root = s->comm->rank == s->root;
  int receives = s->op_kind == CG_NODE_ALLREDUCE || s->op_kind == CG_NODE_REDUCE_SCATTER ||
                 (s->op_kind == CG_NODE_REDUCE && is_root);
  return s->op == CG_AVG && s->count && receives ? s->recv : NULL;
}

cg_status_t cg_mpi_step_prepare(void **state, void *comm_impl, const cg_step_t *s) {
  (void)comm_impl;
  size_t es = cg_dtype_size(s->dtype);
  if (s->count > (size_t)INT_MAX)
    return cg_fail(CG_ERR_UNSUPPORTED, "count %zu is above MPI's int counts (%d)", s->count, INT_MAX);
  mpi_step_t *m = calloc(1, sizeof *m);
  if (!m) return cg_fail(CG_ERR_NO_MEMORY, "allocating the MPI step");
  m->request = MPI_REQUEST_NULL;
  if ((m->scratch_bytes = scratch_bytes_of(s)) && !(m->scratch = malloc(m->scratch_bytes))) {
    free(m);
    return cg_fail(CG_ERR_NO_MEMORY, "allocating %zu bytes of reduce_scatter scratch", s->count * es);
  }
  m->divide = cg_mpi_average_target(s);
  *state = m;
  return CG_SUCCESS;
}

cg_status_t cg_mpi_step_rebind(void *comm_impl, void *state, const cg_step_t *s) {
  (void)comm_impl;
  mpi_step_t *m = state;
  /* a node keeps its in-place form, but a bucket's fused buffers may change
   * form when its members move (staged into the plan's memory, or run on the
   * members' own) */
  size_t need = scratch_bytes_of(s);
  if (need != m->scratch_bytes) {
    void *scratch = need ? malloc(need) : NULL;
    if (need && !scratch) return cg_fail(CG_ERR_NO_MEMORY, "allocating %zu bytes of reduce_scatter scratch", need);
    free(m->scratch);
    m->scratch = scratch;
    m->scratch_bytes = need;
  }
  m->divide = cg_mpi_average_target(s);
  return CG_SUCCESS;
}

void cg_mpi_step_release(void *comm_impl, void *state) {
  (void)comm_impl;
  mpi_step_t *m = state;
  if (!m) return;
  if (m->request != MPI_REQUEST_NULL) {
    /* left in flight by a failed run: freeing an active collective request is
     * erroneous in MPI, and MPI may still write the scratch buffer, so what is
     * still in flight is left to MPI (a deliberate leak) */
    int done = 0, finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || MPI_Test(&m->request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) return;
  }
  free(m->scratch);
  free(m);
}

const char *cg_mpi_step_call(const cg_step_t *s) {
  switch (s->op_kind) {
    case CG_NODE_ALLREDUCE: return "MPI_Iallreduce";
    case CG_NODE_BROADCAST: return "MPI_Ibcast";
    case CG_NODE_REDUCE: return "MPI_Ireduce";
    case CG_NODE_ALLGATHER: return "MPI_Iallgather";
    case CG_NODE_REDUCE_SCATTER: return "MPI_Ireduce_scatter_block";
    case CG_NODE_ALLTOALL: return "MPI_Ialltoall";
    case CG_NODE_GATHER: return "MPI_Igather";
    case CG_NODE_SCATTER: return "MPI_Iscatter";
    case CG_NODE_SEND: return "MPI_Isend";
    case CG_NODE_RECV: return "MPI_Irecv";
    case CG_NODE_BARRIER: return "MPI_Ibarrier";
    default: return "none";
  }
}

cg_status_t cg_mpi_step_start(void *comm_impl, const cg_step_t *s, void *state) {
  cg_mpi_comm_t *mc = comm_impl;
  mpi_step_t *m = state;
  MPI_Comm comm = mc->data;
  MPI_Datatype type = cg_mpi_datatype(mc, s->dtype);
  MPI_Op op = cg_mpi_op(mc, s->dtype, s->op);
  size_t es = cg_dtype_size(s->dtype);
  int count = (int)s->count, rank = s->comm->rank, is_root = rank == s->root;
  const void *send = s->send;
  void *recv = s->recv;
  const char *call = cg_mpi_step_call(s);
  int err = MPI_SUCCESS;
  switch (s->op_kind) {
    case CG_NODE_ALLREDUCE:
      err = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, count, type, op, comm, &m->request);
      break;
    case CG_NODE_BROADCAST:
      if (is_root && send != recv && count) memcpy(recv, send, s->count * es);
      err = MPI_Ibcast(recv, count, type, s->root, comm, &m->request);
      break;
    case CG_NODE_REDUCE:
      err = MPI_Ireduce(is_root && send == recv ? MPI_IN_PLACE : send, recv, count, type, op, s->root, comm,
                        &m->request);
      break;
    case CG_NODE_ALLGATHER:
      err = MPI_Iallgather(count && send == at(recv, (size_t)rank * s->count, es) ? MPI_IN_PLACE : send, count, type,
                           recv, count, type, comm, &m->request);
      break;
    case CG_NODE_REDUCE_SCATTER:
      err = MPI_Ireduce_scatter_block(send, m->scratch ? m->scratch : recv, count, type, op, comm, &m->request);
      break;
    case CG_NODE_ALLTOALL:
      err = MPI_Ialltoall(send, count, type, recv, count, type, comm, &m->request);
      break;
    case CG_NODE_GATHER:
      err = MPI_Igather(is_root && count && send == at(recv, (size_t)rank * s->count, es) ? MPI_IN_PLACE : send,
                        count, type, recv, count, type, s->root, comm, &m->request);
      break;
    case CG_NODE_SCATTER:
      err = MPI_Iscatter(send, count, type,
                         is_root && count && recv == at(send, (size_t)rank * s->count, es) ? MPI_IN_PLACE : recv,
                         count, type, s->root, comm, &m->request);
      break;
    case CG_NODE_SEND:
      err = MPI_Isend(send, count, type, s->root, s->tag, comm, &m->request);
      break;
    case CG_NODE_RECV:
      err = MPI_Irecv(recv, count, type, s->root, s->tag, comm, &m->request);
      break;
    case CG_NODE_BARRIER:
      err = MPI_Ibarrier(comm, &m->request);
      break;
    default:
      return cg_fail(CG_ERR_INTERNAL, "the MPI backend got a %s step", cg_node_kind_name(s->op_kind));
  }
  if (err != MPI_SUCCESS) {
    m->request = MPI_REQUEST_NULL;
    return cg_mpi_fail(err, call);
  }
  return CG_SUCCESS;
}

cg_status_t cg_mpi_step_test(int *done, void *comm_impl, const cg_step_t *s, void *state) {
  (void)comm_impl;
  mpi_step_t *m = state;
  int flag = 0;
  int err = MPI_Test(&m->request, &flag, MPI_STATUS_IGNORE);
  if (err != MPI_SUCCESS) return cg_mpi_fail(err, "MPI_Test");
  if (flag) {
    if (m->scratch) memcpy(s->recv, m->scratch, m->scratch_bytes);
    if (m->divide) cg_host_divide(m->divide, s->count, s->dtype, s->comm->size);
  }
  *done = flag;
  return CG_SUCCESS;
}
