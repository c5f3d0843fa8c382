/* cg_plan_trace and cg_profile_write_trace (sched/plan/plan_trace.c) on
 * plans of host functions, which run without a communicator: the file is
 * JSON (parsed here by a strict parser of its own, and by Python in the
 * CTest unit.test_plan_trace.json), has one complete event per step on the
 * step's lane with dur >= 0, a dependent host function starts after its
 * predecessor ends, names with quotes, control characters and bytes that are
 * not UTF-8 come back as they should, "%r" becomes the rank, bad arguments
 * fail and change nothing, and the dump and DOT (sched/plan/plan_dot.c) show
 * measured times after cg_plan_trace and not before.
 *
 * `test_plan_trace --write FILE` writes the trace of a sample plan and exits
 * (for the Python check). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan_internal.h"
#include "plan_trace.h"
#include "test_support.h"
#include "trace_json.h"

/* ---- plans of host functions */

static char tmpdir[64];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/cg_trace_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

typedef struct work {
  double seconds;
} work_t;

static void busy(void *arg) {
  const work_t *w = arg;
  if (w->seconds > 0) cg_test_nap(w->seconds);
}

/* Names and what a trace must say for them: JSON escapes, control
 * characters, UTF-8 kept, bytes that are not UTF-8 as U+FFFD. */
static const char *const names[][2] = {
    {"grad.0", "grad.0"},
    {"odd \"quoted\" \\ name", "odd \"quoted\" \\ name"},
    {"caf\xc3\xa9 {1} \xf0\x9f\x9a\x80", "caf\xc3\xa9 {1} \xf0\x9f\x9a\x80"},
    {"tab\there\nnewline\x01\x1f\x7f", "tab\there\nnewline\x01\x1f\x7f"},
    {"bad \xff byte \xc3", "bad \xef\xbf\xbd byte \xef\xbf\xbd"},
    {"surrogate \xed\xa0\x80 overlong \xc0\xaf", "surrogate \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd overlong "
                                                  "\xef\xbf\xbd\xef\xbf\xbd"},
    {"a<b>&c %r %d", "a<b>&c %r %d"},
};
#define N_NAMES (sizeof names / sizeof names[0])

enum { MAX_NODES = 40 };

typedef struct sample {
  cg_graph_t *g;
  cg_plan_t *plan;
  uint32_t n;
  int32_t cells[MAX_NODES];
  work_t work[MAX_NODES];
  int name_of[MAX_NODES]; /* index into names, -1: unnamed */
} sample_t;

/* A random DAG of host functions: each writes its cell and reads a few
 * earlier ones (hazard edges), some take a little time, some are named. */
static void sample_make(sample_t *s, uint32_t n, double max_seconds) {
  memset(s, 0, sizeof *s);
  s->n = n;
  ck_assert_cg_ok(cg_graph_create(&s->g, NULL));
  for (uint32_t v = 0; v < n; v++) {
    cg_range_t reads[3], writes[1] = {{&s->cells[v], sizeof(int32_t)}};
    size_t n_reads = 0;
    for (int k = 0; k < 3 && v; k++)
      if (cg_test_below(2)) reads[n_reads++] = (cg_range_t){&s->cells[cg_test_below(v)], sizeof(int32_t)};
    cg_access_t access = CG_ACCESS_INIT;
    access.everything = 0, access.reads = reads, access.n_reads = n_reads, access.writes = writes, access.n_writes = 1;
    s->work[v].seconds = cg_test_below(3) == 0 ? max_seconds * (double)cg_test_below(1000) / 1000.0 : 0;
    cg_node_t node;
    ck_assert_cg_ok(cg_host_func(&node, s->g, busy, &s->work[v], &access));
    s->name_of[v] = cg_test_below(4) ? (int)cg_test_below(N_NAMES) : -1;
    if (s->name_of[v] >= 0) ck_assert_cg_ok(cg_node_name(s->g, node, names[s->name_of[v]][0]));
  }
  ck_assert_cg_ok(cg_compile(&s->plan, s->g, NULL));
}

