#include "fusion.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cost_model.h"
#include "error.h"
#include "graph_view.h"
#include "heap.h"
#include "tuning.h"
#include "rank_check.h"

/* Used where neither the options, the environment nor the backend say. */
#define DEFAULT_BUCKET_BYTES ((size_t)25 << 20)
/* The largest bucket of a tuned plan whose compile gives no size, and of a
 * bucket that waits for compute where the backend prefers less than DDP's
 * caps (below): the model
 * picks the boundaries, and a backend's preferred size (a guess for
 * communication alone: 4 MiB for MPI on one node) must not bind it. On one
 * H200 (ResNet-50, B = 5 ms) the mpi-staged backend's collectives cost some
 * 85 us each beside the backward pass, and 25 MiB buckets exposed 0.63x
 * what the preferred 4 MiB did, which the tuner could not reach. */
#define TUNED_MAX_BUCKET_BYTES ((size_t)256 << 20)

/* Buckets whose members wait for compute between them (a gradient's backward
 * runs after the bucket opened) close once they hold these sizes when the
 * library picks the bucket size, so their communication overlaps the compute
 * still to come instead of waiting for all of it: the first bucket on a
 * communicator at 1 MiB, the later ones at 25 MiB. These are PyTorch DDP's
 * caps, applied as DDP applies them: the member that reaches the cap still
 * joins. Stopping below the cap instead made more and smaller buckets
 * (GPT-2's layers of 27 MiB each split in two), and where communication is
 * the critical path each extra bucket costs a collective's fixed cost. Where
 * the backend prefers less than 25 MiB (MPI's 4 MiB on one node, a guess for
 * communication alone), such buckets follow DDP's caps all the same: on one
 * H200 the mpi-staged backend's 4 MiB buckets exposed 1.4-1.8x what DDP's
 * buckets staged alike did beside backward passes of 1 and 5 ms, each staged
 * collective costing some 80 us however small. A bucket size given by the
 * options or CG_BUCKET_BYTES is kept. */
#define OVERLAP_FIRST_BYTES ((size_t)1 << 20)
#define OVERLAP_BUCKET_BYTES ((size_t)25 << 20)

size_t cg_fusion_node_bytes(const cg_node_rec_t *node) {
  size_t bytes = node->count * cg_dtype_size(node->dtype); /* recording checked it does not overflow */
  if (node->kind == CG_NODE_ALLGATHER || node->kind == CG_NODE_REDUCE_SCATTER) bytes *= (size_t)node->comm->size;
  return bytes;
}

/* Nodes that may share a bucket. */
static int same_key(const cg_node_rec_t *a, const cg_node_rec_t *b) {
  return a->kind == b->kind && a->comm == b->comm && a->dtype == b->dtype &&
         (!cg_kind_has_op(a->kind) || a->op == b->op) && (!cg_kind_has_root(a->kind) || a->root == b->root);
}

/* ---- the simulation */

enum { WAITING, QUEUED, IN_BUCKET, DONE };

typedef struct open_bucket {
  int open;
  uint32_t first, last; /* positions in the communicator's sequence */
  size_t bytes;
  uint32_t compute_epoch; /* compute nodes done when it opened */
  uint32_t index;         /* buckets opened on the communicator before it */
} open_bucket_t;

typedef struct sim {
  const cg_graph_t *g;
  const cg_comm_order_t *order;
  cg_fusion_t *f;
  uint32_t *rank;     /* per node: place in the deterministic topological order */
  uint32_t *seq;      /* per node: its communicator's sequence, UINT32_MAX for none */
  uint32_t *pos;      /* per node: place in that sequence */
  uint32_t *pending;  /* per node: dependencies not done */
  uint8_t *state;
  uint8_t *feeds_other; /* per node: a successor leads to communication off its communicator */
  open_bucket_t *open; /* per sequence */
  uint32_t *n_opened;  /* per sequence: buckets opened so far */
  size_t *largest;     /* per sequence: the largest bucket of several members so far */
  cg_heap_t ready;     /* ready nodes by rank */
  uint32_t n_done;
  uint32_t compute_done; /* user compute nodes done (host functions, child graphs, events) */
  int library_size;      /* the bucket size is the library's choice: overlap caps apply */
  const cg_tuning_t *tuning;
  uint8_t *tuned_break;  /* per node: tuning starts a new bucket here; NULL without tuning */
} sim_t;

