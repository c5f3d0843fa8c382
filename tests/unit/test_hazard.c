/* Hazard edges (graph/hazard.c, graph/graph.c, graph/edges.c): read-after-write,
 * write-after-read and write-after-write edges with their causes, byte-exact
 * overlaps, in-place forms, fences, comm-order edges (each communicator's
 * collectives in record order, sends and receives grouped between them) and
 * explicit edges; by hand on small graphs here, against brute-force references
 * on random ones in test_hazard_random.c. One suite, one executable. */
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "test_support.h"
#include "test_hazard.h"

/* ---- inspecting a graph */

/* Causes of the edge from -> to, 0 if there is none. Checks that the edge is
 * stored at most once on each side, with the same causes on both. */
uint32_t edge(const cg_graph_t *g, uint32_t from, uint32_t to) {
  const cg_edge_vec_t *succs = &cg_graph_node(g, from)->succs, *preds = &cg_graph_node(g, to)->preds;
  uint32_t s = 0, p = 0, ns = 0, np = 0;
  for (uint32_t e = 0; e < succs->len; e++)
    if (succs->items[e].node == to) s = succs->items[e].causes, ns++;
  for (uint32_t e = 0; e < preds->len; e++)
    if (preds->items[e].node == from) p = preds->items[e].causes, np++;
  REQUIRE(ns <= 1 && ns == np && s == p, "edge #%u -> #%u: %u succ entries (causes %#x), %u pred entries (causes %#x)",
          from, to, ns, s, np, p);
  return s;
}

/* Whether a path of edges leads from `from` to `to` (from != to), looking only
 * at nodes up to `bound` (where every edge points forward, bound = to). */
int reaches_within(const cg_graph_t *g, uint32_t from, uint32_t to, uint32_t bound) {
  uint32_t n = cg_graph_node_count(g);
  unsigned char *seen = calloc(n, 1);
  uint32_t *stack = malloc((size_t)n * sizeof *stack);
  REQUIRE(seen && stack, "out of memory");
  size_t depth = 0;
  int found = 0;
  stack[depth++] = from;
  seen[from] = 1;
  while (depth && !found) {
    const cg_edge_vec_t *succs = &cg_graph_node(g, stack[--depth])->succs;
    for (uint32_t e = 0; e < succs->len; e++) {
      uint32_t next = succs->items[e].node;
      found |= next == to;
      if (!seen[next] && next <= bound) {
        seen[next] = 1;
        stack[depth++] = next;
      }
    }
  }
  free(seen);
  free(stack);
  return found;
}
int reaches(const cg_graph_t *g, uint32_t from, uint32_t to) { return reaches_within(g, from, to, UINT32_MAX); }

typedef struct want {
  uint32_t node, causes;
} want_t;

/* `node` has exactly the predecessors in `want`, with exactly those causes. */
static void check_preds(const cg_graph_t *g, uint32_t node, const want_t *want, uint32_t n) {
  uint32_t len = cg_graph_node(g, node)->preds.len;
  ck_assert_msg(len == n, "node #%u has %u predecessors, expected %u", node, len, n);
  for (uint32_t k = 0; k < n; k++) {
    uint32_t c = edge(g, want[k].node, node);
    ck_assert_msg(c == want[k].causes, "edge #%u -> #%u has causes %#x, expected %#x", want[k].node, node, c,
                  want[k].causes);
  }
}
#define PREDS(g, node, ...)                                             \
  check_preds((g), (node), (const want_t[]){__VA_ARGS__},              \
              (uint32_t)(sizeof((const want_t[]){__VA_ARGS__}) / sizeof(want_t)))
#define NO_PREDS(g, node) check_preds((g), (node), NULL, 0)

