/* The order in which a realizer issues steps, and which sends and receives go
 * out together as one group.
 *
 * A CUDA graph is captured unit by unit, and on one stream a unit waits for the
 * unit before it; NCCL runs the sends and receives of one group concurrently.
 * So a communicator's point-to-point operations between two collectives
 * should be issued in as few groups as their dependencies allow: a receive that
 * a later send of the same rank needs must complete first, but two that do not
 * depend on each other must not wait for each other, or a pattern that runs
 * fine on the host (each rank sends, then receives) would deadlock.
 *
 * The order is Kahn's algorithm with two queues: steps other than sends and
 * receives go first, lowest index first, so everything a waiting send or
 * receive depends on is issued before it where possible. Only when nothing
 * else is ready does a group open. Sends and receives carry levels
 * (p2p_levels.c): a group holds those of one communicator, interval and level,
 * and matching operations have the same level on both ranks of a device plan.
 * The group opened is a complete one (every member of the lowest level left
 * in its interval is ready), of the communicator with the lowest ready step,
 * and it takes all its members in the communicator's order. Only when no
 * group is complete (a chain through other communicators makes two groups
 * wait for each other's members) does the lowest ready send or receive open a
 * group of its level with the first run of ready ones, up to one that waits.
 * The agreed levels of a device plan are meant to rule that out (a level is
 * above every group its own group would wait for, across communicators and
 * ranks; test_mpi_levels checks that the units never wait for each other in
 * a cycle across ranks), so there this is a safety net; host plans, whose
 * local levels follow dependencies only, use it, and post each member on its
 * own anyway.
 *
 * A send (receive) becomes ready only after the previous send to (receive
 * from) the same peer has been issued, and its level is at least that one's,
 * so messages between a pair of ranks are issued in the same order on both
 * sides. Everything here is a function of the plan and the levels, so the
 * order is as deterministic as they are. */
#include <stdlib.h>

#include "error.h"
#include "heap.h"
#include "lower.h"
#include "plan_internal.h"

typedef struct issue_state {
  cg_plan_t *plan;
  uint32_t *pending; /* dependencies not yet issued */
  uint8_t *issued;
  uint8_t *queued;       /* in a heap already: each step enters one at most once */
  cg_heap_t other, p2p;  /* ready steps, lowest index first */
  uint32_t *cursor;      /* per communicator: first position not yet issued */
  uint32_t n_issued;
  const uint32_t *levels; /* of sends and receives (p2p_levels.c) */
} issue_state_t;

static int is_p2p_step(const cg_step_t *s) {
  return s->kind == CG_STEP_COLLECTIVE && cg_kind_is_p2p(s->op_kind);
}

/* A step is ready once its dependencies are issued, and for a send or receive
 * once the previous one to or from the same peer is. */
static void offer(issue_state_t *st, uint32_t index) {
  const cg_step_t *s = &st->plan->steps[index];
  if (st->issued[index] || st->queued[index] || st->pending[index]) return;
  if (is_p2p_step(s) && s->post_after != CG_NO_STEP && !st->issued[s->post_after]) return;
  st->queued[index] = 1;
  cg_heap_push(is_p2p_step(s) ? &st->p2p : &st->other, index);
}

static void issue(issue_state_t *st, uint32_t index) {
  st->issued[index] = 1;
  st->plan->steps[index].unit = st->plan->n_units;
  st->plan->issue_order[st->n_issued++] = index;
}

/* After a unit: its members' successors and next messages may be ready. */
static void release(issue_state_t *st, const cg_issue_unit_t *u) {
  cg_plan_t *p = st->plan;
  for (uint32_t k = 0; k < u->n; k++) {
    const cg_step_t *s = &p->steps[p->issue_order[u->first + k]];
    for (uint32_t e = 0; e < s->n_succs; e++) {
      st->pending[s->succs[e]]--;
      offer(st, s->succs[e]);
    }
    if (is_p2p_step(s) && s->post_next != CG_NO_STEP) offer(st, s->post_next);
  }
}

/* Sends and receives of `first`'s communicator and interval at `level`, in the
 * communicator's order: every ready one, or (first_run) only the first run of
 * ready ones, stopping at one that waits for a dependency. */
