/* graph/comm.c: reference counting, the lookup registry, and the last
 * release that waits for an abort in flight (the watchdog's abort thread
 * marks a communicator `aborting` and holds no reference, so the
 * communicator is freed on the thread that lets go of it, after the abort;
 * when an abort outlasts the wait, its end frees the struct only). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
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

/* A backend whose host side (MPI) detaches: the thread that detached it and
 * whether destroy_impl had run before. */
static struct {
  atomic_int calls;
  pthread_t thread;
  int destroyed_before;
} detached;

static void record_detach(void *impl) {
  (void)impl;
  detached.thread = pthread_self();
  detached.destroyed_before = atomic_load(&destroyed.calls);
  atomic_fetch_add(&detached.calls, 1);
}

static const cg_comm_ops_t detaching_ops = {
    .backend_name = "detaching", .destroy_impl = record_destroy, .detach_host = record_detach};

static cg_comm_t *comm_with(const cg_comm_ops_t *ops) {
  memset(&destroyed, 0, sizeof destroyed);
  memset(&detached, 0, sizeof detached);
  cg_comm_t *comm = cg_comm_alloc(0, 1, ops, NULL);
  ck_assert_ptr_nonnull(comm);
  destroyed.comm = comm;
  return comm;
}

static cg_comm_t *recording_comm(void) { return comm_with(&recording_ops); }

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

/* The last release, on a thread of its own, so the test can see it wait. */
typedef struct {
  cg_comm_t *comm;
  atomic_int returned;
} destroyer_t;

static void *destroy_on_thread(void *arg) {
  destroyer_t *d = arg;
  cg_comm_destroy(d->comm);
  atomic_store(&d->returned, 1);
  return NULL;
}

START_TEST(comm__the_last_release_waits_for_the_abort_and_frees_on_its_own_thread) {
  cg_comm_t *comm = recording_comm();
  cg_comm_retain(comm); /* a plan's */
  cg_comm_abort_begin(comm);
  /* not the last reference: returns at once, whatever the abort does */
  double before = cg_test_now_s();
  cg_comm_release(comm);
  double waited = cg_test_now_s() - before;
  ck_assert_msg(waited < 2.0, "a release that is not the last waited %.3f s", waited);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 0);
  /* the last one waits while the abort runs (here: until this thread, the
   * abort, ends it) */
  destroyer_t d = {.comm = comm};
  pthread_t destroyer;
  ck_assert_int_eq(pthread_create(&destroyer, NULL, destroy_on_thread, &d), 0);
  cg_test_nap(0.3);
  ck_assert_int_eq(atomic_load(&d.returned), 0);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 0);
  double ended = cg_test_now_s();
  cg_comm_abort_end(comm); /* the abort touches it no more */
  ck_assert_int_eq(pthread_join(destroyer, NULL), 0);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 1);
  ck_assert(pthread_equal(destroyed.thread, destroyer));
  ck_assert_int_eq(destroyed.aborting_then, CG_COMM_ABORT_NONE);
  ck_assert_msg(destroyed.at >= ended, "freed %.3f s before the abort ended", ended - destroyed.at);
}
END_TEST

START_TEST(comm__an_abort_that_ends_first_leaves_the_destroy_to_the_last_release) {
  cg_comm_t *comm = recording_comm();
  cg_comm_retain(comm); /* a plan's */
  cg_comm_abort_begin(comm);
  cg_comm_abort_end(comm);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 0);
  cg_comm_release(comm);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 0);
  double before = cg_test_now_s();
  cg_comm_destroy(comm);
  double waited = cg_test_now_s() - before;
  ck_assert_msg(waited < 2.0, "the last release waited %.3f s after the abort had ended", waited);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 1);
  ck_assert(pthread_equal(destroyed.thread, pthread_self()));
}
END_TEST

static void restore_abort_wait(void) { cg_comm_abort_wait_s = 10.0; }

/* A hung abort: the destroy gives up, and the abort's end frees the struct
 * but not the backend's resources (their destroy would call MPI on the
 * abort thread). Under ASan a leaked struct or a second free fails it. */
