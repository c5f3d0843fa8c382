/* The edges other paths imply (implied_edges.h): the transitive reduction
 * of the strong edges. Each node's reachable set is a bitset, filled in
 * reverse topological order; an edge u -> v is implied when v is reachable
 * from another successor of u. O(edges x nodes / 64) time, nodes^2 / 8
 * bytes. */
#include "implied_edges.h"

#include <stdlib.h>
#include <string.h>

static int is_strong(const uint8_t *strong, size_t e) { return !strong || strong[e]; }

static void add_bits(uint64_t *to, const uint64_t *from, size_t words) {
  for (size_t w = 0; w < words; w++) to[w] |= from[w];
}

int cg_implied_edges(uint8_t *implied, uint32_t n_nodes, const uint32_t *from, const uint32_t *to,
                     const uint8_t *strong, size_t n_edges) {
  if (n_nodes > CG_IMPLIED_EDGES_MAX_NODES) return -1;
  for (size_t e = 0; e < n_edges; e++)
    if (from[e] >= n_nodes || to[e] >= n_nodes) return -1;
  if (n_nodes == 0) return 0;
  int result = -1;
  size_t words = ((size_t)n_nodes + 63) / 64;
  /* the strong edges by source (CSR: start, then edge indices), each
   * node's count of strong edges in, the topological order */
  size_t *start = calloc((size_t)n_nodes + 1, sizeof *start), *fill = malloc(n_nodes * sizeof *fill);
  size_t *by_source = malloc((n_edges ? n_edges : 1) * sizeof *by_source);
  uint32_t *in = calloc(n_nodes, sizeof *in), *order = malloc(n_nodes * sizeof *order);
  uint64_t *reach = calloc((size_t)n_nodes * words, sizeof *reach), *beyond = malloc(words * sizeof *beyond);
  if (!start || !fill || !by_source || !in || !order || !reach || !beyond) goto out;
  for (size_t e = 0; e < n_edges; e++)
    if (is_strong(strong, e)) {
      start[from[e] + 1]++;
      in[to[e]]++;
    }
  for (uint32_t u = 0; u < n_nodes; u++) start[u + 1] += start[u];
  memcpy(fill, start, n_nodes * sizeof *fill);
  for (size_t e = 0; e < n_edges; e++)
    if (is_strong(strong, e)) by_source[fill[from[e]]++] = e;
  uint32_t head = 0, tail = 0;
  for (uint32_t u = 0; u < n_nodes; u++)
    if (!in[u]) order[tail++] = u;
  while (head < tail) {
    uint32_t u = order[head++];
    for (size_t k = start[u]; k < start[u + 1]; k++)
      if (--in[to[by_source[k]]] == 0) order[tail++] = to[by_source[k]];
  }
  if (tail < n_nodes) goto out; /* a cycle */
  for (uint32_t k = n_nodes; k-- > 0;) {
    uint32_t u = order[k];
    uint64_t *mine = &reach[(size_t)u * words];
    for (size_t i = start[u]; i < start[u + 1]; i++) {
      uint32_t v = to[by_source[i]];
      mine[v / 64] |= (uint64_t)1 << (v % 64);
      add_bits(mine, &reach[(size_t)v * words], words);
    }
  }
  for (size_t e = 0; e < n_edges; e++) implied[e] = 0;
  for (uint32_t u = 0; u < n_nodes; u++) {
    /* what u reaches through its successors, the successors themselves
     * left out: a successor in it is reached by a longer path too */
    memset(beyond, 0, words * sizeof *beyond);
    for (size_t i = start[u]; i < start[u + 1]; i++) add_bits(beyond, &reach[(size_t)to[by_source[i]] * words], words);
    for (size_t i = start[u]; i < start[u + 1]; i++) {
      uint32_t v = to[by_source[i]];
      implied[by_source[i]] = (uint8_t)(beyond[v / 64] >> (v % 64) & 1);
    }
  }
  result = 0;
out:
  free(start);
  free(fill);
  free(by_source);
  free(in);
  free(order);
  free(reach);
  free(beyond);
  return result;
}