/* Into the ready heap, by rank. */
static void queue(sim_t *s, uint32_t node) {
  s->state[node] = QUEUED;
  cg_heap_push(&s->ready, node);
}

static void extend(sim_t *s, uint32_t c);

static void finish(sim_t *s, uint32_t node) {
  s->state[node] = DONE;
  s->n_done++;
  const cg_node_rec_t *n = cg_graph_node(s->g, node);
  if (!n->comm) s->compute_done++;
  for (uint32_t e = 0; e < n->succs.len; e++) {
    uint32_t next = n->succs.items[e].node;
    s->pending[next]--;
    uint32_t c = s->seq[next];
    /* the operation an open bucket waits for: it may join now */
    if (c != UINT32_MAX && s->open[c].open && s->pos[next] == s->open[c].last + 1) {
      extend(s, c);
      continue;
    }
    if (s->pending[next] == 0 && s->state[next] == WAITING) queue(s, next);
  }
}

static void close_bucket(sim_t *s, uint32_t c) {
  open_bucket_t *b = &s->open[c];
  b->open = 0;
  if (b->last > b->first && b->bytes > s->largest[c]) s->largest[c] = b->bytes;
  const cg_comm_sequence_t *sq = &s->order->sequences[c];
  for (uint32_t p = b->first; p <= b->last; p++) finish(s, sq->nodes[p]);
}

typedef enum { JOIN, WAIT, NEVER } verdict_t;

/* Whether node n's inputs are done: JOIN; WAIT for work outside the open
 * bucket; NEVER (why: CG_FUSE_DEPENDS) where it depends on a member. */
static verdict_t inputs_ready(const sim_t *s, uint32_t c, const cg_node_rec_t *n, cg_fuse_why_t *why) {
  const open_bucket_t *b = &s->open[c];
  uint32_t last = s->order->sequences[c].nodes[b->last];
  verdict_t v = JOIN;
  for (uint32_t e = 0; e < n->preds.len; e++) {
    const cg_edge_t *edge = &n->preds.items[e];
    if (s->state[edge->node] == DONE) continue;
    int member = s->seq[edge->node] == c && s->pos[edge->node] >= b->first && s->pos[edge->node] <= b->last;
    if (member && edge->node == last && edge->causes == CG_EDGE_COMM_ORDER) continue;
    if (member) {
      *why = CG_FUSE_DEPENDS;
      return NEVER;
    }
    v = WAIT;
  }
  return v;
}

static verdict_t joinable(const sim_t *s, uint32_t c, uint32_t node, cg_fuse_why_t *why) {
  const open_bucket_t *b = &s->open[c];
  const cg_comm_sequence_t *sq = &s->order->sequences[c];
  const cg_node_rec_t *n = cg_graph_node(s->g, node), *head = cg_graph_node(s->g, sq->nodes[b->first]);
  uint32_t last = sq->nodes[b->last];
  if (!cg_kind_is_fusible(n->kind) || !same_key(n, head)) {
    *why = cg_kind_is_fusible(n->kind) ? CG_FUSE_DIFFERS : CG_FUSE_NOT_FUSIBLE;
    return NEVER;
  }
  if (s->tuned_break && s->tuned_break[node]) {
    *why = CG_FUSE_TUNED;
    return NEVER;
  }
  size_t bytes = cg_fusion_node_bytes(n), cap = s->f->bucket_bytes[c];
  /* compute ran since the bucket opened: this member's inputs come later
   * than the first member's (re-checked each time it is asked), so DDP's
   * caps apply, in place of a smaller size of the backend's */
  int overlapping = s->library_size && s->compute_done != b->compute_epoch;
  if (s->library_size && cap < OVERLAP_BUCKET_BYTES) {
    if (overlapping) {
      cap = TUNED_MAX_BUCKET_BYTES;
    } else {
      /* which size applies is known once the inputs are: compute may still
       * run before them (asked again as each input finishes) */
      if (inputs_ready(s, c, n, why) == WAIT) return WAIT;
    }
  }
  /* a first member larger than the bucket size fills it alone */
  if (b->bytes > cap || bytes > cap - b->bytes) {
    *why = CG_FUSE_FULL;
    return NEVER;
  }
  /* the bucket closes once it holds its overlap size */
  if (overlapping) {
    size_t overlap = b->index == 0 ? OVERLAP_FIRST_BYTES : OVERLAP_BUCKET_BYTES;
    if (overlap < cap && b->bytes >= overlap) {
      *why = CG_FUSE_OVERLAP;
      return NEVER;
    }
  }
  if (s->feeds_other[last]) {
    *why = CG_FUSE_FEEDS;
    return NEVER;
  }
  return inputs_ready(s, c, n, why);
}

