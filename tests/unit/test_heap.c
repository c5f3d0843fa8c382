/* The shared min-heap (core/heap.h). Random pushes and pops, interleaved as
 * Kahn's algorithm does, against a sorted reference; keys with ties against
 * the swap-based heap the compile passes had before core/heap.h, so the
 * plans (compared across ranks) keep their order; and a caller's own order
 * through ctx. Random inputs come from cg_test_rand, whose seed
 * cg_test_main prints (CG_TEST_SEED repeats a run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "test_support.h"

static uint32_t *alloc_u32(size_t n) {
  uint32_t *p = malloc((n ? n : 1) * sizeof *p);
  REQUIRE(p, "out of memory");
  return p;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* ---- the reference for ties: the heap of sched/compile/lower.c, fusion.c and
 * issue_order.c before core/heap.h (swapping, the left child first on ties) */

typedef struct old_heap {
  uint32_t *items;
  uint32_t n;
  const uint32_t *key;
} old_heap_t;

static void old_push(old_heap_t *h, uint32_t v) {
  uint32_t i = h->n++;
  h->items[i] = v;
  while (i > 0 && h->key[h->items[(i - 1) / 2]] > h->key[h->items[i]]) {
    uint32_t parent = (i - 1) / 2, t = h->items[parent];
    h->items[parent] = h->items[i];
    h->items[i] = t;
    i = parent;
  }
}

static uint32_t old_pop(old_heap_t *h) {
  uint32_t top = h->items[0];
  h->items[0] = h->items[--h->n];
  for (uint32_t i = 0;;) {
    uint32_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && h->key[h->items[l]] < h->key[h->items[m]]) m = l;
    if (r < h->n && h->key[h->items[r]] < h->key[h->items[m]]) m = r;
    if (m == i) break;
    uint32_t t = h->items[m];
    h->items[m] = h->items[i];
    h->items[i] = t;
    i = m;
  }
  return top;
}

/* ---- tests */

START_TEST(heap__empty_and_one_item) {
  uint32_t storage[1];
  cg_heap_t h = cg_heap_make(storage, cg_heap_less_value, NULL);
  ck_assert_uint_eq(h.n, 0);
  ck_assert_ptr_eq(h.items, storage);
  cg_heap_push(&h, 42);
  ck_assert_uint_eq(h.n, 1);
  ck_assert_uint_eq(cg_heap_top(&h), 42);
  ck_assert_uint_eq(cg_heap_pop(&h), 42);
  ck_assert_uint_eq(h.n, 0);
  /* used again after running empty */
  cg_heap_push(&h, UINT32_MAX);
  ck_assert_uint_eq(cg_heap_pop(&h), UINT32_MAX);
  ck_assert_uint_eq(h.n, 0);
}
END_TEST

START_TEST(heap__small_by_hand) {
  static const uint32_t in[] = {5, 3, 9, 0, 7, 3, 1, 8, 2, 6, 4, 3};
  enum { N = sizeof in / sizeof in[0] };
  uint32_t storage[N], out[N];
  cg_heap_t h = cg_heap_make(storage, cg_heap_less_value, NULL);
  for (uint32_t i = 0; i < N; i++) cg_heap_push(&h, in[i]);
  ck_assert_uint_eq(h.n, N);
  ck_assert_uint_eq(cg_heap_top(&h), 0);
  for (uint32_t i = 0; i < N; i++) out[i] = cg_heap_pop(&h);
  static const uint32_t want[] = {0, 1, 2, 3, 3, 3, 4, 5, 6, 7, 8, 9};
  ck_assert_mem_eq(out, want, sizeof want);
}
END_TEST

/* Push everything, pop everything: ascending, the same multiset. */
START_TEST(heap__random_values_come_out_sorted) {
  cg_test_reseed(1);
  for (int round = 0; round < 200; round++) {
    uint32_t n = (uint32_t)cg_test_below(round < 20 ? 8 : 2000);
    /* small ranges give many equal values, large ones almost none */
    uint64_t range = round % 3 == 0 ? 4 : round % 3 == 1 ? n + 1 : (uint64_t)UINT32_MAX + 1;
    uint32_t *in = alloc_u32(n), *ref = alloc_u32(n), *storage = alloc_u32(n);
    for (uint32_t i = 0; i < n; i++) ref[i] = in[i] = (uint32_t)cg_test_below(range);
    qsort(ref, n, sizeof *ref, cmp_u32);
    cg_heap_t h = cg_heap_make(storage, cg_heap_less_value, NULL);
    for (uint32_t i = 0; i < n; i++) cg_heap_push(&h, in[i]);
    REQUIRE(h.n == n, "round %d: %u items after %u pushes", round, h.n, n);
    for (uint32_t i = 0; i < n; i++) {
      REQUIRE(cg_heap_top(&h) == ref[i], "round %d: top %u, expected %u", round, cg_heap_top(&h), ref[i]);
      uint32_t v = cg_heap_pop(&h);
      REQUIRE(v == ref[i], "round %d, pop %u of %u: %u, expected %u", round, i, n, v, ref[i]);
    }
    REQUIRE(h.n == 0, "round %d: %u items left", round, h.n);
    free(in);
    free(ref);
    free(storage);
  }
}
END_TEST

