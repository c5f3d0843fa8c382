/* Lowering: a recorded graph, its communicators' order and the agreed buckets
 * become the plan's steps.
 *
 * Each bucket (fusion.h) and each unfused node is an item. Items are ordered
 * by Kahn's algorithm over the contracted graph, earliest first member first,
 * and each becomes one step, or three for a bucket of several nodes: pack,
 * collective, unpack. Every edge between items runs from the item's last step
 * to the dependent item's first step. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fusion.h"
#include "graph_view.h"
#include "heap.h"
#include "lower.h"

typedef struct item {
  uint32_t seq;       /* communicator sequence; CG_NO_LANE for a host function */
  uint32_t first_pos; /* members: sequence positions first_pos .. first_pos + n - 1 */
  uint32_t node;      /* first member */
  uint32_t n;
  uint32_t rank;      /* topological rank of the first member */
  uint32_t first_step, collective_step, last_step;
} item_t;

typedef struct lowering {
  cg_plan_t *p;
  const cg_graph_t *g;
  const cg_comm_order_t *order;
  item_t *items;
  uint32_t n_items;
  uint32_t *item_of;      /* per node */
  uint32_t *preds;        /* per item: predecessor items, distinct, ascending */
  uint32_t *pred_start;   /* n_items + 1 */
  uint32_t *succs;        /* per item */
  uint32_t *succ_start;
  uint32_t *item_order;   /* items in Kahn order */
} lowering_t;

