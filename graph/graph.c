#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "graph_internal.h"

static atomic_uint_fast64_t next_graph_serial = 1;

cg_status_t cg_graph_create(cg_graph_t **out, const cg_graph_opts_t *opts) {
  cg_graph_opts_t defaults = CG_GRAPH_OPTS_INIT;
  if (!out) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_graph_create: NULL out");
  if (!opts) opts = &defaults;
  cg_status_t st = cg_check_opts_size(opts->size, sizeof(cg_graph_opts_t), "cg_graph_create", "opts");
  if (st != CG_SUCCESS) return st;
  cg_graph_t *g = calloc(1, sizeof *g);
  char *name = opts->name ? cg_copy_text(opts->name, 255) : NULL;
  if (!g || (opts->name && !name)) {
    free(g);
    free(name);
    return cg_fail(CG_ERR_NO_MEMORY, "cg_graph_create: allocating the graph");
  }
  g->serial = atomic_fetch_add(&next_graph_serial, 1);
  g->name = name;
  g->last_fence = CG_NO_NODE;
  cg_hazard_init(&g->hazards);
  *out = g;
  return CG_SUCCESS;
}

void cg_graph_destroy(cg_graph_t *g) {
  if (!g) return;
  for (uint32_t i = 0; i < g->n_nodes; i++) {
    cg_node_rec_t *n = &g->nodes[i];
    if (n->release_user_object) n->release_user_object(n->user_object);
    free(n->name);
    free(n->spans);
    free(n->preds.items);
    free(n->succs.items);
  }
  for (uint32_t i = 0; i < g->n_comms; i++) {
    cg_comm_release(g->comms[i].comm);
    free(g->comms[i].p2p_since);
  }
  cg_hazard_free(&g->hazards);
  free(g->scratch.items);
  free(g->comms);
  free(g->nodes);
  free(g->name);
  free(g);
}

cg_status_t cg_graph_check_node(const cg_graph_t *g, cg_node_t node, const char *caller) {
  if (node.graph != g->serial)
    return cg_fail(CG_ERR_INVALID_NODE, "%s: node handle #%u belongs to another graph (or is uninitialized)", caller,
                   node.index);
  if (node.index >= g->n_nodes)
    return cg_fail(CG_ERR_INVALID_NODE, "%s: node #%u does not exist (graph has %u nodes)", caller, node.index,
                   g->n_nodes);
  return CG_SUCCESS;
}

static int compare_edges(const void *a, const void *b) {
  const cg_edge_t *x = a, *y = b;
  return (x->node > y->node) - (x->node < y->node);
}

/* Sorts by node and merges repeated predecessors, ORing their causes. */
static void merge_duplicates(cg_edge_vec_t *v) {
  if (v->len < 2) return;
  qsort(v->items, v->len, sizeof *v->items, compare_edges);
  uint32_t kept = 0;
  for (uint32_t i = 0; i < v->len; i++) {
    if (kept && v->items[kept - 1].node == v->items[i].node)
      v->items[kept - 1].causes |= v->items[i].causes;
    else
      v->items[kept++] = v->items[i];
  }
  v->len = kept;
}

/* A fence follows every node recorded since the previous fence that nothing
 * follows yet; together they reach everything recorded before it. */
static cg_status_t collect_fence_preds(const cg_graph_t *g, cg_edge_vec_t *preds) {
  uint32_t first = g->last_fence == CG_NO_NODE ? 0 : g->last_fence + 1;
  for (uint32_t i = first; i < g->n_nodes; i++) {
    if (g->nodes[i].succs.len) continue;
    if (cg_edge_vec_reserve(preds, (size_t)preds->len + 1) != CG_SUCCESS) return CG_ERR_NO_MEMORY;
    preds->items[preds->len++] = (cg_edge_t){i, CG_EDGE_FENCE};
  }
  if (preds->len == 0 && g->last_fence != CG_NO_NODE) {
    if (cg_edge_vec_reserve(preds, 1) != CG_SUCCESS) return CG_ERR_NO_MEMORY;
    preds->items[preds->len++] = (cg_edge_t){g->last_fence, CG_EDGE_FENCE};
  }
  return CG_SUCCESS;
}

/* Finds (or makes room for) `comm` in the graph's list and reserves what the
 * new node will add to its order state. *use is its index; *is_new says that
 * the slot still has to be filled. */
