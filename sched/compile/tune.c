/* cg_plan_tune: buckets chosen from the DAG and measured times.
 *
 * A few profiling replays of the plan (its executor's profile entry) give
 * every step's start and end. From them: when each collective's inputs were
 * ready (the latest end of the compute nodes it depends on directly: host
 * functions, child graphs, events) and what a collective costs on each
 * communicator: alpha + bytes / bytes_per_us, fitted to its collective steps
 * by least squares, alpha then raised by the steps' mean delay after their
 * dependencies and until the model finishes the profiled plan's own
 * collectives no earlier than measured (what a collective costs inside a
 * replay, edges and launches included). The graph is compiled again with that
 * tuning: the ranks agree on it (latest ready times; the cost the least
 * delayed rank measured), and the fusion pass picks the bucket boundaries
 * that minimize the predicted finish of each communicator's last collective
 * (fusion.c). The model can still be wrong, so the tuned plan is timed
 * against the untuned one and kept only when it is faster on every rank. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agreement.h"
#include "error.h"
#include "executor.h"
#include "fusion.h"
#include "graph_view.h"
#include "tuning.h"

#define WHERE "cg_plan_tune"

static int compare_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* ---- from a profile to a tuning */

/* Bytes a collective step moves as buckets count them (its largest buffer). */
static size_t step_bytes(const cg_step_t *s) {
  size_t bytes = s->count * cg_dtype_size(s->dtype);
  if (s->op_kind == CG_NODE_ALLGATHER || s->op_kind == CG_NODE_REDUCE_SCATTER) bytes *= (size_t)s->comm->size;
  return bytes;
}

/* alpha + bytes / bytes_per_us through the communicator's collective steps
 * (least squares; with one size, or a fit that is not physical, alpha is the
 * fastest step and the bandwidth the best any step reached beyond it). */
static void fit_cost(cg_comm_cost_t *out, const cg_plan_t *plan, uint32_t c, const cg_profile_t *prof) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, fastest = INFINITY;
  const cg_plan_comm_t *pc = &plan->comms[c];
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *s = &plan->steps[pc->steps[k]];
    if (s->kind != CG_STEP_COLLECTIVE || s->op_kind == CG_NODE_BARRIER) continue;
    double x = (double)step_bytes(s), y = prof->end_us[pc->steps[k]] - prof->start_us[pc->steps[k]];
    if (y < 0.1) y = 0.1;
    n++, sx += x, sy += y, sxx += x * x, sxy += x * y;
    if (y < fastest) fastest = y;
  }
  *out = (cg_comm_cost_t){pc->comm, n ? fastest : 1.0, INFINITY};
  double det = n * sxx - sx * sx;
  double slope = det > 0 ? (n * sxy - sx * sy) / det : 0, alpha = n ? (sy - slope * sx) / n : 0;
  if (slope > 0 && alpha >= 0) {
    out->alpha_us = alpha;
    out->bytes_per_us = 1.0 / slope;
    return;
  }
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *s = &plan->steps[pc->steps[k]];
    if (s->kind != CG_STEP_COLLECTIVE || s->op_kind == CG_NODE_BARRIER) continue;
    double beyond = prof->end_us[pc->steps[k]] - prof->start_us[pc->steps[k]] - out->alpha_us;
    double rate = beyond > 0 ? (double)step_bytes(s) / beyond : INFINITY;
    if (out->bytes_per_us == INFINITY || (rate < INFINITY && rate > out->bytes_per_us)) out->bytes_per_us = rate;
  }
  if (!(out->bytes_per_us < INFINITY)) out->bytes_per_us = 1e6; /* nothing moved: bandwidth plays no part */
}

/* When the plan's collective step `s` could start: its inputs' ready time
 * (a bucket's: its latest member's). */
static double step_ready(const cg_plan_t *plan, const cg_step_t *s, const cg_tuning_t *t) {
  double ready = 0;
  if (s->bucket == CG_NO_STEP) return t->ready_us[s->node];
  const cg_bucket_t *b = &plan->buckets[s->bucket];
  for (uint32_t m = 0; m < b->n_members; m++)
    if (t->ready_us[b->members[m]] > ready) ready = t->ready_us[b->members[m]];
  return ready;
}

/* The model's finish of the communicator's collectives as the profiled plan
 * ran them, with fixed cost `alpha`. */
static double modelled_finish(const cg_plan_t *plan, uint32_t c, const cg_tuning_t *t, double alpha,
                              double bytes_per_us) {
  const cg_plan_comm_t *pc = &plan->comms[c];
  double finish = 0;
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *s = &plan->steps[pc->steps[k]];
    if (s->kind != CG_STEP_COLLECTIVE) continue;
    double start = step_ready(plan, s, t);
    if (finish > start) start = finish;
    finish = start + alpha + (double)step_bytes(s) / bytes_per_us;
  }
  return finish;
}

