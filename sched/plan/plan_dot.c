/* The plan drawn (DOT) and dumped (text). */
#include <stdio.h>

#include "backend.h"
#include "dot_text.h"
#include "error.h"
#include "fuse_why.h"
#include "plan_internal.h"
#include "plan_trace.h"

/* "allreduce 1024 x float32 sum", "send 10 x int32 to 3", "host_func" */
static void put_shape(FILE *f, const cg_step_t *s, const char *newline) {
  if (s->kind == CG_STEP_PACK || s->kind == CG_STEP_UNPACK) {
    fprintf(f, "%s bucket %u", s->kind == CG_STEP_PACK ? "pack" : "unpack", s->bucket);
    return;
  }
  fputs(cg_node_kind_name(s->op_kind), f);
  if (s->kind != CG_STEP_COLLECTIVE || s->op_kind == CG_NODE_BARRIER) return;
  fprintf(f, "%s%zu x %s", newline, s->count, cg_dtype_name(s->dtype));
  if (cg_kind_has_op(s->op_kind)) fprintf(f, " %s", cg_redop_name(s->op));
  if (cg_kind_has_root(s->op_kind)) fprintf(f, " root %d", s->root);
  if (s->op_kind == CG_NODE_SEND) fprintf(f, " to %d", s->root);
  if (s->op_kind == CG_NODE_RECV) fprintf(f, " from %d", s->root);
}

/* Names in the dump: control characters, quotes and backslashes escaped so
 * every step stays on one line. */
static void put_name(FILE *f, const char *name) {
  fputc('\'', f);
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    if (*p == '\'' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(f, "\\x%02x", *p);
    else
      fputc(*p, f);
  }
  fputc('\'', f);
}

static cg_status_t finish(FILE *f, const char *caller) {
  if (fflush(f) != 0 || ferror(f)) return cg_fail(CG_ERR_IO, "%s: writing failed", caller);
  return CG_SUCCESS;
}

/* "12 copies, 1.5 MB" or "none: already contiguous" */
static void put_copies(FILE *f, const cg_plan_t *plan, const cg_step_t *s) {
  const cg_bucket_t *b = &plan->buckets[s->bucket];
  int pack = s->kind == CG_STEP_PACK;
  const cg_copy_segment_t *segs = pack ? b->pack : b->unpack;
  uint32_t n = pack ? b->n_pack : b->n_unpack;
  size_t bytes = 0;
  for (uint32_t k = 0; k < n; k++) bytes += segs[k].bytes;
  if (n)
    fprintf(f, "%u copies, %zu bytes%s", n, bytes, plan->device != CG_DEVICE_HOST ? " (one kernel)" : "");
  else
    fputs(pack && !b->send_direct ? "none: packs in place" : "none: zero-copy", f);
}

/* A node that could have been fused but was not, and why. */
static int put_not_fused(FILE *f, const cg_plan_t *plan, const cg_step_t *s, uint32_t next, const char *sep) {
  uint8_t why = plan->fuse_why[s->node];
  int said = 0;
  if (!cg_kind_is_fusible(s->op_kind)) return 0;
  if (why != CG_FUSE_FIRST && why != CG_FUSE_JOINED) {
    fprintf(f, "%snot fused with the one before: %s", sep, cg_fuse_why_text((cg_fuse_why_t)why));
    said = 1;
  }
  if (next != CG_NO_STEP) {
    uint8_t after = plan->fuse_why[plan->steps[next].node];
    if (after != CG_FUSE_JOINED && after != CG_FUSE_NOT_FUSIBLE && after != CG_FUSE_OFF &&
        !(after == CG_FUSE_DIFFERS && !said)) {
      fprintf(f, "%snot fused with the one after: %s", sep, cg_fuse_why_text((cg_fuse_why_t)after));
      said = 1;
    }
  }
  return said;
}

static uint32_t next_on_comm(const cg_plan_t *plan, const cg_step_t *s) {
  if (s->kind != CG_STEP_COLLECTIVE) return CG_NO_STEP;
  const cg_plan_comm_t *pc = &plan->comms[s->comm_index];
  return s->comm_position + 1 < pc->n_steps ? pc->steps[s->comm_position + 1] : CG_NO_STEP;
}

/* What the plan measured of a step and, for a collective, when its tuning
 * says its inputs were ready: "\nmeasured 12.3 µs at 140.0 µs\nready at
 * 100.0 µs"; nothing for a plan without them. */
static void put_times(FILE *f, const cg_plan_t *plan, uint32_t i, const char *sep) {
  char text[128];
  double ready;
  if (cg_plan_measured_text(text, sizeof text, plan, i)) fprintf(f, "%s%s", sep, text);
  if (cg_plan_ready_us(&ready, plan, i)) fprintf(f, "%sready at %.1f \xc2\xb5s", sep, ready);
}