START_TEST(comm__a_hung_abort_does_not_hang_the_destroy_and_its_end_frees_only_the_struct) {
  cg_comm_abort_wait_s = 0.1;
  cg_comm_t *comm = recording_comm();
  cg_comm_abort_begin(comm);
  double before = cg_test_now_s();
  cg_comm_destroy(comm); /* the abort has not ended: this thread ends it, below */
  double waited = cg_test_now_s() - before;
  ck_assert_msg(waited >= 0.1 && waited < 5.0, "the destroy returned after %.3f s (limit 0.1 s)", waited);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 0);
  ck_assert_int_eq(atomic_load(&comm->aborting), CG_COMM_ABORT_ORPHANED);
  destroyed.comm = NULL; /* freed by the next call */
  cg_comm_abort_end(comm);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 0);
}
END_TEST

START_TEST(comm__a_release_with_no_abort_in_flight_does_not_wait) {
  cg_comm_t *comm = recording_comm();
  double before = cg_test_now_s();
  cg_comm_destroy(comm);
  double waited = cg_test_now_s() - before;
  ck_assert_msg(waited < 2.0, "the last release waited %.3f s with no abort", waited);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 1);
}
END_TEST

/* The abort's end, on a thread of its own, as the watchdog's abort thread. */
static void *end_abort_on_thread(void *arg) {
  cg_comm_abort_end(arg);
  return NULL;
}

/* With a host side to detach the last release never waits: it frees MPI on
 * its own thread and the abort's end runs the rest (NCCL's teardown). */
START_TEST(comm__a_detachable_communicator_is_released_at_once_and_its_abort_ends_the_rest) {
  cg_comm_t *comm = comm_with(&detaching_ops);
  cg_comm_abort_begin(comm);
  double before = cg_test_now_s();
  cg_comm_destroy(comm);
  double waited = cg_test_now_s() - before;
  ck_assert_msg(waited < 0.5, "the last release waited %.3f s for a running abort", waited);
  ck_assert_int_eq(atomic_load(&detached.calls), 1);
  ck_assert(pthread_equal(detached.thread, pthread_self()));
  ck_assert_int_eq(detached.destroyed_before, 0);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 0);
  ck_assert_int_eq(atomic_load(&comm->aborting), CG_COMM_ABORT_ORPHANED);
  destroyed.comm = NULL; /* freed by the abort's end */
  pthread_t aborter;
  ck_assert_int_eq(pthread_create(&aborter, NULL, end_abort_on_thread, comm), 0);
  ck_assert_int_eq(pthread_join(aborter, NULL), 0);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 1);
  ck_assert(pthread_equal(destroyed.thread, aborter));
  ck_assert_int_eq(atomic_load(&detached.calls), 1);
}
END_TEST

/* An abort that ended before the last release: nothing to hand over, the
 * release frees everything itself and detaches nothing separately. */
START_TEST(comm__a_detachable_communicator_whose_abort_ended_is_freed_by_the_release) {
  cg_comm_t *comm = comm_with(&detaching_ops);
  cg_comm_abort_begin(comm);
  cg_comm_abort_end(comm);
  cg_comm_destroy(comm);
  ck_assert_int_eq(atomic_load(&detached.calls), 0);
  ck_assert_int_eq(atomic_load(&destroyed.calls), 1);
  ck_assert(pthread_equal(destroyed.thread, pthread_self()));
}
END_TEST

/* The first marker wins and runs the abort; later plans are refused with
 * its status and report, whatever a later marker says. */
START_TEST(comm__a_marked_communicator_refuses_with_the_first_status_and_report) {
  cg_comm_t *comm = recording_comm();
  ck_assert_cg_ok(cg_comm_refuse_if_aborted(comm, "first"));
  char report[80];
  snprintf(report, sizeof report, "plan 'p%u' ran a sequence the others did not", (unsigned)cg_test_below(1000));
  ck_assert_int_eq(cg_comm_mark_aborted(comm, CG_ERR_MISMATCH, report), 1);
  ck_assert_int_eq(cg_comm_mark_aborted(comm, CG_ERR_TIMEOUT, "a later timeout"), 0);
  ck_assert_int_eq(cg_comm_refuse_if_aborted(comm, "cg_plan_run"), CG_ERR_MISMATCH);
  const char *said = cg_error_last();
  ck_assert_msg(strstr(said, "cg_plan_run:") && strstr(said, "recording communicator") &&
                    strstr(said, "its ranks ran different sequences") && strstr(said, report) &&
                    !strstr(said, "a later timeout"),
                "%s", said);
  cg_comm_destroy(comm); /* frees the report: ASan sees a leak or a second free */
}
END_TEST

