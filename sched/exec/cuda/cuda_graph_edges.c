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
 * names until 13.0 took the plain ones. */
#if CUDART_VERSION >= 13000
#define EDGE_DATA 1
#define get_edges(g, f, t, d, n) cudaGraphGetEdges(g, f, t, d, n)
#define remove_edges(g, f, t, d, n) cudaGraphRemoveDependencies(g, f, t, d, n)
#elif CUDART_VERSION >= 12030
#define EDGE_DATA 1
#define get_edges(g, f, t, d, n) cudaGraphGetEdges_v2(g, f, t, d, n)
#define remove_edges(g, f, t, d, n) cudaGraphRemoveDependencies_v2(g, f, t, d, n)
#else
#define EDGE_DATA 0
#endif

/* The graph's nodes and edges (with their data where CUDA has it); NULL
 * arrays: the counts alone. */
static cudaError_t read_graph(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *n_nodes, cudaGraphNode_t *from,
                              cudaGraphNode_t *to, void *data, size_t *n_edges) {
  cudaError_t err = cudaGraphGetNodes(graph, nodes, n_nodes);
#if EDGE_DATA
  if (err == cudaSuccess) err = get_edges(graph, from, to, (cudaGraphEdgeData *)data, n_edges);
#else
  (void)data;
  if (err == cudaSuccess) err = cudaGraphGetEdges(graph, from, to, n_edges);
#endif
  return err;
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

cg_status_t cg_cuda_drop_implied_edges(cudaGraph_t graph, size_t *dropped, const char *where) {
  cg_status_t st = CG_SUCCESS;
  size_t n_nodes = 0, n_edges = 0, n_implied = 0;
  cudaGraphNode_t *nodes = NULL, *from = NULL, *to = NULL;
  numbered_t *sorted = NULL;
  uint32_t *from_index = NULL, *to_index = NULL;
  uint8_t *strong = NULL, *implied = NULL;
#if EDGE_DATA
  cudaGraphEdgeData *data = NULL;
#endif
  if (dropped) *dropped = 0;
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
#if EDGE_DATA
  data = calloc(n_edges, sizeof *data);
  int have_data = data != NULL;
#else
  int have_data = 1;
#endif
  if (!nodes || !sorted || !from || !to || !from_index || !to_index || !strong || !implied || !have_data) {
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: reading a graph of %zu nodes and %zu edges", where, n_nodes, n_edges);
    goto out;
  }
#if EDGE_DATA
  err = read_graph(graph, nodes, &n_nodes, from, to, data, &n_edges);
#else
  err = read_graph(graph, nodes, &n_nodes, from, to, NULL, &n_edges);
#endif
  if (err != cudaSuccess) {
    st = cg_fail_cuda(err, "cudaGraphGetNodes/cudaGraphGetEdges", "%s", where);
    goto out;
  }
  for (size_t i = 0; i < n_nodes; i++) sorted[i] = (numbered_t){nodes[i], (uint32_t)i};
  qsort(sorted, n_nodes, sizeof *sorted, by_node);
  for (size_t e = 0; e < n_edges; e++) {
    from_index[e] = number_of(sorted, n_nodes, from[e]);
    to_index[e] = number_of(sorted, n_nodes, to[e]);
#if EDGE_DATA
    static const cudaGraphEdgeData plain; /* a full dependency: default type, default ports */
    strong[e] = memcmp(&data[e], &plain, sizeof plain) == 0;
#else
    strong[e] = 1;
#endif
  }
  if (cg_implied_edges(implied, (uint32_t)n_nodes, from_index, to_index, strong, n_edges) != 0) goto out;
  /* the implied edges to the front, for one removal call */
  for (size_t e = 0; e < n_edges; e++) {
    if (!implied[e]) continue;
    from[n_implied] = from[e];
    to[n_implied] = to[e];
#if EDGE_DATA
    data[n_implied] = data[e];
#endif
    n_implied++;
  }
  if (n_implied) {
#if EDGE_DATA
    err = remove_edges(graph, from, to, data, n_implied);
#else
    err = cudaGraphRemoveDependencies(graph, from, to, n_implied);
#endif
    if (err != cudaSuccess) {
      st = cg_fail_cuda(err, "cudaGraphRemoveDependencies", "%s: dropping %zu implied edges", where, n_implied);
      goto out;
    }
  }
  if (dropped) *dropped = n_implied;
out:
  free(nodes);
  free(sorted);
  free(from);
  free(to);
  free(from_index);
  free(to_index);
  free(strong);
  free(implied);
#if EDGE_DATA
  free(data);
#endif
  return st;
}
