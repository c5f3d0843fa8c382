/* The MPI control channel (backends/mpi/mpi_control.c) on its own: the
 * bounded allgather a backend's warm-up agrees through (every rank's bytes,
 * and giving up when its wait says so), the deadline an arena's set-up
 * waits under, and the roll call: which ranks a roll call names, what the
 * others say they wait in, and the two threads of a rank that use one
 * communicator at once (the program's and the device watchdog's monitor):
 * two roll calls at once each get every answer, and so does every call that
 * two threads answer. Ranks that answer poll until rank 0 says it is done
 * (an MPI_Ibarrier, so that they keep answering while they wait). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi/mpi_backend.h"
#include "mpi_test.h"

#define TIMEOUT_S 50.0 /* the grace is 0.5% of it, at most 0.25 s: long on a loaded machine */

static void expect_in(const char *text, const char *part) {
  ck_assert_msg(strstr(text, part) != NULL, "rank %d: '%s' not in the roll call: %s", cg_mpi_rank(), part, text);
}

/* Answers roll calls on `comm` until the barrier that rank 0 joins when it
 * is done completes; a rank that is not to answer only waits. */
static void answer_until_done(MPI_Comm comm, MPI_Comm done_comm, const char *waiting_in, int answer) {
  MPI_Request done;
  MPI_Ibarrier(done_comm, &done);
  for (int flag = 0; !flag;) {
    if (answer) cg_mpi_answer_roll_calls(comm, waiting_in);
    MPI_Test(&done, &flag, MPI_STATUS_IGNORE);
  }
}

/* Takes the roll calls this rank did not answer (and answers that came
 * after their call's grace), so that none outlives the communicator. */
static void drain(MPI_Comm comm) {
  for (int flag = 1; flag;) {
    MPI_Message message;
    MPI_Status status;
    char message_bytes[1024]; /* a call or a late answer: both far smaller */
    MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &message, &status);
    if (flag) MPI_Mrecv(message_bytes, (int)sizeof message_bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
  }
}

