/* cg_plan_trace: profiling replays of a plan, kept in the plan (its dump and
 * DOT then show them) and written as a Chrome trace, the JSON that Perfetto
 * (ui.perfetto.dev) and chrome://tracing open: {"traceEvents": [...]} with
 * metadata events naming the process (this rank) and its threads (the plan's
 * lanes), and one complete event ("ph": "X") per step. */
#include "plan_trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "executor.h"
#include "text.h"

#define WHERE "cg_plan_trace"

int cg_plan_trace_rank(const cg_plan_t *plan) {
  return plan->n_comms && plan->comms[0].comm ? plan->comms[0].comm->rank : 0;
}

/* ---- JSON */

/* The length of the valid UTF-8 sequence at p (at most n bytes), 0 if none. */
static size_t utf8_length(const unsigned char *p, size_t n) {
  size_t len;
  uint32_t cp;
  if (p[0] < 0x80) return 1;
  if (p[0] >= 0xc2 && p[0] <= 0xdf) len = 2, cp = p[0] & 0x1fu;
  else if (p[0] >= 0xe0 && p[0] <= 0xef) len = 3, cp = p[0] & 0x0fu;
  else if (p[0] >= 0xf0 && p[0] <= 0xf4) len = 4, cp = p[0] & 0x07u;
  else return 0;
  if (len > n) return 0;
  for (size_t k = 1; k < len; k++) {
    if ((p[k] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[k] & 0x3fu);
  }
  /* overlong forms, surrogates, past U+10FFFF */
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

/* A JSON string: quotes, backslashes and control characters escaped, bytes
 * that are not UTF-8 written as U+FFFD, so any name gives valid JSON. */
static void put_string(FILE *f, const char *text) {
  const unsigned char *p = (const unsigned char *)text;
  size_t n = strlen(text);
  fputc('"', f);
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    size_t len = utf8_length(p + i, n - i);
    if (c == '"' || c == '\\') {
      fputc('\\', f), fputc(c, f);
    } else if (c == '\n') {
      fputs("\\n", f);
    } else if (c == '\t') {
      fputs("\\t", f);
    } else if (c < 0x20 || c == 0x7f) {
      fprintf(f, "\\u%04x", c);
    } else if (!len) {
      fputs("\\ufffd", f);
      i++;
      continue;
    } else {
      fwrite(p + i, 1, len, f);
      i += len;
      continue;
    }
    i++;
  }
  fputc('"', f);
}

/* A time in us: finite, three decimals (ns). */
/* JSON's '.', whatever the program's locale */
static void put_us(FILE *f, double us) {
  char text[400];
  cg_text_format_double(text, sizeof text, isfinite(us) ? us : 0.0, 3, 1);
  fputs(text, f);
}

/* ---- what the events say */

static const char *category(const cg_step_t *s) {
  switch (s->kind) {
  case CG_STEP_COLLECTIVE:
    return "communication";
  case CG_STEP_PACK:
  case CG_STEP_UNPACK:
    return "copy";
  case CG_STEP_HOST_FUNC:
    return "host";
  case CG_STEP_CUDA_NODE:
    return "compute";
  }
  return "?";
}

/* "grad.3", "allreduce", "bucket 2: allreduce of 5 nodes", "pack bucket 2" */
static void put_event_name(FILE *f, const cg_plan_t *plan, const cg_step_t *s) {
  char text[128];
  if (s->bucket != CG_NO_STEP) {
    const cg_bucket_t *b = &plan->buckets[s->bucket];
    if (s->kind == CG_STEP_COLLECTIVE)
      snprintf(text, sizeof text, "bucket %u: %s of %u nodes", s->bucket, cg_node_kind_name(s->op_kind), b->n_members);
    else
      snprintf(text, sizeof text, "%s bucket %u", s->kind == CG_STEP_PACK ? "pack" : "unpack", s->bucket);
    put_string(f, text);
    return;
  }
  const char *name = s->node < plan->n_names ? plan->node_names[s->node] : NULL;
  put_string(f, name ? name : cg_node_kind_name(s->op_kind));
}

static void put_lane_name(FILE *f, const cg_plan_t *plan, uint32_t lane) {
  const cg_lane_t *ln = &plan->lanes[lane];
  char text[256];
  if (ln->kind == CG_LANE_HOST) {
    snprintf(text, sizeof text, "host");
  } else if (ln->kind == CG_LANE_COMPUTE) {
    uint32_t first = lane;
    while (first > 0 && plan->lanes[first - 1].kind == CG_LANE_COMPUTE) first--;
    snprintf(text, sizeof text, "compute %u", lane - first);
  } else {
    const cg_comm_t *c = plan->comms[ln->comm_index].comm;
    const char *what = ln->kind == CG_LANE_PACK ? "pack: " : ln->kind == CG_LANE_UNPACK ? "unpack: " : "";
    int chained = cg_plan_lane_runs_cuda_nodes(plan, lane);
    snprintf(text, sizeof text, "%scomm %u (%s, rank %d of %d)%s", what, ln->comm_index, c->ops->backend_name,
             c->rank, c->size, chained ? " + chained GPU work" : "");
  }
  put_string(f, text);
}

static void put_metadata(FILE *f, const cg_plan_t *plan, int pid) {
  char text[400];
  snprintf(text, sizeof text, "rank %d%s%s%s", pid, plan->name ? ": plan '" : "", plan->name ? plan->name : "",
           plan->name ? "'" : "");
  fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": ", pid);
  put_string(f, text);
  fputs("}},\n", f);
  fprintf(f, "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
          "\"args\": {\"sort_index\": %d}},\n", pid, pid);
  for (uint32_t lane = 0; lane < plan->n_lanes; lane++) {
    fprintf(f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %u, \"args\": {\"name\": ", pid, lane);
    put_lane_name(f, plan, lane);
    fputs("}},\n", f);
    fprintf(f, "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %u, "
            "\"args\": {\"sort_index\": %u}},\n", pid, lane, lane);
  }
}

