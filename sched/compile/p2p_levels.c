/* Levels of sends and receives: which group of its interval each one is
 * issued in (issue_order.c).
 *
 * Between two collectives of a communicator, its sends and receives run on one
 * stream in groups, and a group waits for the whole group before it. So a send
 * or receive that depends on another of the same interval must go in a later
 * group, and, for the plan not to hang, a send and the receive it matches on
 * the peer must go in groups of the same level on both ranks: if my receive
 * were in my first group and its send in the peer's second, my first group
 * would wait for the peer's second, which may wait (through the peer's first)
 * for one of mine.
 *
 * Locally, a level is the longest chain of same-interval sends and receives
 * that leads to the operation (through any steps in between), and at least
 * the level of the previous message to or from the same peer, so messages
 * between two ranks keep their order. Then the ranks of each communicator
 * exchange levels over its control channel, each raises every operation to
 * the level of its match, and recomputes, until no level changes on any rank
 * of the communicator. The levels of one communicator depend only on its own
 * operations' levels (paths through other steps are fixed), so communicators
 * settle independently; they are done one after another in order of their
 * agreed id, the same order on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreement.h"
#include "backend.h"
#include "error.h"
#include "lower.h"
#include "plan_internal.h"
#include "rank_check.h"

static int is_p2p_step(const cg_step_t *s) { return s->kind == CG_STEP_COLLECTIVE && cg_kind_is_p2p(s->op_kind); }

/* Local levels of communicator c's sends and receives, each at least lower[]. */
static void local_levels(uint32_t *levels, int32_t *up, const cg_plan_t *p, uint32_t c, const uint32_t *lower) {
  const cg_plan_comm_t *pc = &p->comms[c];
  for (uint32_t k = 0; k < pc->n_steps;) {
    const cg_step_t *first = &p->steps[pc->steps[k]];
    if (!is_p2p_step(first)) {
      k++;
      continue;
    }
    /* the interval: steps k..j-1 of the communicator; its window of step
     * indices ends at the collective after it, which depends on all of them */
    uint32_t j = k;
    while (j < pc->n_steps && is_p2p_step(&p->steps[pc->steps[j]])) j++;
    uint32_t from = pc->steps[k], to = j < pc->n_steps ? pc->steps[j] : p->n_steps;
    for (uint32_t s = from; s < to; s++) {
      const cg_step_t *st = &p->steps[s];
      int32_t best = -1;
      for (uint32_t e = 0; e < st->n_deps; e++)
        if (st->deps[e] >= from && up[st->deps[e] - from] > best) best = up[st->deps[e] - from];
      if (st->comm_index == c && is_p2p_step(st)) {
        uint32_t level = best < 0 ? 0 : (uint32_t)best + 1;
        if (lower[s] > level) level = lower[s];
        if (st->post_after != CG_NO_STEP && st->post_after >= from && levels[st->post_after] > level)
          level = levels[st->post_after];
        levels[s] = level;
        best = (int32_t)level;
      }
      up[s - from] = best;
    }
    k = j;
  }
}

typedef struct level_entry {
  int32_t peer; /* -1: padding */
  int32_t kind; /* 0 send, 1 receive */
  uint32_t level;
} level_entry_t;

/* Raises the levels of communicator `comm` (the plan's communicator c, or
 * CG_NO_STEP for one this rank only joined, or when it failed) to their
 * matches' until all its ranks agree. *failed_rank is set when a rank took part
 * only to say it had failed. */
