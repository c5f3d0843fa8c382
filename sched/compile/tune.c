/* cg_plan_tune: buckets chosen from the DAG and measured times.
 *
 * A few profiling replays of the plan (its executor's profile entry) give
 * every step's start and end; the cost model (cost_model.c) turns them into
 * ready times and collective costs. The graph is compiled again with that
 * tuning: the ranks agree on it (latest ready times; the cost the least
 * delayed rank measured), and the fusion pass picks the bucket boundaries
 * that minimize the predicted finish of each communicator's last collective
 * (fusion.c). The model can still be wrong (a collective's fixed cost inside
 * a busy replay is poorly known, and so is how much each collective slows
 * the compute beside it), so the boundaries of a few alpha scales and
 * overlaps and the default boundaries are compiled and timed, and the
 * fastest on the slowest rank is kept. No compile runs the cross-rank check again: the graph
 * is the plan's, and the agreement on the tuning carries any rank's failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreement.h"
#include "clock.h"
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

/* One replay through the plan's executor, waited for; its seconds, by the
 * device's clock where the executor has one (executor.h). */
static cg_status_t replay(double *seconds, cg_plan_t *plan) {
  if (plan->exec->timed_replay) return plan->exec->timed_replay(seconds, plan);
  uint64_t t0 = cg_clock_ns();
  cg_status_t st = plan->exec->start(plan);
  if (st == CG_SUCCESS) st = plan->exec->wait(plan);
  *seconds = (double)(cg_clock_ns() - t0) * 1e-9;
  return st;
}

/* ---- timing candidates: the slowest rank's median replay of each */

typedef struct medians {
  double *seconds;
  uint32_t n;
} medians_t;

static size_t max_bytes(void *ctx, uint32_t i) {
  (void)i;
  return ((medians_t *)ctx)->n * sizeof(double);
}
static void max_fill(void *ctx, uint32_t i, uint8_t *mine) {
  const medians_t *m = ctx;
  (void)i;
  memcpy(mine, m->seconds, m->n * sizeof(double));
}
static void max_use(void *ctx, uint32_t i, const uint8_t *all, size_t stride, int size) {
  medians_t *m = ctx;
  (void)i;
  for (int r = 0; r < size; r++)
    for (uint32_t k = 0; k < m->n; k++) {
      double x;
      memcpy(&x, all + (size_t)r * stride + k * sizeof x, sizeof x);
      if (x > m->seconds[k]) m->seconds[k] = x;
    }
}

/* seconds[k]: the median replay of plans[k], all interleaved replay by
 * replay after a warm-up each; the slowest rank's. Collective over the
 * first plan's communicators (every candidate has the same ones). Each timed
 * replay starts after a round over them, so the ranks start it together: a
 * rank that starts first waits for the others inside its replay, and the
 * slowest rank's time would count that skew (the wake-up after the last
 * replay's wait, the host's own noise), which differs from replay to replay
 * and can be larger than the difference between candidates. */
static cg_status_t time_all(double *seconds, cg_plan_t **plans, uint32_t n, int replays) {
  static const cg_agree_payload_t payload = {max_bytes, max_fill, max_use};
  double *t = calloc((size_t)n * (size_t)replays, sizeof *t), warm;
  cg_participants_t pt = {0};
  cg_status_t st = t ? CG_SUCCESS : cg_fail(CG_ERR_NO_MEMORY, WHERE ": allocating replay times");
  for (uint32_t k = 0; k < n && st == CG_SUCCESS; k++) st = replay(&warm, plans[k]);
  cg_status_t listed = cg_participants_of_plan(&pt, plans[0], WHERE);
  if (st == CG_SUCCESS) st = listed;
  /* every rank takes part in every round, even after its own failure: a
   * round that carried failures could stop the ranks of one communicator and
   * not those of another that shares only some of them (the final round
   * carries the failure, as before) */
  for (int r = 0; r < replays && listed == CG_SUCCESS; r++)
    for (uint32_t k = 0; k < n; k++) {
      cg_status_t lined = cg_agree(NULL, &pt, CG_SUCCESS, "line up a timed replay", WHERE);
      if (st == CG_SUCCESS) st = lined;
      if (st == CG_SUCCESS) st = replay(&t[(size_t)k * replays + r], plans[k]);
    }
  for (uint32_t k = 0; k < n; k++) {
    seconds[k] = 0;
    if (st != CG_SUCCESS) continue;
    qsort(t + (size_t)k * replays, (size_t)replays, sizeof *t, compare_double);
    seconds[k] = t[(size_t)k * replays + replays / 2];
  }
  medians_t m = {seconds, n};
  if (listed == CG_SUCCESS) st = cg_agree_with(NULL, &pt, st, &payload, &m, "time the candidate plans", WHERE);
  cg_participants_free(&pt);
  free(t);
  return st;
}

