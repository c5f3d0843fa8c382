/* Profiles (sched/plan/plan_measure.c): the stamps' own cost taken out of a
 * profiled replay (cg_profile_remove_stamps). Plans are built by hand here:
 * the correction reads only steps, lanes, dependencies and issue units, and
 * the expected times are worked out from the timeline of the stamps on each
 * chain, independently of the code's counting. Random timelines (integer
 * microseconds, integer stamp costs) check the exact inverse on a chain;
 * copies and tunings round-trip. */
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"
#include "test_support.h"

#define MAX_STEPS 8

/* A plan of `n` steps, one unit each in index order unless `unit_of` groups
 * them, on `lane` lanes, with deps[i] a list ended by UINT32_MAX. */
typedef struct toy {
  cg_plan_t plan;
  cg_step_t steps[MAX_STEPS];
  uint32_t deps[MAX_STEPS][MAX_STEPS];
  uint32_t order[MAX_STEPS];
  cg_issue_unit_t units[MAX_STEPS];
} toy_t;

static void toy_init(toy_t *t, uint32_t n, uint32_t n_lanes, const uint32_t *lane, const uint32_t *unit_of,
                     const uint32_t deps[][MAX_STEPS]) {
  memset(t, 0, sizeof *t);
  t->plan.steps = t->steps;
  t->plan.n_steps = n;
  t->plan.n_lanes = n_lanes;
  t->plan.issue_order = t->order;
  t->plan.units = t->units;
  for (uint32_t i = 0; i < n; i++) {
    t->steps[i].lane = lane[i];
    t->steps[i].deps = t->deps[i];
    for (uint32_t e = 0; deps[i][e] != UINT32_MAX; e++) t->deps[i][t->steps[i].n_deps++] = deps[i][e];
    t->order[i] = i;
    uint32_t u = unit_of ? unit_of[i] : i;
    if (u + 1 > t->plan.n_units) t->plan.n_units = u + 1;
    if (!t->units[u].n) t->units[u].first = i, t->units[u].lane = lane[i];
    t->units[u].n++;
  }
}

static cg_profile_t profile_of(uint32_t n, const double *start, const double *end) {
  cg_profile_t p = {malloc(n * sizeof(double)), malloc(n * sizeof(double)), n};
  ck_assert(p.start_us && p.end_us);
  memcpy(p.start_us, start, n * sizeof(double));
  memcpy(p.end_us, end, n * sizeof(double));
  return p;
}

/* Lane 0: a then b (after a); lane 1: c after a. Each stamp costs d after
 * the stamp before it on its chain: the replay's start stamp (time 0), a's
 * start stamp (d), a runs 10 us, its end stamp (10 + 2d); b's start stamp
 * follows a's end stamp (10 + 3d), b runs 10 (end stamp 20 + 4d); c's start
 * stamp waits for a's end stamp too (10 + 3d), c runs 5 (end 15 + 4d). */
START_TEST(plan_measure__stamps_by_hand) {
  static const uint32_t lane[] = {0, 0, 1};
  static const uint32_t deps[][MAX_STEPS] = {{UINT32_MAX}, {0, UINT32_MAX}, {0, UINT32_MAX}};
  toy_t t;
  toy_init(&t, 3, 2, lane, NULL, deps);
  const double d = 2;
  double start[] = {d, 10 + 3 * d, 10 + 3 * d}, end[] = {10 + 2 * d, 20 + 4 * d, 15 + 4 * d};
  cg_profile_t p = profile_of(3, start, end);
  cg_profile_remove_stamps(&p, &t.plan, d);
  const double want_start[] = {0, 10, 10}, want_end[] = {10, 20, 15};
  for (int i = 0; i < 3; i++) {
    ck_assert_msg(p.start_us[i] == want_start[i], "step %d starts at %g, not %g", i, p.start_us[i], want_start[i]);
    ck_assert_msg(p.end_us[i] == want_end[i], "step %d ends at %g, not %g", i, p.end_us[i], want_end[i]);
  }
  cg_profile_free(&p);
}
END_TEST

/* A grouped unit: its start stamps come first (one after another), then its
 * steps, then its end stamps. Two sends x and y grouped after step a. */
