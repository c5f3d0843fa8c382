/* cg_plan_tune's cost model (cost_model.h). From the profile: when each
 * collective's inputs were ready (the latest end of the compute nodes it
 * depends on directly: host functions, child graphs, events) and what a
 * collective costs on each communicator: alpha + bytes / bytes_per_us, fitted
 * to its collective steps by least squares, alpha then raised by the steps'
 * mean delay after their dependencies and until the model finishes the
 * profiled plan's own collectives no earlier than measured (what a collective
 * costs inside a replay, edges and launches included). */
#include "cost_model.h"

#include <math.h>
#include <stdlib.h>

#include "backend.h"
#include "error.h"
#include "graph_view.h"

/* Bytes a collective step moves as buckets count them (its largest buffer). */
static size_t step_bytes(const cg_step_t *s) {
  size_t bytes = s->count * cg_dtype_size(s->dtype);
  if (s->op_kind == CG_NODE_ALLGATHER || s->op_kind == CG_NODE_REDUCE_SCATTER) bytes *= (size_t)s->comm->size;
  return bytes;
}

/* The table's index for `bytes`: the smallest 1 KB << k that holds them;
 * CG_COST_PATH_SIZES when none does. */
static uint32_t path_index(size_t bytes) {
  uint32_t k = 0;
  while (k < CG_COST_PATH_SIZES && ((size_t)1024 << k) < bytes) k++;
  return k;
}

/* How much less than the library's path the backend's own path takes for
 * such a collective (*path_us: its own time); 0 and no path where the library
 * runs it. */
static double path_saving_us(double *path_us, const cg_cost_path_t *p, cg_node_kind_t kind, cg_dtype_t dtype,
                             cg_redop_t op, size_t bytes) {
  uint32_t k = path_index(bytes);
  *path_us = 0;
  if (kind != CG_NODE_ALLREDUCE || !bytes || k == CG_COST_PATH_SIZES || !(p->dtypes >> dtype & 1u) ||
      !(p->ops >> op & 1u) || !(p->path_us[k] > 0) || !(p->library_us[k] > p->path_us[k]))
    return 0;
  *path_us = p->path_us[k];
  return p->library_us[k] - p->path_us[k];
}

void cg_cost_model_query_path(cg_cost_path_t *out, const cg_comm_t *comm) {
  const cg_backend_t *b = comm && comm->ops ? comm->ops->backend : NULL;
  *out = (cg_cost_path_t){0};
  if (!b || !b->collective_path_us) return;
  int found = 0;
  for (uint32_t k = 0; k < CG_COST_PATH_SIZES; k++) {
    double mine = 0, library = 0;
    size_t bytes = (size_t)1024 << k;
    if (!b->collective_path_us(&mine, &library, comm->impl, CG_NODE_ALLREDUCE, CG_FLOAT32, CG_SUM, bytes)) continue;
    out->path_us[k] = mine, out->library_us[k] = library;
    if (found++) continue;
    /* which dtypes and ops take it, asked at the first size that does */
    for (int d = 0; d < CG_DTYPE_COUNT; d++)
      for (int o = 0; o < CG_REDOP_COUNT; o++)
        if (b->collective_path_us(&mine, &library, comm->impl, CG_NODE_ALLREDUCE, (cg_dtype_t)d, (cg_redop_t)o,
                                  bytes))
          out->dtypes |= 1u << d, out->ops |= 1u << o;
  }
}

/* The library's cost: alpha + bytes / bandwidth. */
static double line_us(const cg_comm_cost_t *cost, size_t bytes) {
  return cost->alpha_us + (double)bytes / cost->bytes_per_us;
}

double cg_cost_model_collective_us(const cg_comm_cost_t *cost, cg_node_kind_t kind, cg_dtype_t dtype, cg_redop_t op,
                                   size_t bytes) {
  double line = line_us(cost, bytes), path_us = 0;
  double saving = path_saving_us(&path_us, &cost->path, kind, dtype, op, bytes);
  return saving > 0 ? fmax(line - saving, path_us) : line;
}

/* Whether the profiled step ran on the backend's own path, where the backend
 * can tell (backend.h's step_on_own_path); else the table says. */
static int ran_on_path(const cg_step_t *s) {
  const cg_backend_t *b = s->comm && s->comm->ops ? s->comm->ops->backend : NULL;
  return !b || !b->step_on_own_path || b->step_on_own_path(s);
}

static double step_cost_us(const cg_comm_cost_t *cost, const cg_step_t *s) {
  if (!ran_on_path(s)) return line_us(cost, step_bytes(s));
  return cg_cost_model_collective_us(cost, s->op_kind, s->dtype, s->op, step_bytes(s));
}

/* The fixed cost assumed where the profile cannot tell fixed cost from
 * bandwidth (every collective of one size): about what one small NCCL
 * allreduce captured in a graph costs on NVLink. Taking the whole measured
 * time as fixed cost instead makes bytes free, and then one bucket after the
 * whole backward always looks best: over NCCL's sockets transport a profiled
 * 32 MiB bucket (15 ms) made every candidate the default. The candidates at
 * larger alpha scales, and timing them, cover a higher fixed cost. */
#define ALPHA_PRIOR_US 10.0

/* alpha + bytes / bytes_per_us through the communicator's collective steps
 * (least squares). With one size, or a fit that is not physical, alpha is the
 * fastest step's time capped at ALPHA_PRIOR_US and the bandwidth the best
 * the largest steps reached beyond it: large steps are the ones that measure
 * bandwidth. */
