/* Levels of sends and receives: which group of its interval each one is
 * issued in (issue_order.c).
 *
 * Between two collectives of a communicator, its sends and receives run on one
 * stream in groups: a group is posted as a whole once every member's
 * dependencies are done and the unit before it on the stream is, and a member
 * completes only once its match on the peer was posted. So, for the plan not
 * to hang, a send and the receive it matches must go in groups of the same
 * level on both ranks, and the groups (with the collectives, over all ranks)
 * must be ordered: nothing a group waits for may wait for that group.
 *
 * Each unit is keyed by (communicator, interval, level); a collective by its
 * interval and a level above every group's. Per step, D(step) is, for every
 * communicator (by its agreed id: chains cross ranks and communicators), the
 * highest key of that communicator that the step's completion waits for:
 * through its dependencies, and for a step of a unit through everything the
 * unit waits for on every rank: its members' dependencies, here and on the
 * other ranks of the communicator (the peer's match is a member of the same
 * unit there), and the unit before it on the stream. A send or receive X of
 * communicator c in interval i must then be above every level of (c, i) that
 * its dependencies' D reach: otherwise its group would wait for itself, or for
 * a lower group of its own stream that waits for it (the random-DAG hang: a
 * receive of communicator A that a send of B waits for, the matching send on
 * the peer waiting for a receive of B). Also, as before, a send or receive has
 * its match's level, and is not below the previous message to or from the
 * same peer in its interval, so messages between two ranks keep their order.
 * Chains within the interval are a special case: a level is above every one
 * of its interval that leads to it.
 *
 * The ranks of each communicator exchange levels and what their units wait
 * for over its control channel, raise levels and recompute, round after round
 * until nothing any rank says changes. Communicators are settled one after
 * another in order of their agreed id, the same order on every rank; a chain
 * from A through B back to A needs A settled again after B, and communicators
 * may cover different ranks, with no collective over all. So every rank makes
 * PASSES passes over its communicators (alternating directions), then a last
 * one to verify: if any rank of a communicator would still change anything
 * there, cg_compile fails on every rank of it, naming the nodes, rather than
 * leave matching operations at levels that differ. Levels only grow; without a cycle none exceeds twice the
 * number of messages on the communicator. With one (a receive on each side
 * that its own send waits for) they grow without end: that program hangs on
 * any transport, and is reported. Every decision to stop is taken on what all
 * ranks of the communicator received, so all take it in the same round. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreement.h"
#include "backend.h"
#include "error.h"
#include "lower.h"
#include "plan_internal.h"
#include "rank_check.h"

/* Passes over the communicators before the verifying one, in increasing id
 * order, then decreasing, and so on (the same order on every rank, so no two
 * ranks wait for each other on two communicators): a chain through
 * communicators in either order settles in one pass (a pipeline's forward and
 * backward chains), one that turns back k times in about k / 2 (a token
 * passed back and forth over two communicators gains about one level a pass:
 * test_mpi_levels has one that is too long, and refused). A constant, so
 * that every rank of a communicator settles it as often; a pass where nothing
 * changes costs one small allgather per communicator. */
#define PASSES 16
#define COLLECTIVE_LEVEL UINT32_MAX
#define NONE UINT32_MAX

static int is_p2p_step(const cg_step_t *s) { return s->kind == CG_STEP_COLLECTIVE && cg_kind_is_p2p(s->op_kind); }

/* D is kept per communicator as the latest unit of its stream reached, a key
 * that orders units as the stream does: (interval, level plus one) for a group
 * of sends and receives, (interval, COLL) for the collective closing the
 * interval; 0 for none. Waiting for a unit is waiting for every one before it
 * on the stream, so one key per communicator says all that a chain waits for
 * there, and D costs steps x communicators, not steps x intervals (a plan of a
 * thousand collectives). A second key per communicator is the latest group of
 * sends and receives reached, collectives left out: it tells which group of
 * its own interval a step reaches, and so which operation to raise, also
 * where the step reaches the collective closing its interval (it is stuck
 * then). Where that key lies in a later interval the step is stuck too and
 * is no candidate for a raise: raising it would not free it, since its new
 * group would still wait for its old one on the stream. Dependencies only
 * point back in a communicator's order, so with D over dependencies alone
 * (host plans, and the levels' strict part) the key never lies there. */
