/* The watchdog's choice of marked steps (sched/exec/watch_marks.c) on random
 * plans made here: lanes, issue units of one or two steps of every kind
 * (user compute, collectives, host functions, packs and unpacks that copy or
 * not), dependencies on earlier units, and partial runs in which each lane
 * finishes its units in issue order and a step only after its dependencies.
 * The choice must mark every step a report has to name exactly, and the
 * marks must never call a step done that has not finished, nor leave one
 * undone once its lane's later marked step has finished. */
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"
#include "test_support.h"
#include "watch_marks.h"

enum { MAX_STEPS = 96, MAX_LANES = 5 };

typedef struct fake {
  cg_plan_t p;
  cg_step_t steps[MAX_STEPS];
  cg_issue_unit_t units[MAX_STEPS];
  uint32_t order[MAX_STEPS];
  cg_bucket_t buckets[MAX_STEPS];
  uint32_t deps[MAX_STEPS][MAX_STEPS], succs[MAX_STEPS][MAX_STEPS];
} fake_t;

static const cg_step_kind_t kinds[] = {CG_STEP_CUDA_NODE, CG_STEP_CUDA_NODE, CG_STEP_CUDA_NODE, CG_STEP_COLLECTIVE,
                                       CG_STEP_HOST_FUNC, CG_STEP_PACK, CG_STEP_UNPACK};

/* Steps in issue order (step i is the i-th issued), units of one step, or
 * two collectives of one lane (a group); each step depends on a few earlier
 * steps of other units. */
static void make(fake_t *f) {
  memset(f, 0, sizeof *f);
  uint32_t lanes = 1 + (uint32_t)cg_test_below(MAX_LANES), n = 1 + (uint32_t)cg_test_below(MAX_STEPS);
  uint32_t u = 0;
  for (uint32_t i = 0; i < n;) {
    uint32_t lane = (uint32_t)cg_test_below(lanes);
    cg_step_kind_t kind = kinds[cg_test_below(sizeof kinds / sizeof kinds[0])];
    uint32_t size = kind == CG_STEP_COLLECTIVE && i + 1 < n && cg_test_below(4) == 0 ? 2 : 1;
    f->units[u] = (cg_issue_unit_t){i, size, lane};
    for (uint32_t k = 0; k < size; k++, i++) {
      cg_step_t *s = &f->steps[i];
      s->kind = kind;
      s->lane = lane;
      s->unit = u;
      s->bucket = CG_NO_STEP;
      if (kind == CG_STEP_PACK || kind == CG_STEP_UNPACK) {
        s->bucket = i;
        f->buckets[i].n_pack = f->buckets[i].n_unpack = (uint32_t)cg_test_below(2);
      }
      f->order[i] = i;
      s->deps = f->deps[i];
      s->succs = f->succs[i];
      for (uint32_t d = 0; d < f->units[u].first; d++)
        if (cg_test_below(8) == 0) {
          s->deps[s->n_deps++] = d;
          f->steps[d].succs[f->steps[d].n_succs++] = i;
        }
    }
    u++;
  }
  f->p.steps = f->steps;
  f->p.n_steps = n;
  f->p.units = f->units;
  f->p.n_units = u;
  f->p.issue_order = f->order;
  f->p.n_lanes = lanes;
  f->p.buckets = f->buckets;
}

static int markless(const fake_t *f, uint32_t i) {
  const cg_step_t *s = &f->steps[i];
  return s->kind == CG_STEP_CUDA_NODE || (s->kind == CG_STEP_PACK && !f->buckets[i].n_pack) ||
         (s->kind == CG_STEP_UNPACK && !f->buckets[i].n_unpack);
}

/* The last unit of step i's lane: 1 if i's unit is it. */
static int last_of_lane(const fake_t *f, uint32_t i) {
  for (uint32_t u = f->steps[i].unit + 1; u < f->p.n_units; u++)
    if (f->units[u].lane == f->steps[i].lane) return 0;
  return 1;
}