void check_stats(const cg_graph_t *g, size_t edges, size_t expl, size_t raw, size_t war, size_t waw,
                 size_t fence, size_t comm_order) {
  cg_graph_stats_t s;
  ck_assert_cg_ok(cg_graph_stats(&s, g));
  ck_assert_uint_eq(s.edges, edges);
  ck_assert_uint_eq(s.explicit_edges, expl);
  ck_assert_uint_eq(s.raw_edges, raw);
  ck_assert_uint_eq(s.war_edges, war);
  ck_assert_uint_eq(s.waw_edges, waw);
  ck_assert_uint_eq(s.fence_edges, fence);
  ck_assert_uint_eq(s.comm_order_edges, comm_order);
}

/* ---- hand-checked graphs: offline communicators, buffers in one array.
 * Sends and receives (send_, recv_) go on `comm`. Tests about memory hazards
 * record each collective on a communicator of its own (other[k]), so that no
 * comm-order edge joins them; the comm_order tests use `comm` throughout. */

#define N_OTHER 6
static cg_comm_t *comm, *other[N_OTHER];
static cg_graph_t *g;
static unsigned char mem[1024];
#define A (mem + 0)
#define B (mem + 128)
#define C (mem + 256)
#define D (mem + 384)
#define E (mem + 512)

static void setup(void) {
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 1, 4));
  for (int k = 0; k < N_OTHER; k++) ck_assert_cg_ok(cg_comm_create_offline(&other[k], k % 2, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
}

static void teardown(void) {
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
  for (int k = 0; k < N_OTHER; k++) cg_comm_destroy(other[k]);
}

static cg_node_t node_(uint32_t index) { return (cg_node_t){g->serial, index}; }

static void send_(const void *buf, size_t count, cg_dtype_t dt) {
  ck_assert_cg_ok(cg_send(NULL, g, comm, buf, count, dt, 0));
}
static void recv_(void *buf, size_t count, cg_dtype_t dt) {
  ck_assert_cg_ok(cg_recv(NULL, g, comm, buf, count, dt, 2));
}
static void host_(const cg_range_t *reads, size_t n_reads, const cg_range_t *writes, size_t n_writes) {
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = reads;
  access.n_reads = n_reads;
  access.writes = writes;
  access.n_writes = n_writes;
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &access));
}

START_TEST(hazard__raw_edge) {
  cg_node_t n;
  ck_assert_cg_ok(cg_allreduce(&n, g, other[0], A, B, 16, CG_FLOAT32, CG_SUM)); /* #0 reads A, writes B */
  ck_assert_uint_eq(n.index, 0);
  send_(B, 16, CG_FLOAT32); /* #1 reads B */
  send_(A, 16, CG_FLOAT32); /* #2 reads A: read after read */
  NO_PREDS(g, 0);
  PREDS(g, 1, {0, CG_EDGE_RAW});
  NO_PREDS(g, 2);
  ck_assert_uint_eq(cg_graph_node(g, 0)->succs.len, 1);
  check_stats(g, 1, 0, 1, 0, 0, 0, 0);
}
END_TEST

START_TEST(hazard__war_edge) {
  send_(A, 16, CG_FLOAT32); /* #0 reads A */
  recv_(C, 16, CG_FLOAT32); /* #1 writes C */
  recv_(A, 16, CG_FLOAT32); /* #2 writes A */
  NO_PREDS(g, 1);
  PREDS(g, 2, {0, CG_EDGE_WAR});
  check_stats(g, 1, 0, 0, 1, 0, 0, 0);
}
END_TEST

START_TEST(hazard__waw_edge) {
  recv_(A, 16, CG_FLOAT32);      /* #0 writes A */
  recv_(A + 32, 4, CG_FLOAT64);  /* #1 writes A[32, 64) */
  recv_(C, 16, CG_FLOAT32);      /* #2 elsewhere */
  PREDS(g, 1, {0, CG_EDGE_WAW});
  NO_PREDS(g, 2);
  check_stats(g, 1, 0, 0, 0, 1, 0, 0);
}
END_TEST

