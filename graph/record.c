/* The public recording calls: validate every argument, work out which bytes the
 * node reads and writes on this rank, then add it with its hazard edges. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "graph_internal.h"

typedef struct collective {
  const char *caller;
  cg_node_kind_t kind;
  cg_comm_t *comm;
  const void *send;
  void *recv;
  size_t count;
  cg_dtype_t dtype;
  cg_redop_t op;
  int has_op;
  int root;      /* root or peer */
  int root_kind; /* 0: none, 1: root, 2: peer */
} collective_t;

/* Where a failure happened, formatted only when one does:
 * "cg_allreduce: graph 'g' node #5 (rank 1 of 4): <detail>". */
typedef struct where {
  const cg_graph_t *graph; /* NULL when checking a compiled plan's node (cg_plan_rebind) */
  const collective_t *call;
  uint32_t node;           /* the node's index */
  int placement;           /* ask the communicator whether it can use the buffers */
} where_t;

static cg_status_t fail_at(const where_t *w, cg_status_t status, const char *fmt, ...) CG_PRINTF_LIKE(3, 4);
static cg_status_t fail_at(const where_t *w, cg_status_t status, const char *fmt, ...) {
  char detail[400], graph_name[300] = "";
  va_list args;
  va_start(args, fmt);
  vsnprintf(detail, sizeof detail, fmt, args);
  va_end(args);
  const cg_graph_t *g = w->graph;
  const collective_t *c = w->call;
  if (g && g->name) snprintf(graph_name, sizeof graph_name, "graph '%s' ", g->name);
  if (c->comm)
    return cg_fail(status, "%s: %snode #%u (rank %d of %d): %s", c->caller, graph_name, w->node, c->comm->rank,
                   c->comm->size, detail);
  return cg_fail(status, "%s: %snode #%u: %s", c->caller, graph_name, w->node, detail);
}

static int mul_overflows(size_t a, size_t b, size_t *out) {
  if (b && a > SIZE_MAX / b) return 1;
  *out = a * b;
  return 0;
}

static int spans_overlap(cg_span_t x, cg_span_t y) {
  return x.start < x.end && y.start < y.end && x.start < y.end && y.start < x.end;
}

/* What one rank of a collective touches, and which in-place form it allows. */
typedef struct layout {
  size_t send_elems; /* elements read from send, if used */
  size_t recv_elems; /* elements written to recv, if used */
  int uses_send;
  int uses_recv;
  int inplace_send_in_recv; /* in place: send == recv + offset_elems */
  int inplace_recv_in_send; /* in place: recv == send + offset_elems */
  size_t offset_elems;
} layout_t;

static int layout_of(const collective_t *c, layout_t *l) {
  size_t n = (size_t)c->comm->size, count = c->count;
  int rank = c->comm->rank, is_root = rank == c->root;
  size_t all = 0;
  *l = (layout_t){0};
  int scales_with_ranks = c->kind == CG_NODE_ALLGATHER || c->kind == CG_NODE_REDUCE_SCATTER ||
                          c->kind == CG_NODE_ALLTOALL || c->kind == CG_NODE_GATHER || c->kind == CG_NODE_SCATTER;
  if (scales_with_ranks && mul_overflows(count, n, &all)) return -1;
  switch (c->kind) {
    case CG_NODE_ALLREDUCE:
      *l = (layout_t){count, count, 1, 1, 1, 0, 0};
      break;
    case CG_NODE_BROADCAST:
      *l = (layout_t){count, count, is_root, 1, is_root, 0, 0};
      break;
    case CG_NODE_REDUCE:
      *l = (layout_t){count, count, 1, is_root, is_root, 0, 0};
      break;
    case CG_NODE_ALLGATHER:
      *l = (layout_t){count, all, 1, 1, 1, 0, (size_t)rank * count};
      break;
    case CG_NODE_REDUCE_SCATTER:
      *l = (layout_t){all, count, 1, 1, 0, 1, (size_t)rank * count};
      break;
    case CG_NODE_ALLTOALL:
      *l = (layout_t){all, all, 1, 1, 0, 0, 0};
      break;
    case CG_NODE_GATHER:
      *l = (layout_t){count, all, 1, is_root, is_root, 0, (size_t)c->root * count};
      break;
    case CG_NODE_SCATTER:
      *l = (layout_t){all, count, is_root, 1, 0, is_root, (size_t)c->root * count};
      break;
    case CG_NODE_SEND:
      *l = (layout_t){count, 0, 1, 0, 0, 0, 0};
      break;
    case CG_NODE_RECV:
      *l = (layout_t){0, count, 0, 1, 0, 0, 0};
      break;
    default:
      break;
  }
  return 0;
}

/* Checks a buffer of `elems` elements: present when it has bytes, not
 * running off the end of the address space, and memory the communicator can
 * use (a device pointer on a host communicator fails here, not in MPI). */