/* Takes in the operations after the bucket's last member while they may
 * join; closes the bucket once the next one never can. */
static void extend(sim_t *s, uint32_t c) {
  open_bucket_t *b = &s->open[c];
  const cg_comm_sequence_t *sq = &s->order->sequences[c];
  while (b->open) {
    if (b->last + 1 >= sq->len) {
      close_bucket(s, c);
      return;
    }
    uint32_t next = sq->nodes[b->last + 1];
    cg_fuse_why_t why = CG_FUSE_JOINED;
    verdict_t v = joinable(s, c, next, &why);
    if (v == WAIT) return;
    if (v == NEVER) {
      s->f->why[next] = (uint8_t)why;
      close_bucket(s, c);
      return;
    }
    b->last++;
    b->bytes += cg_fusion_node_bytes(cg_graph_node(s->g, next));
    s->state[next] = IN_BUCKET;
    s->f->why[next] = CG_FUSE_JOINED;
  }
}

static void open_bucket(sim_t *s, uint32_t node) {
  uint32_t c = s->seq[node];
  s->open[c] = (open_bucket_t){1, s->pos[node], s->pos[node], cg_fusion_node_bytes(cg_graph_node(s->g, node)),
                               s->compute_done, s->n_opened[c]++};
  s->state[node] = IN_BUCKET;
  extend(s, c);
}

/* The open bucket whose first member comes first; UINT32_MAX if none. */
static uint32_t lowest_open(const sim_t *s) {
  uint32_t best = UINT32_MAX, best_rank = UINT32_MAX;
  for (uint32_t c = 0; c < s->order->n_sequences; c++) {
    if (!s->open[c].open) continue;
    uint32_t r = s->rank[s->order->sequences[c].nodes[s->open[c].first]];
    if (r < best_rank) best = c, best_rank = r;
  }
  return best;
}

static cg_status_t simulate(sim_t *s, const char *where) {
  uint32_t n = cg_graph_node_count(s->g);
  for (uint32_t v = 0; v < n; v++) {
    s->pending[v] = cg_graph_node(s->g, v)->preds.len;
    if (!s->pending[v]) queue(s, v);
  }
  for (;;) {
    while (s->ready.n) {
      uint32_t v = cg_heap_pop(&s->ready);
      const cg_node_rec_t *node = cg_graph_node(s->g, v);
      if (cg_kind_is_fusible(node->kind) && s->f->bucket_bytes[s->seq[v]])
        open_bucket(s, v);
      else
        finish(s, v);
    }
    uint32_t c = lowest_open(s);
    if (c == UINT32_MAX) break;
    const cg_comm_sequence_t *sq = &s->order->sequences[c];
    uint32_t last = s->open[c].last;
    if (last + 1 < sq->len) s->f->why[sq->nodes[last + 1]] = CG_FUSE_WAITED;
    close_bucket(s, c);
  }
  if (s->n_done != n)
    return cg_fail(CG_ERR_INTERNAL, "%s: fusion left %u of %u nodes unscheduled", where, n - s->n_done, n);
  return CG_SUCCESS;
}

/* What communication a node's successors lead to, as a sequence index, or
 * one of these. */
#define REACH_NONE UINT32_MAX
#define REACH_MANY (UINT32_MAX - 1)