static cg_status_t reserve_comm_use(cg_graph_t *g, const cg_node_rec_t *proto, uint32_t *use, int *is_new) {
  *is_new = 0;
  *use = CG_NO_NODE;
  if (!proto->comm) return CG_SUCCESS;
  for (uint32_t i = 0; i < g->n_comms && *use == CG_NO_NODE; i++)
    if (g->comms[i].comm == proto->comm) *use = i;
  if (*use == CG_NO_NODE) {
    if (g->n_comms == g->cap_comms) {
      uint32_t cap = g->cap_comms ? 2 * g->cap_comms : 4;
      cg_comm_use_t *comms = realloc(g->comms, cap * sizeof *comms);
      if (!comms) return CG_ERR_NO_MEMORY;
      g->comms = comms;
      g->cap_comms = cap;
    }
    /* filled now, counted in n_comms only when the node is added */
    *use = g->n_comms;
    *is_new = 1;
    g->comms[*use] = (cg_comm_use_t){proto->comm, CG_NO_NODE, NULL, 0, 0};
  }
  cg_comm_use_t *u = &g->comms[*use];
  if (cg_kind_is_p2p(proto->kind) && u->n_p2p == u->cap_p2p) {
    uint32_t cap = u->cap_p2p ? 2 * u->cap_p2p : 8;
    uint32_t *since = realloc(u->p2p_since, cap * sizeof *since);
    if (!since) return CG_ERR_NO_MEMORY;
    u->p2p_since = since;
    u->cap_p2p = cap;
  }
  return CG_SUCCESS;
}

/* Predecessors that keep the communicator's order: a collective follows the
 * point-to-point group before it, or else the previous collective; a send or
 * receive follows the previous collective. */
static cg_status_t collect_comm_order_preds(const cg_comm_use_t *u, cg_node_kind_t kind, cg_edge_vec_t *preds) {
  size_t n = !cg_kind_is_p2p(kind) && u->n_p2p ? u->n_p2p : (u->last_collective != CG_NO_NODE);
  if (cg_edge_vec_reserve(preds, (size_t)preds->len + n) != CG_SUCCESS) return CG_ERR_NO_MEMORY;
  if (!cg_kind_is_p2p(kind) && u->n_p2p) {
    for (uint32_t i = 0; i < u->n_p2p; i++) preds->items[preds->len++] = (cg_edge_t){u->p2p_since[i], CG_EDGE_COMM_ORDER};
  } else if (u->last_collective != CG_NO_NODE) {
    preds->items[preds->len++] = (cg_edge_t){u->last_collective, CG_EDGE_COMM_ORDER};
  }
  return CG_SUCCESS;
}

static void update_comm_use(cg_graph_t *g, uint32_t use, int is_new, const cg_node_rec_t *node, uint32_t index) {
  if (use == CG_NO_NODE) return;
  if (is_new) {
    cg_comm_retain(node->comm);
    g->n_comms++;
  }
  cg_comm_use_t *u = &g->comms[use];
  if (cg_kind_is_p2p(node->kind)) {
    u->p2p_since[u->n_p2p++] = index;
  } else {
    u->last_collective = index;
    u->n_p2p = 0;
  }
}