START_TEST(watch_marks__every_step_a_report_names_is_marked) {
  cg_test_reseed(0x3a5c + (uint64_t)_i);
  for (int round = 0; round < 200; round++) {
    fake_t *f = malloc(sizeof *f);
    ck_assert_ptr_nonnull(f);
    make(f);
    uint8_t marked[MAX_STEPS];
    uint32_t witness[MAX_STEPS];
    memset(marked, 0xee, sizeof marked);
    memset(witness, 0xee, sizeof witness);
    cg_marks_choose(marked, witness, &f->p);
    uint32_t n_marked = 0;
    for (uint32_t i = 0; i < f->p.n_steps; i++) {
      const cg_step_t *s = &f->steps[i];
      int host_waits = 0;
      for (uint32_t e = 0; e < s->n_succs; e++) host_waits |= f->steps[s->succs[e]].kind == CG_STEP_HOST_FUNC;
      REQUIRE(marked[i] <= 1, "round %d step %u: marked is %u", round, i, marked[i]);
      n_marked += marked[i];
      if (!markless(f, i) || host_waits || last_of_lane(f, i))
        REQUIRE(marked[i], "round %d step %u (kind %d): must be marked", round, i, (int)s->kind);
      if (marked[i]) {
        REQUIRE(witness[i] == CG_NO_STEP, "round %d step %u: marked, yet witness %u", round, i, witness[i]);
        continue;
      }
      /* the witness: the first marked step after i on its lane */
      uint32_t want = CG_NO_STEP;
      for (uint32_t j = i + 1; j < f->p.n_steps && want == CG_NO_STEP; j++)
        if (f->steps[j].lane == s->lane && marked[j]) want = j;
      REQUIRE(want != CG_NO_STEP && witness[i] == want, "round %d step %u: witness %u, the lane's next mark %u",
              round, i, witness[i], want);
    }
    /* a chain of user compute on one lane keeps only its last mark */
    if (f->p.n_lanes == 1) {
      int all_compute = 1;
      for (uint32_t i = 0; i < f->p.n_steps; i++) all_compute &= f->steps[i].kind == CG_STEP_CUDA_NODE;
      if (all_compute) REQUIRE(n_marked == 1, "round %d: %u marks on one lane of user compute", round, n_marked);
    }
    free(f);
  }
}
END_TEST

/* Random partial runs, replay 2 after a complete replay 1: the marks of the
 * finished marked steps count 2, the others 1. */
START_TEST(watch_marks__marks_never_claim_an_unfinished_step) {
  cg_test_reseed(0x77e1 + (uint64_t)_i);
  for (int round = 0; round < 200; round++) {
    fake_t *f = malloc(sizeof *f);
    ck_assert_ptr_nonnull(f);
    make(f);
    uint32_t n = f->p.n_steps;
    uint8_t marked[MAX_STEPS], finished[MAX_STEPS] = {0};
    uint32_t witness[MAX_STEPS];
    unsigned marks[MAX_STEPS];
    cg_marks_choose(marked, witness, &f->p);
    /* finish steps in a random order that respects each lane's issue order
     * and the dependencies, for a random number of moves */
    uint32_t moves = (uint32_t)cg_test_below(n + 1);
    for (uint32_t m = 0; m < moves; m++) {
      uint32_t can[MAX_STEPS], n_can = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (finished[i]) continue;
        int ok = 1;
        for (uint32_t j = 0; j < i && ok; j++)
          if (f->steps[j].lane == f->steps[i].lane && f->steps[j].unit != f->steps[i].unit) ok = finished[j];
        for (uint32_t e = 0; e < f->steps[i].n_deps && ok; e++) ok = finished[f->steps[i].deps[e]];
        if (ok) can[n_can++] = i;
      }
      if (!n_can) break;
      finished[can[cg_test_below(n_can)]] = 1;
    }
    int all = 1;
    for (uint32_t i = 0; i < n; i++) {
      marks[i] = marked[i] && finished[i] ? 2u : 1u;
      all &= finished[i];
    }
    for (uint32_t i = 0; i < n; i++) {
      int done = cg_marks_step_done(&f->p, marked, witness, marks, i, 2);
      REQUIRE(!done || finished[i], "round %d step %u: called done, not finished", round, i);
      if (all) REQUIRE(done, "round %d step %u: the replay finished, the step is not done", round, i);
      if (!marked[i] && finished[witness[i]]) REQUIRE(done, "round %d step %u: its witness finished", round, i);
    }
    /* with no choice made, every step speaks for itself */
    for (uint32_t i = 0; i < n; i++) {
      marks[i] = finished[i] ? 2u : 1u;
      REQUIRE(cg_marks_step_done(&f->p, NULL, NULL, marks, i, 2) == finished[i], "round %d step %u: unmarked plan",
              round, i);
    }
    free(f);
  }
}
END_TEST