static uint32_t reach_merge(uint32_t a, uint32_t b) {
  if (a == REACH_NONE) return b;
  if (b == REACH_NONE || a == b) return a;
  return REACH_MANY;
}

/* Nodes a search from one node may visit before it gives up (and the caller
 * takes the safe answer): keeps the pass linear on large graphs. */
#define SEARCH_BUDGET 256

typedef struct search {
  uint32_t *stamp, *stack, round;
} search_t;

/* Whether `to` depends on `from`, found within the budget. */
static int depends_on(const cg_graph_t *g, search_t *sr, uint32_t from, uint32_t to) {
  uint32_t top = 0, visited = 0;
  sr->round++;
  sr->stack[top++] = from;
  sr->stamp[from] = sr->round;
  while (top && visited++ < SEARCH_BUDGET) {
    const cg_node_rec_t *x = cg_graph_node(g, sr->stack[--top]);
    for (uint32_t e = 0; e < x->succs.len; e++) {
      uint32_t w = x->succs.items[e].node;
      if (w == to) return 1;
      if (sr->stamp[w] == sr->round || top >= SEARCH_BUDGET) continue;
      sr->stamp[w] = sr->round;
      sr->stack[top++] = w;
    }
  }
  return 0;
}

/* A bucket holds back what its members feed until its last member is done.
 * Another rank may need that work (a collective on another communicator, a
 * send, work before either) before it can reach a later member of the same
 * bucket: every rank would then wait for the others. No rank sees that from
 * its own graph, so a member may have the next operation joined after it only
 * when everything else it feeds either leads to no communication off its
 * communicator (later operations of the same communicator come after the
 * bucket anyway) or depends on that next operation too (and so waits for the
 * bucket's last member without fusion as well). */
static cg_status_t find_feeds_other(sim_t *s, const uint32_t *topo, const char *where) {
  uint32_t n = cg_graph_node_count(s->g);
  uint32_t *reach = malloc((n ? n : 1) * sizeof *reach);
  search_t sr = {calloc(n ? n : 1, sizeof *sr.stamp), malloc((SEARCH_BUDGET + 1) * sizeof *sr.stack), 0};
  if (!reach || !sr.stamp || !sr.stack) {
    free(reach), free(sr.stamp), free(sr.stack);
    return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the fusion pass for %u nodes", where, n);
  }
  for (uint32_t i = n; i-- > 0;) {
    uint32_t v = topo[i], c = s->seq[v];
    const cg_node_rec_t *node = cg_graph_node(s->g, v);
    uint32_t next = c != REACH_NONE && s->pos[v] + 1 < s->order->sequences[c].len
                        ? s->order->sequences[c].nodes[s->pos[v] + 1]
                        : REACH_NONE;
    uint32_t all = REACH_NONE;
    for (uint32_t e = 0; e < node->succs.len; e++) {
      uint32_t to = node->succs.items[e].node, to_seq = s->seq[to];
      uint32_t self = to_seq == REACH_NONE ? REACH_NONE
                      : cg_kind_is_p2p(cg_graph_node(s->g, to)->kind) ? REACH_MANY
                                                                       : to_seq;
      uint32_t r = reach_merge(self, reach[to]);
      all = reach_merge(all, r);
      if (to != next && r != REACH_NONE && r != c && !s->feeds_other[v])
        s->feeds_other[v] = next == REACH_NONE || !depends_on(s->g, &sr, next, to);
    }
    reach[v] = all;
  }
  free(reach);
  free(sr.stamp);
  free(sr.stack);
  return CG_SUCCESS;
}

/* Reasons for nodes that never join: the first on a communicator, kinds that
 * do not fuse, differing neighbours. The simulation refines the rest. */
