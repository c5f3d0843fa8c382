/* Recording: every node kind stores what it was given, in-place forms and
 * unused buffers are accepted, handles, names, explicit edges, statistics and
 * the lifetime of communicators. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "test_support.h"

static void other_fn(void *arg) { (void)arg; }

typedef cg_test_call_t call_t;

static cg_status_t record(cg_node_t *out, cg_graph_t *g, cg_comm_t *c, const call_t *k) {
  call_t on_comm = *k;
  on_comm.comm = c;
  return cg_test_record(out, g, &on_comm);
}


/* cg_graph_stats bytes: what this rank contributes (graph.c node_bytes). */
static size_t expected_bytes(cg_node_kind_t k, size_t count, cg_dtype_t dt, int size, int rank, int root) {
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

/* Buffers handed out during one test, freed at its end. */
typedef struct pool {
  void *items[4096];
  size_t n;
} pool_t;

static void *pool_alloc(pool_t *p, size_t bytes) {
  ck_assert_uint_lt(p->n, sizeof p->items / sizeof p->items[0]);
  void *b = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(b);
  p->items[p->n++] = b;
  return b;
}
static void pool_free(pool_t *p) {
  for (size_t i = 0; i < p->n; i++) free(p->items[i]);
  p->n = 0;
}

static int rand_size(void) { return cg_test_below(8) ? 1 + (int)cg_test_below(8) : 9 + (int)cg_test_below(60); }

/* A random call of kind `k` with its own buffers; the root is this rank half
 * of the time. */
static call_t random_call(pool_t *p, cg_node_kind_t k, int size, int rank) {
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

static void check_node(const cg_graph_t *g, uint32_t index, const cg_comm_t *comm, const call_t *c) {
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

static void get_stats(cg_graph_stats_t *s, const cg_graph_t *g) {
  memset(s, 0, sizeof *s);
  ck_assert_cg_ok(cg_graph_stats(s, g));
}

/* The edge to `node` in v has exactly `causes` (0 if there is none). */
static int has_edge(const cg_edge_vec_t *v, uint32_t node, uint32_t causes) {
  for (uint32_t i = 0; i < v->len; i++)
    if (v->items[i].node == node) return v->items[i].causes == causes;
  return 0;
}

/* Node `index` has exactly the predecessors want[0..n), with exactly those causes. */
static void expect_preds(const cg_graph_t *g, uint32_t index, const cg_edge_t *want, uint32_t n) {
  const cg_node_rec_t *r = cg_graph_node(g, index);
  ck_assert_msg(r->preds.len == n, "node #%u has %u predecessors, expected %u", index, r->preds.len, n);
  for (uint32_t i = 0; i < n; i++) {
    ck_assert_msg(has_edge(&r->preds, want[i].node, want[i].causes), "node #%u: no edge from #%u with causes 0x%x",
                  index, want[i].node, want[i].causes);
    ck_assert(has_edge(&cg_graph_node(g, want[i].node)->succs, index, want[i].causes));
  }
}

/* Records 1..6 nodes of kind `k` on random communicators and checks every
 * stored field, the handles and the statistics. */
static void check_kind_fields(cg_node_kind_t k, uint64_t salt) {
  cg_test_reseed(salt);
  pool_t *p = calloc(1, sizeof *p);
  for (int trial = 0; trial < 40; trial++) {
    int size = rand_size(), rank = (int)cg_test_below((uint64_t)size);
    cg_comm_t *comm = NULL;
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_comm_create_offline(&comm, rank, size));
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    size_t n_nodes = 1 + cg_test_below(6), bytes = 0;
    call_t calls[6];
    for (size_t i = 0; i < n_nodes; i++) {
      calls[i] = random_call(p, k, size, rank);
      cg_node_t h = {0, 12345};
      ck_assert_cg_ok(record(&h, g, comm, &calls[i]));
      ck_assert_uint_eq(h.graph, g->serial);
      ck_assert_uint_eq(h.index, i);
      bytes += expected_bytes(k, calls[i].count, calls[i].dtype, size, rank, calls[i].root);
    }
    ck_assert_uint_eq(cg_graph_node_count(g), n_nodes);
    for (size_t i = 0; i < n_nodes; i++) check_node(g, (uint32_t)i, comm, &calls[i]);
    cg_graph_stats_t s;
    get_stats(&s, g);
    ck_assert_uint_eq(s.nodes, n_nodes);
    for (int kk = 0; kk < CG_NODE_KIND_COUNT; kk++) ck_assert_uint_eq(s.nodes_by_kind[kk], kk == (int)k ? n_nodes : 0);
    ck_assert_uint_eq(s.bytes, bytes);
    /* separate buffers: no hazards. Fences (barriers, host functions) form a
     * chain; so do the collectives of one communicator, barriers included (one
     * edge per pair, both causes). Sends and receives follow the previous
     * collective, and there is none. */
    int fence = k == CG_NODE_BARRIER || k == CG_NODE_HOST_FUNC;
    int ordered = k != CG_NODE_HOST_FUNC && !cg_test_kind_is_p2p(k);
    uint32_t chain = (fence ? CG_EDGE_FENCE : 0) | (ordered ? CG_EDGE_COMM_ORDER : 0);
    ck_assert_uint_eq(s.edges, chain ? n_nodes - 1 : 0);
    ck_assert_uint_eq(s.fence_edges, fence ? n_nodes - 1 : 0);
    ck_assert_uint_eq(s.comm_order_edges, ordered ? n_nodes - 1 : 0);
    ck_assert_uint_eq(s.raw_edges + s.war_edges + s.waw_edges + s.explicit_edges, 0);
    for (uint32_t i = 0; i < n_nodes; i++) expect_preds(g, i, &(cg_edge_t){i - 1, chain}, i && chain ? 1 : 0);
    if (k != CG_NODE_HOST_FUNC) ck_assert_int_eq(atomic_load(&comm->refs), 2);
    cg_graph_destroy(g);
    cg_comm_destroy(comm);
    pool_free(p);
  }
  free(p);
}

START_TEST(record__allreduce_fields) { check_kind_fields(CG_NODE_ALLREDUCE, 101); }
END_TEST
START_TEST(record__broadcast_fields) { check_kind_fields(CG_NODE_BROADCAST, 102); }
END_TEST
START_TEST(record__reduce_fields) { check_kind_fields(CG_NODE_REDUCE, 103); }
END_TEST
START_TEST(record__allgather_fields) { check_kind_fields(CG_NODE_ALLGATHER, 104); }
END_TEST
START_TEST(record__reduce_scatter_fields) { check_kind_fields(CG_NODE_REDUCE_SCATTER, 105); }
END_TEST
START_TEST(record__alltoall_fields) { check_kind_fields(CG_NODE_ALLTOALL, 106); }
END_TEST
START_TEST(record__gather_fields) { check_kind_fields(CG_NODE_GATHER, 107); }
END_TEST
START_TEST(record__scatter_fields) { check_kind_fields(CG_NODE_SCATTER, 108); }
END_TEST
START_TEST(record__send_fields) { check_kind_fields(CG_NODE_SEND, 109); }
END_TEST
START_TEST(record__recv_fields) { check_kind_fields(CG_NODE_RECV, 110); }
END_TEST
START_TEST(record__barrier_fields) { check_kind_fields(CG_NODE_BARRIER, 111); }
END_TEST
START_TEST(record__host_func_fields) { check_kind_fields(CG_NODE_HOST_FUNC, 112); }
END_TEST

START_TEST(record__host_func_fence_unless_access_declared) {
  cg_test_reseed(113);
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  int x[16], y[16], arg;
  cg_range_t reads[] = {{x, sizeof x}}, writes[] = {{y, sizeof y}, {NULL, 0}};
  cg_access_t everything = CG_ACCESS_INIT;
  ck_assert_uint_eq(everything.size, sizeof(cg_access_t));
  ck_assert_int_eq(everything.everything, 1);
  cg_access_t declared = CG_ACCESS_INIT;
  declared.everything = 0;
  declared.reads = reads;
  declared.n_reads = 1;
  declared.writes = writes;
  declared.n_writes = 2;
  cg_access_t nothing = CG_ACCESS_INIT;
  nothing.everything = 0;
  cg_node_t h[4];
  ck_assert_cg_ok(cg_host_func(&h[0], g, cg_test_noop, &arg, NULL));
  ck_assert_cg_ok(cg_host_func(&h[1], g, other_fn, NULL, &everything));
  ck_assert_cg_ok(cg_host_func(&h[2], g, cg_test_noop, x, &declared));
  ck_assert_cg_ok(cg_host_func(&h[3], g, other_fn, y, &nothing));
  const int fence[] = {1, 1, 0, 0};
  for (uint32_t i = 0; i < 4; i++) {
    ck_assert_uint_eq(h[i].index, i);
    const cg_node_rec_t *n = cg_graph_node(g, i);
    ck_assert_int_eq(n->kind, CG_NODE_HOST_FUNC);
    ck_assert_int_eq(n->is_fence, fence[i]);
    ck_assert_ptr_null(n->comm);
    ck_assert_int_eq(n->root, -1);
  }
  ck_assert_ptr_eq((void *)cg_graph_node(g, 1)->fn, (void *)other_fn);
  ck_assert_ptr_eq(cg_graph_node(g, 0)->arg, &arg);
  ck_assert_ptr_eq(cg_graph_node(g, 2)->arg, x);
  cg_graph_stats_t s;
  get_stats(&s, g);
  ck_assert_uint_eq(s.nodes_by_kind[CG_NODE_HOST_FUNC], 4);
  ck_assert_uint_eq(s.bytes, 0);
  /* 0 -> 1 (fence), 1 -> 2 and 1 -> 3 (after the fence) */
  ck_assert_uint_eq(s.edges, 3);
  ck_assert_uint_eq(s.fence_edges, 3);
  ck_assert_uint_eq(s.comm_order_edges, 0); /* no communicator */
  cg_graph_destroy(g);
}
END_TEST

/* ---- in-place forms and unused buffers */

START_TEST(record__inplace_forms_accepted) {
  cg_test_reseed(201);
  static const cg_node_kind_t kinds[] = {CG_NODE_ALLREDUCE, CG_NODE_BROADCAST,      CG_NODE_REDUCE, CG_NODE_ALLGATHER,
                                         CG_NODE_REDUCE_SCATTER, CG_NODE_GATHER, CG_NODE_SCATTER};
  for (int trial = 0; trial < 60; trial++) {
    int size = rand_size(), rank = (int)cg_test_below((uint64_t)size);
    cg_comm_t *comm = NULL;
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_comm_create_offline(&comm, rank, size));
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    char *bigs[sizeof kinds / sizeof kinds[0]];
    size_t bytes = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
      cg_node_kind_t k = kinds[i];
      call_t c = {.kind = k, .dtype = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT), .op = CG_MAX, .root = -1};
      c.count = 1 + cg_test_below(50);
      if (cg_test_kind_is_rooted(k)) c.root = rank; /* in place is a root's form */
      size_t es = cg_dtype_size(c.dtype), n = (size_t)size;
      char *big = malloc(c.count * n * es);
      switch (k) {
        case CG_NODE_ALLREDUCE: case CG_NODE_BROADCAST: case CG_NODE_REDUCE:
          c.send = big, c.recv = big;
          break;
        case CG_NODE_ALLGATHER: case CG_NODE_GATHER:
          c.recv = big, c.send = big + (size_t)rank * c.count * es;
          break;
        default: /* reduce_scatter, scatter */
          c.send = big, c.recv = big + (size_t)rank * c.count * es;
          break;
      }
      bigs[i] = big;
      cg_node_t h;
      ck_assert_cg_ok(record(&h, g, comm, &c));
      ck_assert_uint_eq(h.index, i);
      check_node(g, h.index, comm, &c);
      bytes += expected_bytes(k, c.count, c.dtype, size, rank, c.root);
      cg_graph_stats_t s;
      get_stats(&s, g);
      ck_assert_uint_eq(s.nodes, i + 1);
      ck_assert_uint_eq(s.nodes_by_kind[k], 1);
      ck_assert_uint_eq(s.bytes, bytes);
      /* each node has its own buffer: only the communicator's order chain */
      ck_assert_uint_eq(s.edges, i);
      ck_assert_uint_eq(s.comm_order_edges, i);
      ck_assert_uint_eq(s.raw_edges + s.war_edges + s.waw_edges + s.fence_edges + s.explicit_edges, 0);
      if (i) expect_preds(g, h.index, &(cg_edge_t){h.index - 1, CG_EDGE_COMM_ORDER}, 1);
    }
    cg_graph_destroy(g);
    cg_comm_destroy(comm);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) free(bigs[i]);
  }
}
END_TEST

