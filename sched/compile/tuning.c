/* The tuning cg_plan_tune measures (tuning.h): lookups, and the ranks'
 * agreement on it during the compile. */
#include "tuning.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreement.h"
#include "error.h"
#include "graph_view.h"

int cg_plan_default_won(const cg_plan_t *plan) {
  return plan->tuning && plan->tuning->default_won;
}

/* ---- agreeing: per participant, a header (this rank's status, its
 * default_won and its failure's detail), then alpha, bytes_per_us,
 * overlap_us, the backend's own path (dtypes, ops, path_us, library_us),
 * then one ready time per collective of its sequence (doubles). Every rank
 * fills it, failed or not, so a failure and its reason reach every rank.
 * The path's times come from the backend's own agreed measurements, so the
 * ranks hold the same; the rule below (bits every rank has, the slowest path
 * and the fastest library) only makes sure of it. */
enum { PATH_AT = 3, PATH_US_AT = PATH_AT + 2, LIBRARY_US_AT = PATH_US_AT + CG_COST_PATH_SIZES,
       COST_VALUES = LIBRARY_US_AT + CG_COST_PATH_SIZES };

enum { DETAIL_BYTES = 512 };

typedef struct header {
  int32_t status;
  int32_t default_won;
  char detail[DETAIL_BYTES];
} header_t;

typedef struct agree_ctx {
  cg_tuning_t *t;
  const cg_graph_t *g;
  const cg_comm_order_t *order;
  cg_comm_t *const *comms;
  cg_status_t mine;
  const char *mine_detail;
  int default_won;
  /* the first failed rank another rank reported */
  cg_status_t theirs;
  int their_rank;
  uint64_t their_comm;
  char their_detail[DETAIL_BYTES];
} agree_ctx_t;

/* Participant i's sequence; NULL where the graph does not use it. */
static const cg_comm_sequence_t *seq_of(const agree_ctx_t *a, uint32_t i) {
  for (uint32_t c = 0; c < a->order->n_sequences; c++)
    if (a->order->sequences[c].comm == a->comms[i]) return &a->order->sequences[c];
  return NULL;
}

static size_t agree_bytes(void *ctx, uint32_t i) {
  const cg_comm_sequence_t *seq = seq_of(ctx, i);
  return sizeof(header_t) + (COST_VALUES + (seq ? (size_t)seq->len : 0)) * sizeof(double);
}

static void agree_fill(void *ctx, uint32_t i, uint8_t *mine) {
  const agree_ctx_t *a = ctx;
  header_t h = {(int32_t)a->mine, a->default_won, ""};
  if (a->mine != CG_SUCCESS) snprintf(h.detail, sizeof h.detail, "%s", a->mine_detail);
  memcpy(mine, &h, sizeof h);
  mine += sizeof h;
  if (a->mine != CG_SUCCESS) return; /* zeros: nothing measured */
  double v[COST_VALUES] = {INFINITY, 0, 0};
  const cg_comm_cost_t *c = cg_tuning_cost(a->t, a->comms[i]);
  if (c) {
    v[0] = c->alpha_us, v[1] = c->bytes_per_us, v[2] = c->overlap_us;
    v[PATH_AT] = c->path.dtypes, v[PATH_AT + 1] = c->path.ops;
    memcpy(&v[PATH_US_AT], c->path.path_us, sizeof c->path.path_us);
    memcpy(&v[LIBRARY_US_AT], c->path.library_us, sizeof c->path.library_us);
  }
  memcpy(mine, v, sizeof v);
  const cg_comm_sequence_t *seq = seq_of(a, i);
  for (uint32_t p = 0; seq && p < seq->len; p++)
    memcpy(mine + (COST_VALUES + p) * sizeof(double), &a->t->ready_us[seq->nodes[p]], sizeof(double));
}