/* Pushes and pops interleaved: every pop is the least of what is in. The
 * reference keeps the contents sorted (insertion). */
START_TEST(heap__random_interleaved_pops_take_the_least) {
  cg_test_reseed(2);
  for (int round = 0; round < 100; round++) {
    uint32_t n = 1 + (uint32_t)cg_test_below(1500), in_ref = 0;
    uint64_t range = round % 2 ? 16 : (uint64_t)UINT32_MAX + 1;
    uint32_t *ref = alloc_u32(n), *storage = alloc_u32(n);
    cg_heap_t h = cg_heap_make(storage, cg_heap_less_value, NULL);
    uint32_t pushed = 0;
    while (pushed < n || h.n) {
      int push = pushed < n && (h.n == 0 || cg_test_below(3) != 0);
      if (push) {
        uint32_t v = (uint32_t)cg_test_below(range), k = in_ref++;
        for (; k > 0 && ref[k - 1] < v; k--) ref[k] = ref[k - 1]; /* descending: the least last */
        ref[k] = v;
        cg_heap_push(&h, v);
        pushed++;
      } else {
        uint32_t v = cg_heap_pop(&h), want = ref[--in_ref];
        REQUIRE(v == want, "round %d: popped %u, expected %u", round, v, want);
      }
      REQUIRE(h.n == in_ref, "round %d: %u items, expected %u", round, h.n, in_ref);
    }
    free(ref);
    free(storage);
  }
}
END_TEST

/* Kahn's algorithm over random DAGs of distinct keys (a permutation, as the
 * topological ranks of fusion.c and lower.c are): the order is the
 * lowest-key-first topological order a plain linear scan finds. */
START_TEST(heap__kahn_by_key_matches_a_linear_scan) {
  cg_test_reseed(3);
  for (int round = 0; round < 60; round++) {
    uint32_t n = 1 + (uint32_t)cg_test_below(300);
    uint32_t *key = alloc_u32(n), *pending = alloc_u32(n), *pending_ref = alloc_u32(n), *storage = alloc_u32(n);
    uint8_t *edge = calloc((size_t)n * n, 1), *done = calloc(n, 1);
    REQUIRE(edge && done, "out of memory");
    for (uint32_t i = 0; i < n; i++) key[i] = i;
    for (uint32_t i = n; i > 1; i--) { /* shuffle */
      uint32_t j = (uint32_t)cg_test_below(i), t = key[i - 1];
      key[i - 1] = key[j];
      key[j] = t;
    }
    for (uint32_t i = 0; i < n; i++) pending[i] = 0;
    for (uint32_t a = 0; a < n; a++) /* edges point to higher indices: a DAG */
      for (uint32_t b = a + 1; b < n; b++)
        if (cg_test_below(100) < 3) edge[(size_t)a * n + b] = 1, pending[b]++;
    memcpy(pending_ref, pending, n * sizeof *pending);
    cg_heap_t h = cg_heap_make(storage, cg_heap_less_key, key);
    for (uint32_t v = 0; v < n; v++)
      if (!pending[v]) cg_heap_push(&h, v);
    for (uint32_t out = 0; out < n; out++) {
      uint32_t best = UINT32_MAX;
      for (uint32_t v = 0; v < n; v++)
        if (!done[v] && !pending_ref[v] && (best == UINT32_MAX || key[v] < key[best])) best = v;
      REQUIRE(best != UINT32_MAX && h.n > 0, "round %d: nothing ready after %u of %u", round, out, n);
      uint32_t v = cg_heap_pop(&h);
      REQUIRE(v == best, "round %d, %u of %u: popped %u (key %u), expected %u (key %u)", round, out, n, v, key[v],
              best, key[best]);
      done[v] = 1;
      for (uint32_t b = v + 1; b < n; b++)
        if (edge[(size_t)v * n + b]) {
          pending_ref[b]--;
          if (--pending[b] == 0) cg_heap_push(&h, b);
        }
    }
    REQUIRE(h.n == 0, "round %d: %u items left", round, h.n);
    free(key);
    free(pending);
    free(pending_ref);
    free(storage);
    free(edge);
    free(done);
  }
}
END_TEST