/* A collective in a replay costs more than its kernel's time: the graph's
 * dependency edges, the launch of each kernel, the lanes' event waits. So the
 * fixed cost is calibrated: the smallest alpha (at least the fitted one) for
 * which the model finishes the profiled plan's collectives no earlier than
 * they were measured to finish. */
static void calibrate(cg_comm_cost_t *cost, const cg_plan_t *plan, uint32_t c, const cg_tuning_t *t,
                      const cg_profile_t *prof) {
  const cg_plan_comm_t *pc = &plan->comms[c];
  double measured = 0, gap = 0;
  uint32_t n_gaps = 0;
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    uint32_t i = pc->steps[k];
    if (prof->end_us[i] > measured) measured = prof->end_us[i];
    /* how long after its last dependency a step started: edges, launches */
    double after = 0;
    for (uint32_t e = 0; e < plan->steps[i].n_deps; e++)
      if (prof->end_us[plan->steps[i].deps[e]] > after) after = prof->end_us[plan->steps[i].deps[e]];
    if (plan->steps[i].n_deps && prof->start_us[i] > after) gap += prof->start_us[i] - after, n_gaps++;
  }
  if (n_gaps) cost->alpha_us += gap / n_gaps;
  double lo = cost->alpha_us, hi = lo;
  if (modelled_finish(plan, c, t, lo, cost->bytes_per_us) >= measured) return;
  while (hi < 1e6 && modelled_finish(plan, c, t, hi, cost->bytes_per_us) < measured) hi = hi * 2 + 1;
  for (int k = 0; k < 40; k++) {
    double mid = (lo + hi) / 2;
    if (modelled_finish(plan, c, t, mid, cost->bytes_per_us) < measured)
      lo = mid;
    else
      hi = mid;
  }
  cost->alpha_us = hi;
}