static void sample_free(sample_t *s) {
  cg_plan_destroy(s->plan);
  cg_graph_destroy(s->g);
}

/* Rounding: ts and dur are printed to the ns each. */
#define EPS_US 0.002

/* Random DAGs: the file parses, one event per step, names as written, and
 * every step starts after the steps it depends on end. */
START_TEST(trace__random_host_plans_give_one_ordered_event_per_step) {
  cg_test_reseed(2201);
  make_tmpdir();
  for (int round = 0; round < 12; round++) {
    sample_t s;
    sample_make(&s, 1 + (uint32_t)cg_test_below(MAX_NODES), 200e-6);
    char path[128];
    snprintf(path, sizeof path, "%s/r%d.json", tmpdir, round);
    cg_trace_opts_t o = CG_TRACE_OPTS_INIT;
    o.replays = 1 + (int)cg_test_below(7);
    ck_assert_ptr_null(s.plan->measured);
    ck_assert_cg_ok(cg_plan_trace(s.plan, path, &o));
    ck_assert_ptr_nonnull(s.plan->measured);
    ck_assert_uint_eq(s.plan->measured->n_steps, s.plan->n_steps);
    trace_t t;
    read_trace(&t, path, s.plan, 0);
    for (uint32_t i = 0; i < s.plan->n_steps; i++) {
      const cg_step_t *st = &s.plan->steps[i];
      ck_assert_str_eq(t.cat[i], "host");
      int which = s.name_of[st->node];
      ck_assert_str_eq(t.name[i], which >= 0 ? names[which][1] : "host_func");
      if (which >= 0) ck_assert_str_eq(str(t.args[i], "node_name"), names[which][1]);
      for (uint32_t e = 0; e < st->n_deps; e++) {
        uint32_t d = st->deps[e];
        ck_assert_msg(t.ts[i] + EPS_US >= t.ts[d] + t.dur[d],
                      "round %d: step %u starts at %.3f us, before step %u it depends on ends (%.3f + %.3f)", round,
                      i, t.ts[i], d, t.ts[d], t.dur[d]);
      }
      /* the trace shows what the plan keeps */
      ck_assert_msg(t.ts[i] <= s.plan->measured->start_us[i] + EPS_US &&
                        t.ts[i] + EPS_US >= s.plan->measured->start_us[i],
                    "step %u: trace %.3f, plan %.3f", i, t.ts[i], s.plan->measured->start_us[i]);
    }
    trace_free(&t);
    sample_free(&s);
  }
  remove_tmpdir();
}
END_TEST

/* A chain of three host functions with a nap in the first: the second starts
 * after the first ends, the nap shows in the first's duration. */