static cg_status_t settle(uint32_t *levels, uint32_t *lower, int32_t *up, const cg_plan_t *p, uint32_t c,
                          const cg_comm_t *comm, int failed_here, int *failed_rank, double timeout_s,
                          const char *waiting_in) {
  const cg_plan_comm_t *pc = c != CG_NO_STEP ? &p->comms[c] : NULL;
  uint32_t n_steps = pc ? pc->n_steps : 0;
  int size = comm->size, me = comm->rank;
  cg_status_t st = CG_SUCCESS;
  uint32_t n_mine = 0, max_n = 0, total = 0, (*counts)[2] = malloc((size_t)size * sizeof *counts);
  uint32_t *mine = malloc((n_steps ? n_steps : 1) * sizeof *mine); /* my p2p steps, in order */
  level_entry_t *entries = NULL, *all = NULL;
  uint32_t *cursor = calloc(2 * (size_t)size, sizeof *cursor), *slot = NULL;
  uint32_t *have = calloc(2 * (size_t)size, sizeof *have);
  int32_t *flags = malloc((size_t)size * sizeof *flags);
  if (!counts || !mine || !cursor || !have || !flags) goto oom;
  for (uint32_t k = 0; k < n_steps && !failed_here; k++)
    if (is_p2p_step(&p->steps[pc->steps[k]])) mine[n_mine++] = pc->steps[k];
  uint32_t hello[2] = {n_mine, (uint32_t)failed_here};
  if ((st = cg_control_allgather(comm, hello, counts, sizeof hello, timeout_s, waiting_in)) != CG_SUCCESS) goto out;
  for (int r = 0; r < size; r++) {
    if (counts[r][1] && *failed_rank < 0) *failed_rank = r;
    total += counts[r][0];
    if (counts[r][0] > max_n) max_n = counts[r][0];
  }
  if (max_n == 0 || *failed_rank >= 0) goto out; /* every rank sees the same and stops here */
  entries = calloc(max_n, sizeof *entries);
  all = calloc((size_t)size * max_n, sizeof *all);
  slot = malloc(2 * (size_t)size * max_n * sizeof *slot);
  if (!entries || !all || !slot) goto oom;
  /* slot[(2 * peer + kind) * max_n + q]: my q-th message of that kind with that peer */
  for (uint32_t i = 0; i < n_mine; i++) {
    const cg_step_t *s = &p->steps[mine[i]];
    size_t key = 2 * (size_t)s->root + (s->op_kind == CG_NODE_RECV);
    slot[key * max_n + have[key]++] = mine[i];
  }
  /* Each round that changes anything raises a level by at least one. Without
   * a cycle, no level exceeds the number of messages on the communicator (a
   * chain of them, across ranks); with one (a receive on each side that its
   * own send waits for), levels grow without end: that program hangs on any
   * transport, and is reported. The cap is the same on every rank. */
  int settled = 0;
  for (uint32_t round = 0; round <= total + 1 && !settled; round++) {
    for (uint32_t i = 0; i < max_n; i++) {
      const cg_step_t *s = i < n_mine ? &p->steps[mine[i]] : NULL;
      entries[i] = s ? (level_entry_t){s->root, s->op_kind == CG_NODE_RECV, levels[mine[i]]}
                     : (level_entry_t){-1, 0, 0};
    }
    if ((st = cg_control_allgather(comm, entries, all, max_n * sizeof *entries, timeout_s, waiting_in)) != CG_SUCCESS) goto out;
    memset(cursor, 0, 2 * (size_t)size * sizeof *cursor);
    for (int r = 0; r < size; r++)
      for (uint32_t i = 0; i < max_n; i++) {
        const level_entry_t *e = &all[(size_t)r * max_n + i];
        if (e->peer != me) continue;
        size_t key = 2 * (size_t)r + !e->kind; /* their send is my receive from r */
        uint32_t q = cursor[key]++;
        if (q >= have[key]) continue; /* unmatched: only with the cross-rank check off */
        uint32_t s = slot[key * max_n + q];
        if (e->level > lower[s]) lower[s] = e->level;
      }
    int32_t changed = 0;
    for (uint32_t i = 0; i < n_mine; i++) changed |= lower[mine[i]] > levels[mine[i]];
    if (changed) local_levels(levels, up, p, c, lower);
    if ((st = cg_control_allgather(comm, &changed, flags, sizeof changed, timeout_s, waiting_in)) != CG_SUCCESS) goto out;
    int any = 0;
    for (int r = 0; r < size; r++) any |= flags[r];
    settled = !any;
  }
  if (!settled)
    st = cg_fail(CG_ERR_MISMATCH, "its sends and receives wait for each other in a cycle across ranks (a receive "
                 "waits, through the peer, for a send of its own rank that depends on it): the plan would hang on "
                 "any transport");
  goto out;
oom:
  st = cg_fail(CG_ERR_NO_MEMORY, "settling the send/receive groups");
out:
  free(counts);
  free(mine);
  free(entries);
  free(all);
  free(cursor);
  free(have);
  free(flags);
  free(slot);
  return st;
}

cg_status_t cg_p2p_levels(uint32_t *levels, const cg_plan_t *p, const cg_participants_t *pt, cg_status_t mine,
                          const char *where) {
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", mine != CG_SUCCESS ? cg_error_last() : "");
  cg_status_t st = CG_SUCCESS;
  size_t n = p && p->n_steps ? p->n_steps : 1;
  uint32_t *lower = calloc(n, sizeof *lower);
  int32_t *up = malloc(n * sizeof *up);
  if (!lower || !up) {
    if (mine == CG_SUCCESS) mine = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating send/receive levels", where);
    snprintf(detail, sizeof detail, "%s", cg_error_last());
  }
  if (mine == CG_SUCCESS) {
    memset(levels, 0, n * sizeof *levels);
    for (uint32_t c = 0; c < p->n_comms; c++) local_levels(levels, up, p, c, lower);
  }
  /* every participant, even after a failure here or on another communicator:
   * its ranks wait for this one's word */
  for (uint32_t i = 0; pt && i < pt->n; i++) {
    uint32_t c = CG_NO_STEP;
    for (uint32_t k = 0; mine == CG_SUCCESS && k < p->n_comms && c == CG_NO_STEP; k++)
      if (p->comms[k].comm == pt->comms[i]) c = k;
    int failed_rank = -1;
    char waiting_in[512];
    snprintf(waiting_in, sizeof waiting_in, "%s (settling send/receive levels)", where);
    cg_status_t s = settle(levels, lower, up, p, c, pt->comms[i], mine != CG_SUCCESS || st != CG_SUCCESS,
                           &failed_rank, pt->timeout_s, waiting_in);
    if (s == CG_ERR_TIMEOUT) { /* no more waiting: the job is to end */
      char why[1536];
      snprintf(why, sizeof why, "%s", cg_error_last());
      st = cg_fail(s, "%s", why);
      mine = CG_SUCCESS;
      break;
    }
    if (st != CG_SUCCESS || mine != CG_SUCCESS) continue;
    char label[64];
    cg_comm_id_label(label, sizeof label, pt->comms[i]->id);
    if (s != CG_SUCCESS) {
      char why[512];
      snprintf(why, sizeof why, "%s", cg_error_last());
      st = cg_fail(s, "%s: communicator %s: %s", where, label, why);
    } else if (failed_rank >= 0) {
      st = cg_fail(CG_ERR_BACKEND, "%s: rank %d of communicator %s could not build its plan (its own cg_compile "
                   "says why)", where, failed_rank, label);
    }
  }
  free(lower);
  free(up);
  if (mine != CG_SUCCESS) return cg_fail(mine, "%s", detail);
  return st;
}
