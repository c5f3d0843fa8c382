/* How a plan describes itself: a step in error details and reports, the
 * fusion reasons its DOT draws, cg_plan_stats, and the words for measured
 * times and the cost model that the dump, the DOT and the trace share. */
#include <stdio.h>

#include "error.h"
#include "fuse_why.h"
#include "plan_internal.h"
#include "plan_trace.h"

void cg_step_describe(char *buf, size_t size, const cg_plan_t *plan, uint32_t index) {
  const cg_step_t *s = &plan->steps[index];
  char plan_name[300] = "", node_name[300] = "", where[64] = "", bucket[700] = "";
  if (plan->name) snprintf(plan_name, sizeof plan_name, "plan '%s' ", plan->name);
  if (plan->node_names[s->node]) snprintf(node_name, sizeof node_name, " '%s'", plan->node_names[s->node]);
  if (s->comm) snprintf(where, sizeof where, " on rank %d of %d", s->comm->rank, s->comm->size);
  if (s->bucket != CG_NO_STEP) {
    const cg_bucket_t *b = &plan->buckets[s->bucket];
    uint32_t last = b->members[b->n_members - 1];
    const char *what = s->kind == CG_STEP_PACK ? "pack of " : s->kind == CG_STEP_UNPACK ? "unpack of " : "";
    snprintf(bucket, sizeof bucket, "%sbucket %u of %u nodes: #%u%s .. #%u%s%s%s, ", what, s->bucket, b->n_members,
             s->node, node_name, last, plan->node_names[last] ? " '" : "",
             plan->node_names[last] ? plan->node_names[last] : "", plan->node_names[last] ? "'" : "");
    snprintf(buf, size, "%sstep %u (%s%s%s)", plan_name, index, bucket, cg_node_kind_name(s->op_kind), where);
    return;
  }
  snprintf(buf, size, "%sstep %u (node #%u%s, %s%s)", plan_name, index, s->node, node_name,
           cg_node_kind_name(s->op_kind), where);
}

const char *cg_fuse_why_text(cg_fuse_why_t why) {
  switch (why) {
#define CG_FUSE_TEXT(name, text) \
  case name:                     \
    return text;
    CG_FUSE_REASONS(CG_FUSE_TEXT)
#undef CG_FUSE_TEXT
  }
  return "?";
}

