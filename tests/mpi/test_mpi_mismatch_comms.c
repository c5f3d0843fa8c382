/* The "comms" case of the cross-rank check suite (test_mpi_mismatch.c):
 * programs on two communicators over the same ranks, first used in a
 * different order on different ranks, and a communicator that one rank's
 * graph never touches. Kept apart because these tests build their own graphs
 * with a second communicator rather than the random programs and rings of the
 * other cases, and share only the fixture and expectations
 * (test_mpi_mismatch.h) with them. */
#include <stdio.h>

#include "test_mpi_mismatch.h"

/* ---- two communicators over the same ranks, first used in a different order
 * on even and odd ranks: a.0 b.0 a.1 b.1 on even ranks, b.0 a.0 b.1 a.1 on odd
 * ones, so b.1 is node #3 on even ranks and node #2 on odd ones. */

static cg_graph_t *record_two_comms(cg_comm_t *a, cg_comm_t *b, int32_t in[4][8], int32_t out[4][8],
                                    int a_deviant, int b_deviant) {
  int rank = cg_mpi_rank();
  cg_graph_t *g = mm_new_graph();
  for (int k = 0; k < 4; k++) {
    int on_b = (k % 2) ^ (rank % 2); /* which communicator the k-th recorded node uses */
    int step = k / 2;
    size_t count = 4 + (size_t)step;
    if (step == 1 && ((on_b && rank == b_deviant) || (!on_b && rank == a_deviant))) count++;
    int slot = 2 * on_b + step;
    for (int i = 0; i < 8; i++) in[slot][i] = rank + slot;
    char name[8];
    snprintf(name, sizeof name, "%c.%d", on_b ? 'b' : 'a', step);
    cg_node_t node;
    mm_named(g, cg_allreduce(&node, g, on_b ? b : a, in[slot], out[slot], count, CG_INT32, CG_SUM), &node, name);
  }
  return g;
}

START_TEST(match__comms_in_different_first_use_order_compile_and_run) {
  int size = cg_mpi_size();
  cg_comm_t *a = mm_comm_w, *b = mm_world();
  int32_t in[4][8], out[4][8];
  cg_graph_t *g = record_two_comms(a, b, in, out, -1, -1);
  cg_plan_t *plan = NULL;
  mm_expect_ok_all(cg_compile(&plan, g, NULL), "two communicators in different first-use orders compile");
  ck_assert_all_ranks(cg_plan_run(plan) == CG_SUCCESS, "and run");
  int ok = 1;
  for (int slot = 0; slot < 4; slot++) ok &= out[slot][3] == size * (size - 1) / 2 + size * slot;
  ck_assert_all_ranks(ok, "two communicators: allreduce results");
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(b);
}
END_TEST

START_TEST(mismatch__second_comm_with_different_first_use_order) {
  int size = cg_mpi_size();
  cg_comm_t *a = mm_comm_w, *b = mm_world();
  int32_t in[4][8], out[4][8];
  cg_graph_t *g = record_two_comms(a, b, in, out, -1, size - 1);
  outcome_t o = mm_compile_outcome(g);
  cg_graph_destroy(g);
  cg_comm_destroy(b);
  expect_t e = {.n_must = 0, .alone = size - 1, .mention = {-1, -1}};
  mm_expect_node(&e, 3, "b.1");                        /* rank 0, even */
  mm_expect_node(&e, (size - 1) % 2 ? 2 : 3, "b.1");   /* the last rank */
  mm_expect_mismatch(&o, &e, "count + 1 on the second communicator");
}
END_TEST

/* Differences on both communicators: every rank must still report the same
 * one, whichever communicator it happened to use first. */
START_TEST(mismatch__both_comms_one_message) {
  int size = cg_mpi_size();
  cg_comm_t *a = mm_comm_w, *b = mm_world();
  int32_t in[4][8], out[4][8];
  cg_graph_t *g = record_two_comms(a, b, in, out, 0, size - 1);
  outcome_t o = mm_compile_outcome(g);
  cg_graph_destroy(g);
  cg_comm_destroy(b);
  expect_t e = {.n_must = 0, .alone = -1, .mention = {-1, -1}};
  mm_expect_mismatch(&o, &e, "count + 1 on both communicators");
}
END_TEST

/* Waits on an MPI_Ibarrier over every rank. Ranks whose graph has the node on
 * `b` may be stuck in b's check, waiting for ranks whose graph never touches
 * b; after a grace period those ranks compile a graph with the same node, the
 * partner the stuck ranks wait for, so the test fails instead of hanging.
 * Returns 1 if this rank had to do that. */
static int wait_or_unblock(cg_comm_t *b, int has_b) {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  double deadline = MPI_Wtime() + 5.0;
  int done = 0, unblocked = 0;
  while (!done) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done || has_b || unblocked || MPI_Wtime() < deadline) continue;
    int32_t z[4] = {0}, w[4];
    cg_graph_t *g = mm_new_graph();
    ck_assert_cg_ok(cg_allreduce(NULL, g, b, z, w, 4, CG_INT32, CG_SUM));
    mm_compile_outcome(g); /* succeeds or not: what matters is that the others return */
    cg_graph_destroy(g);
    unblocked = 1;
  }
  return unblocked;
}

/* The only node on communicator b is missing on one rank (or is extra on
 * one): that rank's graph never touches b, so it cannot take part in b's
 * check. Every rank must still fail with CG_ERR_MISMATCH naming 'b.0'. */
static void check_sole_node(int extra, const char *test) {
  int rank = cg_mpi_rank(), size = cg_mpi_size(), d = size - 1;
  int has_b = extra ? rank == d : rank != d;
  cg_comm_t *a = mm_comm_w, *b = mm_world();
  int32_t x[4] = {0}, y[4], z[4] = {0}, w[4];
  cg_node_t node;
  cg_graph_t *g = mm_new_graph();
  mm_named(g, cg_allreduce(&node, g, a, x, y, 4, CG_INT32, CG_SUM), &node, "a.0");
  if (has_b) mm_named(g, cg_allreduce(&node, g, b, z, w, 4, CG_INT32, CG_SUM), &node, "b.0");
  outcome_t o = mm_compile_outcome(g);
  int unblocked = wait_or_unblock(b, has_b);
  cg_graph_destroy(g);
  cg_comm_destroy(b);
  if (unblocked)
    fprintf(stderr, "rank %d: %s: cg_compile returned %s here while ranks whose graph uses communicator b waited "
            "in its check for this rank\n", rank, test, cg_status_string(o.status));
  char what[200];
  snprintf(what, sizeof what, "%s: no rank waits in cg_compile for a rank whose graph does not use the "
           "communicator", test);
  ck_assert_all_ranks(cg_mpi_all(!unblocked), what);
  expect_t e = {.n_must = 0, .alone = d, .mention = {-1, -1}};
  mm_expect_node(&e, 1, "b.0");
  mm_expect_mismatch(&o, &e, test);
}

ONE_CALL_TEST(mismatch__sole_node_on_a_comm_missing, check_sole_node(0, "only node on a communicator missing"))
ONE_CALL_TEST(mismatch__sole_node_on_a_comm_extra, check_sole_node(1, "only node on a communicator is extra"))

void mm_add_comms_tests(TCase *tc) {
  tcase_add_test(tc, match__comms_in_different_first_use_order_compile_and_run);
  tcase_add_test(tc, mismatch__second_comm_with_different_first_use_order);
  tcase_add_test(tc, mismatch__both_comms_one_message);
  tcase_add_test(tc, mismatch__sole_node_on_a_comm_missing);
  tcase_add_test(tc, mismatch__sole_node_on_a_comm_extra);
}
