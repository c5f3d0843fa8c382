/* The reference executor: every node alone, in record order, with plain MPI.
 * Collectives only move bytes (MPI_Allgather, MPI_Bcast, MPI_Alltoall,
 * MPI_Gather, MPI_Scatter) through temporaries, and reductions are computed
 * here by cg_ref_reduce, so nothing is shared with the library's MPI backend.
 * Sends and receives are posted nonblocking and completed before the next node
 * that is not a send or receive, or before a send or receive that touches their
 * bytes, which is what "issued together" means for a group of point-to-point
 * operations. */
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "mpi_test.h"

typedef struct pending {
  MPI_Request *requests;
  const char **lo, **hi; /* byte ranges of the posted operations */
  int *writes;
  int n, cap;
} pending_t;

static int wait_all(pending_t *p) {
  int err = MPI_SUCCESS;
  for (int i = 0; i < p->n && err == MPI_SUCCESS; i++) err = MPI_Wait(&p->requests[i], MPI_STATUS_IGNORE);
  p->n = 0;
  return err;
}

/* Completes the posted operations whose bytes conflict with [lo, hi) (one of
 * the two writes), and only those: waiting for unrelated ones could wait for a
 * peer that is itself about to post a message this rank has not posted yet. */
static int wait_conflicting(pending_t *p, const char *lo, const char *hi, int writes) {
  int err = MPI_SUCCESS, kept = 0;
  for (int i = 0; i < p->n; i++) {
    if ((writes || p->writes[i]) && lo < p->hi[i] && p->lo[i] < hi) {
      if (err == MPI_SUCCESS) err = MPI_Wait(&p->requests[i], MPI_STATUS_IGNORE);
      continue;
    }
    p->requests[kept] = p->requests[i];
    p->lo[kept] = p->lo[i];
    p->hi[kept] = p->hi[i];
    p->writes[kept] = p->writes[i];
    kept++;
  }
  p->n = kept;
  return err;
}

static void *checked_malloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) abort();
  return p;
}

static int run_collective(const cg_node_rec_t *n, MPI_Comm comm) {
  int size = n->comm->size, rank = n->comm->rank, is_root = rank == n->root;
  size_t es = cg_dtype_size(n->dtype), bytes = n->count * es;
  int ib = (int)bytes, err = MPI_SUCCESS;
  char *mine = checked_malloc(bytes * (size_t)size);
  char *all = checked_malloc(bytes * (size_t)size * (size_t)size);
  switch (n->kind) {
    case CG_NODE_ALLREDUCE:
    case CG_NODE_REDUCE:
      if (bytes) memcpy(mine, n->send, bytes);
      err = MPI_Allgather(mine, ib, MPI_BYTE, all, ib, MPI_BYTE, comm);
      if (n->kind == CG_NODE_ALLREDUCE || is_root) cg_ref_reduce(n->recv, all, size, n->count, n->dtype, n->op);
      break;
    case CG_NODE_REDUCE_SCATTER: {
      size_t total = bytes * (size_t)size;
      if (total) memcpy(mine, n->send, total);
      err = MPI_Allgather(mine, (int)total, MPI_BYTE, all, (int)total, MPI_BYTE, comm);
      /* this rank's block from every rank, one after another */
      char *blocks = checked_malloc(bytes * (size_t)size);
      for (int r = 0; r < size; r++)
        if (bytes) memcpy(blocks + (size_t)r * bytes, all + (size_t)r * total + (size_t)rank * bytes, bytes);
      cg_ref_reduce(n->recv, blocks, size, n->count, n->dtype, n->op);
      free(blocks);
      break;
    }
    case CG_NODE_BROADCAST:
      if (is_root && bytes) memcpy(mine, n->send, bytes);
      err = MPI_Bcast(mine, ib, MPI_BYTE, n->root, comm);
      if (bytes) memcpy(n->recv, mine, bytes);
      break;
    case CG_NODE_ALLGATHER:
      if (bytes) memcpy(mine, n->send, bytes);
      err = MPI_Allgather(mine, ib, MPI_BYTE, all, ib, MPI_BYTE, comm);
      if (bytes) memcpy(n->recv, all, bytes * (size_t)size);
      break;
    case CG_NODE_ALLTOALL:
      if (bytes) memcpy(mine, n->send, bytes * (size_t)size);
      err = MPI_Alltoall(mine, ib, MPI_BYTE, all, ib, MPI_BYTE, comm);
      if (bytes) memcpy(n->recv, all, bytes * (size_t)size);
      break;
    case CG_NODE_GATHER:
      if (bytes) memcpy(mine, n->send, bytes);
      err = MPI_Gather(mine, ib, MPI_BYTE, all, ib, MPI_BYTE, n->root, comm);
      if (is_root && bytes) memcpy(n->recv, all, bytes * (size_t)size);
      break;
    case CG_NODE_SCATTER:
      if (is_root && bytes) memcpy(mine, n->send, bytes * (size_t)size);
      err = MPI_Scatter(mine, ib, MPI_BYTE, all, ib, MPI_BYTE, n->root, comm);
      if (bytes) memcpy(n->recv, all, bytes);
      break;
    case CG_NODE_BARRIER:
      err = MPI_Barrier(comm);
      break;
    default:
      err = MPI_ERR_OTHER;
      break;
  }
  free(mine);
  free(all);
  return err;
}