static void put_step(FILE *f, const cg_plan_t *plan, uint32_t i) {
  const cg_step_t *s = &plan->steps[i];
  const cg_backend_t *b = s->comm ? s->comm->ops->backend : NULL;
  int copy = s->kind == CG_STEP_PACK || s->kind == CG_STEP_UNPACK;
  fprintf(f, "    s%u [shape=%s, label=\"step %u", i,
          s->kind == CG_STEP_HOST_FUNC ? "component" : s->kind == CG_STEP_CUDA_NODE ? "box3d" : copy ? "cds" : "box", i);
  if (s->kind == CG_STEP_COLLECTIVE) fprintf(f, " (#%u on comm)", s->comm_position);
  fputs("\\n", f);
  if (copy) {
    put_shape(f, s, "\\n");
    fputs("\\n", f);
    put_copies(f, plan, s);
    put_times(f, plan, i, "\\n");
    fputs("\"];\n", f);
    return;
  }
  if (b && b->step_call) {
    cg_dot_put_escaped(f, b->step_call(s));
    fputs("\\n", f);
  }
  put_shape(f, s, "\\n");
  if (s->bucket != CG_NO_STEP) {
    const cg_bucket_t *bucket = &plan->buckets[s->bucket];
    fprintf(f, "\\nbucket %u: %u nodes, %zu bytes", s->bucket, bucket->n_members, bucket->bytes);
    for (uint32_t m = 0; m < bucket->n_members; m++) {
      uint32_t node = bucket->members[m];
      fprintf(f, "%s#%u", m % 8 ? ", " : "\\n", node);
      if (plan->node_names[node]) {
        fputs(" ", f);
        cg_dot_put_escaped(f, plan->node_names[node]);
      }
    }
    put_times(f, plan, i, "\\n");
    fputs("\", style=bold];\n", f);
    return;
  }
  fprintf(f, "\\nfrom node #%u", s->node);
  if (plan->node_names[s->node]) {
    fputs(" ", f);
    cg_dot_put_escaped(f, plan->node_names[s->node]);
  }
  put_not_fused(f, plan, s, next_on_comm(plan, s), "\\n");
  put_times(f, plan, i, "\\n");
  fputs("\"];\n", f);
}

cg_status_t cg_plan_write_dot(const cg_plan_t *plan, FILE *f) {
  if (!plan || !f) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_write_dot: NULL %s", plan ? "file" : "plan");
  fputs("digraph plan {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n", f);
  /* large plans: straight edges and a bounded crossing search keep Graphviz
   * fast, as for recorded graphs */
  if (plan->n_steps > 64) fputs("  splines=line;\n  nslimit=1;\n  mclimit=0.1;\n", f);
  int device = plan->device != CG_DEVICE_HOST;
  int timed = plan->measured && plan->measured->n_steps == plan->n_steps;
  if (plan->name || device || plan->n_buckets || timed || plan->tuning) {
    fputs("  label=\"", f);
    if (plan->name) {
      fputs("plan ", f);
      cg_dot_put_escaped(f, plan->name);
    }
    if (device)
      fprintf(f, "%sone CUDA graph on device %d: a lane is a stream, dashed edges are events between streams",
              plan->name ? "\\n" : "", plan->device);
    if (plan->n_buckets) fprintf(f, "\\nbold: a bucket (fused nodes, at most %zu bytes)", plan->bucket_bytes);
    if (timed) fputs("\\nmeasured: a step's median duration and start in a profiled replay (cg_plan_trace)", f);
    if (plan->tuning) fputs("\\nready: when a collective's inputs were ready by the tuning (cg_plan_tune)", f);
    fputs("\";\n", f);
  }
  for (uint32_t lane = 0; lane < plan->n_lanes; lane++) {
    fprintf(f, "  subgraph cluster_lane%u {\n    style=rounded; color=gray60;\n", lane);
    const cg_lane_t *ln = &plan->lanes[lane];
    if (ln->kind == CG_LANE_HOST) {
      fprintf(f, "    label=\"lane %u%s: host functions\";\n", lane, device ? " (stream, CUDA host nodes)" : "");
    } else if (ln->kind == CG_LANE_COMPUTE) {
      fprintf(f, "    label=\"lane %u (stream): user GPU work (child graphs, events)\";\n", lane);
    } else {
      const cg_comm_t *c = plan->comms[ln->comm_index].comm;
      char model[128];
      fprintf(f, "    label=\"lane %u%s: %scomm %llu (%s, rank %d of %d)", lane, device ? " (stream)" : "",
              ln->kind == CG_LANE_PACK ? "bucket packs for " : ln->kind == CG_LANE_UNPACK ? "bucket unpacks for " : "",
              (unsigned long long)c->serial, c->ops->backend_name, c->rank, c->size);
      /* the tuning's cost model of the communicator, on its own lane */
      if (ln->kind == CG_LANE_COMM && cg_plan_model_text(model, sizeof model, plan, ln->comm_index))
        fprintf(f, "\\nmodel: %s", model);
      if (cg_plan_lane_runs_cuda_nodes(plan, lane)) fputs("\\nand the user GPU work chained between its collectives", f);
      fputs("\";\n", f);
    }
    /* device plans: steps in issue order, sends and receives issued together
     * in a cluster of their own */
    for (uint32_t u = 0; u < plan->n_units; u++) {
      const cg_issue_unit_t *unit = &plan->units[u];
      if (unit->lane != lane) continue;
      int grouped = device && unit->n > 1;
      if (grouped)
        fprintf(f, "    subgraph cluster_group%u {\n    style=dashed; color=gray40; label=\"group: issued "
                "together\";\n", u);
      for (uint32_t k = 0; k < unit->n; k++) put_step(f, plan, plan->issue_order[unit->first + k]);
      if (grouped) fputs("    }\n", f);
    }
    fputs("  }\n", f);
  }
  for (uint32_t i = 0; i < plan->n_steps; i++)
    for (uint32_t e = 0; e < plan->steps[i].n_deps; e++) {
      uint32_t d = plan->steps[i].deps[e];
      if (device && plan->steps[d].lane != plan->steps[i].lane)
        fprintf(f, "  s%u -> s%u [style=dashed, color=royalblue, fontcolor=royalblue, label=\"event\"];\n", d, i);
      else
        fprintf(f, "  s%u -> s%u;\n", d, i);
    }
  fputs("}\n", f);
  return finish(f, "cg_plan_write_dot");
}