#define COLL UINT32_MAX
#define KEYS 2 /* per communicator: every unit; groups of sends and receives only */
static uint64_t key_of(const cg_step_t *st, uint32_t level) {
  return (uint64_t)st->group << 32 | (is_p2p_step(st) ? (uint64_t)level + 1 : COLL);
}
static uint32_t key_interval(uint64_t v) { return (uint32_t)(v >> 32); }
static uint32_t key_level(uint64_t v) { return (uint32_t)v; } /* the level plus one, COLL, or 0 */
/* The level plus one of `interval` that a groups-only key reaches, or 0. */
static uint32_t level_in(uint64_t groups_key, uint32_t interval) {
  return groups_key && key_interval(groups_key) == interval ? key_level(groups_key) : 0;
}

/* What a rank says about one of its units (its interval and level): it waits
 * for `all` and `groups` (the two keys) of communicator `comm`. */
typedef struct unit_entry {
  uint32_t interval, level;
  uint64_t comm, all, groups;
} unit_entry_t;

typedef struct level_entry {
  int32_t peer; /* -1: padding */
  int32_t kind; /* 0 send, 1 receive */
  uint32_t level;
  uint32_t node;
} level_entry_t;

/* Per participant communicator: what the other ranks said last. */
typedef struct heard {
  unit_entry_t *units; /* theirs, not mine */
  uint32_t n_units;
  unsigned char *last; /* the last round's hellos and data, to see whether anything changed */
  size_t last_bytes;
  uint32_t last_hello_bytes;
  unsigned char *sent; /* what this rank said last (its entries, unpadded) */
  size_t sent_bytes;
} heard_t;

typedef struct state {
  const cg_plan_t *p;
  uint32_t n; /* steps */
  int closed;  /* D over whole units (a device plan); else over dependencies only (see cg_p2p_levels) */
  int settled; /* the last sweep raised nothing, and nothing was heard since: another would change nothing */
  uint32_t *levels, *lower;
  uint8_t *stuck;      /* a send or receive whose dependencies wait for the collective closing its interval */
  uint32_t *keyed;     /* the plan communicator of a step on its step list, else NONE */
  uint32_t *rep, *pred; /* keyed steps: the first step of its unit; that unit's predecessor on the stream (a rep) */
  uint32_t *part;      /* per plan communicator: its participant, or NONE */
  heard_t *heard;      /* per participant */
  uint32_t n_heard;
  uint64_t *col_comm;  /* D's columns: communicator ids, the plan's first, then those heard of */
  uint32_t n_cols, cap_cols;
  uint32_t *own_col; /* per keyed step: the column of its communicator */
  uint64_t *ex, *dx, *gl, *rg; /* n * KEYS * n_cols: D over dependencies; D; the unit's local part; the others' part */
  uint64_t *sx;                /* D through dependencies alone */
  uint32_t *strict;            /* per keyed step: the level plus one of its interval that its dependencies reach */
} state_t;

static uint32_t col_index(const state_t *S, uint64_t comm) {
  for (uint32_t k = 0; k < S->n_cols; k++)
    if (S->col_comm[k] == comm) return k;
  return NONE;
}

static uint32_t add_col(state_t *S, uint64_t comm) {
  uint32_t k = col_index(S, comm);
  if (k == NONE) S->col_comm[k = S->n_cols++] = comm;
  return k;
}

/* D's columns: the plan's communicators, then every one heard of; a new one
 * grows every array. */
static cg_status_t gather_cols(state_t *S) {
  const cg_plan_t *p = S->p;
  uint32_t need = p->n_comms + 1;
  for (uint32_t i = 0; i < S->n_heard; i++) need += S->heard[i].n_units;
  uint64_t *comm = realloc(S->col_comm, need * sizeof *comm);
  if (!comm) return cg_fail(CG_ERR_NO_MEMORY, "settling send/receive groups");
  S->col_comm = comm;
  S->n_cols = 0;
  for (uint32_t c = 0; c < p->n_comms; c++) {
    uint32_t k = add_col(S, p->comms[c].comm->id);
    for (uint32_t q = 0; q < p->comms[c].n_steps; q++) S->own_col[p->comms[c].steps[q]] = k;
  }
  for (uint32_t i = 0; i < S->n_heard; i++)
    for (uint32_t e = 0; e < S->heard[i].n_units; e++) add_col(S, S->heard[i].units[e].comm);
  if (S->n_cols > S->cap_cols || !S->dx) { /* allocated once at least: a plan may have no communicator */
    size_t cells = (size_t)(S->n ? S->n : 1) * KEYS * (S->n_cols ? S->n_cols : 1);
    free(S->ex);
    free(S->dx);
    free(S->gl);
    free(S->rg);
    free(S->sx);
    S->sx = malloc(cells * sizeof *S->sx);
    S->ex = malloc(cells * sizeof *S->ex);
    S->dx = malloc(cells * sizeof *S->dx);
    S->gl = malloc(cells * sizeof *S->gl);
    S->rg = malloc(cells * sizeof *S->rg);
    S->cap_cols = 0;
    if (!S->ex || !S->dx || !S->gl || !S->rg || !S->sx) return cg_fail(CG_ERR_NO_MEMORY, "settling send/receive groups");
    S->cap_cols = S->n_cols;
  }
  return CG_SUCCESS;
}

