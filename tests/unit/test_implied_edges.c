/* The edges other paths imply (sched/exec/implied_edges.c), on random DAGs
 * of strong and weak (programmatic) edges against a reference computed here
 * from the full closure, on the shape stream capture leaves (a node that
 * depends on every node of a chain), and on what it must refuse. */
#include <stdlib.h>
#include <string.h>

#include "implied_edges.h"
#include "test_support.h"

enum { MAX_NODES = 64, MAX_EDGES = MAX_NODES * (MAX_NODES - 1) / 2 };

typedef struct dag {
  uint32_t n;
  size_t m;
  uint32_t from[MAX_EDGES + 1], to[MAX_EDGES + 1];
  uint8_t strong[MAX_EDGES + 1];
} dag_t;

/* Nodes numbered in a random order (so a node's number says nothing about
 * its place), each pair of ranks joined with a probability drawn per graph,
 * 4 in 5 edges strong. */
static void make(dag_t *d) {
  uint32_t place[MAX_NODES];
  d->n = 1 + (uint32_t)cg_test_below(MAX_NODES);
  d->m = 0;
  for (uint32_t i = 0; i < d->n; i++) place[i] = i;
  for (uint32_t i = d->n; i-- > 1;) {
    uint32_t j = (uint32_t)cg_test_below(i + 1), t = place[i];
    place[i] = place[j];
    place[j] = t;
  }
  uint64_t per_mille = 20 + cg_test_below(600);
  for (uint32_t a = 0; a < d->n; a++)
    for (uint32_t b = a + 1; b < d->n; b++)
      if (cg_test_below(1000) < per_mille) {
        d->from[d->m] = place[a];
        d->to[d->m] = place[b];
        d->strong[d->m] = cg_test_below(5) != 0;
        d->m++;
      }
}

/* reach[x][y]: a path of one or more strong edges from x to y, of the edges
 * whose keep[e] is set (NULL: all). */
static void closure(uint8_t reach[MAX_NODES][MAX_NODES], const dag_t *d, const uint8_t *keep) {
  memset(reach, 0, sizeof(uint8_t[MAX_NODES][MAX_NODES]));
  for (size_t e = 0; e < d->m; e++)
    if (d->strong[e] && (!keep || keep[e])) reach[d->from[e]][d->to[e]] = 1;
  for (uint32_t k = 0; k < d->n; k++)
    for (uint32_t i = 0; i < d->n; i++)
      if (reach[i][k])
        for (uint32_t j = 0; j < d->n; j++) reach[i][j] |= reach[k][j];
}

START_TEST(implied_edges__match_the_closure_and_keep_the_order) {
  cg_test_reseed(0x1e6e + (uint64_t)_i);
  static dag_t d;
  static uint8_t reach[MAX_NODES][MAX_NODES], after[MAX_NODES][MAX_NODES], beyond[MAX_NODES][MAX_NODES];
  size_t total_implied = 0, total_strong = 0;
  for (int round = 0; round < 300; round++) {
    make(&d);
    uint8_t implied[MAX_EDGES + 1], keep[MAX_EDGES + 1];
    memset(implied, 0xee, sizeof implied);
    REQUIRE(cg_implied_edges(implied, d.n, d.from, d.to, d.strong, d.m) == 0, "round %d: refused a DAG", round);
    closure(reach, &d, NULL);
    /* beyond[u][y]: a path of two or more strong edges from u to y (a
     * strong first hop, then a path on; no graph here has parallel edges) */
    memset(beyond, 0, sizeof beyond);
    for (size_t f = 0; f < d.m; f++)
      for (uint32_t y = 0; y < d.n && d.strong[f]; y++) beyond[d.from[f]][y] |= reach[d.to[f]][y];
    for (size_t e = 0; e < d.m; e++) {
      REQUIRE(implied[e] <= 1, "round %d edge %zu: implied is %u", round, e, implied[e]);
      int want = d.strong[e] && beyond[d.from[e]][d.to[e]];
      REQUIRE(implied[e] == want, "round %d edge %zu (%u -> %u, %s): implied %u, want %d", round, e, d.from[e],
              d.to[e], d.strong[e] ? "strong" : "weak", implied[e], want);
      keep[e] = !implied[e];
      total_implied += implied[e];
      total_strong += d.strong[e];
    }
    closure(after, &d, keep);
    REQUIRE(memcmp(reach, after, sizeof reach) == 0, "round %d: dropping the implied edges changed the order", round);
  }
  REQUIRE(total_implied > 0 && total_implied < total_strong, "%zu of %zu strong edges implied: the graphs test nothing",
          total_implied, total_strong);
}
END_TEST