static void initial_reasons(cg_fusion_t *f, const cg_graph_t *g, const cg_comm_order_t *order) {
  uint32_t n = cg_graph_node_count(g);
  for (uint32_t v = 0; v < n; v++) f->why[v] = CG_FUSE_NOT_FUSIBLE;
  for (uint32_t c = 0; c < order->n_sequences; c++) {
    const cg_comm_sequence_t *sq = &order->sequences[c];
    for (uint32_t p = 0; p < sq->len; p++) {
      const cg_node_rec_t *node = cg_graph_node(g, sq->nodes[p]);
      if (!cg_kind_is_fusible(node->kind)) continue;
      if (!f->bucket_bytes[c])
        f->why[sq->nodes[p]] = CG_FUSE_OFF;
      else if (p == 0)
        f->why[sq->nodes[p]] = CG_FUSE_FIRST;
      else
        f->why[sq->nodes[p]] = same_key(node, cg_graph_node(g, sq->nodes[p - 1])) ? CG_FUSE_WAITED : CG_FUSE_DIFFERS;
    }
  }
}

/* Members a tuned bucket may have: keeps the boundary search linear in
 * practice on long sequences. */
#define TUNED_WINDOW 1024

/* A bucket that may end at a position: its first position, bytes and its
 * members' latest ready time. */
typedef struct bucket_choice {
  uint32_t first;
  size_t bytes;
  double ready;
} bucket_choice_t;

/* The buckets that may end at position p, first p, then p - 1, ..., while
 * first..p may form one bucket (same key, consecutive, within the bucket
 * size `cap` and TUNED_WINDOW members): into out (TUNED_WINDOW entries);
 * how many. */
static uint32_t buckets_ending_at(bucket_choice_t *out, const sim_t *s, const cg_comm_sequence_t *sq, size_t cap,
                                  uint32_t p) {
  uint32_t n = 0;
  double ready = 0;
  size_t bytes = 0;
  for (uint32_t i = p + 1; i-- > 0 && p - i < TUNED_WINDOW;) {
    const cg_node_rec_t *node = cg_graph_node(s->g, sq->nodes[i]);
    size_t b = cg_fusion_node_bytes(node);
    if (i < p && (b > cap || bytes > cap - b)) break;
    bytes += b;
    double r = s->tuning->ready_us[sq->nodes[i]];
    if (r > ready) ready = r;
    out[n++] = (bucket_choice_t){i, bytes, ready};
    /* i may join i - 1 only when both fuse with the same key */
    const cg_node_rec_t *before = i ? cg_graph_node(s->g, sq->nodes[i - 1]) : NULL;
    if (!before || !cg_kind_is_fusible(node->kind) || !cg_kind_is_fusible(before->kind) || !same_key(node, before))
      break;
  }
  return n;
}

/* Bucket boundaries for one communicator from measured times: with F(p) the
 * predicted finish of the collective that ends at position p, a bucket of
 * positions i..p starts once the one before has finished and its last input
 * is ready, and costs C(bytes) (cg_cost_model_collective_us: alpha + bytes /
 * bytes_per_us where the backend's library runs it):
 *   F(p) = min over i of max(F(i - 1), max ready(i..p)) + C(bytes(i..p))
 * over the i that may join p (buckets_ending_at). Marks the first position
 * of every chosen bucket that could have joined the one before. */
static cg_status_t tuned_breaks(sim_t *s, uint32_t c, const cg_comm_cost_t *cost, const char *where) {
  const cg_comm_sequence_t *sq = &s->order->sequences[c];
  uint32_t len = sq->len;
  double *finish = malloc((len ? len : 1) * sizeof *finish);
  uint32_t *from = malloc((len ? len : 1) * sizeof *from);
  bucket_choice_t *choices = malloc(TUNED_WINDOW * sizeof *choices);
  if (!finish || !from || !choices) {
    free(finish), free(from), free(choices);
    return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the tuned bucket search", where);
  }
  for (uint32_t p = 0; p < len; p++) {
    finish[p] = INFINITY;
    from[p] = p;
    uint32_t n = buckets_ending_at(choices, s, sq, s->f->bucket_bytes[c], p);
    const cg_node_rec_t *key = cg_graph_node(s->g, sq->nodes[p]);
    for (uint32_t j = 0; j < n; j++) {
      const bucket_choice_t *b = &choices[j];
      double start = b->first ? finish[b->first - 1] : 0;
      if (b->ready > start) start = b->ready;
      double f = start + cg_cost_model_collective_us(cost, key->kind, key->dtype, key->op, b->bytes);
      /* within a nanosecond counts as a tie, which goes to the larger bucket
       * (fewer collectives for the same finish) */
      if (f <= finish[p] + 1e-3) finish[p] = f, from[p] = b->first;
    }
  }
  for (uint32_t p = len; p-- > 0;) {
    uint32_t i = from[p];
    s->tuned_break[sq->nodes[i]] = 1;
    p = i;
    if (!p) break;
  }
  free(finish);
  free(from);
  free(choices);
  return CG_SUCCESS;
}

