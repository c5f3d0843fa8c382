/* The host executor on real ranks: blocking and nonblocking runs, replays,
 * point-to-point rings, host functions in order, state errors, communicators. */
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"

static cg_comm_t *world(void) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  return c;
}

START_TEST(exec__allreduce_runs_and_replays) {
  cg_comm_t *c = world();
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  enum { N = 1000 };
  int32_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, a, b, N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  cg_graph_destroy(g); /* the plan does not need the graph */
  int ok = 1;
  for (int iter = 0; iter < 5; iter++) {
    for (int i = 0; i < N; i++) a[i] = rank * 1000 + i + iter;
    memset(b, CG_MPI_POISON, N * sizeof *b);
    ck_assert_cg_ok(cg_plan_run(plan));
    for (int i = 0; i < N; i++) ok &= b[i] == 1000 * size * (size - 1) / 2 + size * (i + iter);
  }
  ck_assert_all_ranks(ok, "allreduce replays");
  cg_plan_destroy(plan);
  cg_comm_destroy(c);
  free(a);
  free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_exec");
  TCase *tc = cg_mpi_tcase("exec");
  tcase_add_test(tc, exec__allreduce_runs_and_replays);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