START_TEST(control__roll_call_names_the_ranks_that_do_not_answer_and_where_the_others_wait) {
  int me = cg_mpi_rank(), n = cg_mpi_size(), silent = n - 1;
  MPI_Comm comm, done_comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_dup(MPI_COMM_WORLD, &done_comm);
  char report[1024] = "";
  if (me == 0) {
    cg_mpi_roll_call(report, sizeof report, comm, "plan 'x', replay 3", TIMEOUT_S);
    MPI_Request done;
    MPI_Ibarrier(done_comm, &done);
    MPI_Wait(&done, MPI_STATUS_IGNORE);
  } else {
    /* rank 1 waits where rank 0 does; the others in between elsewhere */
    answer_until_done(comm, done_comm, me == 1 ? "plan 'x', replay 3" : "plan 'y', replay 7", me != silent);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  drain(comm);
  if (me == 0) {
    char silent_text[64];
    snprintf(silent_text, sizeof silent_text, "rank %d of %d did not answer", silent, n);
    expect_in(report, silent_text);
    if (n > 2) expect_in(report, "rank 1 waits there too");
    if (n > 3) expect_in(report, n > 4 ? "wait in plan 'y', replay 7" : "rank 2 waits in plan 'y', replay 7");
    ck_assert_msg(n > 3 || !strstr(report, "plan 'y'"), "nobody waits in plan 'y': %s", report);
  }
  MPI_Comm_free(&comm);
  MPI_Comm_free(&done_comm);
}
END_TEST

typedef struct caller {
  MPI_Comm comm;
  const char *waiting_in;
  char report[1024];
} caller_t;

static void *call_the_roll(void *arg) {
  caller_t *c = arg;
  cg_mpi_roll_call(c->report, sizeof c->report, c->comm, c->waiting_in, TIMEOUT_S);
  return NULL;
}

typedef struct answering {
  MPI_Comm comm, done; /* where to answer, and the barrier that ends it */
} answering_t;

static void *answer_main(void *arg) {
  const answering_t *a = arg;
  answer_until_done(a->comm, a->done, "plan 'a', replay 1", 1);
  return NULL;
}

/* Rank 0 calls the roll from two threads at once, `rounds` times; every
 * other rank answers from `answerers` threads at once. Each roll call must
 * hear every rank: neither calling thread may take the other's answers
 * (with one answer tag they did, and this failed at once). Two answering
 * threads take each call with a matched probe, so that both cannot see one
 * call and one then wait in MPI_Recv; MPICH here never showed that race
 * with plain probes, so the second case checks only that every call is
 * answered. */
static void two_threads(int answerers, int rounds) {
  int provided = 0;
  MPI_Query_thread(&provided);
  ck_assert_msg(provided == MPI_THREAD_MULTIPLE, "the suite asks for MPI_THREAD_MULTIPLE, MPI gives %d", provided);
  int me = cg_mpi_rank();
  MPI_Comm comm, done_comm[2];
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  for (int t = 0; t < 2; t++) MPI_Comm_dup(MPI_COMM_WORLD, &done_comm[t]);
  for (int round = 0; round < rounds; round++) {
    if (me == 0) {
      caller_t callers[2] = {{comm, "plan 'a', replay 1", ""}, {comm, "plan 'b', replay 1", ""}};
      pthread_t threads[2];
      for (int t = 0; t < 2; t++) ck_assert_int_eq(pthread_create(&threads[t], NULL, call_the_roll, &callers[t]), 0);
      for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
      for (int t = 0; t < 2; t++) {
        MPI_Request done;
        MPI_Ibarrier(done_comm[t], &done);
        MPI_Wait(&done, MPI_STATUS_IGNORE);
      }
      for (int t = 0; t < 2; t++) expect_in(callers[t].report, "every rank answered");
    } else if (answerers == 1) {
      answer_until_done(comm, done_comm[0], "plan 'a', replay 1", 1);
      answer_until_done(comm, done_comm[1], "plan 'a', replay 1", 1);
    } else {
      /* two threads answering: each stops once rank 0 is done with its own
       * barrier, so both answer throughout the roll calls */
      answering_t args[2] = {{comm, done_comm[0]}, {comm, done_comm[1]}};
      pthread_t threads[2];
      for (int t = 0; t < 2; t++) ck_assert_int_eq(pthread_create(&threads[t], NULL, answer_main, &args[t]), 0);
      for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  drain(comm);
  MPI_Comm_free(&comm);
  for (int t = 0; t < 2; t++) MPI_Comm_free(&done_comm[t]);
}

START_TEST(control__two_threads_call_the_roll_at_once_and_each_hears_every_rank) { two_threads(1, 20); }
END_TEST

START_TEST(control__two_threads_answering_one_communicator_answer_every_call) { two_threads(2, 20); }
END_TEST

/* A wait (wait.h) that gives up at its give_up_after-th question. */
typedef struct polls {
  int asked, give_up_after;
} polls_t;

static int count_polls(void *ctx) {
  polls_t *p = ctx;
  return ++p->asked < p->give_up_after;
}

static unsigned char pattern(unsigned seed, int rank, size_t i) {
  uint32_t x = seed ^ (uint32_t)rank * 2654435761u ^ (uint32_t)i * 40503u;
  x ^= x >> 13;
  return (unsigned char)(x * 0x9E3779B1u >> 24);
}

static cg_mpi_comm_t *open_channel(void) {
  int level = 0;
  MPI_Query_thread(&level);
  cg_mpi_comm_t *m = NULL;
  ck_assert_int_eq(cg_mpi_comm_open(&m, MPI_COMM_WORLD, level, 0), CG_SUCCESS);
  return m;
}

START_TEST(control__allgather_within_hands_back_every_ranks_bytes_in_rank_order) {
  int me = cg_mpi_rank(), n = cg_mpi_size();
  cg_mpi_comm_t *m = open_channel();
  unsigned seed = (unsigned)time(NULL);
  MPI_Bcast(&seed, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
  for (size_t bytes = 0; bytes <= 4096; bytes = bytes ? 8 * bytes : 1) {
    unsigned char mine[4096], *all = malloc(bytes * (size_t)n + 1);
    ck_assert_ptr_nonnull(all);
    for (size_t i = 0; i < bytes; i++) mine[i] = pattern(seed, me, i);
    memset(all, 0xA5, bytes * (size_t)n + 1); /* poison, one byte past the end too */
    polls_t p = {0, 1 << 30};
    cg_wait_t wait = {count_polls, &p};
    ck_assert_int_eq(cg_mpi_control_allgather_within(m, mine, all, bytes, &wait, "a test round"), CG_SUCCESS);
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < bytes; i++)
        ck_assert_msg(all[(size_t)r * bytes + i] == pattern(seed, r, i), "rank %d: %zu bytes: rank %d's byte %zu",
                      me, bytes, r, i);
    ck_assert_msg(all[bytes * (size_t)n] == 0xA5, "rank %d: written past %zu bytes per rank", me, bytes);
    free(all);
  }
  cg_mpi_comm_close(m);
}
END_TEST

/* Rank 0 gives up while the others have not joined; they join after it
 * returned: its round stays posted and takes part (the library's copies),
 * and the channel refuses rank 0's next round at once naming the first. */
START_TEST(control__allgather_within_gives_up_when_its_wait_says_so_and_the_channel_refuses_after) {
  int me = cg_mpi_rank(), n = cg_mpi_size();
  cg_mpi_comm_t *m = open_channel();
  MPI_Comm after;
  MPI_Comm_dup(MPI_COMM_WORLD, &after);
  int mine = 1000 + me, *all = malloc((size_t)n * sizeof *all);
  ck_assert_ptr_nonnull(all);
  for (int r = 0; r < n; r++) all[r] = -1;
  if (me == 0) {
    polls_t p = {0, 50};
    cg_wait_t wait = {count_polls, &p};
    cg_status_t st = cg_mpi_control_allgather_within(m, &mine, all, sizeof mine, &wait, "plan 'w': a test round");
    ck_assert_int_eq(st, CG_ERR_TIMEOUT);
    ck_assert_int_eq(p.asked, 50);
    expect_in(cg_error_last(), "plan 'w': a test round");
    expect_in(cg_error_last(), "not every rank of the communicator took part");
    for (int r = 0; r < n; r++) ck_assert_int_eq(all[r], -1); /* nothing written into the caller's memory */
    st = cg_mpi_control_allgather_within(m, &mine, all, sizeof mine, NULL, "the next round");
    ck_assert_int_eq(st, CG_ERR_TIMEOUT);
    expect_in(cg_error_last(), "the next round");
    expect_in(cg_error_last(), "plan 'w': a test round");
    MPI_Barrier(after);
  } else {
    MPI_Barrier(after);
    ck_assert_int_eq(cg_mpi_control_allgather_within(m, &mine, all, sizeof mine, NULL, "a late round"), CG_SUCCESS);
    for (int r = 0; r < n; r++) ck_assert_int_eq(all[r], 1000 + r);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(all);
  MPI_Comm_free(&after);
  cg_mpi_comm_close(m);
}
END_TEST

/* Every rank but the last waits under a deadline of 0.5 s (as an NCCL
 * arena's set-up does under its communicator's timeout); the last calls the
 * roll meanwhile: every waiting rank answers with what it waits in, and
 * gives up at its deadline, not before and not much after. */
START_TEST(control__deadline_wait_answers_roll_calls_and_gives_up_at_its_deadline) {
  int me = cg_mpi_rank(), n = cg_mpi_size(), caller = n - 1;
  cg_mpi_comm_t *m = open_channel();
  const double deadline_s = 0.5;
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == caller) {
    char report[1024] = "";
    cg_mpi_control_roll_call(report, sizeof report, m, "a compile (test)", TIMEOUT_S);
    expect_in(report, "every rank answered");
    expect_in(report, n == 2 ? "rank 0 waits in cg_nccl_arena_create (test)" : "wait in cg_nccl_arena_create (test)");
  } else {
    cg_deadline_t d;
    double began = MPI_Wtime();
    cg_deadline_start(&d, deadline_s, cg_mpi_control_answer, m, "cg_nccl_arena_create (test)");
    ck_assert(d.timeout_s == deadline_s);
    long polls = 0;
    while (cg_deadline_go_on(&d)) polls++;
    ck_assert(d.expired);
    double waited = MPI_Wtime() - began;
    ck_assert_msg(waited >= deadline_s && waited < deadline_s + 0.25, "rank %d: gave up after %.3f s (deadline %.1f s)",
                  me, waited, deadline_s);
    ck_assert_msg(polls > 100, "rank %d: %ld polls", me, polls);
    /* no deadline: it goes on */
    cg_deadline_start(&d, 0, cg_mpi_control_answer, m, "no deadline");
    ck_assert(cg_deadline_go_on(&d) && d.timeout_s == 0 && !d.expired);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  drain(m->control);
  cg_mpi_comm_close(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_control");
  TCase *t = cg_mpi_tcase("control");
  tcase_add_test(t, control__roll_call_names_the_ranks_that_do_not_answer_and_where_the_others_wait);
  tcase_add_test(t, control__two_threads_call_the_roll_at_once_and_each_hears_every_rank);
  tcase_add_test(t, control__two_threads_answering_one_communicator_answer_every_call);
  tcase_add_test(t, control__allgather_within_hands_back_every_ranks_bytes_in_rank_order);
  tcase_add_test(t, control__allgather_within_gives_up_when_its_wait_says_so_and_the_channel_refuses_after);
  tcase_add_test(t, control__deadline_wait_answers_roll_calls_and_gives_up_at_its_deadline);
  suite_add_tcase(s, t);
  return cg_mpi_test_main(s);
}
