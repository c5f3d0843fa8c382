/* The replay watchdog and the flight recorder on host plans (issue 8): a rank
 * that is late inside a replay makes the others' cg_plan_wait / cg_plan_run
 * fail with CG_ERR_TIMEOUT within the timeout plus 10%, naming the plan, the
 * rank, the replay, the node waited for and the last one completed; the
 * handler and the flight recorder see it; the plan refuses to run again.
 * The late rank then finishes its own replay, which completes the others'
 * posted operations, so the suite can go on. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"

#define N 1024
#define TIMEOUT_S 0.5

typedef struct late {
  int me_late;      /* this rank is the late one */
  int replay, late_replay;
  double sleep_s;
  cg_node_t second; /* the allreduce after the nap */
} late_t;

/* Between the two collectives: the late rank sleeps in the late replay. */
static void maybe_sleep(void *arg) {
  late_t *l = arg;
  if (++l->replay == l->late_replay && l->me_late) {
    cg_test_nap(l->sleep_s);
  }
}

typedef struct heard {
  int calls;
  char report[2600];
} heard_t;

static void hear(cg_status_t st, const char *report, void *arg) {
  heard_t *h = arg;
  ck_assert_int_eq(st, CG_ERR_TIMEOUT);
  h->calls++;
  snprintf(h->report, sizeof h->report, "%s", report);
}

/* first (allreduce) -> sleep (host function) -> second (allreduce) */
static cg_plan_t *late_plan(cg_comm_t *comm, float *a, float *b, late_t *late, double timeout_s) {
  cg_graph_t *g = NULL;
  cg_node_t first, nap, second;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(&first, g, comm, a, a, N, CG_FLOAT32, CG_SUM));
  ck_assert_cg_ok(cg_node_name(g, first, "layer1.grad"));
  cg_access_t none = CG_ACCESS_INIT;
  none.everything = 0;
  ck_assert_cg_ok(cg_host_func(&nap, g, maybe_sleep, late, &none));
  ck_assert_cg_ok(cg_node_name(g, nap, "late rank's nap"));
  ck_assert_cg_ok(cg_depend(g, first, nap));
  ck_assert_cg_ok(cg_allreduce(&second, g, comm, b, b, N, CG_FLOAT32, CG_SUM));
  ck_assert_cg_ok(cg_node_name(g, second, "layer0.grad"));
  ck_assert_cg_ok(cg_depend(g, nap, second));
  late->second = second;
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.name = "train step";
  o.timeout_s = timeout_s;
  cg_plan_t *plan = NULL;
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  cg_graph_destroy(g);
  return plan;
}

static void expect_in(const char *text, const char *part) {
  ck_assert_msg(strstr(text, part) != NULL, "'%s' not in the report: %s", part, text);
}

/* The late rank runs without a timeout (it is the one at fault); every
 * other rank's run of replay 3 must fail in time and say what hung. */
static void late_rank_times_out_the_others(int use_run) {
  int me = cg_mpi_rank(), n = cg_mpi_size(), late_rank = n - 1;
  cg_comm_t *comm = NULL;
  ck_assert_cg_ok(cg_comm_create(&comm, MPI_COMM_WORLD, NULL));
  float *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b);
  ck_assert(a && b);
  late_t late = {.me_late = me == late_rank, .late_replay = 3, .sleep_s = 4 * TIMEOUT_S};
  cg_plan_t *plan = late_plan(comm, a, b, &late, late.me_late ? -1 : TIMEOUT_S);
  double seconds = -1;
  ck_assert_cg_ok(cg_plan_timeout(&seconds, plan));
  ck_assert(late.me_late ? seconds == 0 : seconds == TIMEOUT_S);
  heard_t heard = {0};
  ck_assert_cg_ok(cg_set_timeout_handler(hear, &heard));
  for (int r = 1; r <= 2; r++) ck_assert_cg_ok(cg_plan_run(plan));

  double t0 = cg_test_now_s();
  cg_status_t st = use_run ? cg_plan_run(plan) : cg_plan_start(plan);
  if (!use_run && st == CG_SUCCESS) st = cg_plan_wait(plan);
  double took = cg_test_now_s() - t0;
  char detail[2600];
  snprintf(detail, sizeof detail, "%s", cg_error_last());
  ck_assert_cg_ok(cg_set_timeout_handler(NULL, NULL));
  if (late.me_late) {
    ck_assert_msg(st == CG_SUCCESS, "the late rank's replay: %s: %s", cg_status_string(st), detail);
  } else {
    ck_assert_msg(st == CG_ERR_TIMEOUT, "rank %d: expected a timeout, got %s (%s)", me, cg_status_string(st),
                  detail);
    ck_assert_msg(took >= TIMEOUT_S && took <= 1.1 * TIMEOUT_S, "rank %d: the timeout came after %.3f s", me, took);
    expect_in(detail, use_run ? "cg_plan_run: " : "cg_plan_wait: ");
    expect_in(detail, "plan 'train step'");
    expect_in(detail, "replay 3");
    char rank[64];
    snprintf(rank, sizeof rank, "on rank %d of %d", me, n);
    expect_in(detail, rank);
    expect_in(detail, "waiting for plan 'train step' step");
    expect_in(detail, "'layer0.grad', allreduce");
    expect_in(detail, "last completed: plan 'train step' step");
    expect_in(detail, "'late rank's nap'");
    expect_in(detail, "sequence number");
    ck_assert_int_eq(heard.calls, 1);
    /* the handler hears the report cg_plan_wait made; cg_plan_run names
     * itself instead */
    ck_assert_str_eq(heard.report + strlen("cg_plan_wait: "), detail + strlen(use_run ? "cg_plan_run: " : "cg_plan_wait: "));
    /* the recorder holds the timeout and the collectives of the replay */
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    ck_assert_cg_ok(cg_flight_dump(f));
    fclose(f);
    expect_in(text, "timeout\treplay=3\tplan=train step");
    expect_in(text, "done\treplay=3\tplan=train step");
    expect_in(text, "start\treplay=3\tplan=train step");
    expect_in(text, "name=layer0.grad");
    free(text);
    /* dead: its second collective is still posted, and may still write
     * what a rebind would move */
    ck_assert_cg_status(cg_plan_start(plan), CG_ERR_TIMEOUT);
    ck_assert_cg_status(cg_plan_run(plan), CG_ERR_TIMEOUT);
    cg_rebind_t moved = {late.second, a, a};
    ck_assert_cg_status(cg_plan_rebind(plan, &moved, 1), CG_ERR_TIMEOUT);
  }
  /* the late rank's replay completed the others' posted allreduce */
  MPI_Barrier(MPI_COMM_WORLD);
  cg_plan_destroy(plan);
  cg_comm_destroy(comm);
  free(a);
  free(b);
}

