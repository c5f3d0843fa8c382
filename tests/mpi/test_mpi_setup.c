/* A communicator's creation waiting for the other ranks
 * (backends/mpi/mpi_setup.c): the minimum, broadcast and duplicate it
 * agrees through hand back what MPI's blocking collectives would, with and without
 * a timeout; a rank that comes late leaves the others with CG_ERR_TIMEOUT
 * naming it and the stage, on time, and still completes its own call against
 * their posted collective (whose buffers the library keeps), and in
 * cg_comm_create reports at its next wait instead of hanging; and
 * cg_comm_create, where one rank cannot choose its device, fails on every
 * rank instead of leaving the others in the backend's collectives. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph.h"
#include "commgraph/config.h"
#include "commgraph/mpi.h"
#include "mpi/mpi_backend.h"
#include "mpi_test.h"
#include "test_support.h"
#if CG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define WHERE "cg_comm_create (test)"

START_TEST(setup__min_bcast_and_dup_match_the_blocking_collectives_with_and_without_a_timeout) {
  int me = cg_mpi_rank(), n = cg_mpi_size();
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  for (int round = 0; round < 40; round++) {
    double timeout_s = round % 2 ? 30.0 : 0; /* 0: MPI's blocking collective */
    int count = 1 + (int)cg_test_below(9);
    cg_test_reseed((uint64_t)round * 1000 + (uint64_t)me);
    uint64_t mine[9], least[9], expected[9];
    for (int i = 0; i < count; i++) mine[i] = cg_test_rand() >> cg_test_below(64);
    for (int i = 0; i < 9; i++) least[i] = expected[i] = UINT64_C(0xdeadbeefdeadbeef); /* poison */
    MPI_Allreduce(mine, expected, count, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    ck_assert_int_eq(cg_mpi_setup_min(least, mine, count, MPI_UINT64_T, comm, timeout_s, WHERE, "a minimum"),
                     CG_SUCCESS);
    for (int i = 0; i < 9; i++)
      ck_assert_msg(least[i] == expected[i], "rank %d round %d: element %d of %d is %llx, MPI_Allreduce gave %llx", me,
                    round, i, count, (unsigned long long)least[i], (unsigned long long)expected[i]);
    int ok = cg_test_below(4) != 0, all_ok = -1, want = 0;
    MPI_Allreduce(&ok, &want, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ck_assert_int_eq(cg_mpi_setup_all_ok(&all_ok, ok, comm, timeout_s, WHERE, "ok"), CG_SUCCESS);
    ck_assert_int_eq(all_ok, want);
    /* the same root on every rank: drawn from the round alone */
    cg_test_reseed((uint64_t)round);
    int root = (int)cg_test_below((uint64_t)n), bytes = 1 + (int)cg_test_below(300);
    unsigned char data[300], sent[300];
    for (int i = 0; i < bytes; i++) sent[i] = (unsigned char)cg_test_rand();
    memset(data, 0xa5, sizeof data);
    if (me == root) memcpy(data, sent, (size_t)bytes);
    ck_assert_int_eq(cg_mpi_setup_bcast(data, bytes, root, comm, timeout_s, WHERE, "a broadcast"), CG_SUCCESS);
    ck_assert_msg(memcmp(data, sent, (size_t)bytes) == 0, "rank %d round %d: the broadcast from %d differs", me, round,
                  root);
    for (int i = bytes; i < 300; i++) ck_assert_int_eq(data[i], 0xa5); /* nothing written past it */
    MPI_Comm dup = MPI_COMM_NULL;
    int same = MPI_UNEQUAL;
    ck_assert_int_eq(cg_mpi_setup_dup(&dup, comm, timeout_s, WHERE, "a duplicate"), CG_SUCCESS);
    MPI_Comm_compare(dup, comm, &same);
    ck_assert_int_eq(same, MPI_CONGRUENT);
    MPI_Comm_free(&dup);
  }
  MPI_Comm_free(&comm);
}
END_TEST

/* Takes the roll calls nobody answered, so that none outlives the test. */
static void drain(MPI_Comm comm) {
  for (int flag = 1; flag;) {
    MPI_Message message;
    MPI_Status status;
    char bytes[1024];
    MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &message, &status);
    if (flag) MPI_Mrecv(bytes, (int)sizeof bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
  }
}

/* Whether the roll call in `report` counts rank r of n among those that
 * did not answer ("rank 3 of 4 did not answer", "ranks 0 and 3 of 4 ...":
 * on a loaded machine a rank busy with its own roll call may miss the grace
 * too). */