START_TEST(plan_measure__stamps_of_a_group) {
  static const uint32_t lane[] = {0, 1, 1};
  static const uint32_t unit_of[] = {0, 1, 1};
  static const uint32_t deps[][MAX_STEPS] = {{UINT32_MAX}, {0, UINT32_MAX}, {0, UINT32_MAX}};
  toy_t t;
  toy_init(&t, 3, 2, lane, unit_of, deps);
  const double d = 3;
  /* a: start stamp d, end stamp 4 + 2d; x's start stamp 4 + 3d, y's 4 + 4d;
   * both run 6 us after y's start stamp; end stamps 10 + 5d and 10 + 6d */
  double start[] = {d, 4 + 3 * d, 4 + 4 * d}, end[] = {4 + 2 * d, 10 + 5 * d, 10 + 6 * d};
  cg_profile_t p = profile_of(3, start, end);
  cg_profile_remove_stamps(&p, &t.plan, d);
  const double want_start[] = {0, 4, 4}, want_end[] = {4, 10, 10};
  for (int i = 0; i < 3; i++) {
    ck_assert_msg(p.start_us[i] == want_start[i], "step %d starts at %g, not %g", i, p.start_us[i], want_start[i]);
    ck_assert_msg(p.end_us[i] == want_end[i], "step %d ends at %g, not %g", i, p.end_us[i], want_end[i]);
  }
  cg_profile_free(&p);
}
END_TEST

/* A grouped unit that another lane waits for: the event that lane waits on
 * is recorded after all of the unit's end stamps. x and y (grouped, lane 0)
 * run from 0 to 6; z (lane 1, after x) runs 3 us once both end stamps of the
 * group have run: its start stamp is the fifth on the chain. */
START_TEST(plan_measure__stamps_after_a_group) {
  static const uint32_t lane[] = {0, 0, 1};
  static const uint32_t unit_of[] = {0, 0, 1};
  static const uint32_t deps[][MAX_STEPS] = {{UINT32_MAX}, {UINT32_MAX}, {0, UINT32_MAX}};
  toy_t t;
  toy_init(&t, 3, 2, lane, unit_of, deps);
  const double d = 2;
  double start[] = {d, 2 * d, 6 + 5 * d}, end[] = {6 + 3 * d, 6 + 4 * d, 9 + 6 * d};
  cg_profile_t p = profile_of(3, start, end);
  cg_profile_remove_stamps(&p, &t.plan, d);
  const double want_start[] = {0, 0, 6}, want_end[] = {6, 6, 9};
  for (int i = 0; i < 3; i++) {
    ck_assert_msg(p.start_us[i] == want_start[i], "step %d starts at %g, not %g", i, p.start_us[i], want_start[i]);
    ck_assert_msg(p.end_us[i] == want_end[i], "step %d ends at %g, not %g", i, p.end_us[i], want_end[i]);
  }
  cg_profile_free(&p);
}
END_TEST

/* A random chain on one lane (a backward pass): durations w_i; with stamps,
 * step i starts after 2i + 1 stamps and ends after 2i + 2. */
START_TEST(plan_measure__random_chain_is_restored) {
  srand(cg_test_seed() + (unsigned)_i);
  uint32_t n = 1 + (uint32_t)(rand() % MAX_STEPS);
  uint32_t lane[MAX_STEPS] = {0}, deps[MAX_STEPS][MAX_STEPS];
  for (uint32_t i = 0; i < n; i++) {
    deps[i][0] = i ? i - 1 : UINT32_MAX;
    deps[i][1] = UINT32_MAX;
  }
  toy_t t;
  toy_init(&t, n, 1, lane, NULL, (const uint32_t(*)[MAX_STEPS])deps);
  double d = 1 + rand() % 4, real_start[MAX_STEPS], real_end[MAX_STEPS], start[MAX_STEPS], end[MAX_STEPS];
  double now = 0;
  for (uint32_t i = 0; i < n; i++) {
    real_start[i] = now;
    now += rand() % 50;
    real_end[i] = now;
    start[i] = real_start[i] + (2 * i + 1) * d;
    end[i] = real_end[i] + (2 * i + 2) * d;
  }
  cg_profile_t p = profile_of(n, start, end);
  cg_profile_remove_stamps(&p, &t.plan, d);
  for (uint32_t i = 0; i < n; i++) {
    ck_assert_msg(p.start_us[i] == real_start[i], "step %u of %u: start %g, not %g (d %g)", i, n, p.start_us[i],
                  real_start[i], d);
    ck_assert_msg(p.end_us[i] == real_end[i], "step %u of %u: end %g, not %g", i, n, p.end_us[i], real_end[i]);
  }
  cg_profile_free(&p);
}
END_TEST