/* The search with overlap (cost->overlap_us > 0): every collective before a
 * bucket delays the compute its members wait for, so the k-th bucket's
 * members are ready overlap_us * (k - 1) later than measured. With F(p, k)
 * the finish of the k-th bucket when it ends at position p,
 *   F(p, k) = min over i of max(F(i - 1, k - 1), max ready(i..p) + overlap (k - 1))
 *             + C(bytes(i..p)),
 * and the boundaries of the best F(len - 1, k) (ties: fewer buckets). Up to
 * OVERLAP_MAX_BUCKETS buckets on sequences of up to CG_OVERLAP_MAX_COLLECTIVES
 * collectives; longer ones are searched without the overlap (and get none
 * from the cost model). */
#define OVERLAP_MAX_BUCKETS 48

static cg_status_t tuned_breaks_overlap(sim_t *s, uint32_t c, const cg_comm_cost_t *cost, const char *where) {
  const cg_comm_sequence_t *sq = &s->order->sequences[c];
  uint32_t len = sq->len, K = OVERLAP_MAX_BUCKETS < len ? OVERLAP_MAX_BUCKETS : len;
  if (!len) return CG_SUCCESS;
  double *finish = malloc((size_t)K * len * sizeof *finish);
  uint32_t *from = malloc((size_t)K * len * sizeof *from);
  bucket_choice_t *choices = malloc(TUNED_WINDOW * sizeof *choices);
  if (!finish || !from || !choices) {
    free(finish), free(from), free(choices);
    return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the tuned bucket search", where);
  }
  for (size_t e = 0; e < (size_t)K * len; e++) finish[e] = INFINITY, from[e] = UINT32_MAX;
  for (uint32_t p = 0; p < len; p++) {
    uint32_t n = buckets_ending_at(choices, s, sq, s->f->bucket_bytes[c], p);
    const cg_node_rec_t *key = cg_graph_node(s->g, sq->nodes[p]);
    for (uint32_t j = 0; j < n; j++) {
      const bucket_choice_t *b = &choices[j];
      uint32_t i = b->first;
      double cost_us = cg_cost_model_collective_us(cost, key->kind, key->dtype, key->op, b->bytes);
      /* k - 1 buckets before this one, at most i of them; the first bucket
       * begins the sequence */
      for (uint32_t k = i ? 2 : 1; k <= K && k - 1 <= i; k++) {
        double start = b->ready + cost->overlap_us * (double)(k - 1);
        if (k > 1) {
          double before = finish[(size_t)(k - 2) * len + i - 1];
          if (before == INFINITY) continue;
          if (before > start) start = before;
        }
        double f = start + cost_us;
        size_t at = (size_t)(k - 1) * len + p;
        if (f <= finish[at] + 1e-3) finish[at] = f, from[at] = i; /* ties: the larger bucket */
      }
    }
  }
  uint32_t best = UINT32_MAX;
  for (uint32_t k = 1; k <= K; k++) {
    double f = finish[(size_t)(k - 1) * len + len - 1];
    if (f < INFINITY && (best == UINT32_MAX || f < finish[(size_t)(best - 1) * len + len - 1] - 1e-3)) best = k;
  }
  for (uint32_t p = len, k = best; best != UINT32_MAX && p-- > 0 && k > 0; k--) {
    uint32_t i = from[(size_t)(k - 1) * len + p];
    s->tuned_break[sq->nodes[i]] = 1;
    p = i;
    if (!p) break;
  }
  free(finish);
  free(from);
  free(choices);
  if (best != UINT32_MAX) return CG_SUCCESS;
  /* none within OVERLAP_MAX_BUCKETS (sequences that break more often): the
   * search without the overlap, on ready times the cost model moved earlier
   * (cg_cost_model_overlap): this candidate then hopes for too much, and
   * the timing judges it */
  return tuned_breaks(s, c, cost, where);
}

