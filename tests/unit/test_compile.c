/* cg_compile over offline communicators: the lowered plan (sched/compile/compile.c)
 * read field by field and compared with the recorded graph, its text dump and
 * DOT drawing (sched/plan/plan_dot.c), the refusal to run offline plans, and the host
 * executor (sched/exec/host_exec.c) on plans made only of host functions, which run
 * without any communicator. The random programs and the comparison of a plan with
 * its graph are in compile_programs.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile_programs.h"
#include "graph_view.h"
#include "plan_internal.h"
#include "test_support.h"

#ifndef CG_DOT_EXECUTABLE
#define CG_DOT_EXECUTABLE ""
#endif

/* Without fusion: one step per node (test_fusion covers buckets). */
static cg_plan_t *compile(cg_graph_t *g) {
  cg_plan_t *plan = NULL;
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.fusion = 0;
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  ck_assert_ptr_nonnull(plan);
  return plan;
}

START_TEST(compile__random_graphs_lower_faithfully) {
  cg_test_reseed(201);
  static unsigned char arena[ARENA];
  for (int round = 0; round < 300; round++) {
    sample_t s;
    compile_sample_make(&s, 1 + (uint32_t)cg_test_below(round % 10 ? 60 : 250), 1 + (int)cg_test_below(MAX_COMMS),
                        (int)cg_test_below(3) * 20, arena, NULL, NULL);
    cg_plan_t *plan = compile(s.g);
    compile_check_plan(s.g, plan);
    cg_plan_destroy(plan);
    compile_sample_free(&s);
  }
}
END_TEST

/* Record order differs from the topological order: the steps follow the
 * latter, and so do the communicator positions of sends in one group. */
START_TEST(compile__steps_follow_topo_order) {
  cg_comm_t *comm;
  cg_graph_t *g;
  static unsigned char buf[64];
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 0, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int i = 0; i < 5; i++) ck_assert_cg_ok(cg_send(NULL, g, comm, buf + 8 * i, 8, CG_UINT8, 1));
  ck_assert_cg_ok(cg_depend(g, compile_node(g, 4), compile_node(g, 0)));
  ck_assert_cg_ok(cg_depend(g, compile_node(g, 3), compile_node(g, 1)));
  cg_plan_t *plan = compile(g);
  compile_check_plan(g, plan);
  const uint32_t want[] = {2, 3, 1, 4, 0};
  for (uint32_t s = 0; s < 5; s++) {
    ck_assert_uint_eq(plan->steps[s].node, want[s]);
    ck_assert_uint_eq(plan->steps[s].comm_position, s);
    ck_assert_uint_eq(plan->steps[s].group, 0);
  }
  ck_assert(plan->steps[4].n_deps == 1 && plan->steps[4].deps[0] == 3); /* #0 after #4 */
  ck_assert(plan->steps[3].n_succs == 1 && plan->steps[3].succs[0] == 4);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
}
END_TEST

/* Positions count along each communicator; a send or receive's group is the
 * number of its communicator's collectives recorded before it; lanes follow
 * first use, and host functions get the last lane even when recorded first. */