START_TEST(record__unused_buffers_ignored) {
  cg_test_reseed(202);
  void *junk = (void *)(UINTPTR_MAX - 3); /* would run off the end of memory if it were used */
  for (int trial = 0; trial < 60; trial++) {
    int size = 2 + (int)cg_test_below(7), rank = (int)cg_test_below((uint64_t)size);
    int root = (rank + 1 + (int)cg_test_below((uint64_t)size - 1)) % size;
    ck_assert_int_ne(root, rank);
    cg_comm_t *comm = NULL;
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_comm_create_offline(&comm, rank, size));
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    cg_dtype_t dt = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
    size_t count = 1 + cg_test_below(64), es = cg_dtype_size(dt);
    char *buf = malloc(count * (size_t)size * es);
    void *unused[] = {NULL, junk, buf + es}; /* the last overlaps the used buffer partially */
    void *u = unused[trial % 3];
    call_t calls[] = {
        {CG_NODE_BROADCAST, comm, u, buf, count, dt, CG_SUM, root},
        {CG_NODE_SCATTER, comm, u, buf, count, dt, CG_SUM, root},
        {CG_NODE_REDUCE, comm, buf, u, count, dt, CG_PROD, root},
        {CG_NODE_GATHER, comm, buf, u, count, dt, CG_SUM, root},
    };
    size_t bytes = 0;
    for (uint32_t i = 0; i < 4; i++) {
      cg_node_t h;
      ck_assert_cg_ok(record(&h, g, comm, &calls[i]));
      ck_assert_uint_eq(h.index, i);
      check_node(g, i, comm, &calls[i]);
      bytes += expected_bytes(calls[i].kind, count, dt, size, rank, root);
    }
    cg_graph_stats_t s;
    get_stats(&s, g);
    ck_assert_uint_eq(s.bytes, bytes);
    ck_assert_uint_eq(s.bytes, 2 * count * es); /* reduce and gather send; broadcast and scatter nothing */
    /* only the used buffer makes hazards: scatter overwrites what broadcast
     * wrote, reduce and gather read it; plus the comm-order chain */
    ck_assert_uint_eq(s.edges, 4);
    ck_assert_uint_eq(s.comm_order_edges, 3);
    ck_assert_uint_eq(s.waw_edges, 1);
    ck_assert_uint_eq(s.raw_edges, 2);
    ck_assert_uint_eq(s.war_edges + s.fence_edges + s.explicit_edges, 0);
    expect_preds(g, 1, &(cg_edge_t){0, CG_EDGE_WAW | CG_EDGE_COMM_ORDER}, 1);
    expect_preds(g, 2, &(cg_edge_t){1, CG_EDGE_RAW | CG_EDGE_COMM_ORDER}, 1);
    expect_preds(g, 3, (cg_edge_t[]){{1, CG_EDGE_RAW}, {2, CG_EDGE_COMM_ORDER}}, 2);
    cg_graph_destroy(g);
    cg_comm_destroy(comm);
    free(buf);
  }
}
END_TEST

