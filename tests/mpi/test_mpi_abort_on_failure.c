/* Fails on purpose, for check_abort_on_failure.sh: how a failed assertion
 * ends an MPI suite (support/mpi_abort_on_failure.c). CK_RUN_CASE picks the
 * case: one_rank (the last rank fails while the others wait for it in a
 * barrier) or all_ranks (every rank fails together). In each, a test after the
 * failure shows whether the suite went on. */
#include "mpi_test.h"

START_TEST(abort__last_rank_fails_while_the_others_wait) {
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  /* a communicator of this test's own, so that without the abort the waiting
   * ranks cannot be released by the failed rank's later collectives: they sit
   * in the barrier until the time limit, as in a real suite */
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  ck_assert_msg(rank != size - 1, "deliberate failure on rank %d of %d", rank, size);
  MPI_Barrier(comm);
  MPI_Comm_free(&comm);
}
END_TEST

START_TEST(abort__every_rank_fails_together) {
  ck_assert_all_ranks(cg_mpi_rank() != cg_mpi_size() - 1, "deliberate failure agreed by every rank");
}
END_TEST

START_TEST(abort__the_suite_goes_on) { MPI_Barrier(MPI_COMM_WORLD); }
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_abort_on_failure");
  /* a short limit: if the abort did not work, the job still ends well before
   * ctest's TIMEOUT, so the failure names the test */
  TCase *one = cg_mpi_tcase_limit("one_rank", 30);
  tcase_add_test(one, abort__last_rank_fails_while_the_others_wait);
  tcase_add_test(one, abort__the_suite_goes_on);
  suite_add_tcase(s, one);
  TCase *all = cg_mpi_tcase_limit("all_ranks", 30);
  tcase_add_test(all, abort__every_rank_fails_together);
  tcase_add_test(all, abort__the_suite_goes_on);
  suite_add_tcase(s, all);
  return cg_mpi_test_main(s);
}
