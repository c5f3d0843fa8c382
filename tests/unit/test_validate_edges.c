/* The "edges_and_host_funcs" test case of the validate suite: cg_depend refusing
 * self edges and cycles (through hazard edges, backward edges and the order of
 * one communicator's collectives, and on random graphs against a plain search),
 * node handles of other, destroyed or no graphs, and host functions with a bad
 * fn or access. Kept apart from test_validate.c, which checks the arguments of
 * the recording calls, because these reject edges and handles between nodes
 * rather than one call's arguments; both use the environment of
 * test_validate.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "test_support.h"
#include "test_validate.h"

/* ---- cycles */

START_TEST(validate__depend_cycle_through_hazard_edges) {
  env_t e;
  validate_env_init(&e, 30, 0);
  unsigned char *x = e.arena + HALF, *y = x + 1024, *z = x + 2048;
  cg_node_t a = validate_env_record(&e, &(call_t){CG_NODE_ALLREDUCE, e.comm, x, y, 64, CG_INT32, CG_SUM, -1});
  cg_node_t b =
      validate_env_record(&e, &(call_t){CG_NODE_ALLREDUCE, e.comm, y, z, 64, CG_INT32, CG_SUM, -1}); /* raw a->b */
  cg_node_t c =
      validate_env_record(&e, &(call_t){CG_NODE_SEND, e.comm, z, NULL, 64, CG_INT32, CG_SUM, 0}); /* raw b->c */
  char na[32], nb[32], nc[32];
  snprintf(na, sizeof na, "node #%u", a.index);
  snprintf(nb, sizeof nb, "node #%u", b.index);
  snprintf(nc, sizeof nc, "node #%u", c.index);
  validate_env_rejected(&e, "c -> a", cg_depend(e.g, c, a), CG_ERR_CYCLE, "cg_depend", 0, nc, na);
  ck_assert_cg_ok(cg_node_name(e.g, a, "halo_in")); /* names show in the detail; DOT changes too */
  ck_assert_cg_ok(cg_node_name(e.ref, (cg_node_t){e.ref->serial, a.index}, "halo_in"));
  ck_assert_cg_ok(cg_node_name(e.g, c, "halo_out"));
  ck_assert_cg_ok(cg_node_name(e.ref, (cg_node_t){e.ref->serial, c.index}, "halo_out"));
  validate_env_snapshot(&e);
  validate_env_rejected(&e, "named c -> a", cg_depend(e.g, c, a), CG_ERR_CYCLE, "cg_depend", 0, "'halo_in'",
                        "'halo_out'");
  validate_env_rejected(&e, "b -> a", cg_depend(e.g, b, a), CG_ERR_CYCLE, "cg_depend", 0, nb, na);
  validate_env_rejected(&e, "c -> b", cg_depend(e.g, c, b), CG_ERR_CYCLE, "cg_depend", 0, nc, nb);
  /* the forward edge over the path is fine */
  ck_assert_cg_ok(cg_depend(e.g, a, c));
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__depend_self_edge) {
  env_t e;
  validate_env_init(&e, 31, 0);
  uint32_t prefix = e.next;
  for (uint32_t i = 0; i < prefix; i++) {
    cg_node_t n = {e.g->serial, i};
    char nn[32];
    snprintf(nn, sizeof nn, "node #%u", i);
    validate_env_rejected(&e, "self edge", cg_depend(e.g, n, n), CG_ERR_CYCLE, "cg_depend", 0, nn, NULL);
  }
  validate_env_free(&e);
}
END_TEST

/* A host function reading [p, p + 64) and writing [p + 1024, p + 1088), in both twins. */
static uint32_t env_host_func(env_t *e, unsigned char *p) {
  cg_range_t reads[] = {{p, 64}}, writes[] = {{p + 1024, 64}};
  cg_access_t access = {sizeof(cg_access_t), 0, reads, 1, writes, 1};
  cg_node_t a, b;
  ck_assert_cg_ok(cg_host_func(&a, e->g, cg_test_noop, NULL, &access));
  ck_assert_cg_ok(cg_host_func(&b, e->ref, cg_test_noop, NULL, &access));
  ck_assert_uint_eq(a.index, e->next);
  ck_assert_uint_eq(b.index, e->next);
  e->next++;
  validate_env_snapshot(e);
  return a.index;
}

