/* Levels of sends and receives: which group of its interval each one is
 * issued in (issue_order.c).
 *
 * Between two collectives of a communicator, its sends and receives run on one
 * stream in groups: a group is posted as a whole once every member's
 * dependencies are done and the unit before it on the stream is, and a member
 * completes only once its match on the peer was posted. So, for the plan not
 * to hang, a send and the receive it matches must go in groups of the same
 * level on both ranks, and the units (groups and collectives, over all ranks)
 * must not wait for each other in a cycle.
 *
 * Without the exchange (a host plan, whose executor posts each operation on
 * its own) a level is the local one: above every send or receive of its
 * communicator and interval that leads to it, and not below the previous
 * message of its kind to the same peer (messages between two ranks keep their
 * order).
 *
 * With it (a device plan) levels come from one number per operation, its
 * depth, the same for both sides of a message and for every rank's copy of a
 * collective: the longest chain of communication operations that leads to it,
 * over all ranks. An operation's depth is at least its match's, one more than
 * every operation its dependencies reach (through any kernel or host
 * function), not below the previous message of its kind to the same peer in
 * its interval; a send or receive is deeper than the collective before it on
 * its communicator, and a collective deeper than everything of its interval
 * and than the collective before it. A group holds the operations of one
 * depth, so everything a unit waits for (its members' dependencies, the unit
 * before it on the stream, and through the peers their members' dependencies
 * and stream predecessors) is strictly shallower: no cycle, on any number of
 * communicators, whatever their order. Depths are the longest paths of that
 * graph, so they are the least that satisfy it; the level is the depth less
 * the interval's first possible one. A chain of operations that lead to each
 * other in a cycle (a receive on each side that its own send waits for) has no
 * depth: the ranks raise without end, and that is reported.
 *
 * An earlier rule kept one group wherever the units stayed acyclic, raising one
 * operation at a time; its choices could not be undone, and some programs of
 * self-messages and chains through two communicators were refused as cycles
 * (test_mpi_levels). Depths may split an interval into more groups (an
 * operation reached through another communicator's chain sits above the
 * interval's independent ones), each a few microseconds on a device.
 *
 * The ranks of each communicator exchange depths over its control channel and
 * raise them to their matches' until nothing any rank says changes. Within one
 * communicator, with the others' depths fixed, that takes at most one round
 * per message and collective on it: more rounds mean a cycle. Communicators are
 * settled one after another in order of their agreed id, the same order on
 * every rank; a chain from A through B back to A needs A settled again after
 * B, and communicators may cover different ranks, with no collective over all.
 * So every rank makes PASSES passes over its communicators (alternating
 * directions), then a last one to verify: if any rank of a communicator would
 * still change anything there, cg_compile fails on every rank of it, naming
 * the nodes, rather than leave matching operations at levels that differ.
 * Every decision to stop is taken on what all ranks of the communicator
 * received, so all take it in the same round. */
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
#define NONE UINT32_MAX
#define COLLECTIVE_PEER (-2) /* an entry of the exchange that is a collective */

static int is_p2p_step(const cg_step_t *s) { return s->kind == CG_STEP_COLLECTIVE && cg_kind_is_p2p(s->op_kind); }

typedef struct level_entry {
  int32_t peer; /* -1: padding; COLLECTIVE_PEER: a collective */
  int32_t kind; /* 0 send, 1 receive, 2 collective */
  uint32_t level; /* the depth */
  uint32_t node;
} level_entry_t;

/* Per participant communicator: what was said last. */
typedef struct heard {
  unsigned char *last; /* the last round's data and hellos, to see whether anything changed */
  size_t last_bytes;
  uint32_t last_hello_bytes;
  unsigned char *sent; /* what this rank said last (its entries) */
  size_t sent_bytes;
} heard_t;

typedef struct state {
  const cg_plan_t *p;
  uint32_t n; /* steps */
  uint32_t *levels;
  uint32_t *keyed;      /* the plan communicator of a step on its step list, else NONE */
  uint32_t *prev_coll;  /* keyed: the collective before it on its communicator, or NONE */
  uint32_t *first;      /* a collective: the position on its communicator's list where its interval starts */
  uint32_t *pos;        /* keyed: its position on its communicator's list */
  uint32_t *depth, *lower; /* keyed: the depth; the matches' depths heard */
  uint32_t *reach;      /* every step: one more than the deepest operation its dependencies reach, or 0 */
  int settled;          /* nothing was heard since the depths were last computed */
  heard_t *heard;       /* per participant */
  uint32_t n_heard;
} state_t;

