/* Explicit edges: cg_depend and the cycle check behind it. */
#include <stdlib.h>

#include "error.h"
#include "graph_internal.h"

static cg_edge_t *find_edge(cg_edge_vec_t *v, uint32_t node) {
  for (uint32_t i = 0; i < v->len; i++)
    if (v->items[i].node == node) return &v->items[i];
  return NULL;
}

cg_status_t cg_graph_link(cg_graph_t *g, uint32_t before, uint32_t after, uint32_t causes) {
  cg_node_rec_t *from = &g->nodes[before], *to = &g->nodes[after];
  cg_edge_t *succ = find_edge(&from->succs, after);
  if (succ) {
    succ->causes |= causes;
    find_edge(&to->preds, before)->causes |= causes;
    return CG_SUCCESS;
  }
  if (cg_edge_vec_reserve(&from->succs, (size_t)from->succs.len + 1) != CG_SUCCESS ||
      cg_edge_vec_reserve(&to->preds, (size_t)to->preds.len + 1) != CG_SUCCESS)
    return CG_ERR_NO_MEMORY;
  from->succs.items[from->succs.len++] = (cg_edge_t){after, causes};
  to->preds.items[to->preds.len++] = (cg_edge_t){before, causes};
  g->n_edges++;
  if (before > after) g->has_backward_edges = 1;
  return CG_SUCCESS;
}

/* Depth-first search along successors from `from`; sets *found if it meets
 * `target`. */
static cg_status_t reaches(const cg_graph_t *g, uint32_t from, uint32_t target, int *found) {
  cg_status_t st = CG_SUCCESS;
  *found = 0;
  unsigned char *seen = calloc(g->n_nodes, 1);
  uint32_t *stack = malloc((size_t)g->n_nodes * sizeof *stack);
  if (!seen || !stack) {
    st = CG_ERR_NO_MEMORY;
    goto out;
  }
  size_t depth = 0;
  stack[depth++] = from;
  seen[from] = 1;
  while (depth && !*found) {
    const cg_node_rec_t *n = &g->nodes[stack[--depth]];
    for (uint32_t i = 0; i < n->succs.len; i++) {
      uint32_t next = n->succs.items[i].node;
      if (next == target) *found = 1;
      if (seen[next]) continue;
      seen[next] = 1;
      stack[depth++] = next;
    }
  }
out:
  free(seen);
  free(stack);
  return st;
}

static const char *node_label(const cg_graph_t *g, uint32_t i) {
  return g->nodes[i].name ? g->nodes[i].name : cg_node_kind_name(g->nodes[i].kind);
}

cg_status_t cg_depend(cg_graph_t *g, cg_node_t before, cg_node_t after) {
  if (!g) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_depend: NULL graph");
  cg_status_t st = cg_graph_check_node(g, before, "cg_depend (before)");
  if (st == CG_SUCCESS) st = cg_graph_check_node(g, after, "cg_depend (after)");
  if (st != CG_SUCCESS) return st;
  if (before.index == after.index)
    return cg_fail(CG_ERR_CYCLE, "cg_depend: node #%u '%s' cannot depend on itself", before.index,
                   node_label(g, before.index));
  /* While every edge points forward in record order, a forward edge cannot
   * close a cycle; otherwise look for a path back. */
  if (before.index > after.index || g->has_backward_edges) {
    int found = 0;
    if ((st = reaches(g, after.index, before.index, &found)) != CG_SUCCESS)
      return cg_fail(st, "cg_depend: out of memory checking for a cycle");
    if (found)
      return cg_fail(CG_ERR_CYCLE, "cg_depend: node #%u '%s' already runs after node #%u '%s'", before.index,
                     node_label(g, before.index), after.index, node_label(g, after.index));
  }
  st = cg_graph_link(g, before.index, after.index, CG_EDGE_EXPLICIT);
  if (st != CG_SUCCESS)
    return cg_fail(st, "cg_depend: out of memory adding edge #%u -> #%u", before.index, after.index);
  return CG_SUCCESS;
}
