/* The helpers the record suite's two files share (record_support.h says what
 * each does): recording a call on a communicator, random calls with buffers
 * of their own, and the checks of what the graph stored. */
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "record_support.h"
#include "test_support.h"

cg_status_t record_on_comm(cg_node_t *out, cg_graph_t *g, cg_comm_t *c, const call_t *k) {
  call_t on_comm = *k;
  on_comm.comm = c;
  return cg_test_record(out, g, &on_comm);
}

size_t record_expected_bytes(cg_node_kind_t k, size_t count, cg_dtype_t dt, int size, int rank, int root) {
  size_t per_rank = count * cg_dtype_size(dt), n = (size_t)size;
  switch (k) {
    case CG_NODE_ALLREDUCE: case CG_NODE_REDUCE: case CG_NODE_ALLGATHER: case CG_NODE_GATHER: case CG_NODE_SEND:
      return per_rank;
    case CG_NODE_REDUCE_SCATTER: case CG_NODE_ALLTOALL: return per_rank * n;
    case CG_NODE_SCATTER: return rank == root ? per_rank * n : 0;
    case CG_NODE_BROADCAST: return rank == root ? per_rank : 0;
    default: return 0; /* recv, barrier, host functions */
  }
}

static void *pool_alloc(pool_t *p, size_t bytes) {
  ck_assert_uint_lt(p->n, sizeof p->items / sizeof p->items[0]);
  void *b = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(b);
  p->items[p->n++] = b;
  return b;
}
void record_pool_free(pool_t *p) {
  for (size_t i = 0; i < p->n; i++) free(p->items[i]);
  p->n = 0;
}

int record_rand_size(void) { return cg_test_below(8) ? 1 + (int)cg_test_below(8) : 9 + (int)cg_test_below(60); }

call_t record_random_call(pool_t *p, cg_node_kind_t k, int size, int rank) {
  call_t c = {.kind = k, .dtype = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT)};
  c.count = cg_test_below(6) ? 1 + cg_test_below(100) : 0;
  c.op = cg_test_kind_has_op(k) ? (cg_redop_t)cg_test_below(CG_REDOP_COUNT) : CG_SUM;
  c.root = -1;
  if (cg_test_kind_is_rooted(k) || cg_test_kind_is_p2p(k)) c.root = cg_test_below(2) ? rank : (int)cg_test_below((uint64_t)size);
  size_t es = cg_dtype_size(c.dtype);
  if (k == CG_NODE_RECV) {
    c.recv = pool_alloc(p, c.count * es);
  } else if (k == CG_NODE_SEND) {
    c.send = pool_alloc(p, c.count * es);
  } else if (k != CG_NODE_BARRIER && k != CG_NODE_HOST_FUNC) {
    c.send = pool_alloc(p, cg_test_send_elems(k, c.count, size, c.root, c.root) * es + 1);
    c.recv = pool_alloc(p, cg_test_recv_elems(k, c.count, size, c.root, c.root) * es + 1);
  }
  if (k == CG_NODE_BARRIER || k == CG_NODE_HOST_FUNC) c.count = 0;
  if (k == CG_NODE_HOST_FUNC) c.send = pool_alloc(p, 1); /* the argument */
  return c;
}

void record_check_node(const cg_graph_t *g, uint32_t index, const cg_comm_t *comm, const call_t *c) {
  ck_assert_uint_lt(index, cg_graph_node_count(g));
  const cg_node_rec_t *n = cg_graph_node(g, index);
  ck_assert_int_eq(n->kind, c->kind);
  ck_assert_ptr_null(n->name);
  if (c->kind == CG_NODE_HOST_FUNC) {
    ck_assert_ptr_null(n->comm);
    ck_assert_int_eq(n->root, -1);
    ck_assert_ptr_eq((void *)n->fn, (void *)cg_test_noop);
    ck_assert_ptr_eq(n->arg, c->send);
    return;
  }
  ck_assert_ptr_eq(n->comm, comm);
  ck_assert_ptr_null((void *)n->fn);
  if (c->kind == CG_NODE_BARRIER) {
    ck_assert_int_eq(n->is_fence, 1);
    ck_assert_int_eq(n->root, -1);
    ck_assert_uint_eq(n->count, 0);
    ck_assert_ptr_null(n->send);
    ck_assert_ptr_null(n->recv);
    return;
  }
  ck_assert_int_eq(n->is_fence, 0);
  ck_assert_uint_eq(n->count, c->count);
  ck_assert_int_eq(n->dtype, c->dtype);
  if (cg_test_kind_has_op(c->kind)) ck_assert_int_eq(n->op, c->op);
  ck_assert_int_eq(n->root, cg_test_kind_is_rooted(c->kind) || cg_test_kind_is_p2p(c->kind) ? c->root : -1);
  ck_assert_ptr_eq(n->send, c->kind == CG_NODE_RECV ? NULL : c->send);
  ck_assert_ptr_eq(n->recv, c->kind == CG_NODE_SEND ? NULL : c->recv);
}

void record_get_stats(cg_graph_stats_t *s, const cg_graph_t *g) {
  memset(s, 0, sizeof *s);
  ck_assert_cg_ok(cg_graph_stats(s, g));
}

int record_has_edge(const cg_edge_vec_t *v, uint32_t node, uint32_t causes) {
  for (uint32_t i = 0; i < v->len; i++)
    if (v->items[i].node == node) return v->items[i].causes == causes;
  return 0;
}

void record_expect_preds(const cg_graph_t *g, uint32_t index, const cg_edge_t *want, uint32_t n) {
  const cg_node_rec_t *r = cg_graph_node(g, index);
  ck_assert_msg(r->preds.len == n, "node #%u has %u predecessors, expected %u", index, r->preds.len, n);
  for (uint32_t i = 0; i < n; i++) {
    ck_assert_msg(record_has_edge(&r->preds, want[i].node, want[i].causes),
                  "node #%u: no edge from #%u with causes 0x%x", index, want[i].node, want[i].causes);
    ck_assert(record_has_edge(&cg_graph_node(g, want[i].node)->succs, index, want[i].causes));
  }
}