START_TEST(validate__depend_cycle_through_backward_edges) {
  env_t e;
  validate_env_init(&e, 32, 0);
  /* nothing orders these four: disjoint buffers, allreduces on communicators
   * of their own, host functions with declared accesses (not fences) */
  cg_comm_t *comms[2];
  uint32_t n[4];
  for (int i = 0; i < 4; i++) {
    unsigned char *p = e.arena + HALF + 4096 * (size_t)i;
    if (i % 2) {
      n[i] = env_host_func(&e, p);
    } else {
      ck_assert_cg_ok(cg_comm_create_offline(&comms[i / 2], 0, 2));
      call_t c = {CG_NODE_ALLREDUCE, comms[i / 2], p, p + 1024, 16, CG_FLOAT32, CG_SUM, -1};
      n[i] = validate_env_record(&e, &c).index;
    }
  }
  validate_env_depend(&e, n[3], n[2]);
  validate_env_depend(&e, n[2], n[1]);
  validate_env_depend(&e, n[1], n[0]);
  ck_assert_int_eq(e.g->has_backward_edges, 1);
  const uint32_t bad[][2] = {{n[0], n[3]}, {n[0], n[2]}, {n[1], n[3]}, {n[0], n[1]}};
  for (size_t i = 0; i < 4; i++) {
    char nb[32], na[32];
    snprintf(nb, sizeof nb, "node #%u", bad[i][0]);
    snprintf(na, sizeof na, "node #%u", bad[i][1]);
    cg_node_t before = {e.g->serial, bad[i][0]}, after = {e.g->serial, bad[i][1]};
    validate_env_rejected(&e, "closes a backward chain", cg_depend(e.g, before, after), CG_ERR_CYCLE, "cg_depend", 0,
                          nb, na);
  }
  validate_env_free(&e);
  for (int i = 0; i < 2; i++) cg_comm_destroy(comms[i]);
}
END_TEST

START_TEST(validate__depend_backward_between_collectives_of_one_comm) {
  env_t e;
  validate_env_init(&e, 34, 0);
  cg_comm_t *other = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&other, 0, 2));
  /* disjoint buffers: only comm-order edges relate these nodes */
  unsigned char *p = e.arena + HALF;
  uint32_t a =
      validate_env_record(&e, &(call_t){CG_NODE_ALLREDUCE, e.comm, p, p + 1024, 16, CG_FLOAT32, CG_SUM, -1}).index;
  uint32_t a2 = validate_env_record(&e, &(call_t){CG_NODE_BROADCAST, e.comm, p + 2048, p + 2048, 16, CG_FLOAT32,
                                                  CG_SUM, e.comm->rank}).index;
  uint32_t s =
      validate_env_record(&e, &(call_t){CG_NODE_SEND, e.comm, p + 4096, NULL, 16, CG_FLOAT32, CG_SUM, 0}).index;
  uint32_t r =
      validate_env_record(&e, &(call_t){CG_NODE_RECV, e.comm, NULL, p + 5120, 16, CG_FLOAT32, CG_SUM, 1}).index;
  uint32_t b = validate_env_record(&e, &(call_t){CG_NODE_ALLGATHER, e.comm, p + 6144, p + 7168, 16, CG_FLOAT32,
                                                 CG_SUM, -1}).index;
  uint32_t c = validate_env_record(&e, &(call_t){CG_NODE_ALLREDUCE, other, p + 9216, p + 10240, 16, CG_FLOAT32,
                                                 CG_SUM, -1}).index;
  const cg_node_rec_t *rec = cg_graph_node(e.g, a2);
  ck_assert_uint_eq(rec->preds.len, 1); /* the order edge alone */
  ck_assert_uint_eq(rec->preds.items[0].node, a);
  ck_assert_uint_eq(rec->preds.items[0].causes, CG_EDGE_COMM_ORDER);
  /* a later collective cannot run before an earlier one of its communicator,
   * directly or through the sends and receives between them */
  const uint32_t bad[][2] = {{a2, a}, {b, a}, {b, a2}, {s, a2}, {r, a}, {b, s}, {b, r}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char nb[32], na[32];
    snprintf(nb, sizeof nb, "node #%u", bad[i][0]);
    snprintf(na, sizeof na, "node #%u", bad[i][1]);
    cg_node_t before = {e.g->serial, bad[i][0]}, after = {e.g->serial, bad[i][1]};
    validate_env_rejected(&e, "backward across the communicator's order", cg_depend(e.g, before, after), CG_ERR_CYCLE,
                          "cg_depend", 0, nb, na);
  }
  /* the sends and receives of one group are not ordered among themselves, and
   * another communicator's collective is not ordered with these at all */
  validate_env_depend(&e, r, s);
  validate_env_depend(&e, c, a);
  validate_env_depend(&e, c, b);
  ck_assert_int_eq(e.g->has_backward_edges, 1);
  validate_env_free(&e);
  cg_comm_destroy(other);
}
END_TEST

