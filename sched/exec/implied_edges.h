/* The edges of a dependency graph that other paths already imply
 * (implied_edges.c): plain arrays, so the CUDA executor can drop them from
 * a captured graph (cuda_graph_edges.c) and unit tests can check the choice
 * without a GPU. */
#ifndef CG_IMPLIED_EDGES_H
#define CG_IMPLIED_EDGES_H

#include <stddef.h>
#include <stdint.h>

/* Beyond this many nodes the reachability sets (n^2 / 8 bytes) are not
 * worth their memory: cg_implied_edges declines. */
#define CG_IMPLIED_EDGES_MAX_NODES 16384u

/* implied[e] (n_edges, written only on success): 1 where edge e, from[e] ->
 * to[e] between nodes 0..n_nodes-1, is implied by a path of two or more
 * strong edges from from[e] to to[e], so removing every such edge keeps
 * exactly the order the graph had. strong[e]: whether edge e orders its ends
 * fully (NULL: every edge does); an edge that is not strong (a CUDA graph's
 * programmatic edge, which lets its target start before its source ends) is
 * never implied and never implies another. Returns 0; -1 where it cannot
 * tell (no memory, more than CG_IMPLIED_EDGES_MAX_NODES nodes, a node out of
 * range, or a cycle of strong edges), with implied untouched. */
int cg_implied_edges(uint8_t *implied, uint32_t n_nodes, const uint32_t *from, const uint32_t *to,
                     const uint8_t *strong, size_t n_edges);

#endif