static void fit_cost(cg_comm_cost_t *out, const cg_plan_t *plan, uint32_t c, const cg_profile_t *prof,
                     const cg_cost_path_t *path) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, fastest = INFINITY;
  size_t largest = 0;
  const cg_plan_comm_t *pc = &plan->comms[c];
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *s = &plan->steps[pc->steps[k]];
    if (s->kind != CG_STEP_COLLECTIVE || s->op_kind == CG_NODE_BARRIER) continue;
    double x = (double)step_bytes(s), y = prof->end_us[pc->steps[k]] - prof->start_us[pc->steps[k]], path_us = 0;
    if (y < 0.1) y = 0.1;
    if (ran_on_path(s)) /* the library's time */
      y += path_saving_us(&path_us, path, s->op_kind, s->dtype, s->op, step_bytes(s));
    n++, sx += x, sy += y, sxx += x * x, sxy += x * y;
    if (y < fastest) fastest = y;
    if (step_bytes(s) > largest) largest = step_bytes(s);
  }
  *out = (cg_comm_cost_t){pc->comm, n ? fmin(fastest, ALPHA_PRIOR_US) : 1.0, INFINITY, 0, *path};
  double det = n * sxx - sx * sx;
  double slope = det > 0 ? (n * sxy - sx * sy) / det : 0, alpha = n ? (sy - slope * sx) / n : 0;
  if (slope > 0 && alpha >= 0) {
    out->alpha_us = alpha;
    out->bytes_per_us = 1.0 / slope;
    return;
  }
  double best = 0;
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *s = &plan->steps[pc->steps[k]];
    if (s->kind != CG_STEP_COLLECTIVE || s->op_kind == CG_NODE_BARRIER || step_bytes(s) != largest) continue;
    double path_us = 0, saving = ran_on_path(s) ? path_saving_us(&path_us, path, s->op_kind, s->dtype, s->op, largest)
                                                : 0;
    double beyond = prof->end_us[pc->steps[k]] - prof->start_us[pc->steps[k]] + saving - out->alpha_us;
    if (beyond > 0 && (double)largest / beyond > best) best = (double)largest / beyond;
  }
  out->bytes_per_us = best > 0 ? best : 1e6; /* nothing moved: bandwidth plays no part */
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
  cg_comm_cost_t cost = t->costs[c];
  cost.alpha_us = alpha, cost.bytes_per_us = bytes_per_us, cost.overlap_us = 0;
  double finish = 0;
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *s = &plan->steps[pc->steps[k]];
    if (s->kind != CG_STEP_COLLECTIVE) continue;
    double start = step_ready(plan, s, t);
    if (finish > start) start = finish;
    finish = start + step_cost_us(&cost, s);
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

cg_status_t cg_cost_model_make(cg_tuning_t *t, const cg_plan_t *plan, const cg_graph_t *g, const cg_profile_t *prof,
                               const char *where) {
  uint32_t n = cg_graph_node_count(g);
  *t = (cg_tuning_t){calloc(n ? n : 1, sizeof *t->ready_us), n, calloc(plan->n_comms ? plan->n_comms : 1,
                                                                          sizeof *t->costs), plan->n_comms, 0};
  if (!t->ready_us || !t->costs) {
    cg_tuning_free(t);
    return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the tuning of %u nodes", where, n);
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
    cg_cost_path_t path;
    cg_cost_model_query_path(&path, plan->comms[c].comm);
    fit_cost(&t->costs[c], plan, c, prof, &path);
    calibrate(&t->costs[c], plan, c, t, prof);
  }
  return CG_SUCCESS;
}


cg_status_t cg_cost_model_scaled(cg_tuning_t *out, const cg_tuning_t *t, double alpha_scale, const char *where) {
  cg_status_t st = cg_tuning_copy(out, t, where);
  for (uint32_t c = 0; st == CG_SUCCESS && c < out->n_costs; c++) out->costs[c].alpha_us *= alpha_scale;
  return st;
}

cg_status_t cg_cost_model_overlap(cg_tuning_t *out, const cg_tuning_t *t, const cg_plan_t *plan,
                                  const cg_profile_t *prof, double overlap_scale, const char *where) {
  cg_status_t st = cg_tuning_copy(out, t, where);
  for (uint32_t c = 0; st == CG_SUCCESS && c < plan->n_comms; c++) {
    cg_comm_cost_t *cost = (cg_comm_cost_t *)cg_tuning_cost(out, plan->comms[c].comm);
    if (!cost) continue;
    const cg_plan_comm_t *pc = &plan->comms[c];
    uint32_t on_comm = 0;
    for (uint32_t v = 0; v < plan->n_names; v++) on_comm += plan->nodes[v].comm == pc->comm;
    if (on_comm > CG_OVERLAP_MAX_COLLECTIVES) continue; /* the search would not take it */
    cost->overlap_us = cost->alpha_us * overlap_scale;
    /* the profiled plan's collectives delayed the ready times it measured:
     * take out overlap_us for each that started before, so that the search
     * puts back its own candidates' */
    for (uint32_t v = 0; v < plan->n_names && v < out->n_nodes; v++) {
      if (plan->nodes[v].comm != pc->comm || out->ready_us[v] <= 0) continue;
      uint32_t before = 0;
      for (uint32_t k = 0; k < pc->n_steps; k++) {
        const cg_step_t *s = &plan->steps[pc->steps[k]];
        before += s->kind == CG_STEP_COLLECTIVE && s->op_kind != CG_NODE_BARRIER &&
                  prof->start_us[pc->steps[k]] < out->ready_us[v];
      }
      double ready = out->ready_us[v] - cost->overlap_us * (double)before;
      out->ready_us[v] = ready > 0 ? ready : 0;
    }
  }
  if (st != CG_SUCCESS) cg_tuning_free(out);
  return st;
}