START_TEST(compile__positions_groups_and_lanes_by_hand) {
  cg_comm_t *c, *d;
  cg_graph_t *g;
  static int32_t buf[8][4];
  cg_access_t nothing = CG_ACCESS_INIT;
  nothing.everything = 0;
  ck_assert_cg_ok(cg_comm_create_offline(&c, 0, 2));
  ck_assert_cg_ok(cg_comm_create_offline(&d, 1, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &nothing));                    /* #0 */
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, buf[0], buf[0], 4, CG_INT32, CG_SUM));          /* #1 */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[1], 4, CG_INT32, 1));                            /* #2 */
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[2], 4, CG_INT32, 1));                            /* #3 */
  ck_assert_cg_ok(cg_send(NULL, g, d, buf[3], 4, CG_INT32, 0));                            /* #4 */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[4], 4, CG_INT32, 1));                            /* #5 */
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, buf[5], buf[6], 4, CG_INT32, CG_MAX));          /* #6 */
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[7], 4, CG_INT32, 1));                            /* #7 */
  ck_assert_cg_ok(cg_barrier(NULL, g, c));                                                 /* #8 */
  cg_plan_t *plan = compile(g);
  compile_check_plan(g, plan);
  /* every edge points forward, so steps are in record order */
  const uint32_t comm_index[] = {CG_NO_LANE, 0, 0, 0, 1, 0, 0, 0, 0};
  const uint32_t position[] = {0, 0, 1, 2, 0, 3, 4, 5, 6}, group[] = {0, 0, 1, 1, 0, 1, 1, 2, 2};
  const uint32_t lane[] = {2, 0, 0, 0, 1, 0, 0, 0, 0};
  for (uint32_t s = 0; s < 9; s++) {
    const cg_step_t *st = &plan->steps[s];
    ck_assert_uint_eq(st->node, s);
    ck_assert_uint_eq(st->comm_index, comm_index[s]);
    ck_assert_uint_eq(st->lane, lane[s]);
    if (s == 0) continue;
    ck_assert_uint_eq(st->comm_position, position[s]);
    ck_assert_uint_eq(st->group, group[s]);
  }
  ck_assert(plan->comms[0].comm == c && plan->comms[1].comm == d && plan->n_lanes == 3);
  /* the second allreduce waits for the group before it, not for the first */
  const cg_step_t *second = &plan->steps[6];
  ck_assert(second->n_deps == 3 && second->deps[0] == 2 && second->deps[1] == 3 && second->deps[2] == 5);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
  cg_comm_destroy(d);
}
END_TEST

/* ---- text: dump and DOT */

static size_t count_of(const char *text, const char *what) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

