/* Deterministic topological order: Kahn's algorithm with a min-heap on record
 * index as the tie-break. */
#include <stdlib.h>

#include "error.h"
#include "graph_view.h"

static void heap_push(uint32_t *heap, size_t *len, uint32_t v) {
  size_t i = (*len)++;
  while (i && heap[(i - 1) / 2] > v) {
    heap[i] = heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  heap[i] = v;
}

static uint32_t heap_pop(uint32_t *heap, size_t *len) {
  uint32_t top = heap[0], last = heap[--(*len)];
  size_t i = 0;
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= *len) break;
    if (child + 1 < *len && heap[child + 1] < heap[child]) child++;
    if (heap[child] >= last) break;
    heap[i] = heap[child];
    i = child;
  }
  if (*len) heap[i] = last;
  return top;
}

cg_status_t cg_graph_topo_order(const cg_graph_t *g, uint32_t *order) {
  cg_status_t st = CG_SUCCESS;
  uint32_t n = g->n_nodes;
  uint32_t *waiting = NULL, *heap = NULL;
  if (!g->has_backward_edges) {
    /* Every edge points forward, so record order is already topological and
     * it is exactly what the heap would produce. */
    for (uint32_t i = 0; i < n; i++) order[i] = i;
    goto out;
  }
  waiting = malloc((size_t)n * sizeof *waiting);
  heap = malloc((size_t)n * sizeof *heap);
  if (!waiting || !heap) {
    st = cg_fail(CG_ERR_NO_MEMORY, "topological order of %u nodes", n);
    goto out;
  }
  size_t len = 0, emitted = 0;
  for (uint32_t i = 0; i < n; i++) {
    waiting[i] = g->nodes[i].preds.len;
    if (!waiting[i]) heap_push(heap, &len, i);
  }
  while (len) {
    uint32_t v = heap_pop(heap, &len);
    order[emitted++] = v;
    const cg_edge_vec_t *succs = &g->nodes[v].succs;
    for (uint32_t e = 0; e < succs->len; e++)
      if (--waiting[succs->items[e].node] == 0) heap_push(heap, &len, succs->items[e].node);
  }
  if (emitted != n) st = cg_fail(CG_ERR_INTERNAL, "graph has a cycle: %zu of %u nodes ordered", emitted, n);
out:
  free(waiting);
  free(heap);
  return st;
}