START_TEST(record__count_zero_null_buffers) {
  cg_test_reseed(203);
  for (int trial = 0; trial < 30; trial++) {
    int size = rand_size(), rank = (int)cg_test_below((uint64_t)size);
    cg_comm_t *comm = NULL;
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_comm_create_offline(&comm, rank, size));
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    for (uint32_t i = 0; i < CG_TEST_N_COMM_KINDS; i++) {
      call_t c = {.kind = cg_test_comm_kinds[i], .dtype = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT), .op = CG_MIN, .root = -1};
      if (cg_test_kind_is_rooted(c.kind) || cg_test_kind_is_p2p(c.kind)) c.root = (int)cg_test_below((uint64_t)size);
      cg_node_t h;
      ck_assert_cg_ok(record(&h, g, comm, &c));
      ck_assert_uint_eq(h.index, i);
      check_node(g, i, comm, &c);
    }
    cg_graph_stats_t s;
    get_stats(&s, g);
    ck_assert_uint_eq(s.nodes, CG_TEST_N_COMM_KINDS);
    ck_assert_uint_eq(s.bytes, 0);
    /* no bytes, no hazards: the eight collectives form a chain, and the send
     * and the receive (last) both follow the last collective */
    ck_assert_int_eq(cg_test_comm_kinds[CG_TEST_N_COMM_KINDS - 2], CG_NODE_SEND);
    ck_assert_int_eq(cg_test_comm_kinds[CG_TEST_N_COMM_KINDS - 1], CG_NODE_RECV);
    ck_assert_uint_eq(s.edges, CG_TEST_N_COMM_KINDS - 1);
    ck_assert_uint_eq(s.comm_order_edges, CG_TEST_N_COMM_KINDS - 1);
    for (uint32_t i = 1; i < CG_TEST_N_COMM_KINDS; i++)
      expect_preds(g, i, &(cg_edge_t){i < CG_TEST_N_COMM_KINDS - 2 ? i - 1 : CG_TEST_N_COMM_KINDS - 3,
                                      CG_EDGE_COMM_ORDER}, 1);
    cg_graph_destroy(g);
    cg_comm_destroy(comm);
  }
}
END_TEST