START_TEST(trace__dependent_host_function_follows_its_predecessor) {
  cg_test_reseed(2202);
  make_tmpdir();
  int32_t x = 0, y = 0, z = 0;
  double nap = (1 + (double)cg_test_below(3)) * 1e-3;
  work_t slow = {nap}, quick = {0};
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  cg_range_t rx = {&x, sizeof x}, ry = {&y, sizeof y}, rz = {&z, sizeof z};
  cg_access_t a = CG_ACCESS_INIT;
  a.everything = 0, a.writes = &rx, a.n_writes = 1;
  cg_node_t first, second, third;
  ck_assert_cg_ok(cg_host_func(&first, g, busy, &slow, &a));
  a.reads = &rx, a.n_reads = 1, a.writes = &ry;
  ck_assert_cg_ok(cg_host_func(&second, g, busy, &quick, &a));
  a.reads = &ry, a.writes = &rz;
  ck_assert_cg_ok(cg_host_func(&third, g, busy, &quick, &a));
  ck_assert_cg_ok(cg_node_name(g, first, "forward"));
  ck_assert_cg_ok(cg_node_name(g, second, "backward"));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  char path[128];
  snprintf(path, sizeof path, "%s/chain.json", tmpdir);
  ck_assert_cg_ok(cg_plan_trace(plan, path, NULL));
  trace_t t;
  read_trace(&t, path, plan, 0);
  uint32_t s1 = plan->nodes[first.index].step, s2 = plan->nodes[second.index].step,
           s3 = plan->nodes[third.index].step;
  ck_assert_str_eq(t.name[s1], "forward");
  ck_assert_str_eq(t.name[s2], "backward");
  ck_assert_str_eq(t.name[s3], "host_func");
  ck_assert_msg(t.dur[s1] >= nap * 1e6 * 0.9, "the %.0f us nap took %.3f us", nap * 1e6, t.dur[s1]);
  ck_assert_msg(t.ts[s2] + EPS_US >= t.ts[s1] + t.dur[s1], "second at %.3f, first %.3f + %.3f", t.ts[s2], t.ts[s1],
                t.dur[s1]);
  ck_assert_msg(t.ts[s3] + EPS_US >= t.ts[s2] + t.dur[s2], "third at %.3f, second %.3f + %.3f", t.ts[s3], t.ts[s2],
                t.dur[s2]);
  /* the process and the host lane are named */
  const jv_t *events = get(&t.doc, "traceEvents");
  int host_lane = 0, process = 0;
  for (size_t e = 0; e < events->n; e++) {
    const jv_t *ev = &events->items[e];
    if (strcmp(str(ev, "name"), "thread_name") == 0) host_lane |= strcmp(str(get(ev, "args"), "name"), "host") == 0;
    if (strcmp(str(ev, "name"), "process_name") == 0)
      process |= strncmp(str(get(ev, "args"), "name"), "rank 0", 6) == 0;
  }
  ck_assert_msg(host_lane && process, "lane 'host' named %d, process 'rank 0' named %d", host_lane, process);
  trace_free(&t);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  remove_tmpdir();
}
END_TEST

/* "%r" becomes the rank (0 without a communicator) wherever it is, as often
 * as it is; other '%' stay. A path without it is used as given. */
START_TEST(trace__rank_in_path) {
  cg_test_reseed(2203);
  make_tmpdir();
  sample_t s;
  sample_make(&s, 1 + (uint32_t)cg_test_below(8), 0);
  const char *patterns[][2] = {{"t.%r.json", "t.0.json"},
                               {"%r", "0"},
                               {"%r%r-%d%%r.json", "00-%d%0.json"},
                               {"plain.json", "plain.json"},
                               {"r%.json", "r%.json"}};
  for (size_t k = 0; k < sizeof patterns / sizeof patterns[0]; k++) {
    char path[256], want[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, patterns[k][0]);
    snprintf(want, sizeof want, "%s/%s", tmpdir, patterns[k][1]);
    unlink(want);
    ck_assert_cg_ok(cg_plan_trace(s.plan, path, NULL));
    ck_assert_msg(access(want, R_OK) == 0, "'%s' did not write '%s'", patterns[k][0], patterns[k][1]);
    trace_t t;
    read_trace(&t, want, s.plan, 0);
    trace_free(&t);
    if (strstr(patterns[k][0], "%r")) ck_assert_msg(access(path, F_OK) != 0, "'%s' written as given", path);
  }
  sample_free(&s);
  remove_tmpdir();
}
END_TEST

/* Bad arguments: the documented status, a detail naming the function, and
 * the plan's measurement unchanged. */