START_TEST(compile__rejects_bad_arguments_and_changes_nothing) {
  cg_comm_t *c;
  cg_graph_t *g;
  static float buf[4];
  cg_graph_opts_t go = CG_GRAPH_OPTS_INIT;
  go.name = "iteration";
  ck_assert_cg_ok(cg_comm_create_offline(&c, 0, 2));
  ck_assert_cg_ok(cg_graph_create(&g, &go));
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, buf, buf, 4, CG_FLOAT32, CG_SUM));
  static int token;
  cg_plan_t *const sentinel = (cg_plan_t *)(void *)&token, *out = sentinel;
  ck_assert_cg_status(cg_compile(NULL, g, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_compile(&out, NULL, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_eq(out, sentinel);
  const size_t bad_sizes[] = {0, sizeof(cg_compile_opts_t) - 1, sizeof(cg_compile_opts_t) + 8, 1};
  for (int i = 0; i < 4; i++) {
    cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
    o.size = bad_sizes[i];
    ck_assert_cg_status(cg_compile(&out, g, &o), CG_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(out, sentinel);
    ck_assert_ptr_nonnull(strstr(cg_error_last(), "size"));
  }
  /* the graph still compiles; the plan takes the graph's name unless given one */
  cg_plan_t *plan = compile(g);
  char *text = cg_test_plan_text(plan, 0);
  ck_assert_msg(strncmp(text, "plan 'iteration': 1 steps", 25) == 0, "dump starts '%s'", text);
  free(text);
  cg_plan_destroy(plan);
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.check_ranks = 0;
  o.name = "custom \"plan\"";
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  text = cg_test_plan_text(plan, 0);
  ck_assert_msg(strncmp(text, "plan 'custom \"plan\"': ", 22) == 0, "dump starts '%s'", text);
  free(text);
  text = cg_test_plan_text(plan, 1);
  ck_assert_ptr_nonnull(strstr(text, "label=\"plan custom \\\"plan\\\"\""));
  free(text);
  /* every plan function checks for NULL */
  cg_plan_stats_t stats;
  int done;
  ck_assert_cg_status(cg_plan_stats(NULL, plan), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_stats(&stats, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_dump(NULL, stdout), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_dump(plan, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_write_dot(NULL, stdout), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_write_dot(plan, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_run(NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_start(NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_test(NULL, plan), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_test(&done, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_wait(NULL), CG_ERR_INVALID_ARGUMENT);
  cg_plan_destroy(NULL);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
}
END_TEST

START_TEST(compile__empty_graph_gives_empty_plan) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  cg_plan_t *plan = compile(g);
  cg_graph_destroy(g);
  cg_plan_stats_t stats;
  memset(&stats, 0xff, sizeof stats);
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  ck_assert_uint_eq(stats.steps, 0);
  ck_assert_uint_eq(stats.lanes, 0);
  ck_assert_uint_eq(stats.dependencies, 0);
  ck_assert_uint_eq(stats.communicators, 0);
  char *text = cg_test_plan_text(plan, 0);
  ck_assert_str_eq(text, "plan: 0 steps, 0 lanes, 0 communicators, 0 dependencies\n");
  free(text);
  text = cg_test_plan_text(plan, 1);
  ck_assert_uint_eq(count_of(text, "cluster"), 0);
  ck_assert_uint_eq(count_of(text, "->"), 0);
  free(text);
  /* nothing to run: it completes at once */
  int done = 0;
  ck_assert_cg_ok(cg_plan_run(plan));
  ck_assert_cg_ok(cg_plan_start(plan));
  ck_assert_cg_ok(cg_plan_test(&done, plan));
  ck_assert_int_eq(done, 1);
  ck_assert_cg_ok(cg_plan_wait(plan));
  cg_plan_destroy(plan);
}
END_TEST

/* Same program, compiled twice, and recorded again on other communicators of
 * the same ranks over another arena: the same dump, which shows no address. */
START_TEST(compile__same_program_same_dump) {
  cg_test_reseed(202);
  static unsigned char arena1[ARENA], arena2[ARENA];
  for (int round = 0; round < 60; round++) {
    sample_t s1, s2;
    compile_sample_make(&s1, 1 + (uint32_t)cg_test_below(80), 1 + (int)cg_test_below(MAX_COMMS), 25, arena1, NULL,
                        NULL);
    s2.p = s1.p;
    s2.p.ops = NULL; /* shared with s1 */
    for (int c = 0; c < s1.p.n_comms; c++)
      ck_assert_cg_ok(cg_comm_create_offline(&s2.comms[c], s1.p.rank[c], s1.p.size[c]));
    s2.g = compile_record(&s1.p, s2.comms, arena2, NULL, NULL);
    cg_plan_t *a = compile(s1.g), *b = compile(s1.g), *c = compile(s2.g);
    char *ta = cg_test_plan_text(a, 0), *tb = cg_test_plan_text(b, 0), *tc = cg_test_plan_text(c, 0);
    REQUIRE(strcmp(ta, tb) == 0, "round %d: compiled twice:\n%s\n---\n%s", round, ta, tb);
    REQUIRE(strcmp(ta, tc) == 0, "round %d: recorded again:\n%s\n---\n%s", round, ta, tc);
    REQUIRE(!strstr(ta, "0x") && !strstr(ta, "(nil)"), "round %d: an address in the dump:\n%s", round, ta);
    REQUIRE(count_of(ta, "\n") == s1.p.n_nodes + 1, "round %d: %zu lines for %u steps", round, count_of(ta, "\n"),
            s1.p.n_nodes);
    free(ta);
    free(tb);
    free(tc);
    cg_plan_destroy(a);
    cg_plan_destroy(b);
    cg_plan_destroy(c);
    compile_sample_free(&s1);
    compile_sample_free(&s2);
  }
}
END_TEST

/* The plan keeps its communicators and copies the names: it outlives the graph
 * and the caller's communicator handles. */
START_TEST(compile__plan_outlives_graph_and_communicators) {
  cg_test_reseed(203);
  static unsigned char arena[ARENA];
  for (int round = 0; round < 20; round++) {
    sample_t s;
    compile_sample_make(&s, 1 + (uint32_t)cg_test_below(60), 1 + (int)cg_test_below(MAX_COMMS), 20, arena, NULL, NULL);
    cg_plan_t *plan = compile(s.g);
    char *before = cg_test_plan_text(plan, 0), *more;
    /* recording on after compiling changes the graph, not the plan */
    ck_assert_cg_ok(cg_host_func(NULL, s.g, cg_test_noop, NULL, NULL));
    ck_assert_cg_ok(cg_depend(s.g, compile_node(s.g, 0), compile_node(s.g, s.p.n_nodes)));
    more = cg_test_plan_text(plan, 0);
    ck_assert_str_eq(before, more);
    free(more);
    int n_comms = s.p.n_comms;
    s.p.n_comms = 0; /* the plan outlives our handles: release them now */
    compile_sample_free(&s);
    for (int c = 0; c < n_comms; c++) cg_comm_destroy(s.comms[c]);
    char *after = cg_test_plan_text(plan, 0), *dot = cg_test_plan_text(plan, 1);
    ck_assert_str_eq(before, after);
    for (uint32_t c = 0; c < plan->n_comms; c++) {
      int rank = -1, size = -1;
      ck_assert_cg_ok(cg_comm_rank(&rank, plan->comms[c].comm));
      ck_assert_cg_ok(cg_comm_size(&size, plan->comms[c].comm));
      ck_assert_int_lt(rank, size);
    }
    free(before);
    free(after);
    free(dot);
    cg_plan_destroy(plan);
  }
}
END_TEST

/* plan.h promises one line per step, so ranks can compare dumps line by line;
 * names are user text and may hold line breaks. */
START_TEST(compile__dump_keeps_one_line_per_step_whatever_the_names) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL));
  ck_assert_cg_ok(cg_node_name(g, compile_node(g, 0), "two\nlines"));
  ck_assert_cg_ok(cg_node_name(g, compile_node(g, 1), "carriage\rreturn"));
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.name = "plan\nname";
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  char *text = cg_test_plan_text(plan, 0);
  ck_assert_msg(count_of(text, "\n") == 3 && !strchr(text, '\r'), "dump of 2 steps:\n%s", text);
  free(text);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
}
END_TEST

/* One cluster per lane holding exactly its steps, one edge per dependency. */
static void check_dot(const cg_plan_t *plan, const char *text) {
  REQUIRE(count_of(text, "subgraph cluster_lane") == plan->n_lanes, "%zu clusters for %u lanes",
          count_of(text, "subgraph cluster_lane"), plan->n_lanes);
  REQUIRE(count_of(text, " -> ") == plan->n_deps, "%zu edges for %zu dependencies", count_of(text, " -> "),
          plan->n_deps);
  char key[64];
  for (uint32_t s = 0; s < plan->n_steps; s++) {
    const cg_step_t *st = &plan->steps[s];
    snprintf(key, sizeof key, "\n    s%u [", s);
    const char *decl = strstr(text, key);
    REQUIRE(decl && count_of(text, key) == 1, "step %u is declared %zu times", s, count_of(text, key));
    snprintf(key, sizeof key, "subgraph cluster_lane%u {", st->lane);
    const char *open = strstr(text, key), *close = open ? strstr(open, "\n  }\n") : NULL;
    REQUIRE(open && close && open < decl && decl < close, "step %u is not inside the cluster of lane %u", s,
            st->lane);
    for (uint32_t e = 0; e < st->n_deps; e++) {
      snprintf(key, sizeof key, "\n  s%u -> s%u;", st->deps[e], s);
      REQUIRE(strstr(text, key), "no edge s%u -> s%u", st->deps[e], s);
    }
  }
}

START_TEST(compile__dot_has_a_cluster_per_lane_and_an_edge_per_dependency) {
  cg_test_reseed(204);
  static unsigned char arena[ARENA];
  for (int round = 0; round < 60; round++) {
    sample_t s;
    compile_sample_make(&s, 1 + (uint32_t)cg_test_below(80), (int)cg_test_below(MAX_COMMS + 1),
                        (int)cg_test_below(3) * 20, arena, NULL, NULL);
    cg_plan_t *plan = compile(s.g);
    char *text = cg_test_plan_text(plan, 1);
    check_dot(plan, text);
    free(text);
    cg_plan_destroy(plan);
    compile_sample_free(&s);
  }
}
END_TEST

static void check_graphviz_parses(const cg_plan_t *plan) {
  char path[] = "/tmp/cg_test_plan_dot_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_cg_ok(cg_plan_write_dot(plan, f));
  fclose(f);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "'%s' -Tsvg '%s' -o /dev/null", CG_DOT_EXECUTABLE, path);
  int rc = system(cmd);
  remove(path);
  ck_assert_msg(rc == 0, "Graphviz rejected the plan (%s returned %d)", cmd, rc);
}

START_TEST(compile__graphviz_parses_plan_dot) {
  ck_assert_msg(CG_DOT_EXECUTABLE[0], "Graphviz 'dot' was not found at configure time (install graphviz)");
  cg_test_reseed(205);
  static unsigned char arena[ARENA];
  sample_t s;
  compile_sample_make(&s, 40, 3, 30, arena, NULL, NULL);
  cg_graph_t *g = s.g;
  ck_assert_cg_ok(cg_node_name(g, compile_node(g, 0), "two\nlines, a \"quote\", a \\ and a tab\t"));
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.name = "plan \"one\" \\ {x}";
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  check_graphviz_parses(plan);
  cg_plan_destroy(plan);
  /* and the empty plan */
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  plan = compile(g);
  check_graphviz_parses(plan);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  compile_sample_free(&s);
}
END_TEST

/* ---- running */

enum { LOG_MAX = 4096 };
static struct {
  uint32_t order[LOG_MAX];
  uint32_t n;
} run_log;

/* A host function that writes its node index into the run log. */
static void log_node(void *arg) {
  if (run_log.n < LOG_MAX) run_log.order[run_log.n] = *(const uint32_t *)arg;
  run_log.n++;
}

/* Every node ran exactly once, each after all of its predecessors. */
static void check_log(const cg_graph_t *g, const char *how) {
  uint32_t n = cg_graph_node_count(g);
  REQUIRE(run_log.n == n, "%s: %u host functions ran, the graph has %u", how, run_log.n, n);
  uint32_t *pos = malloc((n + 1) * sizeof *pos);
  REQUIRE(pos, "out of memory");
  for (uint32_t i = 0; i < n; i++) pos[i] = UINT32_MAX;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t node = run_log.order[k];
    REQUIRE(node < n && pos[node] == UINT32_MAX, "%s: #%u ran twice or is out of range", how, node);
    pos[node] = k;
  }
  for (uint32_t i = 0; i < n; i++) {
    const cg_edge_vec_t *preds = &cg_graph_node(g, i)->preds;
    for (uint32_t e = 0; e < preds->len; e++)
      REQUIRE(pos[preds->items[e].node] < pos[i], "%s: #%u ran at %u, before its predecessor #%u at %u", how, i,
              pos[i], preds->items[e].node, pos[preds->items[e].node]);
  }
  free(pos);
}

START_TEST(compile__offline_plans_compile_but_do_not_run) {
  cg_test_reseed(206);
  static unsigned char arena[ARENA];
  static uint32_t ids[128];
  for (uint32_t i = 0; i < 128; i++) ids[i] = i;
  sample_t s;
  compile_sample_make(&s, 100, 2, 40, arena, log_node, ids);
  cg_graph_t *g = s.g;
  cg_plan_t *plan = compile(g);
  compile_check_plan(g, plan);
  /* never started: done, and nothing to wait for */
  int done = 0;
  ck_assert_cg_ok(cg_plan_test(&done, plan));
  ck_assert_int_eq(done, 1);
  ck_assert_cg_ok(cg_plan_wait(plan));
  run_log.n = 0;
  ck_assert_cg_status(cg_plan_run(plan), CG_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(cg_error_last(), "offline"), "detail: %s", cg_error_last());
  ck_assert_cg_status(cg_plan_start(plan), CG_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(cg_error_last(), "offline"), "detail: %s", cg_error_last());
  ck_assert_uint_eq(run_log.n, 0); /* refused before any host function ran */
  done = 0;
  ck_assert_cg_ok(cg_plan_test(&done, plan));
  ck_assert_int_eq(done, 1);
  ck_assert_cg_ok(cg_plan_wait(plan));
  ck_assert_cg_status(cg_plan_run(plan), CG_ERR_UNSUPPORTED);
  ck_assert_uint_eq(run_log.n, 0);
  cg_plan_destroy(plan);
  compile_sample_free(&s);
}
END_TEST

/* Host functions only: no communicator, so the host executor runs the plan on
 * this thread, with cg_plan_run and with start/test and start/wait, again and
 * again. */
START_TEST(compile__host_only_plans_run_in_dependency_order) {
  cg_test_reseed(208);
  static unsigned char arena[ARENA];
  static uint32_t ids[LOG_MAX];
  for (uint32_t i = 0; i < LOG_MAX; i++) ids[i] = i;
  for (int round = 0; round < 100; round++) {
    program_t p = compile_random_program(1 + (uint32_t)cg_test_below(round % 10 ? 60 : 400), 0, 100);
    cg_graph_t *g = compile_record(&p, NULL, arena, log_node, ids);
    cg_plan_t *plan = compile(g);
    compile_check_plan(g, plan);
    ck_assert_uint_eq(plan->n_lanes, 1);
    ck_assert_uint_eq(plan->n_comms, 0);
    for (int again = 0; again < 2; again++) {
      run_log.n = 0;
      ck_assert_cg_ok(cg_plan_run(plan));
      check_log(g, "cg_plan_run");
      run_log.n = 0;
      ck_assert_cg_ok(cg_plan_start(plan));
      int done = 0;
      for (int polls = 0; !done; polls++) {
        REQUIRE(polls < 1000, "round %d: not done after %d polls", round, polls);
        ck_assert_cg_ok(cg_plan_test(&done, plan));
      }
      check_log(g, "cg_plan_start and cg_plan_test");
      ck_assert_cg_ok(cg_plan_test(&done, plan)); /* still done, nothing runs again */
      ck_assert_int_eq(done, 1);
      ck_assert_uint_eq(run_log.n, p.n_nodes);
      run_log.n = 0;
      ck_assert_cg_ok(cg_plan_start(plan));
      ck_assert_cg_ok(cg_plan_wait(plan));
      check_log(g, "cg_plan_start and cg_plan_wait");
    }
    /* the plan, not the graph, holds what the run needs */
    cg_graph_destroy(g);
    run_log.n = 0;
    ck_assert_cg_ok(cg_plan_run(plan));
    ck_assert_uint_eq(run_log.n, p.n_nodes);
    cg_plan_destroy(plan);
    free(p.ops);
  }
}
END_TEST

/* A chain recorded backwards through explicit edges runs backwards. */
START_TEST(compile__host_only_plan_by_hand) {
  static uint32_t ids[5] = {0, 1, 2, 3, 4};
  cg_access_t nothing = CG_ACCESS_INIT;
  nothing.everything = 0;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int i = 0; i < 5; i++) ck_assert_cg_ok(cg_host_func(NULL, g, log_node, &ids[i], &nothing));
  for (uint32_t i = 4; i > 0; i--) ck_assert_cg_ok(cg_depend(g, compile_node(g, i), compile_node(g, i - 1)));
  cg_plan_t *plan = compile(g);
  compile_check_plan(g, plan);
  run_log.n = 0;
  ck_assert_cg_ok(cg_plan_run(plan));
  ck_assert_uint_eq(run_log.n, 5);
  for (uint32_t k = 0; k < 5; k++) ck_assert_uint_eq(run_log.order[k], 4 - k);
  char *text = cg_test_plan_text(plan, 0);
  ck_assert_ptr_nonnull(strstr(text, "plan: 5 steps, 1 lanes, 0 communicators, 4 dependencies\n"));
  ck_assert_ptr_nonnull(strstr(text, "step 0 lane 0 host_func node 4 after -\n"));
  ck_assert_ptr_nonnull(strstr(text, "step 4 lane 0 host_func node 0 after 3\n"));
  free(text);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("compile");
  TCase *lower = tcase_create("lower");
  tcase_set_timeout(lower, 120);
  tcase_add_test(lower, compile__random_graphs_lower_faithfully);
  tcase_add_test(lower, compile__steps_follow_topo_order);
  tcase_add_test(lower, compile__positions_groups_and_lanes_by_hand);
  tcase_add_test(lower, compile__rejects_bad_arguments_and_changes_nothing);
  tcase_add_test(lower, compile__empty_graph_gives_empty_plan);
  tcase_add_test(lower, compile__plan_outlives_graph_and_communicators);
  suite_add_tcase(s, lower);
  TCase *text = tcase_create("text");
  tcase_set_timeout(text, 120);
  tcase_add_test(text, compile__same_program_same_dump);
  tcase_add_test(text, compile__dump_keeps_one_line_per_step_whatever_the_names);
  tcase_add_test(text, compile__dot_has_a_cluster_per_lane_and_an_edge_per_dependency);
  tcase_add_test(text, compile__graphviz_parses_plan_dot);
  suite_add_tcase(s, text);
  TCase *run = tcase_create("run");
  tcase_set_timeout(run, 120);
  tcase_add_test(run, compile__offline_plans_compile_but_do_not_run);
  tcase_add_test(run, compile__host_only_plans_run_in_dependency_order);
  tcase_add_test(run, compile__host_only_plan_by_hand);
  suite_add_tcase(s, run);
  return s;
}

int main(void) { return cg_test_main(suite()); }
