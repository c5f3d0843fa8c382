/* The tuning cg_plan_tune measures (tuning.h): lookups, and the ranks'
 * agreement on it during the compile. */
#include "tuning.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agreement.h"
#include "error.h"
#include "graph_view.h"

/* ---- agreeing: per participant, alpha and bytes_per_us, then one ready
 * time per collective of its sequence (doubles) */

typedef struct agree_ctx {
  cg_tuning_t *t;
  const cg_graph_t *g;
  const cg_comm_sequence_t **seq; /* per participant; NULL where the graph does not use it */
  cg_comm_t *const *comms;
} agree_ctx_t;

static size_t agree_bytes(void *ctx, uint32_t i) {
  const agree_ctx_t *a = ctx;
  return (2 + (a->seq[i] ? (size_t)a->seq[i]->len : 0)) * sizeof(double);
}

static void agree_fill(void *ctx, uint32_t i, uint8_t *mine) {
  const agree_ctx_t *a = ctx;
  double v[2] = {INFINITY, 0};
  const cg_comm_cost_t *c = cg_tuning_cost(a->t, a->comms[i]);
  if (c) v[0] = c->alpha_us, v[1] = c->bytes_per_us;
  memcpy(mine, v, sizeof v);
  for (uint32_t p = 0; a->seq[i] && p < a->seq[i]->len; p++)
    memcpy(mine + (2 + p) * sizeof(double), &a->t->ready_us[a->seq[i]->nodes[p]], sizeof(double));
}

static void agree_use(void *ctx, uint32_t i, const uint8_t *all, size_t stride, int size) {
  agree_ctx_t *a = ctx;
  cg_comm_cost_t *c = (cg_comm_cost_t *)cg_tuning_cost(a->t, a->comms[i]);
  size_t n = 2 + (a->seq[i] ? (size_t)a->seq[i]->len : 0);
  for (int r = 0; r < size; r++) {
    double v;
    for (size_t k = 0; k < n; k++) {
      memcpy(&v, all + (size_t)r * stride + k * sizeof(double), sizeof v);
      if (k == 0 && c && v < c->alpha_us) c->alpha_us = v;
      if (k == 1 && c && v > c->bytes_per_us) c->bytes_per_us = v;
      if (k >= 2) {
        double *ready = &a->t->ready_us[a->seq[i]->nodes[k - 2]];
        if (v > *ready) *ready = v;
      }
    }
  }
}

cg_status_t cg_tuning_agree(cg_tuning_t *t, const cg_graph_t *g, const cg_comm_order_t *order,
                            const cg_participants_t *pt, cg_status_t mine, const char *where) {
  static const cg_agree_payload_t payload = {agree_bytes, agree_fill, agree_use};
  agree_ctx_t ctx = {t, g, calloc(pt->n ? pt->n : 1, sizeof *ctx.seq), pt->comms};
  if (!ctx.seq && mine == CG_SUCCESS) mine = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the tuning agreement", where);
  if (mine == CG_SUCCESS && t->n_nodes != cg_graph_node_count(g))
    mine = cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: the tuning is for %u nodes, the graph has %u", where, t->n_nodes,
                   cg_graph_node_count(g));
  for (uint32_t i = 0; ctx.seq && i < pt->n; i++)
    for (uint32_t c = 0; c < order->n_sequences; c++)
      if (order->sequences[c].comm == pt->comms[i]) ctx.seq[i] = &order->sequences[c];
  cg_status_t st = cg_agree_with(NULL, pt, mine, ctx.seq ? &payload : NULL, &ctx, "agree on the tuning", where);
  free(ctx.seq);
  return st;
}
