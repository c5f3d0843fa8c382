/* One plan step as one nonblocking MPI call. In-place forms are NCCL's and map
 * onto MPI_IN_PLACE where MPI's meaning is the same; reduce_scatter in place
 * goes through a scratch buffer, because MPI's in-place reduce_scatter leaves
 * the result at the start of the buffer and overwrites bytes NCCL's form does
 * not touch. Average is a sum followed by a division on the ranks that receive
 * the result.
 *
 * A receive is a matched probe (MPI_Improbe, then MPI_Imrecv), not an
 * MPI_Irecv: a message longer than the receive would make MPI_Irecv's
 * MPI_Test fail with MPI_ERR_TRUNCATE, and MPICH raises that error on
 * MPI_COMM_WORLD's handler, which aborts the job by default, whatever handler
 * our duplicate has (mpi_check.h). Probing first, the backend sees the size
 * before receiving: a message that fits is received into the buffer; a longer
 * one is drained into scratch memory (so its sender completes) and the
 * receive fails with CG_ERR_BACKEND, the buffer left as it was. Probes match
 * as posted receives would: a receive is probed for only when every receive
 * started before it from the same peer with the same tag on the communicator
 * has matched (one queue per peer and tag, cg_mpi_comm_t.recv_queues). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "host_reduce.h"
#include "mpi_backend.h"

/* Where a receive is (see the top of the file). */
enum { RECV_IDLE, RECV_QUEUED, RECV_POSTED, RECV_DRAINING, RECV_FAILED };