static const char cycle_text[] =
    "its sends and receives wait for each other in a cycle across ranks (a receive waits, through the peer, for a "
    "send of its own rank that depends on it): the plan would hang on any transport";

static uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

/* Depths to a fixed point under the matches heard. Dependencies come first in
 * step order, but an interval's collective may come before its sends and
 * receives, so this sweeps until nothing changes: depths only grow, and with
 * the matches fixed a plan settles in a few sweeps. One that does not has an
 * operation that waits for the collective closing its own interval. */
static cg_status_t settle_here(state_t *S) {
  if (S->settled) return CG_SUCCESS;
  const cg_plan_t *p = S->p;
  for (uint32_t sweep = 0; sweep < S->n + 2; sweep++) {
    int changed = 0;
    for (uint32_t s = 0; s < S->n; s++) {
      const cg_step_t *t = &p->steps[s];
      uint32_t r = 0;
      for (uint32_t e = 0; e < t->n_deps; e++) {
        uint32_t d = t->deps[e];
        r = max_u32(r, S->keyed[d] != NONE ? S->depth[d] + 1 : S->reach[d]);
      }
      S->reach[s] = r;
      uint32_t c = S->keyed[s];
      if (c == NONE) continue;
      uint32_t need = max_u32(r, S->lower[s]);
      if (S->prev_coll[s] != NONE) need = max_u32(need, S->depth[S->prev_coll[s]] + 1);
      if (is_p2p_step(t)) {
        if (t->post_after != CG_NO_STEP && p->steps[t->post_after].group == t->group)
          need = max_u32(need, S->depth[t->post_after]);
      } else {
        const cg_plan_comm_t *pc = &p->comms[c];
        for (uint32_t q = S->first[s]; q < S->pos[s]; q++) need = max_u32(need, S->depth[pc->steps[q]] + 1);
      }
      if (need > S->depth[s]) S->depth[s] = need, changed = 1;
    }
    if (!changed) {
      S->settled = 1;
      return CG_SUCCESS;
    }
  }
  return cg_fail(CG_ERR_MISMATCH, "%s", cycle_text);
}

/* The local levels (no exchange): per step and communicator, the latest of
 * its sends and receives that the step's dependencies reach, as (interval,
 * level plus one); a send or receive goes above the one of its own interval,
 * and not below the one it posts after. */
static cg_status_t local_levels(state_t *S) {
  const cg_plan_t *p = S->p;
  uint32_t m = p->n_comms ? p->n_comms : 1;
  uint64_t *reached = calloc((size_t)(S->n ? S->n : 1) * m, sizeof *reached);
  if (!reached) return cg_fail(CG_ERR_NO_MEMORY, "settling send/receive levels");
  cg_status_t st = CG_SUCCESS;
  int changed = 1;
  for (uint32_t sweep = 0; changed && sweep < 4 * S->n + 8; sweep++) {
    changed = 0;
    for (uint32_t s = 0; s < S->n; s++) {
      const cg_step_t *t = &p->steps[s];
      uint64_t *mine = &reached[(size_t)s * m];
      memset(mine, 0, m * sizeof *mine);
      for (uint32_t e = 0; e < t->n_deps; e++)
        for (uint32_t c = 0; c < p->n_comms; c++) {
          uint64_t v = reached[(size_t)t->deps[e] * m + c];
          if (v > mine[c]) mine[c] = v;
        }
      uint32_t c = S->keyed[s];
      if (c == NONE || !is_p2p_step(t)) continue;
      uint32_t need = (uint32_t)(mine[c] >> 32) == t->group ? (uint32_t)mine[c] : 0;
      if (t->post_after != CG_NO_STEP && p->steps[t->post_after].group == t->group)
        need = max_u32(need, S->levels[t->post_after]);
      if (need > S->levels[s]) S->levels[s] = need, changed = 1;
      uint64_t own = (uint64_t)t->group << 32 | (S->levels[s] + 1);
      if (own > mine[c]) mine[c] = own;
    }
  }
  if (changed) /* dependencies point back: local chains settle in a few sweeps */
    st = cg_fail(CG_ERR_INTERNAL, "the local levels of sends and receives did not settle in %u sweeps", 4 * S->n + 8);
  free(reached);
  return st;
}