START_TEST(hazard__one_byte_overlap_makes_an_edge_adjacent_ranges_do_not) {
  recv_(mem + 100, 2, CG_FLOAT64); /* #0 writes [100, 116) */
  send_(mem + 115, 1, CG_UINT8);   /* #1 reads [115, 116): last byte of #0 */
  send_(mem + 116, 4, CG_INT8);    /* #2 reads [116, 120): just above */
  send_(mem + 84, 4, CG_INT32);    /* #3 reads [84, 100): just below */
  recv_(mem + 116, 1, CG_INT64);   /* #4 writes [116, 124): overlaps #2 only */
  recv_(mem + 99, 1, CG_UINT8);    /* #5 writes [99, 100): overlaps #3 only */
  ck_assert_cg_ok(cg_allreduce(NULL, g, other[0], mem + 200, mem + 108, 1, CG_UINT64, CG_MAX)); /* #6 writes [108, 116) */
  PREDS(g, 1, {0, CG_EDGE_RAW});
  NO_PREDS(g, 2);
  NO_PREDS(g, 3);
  PREDS(g, 4, {2, CG_EDGE_WAR});
  PREDS(g, 5, {3, CG_EDGE_WAR});
  /* [108, 115) was last written by #0 and not read since; [115, 116) was read by #1 */
  PREDS(g, 6, {0, CG_EDGE_WAW}, {1, CG_EDGE_WAR});
  check_stats(g, 5, 0, 1, 3, 1, 0, 0);
}
END_TEST

START_TEST(hazard__ranges_at_the_top_of_the_address_space) {
  uintptr_t top = UINTPTR_MAX - 16; /* [top, top + 16): the highest span a recording accepts */
  recv_((void *)top, 16, CG_UINT8);         /* #0 */
  send_((void *)(top + 15), 1, CG_UINT8);   /* #1 the last byte */
  send_((void *)(top - 16), 16, CG_UINT8);  /* #2 just below */
  recv_((void *)(top - 1), 2, CG_UINT8);    /* #3 straddles the start of #0 and the end of #2 */
  PREDS(g, 1, {0, CG_EDGE_RAW});
  NO_PREDS(g, 2);
  PREDS(g, 3, {0, CG_EDGE_WAW}, {2, CG_EDGE_WAR});
  check_stats(g, 3, 0, 1, 1, 1, 0, 0);
}
END_TEST

START_TEST(hazard__in_place_allreduce) {
  recv_(B, 16, CG_FLOAT32);                                                    /* #0 writes B */
  ck_assert_cg_ok(cg_allreduce(NULL, g, other[0], B, B, 16, CG_FLOAT32, CG_SUM)); /* #1 reads and writes B */
  send_(B, 16, CG_FLOAT32);                                                    /* #2 reads B */
  send_(B + 32, 4, CG_FLOAT32);                                                /* #3 reads B[32, 48) */
  recv_(B, 16, CG_FLOAT32);                                                    /* #4 writes B */
  ck_assert_cg_ok(cg_allreduce(NULL, g, other[1], B, B, 16, CG_FLOAT32, CG_SUM)); /* #5 */
  ck_assert_cg_ok(cg_allreduce(NULL, g, other[2], B, B, 16, CG_FLOAT32, CG_SUM)); /* #6 */
  PREDS(g, 1, {0, CG_EDGE_RAW | CG_EDGE_WAW});
  PREDS(g, 2, {1, CG_EDGE_RAW});
  PREDS(g, 3, {1, CG_EDGE_RAW});
  PREDS(g, 4, {2, CG_EDGE_WAR}, {3, CG_EDGE_WAR}); /* not #1: both readers follow it */
  ck_assert(reaches(g, 1, 4));
  PREDS(g, 5, {4, CG_EDGE_RAW | CG_EDGE_WAW});
  PREDS(g, 6, {5, CG_EDGE_RAW | CG_EDGE_WAW});
  check_stats(g, 7, 0, 5, 2, 3, 0, 0);
}
END_TEST