static int cmp_item(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

static cg_status_t make_items(lowering_t *l, const cg_fusion_t *f, const uint32_t *rank, const char *where) {
  uint32_t n = cg_graph_node_count(l->g);
  l->items = malloc((n ? n : 1) * sizeof *l->items);
  if (!l->items) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating %u plan items", where, n);
  for (uint32_t c = 0; c < l->order->n_sequences; c++) {
    const cg_comm_sequence_t *sq = &l->order->sequences[c];
    for (uint32_t p = 0; p < sq->len; p++) {
      uint32_t v = sq->nodes[p];
      if (p > 0 && f->why[v] == CG_FUSE_JOINED) {
        uint32_t it = l->item_of[sq->nodes[p - 1]];
        l->items[it].n++;
        l->item_of[v] = it;
        continue;
      }
      l->item_of[v] = l->n_items;
      l->items[l->n_items++] = (item_t){c, p, v, 1, rank[v], 0, 0, 0};
    }
  }
  for (uint32_t v = 0; v < n; v++) {
    if (cg_graph_node(l->g, v)->comm) continue;
    l->item_of[v] = l->n_items;
    l->items[l->n_items++] = (item_t){CG_NO_LANE, 0, v, 1, rank[v], 0, 0, 0};
  }
  return CG_SUCCESS;
}

static uint32_t member(const lowering_t *l, const item_t *it, uint32_t k) {
  return it->seq == CG_NO_LANE ? it->node : l->order->sequences[it->seq].nodes[it->first_pos + k];
}

/* Distinct predecessor items of every item, and successors. */
static cg_status_t connect_items(lowering_t *l, const char *where) {
  size_t total = 0;
  for (uint32_t v = 0; v < cg_graph_node_count(l->g); v++) total += cg_graph_node(l->g, v)->preds.len;
  l->preds = malloc((total ? total : 1) * sizeof *l->preds);
  l->pred_start = calloc((size_t)l->n_items + 1, sizeof *l->pred_start);
  l->succ_start = calloc((size_t)l->n_items + 2, sizeof *l->succ_start);
  if (!l->preds || !l->pred_start || !l->succ_start)
    return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating %zu item edges", where, total);
  uint32_t used = 0;
  for (uint32_t i = 0; i < l->n_items; i++) {
    const item_t *it = &l->items[i];
    uint32_t start = used;
    l->pred_start[i] = start;
    for (uint32_t k = 0; k < it->n; k++) {
      const cg_node_rec_t *node = cg_graph_node(l->g, member(l, it, k));
      for (uint32_t e = 0; e < node->preds.len; e++) {
        uint32_t from = l->item_of[node->preds.items[e].node];
        if (from == i) continue;
        l->preds[used++] = from;
      }
    }
    qsort(l->preds + start, used - start, sizeof *l->preds, cmp_item);
    uint32_t kept = start;
    for (uint32_t e = start; e < used; e++) {
      if (kept > start && l->preds[kept - 1] == l->preds[e]) continue;
      l->preds[kept++] = l->preds[e];
    }
    used = kept;
  }
  l->pred_start[l->n_items] = used;
  l->succs = malloc((used ? used : 1) * sizeof *l->succs);
  if (!l->succs) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating %u item edges", where, used);
  for (uint32_t e = 0; e < used; e++) l->succ_start[l->preds[e] + 2]++;
  for (uint32_t i = 0; i < l->n_items; i++) l->succ_start[i + 2] += l->succ_start[i + 1];
  for (uint32_t i = 0; i < l->n_items; i++)
    for (uint32_t e = l->pred_start[i]; e < l->pred_start[i + 1]; e++) l->succs[l->succ_start[l->preds[e] + 1]++] = i;
  return CG_SUCCESS;
}

/* Items by the topological rank of their first member. */
static int item_rank_less(uint32_t a, uint32_t b, const void *ctx) {
  const item_t *items = ctx;
  return items[a].rank < items[b].rank;
}

/* Kahn over items, the earliest first member first. */
static cg_status_t order_items(lowering_t *l, const char *where) {
  uint32_t n = l->n_items;
  uint32_t *pending = malloc((n ? n : 1) * sizeof *pending);
  cg_heap_t ready = cg_heap_make(malloc((n ? n : 1) * sizeof *ready.items), item_rank_less, l->items);
  l->item_order = malloc((n ? n : 1) * sizeof *l->item_order);
  cg_status_t st = CG_SUCCESS;
  if (!pending || !ready.items || !l->item_order) {
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: ordering %u items", where, n);
    goto out;
  }
  uint32_t n_out = 0;
  for (uint32_t i = 0; i < n; i++) {
    pending[i] = l->pred_start[i + 1] - l->pred_start[i];
    if (!pending[i]) cg_heap_push(&ready, i);
  }
  while (ready.n) {
    uint32_t top = cg_heap_pop(&ready);
    l->item_order[n_out++] = top;
    for (uint32_t e = l->succ_start[top]; e < l->succ_start[top + 1]; e++) {
      uint32_t s = l->succs[e];
      if (!--pending[s]) cg_heap_push(&ready, s);
    }
  }
  if (n_out != n) st = cg_fail(CG_ERR_INTERNAL, "%s: the fused graph has a cycle (%u of %u items ordered)", where, n_out, n);
out:
  free(pending);
  free(ready.items);
  return st;
}

static void sort_ascending(uint32_t *v, uint32_t n) {
  for (uint32_t a = 1; a < n; a++)
    for (uint32_t b = a; b > 0 && v[b - 1] > v[b]; b--) {
      uint32_t t = v[b];
      v[b] = v[b - 1];
      v[b - 1] = t;
    }
}

static void fill_from_node(cg_step_t *s, const cg_node_rec_t *node, uint32_t index) {
  s->op_kind = node->kind;
  s->node = index;
  s->comm = node->comm;
  s->send = node->send;
  s->recv = node->recv;
  s->count = node->count;
  s->dtype = node->dtype;
  s->op = node->op;
  s->root = node->root;
  s->fn = node->fn;
  s->arg = node->arg;
  s->object = node->user_object;
  s->bucket = CG_NO_STEP;
  s->post_after = s->post_next = CG_NO_STEP;
}

/* Steps, their dependencies and successors. */
static cg_status_t emit_steps(lowering_t *l, const char *where) {
  cg_plan_t *p = l->p;
  uint32_t n_steps = 0, n_buckets = 0;
  for (uint32_t k = 0; k < l->n_items; k++) {
    item_t *it = &l->items[l->item_order[k]];
    it->first_step = n_steps;
    if (it->n > 1) n_buckets++;
    it->collective_step = n_steps + (it->n > 1);
    n_steps += it->n > 1 ? 3 : 1;
    it->last_step = n_steps - 1;
  }
  size_t n_deps = 0;
  for (uint32_t i = 0; i < l->n_items; i++)
    n_deps += (l->pred_start[i + 1] - l->pred_start[i]) + (l->items[i].n > 1 ? 2 : 0);
  p->steps = calloc(n_steps ? n_steps : 1, sizeof *p->steps);
  p->buckets = calloc(n_buckets ? n_buckets : 1, sizeof *p->buckets);
  p->dep_storage = malloc((n_deps ? 2 * n_deps : 1) * sizeof *p->dep_storage);
  if (!p->steps || !p->buckets || !p->dep_storage)
    return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating %u steps and %zu dependencies", where, n_steps, n_deps);
  p->n_steps = n_steps;
  uint32_t *cursor = p->dep_storage;
  for (uint32_t k = 0; k < l->n_items; k++) {
    uint32_t i = l->item_order[k];
    item_t *it = &l->items[i];
    const cg_node_rec_t *head = cg_graph_node(l->g, it->node);
    uint32_t bucket = CG_NO_STEP;
    if (it->n > 1) {
      bucket = p->n_buckets++;
      cg_bucket_t *b = &p->buckets[bucket];
      b->members = malloc(it->n * sizeof *b->members);
      if (!b->members) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating a bucket of %u nodes", where, it->n);
      b->n_members = it->n;
      for (uint32_t m = 0; m < it->n; m++) {
        b->members[m] = member(l, it, m);
        b->bytes += cg_fusion_node_bytes(cg_graph_node(l->g, b->members[m]));
      }
      b->pack_step = it->first_step;
      b->collective_step = it->collective_step;
      b->unpack_step = it->last_step;
    }
    for (uint32_t s = it->first_step; s <= it->last_step; s++) {
      cg_step_t *step = &p->steps[s];
      fill_from_node(step, head, it->node);
      step->bucket = bucket;
      step->kind = head->kind == CG_NODE_HOST_FUNC ? CG_STEP_HOST_FUNC
                   : !head->comm                 ? CG_STEP_CUDA_NODE
                   : s == it->collective_step    ? CG_STEP_COLLECTIVE
                   : s == it->first_step      ? CG_STEP_PACK
                                              : CG_STEP_UNPACK;
      step->deps = cursor;
      if (s != it->first_step && s != it->collective_step) { /* unpack */
        step->deps[step->n_deps++] = it->collective_step;
      } else {
        if (s != it->first_step) step->deps[step->n_deps++] = it->first_step; /* collective after pack */
        /* Every edge runs from the item's last step to the next one's first,
         * a communicator's order included: the graph leaves out edges that
         * paths through that order already imply (a fence's, a hazard's), so
         * relaxing it to the collectives alone would lose them. */
        for (uint32_t e = l->pred_start[i]; e < l->pred_start[i + 1] && s == it->first_step; e++)
          step->deps[step->n_deps++] = l->items[l->preds[e]].last_step;
      }
      sort_ascending(step->deps, step->n_deps);
      cursor += step->n_deps;
    }
  }
  p->n_deps = (size_t)(cursor - p->dep_storage);
  for (uint32_t s = 0; s < n_steps; s++)
    for (uint32_t e = 0; e < p->steps[s].n_deps; e++) p->steps[p->steps[s].deps[e]].n_succs++;
  for (uint32_t s = 0; s < n_steps; s++) {
    p->steps[s].succs = cursor;
    cursor += p->steps[s].n_succs;
    p->steps[s].n_succs = 0;
  }
  for (uint32_t s = 0; s < n_steps; s++)
    for (uint32_t e = 0; e < p->steps[s].n_deps; e++) {
      cg_step_t *before = &p->steps[p->steps[s].deps[e]];
      before->succs[before->n_succs++] = s;
    }
  return CG_SUCCESS;
}

/* Communicators: their collective steps in total order, positions, groups,
 * and the posting order of sends and receives per peer. */
static cg_status_t order_comms(lowering_t *l, const char *where) {
  cg_plan_t *p = l->p;
  uint32_t n_coll = 0;
  for (uint32_t i = 0; i < l->n_items; i++) n_coll += l->items[i].seq != CG_NO_LANE;
  p->comm_step_storage = malloc((n_coll ? n_coll : 1) * sizeof *p->comm_step_storage);
  p->comms = calloc(l->order->n_sequences ? l->order->n_sequences : 1, sizeof *p->comms);
  if (!p->comm_step_storage || !p->comms) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating communicator orders", where);
  uint32_t used = 0;
  for (uint32_t c = 0; c < l->order->n_sequences; c++) {
    const cg_comm_sequence_t *sq = &l->order->sequences[c];
    cg_plan_comm_t *pc = &p->comms[c];
    pc->comm = sq->comm;
    cg_comm_retain(sq->comm);
    p->n_comms = c + 1;
    pc->steps = p->comm_step_storage + used;
    uint32_t *last = malloc(2 * (size_t)sq->comm->size * sizeof *last);
    if (!last) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the posting order", where);
    for (size_t k = 0; k < 2 * (size_t)sq->comm->size; k++) last[k] = CG_NO_STEP;
    uint32_t collectives = 0;
    for (uint32_t pos = 0; pos < sq->len; pos++) {
      const item_t *it = &l->items[l->item_of[sq->nodes[pos]]];
      if (it->first_pos != pos) continue; /* a bucket's later member */
      uint32_t s = it->collective_step;
      cg_step_t *step = &p->steps[s];
      step->comm_index = c;
      step->comm_position = pc->n_steps;
      step->group = collectives;
      for (uint32_t t = it->first_step; t <= it->last_step; t++) {
        p->steps[t].comm_index = c;
        p->steps[t].comm_position = pc->n_steps;
        p->steps[t].group = collectives;
      }
      pc->steps[pc->n_steps++] = s;
      if (!cg_kind_is_p2p(step->op_kind)) {
        collectives++;
        continue;
      }
      uint32_t *prev = &last[2 * (size_t)step->root + (step->op_kind == CG_NODE_RECV)];
      step->post_after = *prev;
      if (*prev != CG_NO_STEP) p->steps[*prev].post_next = s;
      *prev = s;
    }
    used += pc->n_steps;
    free(last);
  }
  return CG_SUCCESS;
}

static int depends_on(const cg_step_t *t, uint32_t d) {
  uint32_t lo = 0, hi = t->n_deps; /* deps are ascending */
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (t->deps[mid] == d) return 1;
    if (t->deps[mid] < d) lo = mid + 1;
    else hi = mid;
  }
  return 0;
}