/* The cost model's alpha times these: the boundaries of each are compiled and
 * timed (cost_model.h says why one alpha is not enough). Below 1 too: the
 * calibration raises alpha until the model is no faster than the profiled
 * plan, which charges every delay of a few large collectives to the fixed
 * cost; on 4 H100s ResNet-50 at B = 10 ms ran 1 MiB buckets faster (22.6 us
 * exposed) than the best of the scales from 1 up (34.4 us). */
static const double alpha_scales[] = {0.5, 1, 2, 4, 8};
#define N_SCALES (sizeof alpha_scales / sizeof alpha_scales[0])
/* And the model's alpha with each collective also delaying the compute
 * later ones wait for, by alpha times these (cg_cost_model_overlap): on 2
 * H200 (ResNet-50, B = 1 ms, session 12) the boundaries of alpha x 4 won,
 * six buckets whose last one, 8.7 MB, ran 55 us after the backward pass,
 * while the communication lane sat idle for 160 us before it. */
static const double overlap_scales[] = {0.125, 0.25, 0.5};
#define N_OVERLAPS (sizeof overlap_scales / sizeof overlap_scales[0])
#define MAX_CANDIDATES (N_SCALES + N_OVERLAPS + 1)

/* Profiles `plan` (collective, like any replay) and models it into *tuning;
 * the plan keeps what it measured (its dump and DOT show it). A rank that
 * fails returns its failure, and still compiles after it (the caller), so
 * the others do not wait. */
static cg_status_t measure(cg_tuning_t *tuning, cg_plan_t *plan, cg_graph_t *graph, const cg_tune_opts_t *opts) {
  cg_profile_t prof = {0};
  cg_status_t mine = plan->exec->profile(&prof, plan, opts->replays, opts->stream, WHERE);
  if (mine != CG_SUCCESS && strncmp(cg_error_last(), WHERE, strlen(WHERE)) != 0) {
    char detail[2048];
    snprintf(detail, sizeof detail, "%s", cg_error_last());
    cg_fail(mine, WHERE ": profiling replays: %s", detail);
  }
  if (mine == CG_SUCCESS) mine = cg_cost_model_make(tuning, plan, graph, &prof, WHERE);
  cg_profile_t *measured = mine == CG_SUCCESS ? calloc(1, sizeof *measured) : NULL;
  if (measured && cg_profile_copy(measured, &prof, WHERE) == CG_SUCCESS) {
    if (plan->measured) cg_profile_free(plan->measured);
    free(plan->measured);
    plan->measured = measured;
  } else {
    free(measured);
  }
  cg_profile_free(&prof);
  return mine;
}

/* Compiles the model's boundaries at each alpha scale, then with each
 * overlap (`profiled`: the plan the model was made from, with its profile
 * in `measured`), into candidates[*n..]. `mine` carries this rank's failure into the
 * compiles (every compile agrees, so a failure on one rank ends them all). */