START_TEST(watchdog__late_rank_times_out_cg_plan_wait_naming_node_rank_and_replay) {
  late_rank_times_out_the_others(0);
}
END_TEST

START_TEST(watchdog__late_rank_times_out_cg_plan_run_too) { late_rank_times_out_the_others(1); }
END_TEST

/* cg_plan_test notices the deadline as well. */
START_TEST(watchdog__cg_plan_test_reports_the_timeout) {
  int me = cg_mpi_rank(), late_rank = 0;
  cg_comm_t *comm = NULL;
  ck_assert_cg_ok(cg_comm_create(&comm, MPI_COMM_WORLD, NULL));
  float *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b);
  ck_assert(a && b);
  late_t late = {.me_late = me == late_rank, .late_replay = 1, .sleep_s = 3 * TIMEOUT_S};
  cg_plan_t *plan = late_plan(comm, a, b, &late, late.me_late ? -1 : TIMEOUT_S);
  double t0 = cg_test_now_s();
  cg_status_t st = cg_plan_start(plan);
  int done = 0;
  while (st == CG_SUCCESS && !done) st = cg_plan_test(&done, plan);
  double took = cg_test_now_s() - t0;
  if (late.me_late) {
    ck_assert_cg_ok(st);
  } else {
    ck_assert_msg(st == CG_ERR_TIMEOUT && took <= 1.1 * TIMEOUT_S, "%s after %.3f s: %s", cg_status_string(st), took,
                  cg_error_last());
    expect_in(cg_error_last(), "cg_plan_test: ");
    expect_in(cg_error_last(), "'layer0.grad'");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  cg_plan_destroy(plan);
  cg_comm_destroy(comm);
  free(a);
  free(b);
}
END_TEST

/* The option wins over CG_TIMEOUT; 0 takes the variable; negative turns it
 * off; replays that finish in time are untouched and recorded. */
START_TEST(watchdog__option_and_environment) {
  cg_comm_t *comm = NULL;
  ck_assert_cg_ok(cg_comm_create(&comm, MPI_COMM_WORLD, NULL));
  float *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b);
  ck_assert(a && b);
  late_t late = {0};
  static const struct {
    const char *env;
    double option, expect;
  } cases[] = {{NULL, 0, 0}, {"2.5", 0, 2.5}, {"2.5", 7, 7}, {"2.5", -1, 0}, {NULL, 3, 3}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    if (cases[i].env)
      setenv("CG_TIMEOUT", cases[i].env, 1);
    else
      unsetenv("CG_TIMEOUT");
    cg_plan_t *plan = late_plan(comm, a, b, &late, cases[i].option);
    double seconds = -1;
    ck_assert_cg_ok(cg_plan_timeout(&seconds, plan));
    ck_assert_msg(seconds == cases[i].expect, "case %zu: timeout %g, expected %g", i, seconds, cases[i].expect);
    ck_assert_cg_ok(cg_plan_run(plan));
    cg_plan_destroy(plan);
  }
  /* a bad value is refused, not ignored (core/param.h; test_mpi_env) */
  setenv("CG_TIMEOUT", "junk", 1);
  cg_graph_t *g = NULL;
  cg_plan_t *refused = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, a, a, N, CG_FLOAT32, CG_SUM));
  ck_assert_int_eq(cg_compile(&refused, g, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(refused);
  cg_graph_destroy(g);
  unsetenv("CG_TIMEOUT");
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  ck_assert_cg_ok(cg_flight_dump(f));
  fclose(f);
  ck_assert_ptr_nonnull(strstr(text, "# commgraph flight recorder"));
  ck_assert_ptr_nonnull(strstr(text, "finished\treplay=1\tplan=train step"));
  free(text);
  cg_comm_destroy(comm);
  free(a);
  free(b);
}
END_TEST

/* A case per way of waiting, so CK_RUN_CASE can run one alone. */
int main(void) {
  Suite *s = suite_create("mpi_watchdog");
  TCase *wait = cg_mpi_tcase("wait"), *run = cg_mpi_tcase("run"), *test = cg_mpi_tcase("test");
  TCase *options = cg_mpi_tcase("options");
  tcase_add_test(wait, watchdog__late_rank_times_out_cg_plan_wait_naming_node_rank_and_replay);
  tcase_add_test(run, watchdog__late_rank_times_out_cg_plan_run_too);
  tcase_add_test(test, watchdog__cg_plan_test_reports_the_timeout);
  tcase_add_test(options, watchdog__option_and_environment);
  suite_add_tcase(s, wait);
  suite_add_tcase(s, run);
  suite_add_tcase(s, test);
  suite_add_tcase(s, options);
  return cg_mpi_test_main(s);
}