/* Where a device plan's CUDA nodes may sit on a communicator's lane instead
 * of a compute lane: on_comm[s] is the communicator whose lane takes CUDA
 * node s, or CG_NO_LANE. A CUDA graph's edges between branches are not free
 * (each costs the GPU a wait of a microsecond or two), and a chain that
 * alternates kernels and collectives (a decode step's layers) would cross
 * between two lanes twice per link. A node joins a communicator's lane
 * when that adds no wait it did not have: it depends on the lane's latest
 * step (or the lane has none yet), and the next collective on the lane
 * depends on it (or there is none), so neither it nor anything after it on
 * the lane waits for more than before. "Next" is by index: without sends
 * and receives, which wait to go out in groups, the issue order is the index
 * order (issue_order.c: the lowest ready index first, and every step's
 * dependencies have lower indices), so plans with sends or receives keep
 * every CUDA node on compute lanes. Out of memory: the same. */
static void find_chains_on_comm_lanes(uint32_t *on_comm, const cg_plan_t *p) {
  uint32_t n = p->n_steps, nc = p->n_comms;
  for (uint32_t s = 0; s < n; s++) on_comm[s] = CG_NO_LANE;
  if (p->device == CG_DEVICE_HOST || !nc) return;
  for (uint32_t s = 0; s < n; s++)
    if (p->steps[s].kind == CG_STEP_COLLECTIVE && cg_kind_is_p2p(p->steps[s].op_kind)) return;
  uint32_t *next_same = malloc((size_t)n * sizeof *next_same);
  uint32_t *first_dependent = malloc((size_t)n * sizeof *first_dependent);
  uint32_t *first_on = malloc((size_t)nc * sizeof *first_on), *last_coll = malloc((size_t)nc * sizeof *last_coll);
  uint32_t *lane_latest = malloc((size_t)nc * sizeof *lane_latest);
  if (!next_same || !first_dependent || !first_on || !last_coll || !lane_latest) goto out;
  /* per step: the next collective of its communicator, the first collective depending on it */
  for (uint32_t c = 0; c < nc; c++) first_on[c] = last_coll[c] = lane_latest[c] = CG_NO_STEP;
  for (uint32_t s = 0; s < n; s++) next_same[s] = first_dependent[s] = CG_NO_STEP;
  for (uint32_t s = 0; s < n; s++) {
    const cg_step_t *t = &p->steps[s];
    if (t->kind != CG_STEP_COLLECTIVE) continue;
    if (last_coll[t->comm_index] == CG_NO_STEP) first_on[t->comm_index] = s;
    else next_same[last_coll[t->comm_index]] = s;
    last_coll[t->comm_index] = s;
    for (uint32_t e = 0; e < t->n_deps; e++)
      if (first_dependent[t->deps[e]] == CG_NO_STEP) first_dependent[t->deps[e]] = s;
  }
  for (uint32_t c = 0; c < nc; c++) last_coll[c] = CG_NO_STEP;
  for (uint32_t s = 0; s < n; s++) {
    const cg_step_t *t = &p->steps[s];
    if (t->kind == CG_STEP_COLLECTIVE) {
      last_coll[t->comm_index] = lane_latest[t->comm_index] = s;
      continue;
    }
    if (t->kind != CG_STEP_CUDA_NODE) continue;
    /* candidates: the lanes of the collectives it depends on, then that of the first one depending on it */
    for (uint32_t e = 0; e <= t->n_deps && on_comm[s] == CG_NO_LANE; e++) {
      uint32_t d = e < t->n_deps ? t->deps[e] : first_dependent[s];
      if (d == CG_NO_STEP || p->steps[d].kind != CG_STEP_COLLECTIVE) continue;
      uint32_t c = p->steps[d].comm_index;
      uint32_t next = last_coll[c] == CG_NO_STEP ? first_on[c] : next_same[last_coll[c]];
      if ((lane_latest[c] == CG_NO_STEP || depends_on(t, lane_latest[c])) &&
          (next == CG_NO_STEP || depends_on(&p->steps[next], s))) {
        on_comm[s] = c;
        lane_latest[c] = s;
      }
    }
  }
out:
  free(next_same);
  free(first_dependent);
  free(first_on);
  free(last_coll);
  free(lane_latest);
}