static cg_status_t check_buffer(const where_t *where, const char *what, const void *ptr, size_t elems, size_t elem_size,
                                cg_span_t *span) {
  size_t bytes;
  if (mul_overflows(elems, elem_size, &bytes))
    return fail_at(where, CG_ERR_OVERFLOW, "%s of %zu elements of %zu bytes overflows size_t", what, elems,
                   elem_size);
  if (bytes && !ptr)
    return fail_at(where, CG_ERR_INVALID_ARGUMENT, "%s is NULL but holds %zu bytes", what, bytes);
  uintptr_t start = (uintptr_t)ptr;
  if (bytes > UINTPTR_MAX - start)
    return fail_at(where, CG_ERR_OVERFLOW, "%s at %p plus %zu bytes runs past the end of memory", what, ptr,
                   bytes);
  const cg_comm_t *comm = where->call->comm;
  char why[200];
  int placed_wrong = where->placement && bytes && comm && comm->ops && comm->ops->memory_fits &&
                     comm->ops->memory_fits(comm->device, ptr, why, sizeof why) != 0;
  if (placed_wrong)
    return fail_at(where, CG_ERR_INVALID_ARGUMENT, "%s %p %s", what, ptr, why);
  *span = (cg_span_t){start, start + bytes};
  return CG_SUCCESS;
}

static cg_status_t check_alias(const where_t *where, const collective_t *c, const layout_t *l, size_t elem_size,
                               cg_span_t send, cg_span_t recv) {
  if (!l->uses_send || !l->uses_recv || !spans_overlap(send, recv)) return CG_SUCCESS;
  uintptr_t offset = (uintptr_t)(l->offset_elems * elem_size);
  if (l->inplace_send_in_recv && send.start == recv.start + offset && send.end <= recv.end) return CG_SUCCESS;
  if (l->inplace_recv_in_send && recv.start == send.start + offset && recv.end <= send.end) return CG_SUCCESS;
  char allowed[96];
  if (l->inplace_send_in_recv && l->offset_elems)
    snprintf(allowed, sizeof allowed, "in place needs send == recv + %zu elements", l->offset_elems);
  else if (l->inplace_recv_in_send && l->offset_elems)
    snprintf(allowed, sizeof allowed, "in place needs recv == send + %zu elements", l->offset_elems);
  else if (l->inplace_send_in_recv || l->inplace_recv_in_send)
    snprintf(allowed, sizeof allowed, "in place needs send == recv");
  else
    snprintf(allowed, sizeof allowed, "send and recv must not overlap");
  return fail_at(where, CG_ERR_ALIAS, "%s send [%p, +%zu) and recv [%p, +%zu) overlap; %s",
                 cg_node_kind_name(c->kind), (void *)send.start, (size_t)(send.end - send.start), (void *)recv.start,
                 (size_t)(recv.end - recv.start), allowed);
}

/* The bytes a collective reads (spans[0]) and writes (spans[1]) on this rank,
 * after checking its buffers and their aliasing. */
static cg_status_t check_buffers(cg_span_t spans[2], const where_t *where, const collective_t *c) {
  layout_t l;
  size_t elem_size = cg_dtype_size(c->dtype);
  if (layout_of(c, &l) != 0)
    return fail_at(where, CG_ERR_OVERFLOW, "count %zu times %d ranks overflows size_t", c->count, c->comm->size);
  cg_status_t st = CG_SUCCESS;
  if (l.uses_send) st = check_buffer(where, c->kind == CG_NODE_SEND ? "buf" : "send", c->send, l.send_elems,
                                     elem_size, &spans[0]);
  if (st == CG_SUCCESS && l.uses_recv)
    st = check_buffer(where, c->kind == CG_NODE_RECV ? "buf" : "recv", c->recv, l.recv_elems, elem_size, &spans[1]);
  if (st == CG_SUCCESS) st = check_alias(where, c, &l, elem_size, spans[0], spans[1]);
  return st;
}

cg_status_t cg_collective_spans(cg_span_t spans[2], const cg_node_rec_t *n, uint32_t index, const char *caller,
                                int check_placement) {
  collective_t c = {.caller = caller, .kind = n->kind, .comm = n->comm, .send = n->send, .recv = n->recv,
                    .count = n->count, .dtype = n->dtype, .root = n->root};
  const where_t where = {NULL, &c, index, check_placement};
  spans[0] = spans[1] = (cg_span_t){0, 0};
  return check_buffers(spans, &where, &c);
}