cg_status_t cg_fusion_plan(cg_fusion_t *out, const cg_graph_t *g, const cg_comm_order_t *order, int enabled,
                           size_t bucket_bytes, const cg_tuning_t *tuning, const char *where) {
  cg_status_t st = CG_SUCCESS;
  uint32_t n = cg_graph_node_count(g), n_seq = order->n_sequences;
  size_t nn = n ? n : 1;
  sim_t s = {.g = g, .order = order, .f = out};
  *out = (cg_fusion_t){0};
  out->why = malloc(nn);
  out->bucket_bytes = calloc(n_seq ? n_seq : 1, sizeof *out->bucket_bytes);
  out->n_comms = n_seq;
  s.rank = malloc(nn * sizeof *s.rank);
  s.seq = malloc(nn * sizeof *s.seq);
  s.pos = malloc(nn * sizeof *s.pos);
  s.pending = malloc(nn * sizeof *s.pending);
  s.state = calloc(nn, 1);
  s.feeds_other = calloc(nn, 1);
  s.ready = cg_heap_make(malloc(nn * sizeof *s.ready.items), cg_heap_less_key, s.rank);
  s.open = calloc(n_seq ? n_seq : 1, sizeof *s.open);
  s.n_opened = calloc(n_seq ? n_seq : 1, sizeof *s.n_opened);
  s.largest = calloc(n_seq ? n_seq : 1, sizeof *s.largest);
  uint32_t *topo = malloc(nn * sizeof *topo);
  if (!out->why || !out->bucket_bytes || !s.rank || !s.seq || !s.pos || !s.pending || !s.state || !s.feeds_other ||
      !s.ready.items || !s.open || !s.n_opened || !s.largest || !topo) {
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the fusion pass for %u nodes", where, n);
    goto out;
  }
  s.library_size = !bucket_bytes && !tuning;
  s.tuning = tuning;
  for (uint32_t c = 0; c < n_seq && enabled; c++) {
    const cg_comm_t *comm = order->sequences[c].comm;
    const cg_backend_t *b = comm->ops->backend;
    size_t preferred = b && b->bucket_bytes ? b->bucket_bytes(comm->impl) : 0;
    out->bucket_bytes[c] = bucket_bytes ? bucket_bytes : preferred ? preferred : DEFAULT_BUCKET_BYTES;
    if (!bucket_bytes && tuning && out->bucket_bytes[c] < TUNED_MAX_BUCKET_BYTES)
      out->bucket_bytes[c] = TUNED_MAX_BUCKET_BYTES;
  }
  initial_reasons(out, g, order);
  if (!enabled) goto out;
  if ((st = cg_graph_topo_order(g, topo)) != CG_SUCCESS) goto out;
  for (uint32_t i = 0; i < n; i++) {
    s.rank[topo[i]] = i;
    s.seq[i] = UINT32_MAX;
  }
  for (uint32_t c = 0; c < n_seq; c++)
    for (uint32_t p = 0; p < order->sequences[c].len; p++) {
      s.seq[order->sequences[c].nodes[p]] = c;
      s.pos[order->sequences[c].nodes[p]] = p;
    }
  if ((st = find_feeds_other(&s, topo, where)) != CG_SUCCESS) goto out;
  if (tuning && !(s.tuned_break = calloc(nn, 1))) st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating tuned breaks", where);
  for (uint32_t c = 0; tuning && st == CG_SUCCESS && c < n_seq; c++) {
    const cg_comm_cost_t *cost = cg_tuning_cost(tuning, order->sequences[c].comm);
    if (cost && cost->overlap_us > 0 && order->sequences[c].len <= CG_OVERLAP_MAX_COLLECTIVES)
      st = tuned_breaks_overlap(&s, c, cost, where);
    else if (cost)
      st = tuned_breaks(&s, c, cost, where);
  }
  if (st == CG_SUCCESS) st = simulate(&s, where);
  /* the plan reports the largest bucket allowed: a backend's smaller size
   * gave way where buckets waited for compute */
  for (uint32_t c = 0; st == CG_SUCCESS && c < n_seq; c++)
    if (s.largest[c] > out->bucket_bytes[c]) out->bucket_bytes[c] = s.largest[c];
out:
  free(topo);
  free(s.rank);
  free(s.seq);
  free(s.pos);
  free(s.pending);
  free(s.state);
  free(s.feeds_other);
  free(s.ready.items);
  free(s.open);
  free(s.n_opened);
  free(s.largest);
  free(s.tuned_break);
  if (st != CG_SUCCESS) cg_fusion_free(out);
  return st;
}

