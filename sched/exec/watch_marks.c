/* The watchdog's choice of marked steps (watch_marks.h). Plain plan data:
 * the CUDA executor (cuda_capture.c, cuda_watchdog.c) captures and reads the
 * marks, unit tests check the choice without a GPU. */
#include "watch_marks.h"

#include <stdlib.h>

/* Nothing of commgraph's own that could stall runs in it. */
static int markless_kind(const cg_plan_t *p, const cg_step_t *s) {
  if (s->kind == CG_STEP_CUDA_NODE) return 1;
  if (s->kind == CG_STEP_PACK) return p->buckets[s->bucket].n_pack == 0;
  if (s->kind == CG_STEP_UNPACK) return p->buckets[s->bucket].n_unpack == 0;
  return 0;
}

static int markless_unit(const cg_plan_t *p, const cg_issue_unit_t *u) {
  for (uint32_t k = 0; k < u->n; k++)
    if (!markless_kind(p, &p->steps[p->issue_order[u->first + k]])) return 0;
  return 1;
}

static int host_func_waits(const cg_plan_t *p, const cg_issue_unit_t *u) {
  for (uint32_t k = 0; k < u->n; k++) {
    const cg_step_t *s = &p->steps[p->issue_order[u->first + k]];
    for (uint32_t e = 0; e < s->n_succs; e++)
      if (p->steps[s->succs[e]].kind == CG_STEP_HOST_FUNC) return 1;
  }
  return 0;
}

void cg_marks_choose(uint8_t *marked, uint32_t *witness, const cg_plan_t *p) {
  /* per lane, its unit after the one at hand (backwards through the units) */
  uint32_t *after = malloc((p->n_lanes ? p->n_lanes : 1) * sizeof *after);
  for (uint32_t l = 0; after && l < p->n_lanes; l++) after[l] = CG_NO_STEP;
  for (uint32_t u = p->n_units; u-- > 0;) {
    const cg_issue_unit_t *unit = &p->units[u];
    uint32_t next = after ? after[unit->lane] : CG_NO_STEP, next_marked = CG_NO_STEP;
    if (next != CG_NO_STEP) {
      const cg_issue_unit_t *later = &p->units[next];
      uint32_t last = p->issue_order[later->first + later->n - 1];
      next_marked = marked[last] ? last : witness[last];
    }
    /* without the list (no memory), every step is marked: always right */
    int skip = next != CG_NO_STEP && markless_unit(p, unit) && markless_unit(p, &p->units[next]) &&
               !host_func_waits(p, unit);
    for (uint32_t k = 0; k < unit->n; k++) {
      uint32_t i = p->issue_order[unit->first + k];
      marked[i] = (uint8_t)!skip;
      witness[i] = skip ? next_marked : CG_NO_STEP;
    }
    if (after) after[unit->lane] = u;
  }
  free(after);
}

uint32_t cg_marks_end_unit(const cg_plan_t *p) {
  if (!p->n_units) return CG_NO_STEP;
  uint32_t result = CG_NO_STEP, last = p->n_units - 1, n_reached = 0;
  uint32_t *before = malloc(p->n_units * sizeof *before), *stack = malloc(p->n_units * sizeof *stack);
  uint32_t *lane_last = malloc((p->n_lanes ? p->n_lanes : 1) * sizeof *lane_last);
  uint8_t *reached = calloc(p->n_units, 1);
  if (!before || !stack || !lane_last || !reached) goto out; /* no memory: every unit keeps its own mark */
  /* each unit's predecessor on its lane */
  for (uint32_t l = 0; l < p->n_lanes; l++) lane_last[l] = CG_NO_STEP;
  for (uint32_t u = 0; u < p->n_units; u++) {
    uint32_t lane = p->units[u].lane;
    before[u] = lane < p->n_lanes ? lane_last[lane] : CG_NO_STEP;
    if (lane < p->n_lanes) lane_last[lane] = u;
  }
  uint32_t top = 0;
  reached[last] = 1;
  stack[top++] = last;
  while (top) {
    const cg_issue_unit_t *unit = &p->units[stack[--top]];
    n_reached++;
    uint32_t prior = before[unit - p->units];
    if (prior != CG_NO_STEP && !reached[prior]) {
      reached[prior] = 1;
      stack[top++] = prior;
    }
    for (uint32_t k = 0; k < unit->n; k++) {
      const cg_step_t *s = &p->steps[p->issue_order[unit->first + k]];
      for (uint32_t e = 0; e < s->n_deps; e++) {
        uint32_t d = p->steps[s->deps[e]].unit;
        if (d < p->n_units && !reached[d]) {
          reached[d] = 1;
          stack[top++] = d;
        }
      }
    }
  }
  if (n_reached == p->n_units) result = last;
out:
  free(before);
  free(stack);
  free(lane_last);
  free(reached);
  return result;
}

int cg_marks_step_done(const cg_plan_t *p, const uint8_t *marked, const uint32_t *witness,
                       const volatile unsigned *marks, uint32_t step, uint64_t replay) {
  if (cg_marks_has(marked, step)) return marks[step] >= (unsigned)replay;
  if (witness[step] != CG_NO_STEP && marks[witness[step]] >= (unsigned)replay) return 1;
  const cg_step_t *s = &p->steps[step];
  for (uint32_t e = 0; e < s->n_succs; e++)
    if (cg_marks_has(marked, s->succs[e]) && marks[s->succs[e]] >= (unsigned)replay) return 1;
  return 0;
}