static void agree_use(void *ctx, uint32_t i, const uint8_t *all, size_t stride, int size) {
  agree_ctx_t *a = ctx;
  int all_ok = 1;
  for (int r = 0; r < size; r++) {
    header_t h;
    memcpy(&h, all + (size_t)r * stride, sizeof h);
    if (h.status == CG_SUCCESS) {
      if (h.default_won) a->default_won = 1;
      continue;
    }
    all_ok = 0;
    if (a->theirs == CG_SUCCESS && r != a->comms[i]->rank) {
      a->theirs = (cg_status_t)h.status, a->their_rank = r, a->their_comm = a->comms[i]->id;
      h.detail[sizeof h.detail - 1] = '\0';
      snprintf(a->their_detail, sizeof a->their_detail, "%s", h.detail);
    }
  }
  if (!all_ok || a->mine != CG_SUCCESS) return;
  cg_comm_cost_t *c = (cg_comm_cost_t *)cg_tuning_cost(a->t, a->comms[i]);
  const cg_comm_sequence_t *seq = seq_of(a, i);
  size_t n = COST_VALUES + (seq ? (size_t)seq->len : 0);
  for (int r = 0; r < size; r++) {
    const uint8_t *data = all + (size_t)r * stride + sizeof(header_t);
    double v;
    for (size_t k = 0; k < n; k++) {
      memcpy(&v, data + k * sizeof(double), sizeof v);
      if (k == 0 && c && v < c->alpha_us) c->alpha_us = v;
      if (k == 1 && c && v > c->bytes_per_us) c->bytes_per_us = v;
      if (k == 2 && c && v > c->overlap_us) c->overlap_us = v;
      if (k == PATH_AT && c) c->path.dtypes &= (uint32_t)v;
      if (k == PATH_AT + 1 && c) c->path.ops &= (uint32_t)v;
      if (k >= PATH_US_AT && k < LIBRARY_US_AT && c && v > c->path.path_us[k - PATH_US_AT])
        c->path.path_us[k - PATH_US_AT] = v;
      if (k >= LIBRARY_US_AT && k < COST_VALUES && c && v < c->path.library_us[k - LIBRARY_US_AT])
        c->path.library_us[k - LIBRARY_US_AT] = v;
      if (k >= COST_VALUES) {
        double *ready = &a->t->ready_us[seq->nodes[k - COST_VALUES]];
        if (v > *ready) *ready = v;
      }
    }
  }
}

cg_status_t cg_tuning_agree(cg_tuning_t *t, int *default_won, const cg_graph_t *g, const cg_comm_order_t *order,
                            const cg_participants_t *pt, cg_status_t mine, const char *where) {
  static const cg_agree_payload_t payload = {agree_bytes, agree_fill, agree_use};
  char detail[1024] = "";
  if (mine == CG_SUCCESS && t->n_nodes != cg_graph_node_count(g))
    mine = cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: the tuning is for %u nodes, the graph has %u", where, t->n_nodes,
                   cg_graph_node_count(g));
  if (mine != CG_SUCCESS) snprintf(detail, sizeof detail, "%s", cg_error_last());
  agree_ctx_t ctx = {t, g, order, pt->comms, mine, detail, *default_won, CG_SUCCESS, -1, 0, ""};
  /* every rank's flag says "took part": the real status is in the payload */
  cg_status_t st = cg_agree_with(NULL, pt, CG_SUCCESS, &payload, &ctx, "agree on the tuning", where);
  if (mine != CG_SUCCESS)
    st = cg_fail(mine, "%s", detail);
  else if (st == CG_SUCCESS && ctx.theirs != CG_SUCCESS) {
    char label[64];
    st = cg_fail(ctx.theirs, "%s: rank %d of communicator %s failed: %s", where, ctx.their_rank,
                 cg_comm_id_label(label, sizeof label, ctx.their_comm), ctx.their_detail);
  }
  if (st == CG_SUCCESS) *default_won = ctx.default_won;
  return st;
}
