#include "comm_order.h"

#include <stdlib.h>

#include "error.h"

static uint32_t sequence_of(const cg_comm_order_t *o, const cg_comm_t *comm) {
  for (uint32_t s = 0; s < o->n_sequences; s++)
    if (o->sequences[s].comm == comm) return s;
  return UINT32_MAX;
}

cg_status_t cg_comm_order_build(cg_comm_order_t *out, const cg_graph_t *g) {
  cg_status_t st = CG_SUCCESS;
  uint32_t n = cg_graph_node_count(g);
  cg_comm_order_t o = {0};
  uint32_t *topo = malloc((size_t)(n ? n : 1) * sizeof *topo);
  uint32_t *offsets = NULL;
  o.storage = malloc((size_t)(n ? n : 1) * sizeof *o.storage);
  o.sequences = calloc(g->n_comms ? g->n_comms : 1, sizeof *o.sequences);
  if (!topo || !o.storage || !o.sequences) {
    st = cg_fail(CG_ERR_NO_MEMORY, "ordering the nodes of %u communicators", g->n_comms);
    goto out;
  }
  if ((st = cg_graph_topo_order(g, topo)) != CG_SUCCESS) goto out;
  /* Sequences follow the graph's list of communicators, which is in order of
   * first use in record order: the same on every rank. */
  for (uint32_t s = 0; s < g->n_comms; s++) o.sequences[s].comm = g->comms[s].comm;
  o.n_sequences = g->n_comms;
  for (uint32_t i = 0; i < n; i++) {
    cg_comm_t *comm = cg_graph_node(g, topo[i])->comm;
    if (comm) o.sequences[sequence_of(&o, comm)].len++;
  }
  offsets = malloc((o.n_sequences ? o.n_sequences : 1) * sizeof *offsets);
  if (!offsets) {
    st = cg_fail(CG_ERR_NO_MEMORY, "ordering the nodes of %u communicators", g->n_comms);
    goto out;
  }
  uint32_t used = 0;
  for (uint32_t s = 0; s < o.n_sequences; s++) {
    offsets[s] = used;
    o.sequences[s].nodes = o.storage + used;
    used += o.sequences[s].len;
  }
  for (uint32_t i = 0; i < n; i++) {
    cg_comm_t *comm = cg_graph_node(g, topo[i])->comm;
    if (comm) o.storage[offsets[sequence_of(&o, comm)]++] = topo[i];
  }
  *out = o;
  o = (cg_comm_order_t){0};
out:
  cg_comm_order_free(&o);
  free(offsets);
  free(topo);
  return st;
}

void cg_comm_order_free(cg_comm_order_t *order) {
  if (!order) return;
  free(order->sequences);
  free(order->storage);
  *order = (cg_comm_order_t){0};
}