START_TEST(hazard__readers_then_writer_get_war_but_no_waw) {
  recv_(B, 16, CG_FLOAT32);                                                /* #0 writes B */
  send_(B, 16, CG_FLOAT32);                                                /* #1 */
  send_(B, 16, CG_FLOAT32);                                                /* #2 */
  send_(B, 8, CG_FLOAT32);                                                 /* #3 first half */
  ck_assert_cg_ok(cg_allreduce(NULL, g, other[0], A, B, 16, CG_FLOAT32, CG_SUM)); /* #4 writes B */
  PREDS(g, 1, {0, CG_EDGE_RAW});
  PREDS(g, 2, {0, CG_EDGE_RAW});
  PREDS(g, 3, {0, CG_EDGE_RAW});
  PREDS(g, 4, {1, CG_EDGE_WAR}, {2, CG_EDGE_WAR}, {3, CG_EDGE_WAR});
  ck_assert_uint_eq(edge(g, 0, 4), 0);
  ck_assert(reaches(g, 0, 4));
  /* where only part of the old write was read, the rest still needs WAW */
  recv_(D, 16, CG_FLOAT32); /* #5 writes D */
  send_(D, 8, CG_FLOAT32);  /* #6 reads the first half */
  recv_(D, 16, CG_FLOAT32); /* #7 */
  PREDS(g, 7, {5, CG_EDGE_WAW}, {6, CG_EDGE_WAR});
  check_stats(g, 9, 0, 4, 4, 1, 0, 0);
}
END_TEST

START_TEST(hazard__one_edge_per_pair_with_ored_causes) {
  cg_range_t w0[] = {{A, 16}, {B, 16}}, r0[] = {{C, 16}};
  host_(r0, 1, w0, 2); /* #0 writes A and B, reads C */
  cg_range_t r1[] = {{A, 4}, {A + 8, 4}, {B, 16}}, w1[] = {{B, 16}, {C + 4, 4}};
  host_(r1, 3, w1, 2); /* #1: reads A twice and B, writes B and C */
  PREDS(g, 1, {0, CG_EDGE_RAW | CG_EDGE_WAW | CG_EDGE_WAR});
  ck_assert_uint_eq(cg_graph_node(g, 0)->succs.len, 1);
  /* a collective whose send and recv both conflict with one node, the previous
   * collective on its communicator: the comm-order edge joins the same pair */
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, A, A + 64, 4, CG_INT32, CG_SUM)); /* #2 reads A[0,16) */
  ck_assert_cg_ok(cg_alltoall(NULL, g, comm, A + 64, A, 1, CG_INT32));          /* #3 reads A[64,80), writes A[0,16) */
  PREDS(g, 2, {0, CG_EDGE_RAW});
  /* every byte of A[0, 16) was read since #0 wrote it, so no WAW from #0 */
  PREDS(g, 3, {1, CG_EDGE_WAR}, {2, CG_EDGE_RAW | CG_EDGE_WAR | CG_EDGE_COMM_ORDER});
  ck_assert_uint_eq(edge(g, 2, 3), 0x26);
  ck_assert_uint_eq(cg_graph_node(g, 2)->succs.len, 1);
  check_stats(g, 4, 0, 3, 3, 1, 0, 1);
}
END_TEST

/* Every node before fence f reaches it and it reaches every node after. */
static void check_fence(uint32_t f) {
  for (uint32_t i = 0; i < f; i++) ck_assert_msg(reaches(g, i, f), "#%u does not reach fence #%u", i, f);
  for (uint32_t j = f + 1; j < cg_graph_node_count(g); j++)
    ck_assert_msg(reaches(g, f, j), "fence #%u does not reach #%u", f, j);
  const cg_edge_vec_t *preds = &cg_graph_node(g, f)->preds;
  for (uint32_t e = 0; e < preds->len; e++) ck_assert_uint_eq(preds->items[e].causes, CG_EDGE_FENCE);
}