START_TEST(trace__bad_arguments_change_nothing) {
  cg_test_reseed(2204);
  make_tmpdir();
  sample_t s;
  sample_make(&s, 1 + (uint32_t)cg_test_below(8), 0);
  char path[256];
  snprintf(path, sizeof path, "%s/ok.json", tmpdir);
  cg_trace_opts_t o = CG_TRACE_OPTS_INIT;
  ck_assert_uint_eq(o.size, sizeof(cg_trace_opts_t));
  ck_assert_int_eq(o.replays, 5);
  ck_assert_ptr_null(o.stream);
#define BAD(call, status)                                                                             \
  do {                                                                                                \
    const cg_profile_t *before = s.plan->measured;                                                    \
    ck_assert_cg_status(call, status);                                                                \
    ck_assert_msg(strstr(cg_error_last(), "cg_plan_trace") != NULL, "detail: %s", cg_error_last());   \
    ck_assert_msg(s.plan->measured == before, "%s changed the plan's measurement", #call);             \
  } while (0)
  for (int measured = 0; measured < 2; measured++) {
    BAD(cg_plan_trace(NULL, path, NULL), CG_ERR_INVALID_ARGUMENT);
    o.size = sizeof o - 1 - cg_test_below(sizeof o - 1);
    BAD(cg_plan_trace(s.plan, path, &o), CG_ERR_INVALID_ARGUMENT);
    o = (cg_trace_opts_t)CG_TRACE_OPTS_INIT;
    o.replays = -(int)cg_test_below(5);
    BAD(cg_plan_trace(s.plan, path, &o), CG_ERR_INVALID_ARGUMENT);
    o.replays = 1001 + (int)cg_test_below(100000);
    BAD(cg_plan_trace(s.plan, path, &o), CG_ERR_INVALID_ARGUMENT);
    o = (cg_trace_opts_t)CG_TRACE_OPTS_INIT;
    BAD(cg_plan_trace(s.plan, "", &o), CG_ERR_INVALID_ARGUMENT);
    /* a folder that does not exist: measured, not written, not kept */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no/such/folder/t.%%r.json", tmpdir);
    o.replays = 1;
    BAD(cg_plan_trace(s.plan, missing, &o), CG_ERR_IO);
    ck_assert_msg(strstr(cg_error_last(), "no/such/folder/t.0.json"), "detail: %s", cg_error_last());
    /* the first round has nothing measured; the second something to keep */
    ck_assert_cg_ok(cg_plan_trace(s.plan, NULL, &o));
    ck_assert_ptr_nonnull(s.plan->measured);
  }
  /* the internal writer checks its profile */
  cg_profile_t wrong = {NULL, NULL, s.plan->n_steps + 1};
  ck_assert_cg_status(cg_profile_write_trace(s.plan, &wrong, path, "here"), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_profile_write_trace(s.plan, s.plan->measured, NULL, "here"), CG_ERR_INVALID_ARGUMENT);
  sample_free(&s);

  /* offline communicators compile, they do not run: nothing to profile */
  cg_comm_t *off;
  cg_graph_t *g;
  cg_plan_t *plan;
  int32_t buf[4] = {0};
  ck_assert_cg_ok(cg_comm_create_offline(&off, 0, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, off, buf, buf, 4, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_cg_status(cg_plan_trace(plan, path, NULL), CG_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(cg_error_last(), "cg_plan_trace"), "detail: %s", cg_error_last());
  ck_assert_ptr_null(plan->measured);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(off);
  remove_tmpdir();
}
END_TEST

static size_t count_of(const char *text, const char *what) {
  size_t n = 0;
  for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

/* Before cg_plan_trace the dump and DOT say nothing of times; after it every
 * step says its measured duration and start, the dump still one line per
 * step; another trace replaces the measurement. */
START_TEST(trace__dump_and_dot_show_measured_times_after_trace) {
  cg_test_reseed(2205);
  make_tmpdir();
  sample_t s;
  sample_make(&s, 2 + (uint32_t)cg_test_below(20), 50e-6);
  char *dump0 = cg_test_plan_text(s.plan, 0), *dot0 = cg_test_plan_text(s.plan, 1);
  ck_assert_ptr_null(strstr(dump0, "measured"));
  ck_assert_ptr_null(strstr(dot0, "measured"));
  char path[256];
  snprintf(path, sizeof path, "%s/t.%%r.json", tmpdir);
  cg_trace_opts_t o = CG_TRACE_OPTS_INIT;
  o.replays = 1 + (int)cg_test_below(5);
  ck_assert_cg_ok(cg_plan_trace(s.plan, path, &o));
  char *dump1 = cg_test_plan_text(s.plan, 0), *dot1 = cg_test_plan_text(s.plan, 1);
  ck_assert_uint_eq(count_of(dump1, "; measured "), s.plan->n_steps);
  ck_assert_uint_eq(count_of(dump1, "\n"), count_of(dump0, "\n"));
  ck_assert_uint_eq(count_of(dot1, "\\nmeasured "), s.plan->n_steps);
  /* the text before the times is the dump as it was */
  for (const char *a = dump0, *b = dump1; *a; a = strchr(a, '\n') + 1, b = strchr(b, '\n') + 1) {
    size_t la = (size_t)(strchr(a, '\n') - a);
    ck_assert_msg(strncmp(a, b, la) == 0 && (b[la] == '\n' || b[la] == ';'), "line changed:\n%.*s\n%.*s", (int)la,
                  a, (int)(strchr(b, '\n') - b), b);
  }
  /* each step's numbers are the plan's measurement */
  for (uint32_t i = 0; i < s.plan->n_steps; i++) {
    char want[128], line[64];
    ck_assert(cg_plan_measured_text(want, sizeof want, s.plan, i));
    snprintf(line, sizeof line, "step %u lane", i);
    const char *at = strstr(dump1, line);
    ck_assert_ptr_nonnull(at);
    const char *found = strstr(at, want);
    ck_assert_msg(found && found < strchr(at, '\n'), "step %u: no '%s' in its line", i, want);
  }
  const cg_profile_t *first = s.plan->measured;
  ck_assert_cg_ok(cg_plan_trace(s.plan, NULL, &o));
  ck_assert_ptr_nonnull(s.plan->measured);
  ck_assert_uint_eq(s.plan->measured->n_steps, s.plan->n_steps);
  (void)first; /* replaced (freed): the pointer may be reused */
  free(dump0), free(dot0), free(dump1), free(dot1);
  sample_free(&s);
  remove_tmpdir();
}
END_TEST

/* An empty plan: a valid trace with no step events. */
START_TEST(trace__empty_plan) {
  make_tmpdir();
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  char path[256];
  snprintf(path, sizeof path, "%s/empty.json", tmpdir);
  ck_assert_cg_ok(cg_plan_trace(plan, path, NULL));
  trace_t t;
  read_trace(&t, path, plan, 0);
  trace_free(&t);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  remove_tmpdir();
}
END_TEST

/* For the CTest that reads the file with Python (main's --write): a sample
 * plan's trace, every name in it. */
static const char *write_path;

START_TEST(trace__write_sample) {
  cg_test_reseed(2206);
  sample_t s;
  sample_make(&s, MAX_NODES, 20e-6);
  for (uint32_t v = 0; v < N_NAMES; v++) ck_assert_cg_ok(cg_node_name(s.g, (cg_node_t){s.g->serial, v}, names[v][0]));
  cg_plan_destroy(s.plan);
  ck_assert_cg_ok(cg_compile(&s.plan, s.g, NULL));
  ck_assert_cg_ok(cg_plan_trace(s.plan, write_path, NULL));
  sample_free(&s);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("plan_trace");
  TCase *tc = tcase_create("trace");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, trace__random_host_plans_give_one_ordered_event_per_step);
  tcase_add_test(tc, trace__dependent_host_function_follows_its_predecessor);
  tcase_add_test(tc, trace__rank_in_path);
  tcase_add_test(tc, trace__bad_arguments_change_nothing);
  tcase_add_test(tc, trace__dump_and_dot_show_measured_times_after_trace);
  tcase_add_test(tc, trace__empty_plan);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write") == 0) {
    write_path = argv[2];
    Suite *s = suite_create("plan_trace_write");
    TCase *tc = tcase_create("write");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, trace__write_sample);
    suite_add_tcase(s, tc);
    return cg_test_main(s);
  }
  return cg_test_main(suite());
}
