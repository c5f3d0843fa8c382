/* The plan drawn (DOT) and dumped (text). */
#include <stdio.h>

#include "backend.h"
#include "dot_text.h"
#include "error.h"
#include "plan_internal.h"

/* "allreduce 1024 x float32 sum", "send 10 x int32 to 3", "host_func" */
static void put_shape(FILE *f, const cg_step_t *s, const char *newline) {
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

static void put_step(FILE *f, const cg_plan_t *plan, uint32_t i) {
  const cg_step_t *s = &plan->steps[i];
  const cg_backend_t *b = s->comm ? s->comm->ops->backend : NULL;
  fprintf(f, "    s%u [shape=%s, label=\"step %u", i, s->kind == CG_STEP_HOST_FUNC ? "component" : "box", i);
  if (s->kind == CG_STEP_COLLECTIVE) fprintf(f, " (#%u on comm)", s->comm_position);
  fputs("\\n", f);
  if (b && b->step_call) {
    cg_dot_put_escaped(f, b->step_call(s));
    fputs("\\n", f);
  }
  put_shape(f, s, "\\n");
  fprintf(f, "\\nfrom node #%u", s->node);
  if (plan->node_names[i]) {
    fputs(" ", f);
    cg_dot_put_escaped(f, plan->node_names[i]);
  }
  fputs("\"];\n", f);
}

cg_status_t cg_plan_write_dot(const cg_plan_t *plan, FILE *f) {
  if (!plan || !f) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_write_dot: NULL %s", plan ? "file" : "plan");
  fputs("digraph plan {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n", f);
  /* large plans: straight edges and a bounded crossing search keep Graphviz
   * fast, as for recorded graphs */
  if (plan->n_steps > 64) fputs("  splines=line;\n  nslimit=1;\n  mclimit=0.1;\n", f);
  int device = plan->device != CG_DEVICE_HOST;
  if (plan->name || device) {
    fputs("  label=\"", f);
    if (plan->name) {
      fputs("plan ", f);
      cg_dot_put_escaped(f, plan->name);
    }
    if (device)
      fprintf(f, "%sone CUDA graph on device %d: a lane is a stream, dashed edges are events between streams",
              plan->name ? "\\n" : "", plan->device);
    fputs("\";\n", f);
  }
  for (uint32_t lane = 0; lane < plan->n_lanes; lane++) {
    fprintf(f, "  subgraph cluster_lane%u {\n    style=rounded; color=gray60;\n", lane);
    if (lane < plan->n_comms) {
      const cg_comm_t *c = plan->comms[lane].comm;
      fprintf(f, "    label=\"lane %u%s: comm %llu (%s, rank %d of %d)\";\n", lane, device ? " (stream)" : "",
              (unsigned long long)c->serial, c->ops->backend_name, c->rank, c->size);
    } else {
      fprintf(f, "    label=\"lane %u%s: host functions\";\n", lane, device ? " (stream, CUDA host nodes)" : "");
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
  if (device) fprintf(f, ", device plan: %u issue units", plan->n_units);
  fputc('\n', f);
  for (uint32_t i = 0; i < plan->n_steps; i++) {
    const cg_step_t *s = &plan->steps[i];
    fprintf(f, "step %u lane %u ", i, s->lane);
    if (s->kind == CG_STEP_COLLECTIVE)
      fprintf(f, "comm %u #%u group %u ", s->comm_index, s->comm_position, s->group);
    put_shape(f, s, " ");
    fprintf(f, " node %u", s->node);
    if (plan->node_names[i]) {
      fputc(' ', f);
      put_name(f, plan->node_names[i]);
    }
    fputs(" after", f);
    if (!s->n_deps) fputs(" -", f);
    for (uint32_t e = 0; e < s->n_deps; e++) fprintf(f, " %u", s->deps[e]);
    /* device plans: the unit it is captured in (units are numbered in capture
     * order; a unit of several steps is one group) */
    if (device) fprintf(f, " unit %u", s->unit);
    fputc('\n', f);
  }
  return finish(f, "cg_plan_dump");
}