typedef struct cg_mpi_step {
  MPI_Request request;
  void *scratch;     /* reduce_scatter in place: the result before it is copied */
  size_t scratch_bytes;
  void *divide;      /* average: where this rank's result lands, or NULL */
  /* a receive: its state, what it was started with, its place in its queue */
  int recv_state;
  void *recv_buf;
  int recv_count, peer, tag;
  MPI_Datatype recv_type;
  struct cg_mpi_step *next_queued;
  void *drain;          /* RECV_DRAINING: the longer message lands here */
  int arrived_bytes;    /* its size */
  int recv_error;       /* RECV_FAILED: the MPI error (MPI_ERR_NO_MEM: no drain memory) */
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
  m->recv_type = MPI_DATATYPE_NULL;
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

/* ---- receives through matched probes; the caller holds mc->recv_lock */

static cg_mpi_recv_queue_t *queue_of(cg_mpi_comm_t *mc, int peer, int tag) {
  for (size_t q = 0; q < mc->n_recv_queues; q++)
    if (mc->recv_queues[q].peer == peer && mc->recv_queues[q].tag == tag) return &mc->recv_queues[q];
  return NULL;
}

static void queue_drop_if_empty(cg_mpi_comm_t *mc, cg_mpi_recv_queue_t *q) {
  if (q->head) return;
  *q = mc->recv_queues[--mc->n_recv_queues];
}

static int enqueue(cg_mpi_comm_t *mc, mpi_step_t *m) {
  cg_mpi_recv_queue_t *q = queue_of(mc, m->peer, m->tag);
  if (!q) {
    if (mc->n_recv_queues == mc->recv_queues_cap) {
      size_t cap = mc->recv_queues_cap ? 2 * mc->recv_queues_cap : 8;
      cg_mpi_recv_queue_t *grown = realloc(mc->recv_queues, cap * sizeof *grown);
      if (!grown) return 0;
      mc->recv_queues = grown;
      mc->recv_queues_cap = cap;
    }
    q = &mc->recv_queues[mc->n_recv_queues++];
    *q = (cg_mpi_recv_queue_t){m->peer, m->tag, NULL, NULL};
  }
  m->next_queued = NULL;
  if (q->tail)
    q->tail->next_queued = m;
  else
    q->head = m;
  q->tail = m;
  m->recv_state = RECV_QUEUED;
  return 1;
}

/* Takes a queued receive out of its queue (a released step). */
static void dequeue(cg_mpi_comm_t *mc, mpi_step_t *m) {
  cg_mpi_recv_queue_t *q = queue_of(mc, m->peer, m->tag);
  if (!q) return;
  mpi_step_t *before = NULL;
  for (mpi_step_t *at = q->head; at; before = at, at = at->next_queued) {
    if (at != m) continue;
    if (before)
      before->next_queued = m->next_queued;
    else
      q->head = m->next_queued;
    if (q->tail == m) q->tail = before;
    break;
  }
  m->recv_state = RECV_IDLE;
  queue_drop_if_empty(mc, q);
}

/* The probe matched `message` for the head of its queue, m: receives it into
 * the buffer if it fits, else into drain memory. */
static void receive_matched(mpi_step_t *m, MPI_Message *message, const MPI_Status *status) {
  int bytes = 0, err = MPI_Get_count(status, MPI_BYTE, &bytes), size = 0;
  if (err == MPI_SUCCESS) err = MPI_Type_size(m->recv_type, &size);
  if (err == MPI_SUCCESS && bytes != MPI_UNDEFINED && (size_t)bytes <= (size_t)m->recv_count * (size_t)size) {
    err = MPI_Imrecv(m->recv_buf, m->recv_count, m->recv_type, message, &m->request);
    m->recv_state = err == MPI_SUCCESS ? RECV_POSTED : RECV_FAILED;
    m->recv_error = err;
    return;
  }
  if (err == MPI_SUCCESS && bytes == MPI_UNDEFINED) err = MPI_ERR_COUNT;
  if (err != MPI_SUCCESS) {
    /* its size unknown: the message stays with MPI and its sender may wait */
    m->recv_state = RECV_FAILED;
    m->recv_error = err;
    return;
  }
  /* longer than the receive: drained whole, in the sender's element type
   * where the bytes are whole elements of it */
  m->arrived_bytes = bytes;
  m->drain = malloc(bytes ? (size_t)bytes : 1);
  if (!m->drain) {
    m->recv_state = RECV_FAILED;
    m->recv_error = MPI_ERR_NO_MEM;
    return;
  }
  int whole = size > 0 && bytes % size == 0;
  err = MPI_Imrecv(m->drain, whole ? bytes / size : bytes, whole ? m->recv_type : MPI_BYTE, message, &m->request);
  if (err != MPI_SUCCESS) {
    free(m->drain);
    m->drain = NULL;
    m->recv_state = RECV_FAILED;
    m->recv_error = err;
    return;
  }
  m->recv_state = RECV_DRAINING;
}

/* Probes for the receives of m's queue, head first, until m has matched or
 * a probe finds nothing. Returns MPI_Improbe's error, if any. */
static int match_in_order(cg_mpi_comm_t *mc, mpi_step_t *m) {
  cg_mpi_recv_queue_t *q = queue_of(mc, m->peer, m->tag);
  int err = MPI_SUCCESS;
  while (q && m->recv_state == RECV_QUEUED) {
    mpi_step_t *head = q->head;
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    if ((err = MPI_Improbe(head->peer, head->tag, mc->data, &flag, &message, &status)) != MPI_SUCCESS || !flag) break;
    q->head = head->next_queued;
    if (!q->head) q->tail = NULL;
    head->next_queued = NULL;
    receive_matched(head, &message, &status);
    if (!q->head) {
      queue_drop_if_empty(mc, q);
      q = NULL;
    }
  }
  return err;
}

static cg_status_t recv_start(cg_mpi_comm_t *mc, const cg_step_t *s, mpi_step_t *m, MPI_Datatype type) {
  m->recv_buf = s->recv;
  m->recv_count = (int)s->count;
  m->recv_type = type;
  m->peer = s->root;
  m->tag = s->tag;
  m->drain = NULL;
  m->arrived_bytes = 0;
  m->recv_error = MPI_SUCCESS;
  mtx_lock(&mc->recv_lock);
  int queued = enqueue(mc, m);
  int err = queued ? match_in_order(mc, m) : MPI_SUCCESS;
  mtx_unlock(&mc->recv_lock);
  if (!queued) return cg_fail(CG_ERR_NO_MEMORY, "MPI_Improbe: queueing a receive from rank %d", s->root);
  if (err != MPI_SUCCESS) return cg_fail_mpi(err, "MPI_Improbe", "receive from rank %d", s->root);
  return CG_SUCCESS;
}

static cg_status_t recv_test(int *done, cg_mpi_comm_t *mc, const cg_step_t *s, mpi_step_t *m) {
  *done = 0;
  mtx_lock(&mc->recv_lock);
  int err = m->recv_state == RECV_QUEUED ? match_in_order(mc, m) : MPI_SUCCESS;
  int state = m->recv_state;
  mtx_unlock(&mc->recv_lock);
  if (err != MPI_SUCCESS) return cg_fail_mpi(err, "MPI_Improbe", "receive from rank %d", s->root);
  if (state == RECV_QUEUED || state == RECV_IDLE) {
    *done = state == RECV_IDLE; /* RECV_IDLE: not started */
    return CG_SUCCESS;
  }
  if (state == RECV_FAILED) {
    m->recv_state = RECV_IDLE;
    if (m->recv_error == MPI_ERR_NO_MEM)
      return cg_fail(CG_ERR_NO_MEMORY, "receive from rank %d: allocating %d bytes to drain a message longer than the "
                     "receive (%d elements)", s->root, m->arrived_bytes, m->recv_count);
    return cg_fail_mpi(m->recv_error, "MPI_Imrecv", "receive from rank %d", s->root);
  }
  MPI_Status status;
  int flag = 0;
  err = cg_mpi_request_error(MPI_Test(&m->request, &flag, &status), &status);
  if (err != MPI_SUCCESS) {
    if (m->request == MPI_REQUEST_NULL) { /* failed, so complete and freed */
      free(m->drain);
      m->drain = NULL;
      m->recv_state = RECV_IDLE;
    }
    return cg_fail_mpi(err, "MPI_Test", "receive from rank %d", s->root);
  }
  if (!flag) return CG_SUCCESS;
  m->recv_state = RECV_IDLE;
  if (state == RECV_DRAINING) {
    free(m->drain);
    m->drain = NULL;
    size_t es = cg_dtype_size(s->dtype);
    return cg_fail_mpi(MPI_ERR_TRUNCATE, "MPI_Imrecv",
                       "receive from rank %d truncated: a message of %d bytes arrived for a receive of %zu bytes "
                       "(%d elements of %s); the receive buffer is left as it was",
                       s->root, m->arrived_bytes, (size_t)m->recv_count * es, m->recv_count,
                       cg_dtype_name(s->dtype));
  }
  *done = 1;
  return CG_SUCCESS;
}

void cg_mpi_step_release(void *comm_impl, void *state) {
  mpi_step_t *m = state;
  if (!m) return;
  if (m->recv_type != MPI_DATATYPE_NULL && comm_impl) { /* a receive that ran */
    cg_mpi_comm_t *mc = comm_impl;
    mtx_lock(&mc->recv_lock);
    if (m->recv_state == RECV_QUEUED) dequeue(mc, m); /* never matched: MPI holds nothing of it */
    mtx_unlock(&mc->recv_lock);
  }
  if (m->request != MPI_REQUEST_NULL) {
    /* left in flight by a failed run: freeing an active collective request is
     * erroneous in MPI, and MPI may still write the scratch buffer, so what is
     * still in flight is left to MPI (a deliberate leak) */
    int done = 0, finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || MPI_Test(&m->request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) return;
  }
  free(m->drain);
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
    case CG_NODE_RECV: return "MPI_Imrecv";
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
      return recv_start(mc, s, m, type);
    case CG_NODE_BARRIER:
      err = MPI_Ibarrier(comm, &m->request);
      break;
    default:
      return cg_fail(CG_ERR_INTERNAL, "the MPI backend got a %s step", cg_node_kind_name(s->op_kind));
  }
  if (err != MPI_SUCCESS) {
    m->request = MPI_REQUEST_NULL;
    return s->op_kind == CG_NODE_SEND ? cg_fail_mpi(err, call, "send to rank %d", s->root) : cg_mpi_fail(err, call);
  }
  return CG_SUCCESS;
}

cg_status_t cg_mpi_step_test(int *done, void *comm_impl, const cg_step_t *s, void *state) {
  mpi_step_t *m = state;
  if (s->op_kind == CG_NODE_RECV) return recv_test(done, comm_impl, s, m);
  int flag = 0;
  MPI_Status status;
  int err = cg_mpi_request_error(MPI_Test(&m->request, &flag, &status), &status);
  if (err != MPI_SUCCESS) {
    if (s->op_kind == CG_NODE_SEND) return cg_fail_mpi(err, "MPI_Test", "send to rank %d", s->root);
    return cg_fail_mpi(err, "MPI_Test", "%s", cg_mpi_step_call(s));
  }
  if (flag) {
    if (m->scratch) memcpy(s->recv, m->scratch, m->scratch_bytes);
    if (m->divide) cg_host_divide(m->divide, s->count, s->dtype, s->comm->size);
  }
  *done = flag;
  return CG_SUCCESS;
}
