/* What the scheduler reads from a recorded graph: nodes, edges and a
 * deterministic topological order. Read-only. */
#ifndef CG_GRAPH_VIEW_H
#define CG_GRAPH_VIEW_H

#include "graph_internal.h"

static inline uint32_t cg_graph_node_count(const cg_graph_t *g) { return g->n_nodes; }
static inline const cg_node_rec_t *cg_graph_node(const cg_graph_t *g, uint32_t index) { return &g->nodes[index]; }

/* Fills order[0 .. node count) with every node index once, each after all of
 * its predecessors; among nodes that are ready together the earliest recorded
 * goes first, so the order depends only on the recorded program. */
cg_status_t cg_graph_topo_order(const cg_graph_t *g, uint32_t *order);

#endif