START_TEST(hazard__barrier_and_opaque_host_func_are_fences) {
  recv_(A, 16, CG_FLOAT32);                                                  /* #0 */
  send_(A, 16, CG_FLOAT32);                                                  /* #1 */
  send_(C, 16, CG_FLOAT32);                                                  /* #2 */
  ck_assert_cg_ok(cg_allreduce(NULL, g, other[0], D, E, 16, CG_FLOAT32, CG_SUM)); /* #3 */
  ck_assert_cg_ok(cg_barrier(NULL, g, other[1]));                                /* #4 */
  send_(A, 16, CG_FLOAT32);      /* #5: conflicts only with nodes before the fence */
  ck_assert_cg_ok(cg_allreduce(NULL, g, other[2], NULL, NULL, 0, CG_FLOAT32, CG_SUM)); /* #6 touches nothing */
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL));                      /* #7 */
  ck_assert_cg_ok(cg_barrier(NULL, g, other[3]));                                /* #8 */
  cg_access_t everything = CG_ACCESS_INIT;
  cg_range_t r[] = {{B, 4}};
  everything.reads = r; /* ignored: everything = 1 */
  everything.n_reads = 1;
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &everything)); /* #9 */
  recv_(E, 4, CG_INT8);                                            /* #10 */
  ck_assert_cg_ok(cg_allreduce(NULL, g, other[4], NULL, NULL, 0, CG_INT8, CG_SUM)); /* #11 */
  for (uint32_t f = 4; f <= 9; f++) {
    if (f == 5 || f == 6) continue;
    ck_assert(cg_graph_node(g, f)->is_fence);
    check_fence(f);
  }
  ck_assert(!cg_graph_node(g, 5)->is_fence && !cg_graph_node(g, 6)->is_fence);
  PREDS(g, 5, {4, CG_EDGE_FENCE}); /* the fence replaces the RAW edge from #0 */
  PREDS(g, 6, {4, CG_EDGE_FENCE});
  PREDS(g, 10, {9, CG_EDGE_FENCE});
  PREDS(g, 11, {9, CG_EDGE_FENCE});
  ck_assert_uint_eq(edge(g, 7, 8), CG_EDGE_FENCE); /* consecutive fences */
  ck_assert_uint_eq(edge(g, 8, 9), CG_EDGE_FENCE);
  NO_PREDS(g, 0);
  cg_graph_stats_t st;
  ck_assert_cg_ok(cg_graph_stats(&st, g));
  ck_assert_uint_eq(st.comm_order_edges, 0);
}
END_TEST

START_TEST(hazard__consecutive_fences_are_chained) {
  ck_assert_cg_ok(cg_barrier(NULL, g, other[0]));
  ck_assert_cg_ok(cg_barrier(NULL, g, other[1]));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL));
  ck_assert_cg_ok(cg_barrier(NULL, g, other[2]));
  NO_PREDS(g, 0);
  for (uint32_t i = 1; i < 4; i++) PREDS(g, i, {i - 1, CG_EDGE_FENCE});
  check_stats(g, 3, 0, 0, 0, 0, 3, 0);
}
END_TEST

START_TEST(hazard__host_func_with_declared_access_is_not_a_fence) {
  recv_(A, 16, CG_FLOAT32); /* #0 writes A */
  send_(C, 16, CG_FLOAT32); /* #1 reads C */
  cg_range_t r[] = {{A + 60, 8}}, w[] = {{D, 16}};
  host_(r, 1, w, 1);        /* #2 reads A[60, 68), writes D */
  send_(E, 16, CG_FLOAT32); /* #3 */
  host_(NULL, 0, NULL, 0);  /* #4 declares nothing */
  send_(D + 15, 1, CG_UINT8); /* #5 */
  send_(E, 1, CG_UINT8);      /* #6 */
  ck_assert(!cg_graph_node(g, 2)->is_fence && !cg_graph_node(g, 4)->is_fence);
  PREDS(g, 2, {0, CG_EDGE_RAW});
  ck_assert(!reaches(g, 1, 2));
  NO_PREDS(g, 3);
  NO_PREDS(g, 4);
  ck_assert_uint_eq(cg_graph_node(g, 4)->succs.len, 0);
  PREDS(g, 5, {2, CG_EDGE_RAW});
  NO_PREDS(g, 6);
  check_stats(g, 2, 0, 2, 0, 0, 0, 0);
}
END_TEST