static cg_status_t make_tuning(cg_tuning_t *t, const cg_plan_t *plan, const cg_graph_t *g, const cg_profile_t *prof) {
  uint32_t n = cg_graph_node_count(g);
  *t = (cg_tuning_t){calloc(n ? n : 1, sizeof *t->ready_us), n, calloc(plan->n_comms ? plan->n_comms : 1,
                                                                          sizeof *t->costs), plan->n_comms};
  if (!t->ready_us || !t->costs) {
    cg_tuning_free(t);
    return cg_fail(CG_ERR_NO_MEMORY, WHERE ": allocating the tuning of %u nodes", n);
  }
  for (uint32_t v = 0; v < n; v++) {
    const cg_node_rec_t *node = cg_graph_node(g, v);
    if (!node->comm) continue;
    for (uint32_t e = 0; e < node->preds.len; e++) {
      uint32_t from = node->preds.items[e].node;
      if (cg_graph_node(g, from)->comm) continue; /* communication: ordered, not an input becoming ready */
      double end = prof->end_us[plan->nodes[from].step];
      if (end > t->ready_us[v]) t->ready_us[v] = end;
    }
  }
  for (uint32_t c = 0; c < plan->n_comms; c++) {
    fit_cost(&t->costs[c], plan, c, prof);
    calibrate(&t->costs[c], plan, c, t, prof);
  }
  return CG_SUCCESS;
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* One replay through the plan's executor, waited for; its seconds. */
static cg_status_t replay(double *seconds, cg_plan_t *plan) {
  uint64_t t0 = now_ns();
  cg_status_t st = plan->exec->start(plan);
  if (st == CG_SUCCESS) st = plan->exec->wait(plan);
  *seconds = (double)(now_ns() - t0) * 1e-9;
  return st;
}

static size_t max_bytes(void *ctx, uint32_t i) {
  (void)ctx, (void)i;
  return 2 * sizeof(double);
}
static void max_fill(void *ctx, uint32_t i, uint8_t *mine) {
  (void)i;
  memcpy(mine, ctx, 2 * sizeof(double));
}
static void max_use(void *ctx, uint32_t i, const uint8_t *all, size_t stride, int size) {
  double *v = ctx, x[2];
  (void)i;
  for (int r = 0; r < size; r++) {
    memcpy(x, all + (size_t)r * stride, sizeof x);
    if (x[0] > v[0]) v[0] = x[0];
    if (x[1] > v[1]) v[1] = x[1];
  }
}

/* seconds[0], [1]: the median replay of `a` and of `b`, interleaved, after a
 * warm-up each; the slowest rank's (collective over a's communicators). */
static cg_status_t time_both(double seconds[2], cg_plan_t *a, cg_plan_t *b, int replays) {
  static const cg_agree_payload_t payload = {max_bytes, max_fill, max_use};
  double *t = calloc(2 * (size_t)(replays + 1), sizeof *t), warm;
  cg_participants_t pt = {0};
  cg_status_t st = t ? CG_SUCCESS : cg_fail(CG_ERR_NO_MEMORY, WHERE ": allocating replay times");
  if (st == CG_SUCCESS) st = replay(&warm, a);
  if (st == CG_SUCCESS) st = replay(&warm, b);
  for (int k = 0; k < replays && st == CG_SUCCESS; k++) {
    st = replay(&t[k], a);
    if (st == CG_SUCCESS) st = replay(&t[replays + 1 + k], b);
  }
  if (st == CG_SUCCESS) {
    qsort(t, (size_t)replays, sizeof *t, compare_double);
    qsort(t + replays + 1, (size_t)replays, sizeof *t, compare_double);
    seconds[0] = t[replays / 2];
    seconds[1] = t[replays + 1 + replays / 2];
  }
  cg_status_t listed = cg_participants_of_plan(&pt, a, WHERE);
  if (listed == CG_SUCCESS) st = cg_agree_with(NULL, &pt, st, &payload, seconds, "time the tuned plan", WHERE);
  else if (st == CG_SUCCESS) st = listed;
  cg_participants_free(&pt);
  free(t);
  return st;
}

cg_status_t cg_plan_tune(cg_plan_t **out, cg_plan_t *plan, cg_graph_t *graph, const cg_tune_opts_t *opts) {
  static const cg_tune_opts_t defaults = CG_TUNE_OPTS_INIT;
  cg_profile_t prof = {0};
  cg_tuning_t tuning = {0};
  cg_status_t st = CG_SUCCESS;
  if (!out || !plan || !graph)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": NULL %s", !out ? "out" : !plan ? "plan" : "graph");
  if (!opts) opts = &defaults;
  if ((st = cg_check_opts_size(opts->size, sizeof(cg_tune_opts_t), WHERE, "opts")) != CG_SUCCESS) return st;
  if (opts->replays < 1 || opts->replays > 1000)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": replays is %d, not 1 to 1000", opts->replays);
  if ((st = cg_check_opts_size(opts->compile.size, sizeof(cg_compile_opts_t), WHERE, "opts->compile")) != CG_SUCCESS)
    return st;
  if (graph->serial != plan->graph_serial || cg_graph_node_count(graph) != plan->n_names)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": the graph is not the one the plan was compiled from, as it was "
                   "then (%u nodes now, %u in the plan)", cg_graph_node_count(graph), plan->n_names);
  if (!plan->exec->profile)
    return cg_fail(CG_ERR_UNSUPPORTED, WHERE ": the %s executor cannot profile a plan", plan->exec->name);
  *out = NULL;
  /* profiling is collective like any replay; a rank that fails here still
   * compiles (below), carrying its failure, so the others do not wait */
  cg_status_t mine = plan->exec->profile(&prof, plan, opts->replays, opts->stream, WHERE);
  if (mine != CG_SUCCESS && strncmp(cg_error_last(), WHERE, strlen(WHERE)) != 0) {
    char detail[2048];
    snprintf(detail, sizeof detail, "%s", cg_error_last());
    cg_fail(mine, WHERE ": profiling replays: %s", detail);
  }
  if (mine == CG_SUCCESS) mine = make_tuning(&tuning, plan, graph, &prof);
  cg_profile_free(&prof);
  /* the cross-rank check carries a rank's failure to the others: on */
  cg_compile_opts_t copts = opts->compile;
  copts.check_ranks = 1;
  cg_plan_t *tuned = NULL, *untuned = NULL;
  st = cg_compile_tuned(&tuned, graph, &copts, mine == CG_SUCCESS ? &tuning : NULL, mine);
  cg_tuning_free(&tuning);
  /* the model can be wrong: the tuned plan is kept only when it runs faster
   * than the same graph compiled without tuning, timed on every rank */
  if (st == CG_SUCCESS) st = cg_compile_tuned(&untuned, graph, &copts, NULL, CG_SUCCESS);
  double seconds[2] = {0, 0};
  if (st == CG_SUCCESS) st = time_both(seconds, tuned, untuned, opts->replays);
  if (st == CG_SUCCESS && !(seconds[0] < seconds[1])) {
    cg_plan_t *slower = tuned;
    tuned = untuned, untuned = slower;
  }
  cg_plan_destroy(untuned);
  if (st == CG_SUCCESS)
    *out = tuned;
  else
    cg_plan_destroy(tuned);
  return st;
}