/* ---- handles */

START_TEST(record__out_may_be_null) {
  cg_test_reseed(301);
  pool_t *p = calloc(1, sizeof *p);
  cg_comm_t *comm = NULL;
  cg_graph_t *g = NULL;
  int size = rand_size(), rank = (int)cg_test_below((uint64_t)size);
  ck_assert_cg_ok(cg_comm_create_offline(&comm, rank, size));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  uint32_t expected = 0;
  for (int round = 0; round < 3; round++) {
    for (int k = 0; k <= CG_NODE_HOST_FUNC; k++) {
      call_t c = random_call(p, (cg_node_kind_t)k, size, rank);
      ck_assert_cg_ok(record(NULL, g, comm, &c));
      check_node(g, expected, comm, &c);
      expected++;
      ck_assert_uint_eq(cg_graph_node_count(g), expected);
    }
  }
  cg_node_t h;
  ck_assert_cg_ok(cg_barrier(&h, g, comm));
  ck_assert_uint_eq(h.index, expected);
  cg_graph_stats_t s;
  get_stats(&s, g);
  ck_assert_uint_eq(s.nodes, expected + 1);
  for (int k = 0; k < CG_NODE_KIND_COUNT; k++)
    ck_assert_uint_eq(s.nodes_by_kind[k], k == CG_NODE_BARRIER ? 4 : k <= CG_NODE_HOST_FUNC ? 3 : 0);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
  pool_free(p);
  free(p);
}
END_TEST

