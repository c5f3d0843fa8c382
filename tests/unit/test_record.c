/* Recording: every node kind stores what it was given, in-place forms and
 * unused buffers are accepted. This file has the "kinds" and "buffers" test
 * cases, the suite and main; test_record_handles.c has the "handles" test
 * case (handles, names, explicit edges, statistics and the lifetime of
 * communicators). */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "record_support.h"
#include "test_support.h"

static void other_fn(void *arg) { (void)arg; }

/* Records 1..6 nodes of kind `k` on random communicators and checks every
 * stored field, the handles and the statistics. */
static void check_kind_fields(cg_node_kind_t k, uint64_t salt) {
  cg_test_reseed(salt);
  pool_t *p = calloc(1, sizeof *p);
  for (int trial = 0; trial < 40; trial++) {
    int size = record_rand_size(), rank = (int)cg_test_below((uint64_t)size);
    cg_comm_t *comm = NULL;
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_comm_create_offline(&comm, rank, size));
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    size_t n_nodes = 1 + cg_test_below(6), bytes = 0;
    call_t calls[6];
    for (size_t i = 0; i < n_nodes; i++) {
      calls[i] = record_random_call(p, k, size, rank);
      cg_node_t h = {0, 12345};
      ck_assert_cg_ok(record_on_comm(&h, g, comm, &calls[i]));
      ck_assert_uint_eq(h.graph, g->serial);
      ck_assert_uint_eq(h.index, i);
      bytes += record_expected_bytes(k, calls[i].count, calls[i].dtype, size, rank, calls[i].root);
    }
    ck_assert_uint_eq(cg_graph_node_count(g), n_nodes);
    for (size_t i = 0; i < n_nodes; i++) record_check_node(g, (uint32_t)i, comm, &calls[i]);
    cg_graph_stats_t s;
    record_get_stats(&s, g);
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
    for (uint32_t i = 0; i < n_nodes; i++) record_expect_preds(g, i, &(cg_edge_t){i - 1, chain}, i && chain ? 1 : 0);
    if (k != CG_NODE_HOST_FUNC) ck_assert_int_eq(atomic_load(&comm->refs), 2);
    cg_graph_destroy(g);
    cg_comm_destroy(comm);
    record_pool_free(p);
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
  record_get_stats(&s, g);
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
    int size = record_rand_size(), rank = (int)cg_test_below((uint64_t)size);
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
      ck_assert_cg_ok(record_on_comm(&h, g, comm, &c));
      ck_assert_uint_eq(h.index, i);
      record_check_node(g, h.index, comm, &c);
      bytes += record_expected_bytes(k, c.count, c.dtype, size, rank, c.root);
      cg_graph_stats_t s;
      record_get_stats(&s, g);
      ck_assert_uint_eq(s.nodes, i + 1);
      ck_assert_uint_eq(s.nodes_by_kind[k], 1);
      ck_assert_uint_eq(s.bytes, bytes);
      /* each node has its own buffer: only the communicator's order chain */
      ck_assert_uint_eq(s.edges, i);
      ck_assert_uint_eq(s.comm_order_edges, i);
      ck_assert_uint_eq(s.raw_edges + s.war_edges + s.waw_edges + s.fence_edges + s.explicit_edges, 0);
      if (i) record_expect_preds(g, h.index, &(cg_edge_t){h.index - 1, CG_EDGE_COMM_ORDER}, 1);
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
      ck_assert_cg_ok(record_on_comm(&h, g, comm, &calls[i]));
      ck_assert_uint_eq(h.index, i);
      record_check_node(g, i, comm, &calls[i]);
      bytes += record_expected_bytes(calls[i].kind, count, dt, size, rank, root);
    }
    cg_graph_stats_t s;
    record_get_stats(&s, g);
    ck_assert_uint_eq(s.bytes, bytes);
    ck_assert_uint_eq(s.bytes, 2 * count * es); /* reduce and gather send; broadcast and scatter nothing */
    /* only the used buffer makes hazards: scatter overwrites what broadcast
     * wrote, reduce and gather read it; plus the comm-order chain */
    ck_assert_uint_eq(s.edges, 4);
    ck_assert_uint_eq(s.comm_order_edges, 3);
    ck_assert_uint_eq(s.waw_edges, 1);
    ck_assert_uint_eq(s.raw_edges, 2);
    ck_assert_uint_eq(s.war_edges + s.fence_edges + s.explicit_edges, 0);
    record_expect_preds(g, 1, &(cg_edge_t){0, CG_EDGE_WAW | CG_EDGE_COMM_ORDER}, 1);
    record_expect_preds(g, 2, &(cg_edge_t){1, CG_EDGE_RAW | CG_EDGE_COMM_ORDER}, 1);
    record_expect_preds(g, 3, (cg_edge_t[]){{1, CG_EDGE_RAW}, {2, CG_EDGE_COMM_ORDER}}, 2);
    cg_graph_destroy(g);
    cg_comm_destroy(comm);
    free(buf);
  }
}
END_TEST

START_TEST(record__count_zero_null_buffers) {
  cg_test_reseed(203);
  for (int trial = 0; trial < 30; trial++) {
    int size = record_rand_size(), rank = (int)cg_test_below((uint64_t)size);
    cg_comm_t *comm = NULL;
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_comm_create_offline(&comm, rank, size));
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    for (uint32_t i = 0; i < CG_TEST_N_COMM_KINDS; i++) {
      call_t c = {.kind = cg_test_comm_kinds[i], .dtype = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT), .op = CG_MIN, .root = -1};
      if (cg_test_kind_is_rooted(c.kind) || cg_test_kind_is_p2p(c.kind)) c.root = (int)cg_test_below((uint64_t)size);
      cg_node_t h;
      ck_assert_cg_ok(record_on_comm(&h, g, comm, &c));
      ck_assert_uint_eq(h.index, i);
      record_check_node(g, i, comm, &c);
    }
    cg_graph_stats_t s;
    record_get_stats(&s, g);
    ck_assert_uint_eq(s.nodes, CG_TEST_N_COMM_KINDS);
    ck_assert_uint_eq(s.bytes, 0);
    /* no bytes, no hazards: the eight collectives form a chain, and the send
     * and the receive (last) both follow the last collective */
    ck_assert_int_eq(cg_test_comm_kinds[CG_TEST_N_COMM_KINDS - 2], CG_NODE_SEND);
    ck_assert_int_eq(cg_test_comm_kinds[CG_TEST_N_COMM_KINDS - 1], CG_NODE_RECV);
    ck_assert_uint_eq(s.edges, CG_TEST_N_COMM_KINDS - 1);
    ck_assert_uint_eq(s.comm_order_edges, CG_TEST_N_COMM_KINDS - 1);
    for (uint32_t i = 1; i < CG_TEST_N_COMM_KINDS; i++)
      record_expect_preds(g, i, &(cg_edge_t){i < CG_TEST_N_COMM_KINDS - 2 ? i - 1 : CG_TEST_N_COMM_KINDS - 3,
                                             CG_EDGE_COMM_ORDER}, 1);
    cg_graph_destroy(g);
    cg_comm_destroy(comm);
  }
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

  record_add_handles_tcase(s);
  return s;
}

int main(void) { return cg_test_main(suite()); }