/* What a capture leaves: backward kernels 0..k-1 in a chain, a collective
 * that waited on a lane which enqueued nothing and so depends on every one
 * of them, and a mark after it. Only the chain, the last kernel's edge to
 * the collective and the mark's stay. */
START_TEST(implied_edges__a_node_on_every_kernel_of_a_chain_keeps_one_edge) {
  enum { K = 3000 };
  uint32_t n = K + 2, collective = K, mark = K + 1;
  size_t m = 0, cap = 2 * (size_t)K + 2;
  uint32_t *from = malloc(cap * sizeof *from), *to = malloc(cap * sizeof *to);
  uint8_t *implied = malloc(cap);
  ck_assert_ptr_nonnull(from);
  ck_assert_ptr_nonnull(to);
  ck_assert_ptr_nonnull(implied);
  for (uint32_t i = 0; i + 1 < K; i++) from[m] = i, to[m++] = i + 1;
  for (uint32_t i = 0; i < K; i++) from[m] = i, to[m++] = collective;
  from[m] = collective, to[m++] = mark;
  from[m] = K / 2, to[m++] = mark; /* the mark waited on an early kernel too */
  ck_assert_int_eq(cg_implied_edges(implied, n, from, to, NULL, m), 0);
  size_t n_implied = 0;
  for (size_t e = 0; e < m; e++) {
    n_implied += implied[e];
    int last_to_collective = from[e] == K - 1 && to[e] == collective;
    if (to[e] == collective)
      REQUIRE(implied[e] == !last_to_collective, "edge %u -> collective: %u", from[e], implied[e]);
  }
  ck_assert_uint_eq(n_implied, (size_t)K); /* K - 1 to the collective, the early kernel's to the mark */
  free(from);
  free(to);
  free(implied);
}
END_TEST

START_TEST(implied_edges__refuses_what_it_cannot_reduce) {
  uint8_t implied[4];
  uint32_t from[] = {0, 1, 2, 0}, to[] = {1, 2, 0, 2};
  uint8_t strong[] = {1, 1, 1, 1};
  memset(implied, 0xee, sizeof implied);
  ck_assert_int_eq(cg_implied_edges(implied, 3, from, to, strong, 4), -1); /* a strong cycle */
  for (int e = 0; e < 4; e++) ck_assert_uint_eq(implied[e], 0xee);
  strong[2] = 0; /* the edge back is programmatic: no strong cycle, and 0 -> 2 is implied by 0 -> 1 -> 2 */
  ck_assert_int_eq(cg_implied_edges(implied, 3, from, to, strong, 4), 0);
  ck_assert_uint_eq(implied[0], 0);
  ck_assert_uint_eq(implied[1], 0);
  ck_assert_uint_eq(implied[2], 0);
  ck_assert_uint_eq(implied[3], 1);
  memset(implied, 0xee, sizeof implied);
  uint32_t out_of_range[] = {0, 3};
  ck_assert_int_eq(cg_implied_edges(implied, 3, out_of_range, out_of_range + 1, NULL, 1), -1);
  ck_assert_int_eq(cg_implied_edges(implied, CG_IMPLIED_EDGES_MAX_NODES + 1, NULL, NULL, NULL, 0), -1);
  ck_assert_uint_eq(implied[0], 0xee);
  ck_assert_int_eq(cg_implied_edges(NULL, 0, NULL, NULL, NULL, 0), 0);
  ck_assert_int_eq(cg_implied_edges(NULL, 5, NULL, NULL, NULL, 0), 0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("implied_edges");
  TCase *c = tcase_create("reduce");
  tcase_set_timeout(c, 60);
  tcase_add_loop_test(c, implied_edges__match_the_closure_and_keep_the_order, 0, 4);
  tcase_add_test(c, implied_edges__a_node_on_every_kernel_of_a_chain_keeps_one_edge);
  tcase_add_test(c, implied_edges__refuses_what_it_cannot_reduce);
  suite_add_tcase(s, c);
  return s;
}

int main(void) { return cg_test_main(suite()); }