static int named_as_missing(const char *report, int r, int n) {
  char tail[64];
  snprintf(tail, sizeof tail, " of %d did not answer", n);
  const char *end = strstr(report, tail);
  if (!end) return 0;
  const char *list = end;
  while (list > report && !(list[-1] == ':' || list[-1] == '.')) list--;
  for (const char *p = list; p < end; p++) {
    if (*p < '0' || *p > '9' || (p > list && p[-1] >= '0' && p[-1] <= '9')) continue;
    if (atoi(p) == r) return 1;
  }
  return 0;
}

START_TEST(setup__a_late_rank_is_named_on_time_and_completes_against_the_posted_collective) {
  int me = cg_mpi_rank(), n = cg_mpi_size(), late = n - 1;
  const double timeout_s = 2.0;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  uint64_t mine[3] = {100 + (uint64_t)me, 7, 1000 - (uint64_t)me}, least[3] = {0, 0, 0};
  if (me == late) cg_test_nap(timeout_s + 1.0);
  double began = cg_test_now_s();
  cg_status_t st = cg_mpi_setup_min(least, mine, 3, MPI_UINT64_T, comm, timeout_s, WHERE, "the test's stage");
  double waited = cg_test_now_s() - began;
  if (me == late) {
    /* the others' collectives stay posted: this one completes against them */
    ck_assert_msg(st == CG_SUCCESS, "late rank %d: %s", me, cg_error_last());
    ck_assert(least[0] == 100 && least[1] == 7 && least[2] == 1000 - (uint64_t)(n - 1));
  } else {
    ck_assert_msg(st == CG_ERR_TIMEOUT, "rank %d: %s", me, cg_status_string(st));
    ck_assert_msg(named_as_missing(cg_error_last(), late, n) && strstr(cg_error_last(), WHERE " (the test's stage)") &&
                      strstr(cg_error_last(), "MPI_Iallreduce stays posted"),
                  "rank %d: %s", me, cg_error_last());
    /* the deadline, then a roll call's grace (0.5% of the timeout) */
    ck_assert_msg(waited >= timeout_s && waited < timeout_s + 0.5, "rank %d gave up after %.3f s", me, waited);
    ck_assert(least[0] == 0 && least[1] == 0 && least[2] == 0); /* the caller's memory untouched */
  }
  MPI_Barrier(MPI_COMM_WORLD);
  drain(comm);
  MPI_Comm_free(&comm);
}
END_TEST

/* The last rank calls cg_comm_create after the others gave up on its
 * arrival: its own arrival completes against their posted barrier, and it
 * must then report at the next wait instead of waiting in MPI for ever (it
 * used to, in MPI_Comm_dup). On a duplicate of the world: collectives stay
 * posted on it. */
START_TEST(setup__a_rank_that_comes_after_the_others_gave_up_reports_instead_of_hanging) {
  int me = cg_mpi_rank(), n = cg_mpi_size(), late = n - 1;
  MPI_Comm world;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  o.timeout_s = 1.0;
  if (me == late) cg_test_nap(2 * o.timeout_s);
  double began = cg_test_now_s();
  cg_comm_t *comm = NULL;
  cg_status_t st = cg_comm_create(&comm, world, &o);
  double waited = cg_test_now_s() - began;
  ck_assert_msg(st == CG_ERR_TIMEOUT && comm == NULL, "rank %d: %s: %s", me, cg_status_string(st), cg_error_last());
  const char *stage = me == late ? "cg_comm_create (each rank's choice of its device)"
                                 : "cg_comm_create (the ranks' arrival)";
  ck_assert_msg(strstr(cg_error_last(), stage), "rank %d: %s", me, cg_error_last());
  if (me != late) ck_assert_msg(named_as_missing(cg_error_last(), late, n), "rank %d: %s", me, cg_error_last());
  ck_assert_msg(waited >= o.timeout_s && waited < o.timeout_s + 0.5, "rank %d gave up after %.3f s", me, waited);
  MPI_Barrier(MPI_COMM_WORLD);
  drain(world);
}
END_TEST

#if CG_HAVE_CUDA /* without CUDA the option is refused before any collective, on that rank alone */
/* While set, every process sees this many CUDA devices, GPU or not: the
 * program's own cudaGetDeviceCount, exported, takes the library's calls. */
static int fake_devices;
cudaError_t cudaGetDeviceCount(int *count) {
  if (fake_devices) {
    *count = fake_devices;
    return cudaSuccess;
  }
  cudaError_t (*real)(int *);
  *(void **)&real = dlsym(RTLD_NEXT, "cudaGetDeviceCount");
  return real ? real(count) : cudaErrorUnknown;
}

