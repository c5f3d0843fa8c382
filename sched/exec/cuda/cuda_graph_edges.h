/* Dropping the edges of a captured graph that other paths imply
 * (cuda_graph_edges.c). */
#ifndef CG_CUDA_GRAPH_EDGES_H
#define CG_CUDA_GRAPH_EDGES_H

#include <cuda_runtime_api.h>

#include "commgraph/status.h"

/* Removes from `graph` (its own level, not its child graphs) every edge that
 * a longer path of full dependencies implies (cg_implied_edges), so the
 * graph orders exactly what it did. A graph too large to reduce
 * (CG_IMPLIED_EDGES_MAX_NODES) stays as it is. Stream capture leaves such edges wherever a stream that
 * enqueued nothing since its last wait waits again: its dependencies pile
 * up, and the next node on it depends on all of them. */
cg_status_t cg_cuda_drop_implied_edges(cudaGraph_t graph, const char *where);

#endif