/* Compute lanes for the other CUDA nodes (on_comm[s] CG_NO_LANE), numbered
 * from 0 in step->lane: a node continues the lane of a node it depends on
 * when that node is the lane's latest, so a chain of kernels stays on one
 * stream and adds no event; otherwise it takes a new lane, up to
 * CG_MAX_COMPUTE_LANES, and then the lane idle longest (whose latest step
 * comes first). Independent user work thus sits on separate streams during
 * capture, and CUDA sees no false edges between it and the communication it
 * does not depend on. */
static void assign_compute_lanes(cg_plan_t *p, const uint32_t *on_comm, uint32_t *n_out) {
  uint32_t latest[CG_MAX_COMPUTE_LANES], n = 0;
  for (uint32_t s = 0; s < p->n_steps; s++) {
    cg_step_t *step = &p->steps[s];
    if (step->kind != CG_STEP_CUDA_NODE || on_comm[s] != CG_NO_LANE) continue;
    uint32_t lane = CG_NO_LANE;
    for (uint32_t e = 0; e < step->n_deps && lane == CG_NO_LANE; e++) {
      const cg_step_t *d = &p->steps[step->deps[e]];
      if (d->kind == CG_STEP_CUDA_NODE && on_comm[step->deps[e]] == CG_NO_LANE && latest[d->lane] == step->deps[e])
        lane = d->lane;
    }
    if (lane == CG_NO_LANE && n < CG_MAX_COMPUTE_LANES) lane = n++;
    if (lane == CG_NO_LANE) {
      lane = 0;
      for (uint32_t k = 1; k < n; k++)
        if (latest[k] < latest[lane]) lane = k;
    }
    step->lane = lane;
    latest[lane] = s;
  }
  *n_out = n;
}