static void put_step_args(FILE *f, const cg_plan_t *plan, uint32_t i) {
  const cg_step_t *s = &plan->steps[i];
  fprintf(f, "{\"step\": %u, \"node\": %u, \"kind\": ", i, s->node);
  put_string(f, s->kind == CG_STEP_PACK     ? "pack"
                : s->kind == CG_STEP_UNPACK ? "unpack"
                                            : cg_node_kind_name(s->op_kind));
  if (s->bucket == CG_NO_STEP && s->node < plan->n_names && plan->node_names[s->node]) { /* a bucket's: members */
    fputs(", \"node_name\": ", f);
    put_string(f, plan->node_names[s->node]);
  }
  fprintf(f, ", \"bytes\": %zu", cg_plan_step_bytes(plan, i));
  if (s->kind == CG_STEP_COLLECTIVE) {
    fprintf(f, ", \"comm\": %u, \"position\": %u", s->comm_index, s->comm_position);
    if (s->op_kind != CG_NODE_BARRIER) {
      fprintf(f, ", \"count\": %zu, \"dtype\": ", s->count);
      put_string(f, cg_dtype_name(s->dtype));
    }
    if (cg_kind_has_op(s->op_kind)) {
      fputs(", \"op\": ", f);
      put_string(f, cg_redop_name(s->op));
    }
    if (cg_kind_has_root(s->op_kind)) fprintf(f, ", \"root\": %d", s->root);
    if (cg_kind_is_p2p(s->op_kind)) fprintf(f, ", \"peer\": %d", s->root);
  }
  double ready;
  if (cg_plan_ready_us(&ready, plan, i)) {
    fputs(", \"ready_us\": ", f);
    put_us(f, ready);
  }
  fputs(", \"after\": [", f);
  for (uint32_t e = 0; e < s->n_deps; e++) fprintf(f, "%s%u", e ? ", " : "", s->deps[e]);
  fputc(']', f);
  if (s->bucket != CG_NO_STEP) {
    const cg_bucket_t *b = &plan->buckets[s->bucket];
    fprintf(f, ", \"bucket\": %u, \"bucket_bytes\": %zu, \"members\": [", s->bucket, b->bytes);
    for (uint32_t m = 0; m < b->n_members; m++) {
      uint32_t v = b->members[m];
      fprintf(f, "%s{\"node\": %u, \"name\": ", m ? ", " : "", v);
      if (plan->node_names[v])
        put_string(f, plan->node_names[v]);
      else
        fputs("null", f);
      fprintf(f, ", \"bytes\": %zu}", cg_plan_node_bytes(plan, v));
    }
    fputc(']', f);
  }
  fputc('}', f);
}