START_TEST(hazard__explicit_edges) {
  send_(A, 16, CG_FLOAT32); /* #0 */
  send_(C, 16, CG_FLOAT32); /* #1 */
  ck_assert_cg_ok(cg_depend(g, node_(0), node_(1)));
  PREDS(g, 1, {0, CG_EDGE_EXPLICIT});
  ck_assert_cg_ok(cg_depend(g, node_(0), node_(1))); /* again: a no-op */
  PREDS(g, 1, {0, CG_EDGE_EXPLICIT});
  check_stats(g, 1, 1, 0, 0, 0, 0, 0);
  ck_assert_cg_status(cg_depend(g, node_(1), node_(0)), CG_ERR_CYCLE);
  ck_assert_cg_status(cg_depend(g, node_(1), node_(1)), CG_ERR_CYCLE);
  NO_PREDS(g, 0);
  ck_assert_uint_eq(cg_graph_node(g, 1)->succs.len, 0);
  check_stats(g, 1, 1, 0, 0, 0, 0, 0);
}
END_TEST

START_TEST(hazard__explicit_edge_joins_an_existing_edge) {
  recv_(A, 16, CG_FLOAT32); /* #0 */
  send_(A, 16, CG_FLOAT32); /* #1 RAW */
  ck_assert_cg_ok(cg_depend(g, node_(0), node_(1)));
  PREDS(g, 1, {0, CG_EDGE_RAW | CG_EDGE_EXPLICIT});
  ck_assert_uint_eq(cg_graph_node(g, 0)->succs.len, 1);
  check_stats(g, 1, 1, 1, 0, 0, 0, 0);
  ck_assert_cg_ok(cg_barrier(NULL, g, other[0])); /* #2 */
  ck_assert_cg_ok(cg_depend(g, node_(1), node_(2)));
  PREDS(g, 2, {1, CG_EDGE_FENCE | CG_EDGE_EXPLICIT});
  send_(B, 4, CG_FLOAT32); /* #3 */
  send_(C, 4, CG_FLOAT32); /* #4 */
  ck_assert_cg_ok(cg_depend(g, node_(4), node_(3))); /* backward, but no path 3 -> 4 */
  PREDS(g, 3, {2, CG_EDGE_FENCE}, {4, CG_EDGE_EXPLICIT});
  ck_assert_cg_status(cg_depend(g, node_(3), node_(0)), CG_ERR_CYCLE); /* 0 -> 1 -> 2 -> 3 */
  ck_assert_cg_status(cg_depend(g, node_(3), node_(4)), CG_ERR_CYCLE);
  check_stats(g, 5, 3, 1, 0, 0, 3, 0);
}
END_TEST

/* ---- comm-order edges */

START_TEST(comm_order__collectives_of_one_communicator_follow_in_record_order) {
  cg_range_t c_range[] = {{C, 16}}, e_range[] = {{E, 16}};
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, A, A, 16, CG_FLOAT32, CG_SUM));     /* #0 first on comm */
  ck_assert_cg_ok(cg_allreduce(NULL, g, other[0], B, B, 16, CG_FLOAT32, CG_SUM)); /* #1 first on other[0] */
  host_(c_range, 1, NULL, 0);                                                      /* #2 reads C, no comm */
  ck_assert_cg_ok(cg_reduce(NULL, g, comm, C, D, 4, CG_FLOAT32, CG_SUM, 1));      /* #3 root: reads C, writes D */
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, D, E, 4, CG_FLOAT32, CG_SUM));      /* #4 reads D, writes E */
  host_(e_range, 1, NULL, 0);                                                      /* #5 reads E, no comm */
  ck_assert_cg_ok(cg_allreduce(NULL, g, other[0], NULL, NULL, 0, CG_FLOAT32, CG_SUM)); /* #6 touches nothing */
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, NULL, NULL, 0, CG_FLOAT32, CG_SUM));     /* #7 touches nothing */
  NO_PREDS(g, 0);
  NO_PREDS(g, 1); /* another communicator: no order with #0 */
  NO_PREDS(g, 2); /* no communicator: never a comm-order edge */
  PREDS(g, 3, {0, CG_EDGE_COMM_ORDER}); /* read after read of C: only the order */
  PREDS(g, 4, {3, CG_EDGE_RAW | CG_EDGE_COMM_ORDER});
  ck_assert_uint_eq(edge(g, 3, 4), 0x22);
  PREDS(g, 5, {4, CG_EDGE_RAW});
  PREDS(g, 6, {1, CG_EDGE_COMM_ORDER});
  PREDS(g, 7, {4, CG_EDGE_COMM_ORDER}); /* the previous collective on comm, not every earlier one */
  check_stats(g, 5, 0, 2, 0, 0, 0, 4);
  /* a later collective cannot run before an earlier one on its communicator */
  ck_assert_cg_status(cg_depend(g, node_(7), node_(0)), CG_ERR_CYCLE);
  ck_assert_cg_status(cg_depend(g, node_(4), node_(3)), CG_ERR_CYCLE);
  ck_assert_cg_status(cg_depend(g, node_(6), node_(1)), CG_ERR_CYCLE);
  /* across communicators the order is free */
  ck_assert_cg_ok(cg_depend(g, node_(6), node_(0)));
  PREDS(g, 0, {6, CG_EDGE_EXPLICIT});
  ck_assert_cg_ok(cg_depend(g, node_(0), node_(3))); /* joins the comm-order edge */
  ck_assert_uint_eq(edge(g, 0, 3), CG_EDGE_COMM_ORDER | CG_EDGE_EXPLICIT);
  check_stats(g, 6, 2, 2, 0, 0, 0, 4);
}
END_TEST