/* ---- agreement: a node stays joined where every rank joined it */

static uint32_t sequence_index(const cg_comm_order_t *order, const cg_comm_t *comm) {
  for (uint32_t c = 0; c < order->n_sequences; c++)
    if (order->sequences[c].comm == comm) return c;
  return UINT32_MAX;
}

/* The fusion agreement's payload: one flag per collective of the
 * participant's sequence (sends and receives may differ between ranks;
 * collectives do not, after the check), 1 where this rank joined it. */
typedef struct agree_ctx {
  cg_fusion_t *f;
  const cg_graph_t *g;
  const cg_comm_sequence_t **seq; /* per participant; NULL when the graph does not use it */
} agree_ctx_t;

static size_t agree_bytes(void *ctx, uint32_t i) {
  const agree_ctx_t *a = ctx;
  size_t n = 0;
  for (uint32_t p = 0; a->seq[i] && p < a->seq[i]->len; p++)
    n += !cg_kind_is_p2p(cg_graph_node(a->g, a->seq[i]->nodes[p])->kind);
  return n;
}

static void agree_fill(void *ctx, uint32_t i, uint8_t *mine) {
  const agree_ctx_t *a = ctx;
  for (uint32_t p = 0, k = 0; a->seq[i] && p < a->seq[i]->len; p++) {
    uint32_t node = a->seq[i]->nodes[p];
    if (!cg_kind_is_p2p(cg_graph_node(a->g, node)->kind)) mine[k++] = a->f->why[node] == CG_FUSE_JOINED;
  }
}

/* Joined here but not on every rank: not joined. */
static void agree_use(void *ctx, uint32_t i, const uint8_t *all, size_t stride, int size) {
  agree_ctx_t *a = ctx;
  for (uint32_t p = 0, k = 0; a->seq[i] && p < a->seq[i]->len; p++) {
    uint32_t node = a->seq[i]->nodes[p];
    if (cg_kind_is_p2p(cg_graph_node(a->g, node)->kind)) continue;
    int everywhere = 1;
    for (int r = 0; r < size; r++) everywhere &= all[(size_t)r * stride + k];
    k++;
    if (a->f->why[node] == CG_FUSE_JOINED && !everywhere) a->f->why[node] = CG_FUSE_RANKS;
  }
}

cg_status_t cg_fusion_agree(cg_fusion_t *f, const cg_graph_t *g, const cg_comm_order_t *order,
                            const cg_participants_t *pt, cg_status_t mine, const char *where) {
  static const cg_agree_payload_t payload = {agree_bytes, agree_fill, agree_use};
  agree_ctx_t ctx = {f, g, calloc(pt->n ? pt->n : 1, sizeof *ctx.seq)};
  if (!ctx.seq && mine == CG_SUCCESS) mine = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the fusion agreement", where);
  for (uint32_t i = 0; ctx.seq && i < pt->n; i++) {
    uint32_t c = sequence_index(order, pt->comms[i]);
    ctx.seq[i] = c == UINT32_MAX ? NULL : &order->sequences[c];
  }
  /* without the list every payload is empty: this rank then only fails */
  cg_status_t st = cg_agree_with(NULL, pt, mine, ctx.seq ? &payload : NULL, &ctx, "agree on buckets", where);
  free(ctx.seq);
  return st;
}

void cg_fusion_free(cg_fusion_t *f) {
  if (!f) return;
  free(f->why);
  free(f->bucket_bytes);
  *f = (cg_fusion_t){0};
}
