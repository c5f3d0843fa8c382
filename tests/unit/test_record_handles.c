/* The "handles" test case of the record suite: handles with and without
 * `out`, per graph, over mixed sequences; node names; explicit and
 * comm-order edges; communicators outliving cg_comm_destroy while a graph
 * uses them. Apart from test_record.c, which checks what each node kind
 * stores, because these check how recorded nodes relate to each other and
 * to their graph and communicators. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "record_support.h"
#include "test_support.h"

/* ---- handles */

START_TEST(record__out_may_be_null) {
  cg_test_reseed(301);
  pool_t *p = calloc(1, sizeof *p);
  cg_comm_t *comm = NULL;
  cg_graph_t *g = NULL;
  int size = record_rand_size(), rank = (int)cg_test_below((uint64_t)size);
  ck_assert_cg_ok(cg_comm_create_offline(&comm, rank, size));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  uint32_t expected = 0;
  for (int round = 0; round < 3; round++) {
    for (int k = 0; k <= CG_NODE_HOST_FUNC; k++) {
      call_t c = record_random_call(p, (cg_node_kind_t)k, size, rank);
      ck_assert_cg_ok(record_on_comm(NULL, g, comm, &c));
      record_check_node(g, expected, comm, &c);
      expected++;
      ck_assert_uint_eq(cg_graph_node_count(g), expected);
    }
  }
  cg_node_t h;
  ck_assert_cg_ok(cg_barrier(&h, g, comm));
  ck_assert_uint_eq(h.index, expected);
  cg_graph_stats_t s;
  record_get_stats(&s, g);
  ck_assert_uint_eq(s.nodes, expected + 1);
  for (int k = 0; k < CG_NODE_KIND_COUNT; k++)
    ck_assert_uint_eq(s.nodes_by_kind[k], k == CG_NODE_BARRIER ? 4 : k <= CG_NODE_HOST_FUNC ? 3 : 0);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
  record_pool_free(p);
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
    call_t c = record_random_call(p, (cg_node_kind_t)cg_test_below(CG_NODE_HOST_FUNC + 1), 3, 0);
    cg_node_t h = CG_NODE_NULL;
    ck_assert_cg_ok(record_on_comm(&h, g[which], comm, &c));
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
  record_pool_free(p);
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
      sizes[i] = record_rand_size();
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
      call_t c = record_random_call(p, k, sizes[ci], ranks[ci]);
      cg_node_t h;
      ck_assert_cg_ok(record_on_comm(&h, g, comms[ci], &c));
      ck_assert_uint_eq(h.index, (uint32_t)i);
      record_check_node(g, h.index, comms[ci], &c);
      by_kind[k]++;
      bytes += record_expected_bytes(k, c.count, c.dtype, sizes[ci], ranks[ci], c.root);
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
    record_get_stats(&s, g);
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
    record_pool_free(p);
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
  record_get_stats(&s, g);
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
  record_get_stats(&s0, g);
  ck_assert_uint_eq(s0.edges, 2);
  ck_assert_uint_eq(s0.raw_edges, 1);
  ck_assert_uint_eq(s0.war_edges, 1);
  ck_assert_uint_eq(s0.explicit_edges, 0);
  ck_assert_uint_eq(s0.comm_order_edges, 0);

  /* a new forward edge */
  ck_assert_cg_ok(cg_depend(g, n[0], n[1]));
  record_get_stats(&s1, g);
  ck_assert_uint_eq(s1.edges, 3);
  ck_assert_uint_eq(s1.explicit_edges, 1);
  ck_assert(record_has_edge(&cg_graph_node(g, 0)->succs, 1, CG_EDGE_EXPLICIT));
  ck_assert(record_has_edge(&cg_graph_node(g, 1)->preds, 0, CG_EDGE_EXPLICIT));
  ck_assert_cg_ok(cg_depend(g, n[0], n[1]));
  record_get_stats(&s2, g);
  ck_assert_int_eq(memcmp(&s1, &s2, sizeof s1), 0);
  ck_assert_uint_eq(cg_graph_node(g, 0)->succs.len, 3);
  ck_assert_uint_eq(cg_graph_node(g, 1)->preds.len, 1);

  /* over an inferred edge: no new edge, one more cause */
  ck_assert_cg_ok(cg_depend(g, n[0], n[2]));
  record_get_stats(&s2, g);
  ck_assert_uint_eq(s2.edges, 3);
  ck_assert_uint_eq(s2.explicit_edges, 2);
  ck_assert_uint_eq(s2.raw_edges, 1);
  ck_assert(record_has_edge(&cg_graph_node(g, 0)->succs, 2, CG_EDGE_EXPLICIT | CG_EDGE_RAW));
  ck_assert(record_has_edge(&cg_graph_node(g, 2)->preds, 0, CG_EDGE_EXPLICIT | CG_EDGE_RAW));

  /* a backward edge between unordered nodes */
  ck_assert_cg_ok(cg_depend(g, n[3], n[1]));
  ck_assert_cg_ok(cg_depend(g, n[3], n[1]));
  record_get_stats(&s2, g);
  ck_assert_uint_eq(s2.edges, 4);
  ck_assert_uint_eq(s2.explicit_edges, 3);
  ck_assert(record_has_edge(&cg_graph_node(g, 3)->succs, 1, CG_EDGE_EXPLICIT));
  ck_assert_uint_eq(s2.nodes, 4);
  uint32_t order[4];
  ck_assert_cg_ok(cg_graph_topo_order(g, order));
  ck_assert_uint_eq(order[0], 0);
  ck_assert_uint_eq(order[1], 2);
  ck_assert_uint_eq(order[2], 3);
  ck_assert_uint_eq(order[3], 1);
  record_get_stats(&s2, g);
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
  record_expect_preds(g, 0, NULL, 0);
  record_expect_preds(g, 1, NULL, 0); /* the first collective on cb follows nothing on ca */
  record_expect_preds(g, 2, &(cg_edge_t){0, O}, 1);
  record_expect_preds(g, 3, &(cg_edge_t){0, O}, 1); /* not after the send: one group */
  record_expect_preds(g, 4, &(cg_edge_t){1, O}, 1);
  /* the group, not the collective before it; reading x still follows its writer */
  record_expect_preds(g, 5, (cg_edge_t[]){{0, R}, {2, O}, {3, O}}, 3);
  record_expect_preds(g, 6, &(cg_edge_t){3, R}, 1);
  record_expect_preds(g, 7, &(cg_edge_t){5, R | O}, 1); /* one edge, two causes */
  /* the barrier follows the sinks (4, 6, 7); 7 is also the previous collective */
  record_expect_preds(g, 8, (cg_edge_t[]){{4, F}, {6, F}, {7, F | O}}, 3);
  record_expect_preds(g, 9, (cg_edge_t[]){{1, O}, {8, F}}, 2);
  record_expect_preds(g, 10, (cg_edge_t[]){{4, O}, {9, O}}, 2); /* the group on cb since 1, across the fence */

  cg_graph_stats_t s;
  record_get_stats(&s, g);
  ck_assert_uint_eq(s.nodes, 11);
  ck_assert_uint_eq(s.edges, 15);
  ck_assert_uint_eq(s.comm_order_edges, 10);
  ck_assert_uint_eq(s.raw_edges, 3);
  ck_assert_uint_eq(s.fence_edges, 4);
  ck_assert_uint_eq(s.war_edges + s.waw_edges + s.explicit_edges, 0);

  /* an explicit edge over an order edge adds a cause, not an edge */
  ck_assert_cg_ok(cg_depend(g, n[2], n[5]));
  record_expect_preds(g, 5, (cg_edge_t[]){{0, R}, {2, O | CG_EDGE_EXPLICIT}, {3, O}}, 3);
  record_get_stats(&s, g);
  ck_assert_uint_eq(s.edges, 15);
  ck_assert_uint_eq(s.explicit_edges, 1);
  ck_assert_uint_eq(s.comm_order_edges, 10);
  /* the two sends of one group stay unordered: a backward edge between them is fine */
  ck_assert_cg_ok(cg_depend(g, n[3], n[2]));
  record_get_stats(&s, g);
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
  int size = record_rand_size(), rank = (int)cg_test_below((uint64_t)size);
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
  record_get_stats(&s, g);
  ck_assert_uint_eq(s.nodes, 4);
  cg_graph_destroy(g);
}
END_TEST

void record_add_handles_tcase(Suite *s) {
  TCase *tc = tcase_create("handles");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, record__out_may_be_null);
  tcase_add_test(tc, record__handles_in_record_order_per_graph);
  tcase_add_test(tc, record__mixed_sequence_stats);
  tcase_add_test(tc, record__node_name_copied_truncated_renamed);
  tcase_add_test(tc, record__depend_adds_edge_once);
  tcase_add_test(tc, record__comm_order_edges);
  tcase_add_test(tc, record__comm_outlives_its_destroy_while_graph_lives);
  suite_add_tcase(s, tc);
}