/* Lanes: one per communicator, one for host functions if any; a device plan's
 * communicator with several buckets also gets a pack lane and an unpack lane,
 * so the copies of one bucket overlap the collectives of its neighbours. */
static cg_status_t assign_lanes(lowering_t *l, const char *where) {
  cg_plan_t *p = l->p;
  uint32_t n_comms = p->n_comms, has_host = 0;
  uint32_t *buckets_of = calloc(n_comms ? n_comms : 1, sizeof *buckets_of);
  uint32_t *copy_lane = malloc((n_comms ? n_comms : 1) * sizeof *copy_lane);
  uint32_t *on_comm = malloc((p->n_steps ? p->n_steps : 1) * sizeof *on_comm);
  cg_status_t st = CG_SUCCESS;
  if (!buckets_of || !copy_lane || !on_comm) {
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: assigning lanes", where);
    goto out;
  }
  for (uint32_t s = 0; s < p->n_steps; s++) {
    has_host |= p->steps[s].kind == CG_STEP_HOST_FUNC;
    if (p->steps[s].kind == CG_STEP_PACK) buckets_of[p->steps[s].comm_index]++;
  }
  uint32_t n_compute = 0;
  find_chains_on_comm_lanes(on_comm, p);
  assign_compute_lanes(p, on_comm, &n_compute);
  uint32_t n_lanes = n_comms + has_host;
  for (uint32_t c = 0; c < n_comms; c++) {
    copy_lane[c] = CG_NO_LANE;
    if (p->device != CG_DEVICE_HOST && buckets_of[c] > 1) {
      copy_lane[c] = n_lanes;
      n_lanes += 2;
    }
  }
  n_lanes += n_compute;
  p->lanes = malloc((n_lanes ? n_lanes : 1) * sizeof *p->lanes);
  if (!p->lanes) {
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: assigning lanes", where);
    goto out;
  }
  p->n_lanes = n_lanes;
  for (uint32_t c = 0; c < n_comms; c++) {
    p->lanes[c] = (cg_lane_t){CG_LANE_COMM, c};
    if (copy_lane[c] == CG_NO_LANE) continue;
    p->lanes[copy_lane[c]] = (cg_lane_t){CG_LANE_PACK, c};
    p->lanes[copy_lane[c] + 1] = (cg_lane_t){CG_LANE_UNPACK, c};
  }
  if (has_host) p->lanes[n_comms] = (cg_lane_t){CG_LANE_HOST, CG_NO_LANE};
  uint32_t first_compute = n_lanes - n_compute;
  for (uint32_t k = 0; k < n_compute; k++) p->lanes[first_compute + k] = (cg_lane_t){CG_LANE_COMPUTE, CG_NO_LANE};
  for (uint32_t s = 0; s < p->n_steps; s++) {
    cg_step_t *step = &p->steps[s];
    if (step->kind == CG_STEP_CUDA_NODE) {
      /* assign_compute_lanes numbered compute lanes from 0 */
      step->lane = on_comm[s] != CG_NO_LANE ? on_comm[s] : step->lane + first_compute;
      step->comm_index = CG_NO_LANE;
    } else if (step->kind == CG_STEP_HOST_FUNC) {
      step->lane = n_comms;
      step->comm_index = CG_NO_LANE;
    } else if (step->kind == CG_STEP_COLLECTIVE || copy_lane[step->comm_index] == CG_NO_LANE) {
      step->lane = step->comm_index;
    } else {
      step->lane = copy_lane[step->comm_index] + (step->kind == CG_STEP_UNPACK);
    }
  }
out:
  free(buckets_of);
  free(copy_lane);
  free(on_comm);
  return st;
}