static void issue_group(issue_state_t *st, uint32_t first, uint32_t level, int first_run) {
  cg_plan_t *p = st->plan;
  const cg_step_t *s0 = &p->steps[first];
  cg_plan_comm_t *pc = &p->comms[s0->comm_index];
  uint32_t *cursor = &st->cursor[s0->comm_index];
  while (*cursor < pc->n_steps && st->issued[pc->steps[*cursor]]) (*cursor)++;
  uint32_t taken = 0;
  for (uint32_t k = *cursor; k < pc->n_steps; k++) {
    uint32_t index = pc->steps[k];
    const cg_step_t *s = &p->steps[index];
    if (!is_p2p_step(s) || s->group != s0->group) break;
    if (st->issued[index] || st->levels[index] != level) continue;
    int ready = !st->pending[index] && (s->post_after == CG_NO_STEP || st->issued[s->post_after]);
    if (ready) {
      issue(st, index); /* may already sit in the p2p heap: popped later and skipped */
      taken++;
    } else if (first_run && taken) {
      break;
    }
  }
}

/* The lowest step of a communicator whose next group (the unissued sends and
 * receives of the lowest level in its current interval) is complete: every
 * member ready. CG_NO_STEP if there is none; *level is that group's level. */
static uint32_t pick_complete_group(issue_state_t *st, uint32_t *level) {
  cg_plan_t *p = st->plan;
  uint32_t best = CG_NO_STEP;
  for (uint32_t c = 0; c < p->n_comms; c++) {
    const cg_plan_comm_t *pc = &p->comms[c];
    uint32_t *cursor = &st->cursor[c];
    while (*cursor < pc->n_steps && st->issued[pc->steps[*cursor]]) (*cursor)++;
    if (*cursor == pc->n_steps || !is_p2p_step(&p->steps[pc->steps[*cursor]])) continue;
    uint32_t group = p->steps[pc->steps[*cursor]].group, end = *cursor, min_level = UINT32_MAX;
    for (; end < pc->n_steps; end++) {
      uint32_t index = pc->steps[end];
      if (!is_p2p_step(&p->steps[index]) || p->steps[index].group != group) break;
      if (!st->issued[index] && st->levels[index] < min_level) min_level = st->levels[index];
    }
    uint32_t lowest = CG_NO_STEP;
    int complete = 1;
    for (uint32_t k = *cursor; k < end && complete; k++) {
      uint32_t index = pc->steps[k];
      if (st->issued[index] || st->levels[index] != min_level) continue;
      if (st->pending[index]) complete = 0;
      else if (index < lowest) lowest = index;
    }
    if (complete && lowest < best) {
      best = lowest;
      *level = min_level;
    }
  }
  return best;
}

cg_status_t cg_plan_issue_order(cg_plan_t *p, const uint32_t *levels, const char *where) {
  cg_status_t status = CG_SUCCESS;
  size_t n = p->n_steps ? p->n_steps : 1;
  issue_state_t st = {.plan = p, .levels = levels};
  st.pending = malloc(n * sizeof *st.pending);
  st.issued = calloc(n, 1);
  st.queued = calloc(n, 1);
  st.other = cg_heap_make(malloc(n * sizeof *st.other.items), cg_heap_less_value, NULL);
  st.p2p = cg_heap_make(malloc(n * sizeof *st.p2p.items), cg_heap_less_value, NULL);
  st.cursor = calloc(p->n_comms ? p->n_comms : 1, sizeof *st.cursor);
  p->issue_order = malloc(n * sizeof *p->issue_order);
  p->units = malloc(n * sizeof *p->units);
  if (!st.pending || !st.issued || !st.queued || !st.other.items || !st.p2p.items || !st.cursor || !p->issue_order || !p->units) {
    status = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the issue order of %u steps", where, p->n_steps);
    goto out;
  }
  p->n_units = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) st.pending[i] = p->steps[i].n_deps;
  for (uint32_t i = 0; i < p->n_steps; i++) offer(&st, i);
  while (st.n_issued < p->n_steps) {
    cg_issue_unit_t u = {.first = st.n_issued};
    if (st.other.n) {
      uint32_t index = cg_heap_pop(&st.other);
      issue(&st, index);
    } else if (st.p2p.n) {
      uint32_t level = 0, index = pick_complete_group(&st, &level);
      int complete = index != CG_NO_STEP;
      if (!complete) {
        index = cg_heap_pop(&st.p2p);
        if (st.issued[index]) continue;
        level = levels[index];
      }
      issue_group(&st, index, level, !complete);
    } else {
      status = cg_fail(CG_ERR_INTERNAL, "%s: issue order stuck after %u of %u steps", where, st.n_issued,
                       p->n_steps);
      goto out;
    }
    u.n = st.n_issued - u.first;
    u.lane = p->steps[p->issue_order[u.first]].lane;
    p->units[p->n_units++] = u;
    release(&st, &p->units[p->n_units - 1]);
  }
out:
  free(st.pending);
  free(st.issued);
  free(st.queued);
  free(st.other.items);
  free(st.p2p.items);
  free(st.cursor);
  return status;
}