static void put_trace(FILE *f, const cg_plan_t *plan, const cg_profile_t *prof, int pid) {
  fputs("{\"displayTimeUnit\": \"ns\",\n\"otherData\": {\"producer\": \"commgraph cg_plan_trace\", \"plan\": ", f);
  if (plan->name)
    put_string(f, plan->name);
  else
    fputs("null", f);
  fprintf(f, ", \"rank\": %d, \"steps\": %u, \"lanes\": %u},\n\"traceEvents\": [\n", pid, plan->n_steps,
          plan->n_lanes);
  put_metadata(f, plan, pid);
  for (uint32_t i = 0; i < plan->n_steps; i++) {
    const cg_step_t *s = &plan->steps[i];
    double start = isfinite(prof->start_us[i]) ? prof->start_us[i] : 0.0;
    double dur = prof->end_us[i] - start;
    if (!(dur > 0)) dur = 0; /* a median end before the median start, or not finite */
    fputs("{\"name\": ", f);
    put_event_name(f, plan, s);
    fputs(", \"cat\": ", f);
    put_string(f, category(s));
    fprintf(f, ", \"ph\": \"X\", \"pid\": %d, \"tid\": %u, \"ts\": ", pid, s->lane);
    put_us(f, start);
    fputs(", \"dur\": ", f);
    put_us(f, dur);
    fputs(", \"args\": ", f);
    put_step_args(f, plan, i);
    fprintf(f, "}%s\n", i + 1 < plan->n_steps ? "," : "");
  }
  /* the metadata events end with commas: close with an empty-args event
   * only when no step follows them */
  if (!plan->n_steps)
    fprintf(f, "{\"name\": \"plan\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {}}\n", pid);
  fputs("]}\n", f);
}

/* `path` with every "%r" replaced by the rank (malloc'ed). */
static char *expand_path(const char *path, int rank) {
  char digits[16];
  int nd = snprintf(digits, sizeof digits, "%d", rank);
  size_t n = 0, len = strlen(path);
  for (const char *p = strstr(path, "%r"); p; p = strstr(p + 2, "%r")) n++;
  char *out = malloc(len + n * (size_t)nd + 1), *o = out;
  if (!out) return NULL;
  for (const char *p = path; *p;) {
    if (p[0] == '%' && p[1] == 'r') {
      memcpy(o, digits, (size_t)nd);
      o += nd, p += 2;
    } else {
      *o++ = *p++;
    }
  }
  *o = '\0';
  return out;
}

cg_status_t cg_profile_write_trace(const cg_plan_t *plan, const cg_profile_t *prof, const char *path,
                                   const char *where) {
  if (!plan || !prof || !path || !where)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: NULL %s", where ? where : "cg_profile_write_trace",
                   !plan ? "plan" : !prof ? "profile" : !path ? "path" : "where");
  if (!*path) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: empty trace path", where);
  if (prof->n_steps != plan->n_steps)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: the profile has %u steps, the plan %u", where, prof->n_steps,
                   plan->n_steps);
  int rank = cg_plan_trace_rank(plan);
  char *file_name = expand_path(path, rank);
  if (!file_name) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the trace path", where);
  FILE *f = fopen(file_name, "w");
  if (!f) {
    cg_status_t st = cg_fail(CG_ERR_IO, "%s: cannot open '%s' for the trace: %s", where, file_name, strerror(errno));
    free(file_name);
    return st;
  }
  put_trace(f, plan, prof, rank);
  int failed = ferror(f) != 0;
  failed |= fclose(f) != 0;
  cg_status_t st = failed ? cg_fail(CG_ERR_IO, "%s: writing the trace to '%s' failed", where, file_name) : CG_SUCCESS;
  free(file_name);
  return st;
}

cg_status_t cg_plan_trace(cg_plan_t *plan, const char *path, const cg_trace_opts_t *opts) {
  static const cg_trace_opts_t defaults = CG_TRACE_OPTS_INIT;
  cg_status_t st;
  if (!plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": NULL plan");
  if (!opts) opts = &defaults;
  if ((st = cg_check_opts_size(opts->size, sizeof(cg_trace_opts_t), WHERE, "opts")) != CG_SUCCESS) return st;
  if (opts->replays < 1 || opts->replays > 1000)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": replays is %d, not 1 to 1000", opts->replays);
  if (path && !*path) return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": empty path (NULL: measure only)");
  if (!plan->exec || !plan->exec->profile)
    return cg_fail(CG_ERR_UNSUPPORTED, WHERE ": the %s executor cannot profile a plan",
                   plan->exec ? plan->exec->name : "plan's");
  cg_profile_t *prof = calloc(1, sizeof *prof);
  if (!prof) return cg_fail(CG_ERR_NO_MEMORY, WHERE ": allocating the profile");
  /* collective like any replay */
  st = plan->exec->profile(prof, plan, opts->replays, opts->stream, WHERE);
  if (st != CG_SUCCESS && strncmp(cg_error_last(), WHERE, strlen(WHERE)) != 0) {
    char detail[2048];
    snprintf(detail, sizeof detail, "%s", cg_error_last());
    cg_fail(st, WHERE ": profiling replays: %s", detail);
  }
  /* the trace first: a failed write leaves the plan's older measurement */
  if (st == CG_SUCCESS && path) st = cg_profile_write_trace(plan, prof, path, WHERE);
  if (st != CG_SUCCESS) {
    cg_profile_free(prof);
    free(prof);
    return st;
  }
  if (plan->measured) cg_profile_free(plan->measured);
  free(plan->measured);
  plan->measured = prof;
  return CG_SUCCESS;
}
