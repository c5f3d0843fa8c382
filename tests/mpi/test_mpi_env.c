/* Bad environment values on real ranks (core/param.c, issue 23 item 6). A bad
 * CG_TIMEOUT, CG_FUSION or CG_BUCKET_BYTES on one rank only makes cg_compile
 * (and cg_plan_tune, which compiles) fail on every rank, none waiting for the
 * others: the rank with the bad value returns CG_ERR_INVALID_ARGUMENT naming
 * the variable, its value and what it takes; the others learn that rank
 * cannot compile (the cross-rank check, or the tuning agreement, carries its
 * failure) and name it. With the variable unset again the same graph
 * compiles and sums right on every rank. The seed picks the rank. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"

enum { NODES = 6, COUNT = 256 };

typedef struct bad_env {
  const char *variable, *value, *takes;
} bad_env_t;

static const bad_env_t bad_values[] = {
    {"CG_TIMEOUT", "abc", "seconds > 0"},
    {"CG_FUSION", "maybe", "0/off/no/false or 1/on/yes/true"},
    {"CG_BUCKET_BYTES", "lots", "a size"},
    {"CG_TIMEOUT", "-1", "seconds > 0"},
    {"CG_BUCKET_BYTES", "64T", "a size"},
};
#define N_BAD (sizeof bad_values / sizeof bad_values[0])

static int32_t data[NODES][COUNT];

static cg_graph_t *record(cg_comm_t *c) {
  cg_graph_t *g = NULL;
  cg_graph_opts_t o = CG_GRAPH_OPTS_INIT;
  o.name = "env";
  ck_assert_cg_ok(cg_graph_create(&g, &o));
  for (int k = 0; k < NODES; k++)
    ck_assert_cg_ok(cg_allreduce(NULL, g, c, data[k], data[k], COUNT, CG_INT32, CG_SUM));
  return g;
}

/* Runs the plan: 1 when every sum is right on this rank. */
static int sums_right(cg_plan_t *plan) {
  int rank = cg_mpi_rank(), size = cg_mpi_size(), ok = 1;
  for (int k = 0; k < NODES; k++)
    for (int i = 0; i < COUNT; i++) data[k][i] = (rank + 1) * (k + 1) + i;
  if (cg_plan_run(plan) != CG_SUCCESS) return 0;
  for (int k = 0; k < NODES; k++)
    for (int i = 0; i < COUNT; i++) ok &= data[k][i] == (k + 1) * size * (size + 1) / 2 + size * i;
  return ok;
}

/* After a compile where `bad_rank` (-1: every rank) had `e` set: the verdict
 * on this rank. */
static int failed_as_expected(cg_status_t st, const cg_plan_t *plan, const bad_env_t *e, int bad_rank) {
  const char *detail = cg_error_last();
  char names[96];
  if (st == CG_SUCCESS || plan != NULL) {
    fprintf(stderr, "rank %d: %s=%s on rank %d: compiled (%s)\n", cg_mpi_rank(), e->variable, e->value, bad_rank,
            cg_status_string(st));
    return 0;
  }
  if (bad_rank < 0 || bad_rank == cg_mpi_rank()) {
    snprintf(names, sizeof names, "environment variable %s='%s' is not %s", e->variable, e->value, e->takes);
    int ok = st == CG_ERR_INVALID_ARGUMENT && strncmp(detail, "cg_compile", 10) == 0 && strstr(detail, names) &&
             strstr(detail, "(unset it or give e.g. ");
    if (!ok) fprintf(stderr, "rank %d: %s: \"%s\", expected \"%s\"\n", cg_mpi_rank(), cg_status_string(st), detail, names);
    return ok;
  }
  snprintf(names, sizeof names, "rank %d", bad_rank);
  int ok = strstr(detail, names) != NULL;
  if (!ok) fprintf(stderr, "rank %d: %s: \"%s\" does not name %s\n", cg_mpi_rank(), cg_status_string(st), detail, names);
  return ok;
}

static void compile_with_bad_env(const bad_env_t *e, int bad_rank) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  cg_graph_t *g = record(c);
  cg_plan_t *plan = NULL;
  char what[200];
  if (bad_rank < 0 || bad_rank == cg_mpi_rank()) setenv(e->variable, e->value, 1);
  cg_status_t st = cg_compile(&plan, g, NULL);
  unsetenv(e->variable);
  snprintf(what, sizeof what, "%s=%s on %s%d: cg_compile fails on every rank, naming it", e->variable, e->value,
           bad_rank < 0 ? "every rank" : "rank ", bad_rank < 0 ? cg_mpi_size() : bad_rank);
  ck_assert_all_ranks(failed_as_expected(st, plan, e, bad_rank), what);
  /* nothing left behind: unset, the same graph compiles and runs */
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_all_ranks(sums_right(plan), "the sums after the variable was unset");
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
}

