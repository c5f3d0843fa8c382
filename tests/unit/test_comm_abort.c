/* sched/plan/cuda/comm_abort.c: each communicator of a list aborted once,
 * by its first marker, with the status and report kept for later refusals;
 * hooks that never block inline, before the call returns; the others on a
 * thread of their own, so the caller returns at once however long they take,
 * and a destroy right after waits for them (no reference of the thread's). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "comm_abort.h"
#include "comm_internal.h"
#include "test_support.h"

#define MAX_COMMS 6
#define SLOW_ABORT_S 0.5

/* What one communicator's backend saw. */
typedef struct fake_impl {
  atomic_int aborts;
  pthread_t thread;       /* the abort's */
  double abort_ended;     /* when its hook returned */
  atomic_int destroys;
  double destroyed_at;
  int aborts_at_destroy;  /* hook calls finished when destroy_impl ran */
} fake_impl_t;

static void slow_abort(void *impl) {
  fake_impl_t *f = impl;
  f->thread = pthread_self();
  cg_test_nap(SLOW_ABORT_S);
  f->abort_ended = cg_test_now_s();
  atomic_fetch_add(&f->aborts, 1);
}

static void quick_abort(void *impl) {
  fake_impl_t *f = impl;
  f->thread = pthread_self();
  f->abort_ended = cg_test_now_s();
  atomic_fetch_add(&f->aborts, 1);
}

static void fake_destroy(void *impl) {
  fake_impl_t *f = impl;
  f->destroyed_at = cg_test_now_s();
  f->aborts_at_destroy = atomic_load(&f->aborts);
  atomic_fetch_add(&f->destroys, 1);
}

static const cg_backend_t blocking_backend = {.name = "blocking", .abort = slow_abort, .abort_never_blocks = 0};
static const cg_backend_t inline_backend = {.name = "inline", .abort = quick_abort, .abort_never_blocks = 1};
static const cg_comm_ops_t blocking_ops = {
    .backend_name = "blocking", .destroy_impl = fake_destroy, .backend = &blocking_backend};
static const cg_comm_ops_t inline_ops = {
    .backend_name = "inline", .destroy_impl = fake_destroy, .backend = &inline_backend};

static fake_impl_t impls[MAX_COMMS];

START_TEST(comm_abort__random_lists_abort_each_once_and_return_before_the_slow_ones) {
  cg_test_reseed(7);
  for (int round = 0; round < 8; round++) {
    memset(impls, 0, sizeof impls);
    int n = 1 + (int)cg_test_below(MAX_COMMS), blocking[MAX_COMMS], premarked[MAX_COMMS];
    cg_comm_t *comms[MAX_COMMS], *list[2 * MAX_COMMS];
    uint32_t listed = 0;
    int any_blocking = 0;
    for (int c = 0; c < n; c++) {
      blocking[c] = (int)cg_test_below(2);
      premarked[c] = cg_test_below(4) == 0;
      any_blocking |= blocking[c] && !premarked[c];
      comms[c] = cg_comm_alloc(0, 1, blocking[c] ? &blocking_ops : &inline_ops, &impls[c]);
      ck_assert_ptr_nonnull(comms[c]);
      if (premarked[c]) ck_assert(cg_comm_mark_aborted(comms[c], CG_ERR_MISMATCH, "an earlier failure"));
      list[listed++] = comms[c];
      if (cg_test_below(3) == 0) list[listed++] = comms[c]; /* named twice */
    }
    char report[64];
    snprintf(report, sizeof report, "round %d's timeout", round);
    double before = cg_test_now_s();
    cg_comm_abort_list(list, listed, 0, CG_ERR_TIMEOUT, report);
    double returned = cg_test_now_s() - before;
    ck_assert_msg(returned < SLOW_ABORT_S / 2, "round %d: returned after %.3f s (the slow aborts take %.1f s)", round,
                  returned, SLOW_ABORT_S);
    for (int c = 0; c < n; c++) {
      /* the inline ones are done, on this thread; the marks are set at once */
      if (!blocking[c] && !premarked[c]) {
        ck_assert_int_eq(atomic_load(&impls[c].aborts), 1);
        ck_assert(pthread_equal(impls[c].thread, pthread_self()));
      }
      cg_status_t refused = cg_comm_refuse_if_aborted(comms[c], "test");
      ck_assert_int_eq(refused, premarked[c] ? CG_ERR_MISMATCH : CG_ERR_TIMEOUT);
      ck_assert_msg(strstr(cg_error_last(), premarked[c] ? "an earlier failure" : report) != NULL,
                    "round %d comm %d: %s", round, c, cg_error_last());
    }
    /* destroyed at once: each last release waits for its abort, then frees */
    for (int c = 0; c < n; c++) cg_comm_destroy(comms[c]);
    double ended = cg_test_now_s();
    for (int c = 0; c < n; c++) {
      ck_assert_int_eq(atomic_load(&impls[c].aborts), premarked[c] ? 0 : 1);
      ck_assert_int_eq(atomic_load(&impls[c].destroys), 1);
      ck_assert_int_eq(impls[c].aborts_at_destroy, premarked[c] ? 0 : 1);
      if (blocking[c] && !premarked[c]) {
        ck_assert(!pthread_equal(impls[c].thread, pthread_self()));
        ck_assert(impls[c].destroyed_at >= impls[c].abort_ended);
      }
    }
    if (any_blocking)
      ck_assert_msg(ended - before >= SLOW_ABORT_S * 0.9, "round %d: the destroys did not wait for the aborts (%.3f s)",
                    round, ended - before);
  }
}
END_TEST

START_TEST(comm_abort__an_empty_list_does_nothing) {
  cg_comm_abort_list(NULL, 0, 0, CG_ERR_TIMEOUT, "nothing");
}
END_TEST

static cg_comm_t *each_comm[2];
static cg_comm_t *comm_at(const void *from, uint32_t i) {
  ck_assert_ptr_eq(from, each_comm);
  return each_comm[i];
}

START_TEST(comm_abort__each_takes_the_communicators_from_the_callback) {
  memset(impls, 0, sizeof impls);
  for (int c = 0; c < 2; c++) each_comm[c] = cg_comm_alloc(0, 1, &inline_ops, &impls[c]);
  cg_comm_abort_each(comm_at, each_comm, 2, 0, CG_ERR_TIMEOUT, "from the callback");
  for (int c = 0; c < 2; c++) {
    ck_assert_int_eq(atomic_load(&impls[c].aborts), 1);
    ck_assert_int_eq(cg_comm_refuse_if_aborted(each_comm[c], "test"), CG_ERR_TIMEOUT);
    cg_comm_destroy(each_comm[c]);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("comm_abort");
  TCase *tc = tcase_create("comm_abort");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, comm_abort__random_lists_abort_each_once_and_return_before_the_slow_ones);
  tcase_add_test(tc, comm_abort__an_empty_list_does_nothing);
  tcase_add_test(tc, comm_abort__each_takes_the_communicators_from_the_callback);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