/* levels from depths: a send or receive's depth less the first its interval
 * can have (one more than the collective before it), the same on every rank
 * once the collectives' depths agree. */
static void levels_of_depths(state_t *S) {
  for (uint32_t s = 0; s < S->n; s++) {
    if (S->keyed[s] == NONE || !is_p2p_step(&S->p->steps[s])) continue;
    uint32_t base = S->prev_coll[s] != NONE ? S->depth[S->prev_coll[s]] + 1 : 0;
    S->levels[s] = S->depth[s] - base;
  }
}

/* My entries for communicator c, in its order: sends and receives, and
 * collectives. */
static cg_status_t my_entries(const state_t *S, uint32_t c, level_entry_t **out, uint32_t *n_out) {
  const cg_plan_comm_t *pc = &S->p->comms[c];
  *n_out = 0;
  *out = malloc((pc->n_steps + 1) * sizeof **out);
  if (!*out) return cg_fail(CG_ERR_NO_MEMORY, "settling send/receive levels");
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    uint32_t s = pc->steps[k];
    const cg_step_t *t = &S->p->steps[s];
    if (is_p2p_step(t))
      (*out)[(*n_out)++] = (level_entry_t){t->root, t->op_kind == CG_NODE_RECV, S->depth[s], t->node};
    else
      (*out)[(*n_out)++] = (level_entry_t){COLLECTIVE_PEER, 2, S->depth[s], t->node};
  }
  return CG_SUCCESS;
}

/* "rank r's node #n (depth a, then b)" for the operations whose depths
 * changed between two rounds (each rank's entries at its round's stride),
 * else the ranks whose entries changed. */
static void describe_change(char *out, size_t size, const uint32_t (*was)[3], const unsigned char *was_data,
                            size_t was_stride, const uint32_t (*now)[3], const unsigned char *now_data,
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
      len += (size_t)snprintf(out + len, size - len, "%srank %d's node #%u (depth %u, then %u)", len ? ", " : "", r,
                              b.node, a.level, b.level);
    }
    if (!named && was[r][0] != now[r][0])
      len += (size_t)snprintf(out + len, size - len, "%swhat rank %d says", len ? ", " : "", r);
  }
}

/* Raises my operations of communicator c to their matches' depths in `all`
 * (rank r's entries at all + r * stride, hellos[r][0] of them): the k-th send
 * from r to me matches my k-th receive from r, and the q-th collective of
 * every rank my q-th. */
static cg_status_t raise_to_matches(state_t *S, uint32_t c, const unsigned char *all, size_t stride,
                                    const uint32_t (*hellos)[3], int size, int me) {
  const cg_plan_comm_t *pc = &S->p->comms[c];
  size_t keys = 2 * (size_t)size + 1;
  /* slot[start[key] + q]: my q-th operation of that key, (2 * peer + kind) for sends and receives, 2 * size for
   * collectives; one entry per operation */
  uint32_t *slot = malloc((pc->n_steps ? pc->n_steps : 1) * sizeof *slot);
  uint32_t *start = calloc(keys + 1, sizeof *start), *cursor = calloc(keys, sizeof *cursor);
  cg_status_t st = CG_SUCCESS;
  if (!slot || !start || !cursor) {
    st = cg_fail(CG_ERR_NO_MEMORY, "settling send/receive levels");
    goto out;
  }
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *t = &S->p->steps[pc->steps[k]];
    start[(is_p2p_step(t) ? 2 * (size_t)t->root + (t->op_kind == CG_NODE_RECV) : 2 * (size_t)size) + 1]++;
  }
  for (size_t key = 0; key < keys; key++) start[key + 1] += start[key];
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *t = &S->p->steps[pc->steps[k]];
    size_t key = is_p2p_step(t) ? 2 * (size_t)t->root + (t->op_kind == CG_NODE_RECV) : 2 * (size_t)size;
    slot[start[key] + cursor[key]++] = pc->steps[k];
  }
  for (int r = 0; r < size; r++) {
    memset(cursor, 0, keys * sizeof *cursor);
    for (uint32_t i = 0; i < hellos[r][0]; i++) {
      level_entry_t e;
      memcpy(&e, all + (size_t)r * stride + i * sizeof e, sizeof e);
      size_t key;
      if (e.peer == COLLECTIVE_PEER) key = 2 * (size_t)size;
      else if (e.peer == me) key = 2 * (size_t)r + !e.kind; /* their send is my receive from r */
      else continue;
      uint32_t q = cursor[key]++;
      if (q >= start[key + 1] - start[key]) continue; /* unmatched: only with the cross-rank check off */
      uint32_t s = slot[start[key] + q];
      if (e.level > S->lower[s]) S->lower[s] = e.level, S->settled = 0;
    }
  }