START_TEST(record__handles_in_record_order_per_graph) {
  cg_test_reseed(302);
  pool_t *p = calloc(1, sizeof *p);
  cg_comm_t *comm = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 0, 3));
  cg_graph_t *g[3];
  uint32_t next[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) ck_assert_cg_ok(cg_graph_create(&g[i], NULL));
  ck_assert_uint_ne(g[0]->serial, g[1]->serial);
  ck_assert_uint_ne(g[1]->serial, g[2]->serial);
  ck_assert_uint_ne(g[0]->serial, g[2]->serial);
  for (int step = 0; step < 300; step++) {
    int which = (int)cg_test_below(3);
    call_t c = random_call(p, (cg_node_kind_t)cg_test_below(CG_NODE_HOST_FUNC + 1), 3, 0);
    cg_node_t h = CG_NODE_NULL;
    ck_assert_cg_ok(record(&h, g[which], comm, &c));
    ck_assert_uint_ne(h.graph, 0);
    ck_assert_uint_eq(h.graph, g[which]->serial);
    ck_assert_uint_eq(h.index, next[which]);
    next[which]++;
  }
  for (int i = 0; i < 3; i++) {
    ck_assert_uint_eq(cg_graph_node_count(g[i]), next[i]);
    cg_graph_destroy(g[i]);
  }
  cg_comm_destroy(comm);
  pool_free(p);
  free(p);
}
END_TEST

START_TEST(record__mixed_sequence_stats) {
  cg_test_reseed(303);
  pool_t *p = calloc(1, sizeof *p);
  for (int trial = 0; trial < 10; trial++) {
    cg_comm_t *comms[3];
    int sizes[3], ranks[3];
    for (int i = 0; i < 3; i++) {
      sizes[i] = rand_size();
      ranks[i] = (int)cg_test_below((uint64_t)sizes[i]);
      ck_assert_cg_ok(cg_comm_create_offline(&comms[i], ranks[i], sizes[i]));
    }
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    size_t by_kind[CG_NODE_KIND_COUNT] = {0}, bytes = 0;
    int used[3] = {0, 0, 0};
    /* comm-order model per communicator: has a collective been recorded, and
     * how many sends and receives since the last one */
    int has_collective[3] = {0, 0, 0};
    size_t p2p_since[3] = {0, 0, 0}, order_edges = 0;
    int n = 20 + (int)cg_test_below(60);
    for (int i = 0; i < n; i++) {
      int ci = (int)cg_test_below(3);
      cg_node_kind_t k = (cg_node_kind_t)cg_test_below(CG_NODE_HOST_FUNC + 1);
      call_t c = random_call(p, k, sizes[ci], ranks[ci]);
      cg_node_t h;
      ck_assert_cg_ok(record(&h, g, comms[ci], &c));
      ck_assert_uint_eq(h.index, (uint32_t)i);
      check_node(g, h.index, comms[ci], &c);
      by_kind[k]++;
      bytes += expected_bytes(k, c.count, c.dtype, sizes[ci], ranks[ci], c.root);
      if (k != CG_NODE_HOST_FUNC) used[ci] = 1;
      if (cg_test_kind_is_p2p(k)) {
        order_edges += (size_t)has_collective[ci];
        p2p_since[ci]++;
      } else if (k != CG_NODE_HOST_FUNC) {
        order_edges += p2p_since[ci] ? p2p_since[ci] : (size_t)has_collective[ci];
        has_collective[ci] = 1;
        p2p_since[ci] = 0;
      }
    }
    cg_graph_stats_t s;
    get_stats(&s, g);
    ck_assert_uint_eq(s.nodes, (size_t)n);
    for (int k = 0; k < CG_NODE_KIND_COUNT; k++) ck_assert_uint_eq(s.nodes_by_kind[k], by_kind[k]);
    ck_assert_uint_eq(s.bytes, bytes);
    ck_assert_uint_eq(s.comm_order_edges, order_edges);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(atomic_load(&comms[i]->refs), 1 + used[i]);
    cg_graph_destroy(g);
    for (int i = 0; i < 3; i++) {
      ck_assert_int_eq(atomic_load(&comms[i]->refs), 1);
      cg_comm_destroy(comms[i]);
    }
    pool_free(p);
  }
  free(p);
}
END_TEST

/* ---- names */