cg_status_t cg_reference_run(const cg_graph_t *g) {
  pending_t p = {0};
  cg_status_t st = CG_SUCCESS;
  uint32_t n_nodes = cg_graph_node_count(g);
  p.cap = (int)(n_nodes ? n_nodes : 1);
  p.requests = checked_malloc((size_t)p.cap * sizeof *p.requests);
  p.lo = checked_malloc((size_t)p.cap * sizeof *p.lo);
  p.hi = checked_malloc((size_t)p.cap * sizeof *p.hi);
  p.writes = checked_malloc((size_t)p.cap * sizeof *p.writes);
  for (uint32_t i = 0; i < n_nodes && st == CG_SUCCESS; i++) {
    const cg_node_rec_t *n = cg_graph_node(g, i);
    MPI_Comm comm = MPI_COMM_NULL;
    if (n->comm && (st = cg_comm_mpi(&comm, n->comm)) != CG_SUCCESS) break;
    int err = MPI_SUCCESS;
    if (n->kind == CG_NODE_SEND || n->kind == CG_NODE_RECV) {
      int writes = n->kind == CG_NODE_RECV;
      const char *lo = writes ? (const char *)n->recv : (const char *)n->send;
      const char *hi = lo + n->count * cg_dtype_size(n->dtype);
      err = wait_conflicting(&p, lo, hi, writes);
      int bytes = (int)(n->count * cg_dtype_size(n->dtype));
      if (err == MPI_SUCCESS) {
        err = writes ? MPI_Irecv(n->recv, bytes, MPI_BYTE, n->root, 0, comm, &p.requests[p.n])
                     : MPI_Isend(n->send, bytes, MPI_BYTE, n->root, 0, comm, &p.requests[p.n]);
        p.lo[p.n] = lo;
        p.hi[p.n] = hi;
        p.writes[p.n] = writes;
        p.n++;
      }
    } else {
      err = wait_all(&p);
      if (err == MPI_SUCCESS) {
        if (n->kind == CG_NODE_HOST_FUNC)
          n->fn(n->arg);
        else if (n->comm)
          err = run_collective(n, comm);
        else
          st = CG_ERR_UNSUPPORTED;
      }
    }
    if (err != MPI_SUCCESS) st = CG_ERR_BACKEND;
  }
  if (st == CG_SUCCESS && wait_all(&p) != MPI_SUCCESS) st = CG_ERR_BACKEND;
  free(p.requests);
  free(p.lo);
  free(p.hi);
  free(p.writes);
  return st;
}