/* The same late rank on a communicator that chooses each rank's device by
 * its local rank (MPI_Comm_split_type counts the node's ranks, a blocking
 * collective the others never make): it must report at the round before. */
START_TEST(setup__a_late_rank_choosing_its_device_by_local_rank_reports_instead_of_hanging) {
  int me = cg_mpi_rank(), n = cg_mpi_size(), late = n - 1;
  MPI_Comm world;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  fake_devices = 1;
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  o.timeout_s = 1.0;
  o.backend = CG_BACKEND_MPI;
  o.device = CG_DEVICE_LOCAL_RANK;
  if (me == late) cg_test_nap(2 * o.timeout_s);
  double began = cg_test_now_s();
  cg_comm_t *comm = NULL;
  cg_status_t st = cg_comm_create(&comm, world, &o);
  double waited = cg_test_now_s() - began;
  fake_devices = 0;
  ck_assert_msg(st == CG_ERR_TIMEOUT && comm == NULL, "rank %d: %s: %s", me, cg_status_string(st), cg_error_last());
  const char *stage = me == late ? "cg_comm_create (the ranks' arrival, before counting the node's ranks)"
                                 : "cg_comm_create (the ranks' arrival)";
  ck_assert_msg(strstr(cg_error_last(), stage), "rank %d: %s", me, cg_error_last());
  ck_assert_msg(named_as_missing(cg_error_last(), me == late ? 0 : late, n), "rank %d: %s", me, cg_error_last());
  ck_assert_msg(waited >= o.timeout_s && waited < o.timeout_s + 0.5, "rank %d gave up after %.3f s", me, waited);
  MPI_Barrier(MPI_COMM_WORLD);
  drain(world);
}
END_TEST

/* Every rank asks for the device of its local rank (the choice is collective:
 * the node's ranks are counted) on device buffers over MPI, every process
 * seeing one device, and CG_DEVICE names no device on the last rank alone:
 * its choice fails there, the others' succeeds, and they must hear of it
 * before the backend's collectives (without the agreement they wait there
 * for the last rank, which has left). */
START_TEST(setup__a_rank_that_cannot_choose_its_device_fails_cg_comm_create_everywhere) {
  int me = cg_mpi_rank(), n = cg_mpi_size(), odd = n - 1;
  const char *given = getenv("CG_DEVICE");
  char *saved = given ? strdup(given) : NULL;
  fake_devices = 1;
  for (int timed = 0; timed < 2; timed++) {
    cg_comm_opts_t o = CG_COMM_OPTS_INIT;
    o.timeout_s = timed ? 30.0 : -1.0; /* negative: no timeout, MPI's blocking collectives */
    o.backend = CG_BACKEND_MPI;
    o.device = CG_DEVICE_LOCAL_RANK;
    if (me == odd) setenv("CG_DEVICE", "99999", 1);
    cg_comm_t *comm = NULL;
    cg_status_t st = cg_comm_create(&comm, MPI_COMM_WORLD, &o);
    if (saved)
      setenv("CG_DEVICE", saved, 1);
    else
      unsetenv("CG_DEVICE");
    ck_assert_msg(st != CG_SUCCESS && comm == NULL, "rank %d: created", me);
    if (me == odd)
      ck_assert_msg(strstr(cg_error_last(), "CG_DEVICE='99999'"), "rank %d: %s", me, cg_error_last());
    else
      ck_assert_msg(st == CG_ERR_BACKEND && strstr(cg_error_last(), "another rank could not choose its device"),
                    "rank %d: %s: %s", me, cg_status_string(st), cg_error_last());
  }
  /* and the world's communicator still pairs collectives as before */
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  ck_assert_int_eq(sum, n);
  fake_devices = 0;
  free(saved);
}
END_TEST
#endif

int main(void) {
  Suite *s = suite_create("mpi_setup");
  TCase *t = cg_mpi_tcase("setup");
  tcase_add_test(t, setup__min_bcast_and_dup_match_the_blocking_collectives_with_and_without_a_timeout);
  tcase_add_test(t, setup__a_late_rank_is_named_on_time_and_completes_against_the_posted_collective);
  tcase_add_test(t, setup__a_rank_that_comes_after_the_others_gave_up_reports_instead_of_hanging);
#if CG_HAVE_CUDA
  tcase_add_test(t, setup__a_rank_that_cannot_choose_its_device_fails_cg_comm_create_everywhere);
  tcase_add_test(t, setup__a_late_rank_choosing_its_device_by_local_rank_reports_instead_of_hanging);
#endif
  suite_add_tcase(s, t);
  return cg_mpi_test_main(s);
}