START_TEST(record__node_name_copied_truncated_renamed) {
  cg_test_reseed(401);
  cg_comm_t *comm = NULL;
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 1, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  float a[8], b[8];
  cg_node_t n0, n1;
  ck_assert_cg_ok(cg_allreduce(&n0, g, comm, a, a, 8, CG_FLOAT32, CG_SUM));
  ck_assert_cg_ok(cg_send(&n1, g, comm, b, 8, CG_FLOAT32, 0));

  char name[64];
  snprintf(name, sizeof name, "grad_%u", (unsigned)cg_test_below(1000000));
  char saved[64];
  snprintf(saved, sizeof saved, "%s", name);
  ck_assert_cg_ok(cg_node_name(g, n0, name));
  ck_assert_ptr_ne(cg_graph_node(g, 0)->name, name);
  memset(name, 'Q', sizeof name - 1); /* the graph holds a copy */
  ck_assert_str_eq(cg_graph_node(g, 0)->name, saved);
  ck_assert_ptr_null(cg_graph_node(g, 1)->name);
  char *dot = cg_test_dot_text(g);
  ck_assert_ptr_nonnull(strstr(dot, saved));
  free(dot);

  /* renaming replaces */
  ck_assert_cg_ok(cg_node_name(g, n0, "second"));
  ck_assert_str_eq(cg_graph_node(g, 0)->name, "second");
  dot = cg_test_dot_text(g);
  ck_assert_ptr_null(strstr(dot, saved));
  ck_assert_ptr_nonnull(strstr(dot, "second"));
  free(dot);
  ck_assert_cg_ok(cg_node_name(g, n0, ""));
  ck_assert_str_eq(cg_graph_node(g, 0)->name, "");

  /* at most 255 bytes are kept */
  char long_name[600];
  for (size_t i = 0; i < sizeof long_name - 1; i++) long_name[i] = (char)('a' + cg_test_below(26));
  long_name[sizeof long_name - 1] = '\0';
  ck_assert_cg_ok(cg_node_name(g, n1, long_name));
  ck_assert_uint_eq(strlen(cg_graph_node(g, 1)->name), 255);
  ck_assert_int_eq(memcmp(cg_graph_node(g, 1)->name, long_name, 255), 0);
  long_name[255] = '\0';
  ck_assert_cg_ok(cg_node_name(g, n0, long_name));
  ck_assert_str_eq(cg_graph_node(g, 0)->name, long_name);
  long_name[254] = '\0';
  ck_assert_cg_ok(cg_node_name(g, n0, long_name));
  ck_assert_str_eq(cg_graph_node(g, 0)->name, long_name);

  /* names change nothing else: the send follows the allreduce on the communicator */
  cg_graph_stats_t s;
  get_stats(&s, g);
  ck_assert_uint_eq(s.nodes, 2);
  ck_assert_uint_eq(s.edges, 1);
  ck_assert_uint_eq(s.comm_order_edges, 1);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
}
END_TEST

/* ---- explicit edges */

START_TEST(record__depend_adds_edge_once) {
  cg_test_reseed(501);
  /* three communicators, so that no comm-order edge ties the nodes together */
  cg_comm_t *comm[3] = {NULL, NULL, NULL};
  cg_graph_t *g = NULL;
  for (int i = 0; i < 3; i++) ck_assert_cg_ok(cg_comm_create_offline(&comm[i], 0, 4));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  double a[16], b[16], c[16], d[16];
  cg_node_t n[4];
  ck_assert_cg_ok(cg_allreduce(&n[0], g, comm[0], a, b, 16, CG_FLOAT64, CG_SUM)); /* writes b */
  ck_assert_cg_ok(cg_allreduce(&n[1], g, comm[1], c, d, 16, CG_FLOAT64, CG_SUM)); /* independent */
  ck_assert_cg_ok(cg_send(&n[2], g, comm[2], b, 16, CG_FLOAT64, 1));              /* reads b: raw 0 -> 2 */
  ck_assert_cg_ok(cg_recv(&n[3], g, comm[2], a, 16, CG_FLOAT64, 3));              /* writes a: war 0 -> 3 */
  cg_graph_stats_t s0, s1, s2;
  get_stats(&s0, g);
  ck_assert_uint_eq(s0.edges, 2);
  ck_assert_uint_eq(s0.raw_edges, 1);
  ck_assert_uint_eq(s0.war_edges, 1);
  ck_assert_uint_eq(s0.explicit_edges, 0);
  ck_assert_uint_eq(s0.comm_order_edges, 0);

  /* a new forward edge */
  ck_assert_cg_ok(cg_depend(g, n[0], n[1]));
  get_stats(&s1, g);
  ck_assert_uint_eq(s1.edges, 3);
  ck_assert_uint_eq(s1.explicit_edges, 1);
  ck_assert(has_edge(&cg_graph_node(g, 0)->succs, 1, CG_EDGE_EXPLICIT));
  ck_assert(has_edge(&cg_graph_node(g, 1)->preds, 0, CG_EDGE_EXPLICIT));
  ck_assert_cg_ok(cg_depend(g, n[0], n[1]));
  get_stats(&s2, g);
  ck_assert_int_eq(memcmp(&s1, &s2, sizeof s1), 0);
  ck_assert_uint_eq(cg_graph_node(g, 0)->succs.len, 3);
  ck_assert_uint_eq(cg_graph_node(g, 1)->preds.len, 1);

  /* over an inferred edge: no new edge, one more cause */
  ck_assert_cg_ok(cg_depend(g, n[0], n[2]));
  get_stats(&s2, g);
  ck_assert_uint_eq(s2.edges, 3);
  ck_assert_uint_eq(s2.explicit_edges, 2);
  ck_assert_uint_eq(s2.raw_edges, 1);
  ck_assert(has_edge(&cg_graph_node(g, 0)->succs, 2, CG_EDGE_EXPLICIT | CG_EDGE_RAW));
  ck_assert(has_edge(&cg_graph_node(g, 2)->preds, 0, CG_EDGE_EXPLICIT | CG_EDGE_RAW));

  /* a backward edge between unordered nodes */
  ck_assert_cg_ok(cg_depend(g, n[3], n[1]));
  ck_assert_cg_ok(cg_depend(g, n[3], n[1]));
  get_stats(&s2, g);
  ck_assert_uint_eq(s2.edges, 4);
  ck_assert_uint_eq(s2.explicit_edges, 3);
  ck_assert(has_edge(&cg_graph_node(g, 3)->succs, 1, CG_EDGE_EXPLICIT));
  ck_assert_uint_eq(s2.nodes, 4);
  uint32_t order[4];
  ck_assert_cg_ok(cg_graph_topo_order(g, order));
  ck_assert_uint_eq(order[0], 0);
  ck_assert_uint_eq(order[1], 2);
  ck_assert_uint_eq(order[2], 3);
  ck_assert_uint_eq(order[3], 1);
  get_stats(&s2, g);
  ck_assert_uint_eq(s2.comm_order_edges, 0);
  cg_graph_destroy(g);
  for (int i = 0; i < 3; i++) cg_comm_destroy(comm[i]);
}
END_TEST