/* Does `from` reach `to` along successors? (plain DFS over the stored edges) */
static int reaches(const cg_graph_t *g, uint32_t from, uint32_t to) {
  uint32_t n = cg_graph_node_count(g), stack[64], depth = 0;
  unsigned char seen[64] = {0};
  stack[depth++] = from;
  seen[from] = 1;
  while (depth) {
    const cg_node_rec_t *r = cg_graph_node(g, stack[--depth]);
    for (uint32_t i = 0; i < r->succs.len; i++) {
      uint32_t s = r->succs.items[i].node;
      if (s == to) return 1;
      if (!seen[s] && s < n) seen[s] = 1, stack[depth++] = s;
    }
  }
  return 0;
}

START_TEST(validate__depend_random_matches_reachability) {
  cg_test_reseed(33);
  for (int trial = 0; trial < 20; trial++) {
    cg_comm_t *c = NULL;
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_comm_create_offline(&c, 0, 1));
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    unsigned char buf[256];
    uint32_t n = 8 + (uint32_t)cg_test_below(25);
    for (uint32_t i = 0; i < n; i++) {
      size_t off = cg_test_below(240), len = 1 + cg_test_below(16);
      if (cg_test_below(3) == 0) off += 1024; /* mostly overlapping, sometimes not */
      if (cg_test_below(25) == 0)
        ck_assert_cg_ok(cg_barrier(NULL, g, c));
      else if (off < 256)
        ck_assert_cg_ok(cg_send(NULL, g, c, buf + off, len, CG_UINT8, 0));
      else
        ck_assert_cg_ok(
            cg_host_func(NULL, g, cg_test_noop, NULL, &(cg_access_t){sizeof(cg_access_t), 0, NULL, 0, NULL, 0}));
      if (cg_test_below(2)) ck_assert_cg_ok(cg_recv(NULL, g, c, buf + cg_test_below(240), len, CG_UINT8, 0));
    }
    n = cg_graph_node_count(g);
    ck_assert_uint_le(n, 64);
    for (int step = 0; step < 150; step++) {
      uint32_t b = (uint32_t)cg_test_below(n), a = (uint32_t)cg_test_below(n);
      int cycle = a == b || reaches(g, a, b);
      uint32_t had = 0; /* causes of an existing b -> a edge, CG_EDGE_EXPLICIT | ... */
      const cg_edge_vec_t *succs = &cg_graph_node(g, b)->succs;
      for (uint32_t i = 0; i < succs->len; i++)
        if (succs->items[i].node == a) had = succs->items[i].causes;
      cg_graph_stats_t before, after;
      validate_get_stats(&before, g);
      cg_status_t st = cg_depend(g, (cg_node_t){g->serial, b}, (cg_node_t){g->serial, a});
      validate_get_stats(&after, g);
      if (cycle) {
        ck_assert_msg(st == CG_ERR_CYCLE, "%u -> %u closes a cycle but got %s", b, a, cg_status_string(st));
        ck_assert_int_eq(memcmp(&before, &after, sizeof before), 0);
      } else {
        ck_assert_msg(st == CG_SUCCESS, "%u -> %u: %s", b, a, cg_error_last());
        ck_assert(reaches(g, b, a));
        ck_assert_uint_eq(after.edges, before.edges + !had);
        ck_assert_uint_eq(after.explicit_edges, before.explicit_edges + !(had & CG_EDGE_EXPLICIT));
      }
    }
    uint32_t order[64], pos[64];
    ck_assert_cg_ok(cg_graph_topo_order(g, order));
    for (uint32_t i = 0; i < n; i++) pos[order[i]] = i;
    for (uint32_t i = 0; i < n; i++) {
      const cg_node_rec_t *r = cg_graph_node(g, i);
      for (uint32_t j = 0; j < r->succs.len; j++) ck_assert_uint_lt(pos[i], pos[r->succs.items[j].node]);
    }
    cg_graph_destroy(g);
    cg_comm_destroy(c);
  }
}
END_TEST