cg_status_t cg_plan_stats(cg_plan_stats_t *out, const cg_plan_t *plan) {
  if (!out || !plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_stats: NULL %s", out ? "plan" : "out");
  *out = (cg_plan_stats_t){.steps = plan->n_steps,
                           .lanes = plan->n_lanes,
                           .dependencies = plan->n_deps,
                           .communicators = plan->n_comms,
                           .device = plan->device,
                           .buckets = plan->n_buckets,
                           .bucket_bytes = plan->bucket_bytes};
  for (uint32_t b = 0; b < plan->n_buckets; b++) {
    const cg_bucket_t *bucket = &plan->buckets[b];
    out->fused_nodes += bucket->n_members;
    for (uint32_t k = 0; k < bucket->n_pack; k++) out->copy_bytes += bucket->pack[k].bytes;
    for (uint32_t k = 0; k < bucket->n_unpack; k++) out->copy_bytes += bucket->unpack[k].bytes;
  }
  if (plan->device == CG_DEVICE_HOST) return CG_SUCCESS;
  for (uint32_t i = 0; i < plan->n_steps; i++)
    for (uint32_t e = 0; e < plan->steps[i].n_deps; e++)
      out->events += plan->steps[plan->steps[i].deps[e]].lane != plan->steps[i].lane;
  for (uint32_t u = 0; u < plan->n_units; u++) out->groups += plan->units[u].n > 1;
  return CG_SUCCESS;
}

/* ---- measured times, the cost model, bytes (plan_trace.h) */

size_t cg_plan_node_bytes(const cg_plan_t *plan, uint32_t node) {
  const cg_plan_node_t *n = &plan->nodes[node];
  if (!n->comm || n->kind == CG_NODE_BARRIER) return 0;
  size_t bytes = n->count * cg_dtype_size(n->dtype); /* recording checked it does not overflow */
  if (n->kind == CG_NODE_ALLGATHER || n->kind == CG_NODE_REDUCE_SCATTER) bytes *= (size_t)n->comm->size;
  return bytes;
}

size_t cg_plan_step_bytes(const cg_plan_t *plan, uint32_t step) {
  const cg_step_t *s = &plan->steps[step];
  if (s->kind == CG_STEP_PACK || s->kind == CG_STEP_UNPACK) {
    const cg_bucket_t *b = &plan->buckets[s->bucket];
    const cg_copy_segment_t *segs = s->kind == CG_STEP_PACK ? b->pack : b->unpack;
    uint32_t n = s->kind == CG_STEP_PACK ? b->n_pack : b->n_unpack;
    size_t bytes = 0;
    for (uint32_t k = 0; k < n; k++) bytes += segs[k].bytes;
    return bytes;
  }
  if (s->kind != CG_STEP_COLLECTIVE) return 0;
  if (s->bucket != CG_NO_STEP) return plan->buckets[s->bucket].bytes;
  return plan->nodes ? cg_plan_node_bytes(plan, s->node) : 0;
}

/* µs in UTF-8 */
#define MICRO "\xc2\xb5s"

int cg_plan_measured_text(char *buf, size_t size, const cg_plan_t *plan, uint32_t step) {
  const cg_profile_t *m = plan->measured;
  if (size) buf[0] = '\0';
  if (!m || m->n_steps != plan->n_steps || step >= m->n_steps) return 0;
  double start = m->start_us[step], dur = m->end_us[step] - start;
  snprintf(buf, size, "measured %.1f " MICRO " at %.1f " MICRO, dur > 0 ? dur : 0.0, start);
  return 1;
}

int cg_plan_model_text(char *buf, size_t size, const cg_plan_t *plan, uint32_t comm_index) {
  if (size) buf[0] = '\0';
  if (!plan->tuning || comm_index >= plan->n_comms) return 0;
  const cg_comm_cost_t *cost = cg_tuning_cost(plan->tuning, plan->comms[comm_index].comm);
  if (!cost) return 0;
  double gbs = cost->bytes_per_us * 1e-3; /* bytes per us: MB/s; GB/s a thousandth of that */
  int n = snprintf(buf, size, "alpha %.1f " MICRO ", %.*f GB/s", cost->alpha_us, gbs >= 100 ? 0 : gbs >= 10 ? 1 : 2,
                   gbs);
  if (cost->overlap_us > 0 && n > 0 && (size_t)n < size)
    n += snprintf(buf + n, size - (size_t)n, ", overlap %.1f " MICRO, cost->overlap_us);
  /* the largest size the backend's own path saves time at (cost_model.h) */
  uint32_t top = CG_COST_PATH_SIZES;
  for (uint32_t k = 0; cost->path.dtypes && k < CG_COST_PATH_SIZES; k++)
    if (cost->path.path_us[k] > 0 && cost->path.library_us[k] > cost->path.path_us[k]) top = k;
  if (top < CG_COST_PATH_SIZES && n > 0 && (size_t)n < size)
    snprintf(buf + n, size - (size_t)n, ", own path up to %zu KB", (size_t)1 << top);
  return 1;
}

int cg_plan_ready_us(double *ready_us, const cg_plan_t *plan, uint32_t step) {
  const cg_tuning_t *t = plan->tuning;
  const cg_step_t *s = &plan->steps[step];
  if (!t || s->kind != CG_STEP_COLLECTIVE) return 0;
  if (s->bucket == CG_NO_STEP) {
    if (s->node >= t->n_nodes) return 0;
    *ready_us = t->ready_us[s->node];
    return 1;
  }
  const cg_bucket_t *b = &plan->buckets[s->bucket];
  double latest = 0;
  for (uint32_t m = 0; m < b->n_members; m++) {
    if (b->members[m] >= t->n_nodes) return 0;
    if (t->ready_us[b->members[m]] > latest) latest = t->ready_us[b->members[m]];
  }
  *ready_us = latest;
  return 1;
}