START_TEST(comm_order__sends_and_receives_between_collectives_form_one_group) {
  cg_range_t d_range[] = {{D, 16}};
  send_(A, 16, CG_FLOAT32);                                                     /* #0 before any collective */
  recv_(B, 16, CG_FLOAT32);                                                     /* #1 */
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, C, C, 16, CG_FLOAT32, CG_SUM));  /* #2 collective P */
  send_(A, 16, CG_FLOAT32);                                                     /* #3 group after P */
  recv_(D, 16, CG_FLOAT32);                                                     /* #4 group */
  ck_assert_cg_ok(cg_send(NULL, g, other[0], E, 16, CG_FLOAT32, 1));           /* #5 another communicator */
  recv_(C, 16, CG_FLOAT32);                                                     /* #6 group; overwrites P's C */
  host_(d_range, 1, NULL, 0);                                                   /* #7 no communicator */
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, NULL, NULL, 0, CG_FLOAT32, CG_SUM)); /* #8 collective Q */
  send_(A, 16, CG_FLOAT32);                                                     /* #9 group after Q */
  NO_PREDS(g, 0); /* no collective on comm yet */
  NO_PREDS(g, 1);
  PREDS(g, 2, {0, CG_EDGE_COMM_ORDER}, {1, CG_EDGE_COMM_ORDER}); /* the group before it */
  PREDS(g, 3, {2, CG_EDGE_COMM_ORDER});
  PREDS(g, 4, {2, CG_EDGE_COMM_ORDER});
  NO_PREDS(g, 5);
  PREDS(g, 6, {2, CG_EDGE_WAW | CG_EDGE_COMM_ORDER});
  PREDS(g, 7, {4, CG_EDGE_RAW});
  /* Q follows every send and receive since P, and through them P */
  PREDS(g, 8, {3, CG_EDGE_COMM_ORDER}, {4, CG_EDGE_COMM_ORDER}, {6, CG_EDGE_COMM_ORDER});
  ck_assert_uint_eq(edge(g, 2, 8), 0);
  ck_assert(reaches(g, 2, 8));
  ck_assert(!reaches(g, 5, 8) && !reaches(g, 7, 8));
  PREDS(g, 9, {8, CG_EDGE_COMM_ORDER});
  check_stats(g, 10, 0, 1, 0, 1, 0, 9);
  /* inside a group sends and receives are not ordered; across groups they are */
  ck_assert_cg_ok(cg_depend(g, node_(6), node_(3)));
  ck_assert_cg_status(cg_depend(g, node_(9), node_(6)), CG_ERR_CYCLE);
  ck_assert_cg_status(cg_depend(g, node_(3), node_(0)), CG_ERR_CYCLE);
  ck_assert_cg_status(cg_depend(g, node_(8), node_(4)), CG_ERR_CYCLE);
  ck_assert_cg_status(cg_depend(g, node_(3), node_(2)), CG_ERR_CYCLE);
  check_stats(g, 11, 1, 1, 0, 1, 0, 9);
}
END_TEST