cg_status_t cg_graph_add_node(cg_graph_t *g, const cg_node_rec_t *proto, const cg_access_set_t *access,
                              cg_node_t *out) {
  cg_status_t st = CG_SUCCESS;
  cg_edge_t *pred_items = NULL;
  int new_comm = 0;
  uint32_t use = CG_NO_NODE;
  if (g->n_nodes == UINT32_MAX - 1) {
    st = CG_ERR_NO_MEMORY;
    goto out;
  }
  if (g->n_nodes == g->cap_nodes) {
    uint32_t cap = g->cap_nodes ? (g->cap_nodes > UINT32_MAX / 2 ? UINT32_MAX - 1 : 2 * g->cap_nodes) : 64;
    cg_node_rec_t *nodes = realloc(g->nodes, (size_t)cap * sizeof *nodes);
    if (!nodes) {
      st = CG_ERR_NO_MEMORY;
      goto out;
    }
    g->nodes = nodes;
    g->cap_nodes = cap;
  }
  if ((st = reserve_comm_use(g, proto, &use, &new_comm)) != CG_SUCCESS) goto out;

  cg_edge_vec_t *preds = &g->scratch;
  preds->len = 0;
  if (proto->is_fence)
    st = collect_fence_preds(g, preds);
  else
    st = cg_hazard_prepare(&g->hazards, access, preds);
  if (st == CG_SUCCESS && use != CG_NO_NODE) st = collect_comm_order_preds(&g->comms[use], proto->kind, preds);
  if (st != CG_SUCCESS) goto out;
  merge_duplicates(preds);
  if (!proto->is_fence && g->last_fence != CG_NO_NODE &&
      (preds->len == 0 || preds->items[preds->len - 1].node < g->last_fence)) {
    /* Nothing orders this node after the fence yet; the fence itself does. */
    if ((st = cg_edge_vec_reserve(preds, (size_t)preds->len + 1)) != CG_SUCCESS) goto out;
    preds->items[preds->len++] = (cg_edge_t){g->last_fence, CG_EDGE_FENCE};
  }
  if (preds->len) {
    pred_items = malloc(preds->len * sizeof *pred_items);
    if (!pred_items) {
      st = CG_ERR_NO_MEMORY;
      goto out;
    }
  }
  for (uint32_t i = 0; i < preds->len; i++) {
    cg_edge_vec_t *succs = &g->nodes[preds->items[i].node].succs;
    if ((st = cg_edge_vec_reserve(succs, (size_t)succs->len + 1)) != CG_SUCCESS) goto out;
  }

  /* Nothing below can fail. */
  uint32_t index = g->n_nodes++;
  cg_node_rec_t *n = &g->nodes[index];
  *n = *proto;
  n->name = NULL;
  n->succs = (cg_edge_vec_t){0};
  n->preds = (cg_edge_vec_t){pred_items, preds->len, preds->len};
  if (preds->len) memcpy(pred_items, preds->items, preds->len * sizeof *pred_items);
  pred_items = NULL;
  for (uint32_t i = 0; i < n->preds.len; i++) {
    cg_edge_vec_t *succs = &g->nodes[n->preds.items[i].node].succs;
    succs->items[succs->len++] = (cg_edge_t){index, n->preds.items[i].causes};
  }
  g->n_edges += n->preds.len;
  if (proto->is_fence) {
    cg_hazard_clear(&g->hazards);
    g->last_fence = index;
  } else {
    cg_hazard_apply(&g->hazards, index, access);
  }
  update_comm_use(g, use, new_comm, proto, index);
  if (out) *out = (cg_node_t){g->serial, index};
out:
  free(pred_items);
  if (st != CG_SUCCESS && new_comm) {
    free(g->comms[use].p2p_since); /* the slot was never counted */
    g->comms[use].p2p_since = NULL;
  }
  if (st == CG_ERR_NO_MEMORY && proto->comm)
    return cg_fail(st, "recording %s node #%u (rank %d of %d): out of memory", cg_node_kind_name(proto->kind),
                   g->n_nodes, proto->comm->rank, proto->comm->size);
  if (st == CG_ERR_NO_MEMORY)
    return cg_fail(st, "recording %s node #%u: out of memory", cg_node_kind_name(proto->kind), g->n_nodes);
  return st;
}

cg_status_t cg_node_name(cg_graph_t *g, cg_node_t node, const char *name) {
  if (!g || !name) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_node_name: NULL %s", g ? "name" : "graph");
  cg_status_t st = cg_graph_check_node(g, node, "cg_node_name");
  if (st != CG_SUCCESS) return st;
  char *copy = cg_copy_text(name, 255);
  if (!copy) return cg_fail(CG_ERR_NO_MEMORY, "cg_node_name: copying the name of node #%u", node.index);
  free(g->nodes[node.index].name);
  g->nodes[node.index].name = copy;
  return CG_SUCCESS;
}

static size_t node_bytes(const cg_node_rec_t *n) {
  if (!n->comm) return 0;
  size_t per_rank = n->count * cg_dtype_size(n->dtype);
  switch (n->kind) {
    case CG_NODE_REDUCE_SCATTER:
    case CG_NODE_ALLTOALL:
      return per_rank * (size_t)n->comm->size;
    case CG_NODE_SCATTER:
      return n->comm->rank == n->root ? per_rank * (size_t)n->comm->size : 0;
    case CG_NODE_BROADCAST:
      return n->comm->rank == n->root ? per_rank : 0;
    case CG_NODE_RECV:
    case CG_NODE_BARRIER:
      return 0;
    default:
      return per_rank;
  }
}

cg_status_t cg_graph_stats(cg_graph_stats_t *out, const cg_graph_t *g) {
  if (!out || !g) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_graph_stats: NULL %s", out ? "graph" : "out");
  cg_graph_stats_t s = {0};
  s.nodes = g->n_nodes;
  s.edges = g->n_edges;
  for (uint32_t i = 0; i < g->n_nodes; i++) {
    const cg_node_rec_t *n = &g->nodes[i];
    s.nodes_by_kind[n->kind]++;
    s.bytes += node_bytes(n);
    for (uint32_t e = 0; e < n->preds.len; e++) {
      uint32_t c = n->preds.items[e].causes;
      s.explicit_edges += !!(c & CG_EDGE_EXPLICIT);
      s.raw_edges += !!(c & CG_EDGE_RAW);
      s.war_edges += !!(c & CG_EDGE_WAR);
      s.waw_edges += !!(c & CG_EDGE_WAW);
      s.fence_edges += !!(c & CG_EDGE_FENCE);
      s.comm_order_edges += !!(c & CG_EDGE_COMM_ORDER);
    }
  }
  *out = s;
  return CG_SUCCESS;
}