/* rep and pred of communicator c's steps under the current levels: its units
 * in stream order are each collective and, between two, the groups of the
 * interval by increasing level. */
static void units_of(state_t *S, uint32_t c) {
  const cg_plan_t *p = S->p;
  const cg_plan_comm_t *pc = &p->comms[c];
  uint32_t prev = NONE;
  for (uint32_t k = 0; k < pc->n_steps;) {
    uint32_t s = pc->steps[k];
    if (!is_p2p_step(&p->steps[s])) {
      S->rep[s] = s;
      S->pred[s] = prev;
      prev = s;
      k++;
      continue;
    }
    uint32_t j = k;
    while (j < pc->n_steps && is_p2p_step(&p->steps[pc->steps[j]])) j++;
    for (uint32_t last = 0, first = 1;; first = 0) {
      uint32_t min = NONE, r = NONE;
      for (uint32_t q = k; q < j; q++) {
        uint32_t l = S->levels[pc->steps[q]];
        if ((first || l > last) && (min == NONE || l < min)) min = l, r = pc->steps[q];
      }
      if (r == NONE) break;
      for (uint32_t q = k; q < j; q++)
        if (S->levels[pc->steps[q]] == min) S->rep[pc->steps[q]] = r;
      S->pred[r] = prev;
      prev = r;
      last = min;
    }
    k = j;
  }
}

static int join(uint64_t *to, const uint64_t *from, uint32_t n) {
  int changed = 0;
  for (uint32_t k = 0; k < n; k++)
    if (from[k] > to[k]) to[k] = from[k], changed = 1;
  return changed;
}

/* Adds a step of its own unit to its D (keys at d + KEYS * own column). */
static int join_own(uint64_t *d, const cg_step_t *t, uint32_t level) {
  uint64_t key = key_of(t, level), both[KEYS] = {key, is_p2p_step(t) ? key : 0};
  return join(d, both, KEYS);
}

static int unit_cmp(const void *a, const void *b) {
  const unit_entry_t *x = a, *y = b;
  if (x->interval != y->interval) return x->interval < y->interval ? -1 : 1;
  return x->level < y->level ? -1 : x->level > y->level;
}