static cg_status_t copy_names(cg_plan_t *p, const cg_graph_t *g, const cg_fusion_t *f, const char *where) {
  uint32_t n = cg_graph_node_count(g);
  p->node_names = calloc(n ? n : 1, sizeof *p->node_names);
  p->fuse_why = malloc(n ? n : 1);
  if (!p->node_names || !p->fuse_why) return cg_fail(CG_ERR_NO_MEMORY, "%s: copying node names", where);
  p->n_names = n;
  for (uint32_t v = 0; v < n; v++) {
    const cg_node_rec_t *node = cg_graph_node(g, v);
    p->fuse_why[v] = f->why[v];
    if (node->name && !(p->node_names[v] = cg_copy_text(node->name, 255)))
      return cg_fail(CG_ERR_NO_MEMORY, "%s: copying node names", where);
  }
  for (uint32_t c = 0; c < f->n_comms; c++)
    if (f->bucket_bytes[c] > p->bucket_bytes) p->bucket_bytes = f->bucket_bytes[c];
  return CG_SUCCESS;
}

/* What cg_plan_rebind needs of every node. */
static cg_status_t snapshot_nodes(lowering_t *l, const char *where) {
  cg_plan_t *p = l->p;
  uint32_t n = cg_graph_node_count(l->g);
  p->nodes = calloc(n ? n : 1, sizeof *p->nodes);
  if (!p->nodes) return cg_fail(CG_ERR_NO_MEMORY, "%s: copying %u nodes", where, n);
  for (uint32_t v = 0; v < n; v++) {
    const cg_node_rec_t *node = cg_graph_node(l->g, v);
    cg_plan_node_t *pn = &p->nodes[v];
    *pn = (cg_plan_node_t){node->kind, node->comm, node->send, node->recv, node->count, node->dtype, node->root,
                           node->is_fence, l->items[l->item_of[v]].collective_step, NULL, 0, 0};
    size_t spans = (size_t)node->n_read_spans + node->n_write_spans;
    if (!spans) continue;
    if (!(pn->spans = malloc(spans * sizeof *pn->spans))) return cg_fail(CG_ERR_NO_MEMORY, "%s: copying access ranges", where);
    memcpy(pn->spans, node->spans, spans * sizeof *pn->spans);
    pn->n_reads = node->n_read_spans;
    pn->n_writes = node->n_write_spans;
  }
  return CG_SUCCESS;
}