/* ---- node handles */

START_TEST(validate__invalid_node_handles) {
  env_t e;
  validate_env_init(&e, 40, 0);
  cg_graph_t *other = NULL, *gone = NULL;
  ck_assert_cg_ok(cg_graph_create(&other, NULL));
  ck_assert_cg_ok(cg_graph_create(&gone, NULL));
  for (uint32_t i = 0; i < e.next + 3; i++) {
    ck_assert_cg_ok(cg_barrier(NULL, other, e.comm));
    ck_assert_cg_ok(cg_barrier(NULL, gone, e.comm));
  }
  uint64_t gone_serial = gone->serial;
  cg_graph_destroy(gone);
  uint32_t some = (uint32_t)cg_test_below(e.next);
  cg_node_t good = {e.g->serial, some};
  for (int i = 0; i < 9; i++) {
    for (int use = 0; use < 3; use++) {
      cg_node_t bad; /* recomputed: every rejection is followed by one more node */
      switch (i) {
        case 0: bad = (cg_node_t){other->serial, some}; break;             /* another graph, valid index there */
        case 1: bad = (cg_node_t){other->serial, e.next + 1}; break;
        case 2: bad = (cg_node_t){gone_serial, 0}; break;                  /* a destroyed graph */
        case 3: bad = (cg_node_t){e.g->serial, e.next}; break;             /* one past the last */
        case 4: bad = (cg_node_t){e.g->serial, e.next + 1000 + (uint32_t)cg_test_below(1000)}; break;
        case 5: bad = (cg_node_t){e.g->serial, UINT32_MAX}; break;
        case 6: bad = (cg_node_t)CG_NODE_NULL; break;                      /* zero-initialized */
        case 7: bad = (cg_node_t){0, some}; break;
        default: bad = (cg_node_t){e.g->serial + 1000, some}; break;       /* a serial no graph has */
      }
      char id[32];
      snprintf(id, sizeof id, "#%u", bad.index);
      if (use == 0)
        validate_env_rejected(&e, "bad before", cg_depend(e.g, bad, good), CG_ERR_INVALID_NODE, "cg_depend", 0, id,
                              NULL);
      else if (use == 1)
        validate_env_rejected(&e, "bad after", cg_depend(e.g, good, bad), CG_ERR_INVALID_NODE, "cg_depend", 0, id,
                              NULL);
      else
        validate_env_rejected(&e, "bad name", cg_node_name(e.g, bad, "n"), CG_ERR_INVALID_NODE, "cg_node_name", 0, id,
                              NULL);
    }
  }
  cg_graph_destroy(other);
  validate_env_free(&e);
}
END_TEST

/* ---- host functions */

