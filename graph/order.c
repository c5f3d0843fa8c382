/* Deterministic topological order: Kahn's algorithm with a min-heap on record
 * index as the tie-break. */
#include <stdlib.h>

#include "error.h"
#include "graph_view.h"
#include "heap.h"

cg_status_t cg_graph_topo_order(const cg_graph_t *g, uint32_t *order) {
  cg_status_t st = CG_SUCCESS;
  uint32_t n = g->n_nodes;
  uint32_t *waiting = NULL;
  cg_heap_t ready = cg_heap_make(NULL, cg_heap_less_value, NULL);
  if (!g->has_backward_edges) {
    /* Every edge points forward, so record order is already topological and
     * it is exactly what the heap would produce. */
    for (uint32_t i = 0; i < n; i++) order[i] = i;
    goto out;
  }
  waiting = malloc((size_t)n * sizeof *waiting);
  ready.items = malloc((size_t)n * sizeof *ready.items);
  if (!waiting || !ready.items) {
    st = cg_fail(CG_ERR_NO_MEMORY, "topological order of %u nodes", n);
    goto out;
  }
  size_t emitted = 0;
  for (uint32_t i = 0; i < n; i++) {
    waiting[i] = g->nodes[i].preds.len;
    if (!waiting[i]) cg_heap_push(&ready, i);
  }
  while (ready.n) {
    uint32_t v = cg_heap_pop(&ready);
    order[emitted++] = v;
    const cg_edge_vec_t *succs = &g->nodes[v].succs;
    for (uint32_t e = 0; e < succs->len; e++)
      if (--waiting[succs->items[e].node] == 0) cg_heap_push(&ready, succs->items[e].node);
  }
  if (emitted != n) st = cg_fail(CG_ERR_INTERNAL, "graph has a cycle: %zu of %u nodes ordered", emitted, n);
out:
  free(waiting);
  free(ready.items);
  return st;
}