/* A marker without a report (or without memory for its copy) still marks:
 * the refusal names the cause and no report. */
START_TEST(comm__a_mark_without_a_report_still_refuses) {
  cg_comm_t *comm = recording_comm();
  ck_assert_int_eq(cg_comm_mark_aborted(comm, CG_SUCCESS, NULL), 1);
  ck_assert_int_eq(cg_comm_refuse_if_aborted(comm, "cg_compile"), CG_ERR_TIMEOUT);
  const char *said = cg_error_last();
  ck_assert_msg(strstr(said, "a replay on it timed out") && !strstr(said, "the replay that aborted it"), "%s", said);
  ck_assert_int_eq(cg_comm_mark_aborted(comm, CG_ERR_MISMATCH, "late"), 0);
  ck_assert_int_eq(cg_comm_refuse_if_aborted(comm, "cg_compile"), CG_ERR_TIMEOUT);
  cg_comm_destroy(comm);
}
END_TEST

/* Markers racing on threads: exactly one wins, and every refusal seen
 * after the status carries the winner's report. */
enum { RACERS = 8 };
static cg_comm_t *raced;
static atomic_int wins, torn;
static void *race_mark(void *arg) {
  char report[40];
  snprintf(report, sizeof report, "report of marker %d", (int)(intptr_t)arg);
  atomic_fetch_add(&wins, cg_comm_mark_aborted(raced, CG_ERR_MISMATCH, report));
  for (int k = 0; k < 100; k++)
    if (cg_comm_refuse_if_aborted(raced, "racer") != CG_SUCCESS && !strstr(cg_error_last(), "report of marker"))
      atomic_fetch_add(&torn, 1);
  return NULL;
}

START_TEST(comm__racing_markers_mark_once_and_refusals_always_carry_the_report) {
  for (int round = 0; round < 20; round++) {
    raced = recording_comm();
    atomic_store(&wins, 0);
    atomic_store(&torn, 0);
    pthread_t threads[RACERS];
    for (int t = 0; t < RACERS; t++)
      ck_assert_int_eq(pthread_create(&threads[t], NULL, race_mark, (void *)(intptr_t)t), 0);
    for (int t = 0; t < RACERS; t++) pthread_join(threads[t], NULL);
    ck_assert_int_eq(atomic_load(&wins), 1);
    ck_assert_int_eq(atomic_load(&torn), 0);
    cg_comm_destroy(raced);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("comm");
  TCase *tc = tcase_create("comm");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, NULL, restore_abort_wait);
  tcase_add_test(tc, comm__the_last_of_random_references_frees_once_and_lookups_end_with_it);
  tcase_add_test(tc, comm__the_last_release_waits_for_the_abort_and_frees_on_its_own_thread);
  tcase_add_test(tc, comm__an_abort_that_ends_first_leaves_the_destroy_to_the_last_release);
  tcase_add_test(tc, comm__a_hung_abort_does_not_hang_the_destroy_and_its_end_frees_only_the_struct);
  tcase_add_test(tc, comm__a_release_with_no_abort_in_flight_does_not_wait);
  tcase_add_test(tc, comm__a_detachable_communicator_is_released_at_once_and_its_abort_ends_the_rest);
  tcase_add_test(tc, comm__a_detachable_communicator_whose_abort_ended_is_freed_by_the_release);
  tcase_add_test(tc, comm__a_marked_communicator_refuses_with_the_first_status_and_report);
  tcase_add_test(tc, comm__a_mark_without_a_report_still_refuses);
  tcase_add_test(tc, comm__racing_markers_mark_once_and_refusals_always_carry_the_report);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