cg_status_t cg_plan_dump(const cg_plan_t *plan, FILE *f) {
  if (!plan || !f) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_dump: NULL %s", plan ? "file" : "plan");
  fputs("plan", f);
  if (plan->name) {
    fputc(' ', f);
    put_name(f, plan->name);
  }
  fprintf(f, ": %u steps, %u lanes, %u communicators, %zu dependencies", plan->n_steps, plan->n_lanes,
          plan->n_comms, plan->n_deps);
  int device = plan->device != CG_DEVICE_HOST;
  int timed = (plan->measured && plan->measured->n_steps == plan->n_steps) || plan->tuning;
  if (device) fprintf(f, ", device plan: %u issue units", plan->n_units);
  if (plan->n_buckets) fprintf(f, ", %u buckets of at most %zu bytes", plan->n_buckets, plan->bucket_bytes);
  /* a tuned plan: its communicators' cost model, still on the first line */
  for (uint32_t c = 0; c < plan->n_comms; c++) {
    char model[128];
    if (cg_plan_model_text(model, sizeof model, plan, c)) fprintf(f, "; comm %u model: %s", c, model);
  }
  fputc('\n', f);
  if (plan->tune_log) fputs(plan->tune_log, f); /* lines of their own, "tune round ..." */
  for (uint32_t i = 0; i < plan->n_steps; i++) {
    const cg_step_t *s = &plan->steps[i];
    fprintf(f, "step %u lane %u ", i, s->lane);
    if (s->kind == CG_STEP_COLLECTIVE)
      fprintf(f, "comm %u #%u group %u ", s->comm_index, s->comm_position, s->group);
    put_shape(f, s, " ");
    if (s->kind == CG_STEP_PACK || s->kind == CG_STEP_UNPACK) {
      fputs(": ", f);
      put_copies(f, plan, s);
    } else if (s->bucket != CG_NO_STEP) {
      const cg_bucket_t *b = &plan->buckets[s->bucket];
      fprintf(f, " bucket %u nodes", s->bucket);
      for (uint32_t m = 0; m < b->n_members; m++) fprintf(f, "%s%u", m ? "," : " ", b->members[m]);
    } else {
      fprintf(f, " node %u", s->node);
      if (plan->node_names[s->node]) {
        fputc(' ', f);
        put_name(f, plan->node_names[s->node]);
      }
      put_not_fused(f, plan, s, next_on_comm(plan, s), "; ");
    }
    fputs(" after", f);
    if (!s->n_deps) fputs(" -", f);
    for (uint32_t e = 0; e < s->n_deps; e++) fprintf(f, " %u", s->deps[e]);
    /* device plans: the unit it is captured in (units are numbered in capture
     * order; a unit of several steps is one group) */
    if (device) fprintf(f, " unit %u", s->unit);
    /* measured and tuned times where the plan has them, after a bucket's
     * bytes (plans without them print as they always did) */
    if (timed && s->kind == CG_STEP_COLLECTIVE && s->bucket != CG_NO_STEP)
      fprintf(f, "; %zu bytes", plan->buckets[s->bucket].bytes);
    put_times(f, plan, i, "; ");
    fputc('\n', f);
  }
  return finish(f, "cg_plan_dump");
}