out:
  free(slot);
  free(start);
  free(cursor);
  return st;
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
  /* on the stack up to 256 ranks, so that a rank short of memory still
   * joins the hellos and tells the others */
  uint32_t stack_hellos[256][3];
  uint32_t (*hellos)[3] = size <= 256 ? stack_hellos : malloc((size_t)size * sizeof *hellos);
  level_entry_t *entries = NULL;
  unsigned char *mine = NULL, *all = NULL;
  if (!hellos) goto oom;
  for (uint32_t round = 0;; round++) {
    uint32_t n_entries = 0;
    free(entries);
    entries = NULL;
    if (!failed_here && c != NONE) {
      st = settle_here(S);
      if (st == CG_SUCCESS) st = my_entries(S, c, &entries, &n_entries);
      if (st != CG_SUCCESS) { /* the others hear of it in this round and stop */
        failed_here = 1;
        n_entries = 0;
      }
    }
    /* dirty: what I say differs from what I said last; when no rank is, the
     * round would repeat the last one, and its data need not be sent */
    uint32_t dirty = 1;
    if (h && !failed_here) {
      size_t sent_bytes = n_entries * sizeof *entries;
      dirty = !h->sent || h->sent_bytes != sent_bytes || (sent_bytes && memcmp(h->sent, entries, sent_bytes) != 0);
      free(h->sent);
      h->sent = malloc(sent_bytes ? sent_bytes : 1);
      h->sent_bytes = sent_bytes;
      if (h->sent) {
        if (sent_bytes) memcpy(h->sent, entries, sent_bytes);
      } else { /* told in this round's hello, as above */
        st = cg_fail(CG_ERR_NO_MEMORY, "settling the send/receive levels");
        failed_here = 1;
        n_entries = 0;
      }
    }
    uint32_t hello[3] = {n_entries, (uint32_t)failed_here, dirty};
    cg_status_t x = cg_control_allgather(comm, hello, hellos, sizeof hello, timeout_s, waiting_in);
    if (x != CG_SUCCESS) {
      st = x;
      goto out;
    }
    uint32_t max_e = 0, total = 0, any_dirty = 0;
    for (int r = 0; r < size; r++) {
      any_dirty |= hellos[r][2];
      if (hellos[r][1] && *failed_rank < 0 && r != me) *failed_rank = r;
      max_e = max_u32(max_e, hellos[r][0]);
      total += hellos[r][0];
    }
    if (failed_here || *failed_rank >= 0) goto out; /* every rank sees the same and stops here */
    if (!any_dirty && h->last) goto out;            /* settled (as below, with the same data) */
    size_t bytes = max_e * sizeof *entries, hello_bytes = sizeof hello * (size_t)size;
    free(mine);
    free(all);
    mine = calloc(bytes ? bytes : 1, 1);
    all = malloc((size_t)size * bytes + hello_bytes + 1);
    /* Every rank now joins the round of entries and this one cannot: the others
     * wait in it until their timeout names this rank, for ever without one
     * (as in cg_agree_with when its allocation fails). */
    if (!mine || !all) goto oom;
    for (uint32_t i = 0; i < max_e; i++) {
      level_entry_t e = i < n_entries ? entries[i] : (level_entry_t){-1, 0, 0, 0};
      memcpy(mine + i * sizeof e, &e, sizeof e);
    }
    /* all: every rank's entries, then the hellos (compared with the last round's) */
    if (bytes && (st = cg_control_allgather(comm, mine, all, bytes, timeout_s, waiting_in)) != CG_SUCCESS) goto out;
    memcpy(all + (size_t)size * bytes, hellos, hello_bytes);
    size_t all_bytes = (size_t)size * bytes + hello_bytes;
    int same = h->last && h->last_bytes == all_bytes && memcmp(h->last, all, all_bytes) == 0;
    if (!same && verify) {
      char which[768] = "";
      if (h->last && h->last_hello_bytes == hello_bytes)
        describe_change(which, sizeof which, (const uint32_t(*)[3])(h->last + h->last_bytes - hello_bytes), h->last,
                        (h->last_bytes - hello_bytes) / (size_t)size, (const uint32_t(*)[3])hellos, all, bytes, size);
      st = cg_fail(CG_ERR_UNSUPPORTED,
                   "the groups of its sends and receives did not settle in %d passes over the communicators (chains "
                   "through other communicators); still changing: %s",
                   PASSES, which[0] ? which : "what the ranks say");
      goto out;
    }
    free(h->last);
    h->last = all;
    h->last_bytes = all_bytes;
    h->last_hello_bytes = (uint32_t)hello_bytes;
    all = NULL;
    if (same) goto out;
    /* With the other communicators' depths fixed, every round carries the
     * chains one operation further across ranks, and none is longer than the
     * operations on this communicator; a cycle raises without end. Every rank
     * sees the same counts, so all stop here together. */
    if (round > total + (uint32_t)size + 16) {
      st = cg_fail(CG_ERR_MISMATCH, "%s", cycle_text);
      goto out;
    }
    if (c != NONE && (st = raise_to_matches(S, c, h->last, bytes, hellos, size, me)) != CG_SUCCESS)
      failed_here = 1; /* the next round's hello tells the others, and every rank stops there */
  }