static cg_status_t record_collective(cg_node_t *out, cg_graph_t *g, const collective_t *c) {
  if (!g) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: NULL graph", c->caller);
  const where_t where_data = {g, c, g->n_nodes, 1}, *where = &where_data;
  if (!c->comm) return fail_at(where, CG_ERR_INVALID_ARGUMENT, "NULL communicator");
  if ((unsigned)c->dtype >= CG_DTYPE_COUNT)
    return fail_at(where, CG_ERR_INVALID_ENUM, "unknown data type %d", (int)c->dtype);
  if (c->has_op && (unsigned)c->op >= CG_REDOP_COUNT)
    return fail_at(where, CG_ERR_INVALID_ENUM, "unknown reduction %d", (int)c->op);
  if (c->root_kind && (c->root < 0 || c->root >= c->comm->size))
    return fail_at(where, CG_ERR_OUT_OF_RANGE, "%s %d outside [0, %d)", c->root_kind == 1 ? "root" : "peer",
                   c->root, c->comm->size);
  cg_span_t spans[2] = {{0, 0}, {0, 0}}; /* read, write */
  cg_status_t st = check_buffers(spans, where, c);
  if (st != CG_SUCCESS) return st;

  cg_node_rec_t proto = {.kind = c->kind,
                         .comm = c->comm,
                         .send = c->send,
                         .recv = c->recv,
                         .count = c->count,
                         .dtype = c->dtype,
                         .op = c->has_op ? c->op : CG_SUM,
                         .root = c->root_kind ? c->root : -1};
  cg_access_set_t access = {&spans[0], spans[0].start < spans[0].end, &spans[1], spans[1].start < spans[1].end};
  return cg_graph_add_node(g, &proto, &access, out);
}

cg_status_t cg_allreduce(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm, const void *send, void *recv, size_t count,
                         cg_dtype_t dtype, cg_redop_t op) {
  collective_t c = {"cg_allreduce", CG_NODE_ALLREDUCE, comm, send, recv, count, dtype, op, 1, 0, 0};
  return record_collective(out, g, &c);
}

cg_status_t cg_broadcast(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm, const void *send, void *recv, size_t count,
                         cg_dtype_t dtype, int root) {
  collective_t c = {"cg_broadcast", CG_NODE_BROADCAST, comm, send, recv, count, dtype, CG_SUM, 0, root, 1};
  return record_collective(out, g, &c);
}

cg_status_t cg_reduce(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm, const void *send, void *recv, size_t count,
                      cg_dtype_t dtype, cg_redop_t op, int root) {
  collective_t c = {"cg_reduce", CG_NODE_REDUCE, comm, send, recv, count, dtype, op, 1, root, 1};
  return record_collective(out, g, &c);
}

cg_status_t cg_allgather(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm, const void *send, void *recv,
                         size_t send_count, cg_dtype_t dtype) {
  collective_t c = {"cg_allgather", CG_NODE_ALLGATHER, comm, send, recv, send_count, dtype, CG_SUM, 0, 0, 0};
  return record_collective(out, g, &c);
}

cg_status_t cg_reduce_scatter(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm, const void *send, void *recv,
                              size_t recv_count, cg_dtype_t dtype, cg_redop_t op) {
  collective_t c = {"cg_reduce_scatter", CG_NODE_REDUCE_SCATTER, comm, send, recv, recv_count, dtype, op, 1, 0, 0};
  return record_collective(out, g, &c);
}

cg_status_t cg_alltoall(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm, const void *send, void *recv,
                        size_t count_per_peer, cg_dtype_t dtype) {
  collective_t c = {"cg_alltoall", CG_NODE_ALLTOALL, comm, send, recv, count_per_peer, dtype, CG_SUM, 0, 0, 0};
  return record_collective(out, g, &c);
}

cg_status_t cg_gather(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm, const void *send, void *recv,
                      size_t send_count, cg_dtype_t dtype, int root) {
  collective_t c = {"cg_gather", CG_NODE_GATHER, comm, send, recv, send_count, dtype, CG_SUM, 0, root, 1};
  return record_collective(out, g, &c);
}

cg_status_t cg_scatter(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm, const void *send, void *recv,
                       size_t recv_count, cg_dtype_t dtype, int root) {
  collective_t c = {"cg_scatter", CG_NODE_SCATTER, comm, send, recv, recv_count, dtype, CG_SUM, 0, root, 1};
  return record_collective(out, g, &c);
}

cg_status_t cg_send(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm, const void *buf, size_t count, cg_dtype_t dtype,
                    int peer) {
  collective_t c = {"cg_send", CG_NODE_SEND, comm, buf, NULL, count, dtype, CG_SUM, 0, peer, 2};
  return record_collective(out, g, &c);
}

cg_status_t cg_recv(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm, void *buf, size_t count, cg_dtype_t dtype,
                    int peer) {
  collective_t c = {"cg_recv", CG_NODE_RECV, comm, NULL, buf, count, dtype, CG_SUM, 0, peer, 2};
  return record_collective(out, g, &c);
}

