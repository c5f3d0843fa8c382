/* cg_plan_tune: buckets chosen from the DAG and measured times.
 *
 * A few profiling replays of the plan (its executor's profile entry) give
 * every step's start and end; the cost model (cost_model.c) turns them into
 * ready times and collective costs. The graph is compiled again with that
 * tuning: the ranks agree on it (latest ready times; the cost the least
 * delayed rank measured), and the fusion pass picks the bucket boundaries
 * that minimize the predicted finish of each communicator's last collective
 * (fusion.c). The model can still be wrong, so the tuned plan is timed
 * against one with the default boundaries and kept only when it is faster on
 * every rank. Neither compile runs the cross-rank check again: the graph is
 * the plan's, and the agreement on the tuning carries any rank's failure. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agreement.h"
#include "cost_model.h"
#include "error.h"
#include "executor.h"
#include "graph_view.h"
#include "tuning.h"

#define WHERE "cg_plan_tune"

static int compare_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
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
  if (opts->compile.tuning_file)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": opts->compile.tuning_file is set: cg_plan_tune measures the "
                   "tuning (cg_compile loads a file)");
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
  if (mine == CG_SUCCESS) mine = cg_cost_model_make(&tuning, plan, graph, &prof, WHERE);
  cg_profile_free(&prof);
  /* The graph is the plan's, checked when the plan was compiled: no second
   * cross-rank check. The ranks' agreement on the tuning carries a rank's
   * failure (its profile's, say) to the others instead. */
  cg_compile_opts_t copts = opts->compile;
  copts.check_ranks = 0;
  cg_plan_t *tuned = NULL, *untuned = NULL;
  st = cg_compile_tuning(&tuned, graph, &copts, mine == CG_SUCCESS ? &tuning : NULL, 0, mine);
  cg_tuning_free(&tuning);
  /* the model can be wrong: the tuned plan is kept only when it runs faster
   * than the same graph with the default boundaries, timed on every rank.
   * That plan keeps the agreed tuning too (marked "default won"), so either
   * can be saved (cg_plan_save_tuning); its compile agrees on it once more,
   * which carries a failure like the first. */
  if (st == CG_SUCCESS) {
    cg_status_t copied = cg_tuning_copy(&tuning, tuned->tuning, WHERE);
    st = cg_compile_tuning(&untuned, graph, &copts, copied == CG_SUCCESS ? &tuning : NULL, 1, copied);
  }
  cg_tuning_free(&tuning);
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