static cg_status_t add_scaled(cg_plan_t **candidates, uint32_t *n, cg_graph_t *graph, const cg_compile_opts_t *copts,
                              const cg_tuning_t *tuning, const cg_plan_t *profiled, cg_status_t mine) {
  cg_status_t st = CG_SUCCESS;
  for (size_t k = 0; k < N_SCALES + N_OVERLAPS && st == CG_SUCCESS; k++) {
    cg_tuning_t scaled = {0};
    cg_status_t made = mine;
    if (made == CG_SUCCESS && k < N_SCALES)
      made = cg_cost_model_scaled(&scaled, tuning, alpha_scales[k], WHERE);
    else if (made == CG_SUCCESS && !profiled->measured)
      made = cg_fail(CG_ERR_INTERNAL, WHERE ": the profiled plan kept no profile");
    else if (made == CG_SUCCESS)
      made = cg_cost_model_overlap(&scaled, tuning, profiled, profiled->measured, overlap_scales[k - N_SCALES], WHERE);
    st = cg_compile_tuning(&candidates[*n], graph, copts, made == CG_SUCCESS ? &scaled : NULL, 0, made);
    cg_tuning_free(&scaled);
    if (st != CG_SUCCESS) break;
    /* Kept even where it cuts as an earlier candidate does: each
     * communicator's ranks agree on its buckets, but a rank on A alone and
     * one on A and B can see a candidate as a duplicate and as new (its
     * buckets on B differ), then time different lists and wait for each
     * other for good (test_mpi_tune, communicators over different ranks,
     * once the overlap candidates came). The fastest stays the first of
     * equal ones. */
    (*n)++;
  }
  return st;
}

/* What the kept plan's dump says of the timing (plan_internal.h's
 * tune_log): one line per round, each candidate as "<what> <us> us (<n>
 * collectives)", the kept one marked, in the order add_scaled made them.
 * The times are the device's where the executor has its clock (replay). */
typedef struct tune_log {
  char text[4096];
  size_t used;
} tune_log_t;

static void log_round(tune_log_t *log, int round, const char *first, cg_plan_t **candidates, uint32_t n,
                      const double *seconds, uint32_t best) {
  size_t room = sizeof log->text - log->used;
  int w = snprintf(log->text + log->used, room, "tune round %d:", round);
  for (uint32_t k = 0; k < n && w > 0 && (size_t)w < room; k++) {
    char what[32];
    if (k == 0)
      snprintf(what, sizeof what, "%s", first);
    else if (k - 1 < N_SCALES)
      snprintf(what, sizeof what, "alpha x%g", alpha_scales[k - 1]);
    else
      snprintf(what, sizeof what, "overlap x%g", overlap_scales[k - 1 - N_SCALES]);
    uint32_t collectives = 0;
    for (uint32_t i = 0; i < candidates[k]->n_steps; i++)
      collectives += candidates[k]->steps[i].kind == CG_STEP_COLLECTIVE;
    w += snprintf(log->text + log->used + w, room - (size_t)w, "%s %s %.1f us (%u collective%s)%s", k ? "," : "",
                  what, seconds[k] * 1e6, collectives, collectives == 1 ? "" : "s", k == best ? " kept" : "");
  }
  if (w > 0 && (size_t)w + 1 < room) {
    log->text[log->used + (size_t)w] = '\n';
    log->used += (size_t)w + 1;
    log->text[log->used] = '\0';
  } else {
    log->text[log->used] = '\0'; /* a round that does not fit is left out */
  }
}

/* Times candidates[0..n) (the slowest rank's median replay) and keeps the
 * fastest, candidates[0] unless another is strictly faster; the others are
 * destroyed (all of them after a failure). The round goes into `log`. */
