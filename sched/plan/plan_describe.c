/* How a plan describes itself: a step in error details and reports, the
 * fusion reasons its DOT draws, and cg_plan_stats. */
#include <stdio.h>

#include "error.h"
#include "fuse_why.h"
#include "plan_internal.h"

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
