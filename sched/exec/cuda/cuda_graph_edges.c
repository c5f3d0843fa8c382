/* The implied edges of a captured graph (cuda_graph_edges.h): its nodes and
 * edges read back, numbered, reduced by cg_implied_edges, and the implied
 * ones removed in one call. */
#include "cuda_graph_edges.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "error.h"
#include "implied_edges.h"

/* CUDA 12.3 added edge data (programmatic edges and their ports), under _v2
 * names until 13.0 took the plain ones; before it every edge is a full
 * dependency and the data below stays zero. */
#if CUDART_VERSION >= 13000
typedef cudaGraphEdgeData edge_data_t;
#define get_edges(g, f, t, d, n) cudaGraphGetEdges(g, f, t, d, n)
#define remove_edges(g, f, t, d, n) cudaGraphRemoveDependencies(g, f, t, d, n)
#elif CUDART_VERSION >= 12030
typedef cudaGraphEdgeData edge_data_t;
#define get_edges(g, f, t, d, n) cudaGraphGetEdges_v2(g, f, t, d, n)
#define remove_edges(g, f, t, d, n) cudaGraphRemoveDependencies_v2(g, f, t, d, n)
#else
typedef struct edge_data {
  char none;
} edge_data_t;
#define get_edges(g, f, t, d, n) ((void)(d), cudaGraphGetEdges(g, f, t, n))
#define remove_edges(g, f, t, d, n) ((void)(d), cudaGraphRemoveDependencies(g, f, t, n))
#endif

/* The graph's nodes and edges; NULL arrays: the counts alone. */
static cudaError_t read_graph(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *n_nodes, cudaGraphNode_t *from,
                              cudaGraphNode_t *to, edge_data_t *data, size_t *n_edges) {
  cudaError_t err = cudaGraphGetNodes(graph, nodes, n_nodes);
  return err == cudaSuccess ? get_edges(graph, from, to, data, n_edges) : err;
}

typedef struct numbered {
  cudaGraphNode_t node;
  uint32_t index;
} numbered_t;

static int by_node(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const numbered_t *)a)->node, y = (uintptr_t)((const numbered_t *)b)->node;
  return x < y ? -1 : x > y;
}

static uint32_t number_of(const numbered_t *sorted, size_t n, cudaGraphNode_t node) {
  numbered_t key = {node, 0};
  const numbered_t *hit = bsearch(&key, sorted, n, sizeof *sorted, by_node);
  return hit ? hit->index : UINT32_MAX;
}

cg_status_t cg_cuda_drop_implied_edges(cudaGraph_t graph, const char *where) {
  cg_status_t st = CG_SUCCESS;
  size_t n_nodes = 0, n_edges = 0, n_implied = 0;
  cudaGraphNode_t *nodes = NULL, *from = NULL, *to = NULL;
  numbered_t *sorted = NULL;
  uint32_t *from_index = NULL, *to_index = NULL;
  uint8_t *strong = NULL, *implied = NULL;
  edge_data_t *data = NULL;
  cudaError_t err = read_graph(graph, NULL, &n_nodes, NULL, NULL, NULL, &n_edges);
  if (err != cudaSuccess) {
    st = cg_fail_cuda(err, "cudaGraphGetNodes/cudaGraphGetEdges", "%s", where);
    goto out;
  }
  if (n_edges < 2 || n_nodes > CG_IMPLIED_EDGES_MAX_NODES) goto out; /* nothing to imply, or too large */
  nodes = malloc(n_nodes * sizeof *nodes);
  sorted = malloc(n_nodes * sizeof *sorted);
  from = malloc(n_edges * sizeof *from);
  to = malloc(n_edges * sizeof *to);
  from_index = malloc(n_edges * sizeof *from_index);
  to_index = malloc(n_edges * sizeof *to_index);
  strong = malloc(n_edges);
  implied = malloc(n_edges);
  data = calloc(n_edges, sizeof *data);
  if (!nodes || !sorted || !from || !to || !from_index || !to_index || !strong || !implied || !data) {
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: reading a graph of %zu nodes and %zu edges", where, n_nodes, n_edges);
    goto out;
  }
  if ((err = read_graph(graph, nodes, &n_nodes, from, to, data, &n_edges)) != cudaSuccess) {
    st = cg_fail_cuda(err, "cudaGraphGetNodes/cudaGraphGetEdges", "%s", where);
    goto out;
  }
  for (size_t i = 0; i < n_nodes; i++) sorted[i] = (numbered_t){nodes[i], (uint32_t)i};
  qsort(sorted, n_nodes, sizeof *sorted, by_node);
  static const edge_data_t plain; /* a full dependency: default type, default ports */
  for (size_t e = 0; e < n_edges; e++) {
    from_index[e] = number_of(sorted, n_nodes, from[e]);
    to_index[e] = number_of(sorted, n_nodes, to[e]);
    strong[e] = memcmp(&data[e], &plain, sizeof plain) == 0;
  }
  if (cg_implied_edges(implied, (uint32_t)n_nodes, from_index, to_index, strong, n_edges) != 0) goto out;
  /* the implied edges to the front, for one removal call */
  for (size_t e = 0; e < n_edges; e++) {
    if (!implied[e]) continue;
    from[n_implied] = from[e];
    to[n_implied] = to[e];
    data[n_implied] = data[e];
    n_implied++;
  }
  if (n_implied && (err = remove_edges(graph, from, to, data, n_implied)) != cudaSuccess)
    st = cg_fail_cuda(err, "cudaGraphRemoveDependencies", "%s: dropping %zu implied edges", where, n_implied);
out:
  free(nodes);
  free(sorted);
  free(from);
  free(to);
  free(from_index);
  free(to_index);
  free(strong);
  free(implied);
  free(data);
  return st;
}