START_TEST(env__bad_value_on_one_rank_fails_cg_compile_everywhere) {
  int size = cg_mpi_size();
  for (size_t i = 0; i < N_BAD; i++) {
    compile_with_bad_env(&bad_values[i], (int)cg_test_below((uint64_t)size));
    compile_with_bad_env(&bad_values[i], size - 1);
  }
}
END_TEST

START_TEST(env__bad_value_on_every_rank_fails_cg_compile_everywhere) {
  for (size_t i = 0; i < N_BAD; i++) compile_with_bad_env(&bad_values[i], -1);
}
END_TEST

/* The options do not make a bad value good: fusion off and a timeout and a
 * bucket size given, the variables are refused still (on one rank). */
START_TEST(env__bad_value_refused_even_where_options_decide) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  cg_graph_t *g = record(c);
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.fusion = 0;
  o.timeout_s = 60;
  o.bucket_bytes = 4096;
  int bad_rank = (int)cg_test_below((uint64_t)cg_mpi_size());
  for (size_t i = 0; i < N_BAD; i++) {
    const bad_env_t *e = &bad_values[i];
    cg_plan_t *plan = NULL;
    if (cg_mpi_rank() == bad_rank) setenv(e->variable, e->value, 1);
    cg_status_t st = cg_compile(&plan, g, &o);
    unsetenv(e->variable);
    ck_assert_all_ranks(failed_as_expected(st, plan, e, bad_rank), "refused with the options set");
  }
  cg_plan_t *plan = NULL;
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  ck_assert_all_ranks(sums_right(plan), "the sums with the options");
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
}
END_TEST

/* cg_plan_tune compiles again after its profile: a bad value on one rank
 * travels in the tuning agreement, and every rank fails. */
START_TEST(env__bad_value_on_one_rank_fails_cg_plan_tune_everywhere) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  cg_graph_t *g = record(c);
  cg_plan_t *plan = NULL;
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  int bad_rank = (int)cg_test_below((uint64_t)cg_mpi_size());
  cg_tune_opts_t o = CG_TUNE_OPTS_INIT;
  o.replays = 2;
  for (size_t i = 0; i < 3; i++) {
    const bad_env_t *e = &bad_values[i];
    cg_plan_t *tuned = NULL;
    if (cg_mpi_rank() == bad_rank) setenv(e->variable, e->value, 1);
    cg_status_t st = cg_plan_tune(&tuned, plan, g, &o);
    unsetenv(e->variable);
    int ok = st != CG_SUCCESS && tuned == NULL;
    if (ok && cg_mpi_rank() == bad_rank) {
      char names[96];
      snprintf(names, sizeof names, "%s='%s'", e->variable, e->value);
      ok = st == CG_ERR_INVALID_ARGUMENT && strstr(cg_error_last(), names) != NULL;
    }
    if (!ok) fprintf(stderr, "rank %d: cg_plan_tune with %s=%s on rank %d: %s: %s\n", cg_mpi_rank(), e->variable,
                     e->value, bad_rank, cg_status_string(st), cg_error_last());
    if (tuned) cg_plan_destroy(tuned);
    ck_assert_all_ranks(ok, "cg_plan_tune fails on every rank");
  }
  ck_assert_all_ranks(sums_right(plan), "the plan still runs");
  cg_plan_t *tuned = NULL;
  ck_assert_cg_ok(cg_plan_tune(&tuned, plan, g, &o));
  ck_assert_all_ranks(sums_right(tuned), "the tuned plan's sums once unset");
  cg_plan_destroy(tuned);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_env");
  TCase *tc = cg_mpi_tcase("env");
  tcase_add_test(tc, env__bad_value_on_one_rank_fails_cg_compile_everywhere);
  tcase_add_test(tc, env__bad_value_on_every_rank_fails_cg_compile_everywhere);
  tcase_add_test(tc, env__bad_value_refused_even_where_options_decide);
  tcase_add_test(tc, env__bad_value_on_one_rank_fails_cg_plan_tune_everywhere);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