oom:
  st = cg_fail(CG_ERR_NO_MEMORY, "settling the send/receive levels");
out:
  if (hellos != stack_hellos) free(hellos);
  free(entries);
  free(mine);
  free(all);
  return st;
}

static void state_free(state_t *S) {
  for (uint32_t i = 0; S->heard && i < S->n_heard; i++) {
    free(S->heard[i].last);
    free(S->heard[i].sent);
  }
  free(S->heard);
  free(S->keyed);
  free(S->prev_coll);
  free(S->first);
  free(S->pos);
  free(S->depth);
  free(S->lower);
  free(S->reach);
}

static cg_status_t state_make(state_t *S, uint32_t *levels, const cg_plan_t *p, const cg_participants_t *pt) {
  uint32_t n = p->n_steps ? p->n_steps : 1, n_pt = pt ? pt->n : 0;
  *S = (state_t){.p = p, .n = p->n_steps, .levels = levels};
  S->keyed = malloc(n * sizeof *S->keyed);
  S->prev_coll = malloc(n * sizeof *S->prev_coll);
  S->first = calloc(n, sizeof *S->first);
  S->pos = calloc(n, sizeof *S->pos);
  S->depth = calloc(n, sizeof *S->depth);
  S->lower = calloc(n, sizeof *S->lower);
  S->reach = calloc(n, sizeof *S->reach);
  S->heard = calloc(n_pt ? n_pt : 1, sizeof *S->heard);
  S->n_heard = n_pt;
  if (!S->keyed || !S->prev_coll || !S->first || !S->pos || !S->depth || !S->lower || !S->reach || !S->heard)
    return cg_fail(CG_ERR_NO_MEMORY, "allocating send/receive levels");
  memset(levels, 0, n * sizeof *levels);
  for (uint32_t s = 0; s < n; s++) S->keyed[s] = S->prev_coll[s] = NONE;
  for (uint32_t c = 0; c < p->n_comms; c++) {
    const cg_plan_comm_t *pc = &p->comms[c];
    uint32_t coll = NONE, start = 0;
    for (uint32_t k = 0; k < pc->n_steps; k++) {
      uint32_t s = pc->steps[k];
      S->keyed[s] = c;
      S->pos[s] = k;
      S->prev_coll[s] = coll;
      if (is_p2p_step(&p->steps[s])) continue;
      S->first[s] = start;
      coll = s;
      start = k + 1;
    }
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
     * wait for each other) the levels are the local ones; with them, depths. */
    if (mine == CG_SUCCESS) mine = pt ? settle_here(&S) : local_levels(&S);
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
  if (pt && mine == CG_SUCCESS && st == CG_SUCCESS) levels_of_depths(&S);
  state_free(&S);
  if (mine != CG_SUCCESS) return cg_fail(mine, "%s", detail);
  return st;
}