/* No stamp cost (the host executor's clock reads): nothing moves. */
START_TEST(plan_measure__no_cost_no_change) {
  static const uint32_t lane[] = {0, 1};
  static const uint32_t deps[][MAX_STEPS] = {{UINT32_MAX}, {0, UINT32_MAX}};
  toy_t t;
  toy_init(&t, 2, 2, lane, NULL, deps);
  double start[] = {1.5, 7.25}, end[] = {3, 9};
  cg_profile_t p = profile_of(2, start, end);
  cg_profile_remove_stamps(&p, &t.plan, 0);
  ck_assert(p.start_us[0] == 1.5 && p.start_us[1] == 7.25 && p.end_us[0] == 3 && p.end_us[1] == 9);
  cg_profile_free(&p);
}
END_TEST

START_TEST(plan_measure__copies_are_equal_and_separate) {
  srand(cg_test_seed());
  uint32_t n = 1 + (uint32_t)(rand() % 50);
  cg_profile_t p = {malloc(n * sizeof(double)), malloc(n * sizeof(double)), n}, q;
  cg_tuning_t t = {malloc(n * sizeof(double)), n, malloc(2 * sizeof(cg_comm_cost_t)), 2, 0}, u;
  ck_assert(p.start_us && p.end_us && t.ready_us && t.costs);
  for (uint32_t i = 0; i < n; i++) p.start_us[i] = rand() % 1000, p.end_us[i] = rand() % 1000, t.ready_us[i] = i;
  t.costs[0] = (cg_comm_cost_t){NULL, 6.5, 3e5, 0, {0}};
  t.costs[1] = (cg_comm_cost_t){(const cg_comm_t *)&t, 20, 1e4, 2.5, {0}};
  t.costs[1].path.dtypes = 1u, t.costs[1].path.path_us[3] = 4.25, t.costs[1].path.library_us[3] = 9.5;
  ck_assert_int_eq(cg_profile_copy(&q, &p, "test"), CG_SUCCESS);
  ck_assert_int_eq(cg_tuning_copy(&u, &t, "test"), CG_SUCCESS);
  ck_assert(q.n_steps == n && !memcmp(q.start_us, p.start_us, n * sizeof(double)) &&
            !memcmp(q.end_us, p.end_us, n * sizeof(double)) && q.start_us != p.start_us);
  ck_assert(u.n_nodes == n && !memcmp(u.ready_us, t.ready_us, n * sizeof(double)) && u.n_costs == 2);
  ck_assert(cg_tuning_cost(&u, (const cg_comm_t *)&t) == &u.costs[1] && u.costs[1].alpha_us == 20 &&
            u.costs[1].overlap_us == 2.5 && !memcmp(&u.costs[1].path, &t.costs[1].path, sizeof t.costs[1].path));
  ck_assert(cg_tuning_cost(&u, (const cg_comm_t *)&u) == NULL);
  cg_profile_free(&p), cg_profile_free(&q), cg_tuning_free(&t), cg_tuning_free(&u);
  ck_assert(!q.start_us && !u.costs);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("plan_measure");
  TCase *c = tcase_create("stamps");
  tcase_set_timeout(c, 30);
  tcase_add_test(c, plan_measure__stamps_by_hand);
  tcase_add_test(c, plan_measure__stamps_of_a_group);
  tcase_add_test(c, plan_measure__stamps_after_a_group);
  tcase_add_loop_test(c, plan_measure__random_chain_is_restored, 0, 50);
  tcase_add_test(c, plan_measure__no_cost_no_change);
  tcase_add_test(c, plan_measure__copies_are_equal_and_separate);
  suite_add_tcase(s, c);
  return s;
}

int main(void) { return cg_test_main(suite()); }
