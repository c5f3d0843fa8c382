/* graph/comm.c: reference counting, the lookup registry, and the last
 * release that waits for an abort in flight (the watchdog's abort thread
 * marks a communicator `aborting` and holds no reference, so the
 * communicator is freed on the thread that lets go of it, after the abort;
 * an abort that outlasts the wait frees it itself when it ends). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "comm_internal.h"
#include "test_support.h"

/* What destroy_impl saw: how often it ran, on which thread, when, and
 * whether an abort was still marked then. */
static struct {
  atomic_int calls;
  pthread_t thread;
  double at;
  int aborting_then;
  cg_comm_t *comm;
} destroyed;

static void record_destroy(void *impl) {
  (void)impl;
  destroyed.thread = pthread_self();
  destroyed.at = cg_test_now_s();
  destroyed.aborting_then = destroyed.comm ? atomic_load(&destroyed.comm->aborting) : -1;
  atomic_fetch_add(&destroyed.calls, 1);
}

static const cg_comm_ops_t recording_ops = {.backend_name = "recording", .destroy_impl = record_destroy};

static cg_comm_t *recording_comm(void) {
  memset(&destroyed, 0, sizeof destroyed);
  cg_comm_t *comm = cg_comm_alloc(0, 1, &recording_ops, NULL);
  ck_assert_ptr_nonnull(comm);
  destroyed.comm = comm;
  return comm;
}

START_TEST(comm__the_last_of_random_references_frees_once_and_lookups_end_with_it) {
  cg_test_reseed(1);
  for (int round = 0; round < 20; round++) {
    cg_comm_t *comm = recording_comm();
    uint64_t id = 0x5eed0000u + (uint64_t)round;
    comm->id = id;
    ck_assert(cg_comm_register(comm));
    int extra = 1 + (int)cg_test_below(8);
    for (int i = 0; i < extra; i++) {
      cg_comm_t *found = cg_comm_lookup(id); /* retains */
      ck_assert_ptr_eq(found, comm);
    }
    ck_assert_ptr_null(cg_comm_lookup(id + 1000));
    for (int i = 0; i < extra; i++) {
      cg_comm_release(comm);
      ck_assert_int_eq(atomic_load(&destroyed.calls), 0);
      ck_assert_ptr_eq(cg_comm_lookup(id), comm);
      cg_comm_release(comm); /* the lookup's */
    }
    cg_comm_destroy(comm);
    ck_assert_int_eq(atomic_load(&destroyed.calls), 1);
    ck_assert_ptr_null(cg_comm_lookup(id));
  }
  cg_comm_destroy(NULL);
}
END_TEST

typedef struct {
  cg_comm_t *comm;
  double seconds;
  double ended; /* when the "abort" let go of the communicator */
} fake_abort_t;

/* The watchdog's abort thread as cg_comm_release sees it: work, then clear
 * the mark, then never touch the communicator again. */
static void *fake_abort(void *arg) {
  fake_abort_t *a = arg;
  cg_test_nap(a->seconds);
  a->ended = cg_test_now_s();
  cg_comm_abort_end(a->comm);
  return NULL;
}

START_TEST(comm__the_last_release_waits_for_the_abort_and_frees_on_its_own_thread) {
  cg_comm_t *comm = recording_comm();
  cg_comm_retain(comm); /* a plan's */
  cg_comm_abort_begin(comm);
  fake_abort_t abort_job = {.comm = comm, .seconds = 0.2};
  pthread_t aborter;
  ck_assert_int_eq(pthread_create(&aborter, NULL, fake_abort, &abort_job), 0);
  /* not the last reference: returns at once, whatever the abort does */
  double before = cg_test_now_s();
  cg_comm_release(comm);
  double waited = cg_test_now_s() - before;
  ck_assert_msg(waited < 0.1, "a release that is not the last waited %.3f s", waited);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 0);
  /* the last one waits until the abort has let go */
  cg_comm_destroy(comm);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 1);
  ck_assert(pthread_equal(destroyed.thread, pthread_self()));
  ck_assert_int_eq(destroyed.aborting_then, 0);
  ck_assert_msg(destroyed.at >= abort_job.ended, "freed %.3f s before the abort ended", abort_job.ended - destroyed.at);
  ck_assert_int_eq(pthread_join(aborter, NULL), 0);
}
END_TEST

START_TEST(comm__a_hung_abort_does_not_hang_the_destroy_and_frees_the_communicator_when_it_ends) {
  cg_comm_abort_wait_s = 0.1;
  cg_comm_t *comm = recording_comm();
  cg_comm_abort_begin(comm);
  fake_abort_t abort_job = {.comm = comm, .seconds = 0.6};
  pthread_t aborter;
  ck_assert_int_eq(pthread_create(&aborter, NULL, fake_abort, &abort_job), 0);
  double before = cg_test_now_s();
  cg_comm_destroy(comm); /* gives up after 0.1 s */
  double waited = cg_test_now_s() - before;
  ck_assert_msg(waited >= 0.1 && waited < 0.4, "the destroy returned after %.3f s (limit 0.1 s)", waited);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 0);
  ck_assert_int_eq(pthread_join(aborter, NULL), 0);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 1);
  ck_assert(pthread_equal(destroyed.thread, aborter));
  ck_assert(destroyed.at >= abort_job.ended);
  cg_comm_abort_wait_s = 10.0;
}
END_TEST

START_TEST(comm__a_release_with_no_abort_in_flight_does_not_wait) {
  cg_comm_t *comm = recording_comm();
  double before = cg_test_now_s();
  cg_comm_destroy(comm);
  double waited = cg_test_now_s() - before;
  ck_assert_msg(waited < 0.1, "the last release waited %.3f s with no abort", waited);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 1);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("comm");
  TCase *tc = tcase_create("comm");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, comm__the_last_of_random_references_frees_once_and_lookups_end_with_it);
  tcase_add_test(tc, comm__the_last_release_waits_for_the_abort_and_frees_on_its_own_thread);
  tcase_add_test(tc, comm__a_hung_abort_does_not_hang_the_destroy_and_frees_the_communicator_when_it_ends);
  tcase_add_test(tc, comm__a_release_with_no_abort_in_flight_does_not_wait);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