/* The first of the units heard (sorted) at (interval, level), or n. */
static uint32_t first_unit(const heard_t *h, uint32_t interval, uint32_t level) {
  uint32_t lo = 0, hi = h->n_units;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    const unit_entry_t *u = &h->units[mid];
    if (u->interval < interval || (u->interval == interval && u->level < level)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* D of every step under the current levels, then the levels that D asks for.
 * *raised: a level went up. A send or receive whose dependencies wait for the
 * collective closing its own interval (or anything after it) is marked stuck:
 * no level of its own helps, but another's rising (here or on another rank)
 * may take the member that closes the cycle out of its group; what is still
 * stuck once everything settled is a cycle. */
static cg_status_t sweep(state_t *S, int *raised) {
  const cg_plan_t *p = S->p;
  cg_status_t st = gather_cols(S);
  if (st != CG_SUCCESS) return st;
  uint32_t m = KEYS * S->n_cols;
  size_t cells = (size_t)S->n * m;
  for (uint32_t c = 0; c < p->n_comms; c++) units_of(S, c);
  memset(S->dx, 0, cells * sizeof *S->dx);
  memset(S->gl, 0, cells * sizeof *S->gl);
  memset(S->rg, 0, cells * sizeof *S->rg);
  /* the other ranks' part of each unit of mine */
  for (uint32_t s = 0; s < S->n; s++) {
    uint32_t c = S->keyed[s];
    if (c == NONE || S->rep[s] != s || S->part[c] == NONE) continue;
    const heard_t *h = &S->heard[S->part[c]];
    const cg_step_t *t = &p->steps[s];
    uint32_t level = is_p2p_step(t) ? S->levels[s] : COLLECTIVE_LEVEL;
    for (uint32_t e = first_unit(h, t->group, level);
         e < h->n_units && h->units[e].interval == t->group && h->units[e].level == level; e++) {
      uint64_t *cell = &S->rg[(size_t)s * m + KEYS * col_index(S, h->units[e].comm)];
      const uint64_t keys[KEYS] = {h->units[e].all, h->units[e].groups};
      join(cell, keys, KEYS);
    }
  }
  /* to a fixed point: a unit's local part collects members later in index
   * order, and a stream predecessor may come later too */
  for (int changed = 1; changed;) {
    changed = 0;
    for (uint32_t s = 0; s < S->n; s++) {
      const cg_step_t *t = &p->steps[s];
      uint64_t *ex = &S->ex[(size_t)s * m], *dx = &S->dx[(size_t)s * m];
      memset(ex, 0, m * sizeof *ex);
      for (uint32_t e = 0; e < t->n_deps; e++) join(ex, &S->dx[(size_t)t->deps[e] * m], m);
      changed |= join(dx, ex, m);
      uint32_t c = S->keyed[s];
      if (c == NONE) continue;
      uint32_t r = S->rep[s];
      changed |= join(&S->gl[(size_t)r * m], ex, m);
      if (S->closed) {
        changed |= join(dx, &S->gl[(size_t)r * m], m);
        changed |= join(dx, &S->rg[(size_t)r * m], m);
        if (S->pred[r] != NONE) changed |= join(dx, &S->dx[(size_t)S->pred[r] * m], m);
      }
      changed |= join_own(&dx[KEYS * S->own_col[s]], t, S->levels[s]);
    }
  }
  /* D over dependencies alone (one pass: dependencies come first): what a
   * level must exceed whatever the grouping */
  memset(S->sx, 0, cells * sizeof *S->sx);
  for (uint32_t s = 0; s < S->n; s++) {
    const cg_step_t *t = &p->steps[s];
    uint64_t *sx = &S->sx[(size_t)s * m];
    for (uint32_t e = 0; e < t->n_deps; e++) join(sx, &S->sx[(size_t)t->deps[e] * m], m);
    if (S->keyed[s] == NONE) continue;
    S->strict[s] = level_in(sx[KEYS * S->own_col[s] + 1], t->group);
    join_own(&sx[KEYS * S->own_col[s]], t, S->levels[s]);
  }
  /* Raises that dependencies, matches and the posting order ask for are all
   * made at once. Those that only the grouping asks for (a unit's member
   * waits for the unit) are made one a sweep, the latest step first: raising
   * one member often frees the others (in the random-DAG hang, raising the
   * send of B that waits for a receive of A keeps A's sends and receives in
   * one group), and raising them all would split groups for nothing. */
  *raised = 0;
  uint32_t later = NONE, later_need = 0;
  for (uint32_t s = 0; s < S->n; s++) {
    const cg_step_t *t = &p->steps[s];
    uint32_t c = S->keyed[s];
    S->stuck[s] = 0;
    if (c == NONE || !is_p2p_step(t)) continue;
    uint32_t need = S->lower[s];
    if (t->post_after != CG_NO_STEP && p->steps[t->post_after].group == t->group && S->levels[t->post_after] > need)
      need = S->levels[t->post_after];
    if (S->strict[s] > need) need = S->strict[s];
    const uint64_t *ex = &S->ex[(size_t)s * m];
    const uint64_t *here = &ex[KEYS * S->own_col[s]];
    uint32_t reached = level_in(here[1], t->group);
    if (reached > need && reached > S->levels[s]) later = s, later_need = reached;
    /* the collective closing its interval, or anything after it */
    S->stuck[s] = here[0] >= ((uint64_t)t->group << 32 | COLL);
    if (need > S->levels[s]) S->levels[s] = need, *raised = 1;
  }
  if (later != NONE && later_need > S->levels[later]) S->levels[later] = later_need, *raised = 1;
  return CG_SUCCESS;
}

/* Sweeps until the levels hold locally, at most `max` of them (what is left
 * goes on in the next round of the exchange). */
static cg_status_t settle_here(state_t *S, uint32_t max) {
  cg_status_t st = CG_SUCCESS;
  int raised = !S->settled;
  for (uint32_t k = 0; k < max && raised && st == CG_SUCCESS; k++) st = sweep(S, &raised);
  S->settled = st == CG_SUCCESS && !raised;
  return st;
}

/* My entries for communicator c: sends and receives, and per unit what it
 * waits for here (its members' dependencies and its stream predecessor). */
static cg_status_t my_entries(state_t *S, uint32_t c, level_entry_t **p2p, uint32_t *n_p2p, unit_entry_t **units,
                              uint32_t *n_units) {
  const cg_plan_t *p = S->p;
  const cg_plan_comm_t *pc = &p->comms[c];
  uint32_t m = KEYS * S->n_cols;
  *n_p2p = *n_units = 0;
  *p2p = malloc((pc->n_steps + 1) * sizeof **p2p);
  *units = malloc(((size_t)pc->n_steps * (S->n_cols ? S->n_cols : 1) + 1) * sizeof **units);
  uint64_t *v = malloc((m ? m : 1) * sizeof *v);
  if (!*p2p || !*units || !v) {
    free(v);
    return cg_fail(CG_ERR_NO_MEMORY, "settling send/receive groups");
  }
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    uint32_t s = pc->steps[k];
    const cg_step_t *t = &p->steps[s];
    if (is_p2p_step(t))
      (*p2p)[(*n_p2p)++] = (level_entry_t){t->root, t->op_kind == CG_NODE_RECV, S->levels[s], t->node};
    if (S->rep[s] != s) continue;
    memcpy(v, &S->gl[(size_t)s * m], m * sizeof *v);
    if (S->pred[s] != NONE) join(v, &S->dx[(size_t)S->pred[s] * m], m);
    uint32_t level = is_p2p_step(t) ? S->levels[s] : COLLECTIVE_LEVEL;
    for (uint32_t q = 0; q < S->n_cols; q++)
      if (v[KEYS * q] || v[KEYS * q + 1])
        (*units)[(*n_units)++] = (unit_entry_t){t->group, level, S->col_comm[q], v[KEYS * q], v[KEYS * q + 1]};
  }
  free(v);
  return CG_SUCCESS;
}

static const char cycle_text[] =
    "its sends and receives wait for each other in a cycle across ranks (a receive waits, through the peer, for a "
    "send of its own rank that depends on it): the plan would hang on any transport";

/* "rank r's node #n (level a, then b)" for the sends and receives whose levels
 * changed between two rounds (each rank's data at its round's stride, its
 * sends and receives first), else the ranks whose other data changed. */
static void describe_change(char *out, size_t size, const uint32_t (*was)[5], const unsigned char *was_data,
                            size_t was_stride, const uint32_t (*now)[5], const unsigned char *now_data,
                            size_t now_stride, int ranks) {
  size_t len = 0;
  out[0] = 0;
  for (int r = 0; r < ranks && len + 80 < size; r++) {
    int named = 0;
    for (uint32_t i = 0, shown = 0; was[r][0] == now[r][0] && i < now[r][0] && len + 80 < size; i++) {
      level_entry_t a, b;
      memcpy(&a, was_data + (size_t)r * was_stride + i * sizeof a, sizeof a);
      memcpy(&b, now_data + (size_t)r * now_stride + i * sizeof b, sizeof b);
      if (a.level == b.level) continue;
      named = 1;
      if (shown++ == 4) {
        len += (size_t)snprintf(out + len, size - len, ", ...");
        break;
      }
      len += (size_t)snprintf(out + len, size - len, "%srank %d's node #%u (level %u, then %u)", len ? ", " : "", r,
                              b.node, a.level, b.level);
    }
    int differ = was[r][0] != now[r][0] || was[r][1] != now[r][1] || was[r][3] != now[r][3] ||
                 (was_stride == now_stride &&
                  memcmp(was_data + (size_t)r * was_stride, now_data + (size_t)r * now_stride, now_stride) != 0);
    if (!named && differ)
      len += (size_t)snprintf(out + len, size - len, "%swhat rank %d's groups wait for", len ? ", " : "", r);
  }
}

/* Settles communicator `comm` (the plan's communicator c, or NONE for one
 * this rank only joined, or when it failed): rounds of exchange until no rank
 * says anything new. `verify`: one round, and anything new is an error.
 * *failed_rank is set when a rank took part only to say it had failed. */
static cg_status_t settle(state_t *S, uint32_t pi, uint32_t c, const cg_comm_t *comm, int failed_here, int verify,
                          int *failed_rank, double timeout_s, const char *waiting_in) {
  int size = comm->size, me = comm->rank;
  cg_status_t st = CG_SUCCESS;
  heard_t *h = S ? &S->heard[pi] : NULL;
  uint32_t (*hellos)[5] = malloc((size_t)size * sizeof *hellos);
  uint32_t *cursor = calloc(2 * (size_t)size, sizeof *cursor), *have = calloc(2 * (size_t)size, sizeof *have);
  uint32_t *slot = NULL, n_slot = 0;
  level_entry_t *p2p = NULL;
  unit_entry_t *units = NULL;
  unsigned char *mine = NULL, *all = NULL;
  if (!hellos || !cursor || !have) goto oom;
  for (uint32_t round = 0;; round++) {
    uint32_t n_p2p = 0, n_units = 0, stuck = 0;
    free(p2p);
    free(units);
    p2p = NULL;
    units = NULL;
    if (!failed_here && c != NONE) {
      st = settle_here(S, S->n + 2);
      for (uint32_t k = 0; st == CG_SUCCESS && k < S->p->comms[c].n_steps; k++) stuck |= S->stuck[S->p->comms[c].steps[k]];
      if (st == CG_SUCCESS) st = my_entries(S, c, &p2p, &n_p2p, &units, &n_units);
      if (st != CG_SUCCESS) { /* the others hear of it in this round and stop */
        failed_here = 1;
        n_p2p = n_units = 0;
      }
    }
    /* dirty: what I say differs from what I said last; when no rank is, the
     * round would repeat the last one, and its data need not be sent */
    uint32_t dirty = 1;
    if (h && !failed_here) {
      size_t sent_bytes = n_p2p * sizeof *p2p + n_units * sizeof *units + sizeof stuck;
      unsigned char *sent = malloc(sent_bytes);
      if (!sent) goto oom;
      if (n_p2p) memcpy(sent, p2p, n_p2p * sizeof *p2p);
      if (n_units) memcpy(sent + n_p2p * sizeof *p2p, units, n_units * sizeof *units);
      memcpy(sent + sent_bytes - sizeof stuck, &stuck, sizeof stuck);
      dirty = !h->sent || h->sent_bytes != sent_bytes || memcmp(h->sent, sent, sent_bytes) != 0;
      free(h->sent);
      h->sent = sent;
      h->sent_bytes = sent_bytes;
    }
    uint32_t hello[5] = {n_p2p, n_units, (uint32_t)failed_here, stuck, dirty};
    cg_status_t x = cg_control_allgather(comm, hello, hellos, sizeof hello, timeout_s, waiting_in);
    if (x != CG_SUCCESS) {
      st = x;
      goto out;
    }
    uint32_t max_p = 0, max_u = 0, total = 0, any_stuck = 0, any_dirty = 0;
    for (int r = 0; r < size; r++) {
      any_stuck |= hellos[r][3];
      any_dirty |= hellos[r][4];
      if (hellos[r][2] && *failed_rank < 0 && r != me) *failed_rank = r;
      if (hellos[r][0] > max_p) max_p = hellos[r][0];
      if (hellos[r][1] > max_u) max_u = hellos[r][1];
      total += hellos[r][0];
    }
    if (failed_here || *failed_rank >= 0) goto out; /* every rank sees the same and stops here */
    if (!any_dirty && h->last) { /* settled (as below, with the same data) */
      if (any_stuck && verify) st = cg_fail(CG_ERR_MISMATCH, "%s", cycle_text);
      goto out;
    }
    size_t bytes = max_p * sizeof *p2p + max_u * sizeof *units;
    free(mine);
    free(all);
    mine = calloc(bytes ? bytes : 1, 1);
    all = malloc(((size_t)size * bytes + sizeof hello * (size_t)size) + 1);
    if (!mine || !all) goto oom;
    for (uint32_t i = 0; i < max_p; i++) {
      level_entry_t e = i < n_p2p ? p2p[i] : (level_entry_t){-1, 0, 0, 0};
      memcpy(mine + i * sizeof e, &e, sizeof e);
    }
    if (n_units) memcpy(mine + max_p * sizeof *p2p, units, n_units * sizeof *units);
    /* all: every rank's data, then the hellos (compared with the last round's) */
    if (bytes && (st = cg_control_allgather(comm, mine, all, bytes, timeout_s, waiting_in)) != CG_SUCCESS) goto out;
    memcpy(all + (size_t)size * bytes, hellos, sizeof hello * (size_t)size);
    size_t all_bytes = (size_t)size * bytes + sizeof hello * (size_t)size;
    int same = h->last && h->last_bytes == all_bytes && memcmp(h->last, all, all_bytes) == 0;
    uint32_t top = 0;
    for (int r = 0; r < size; r++)
      for (uint32_t i = 0; i < hellos[r][0]; i++) {
        level_entry_t e;
        memcpy(&e, all + (size_t)r * bytes + i * sizeof e, sizeof e);
        if (e.level > top) top = e.level;
      }
    if (!same && verify) {
      char which[768] = "";
      size_t hello_bytes = sizeof hello * (size_t)size;
      if (h->last && h->last_hello_bytes == hello_bytes)
        describe_change(which, sizeof which, (const uint32_t(*)[5])(h->last + h->last_bytes - hello_bytes), h->last,
                        (h->last_bytes - hello_bytes) / (size_t)size, (const uint32_t(*)[5])hellos, all, bytes, size);
      st = cg_fail(CG_ERR_UNSUPPORTED,
                   "the groups of its sends and receives did not settle in %d passes over the communicators (chains "
                   "through other communicators); still changing: %s",
                   PASSES, which[0] ? which : "what the ranks say");
      goto out;
    }
    free(h->last);
    h->last = all;
    h->last_bytes = all_bytes;
    h->last_hello_bytes = (uint32_t)(sizeof hello * (size_t)size);
    all = NULL;
    if (same) {
      if (any_stuck && verify) st = cg_fail(CG_ERR_MISMATCH, "%s", cycle_text);
      goto out;
    }
    /* Without a cycle no level exceeds a chain of messages on the
     * communicator, each at most once; with one, levels grow by about one a
     * round. Every rank sees the same levels, so all stop here together. */
    if (top > 2 * total + 2 || round > 4 * (total + (uint32_t)size) + 16) {
      st = cg_fail(CG_ERR_MISMATCH, "%s", cycle_text);
      goto out;
    }
    if (c == NONE) continue;
    /* raise mine to their matches' levels: slot[(2 * peer + kind) * n + q] is
     * my q-th message of that kind with that peer */
    if (!slot || n_slot < n_p2p) {
      free(slot);
      n_slot = n_p2p;
      slot = malloc(2 * (size_t)size * (n_slot ? n_slot : 1) * sizeof *slot);
      if (!slot) goto oom;
    }
    memset(have, 0, 2 * (size_t)size * sizeof *have);
    memset(cursor, 0, 2 * (size_t)size * sizeof *cursor);
    const cg_plan_comm_t *pc = &S->p->comms[c];
    for (uint32_t k = 0; k < pc->n_steps; k++) {
      const cg_step_t *t = &S->p->steps[pc->steps[k]];
      if (!is_p2p_step(t)) continue;
      size_t key = 2 * (size_t)t->root + (t->op_kind == CG_NODE_RECV);
      slot[key * n_slot + have[key]++] = pc->steps[k];
    }
    uint32_t n_heard = 0;
    for (int r = 0; r < size; r++) n_heard += r != me ? hellos[r][1] : 0;
    unit_entry_t *heard = malloc((n_heard ? n_heard : 1) * sizeof *heard);
    if (!heard) goto oom;
    free(h->units);
    h->units = heard;
    h->n_units = 0;
    S->settled = 0; /* what the others' units wait for may have changed */
    for (int r = 0; r < size; r++) {
      const unsigned char *d = h->last + (size_t)r * bytes;
      for (uint32_t i = 0; i < hellos[r][0]; i++) {
        level_entry_t e;
        memcpy(&e, d + i * sizeof e, sizeof e);
        if (e.peer != me) continue;
        size_t key = 2 * (size_t)r + !e.kind; /* their send is my receive from r */
        uint32_t q = cursor[key]++;
        if (q >= have[key]) continue; /* unmatched: only with the cross-rank check off */
        uint32_t s = slot[key * n_slot + q];
        if (e.level > S->lower[s]) S->lower[s] = e.level, S->settled = 0;
      }
      for (uint32_t i = 0; r != me && i < hellos[r][1]; i++)
        memcpy(&h->units[h->n_units++], d + max_p * sizeof(level_entry_t) + i * sizeof(unit_entry_t),
               sizeof(unit_entry_t));
    }
    qsort(h->units, h->n_units, sizeof *h->units, unit_cmp); /* looked up by unit in every sweep */
  }
oom:
  st = cg_fail(CG_ERR_NO_MEMORY, "settling the send/receive groups");
out:
  free(hellos);
  free(cursor);
  free(have);
  free(slot);
  free(p2p);
  free(units);
  free(mine);
  free(all);
  return st;
}

static void state_free(state_t *S) {
  for (uint32_t i = 0; S->heard && i < S->n_heard; i++) {
    free(S->heard[i].units);
    free(S->heard[i].last);
    free(S->heard[i].sent);
  }
  free(S->heard);
  free(S->keyed);
  free(S->rep);
  free(S->pred);
  free(S->part);
  free(S->col_comm);
  free(S->own_col);
  free(S->ex);
  free(S->dx);
  free(S->gl);
  free(S->rg);
  free(S->sx);
  free(S->strict);
  free(S->lower);
  free(S->stuck);
}

static cg_status_t state_make(state_t *S, uint32_t *levels, const cg_plan_t *p, const cg_participants_t *pt) {
  uint32_t n = p->n_steps ? p->n_steps : 1, n_pt = pt ? pt->n : 0;
  *S = (state_t){.p = p, .n = p->n_steps, .levels = levels, .closed = pt != NULL};
  S->lower = calloc(n, sizeof *S->lower);
  S->keyed = malloc(n * sizeof *S->keyed);
  S->own_col = calloc(n, sizeof *S->own_col);
  S->strict = calloc(n, sizeof *S->strict);
  S->stuck = calloc(n, 1);
  S->rep = malloc(n * sizeof *S->rep);
  S->pred = malloc(n * sizeof *S->pred);
  S->part = malloc((p->n_comms ? p->n_comms : 1) * sizeof *S->part);
  S->heard = calloc(n_pt ? n_pt : 1, sizeof *S->heard);
  S->n_heard = n_pt;
  if (!S->lower || !S->stuck || !S->keyed || !S->own_col || !S->strict || !S->rep || !S->pred || !S->part || !S->heard)
    return cg_fail(CG_ERR_NO_MEMORY, "allocating send/receive levels");
  memset(levels, 0, n * sizeof *levels);
  for (uint32_t s = 0; s < n; s++) S->keyed[s] = S->rep[s] = S->pred[s] = NONE;
  for (uint32_t c = 0; c < p->n_comms; c++) {
    S->part[c] = NONE;
    for (uint32_t i = 0; i < n_pt; i++)
      if (pt->comms[i] == p->comms[c].comm) S->part[c] = i;
    for (uint32_t k = 0; k < p->comms[c].n_steps; k++) S->keyed[p->comms[c].steps[k]] = c;
  }
  return CG_SUCCESS;
}

cg_status_t cg_p2p_levels(uint32_t *levels, const cg_plan_t *p, const cg_participants_t *pt, cg_status_t mine,
                          const char *where) {
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", mine != CG_SUCCESS ? cg_error_last() : "");
  cg_status_t st = CG_SUCCESS;
  state_t S = {0};
  if (mine == CG_SUCCESS) {
    mine = state_make(&S, levels, p, pt);
    /* Without participants (a host plan: its executor posts each send and
     * receive on its own, and its issue order falls back where groups would
     * wait for each other) the levels are the local ones of before: D over
     * dependencies only, a level above every one of its interval that leads
     * to it. With them, D covers whole units from the start. */
    if (mine == CG_SUCCESS) mine = settle_here(&S, 4 * S.n + 8);
    if (mine == CG_SUCCESS && !pt && !S.settled) /* local chains settle in a few sweeps */
      mine = cg_fail(CG_ERR_INTERNAL, "the local levels of sends and receives did not settle in %u sweeps", 4 * S.n + 8);
    if (mine != CG_SUCCESS) snprintf(detail, sizeof detail, "%s: %s", where, cg_error_last());
  }
  /* every participant in every pass, even after a failure here or on another
   * communicator: its ranks wait for this one's word */
  for (int pass = 0; pt && pass <= PASSES; pass++)
    for (uint32_t k = 0; k < pt->n; k++) {
      uint32_t i = pass % 2 ? pt->n - 1 - k : k, c = NONE;
      for (uint32_t q = 0; mine == CG_SUCCESS && q < p->n_comms && c == NONE; q++)
        if (p->comms[q].comm == pt->comms[i]) c = q;
      int failed_rank = -1;
      char waiting_in[512];
      snprintf(waiting_in, sizeof waiting_in, "%s (settling send/receive levels)", where);
      int failed_here = mine != CG_SUCCESS || st != CG_SUCCESS;
      cg_status_t s = settle(failed_here ? NULL : &S, i, failed_here ? NONE : c, pt->comms[i], failed_here,
                             pass == PASSES, &failed_rank, pt->timeout_s, waiting_in);
      if (s == CG_ERR_TIMEOUT) { /* no more waiting: the job is to end */
        char why[1536];
        snprintf(why, sizeof why, "%s", cg_error_last());
        st = cg_fail(s, "%s", why);
        mine = CG_SUCCESS;
        pass = PASSES;
        break;
      }
      if (failed_here) continue;
      char label[64];
      cg_comm_id_label(label, sizeof label, pt->comms[i]->id);
      if (s != CG_SUCCESS) {
        char why[1024];
        snprintf(why, sizeof why, "%s", cg_error_last());
        st = cg_fail(s, "%s: communicator %s: %s", where, label, why);
      } else if (failed_rank >= 0) {
        st = cg_fail(CG_ERR_BACKEND, "%s: rank %d of communicator %s could not build its plan (its own cg_compile "
                     "says why)", where, failed_rank, label);
      }
    }
  state_free(&S);
  if (mine != CG_SUCCESS) return cg_fail(mine, "%s", detail);
  return st;
}