/* ---- comm-order edges */

START_TEST(record__comm_order_edges) {
  cg_test_reseed(502);
  cg_comm_t *ca = NULL, *cb = NULL;
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&ca, 0, 4));
  ck_assert_cg_ok(cg_comm_create_offline(&cb, 1, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  float x[8], y[8], gathered[32], w[32], s1[8], r1[8], s2[8], s3[8], u[8];
  cg_range_t reads[] = {{r1, sizeof r1}};
  cg_access_t reads_r1 = CG_ACCESS_INIT;
  reads_r1.everything = 0;
  reads_r1.reads = reads;
  reads_r1.n_reads = 1;
  cg_node_t n[11];
  ck_assert_cg_ok(cg_allreduce(&n[0], g, ca, x, x, 8, CG_FLOAT32, CG_SUM));           /* writes x */
  ck_assert_cg_ok(cg_allreduce(&n[1], g, cb, y, y, 8, CG_FLOAT32, CG_SUM));           /* another comm */
  ck_assert_cg_ok(cg_send(&n[2], g, ca, s1, 8, CG_FLOAT32, 1));                       /* follows 0 */
  ck_assert_cg_ok(cg_recv(&n[3], g, ca, r1, 8, CG_FLOAT32, 2));                       /* follows 0 */
  ck_assert_cg_ok(cg_send(&n[4], g, cb, s2, 8, CG_FLOAT32, 0));                       /* follows 1 */
  ck_assert_cg_ok(cg_allgather(&n[5], g, ca, x, gathered, 8, CG_FLOAT32));            /* after 2 and 3 */
  ck_assert_cg_ok(cg_host_func(&n[6], g, cg_test_noop, NULL, &reads_r1));             /* no comm */
  ck_assert_cg_ok(cg_allreduce(&n[7], g, ca, gathered, w, 32, CG_FLOAT32, CG_MAX));   /* raw + order */
  ck_assert_cg_ok(cg_barrier(&n[8], g, ca));                                          /* fence + order */
  ck_assert_cg_ok(cg_send(&n[9], g, cb, s3, 8, CG_FLOAT32, 1));                       /* follows 1 and 8 */
  ck_assert_cg_ok(cg_allreduce(&n[10], g, cb, u, u, 8, CG_FLOAT32, CG_SUM));          /* after 4 and 9 */
  for (uint32_t i = 0; i < 11; i++) ck_assert_uint_eq(n[i].index, i);

  const uint32_t O = CG_EDGE_COMM_ORDER, F = CG_EDGE_FENCE, R = CG_EDGE_RAW;
  expect_preds(g, 0, NULL, 0);
  expect_preds(g, 1, NULL, 0); /* the first collective on cb follows nothing on ca */
  expect_preds(g, 2, &(cg_edge_t){0, O}, 1);
  expect_preds(g, 3, &(cg_edge_t){0, O}, 1); /* not after the send: one group */
  expect_preds(g, 4, &(cg_edge_t){1, O}, 1);
  /* the group, not the collective before it; reading x still follows its writer */
  expect_preds(g, 5, (cg_edge_t[]){{0, R}, {2, O}, {3, O}}, 3);
  expect_preds(g, 6, &(cg_edge_t){3, R}, 1);
  expect_preds(g, 7, &(cg_edge_t){5, R | O}, 1); /* one edge, two causes */
  /* the barrier follows the sinks (4, 6, 7); 7 is also the previous collective */
  expect_preds(g, 8, (cg_edge_t[]){{4, F}, {6, F}, {7, F | O}}, 3);
  expect_preds(g, 9, (cg_edge_t[]){{1, O}, {8, F}}, 2);
  expect_preds(g, 10, (cg_edge_t[]){{4, O}, {9, O}}, 2); /* the group on cb since 1, across the fence */

  cg_graph_stats_t s;
  get_stats(&s, g);
  ck_assert_uint_eq(s.nodes, 11);
  ck_assert_uint_eq(s.edges, 15);
  ck_assert_uint_eq(s.comm_order_edges, 10);
  ck_assert_uint_eq(s.raw_edges, 3);
  ck_assert_uint_eq(s.fence_edges, 4);
  ck_assert_uint_eq(s.war_edges + s.waw_edges + s.explicit_edges, 0);

  /* an explicit edge over an order edge adds a cause, not an edge */
  ck_assert_cg_ok(cg_depend(g, n[2], n[5]));
  expect_preds(g, 5, (cg_edge_t[]){{0, R}, {2, O | CG_EDGE_EXPLICIT}, {3, O}}, 3);
  get_stats(&s, g);
  ck_assert_uint_eq(s.edges, 15);
  ck_assert_uint_eq(s.explicit_edges, 1);
  ck_assert_uint_eq(s.comm_order_edges, 10);
  /* the two sends of one group stay unordered: a backward edge between them is fine */
  ck_assert_cg_ok(cg_depend(g, n[3], n[2]));
  get_stats(&s, g);
  ck_assert_uint_eq(s.edges, 16);
  ck_assert_uint_eq(s.comm_order_edges, 10);
  cg_graph_destroy(g);
  cg_comm_destroy(ca);
  cg_comm_destroy(cb);
}
END_TEST

/* ---- communicator lifetime */

START_TEST(record__comm_outlives_its_destroy_while_graph_lives) {
  cg_test_reseed(601);
  int size = rand_size(), rank = (int)cg_test_below((uint64_t)size);
  cg_comm_t *comm = NULL, *other = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&comm, rank, size));
  ck_assert_cg_ok(cg_comm_create_offline(&other, 0, 1));
  cg_graph_t *g = NULL, *h = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_graph_create(&h, NULL));
  int buf[32], buf2[32];
  ck_assert_int_eq(atomic_load(&comm->refs), 1);
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, buf, buf, 32, CG_INT32, CG_SUM));
  ck_assert_int_eq(atomic_load(&comm->refs), 2);
  ck_assert_cg_ok(cg_barrier(NULL, g, comm)); /* the same graph holds one reference */
  ck_assert_cg_ok(cg_send(NULL, g, comm, buf2, 32, CG_INT32, size - 1));
  ck_assert_int_eq(atomic_load(&comm->refs), 2);
  ck_assert_cg_ok(cg_barrier(NULL, h, comm));
  ck_assert_int_eq(atomic_load(&comm->refs), 3);
  ck_assert_cg_ok(cg_recv(NULL, g, other, buf2, 32, CG_INT32, 0));
  ck_assert_int_eq(atomic_load(&other->refs), 2);
  cg_comm_destroy(comm);
  cg_comm_destroy(other);
  cg_graph_destroy(h);

  /* the graph still reads the communicator: ASan reports a use after free if not */
  ck_assert_int_eq(cg_graph_node(g, 0)->comm->rank, rank);
  ck_assert_int_eq(cg_graph_node(g, 0)->comm->size, size);
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  ck_assert_cg_ok(cg_graph_write_dot(g, f));
  long len = ftell(f);
  ck_assert_int_gt(len, 0);
  rewind(f);
  char *text = calloc(1, (size_t)len + 1);
  ck_assert_uint_eq(fread(text, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  char expect[64];
  snprintf(expect, sizeof expect, "rank %d of %d", rank, size);
  ck_assert_ptr_nonnull(strstr(text, expect));
  ck_assert_ptr_nonnull(strstr(text, "rank 0 of 1"));
  free(text);
  cg_graph_stats_t s;
  get_stats(&s, g);
  ck_assert_uint_eq(s.nodes, 4);
  cg_graph_destroy(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("record");
  TCase *tc = tcase_create("kinds");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, record__allreduce_fields);
  tcase_add_test(tc, record__broadcast_fields);
  tcase_add_test(tc, record__reduce_fields);
  tcase_add_test(tc, record__allgather_fields);
  tcase_add_test(tc, record__reduce_scatter_fields);
  tcase_add_test(tc, record__alltoall_fields);
  tcase_add_test(tc, record__gather_fields);
  tcase_add_test(tc, record__scatter_fields);
  tcase_add_test(tc, record__send_fields);
  tcase_add_test(tc, record__recv_fields);
  tcase_add_test(tc, record__barrier_fields);
  tcase_add_test(tc, record__host_func_fields);
  tcase_add_test(tc, record__host_func_fence_unless_access_declared);
  suite_add_tcase(s, tc);

  tc = tcase_create("buffers");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, record__inplace_forms_accepted);
  tcase_add_test(tc, record__unused_buffers_ignored);
  tcase_add_test(tc, record__count_zero_null_buffers);
  suite_add_tcase(s, tc);

  tc = tcase_create("handles");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, record__out_may_be_null);
  tcase_add_test(tc, record__handles_in_record_order_per_graph);
  tcase_add_test(tc, record__mixed_sequence_stats);
  tcase_add_test(tc, record__node_name_copied_truncated_renamed);
  tcase_add_test(tc, record__depend_adds_edge_once);
  tcase_add_test(tc, record__comm_order_edges);
  tcase_add_test(tc, record__comm_outlives_its_destroy_while_graph_lives);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
