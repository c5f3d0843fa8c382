/* The library's one binary min-heap: uint32_t items (node, step or item
 * indices) in storage the caller owns, ordered by a comparison the caller
 * gives. Kahn's algorithm over nodes (graph/order.c), the fusion simulation
 * (sched/compile/fusion.c), lowering (sched/compile/lower.c) and the issue
 * order (sched/compile/issue_order.c) all take their ready sets from it.
 *
 * The order items come out is a function of the items pushed and popped, in
 * the order they were, and of the comparison: the same calls give the same
 * order on every rank. With a strict order in which no two items compare
 * equal (record index, topological rank, step index) it is simply ascending;
 * with ties it is still deterministic, fixed by this file's sifting rules
 * (a parent moves down only when the item is less than it; the right child is
 * taken only when it is less than the left), which the plans depend on: do
 * not change them.
 *
 *   uint32_t *storage = malloc(n * sizeof *storage);
 *   cg_heap_t ready = cg_heap_make(storage, cg_heap_less_key, rank);
 *   cg_heap_push(&ready, v);
 *   while (ready.n) { uint32_t v = cg_heap_pop(&ready); ... }
 *   free(ready.items);
 *
 * Header only; nothing allocates, nothing fails. */
#ifndef CG_CORE_HEAP_H
#define CG_CORE_HEAP_H

#include <stddef.h>
#include <stdint.h>

/* Nonzero when item a comes strictly before item b. */
typedef int (*cg_heap_less_t)(uint32_t a, uint32_t b, const void *ctx);

typedef struct cg_heap {
  uint32_t *items;     /* the caller's: room for as many items as are in the heap at once */
  uint32_t n;          /* items in the heap: items[0] .. items[n - 1] */
  cg_heap_less_t less; /* the order */
  const void *ctx;     /* less's third argument */
} cg_heap_t;

/* Orders: the items themselves (ctx unused), or a key per item (ctx is a
 * const uint32_t array indexed by item). */
static inline int cg_heap_less_value(uint32_t a, uint32_t b, const void *ctx) {
  (void)ctx;
  return a < b;
}

static inline int cg_heap_less_key(uint32_t a, uint32_t b, const void *ctx) {
  const uint32_t *key = ctx;
  return key[a] < key[b];
}

/* An empty heap over `storage` (which may be NULL until the first push). */
static inline cg_heap_t cg_heap_make(uint32_t *storage, cg_heap_less_t less, const void *ctx) {
  return (cg_heap_t){.items = storage, .n = 0, .less = less, .ctx = ctx};
}

static inline void cg_heap_push(cg_heap_t *h, uint32_t item) {
  uint32_t i = h->n++;
  while (i > 0 && h->less(item, h->items[(i - 1) / 2], h->ctx)) {
    h->items[i] = h->items[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->items[i] = item;
}

/* The least item; the heap must not be empty. */
static inline uint32_t cg_heap_top(const cg_heap_t *h) { return h->items[0]; }

/* Takes out and returns the least item; the heap must not be empty. */
static inline uint32_t cg_heap_pop(cg_heap_t *h) {
  uint32_t top = h->items[0], last = h->items[--h->n];
  size_t i = 0;
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= h->n) break;
    if (child + 1 < h->n && h->less(h->items[child + 1], h->items[child], h->ctx)) child++;
    if (!h->less(h->items[child], last, h->ctx)) break;
    h->items[i] = h->items[child];
    i = child;
  }
  if (h->n) h->items[i] = last;
  return top;
}

#endif