/* Keys with many ties, pushes and pops interleaved: the same items in the same
 * order as the heap the passes had before, and keys ascending. */
START_TEST(heap__ties_come_out_as_before) {
  cg_test_reseed(4);
  for (int round = 0; round < 200; round++) {
    uint32_t n = 1 + (uint32_t)cg_test_below(round < 50 ? 12 : 3000);
    uint64_t range = 1 + cg_test_below(round % 4 == 0 ? 2 : 64);
    uint32_t *key = alloc_u32(n), *storage = alloc_u32(n), *old_storage = alloc_u32(n);
    for (uint32_t i = 0; i < n; i++) key[i] = (uint32_t)cg_test_below(range);
    cg_heap_t h = cg_heap_make(storage, cg_heap_less_key, key);
    old_heap_t old = {.items = old_storage, .n = 0, .key = key};
    uint32_t pushed = 0, popped = 0, last_key = 0;
    while (pushed < n || h.n) {
      if (pushed < n && (h.n == 0 || cg_test_below(4) != 0)) {
        cg_heap_push(&h, pushed);
        old_push(&old, pushed);
        pushed++;
        last_key = 0; /* a push may bring a smaller key */
      } else {
        uint32_t v = cg_heap_pop(&h), w = old_pop(&old);
        REQUIRE(v == w, "round %d, pop %u: item %u (key %u), before item %u (key %u)", round, popped, v, key[v], w,
                key[w]);
        REQUIRE(key[v] >= last_key, "round %d, pop %u: key %u after %u", round, popped, key[v], last_key);
        last_key = key[v];
        popped++;
      }
      REQUIRE(h.n == old.n && memcmp(h.items, old.items, h.n * sizeof *h.items) == 0,
              "round %d: the heap's layout differs from before after %u pushes, %u pops", round, pushed, popped);
    }
    free(key);
    free(storage);
    free(old_storage);
  }
}
END_TEST

/* A caller's order through ctx: descending by a field of a struct. */
typedef struct thing {
  int weight;
  const char *name;
} thing_t;

static int heavier_first(uint32_t a, uint32_t b, const void *ctx) {
  const thing_t *things = ctx;
  return things[a].weight > things[b].weight;
}

START_TEST(heap__caller_order_and_context) {
  cg_test_reseed(5);
  enum { N = 500 };
  thing_t things[N];
  uint32_t storage[N], ref[N];
  for (uint32_t i = 0; i < N; i++) things[i] = (thing_t){(int)cg_test_below(1000) - 500, "thing"};
  for (uint32_t i = 0; i < N; i++) ref[i] = (uint32_t)(things[i].weight + 500);
  qsort(ref, N, sizeof *ref, cmp_u32);
  cg_heap_t h = cg_heap_make(storage, heavier_first, things);
  ck_assert_ptr_eq(h.ctx, things);
  for (uint32_t i = 0; i < N; i++) cg_heap_push(&h, i);
  for (uint32_t i = 0; i < N; i++) {
    uint32_t v = cg_heap_pop(&h);
    REQUIRE((uint32_t)(things[v].weight + 500) == ref[N - 1 - i], "pop %u: weight %d, expected %d", i,
            things[v].weight, (int)ref[N - 1 - i] - 500);
  }
  ck_assert_uint_eq(h.n, 0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("heap");
  TCase *hand = tcase_create("by_hand");
  tcase_set_timeout(hand, 30);
  tcase_add_test(hand, heap__empty_and_one_item);
  tcase_add_test(hand, heap__small_by_hand);
  tcase_add_test(hand, heap__caller_order_and_context);
  suite_add_tcase(s, hand);
  TCase *random = tcase_create("random");
  tcase_set_timeout(random, 60);
  tcase_add_test(random, heap__random_values_come_out_sorted);
  tcase_add_test(random, heap__random_interleaved_pops_take_the_least);
  tcase_add_test(random, heap__kahn_by_key_matches_a_linear_scan);
  tcase_add_test(random, heap__ties_come_out_as_before);
  suite_add_tcase(s, random);
  return s;
}

int main(void) { return cg_test_main(suite()); }
