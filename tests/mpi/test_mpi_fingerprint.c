/* The replay's fingerprint (issue 23, docs/watchdog.md#fingerprint): host
 * plans compiled without the cross-rank check, where the last rank's graph
 * differs in a way MPI pairs without complaint (the type of the same size,
 * the operation, the order of two allreduces), and two checked plans that the
 * last rank starts in the other order: every rank's replay fails with
 * CG_ERR_MISMATCH naming the communicator and the ranks, where before it
 * "succeeded" with mixed data. Ranks that agree get exact sums of random
 * integer-valued floats, with and without the fingerprint, and fingerprint 0
 * turns the check off. (A differing count or root is left to fault
 * injection's missing node: MPI's own behaviour on those is an abort or a
 * hang.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"

enum { N = 4096 };

typedef enum variant { SAME, OTHER_DTYPE, OTHER_OP, OTHER_ORDER } variant_t;

typedef struct bufs {
  float x[N], y[N], want_x[N], want_y[N];
} bufs_t;

/* Integer-valued inputs whose sum over ranks each rank computes itself. */
static void fill(bufs_t *b, uint64_t seed) {
  int me = cg_mpi_rank(), n = cg_mpi_size();
  for (int i = 0; i < N; i++) {
    b->want_x[i] = b->want_y[i] = 0;
    for (int r = 0; r < n; r++) {
      uint64_t v = (seed ^ (uint64_t)(r * 7919 + i)) * 6364136223846793005ull;
      float xv = (float)((v >> 40) % 1000), yv = (float)((v >> 20) % 1000);
      b->want_x[i] += xv, b->want_y[i] += yv;
      if (r == me) b->x[i] = xv, b->y[i] = yv;
    }
  }
}

/* x then y, summed; the last rank's graph differs as `v` says. */
static cg_plan_t *compile(cg_comm_t *comm, bufs_t *b, variant_t v, int fingerprint) {
  int odd = cg_mpi_rank() == cg_mpi_size() - 1;
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  cg_dtype_t t = odd && v == OTHER_DTYPE ? CG_INT32 : CG_FLOAT32;
  cg_redop_t op = odd && v == OTHER_OP ? CG_MAX : CG_SUM;
  if (odd && v == OTHER_ORDER) {
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, b->y, b->y, N, CG_FLOAT32, CG_MAX));
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, b->x, b->x, N, CG_FLOAT32, CG_SUM));
  } else {
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, b->x, b->x, N, t, op));
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, b->y, b->y, N, CG_FLOAT32, v == OTHER_ORDER ? CG_MAX : CG_SUM));
  }
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.check_ranks = 0; /* the difference reaches the replay */
  o.fusion = 0;
  o.fingerprint = fingerprint;
  o.timeout_s = 30; /* a hang fails the test, not the suite's limit */
  cg_plan_t *plan = NULL;
  cg_status_t st = cg_compile(&plan, g, &o);
  cg_graph_destroy(g);
  ck_assert_all_ranks(st == CG_SUCCESS, "cg_compile without the check");
  return plan;
}

/* After a mismatch the ranks' collectives were posted in pairs MPI accepts:
 * they complete once every rank has progressed MPI, so the plans' release
 * finds them done (nothing is leaked to MPI). */
static void settle_posted(void) {
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
}

static void expect_mismatch(cg_status_t st, const char *what) {
  char text[2400];
  snprintf(text, sizeof text, "%s: rank %d got %s: %s", what, cg_mpi_rank(), cg_status_string(st),
           st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_ERR_MISMATCH && strstr(cg_error_last(), "ran different sequences on communicator") &&
                          strstr(cg_error_last(), " ran ") && strstr(cg_error_last(), "(fingerprint "),
                      text);
}

static void differing_graph_fails_the_replay(variant_t v) {
  cg_comm_t *comm = NULL;
  ck_assert_cg_ok(cg_comm_create(&comm, MPI_COMM_WORLD, NULL));
  bufs_t *b = calloc(1, sizeof *b);
  ck_assert(b);
  fill(b, cg_test_seed());
  cg_plan_t *plan = compile(comm, b, v, 1);
  cg_status_t st = cg_plan_run(plan);
  expect_mismatch(st, "a differing graph's replay");
  settle_posted();
  cg_plan_destroy(plan);
  cg_comm_destroy(comm);
  free(b);
}