cg_status_t cg_barrier(cg_node_t *out, cg_graph_t *g, cg_comm_t *comm) {
  collective_t c = {.caller = "cg_barrier", .kind = CG_NODE_BARRIER, .comm = comm};
  if (!g) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_barrier: NULL graph");
  const where_t where_data = {g, &c, g->n_nodes, 0}, *where = &where_data;
  if (!comm) return fail_at(where, CG_ERR_INVALID_ARGUMENT, "NULL communicator");
  cg_node_rec_t proto = {.kind = CG_NODE_BARRIER, .comm = comm, .dtype = CG_UINT8, .root = -1, .is_fence = 1};
  return cg_graph_add_node(g, &proto, NULL, out);
}

/* ---- nodes that run user code */

static cg_status_t convert_ranges(const where_t *where, const char *what, const cg_range_t *ranges, size_t n,
                                  cg_span_t *spans) {
  for (size_t i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "%s[%zu]", what, i);
    cg_status_t st = check_buffer(where, name, ranges[i].ptr, ranges[i].bytes, 1, &spans[i]);
    if (st != CG_SUCCESS) return st;
  }
  return CG_SUCCESS;
}

cg_status_t cg_graph_record_user_node(cg_node_t *out, cg_graph_t *g, const cg_node_rec_t *proto,
                                      const cg_access_t *access, const char *caller) {
  cg_status_t st = CG_SUCCESS;
  cg_span_t *spans = NULL;
  collective_t c = {.caller = caller, .kind = proto->kind};
  const where_t where_data = {g, &c, g->n_nodes, 0}, *where = &where_data;
  cg_node_rec_t node = *proto;
  node.root = -1;
  node.is_fence = !access || access->everything;
  if (access && access->size != sizeof(cg_access_t)) {
    st = fail_at(where, CG_ERR_INVALID_ARGUMENT, "access.size is %zu, expected %zu: initialize it with CG_ACCESS_INIT",
                 access->size, sizeof(cg_access_t));
    goto out;
  }
  cg_access_set_t set = {0};
  if (!node.is_fence) {
    if ((access->n_reads && !access->reads) || (access->n_writes && !access->writes)) {
      int reads_missing = access->n_reads && !access->reads;
      st = fail_at(where, CG_ERR_INVALID_ARGUMENT, "access.%s is NULL but n_%s is %zu",
                   reads_missing ? "reads" : "writes", reads_missing ? "reads" : "writes",
                   reads_missing ? access->n_reads : access->n_writes);
      goto out;
    }
    if (access->n_reads > SIZE_MAX / 2 / sizeof *spans || access->n_writes > SIZE_MAX / 2 / sizeof *spans) {
      st = fail_at(where, CG_ERR_OVERFLOW, "%zu read and %zu write ranges", access->n_reads, access->n_writes);
      goto out;
    }
    size_t n = access->n_reads + access->n_writes;
    spans = malloc((n ? n : 1) * sizeof *spans);
    if (!spans) {
      st = fail_at(where, CG_ERR_NO_MEMORY, "copying %zu access ranges", n);
      goto out;
    }
    if ((st = convert_ranges(where, "reads", access->reads, access->n_reads, spans)) != CG_SUCCESS ||
        (st = convert_ranges(where, "writes", access->writes, access->n_writes, spans + access->n_reads)) !=
            CG_SUCCESS)
      goto out;
    size_t reads = cg_span_normalize(spans, access->n_reads);
    size_t writes = cg_span_normalize(spans + access->n_reads, access->n_writes);
    /* the node keeps them (cg_plan_rebind checks overlaps against them), reads then writes */
    memmove(spans + reads, spans + access->n_reads, writes * sizeof *spans);
    set = (cg_access_set_t){spans, reads, spans + reads, writes};
    node.spans = spans;
    node.n_read_spans = (uint32_t)reads;
    node.n_write_spans = (uint32_t)writes;
    if (reads + writes > UINT32_MAX) {
      st = fail_at(where, CG_ERR_OVERFLOW, "%zu read and %zu write ranges", reads, writes);
      goto out;
    }
  }
  st = cg_graph_add_node(g, &node, &set, out);
  if (st == CG_SUCCESS) spans = NULL; /* the node owns them */
out:
  free(spans);
  return st;
}

cg_status_t cg_host_func(cg_node_t *out, cg_graph_t *g, cg_host_fn_t fn, void *arg, const cg_access_t *access) {
  if (!g) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_host_func: NULL graph");
  if (!fn) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_host_func: node #%u: NULL function", g->n_nodes);
  cg_node_rec_t proto = {.kind = CG_NODE_HOST_FUNC, .dtype = CG_UINT8, .fn = fn, .arg = arg};
  return cg_graph_record_user_node(out, g, &proto, access, "cg_host_func");
}