static cg_status_t keep_fastest(cg_plan_t **kept, cg_plan_t **candidates, uint32_t n, cg_status_t st, int replays,
                                tune_log_t *log, int round, const char *first) {
  double seconds[MAX_CANDIDATES] = {0};
  uint32_t best = 0;
  *kept = NULL;
  if (st == CG_SUCCESS && n > 1) st = time_all(seconds, candidates, n, replays);
  for (uint32_t k = 1; st == CG_SUCCESS && k < n; k++)
    if (seconds[k] < seconds[best]) best = k;
  if (st == CG_SUCCESS && n > 1) log_round(log, round, first, candidates, n, seconds, best);
  for (uint32_t k = 0; k < n; k++)
    if (st != CG_SUCCESS || k != best) cg_plan_destroy(candidates[k]);
  if (st == CG_SUCCESS) *kept = candidates[best];
  return st;
}

/* A profiling replay ran past the plan's timeout: it was reported (the
 * ranks that did not come named) and the communicators aborted, and a
 * compile now would wait as long again for those ranks (the others are in
 * that replay too, or gone): cg_plan_tune returns at once. */
static int profile_timed_out(const cg_plan_t *plan, cg_status_t measured) {
  return measured == CG_ERR_TIMEOUT && atomic_load(&plan->timed_out);
}

cg_status_t cg_plan_tune(cg_plan_t **out, cg_plan_t *plan, cg_graph_t *graph, const cg_tune_opts_t *opts) {
  static const cg_tune_opts_t defaults = CG_TUNE_OPTS_INIT;
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
  cg_status_t mine = measure(&tuning, plan, graph, opts);
  if (profile_timed_out(plan, mine)) {
    cg_tuning_free(&tuning);
    return mine;
  }
  /* The graph is the plan's, checked when the plan was compiled: no second
   * cross-rank check. The ranks' agreement on the tuning carries a rank's
   * failure (its profile's, say) to the others instead. Candidates: the
   * default boundaries (keeping the tuning, marked "default won", so either
   * kind of winner can be saved), then the model's boundaries at each alpha
   * scale. */
  cg_compile_opts_t copts = opts->compile;
  copts.check_ranks = 0;
  cg_plan_t *candidates[MAX_CANDIDATES] = {NULL}, *kept = NULL;
  uint32_t n = 0;
  st = cg_compile_tuning(&candidates[n], graph, &copts, mine == CG_SUCCESS ? &tuning : NULL, 1, mine);
  if (st == CG_SUCCESS) n++;
  if (st == CG_SUCCESS) st = add_scaled(candidates, &n, graph, &copts, &tuning, plan, CG_SUCCESS);
  cg_tuning_free(&tuning);
  /* the model can be wrong: the candidate that runs fastest on the slowest
   * rank is kept; the default unless another is strictly faster */
  tune_log_t log = {"", 0};
  st = keep_fastest(&kept, candidates, n, st, opts->replays, &log, 1, "default");
  /* Where the model's boundaries won, it is refined once around them: the
   * default plan's profile has the default's collectives, few and large,
   * competing with the compute, and says little about the cost of the
   * smaller ones the winner sends during it (what they cost, what they slow
   * down). The winner is profiled in turn, modelled again, and the new
   * boundaries are timed against it; it stays unless one is strictly faster. */
  if (st == CG_SUCCESS && !cg_plan_default_won(kept)) {
    memset(candidates, 0, sizeof candidates);
    candidates[0] = kept;
    n = 1;
    mine = measure(&tuning, kept, graph, opts);
    if (profile_timed_out(kept, mine)) {
      cg_tuning_free(&tuning);
      cg_plan_destroy(kept);
      return mine;
    }
    st = add_scaled(candidates, &n, graph, &copts, &tuning, kept, mine);
    cg_tuning_free(&tuning);
    st = keep_fastest(&kept, candidates, n, st, opts->replays, &log, 2, "round 1's");
  }
  if (st == CG_SUCCESS && log.used) {
    free(kept->tune_log);
    kept->tune_log = malloc(log.used + 1);
    if (kept->tune_log) memcpy(kept->tune_log, log.text, log.used + 1); /* a dump without it otherwise */
  }
  if (st == CG_SUCCESS) *out = kept;
  return st;
}