cg_status_t cg_plan_lower(cg_plan_t *p, const cg_graph_t *g, const cg_comm_order_t *order, const cg_fusion_t *f,
                          const char *where) {
  uint32_t n = cg_graph_node_count(g);
  lowering_t l = {.p = p, .g = g, .order = order};
  uint32_t *topo = malloc((n ? n : 1) * sizeof *topo), *rank = malloc((n ? n : 1) * sizeof *rank);
  l.item_of = malloc((n ? n : 1) * sizeof *l.item_of);
  cg_status_t st = CG_SUCCESS;
  if (!topo || !rank || !l.item_of) {
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating %u steps", where, n);
    goto out;
  }
  if ((st = cg_graph_topo_order(g, topo)) != CG_SUCCESS) goto out;
  for (uint32_t i = 0; i < n; i++) rank[topo[i]] = i;
  if ((st = copy_names(p, g, f, where)) != CG_SUCCESS) goto out;
  if ((st = make_items(&l, f, rank, where)) != CG_SUCCESS) goto out;
  if ((st = connect_items(&l, where)) != CG_SUCCESS) goto out;
  if ((st = order_items(&l, where)) != CG_SUCCESS) goto out;
  if ((st = emit_steps(&l, where)) != CG_SUCCESS) goto out;
  if ((st = snapshot_nodes(&l, where)) != CG_SUCCESS) goto out;
  if ((st = order_comms(&l, where)) != CG_SUCCESS) goto out;
  st = assign_lanes(&l, where);
out:
  free(topo);
  free(rank);
  free(l.item_of);
  free(l.items);
  free(l.preds);
  free(l.pred_start);
  free(l.succs);
  free(l.succ_start);
  free(l.item_order);
  return st;
}