/* The end unit against a closure computed here: step j runs before step i
 * when i depends on a step of j's unit (its events are recorded after the
 * whole unit) or i's lane issued j's unit earlier, and so on. */
START_TEST(watch_marks__end_unit_is_the_last_unit_everything_precedes) {
  cg_test_reseed(0x5e1d + (uint64_t)_i);
  int seen_some = 0, seen_none = 0;
  for (int round = 0; round < 300; round++) {
    fake_t *f = malloc(sizeof *f);
    ck_assert_ptr_nonnull(f);
    make(f);
    /* sometimes a last unit that waits for every lane's last step */
    if (cg_test_below(2) == 0) {
      uint32_t i = f->p.n_steps - 1;
      cg_step_t *s = &f->steps[i];
      for (uint32_t d = 0; d < f->units[s->unit].first; d++)
        if (last_of_lane(f, d) && s->n_deps < MAX_STEPS) {
          int have = 0;
          for (uint32_t e = 0; e < s->n_deps; e++) have |= s->deps[e] == d;
          if (have) continue;
          s->deps[s->n_deps++] = d;
          f->steps[d].succs[f->steps[d].n_succs++] = i;
        }
    }
    uint32_t n = f->p.n_steps, last = f->p.n_units - 1;
    static uint8_t before[MAX_STEPS][MAX_STEPS]; /* before[i][j]: j runs before i */
    memset(before, 0, sizeof before);
    for (uint32_t i = 0; i < n; i++) {
      /* a unit's event is recorded after the whole unit (a group) */
      for (uint32_t e = 0; e < f->steps[i].n_deps; e++)
        for (uint32_t j = 0; j < n; j++) before[i][j] |= f->steps[j].unit == f->steps[f->steps[i].deps[e]].unit;
      for (uint32_t j = 0; j < i; j++)
        if (f->steps[j].lane == f->steps[i].lane && f->steps[j].unit != f->steps[i].unit) before[i][j] = 1;
    }
    for (uint32_t k = 0; k < n; k++)
      for (uint32_t i = 0; i < n; i++)
        if (before[i][k])
          for (uint32_t j = 0; j < n; j++) before[i][j] |= before[k][j];
    int all = 1;
    for (uint32_t j = 0; j < n && all; j++) {
      if (f->steps[j].unit == last) continue;
      int precedes = 0;
      for (uint32_t k = 0; k < f->units[last].n; k++) precedes |= before[f->order[f->units[last].first + k]][j];
      all = precedes;
    }
    uint32_t got = cg_marks_end_unit(&f->p);
    REQUIRE(got == (all ? last : CG_NO_STEP), "round %d: end unit %u, want %u (%u units, %u lanes)", round, got,
            all ? last : CG_NO_STEP, f->p.n_units, f->p.n_lanes);
    seen_some |= all;
    seen_none |= !all;
    free(f);
  }
  REQUIRE(seen_some && seen_none, "the random plans never had (%d) or never lacked (%d) an end unit", seen_some,
          seen_none);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("watch_marks");
  TCase *c = tcase_create("marks");
  tcase_set_timeout(c, 60);
  tcase_add_loop_test(c, watch_marks__every_step_a_report_names_is_marked, 0, 5);
  tcase_add_loop_test(c, watch_marks__marks_never_claim_an_unfinished_step, 0, 5);
  tcase_add_loop_test(c, watch_marks__end_unit_is_the_last_unit_everything_precedes, 0, 5);
  suite_add_tcase(s, c);
  return s;
}

int main(void) { return cg_test_main(suite()); }