START_TEST(fingerprint__other_dtype_of_the_same_size_fails_every_rank) { differing_graph_fails_the_replay(OTHER_DTYPE); }
END_TEST

START_TEST(fingerprint__other_operation_fails_every_rank) { differing_graph_fails_the_replay(OTHER_OP); }
END_TEST

START_TEST(fingerprint__other_order_fails_every_rank) { differing_graph_fails_the_replay(OTHER_ORDER); }
END_TEST

/* Ranks that agree: exact sums, replay after replay, with the fingerprint
 * and without; and without it a differing graph is not caught (what the
 * option turns off). */
START_TEST(fingerprint__agreeing_ranks_sum_right_and_zero_turns_it_off) {
  cg_comm_t *comm = NULL;
  ck_assert_cg_ok(cg_comm_create(&comm, MPI_COMM_WORLD, NULL));
  bufs_t *b = calloc(1, sizeof *b);
  ck_assert(b);
  for (int fingerprint = 1; fingerprint >= 0; fingerprint--) {
    cg_plan_t *plan = compile(comm, b, SAME, fingerprint);
    for (int replay = 0; replay < 5; replay++) {
      fill(b, cg_test_seed() + (uint64_t)replay);
      ck_assert_all_ranks(cg_plan_run(plan) == CG_SUCCESS, "an agreeing replay");
      int wrong = 0;
      for (int i = 0; i < N; i++) wrong += b->x[i] != b->want_x[i] || b->y[i] != b->want_y[i];
      ck_assert_all_ranks(!wrong, "exact sums");
    }
    cg_plan_destroy(plan);
  }
  cg_plan_t *plan = compile(comm, b, OTHER_OP, 0);
  ck_assert_all_ranks(cg_plan_run(plan) == CG_SUCCESS, "without the fingerprint a differing op goes unnoticed");
  cg_plan_destroy(plan);
  cg_comm_destroy(comm);
  free(b);
}
END_TEST

/* Two checked plans of the same shape on one communicator; the last rank
 * starts the second first. */
START_TEST(fingerprint__plans_started_in_other_orders_fail_every_rank) {
  cg_comm_t *comm = NULL;
  ck_assert_cg_ok(cg_comm_create(&comm, MPI_COMM_WORLD, NULL));
  bufs_t *b = calloc(1, sizeof *b);
  ck_assert(b);
  fill(b, cg_test_seed());
  cg_plan_t *plan[2];
  for (int k = 0; k < 2; k++) {
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, k ? b->y : b->x, k ? b->y : b->x, N, CG_FLOAT32, k ? CG_MAX : CG_SUM));
    ck_assert_cg_ok(cg_compile(&plan[k], g, NULL)); /* checked: each plan matches across ranks */
    cg_graph_destroy(g);
  }
  int odd = cg_mpi_rank() == cg_mpi_size() - 1;
  cg_status_t st = cg_plan_run(plan[odd]);
  expect_mismatch(st, "the first plan run");
  settle_posted();
  /* the other plan's fingerprint round pairs too, so it fails as well */
  st = cg_plan_run(plan[!odd]);
  expect_mismatch(st, "the second plan run");
  settle_posted();
  cg_plan_destroy(plan[0]);
  cg_plan_destroy(plan[1]);
  cg_comm_destroy(comm);
  free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_fingerprint");
  TCase *tc = cg_mpi_tcase("fingerprint");
  tcase_add_test(tc, fingerprint__agreeing_ranks_sum_right_and_zero_turns_it_off);
  tcase_add_test(tc, fingerprint__other_dtype_of_the_same_size_fails_every_rank);
  tcase_add_test(tc, fingerprint__other_operation_fails_every_rank);
  tcase_add_test(tc, fingerprint__other_order_fails_every_rank);
  tcase_add_test(tc, fingerprint__plans_started_in_other_orders_fail_every_rank);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