START_TEST(validate__host_func_null_fn) {
  env_t e;
  validate_env_init(&e, 50, 0);
  cg_access_t access = CG_ACCESS_INIT;
  cg_node_t out = {777, 777};
  validate_env_rejected(&e, "NULL fn", cg_host_func(&out, e.g, NULL, &e, NULL), CG_ERR_INVALID_ARGUMENT, "cg_host_func",
                        NEED_NODE, NULL, NULL);
  validate_env_rejected(&e, "NULL fn with access", cg_host_func(&out, e.g, NULL, NULL, &access),
                        CG_ERR_INVALID_ARGUMENT, "cg_host_func", NEED_NODE, NULL, NULL);
  ck_assert_uint_eq(out.index, 777);
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__host_func_access_wrong_size) {
  env_t e;
  validate_env_init(&e, 51, 0);
  const size_t sizes[] = {0, 8, sizeof(cg_access_t) - 1, sizeof(cg_access_t) + 8, SIZE_MAX};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    cg_access_t access = CG_ACCESS_INIT;
    access.size = sizes[i];
    access.everything = (int)(i % 2);
    validate_env_rejected(&e, "access.size", cg_host_func(NULL, e.g, cg_test_noop, NULL, &access),
                          CG_ERR_INVALID_ARGUMENT, "cg_host_func", NEED_NODE, NULL, NULL);
  }
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__host_func_null_reads_huge_count) {
  /* A NULL array is a bad argument whatever its claimed length. */
  env_t e;
  validate_env_init(&e, 53, 0);
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.n_reads = (size_t)1 << 40;
  validate_env_rejected(&e, "NULL reads, 2^40 of them", cg_host_func(NULL, e.g, cg_test_noop, NULL, &access),
                        CG_ERR_INVALID_ARGUMENT, "cg_host_func", NEED_NODE, "reads", NULL);
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__host_func_bad_ranges) {
  env_t e;
  validate_env_init(&e, 54, 0);
  for (int trial = 0; trial < 12; trial++) {
    cg_range_t ranges[5], other = {e.arena + HALF + 4096, 8};
    size_t n = 1 + cg_test_below(5), bad = cg_test_below(n);
    for (size_t i = 0; i < n; i++) ranges[i] = (cg_range_t){e.arena + HALF + 64 * i, 1 + cg_test_below(64)};
    int kind = trial / 4; /* 0: a NULL range, 1: a range past the end of memory, 2: a NULL array */
    if (kind == 1)
      ranges[bad] = (cg_range_t){(const void *)(UINTPTR_MAX - cg_test_below(8)), 9 + cg_test_below(100)};
    else
      ranges[bad] = (cg_range_t){NULL, 1 + cg_test_below(100)};
    const cg_range_t *list = kind == 2 ? NULL : ranges;
    int reads = trial % 2; /* the other list is valid and non-empty */
    cg_access_t access = {sizeof(cg_access_t), 0, reads ? list : &other, reads ? n : 1, reads ? &other : list,
                          reads ? 1 : n};
    char which[32];
    snprintf(which, sizeof which, "%s[%zu]", reads ? "reads" : "writes", bad);
    if (kind == 2) which[reads ? 5 : 6] = '\0';
    validate_env_rejected(&e, "bad range", cg_host_func(NULL, e.g, cg_test_noop, NULL, &access),
                          kind == 1 ? CG_ERR_OVERFLOW : CG_ERR_INVALID_ARGUMENT, "cg_host_func", NEED_NODE, which,
                          NULL);
  }
  /* more ranges than memory can describe */
  cg_range_t one = {e.arena, 1};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = &one;
  access.n_reads = SIZE_MAX;
  validate_env_rejected(&e, "SIZE_MAX ranges", cg_host_func(NULL, e.g, cg_test_noop, NULL, &access), CG_ERR_OVERFLOW,
                        "cg_host_func", NEED_NODE, NULL, NULL);
  validate_env_free(&e);
}
END_TEST

void validate_add_edges_and_host_funcs_tests(TCase *tc) {
  tcase_add_test(tc, validate__depend_cycle_through_hazard_edges);
  tcase_add_test(tc, validate__depend_self_edge);
  tcase_add_test(tc, validate__depend_cycle_through_backward_edges);
  tcase_add_test(tc, validate__depend_backward_between_collectives_of_one_comm);
  tcase_add_test(tc, validate__depend_random_matches_reachability);
  tcase_add_test(tc, validate__invalid_node_handles);
  tcase_add_test(tc, validate__host_func_null_fn);
  tcase_add_test(tc, validate__host_func_access_wrong_size);
  tcase_add_test(tc, validate__host_func_null_reads_huge_count);
  tcase_add_test(tc, validate__host_func_bad_ranges);
}