/* A barrier is both a fence and a collective: its edges carry both causes where
 * both rules give the same pair. */
START_TEST(comm_order__barriers_are_fences_and_collectives) {
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, A, A, 16, CG_FLOAT32, CG_SUM)); /* #0 */
  send_(B, 16, CG_FLOAT32);                                                  /* #1 */
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));                                /* #2 */
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));                                /* #3 */
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL));          /* #4 fence, no comm */
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));                                /* #5 */
  send_(A, 16, CG_FLOAT32);                                                  /* #6 */
  ck_assert_cg_ok(cg_recv(NULL, g, other[0], C, 16, CG_FLOAT32, 1));        /* #7 */
  NO_PREDS(g, 0);
  PREDS(g, 1, {0, CG_EDGE_COMM_ORDER});
  /* #1 is both the last node nothing follows and the group before #2 */
  PREDS(g, 2, {1, CG_EDGE_FENCE | CG_EDGE_COMM_ORDER});
  PREDS(g, 3, {2, CG_EDGE_FENCE | CG_EDGE_COMM_ORDER});
  PREDS(g, 4, {3, CG_EDGE_FENCE});
  /* the fence #4 alone would do, but #5 still follows the previous barrier */
  PREDS(g, 5, {3, CG_EDGE_COMM_ORDER}, {4, CG_EDGE_FENCE});
  /* the comm-order edge from the fence already orders #6 after it */
  PREDS(g, 6, {5, CG_EDGE_COMM_ORDER});
  PREDS(g, 7, {5, CG_EDGE_FENCE});
  for (uint32_t f = 2; f <= 5; f++) {
    ck_assert(cg_graph_node(g, f)->is_fence);
    for (uint32_t i = 0; i < f; i++) ck_assert_msg(reaches(g, i, f), "#%u does not reach fence #%u", i, f);
    for (uint32_t j = f + 1; j < 8; j++) ck_assert_msg(reaches(g, f, j), "fence #%u does not reach #%u", f, j);
  }
  check_stats(g, 8, 0, 0, 0, 0, 5, 5);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("hazard");
  TCase *tc = tcase_create("by_hand");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 10);
  tcase_add_test(tc, hazard__raw_edge);
  tcase_add_test(tc, hazard__war_edge);
  tcase_add_test(tc, hazard__waw_edge);
  tcase_add_test(tc, hazard__one_byte_overlap_makes_an_edge_adjacent_ranges_do_not);
  tcase_add_test(tc, hazard__ranges_at_the_top_of_the_address_space);
  tcase_add_test(tc, hazard__in_place_allreduce);
  tcase_add_test(tc, hazard__readers_then_writer_get_war_but_no_waw);
  tcase_add_test(tc, hazard__one_edge_per_pair_with_ored_causes);
  tcase_add_test(tc, hazard__barrier_and_opaque_host_func_are_fences);
  tcase_add_test(tc, hazard__consecutive_fences_are_chained);
  tcase_add_test(tc, hazard__host_func_with_declared_access_is_not_a_fence);
  tcase_add_test(tc, hazard__explicit_edges);
  tcase_add_test(tc, hazard__explicit_edge_joins_an_existing_edge);
  tcase_add_test(tc, comm_order__collectives_of_one_communicator_follow_in_record_order);
  tcase_add_test(tc, comm_order__sends_and_receives_between_collectives_form_one_group);
  tcase_add_test(tc, comm_order__barriers_are_fences_and_collectives);
  suite_add_tcase(s, tc);
  hazard_add_random_tcase(s);
  return s;
}

int main(void) { return cg_test_main(suite()); }
