/* cg_plan_rebind: a compiled plan's nodes move to other buffers.
 *
 * The scheduler's decisions (order, lanes, buckets, groups) depend on counts,
 * types and dependencies, not on addresses, except in two places: hazard
 * edges (nodes whose bytes overlap are ordered) and the layout of buckets
 * (members that sit back to back need no copies). So a rebinding is accepted
 * when every pair of nodes that overlaps with the new buffers already
 * overlapped when the plan was compiled (the plan orders those), and the
 * buckets of rebound members are laid out again. Backends that keep
 * addresses in a step's state update it (step_rebind), and a device plan
 * captures its steps again and updates its executable graph. Everything is
 * checked before anything changes, and a failure after that restores what was
 * there. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "executor.h"
#include "lower.h"
#include "plan_internal.h"

#define WHERE "cg_plan_rebind"

typedef struct interval {
  uintptr_t start, end;
  uint32_t node;
  int writes;
} interval_t;

typedef struct interval_set {
  interval_t *items;
  size_t n, cap;
} interval_set_t;

static int push(interval_set_t *set, uintptr_t start, uintptr_t end, uint32_t node, int writes) {
  if (start >= end) return 1;
  if (set->n == set->cap) {
    size_t cap = set->cap ? 2 * set->cap : 64;
    interval_t *items = realloc(set->items, cap * sizeof *items);
    if (!items) return 0;
    set->items = items;
    set->cap = cap;
  }
  set->items[set->n++] = (interval_t){start, end, node, writes};
  return 1;
}

static int by_start(const void *a, const void *b) {
  const interval_t *x = a, *y = b;
  return (x->start > y->start) - (x->start < y->start);
}

static int by_value(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Every node's bytes as the plan's nodes say now; fences are ordered against
 * everything and left out. */
static cg_status_t collect(interval_set_t *set, const cg_plan_t *p) {
  set->n = 0;
  for (uint32_t v = 0; v < p->n_names; v++) {
    const cg_plan_node_t *pn = &p->nodes[v];
    if (pn->is_fence) continue;
    int ok = 1;
    if (pn->comm) {
      cg_node_rec_t rec = {.kind = pn->kind, .comm = pn->comm, .send = pn->send, .recv = pn->recv,
                           .count = pn->count, .dtype = pn->dtype, .root = pn->root};
      cg_span_t spans[2];
      cg_status_t st = cg_collective_spans(spans, &rec, v, WHERE, 0);
      if (st != CG_SUCCESS) return st;
      ok = push(set, spans[0].start, spans[0].end, v, 0) && push(set, spans[1].start, spans[1].end, v, 1);
    } else {
      for (uint32_t k = 0; k < pn->n_reads + pn->n_writes && ok; k++)
        ok = push(set, pn->spans[k].start, pn->spans[k].end, v, k >= pn->n_reads);
    }
    if (!ok) return cg_fail(CG_ERR_NO_MEMORY, WHERE ": collecting the nodes' buffers");
  }
  if (set->n) qsort(set->items, set->n, sizeof *set->items, by_start);
  return CG_SUCCESS;
}

/* Pairs of distinct nodes whose bytes overlap, at least one writing, with at
 * least one node in `moved` (per node flags): (low << 32 | high), sorted. */
static cg_status_t conflicts(uint64_t **out, size_t *n_out, const interval_set_t *set, const uint8_t *moved) {
  uint64_t *pairs = NULL;
  size_t n = 0, cap = 0;
  for (size_t i = 0; i < set->n; i++) {
    const interval_t *a = &set->items[i];
    for (size_t j = i + 1; j < set->n && set->items[j].start < a->end; j++) {
      const interval_t *b = &set->items[j];
      if (a->node == b->node || !(a->writes || b->writes) || !(moved[a->node] || moved[b->node])) continue;
      if (n == cap) {
        cap = cap ? 2 * cap : 16;
        uint64_t *more = realloc(pairs, cap * sizeof *more);
        if (!more) {
          free(pairs);
          return cg_fail(CG_ERR_NO_MEMORY, WHERE ": comparing the nodes' buffers");
        }
        pairs = more;
      }
      uint32_t lo = a->node < b->node ? a->node : b->node, hi = a->node ^ b->node ^ lo;
      pairs[n++] = (uint64_t)lo << 32 | hi;
    }
  }
  if (n) qsort(pairs, n, sizeof *pairs, by_value);
  *out = pairs;
  *n_out = n;
  return CG_SUCCESS;
}

/* What one node looks like before the change, to restore it. */
typedef struct saved_node {
  uint32_t node;
  const void *send;
  void *recv;
} saved_node_t;

static void set_buffers(cg_plan_t *p, uint32_t v, const void *send, void *recv) {
  cg_plan_node_t *pn = &p->nodes[v];
  pn->send = send;
  pn->recv = recv;
  cg_step_t *s = &p->steps[pn->step];
  if (s->bucket != CG_NO_STEP) return; /* the bucket's layout decides */
  s->send = send;
  s->recv = recv;
}

/* Whether a collective's read and write spans overlap: recording allows that
 * only in an in-place form. */
static int reads_what_it_writes(const cg_span_t spans[2]) {
  return spans[0].start < spans[0].end && spans[1].start < spans[1].end && spans[0].start < spans[1].end &&
         spans[1].start < spans[0].end;
}

/* Checks one entry on its own: the node, its fields, its in-place form. */
static cg_status_t check_entry(const cg_plan_t *p, const cg_rebind_t *b, size_t i, uint8_t *moved) {
  if (b->node.graph != p->graph_serial || b->node.index >= p->n_names)
    return cg_fail(CG_ERR_INVALID_NODE, WHERE ": entry %zu: node #%u is not a node of the graph this plan was "
                   "compiled from", i, b->node.index);
  uint32_t v = b->node.index;
  const cg_plan_node_t *pn = &p->nodes[v];
  const char *name = p->node_names[v] ? p->node_names[v] : "";
  if (!pn->comm || pn->kind == CG_NODE_BARRIER)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": entry %zu: node #%u '%s' is a %s, which has no buffers to "
                   "rebind", i, v, name, cg_node_kind_name(pn->kind));
  if (moved[v]) return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": entry %zu: node #%u '%s' appears twice", i, v, name);
  if ((pn->kind == CG_NODE_SEND && b->recv) || (pn->kind == CG_NODE_RECV && b->send))
    return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": entry %zu: node #%u '%s' is a %s: its buffer goes in `%s` and "
                   "`%s` must be NULL", i, v, name, cg_node_kind_name(pn->kind),
                   pn->kind == CG_NODE_SEND ? "send" : "recv", pn->kind == CG_NODE_SEND ? "recv" : "send");
  cg_node_rec_t rec = {.kind = pn->kind, .comm = pn->comm, .send = pn->send, .recv = pn->recv, .count = pn->count,
                       .dtype = pn->dtype, .root = pn->root};
  cg_span_t old_spans[2], new_spans[2];
  cg_status_t st = cg_collective_spans(old_spans, &rec, v, WHERE, 0);
  rec.send = b->send;
  rec.recv = b->recv;
  if (st == CG_SUCCESS) st = cg_collective_spans(new_spans, &rec, v, WHERE, 1);
  if (st != CG_SUCCESS) return st;
  int was_in_place = reads_what_it_writes(old_spans), is_in_place = reads_what_it_writes(new_spans);
  if (was_in_place != is_in_place)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": entry %zu: node #%u '%s' (%s) was compiled %s and would run "
                   "%s: the in-place form is part of the plan (backends choose their calls by it); compile again",
                   i, v, name, cg_node_kind_name(pn->kind), was_in_place ? "in place" : "out of place",
                   is_in_place ? "in place" : "out of place");
  const cg_step_t *s = &p->steps[pn->step];
  const cg_backend_t *backend = s->comm->ops->backend;
  if (s->backend_state && backend && !backend->step_rebind)
    return cg_fail(CG_ERR_UNSUPPORTED, WHERE ": entry %zu: node #%u '%s': the %s backend cannot rebind its steps",
                   i, v, name, backend->name);
  moved[v] = 1;
  return CG_SUCCESS;
}

/* Fails when the new buffers make two nodes overlap that did not before. */
static cg_status_t check_overlaps(cg_plan_t *p, const cg_rebind_t *binds, size_t n, const uint8_t *moved,
                                  saved_node_t *saved) {
  interval_set_t set = {0};
  uint64_t *before = NULL, *after = NULL;
  size_t n_before = 0, n_after = 0;
  cg_status_t st = collect(&set, p);
  if (st == CG_SUCCESS) st = conflicts(&before, &n_before, &set, moved);
  for (size_t i = 0; i < n && st == CG_SUCCESS; i++) set_buffers(p, binds[i].node.index, binds[i].send, binds[i].recv);
  if (st == CG_SUCCESS) st = collect(&set, p);
  if (st == CG_SUCCESS) st = conflicts(&after, &n_after, &set, moved);
  for (size_t i = 0; i < n; i++) set_buffers(p, saved[i].node, saved[i].send, saved[i].recv);
  for (size_t k = 0; k < n_after && st == CG_SUCCESS; k++) {
    if (n_before && bsearch(&after[k], before, n_before, sizeof *before, by_value)) continue;
    uint32_t a = (uint32_t)(after[k] >> 32), b = (uint32_t)after[k];
    st = cg_fail(CG_ERR_ALIAS, WHERE ": with the new buffers node #%u '%s' (%s) and node #%u '%s' (%s) touch the "
                 "same bytes, one writing, but they did not when the plan was compiled, so the plan does not order "
                 "them: compile again", a, p->node_names[a] ? p->node_names[a] : "", cg_node_kind_name(p->nodes[a].kind),
                 b, p->node_names[b] ? p->node_names[b] : "", cg_node_kind_name(p->nodes[b].kind));
  }
  free(set.items);
  free(before);
  free(after);
  return st;
}

/* A bucket's layout, kept while a new one is made. */
typedef struct saved_layout {
  cg_bucket_t *buckets; /* copies of the plan's bucket structs */
  const void **send;    /* the collective steps' fused buffers */
  void **recv;
  size_t *count;
  void *staging;
  size_t staging_bytes;
} saved_layout_t;

/* Puts the saved layout back, freeing the one in its place. */
static void restore_layout(cg_plan_t *p, saved_layout_t *old) {
  cg_bucket_layouts_free(p->buckets, p->n_buckets, p->staging, p->device);
  for (uint32_t i = 0; i < p->n_buckets; i++) {
    p->buckets[i] = old->buckets[i];
    cg_step_t *s = &p->steps[p->buckets[i].collective_step];
    s->send = old->send[i];
    s->recv = old->recv[i];
    s->count = old->count[i];
  }
  p->staging = old->staging;
  p->staging_bytes = old->staging_bytes;
  free(old->buckets);
  old->buckets = NULL; /* nothing left to free */
}

/* Lays out every bucket again; on failure the old layout is back. */
static cg_status_t relayout(cg_plan_t *p, saved_layout_t *old) {
  uint32_t nb = p->n_buckets;
  old->buckets = malloc(nb * sizeof *old->buckets);
  old->send = malloc(nb * sizeof *old->send);
  old->recv = malloc(nb * sizeof *old->recv);
  old->count = malloc(nb * sizeof *old->count);
  if (!old->buckets || !old->send || !old->recv || !old->count)
    return cg_fail(CG_ERR_NO_MEMORY, WHERE ": saving %u buckets", nb);
  memcpy(old->buckets, p->buckets, nb * sizeof *old->buckets);
  old->staging = p->staging;
  old->staging_bytes = p->staging_bytes;
  for (uint32_t i = 0; i < nb; i++) {
    cg_bucket_t *b = &p->buckets[i];
    cg_step_t *s = &p->steps[b->collective_step];
    old->send[i] = s->send;
    old->recv[i] = s->recv;
    old->count[i] = s->count;
    b->pack = b->unpack = NULL;
    b->n_pack = b->n_unpack = 0;
    b->device_pack = b->device_unpack = NULL;
    b->n_pack_chunks = b->n_unpack_chunks = 0;
  }
  p->staging = NULL;
  p->staging_bytes = 0;
  cg_status_t st = cg_plan_layout_buckets(p, WHERE);
  if (st == CG_SUCCESS && p->exec->prepare_buckets) st = p->exec->prepare_buckets(p, WHERE);
  if (st != CG_SUCCESS) restore_layout(p, old);
  return st;
}

static void saved_layout_free(saved_layout_t *old, uint32_t n_buckets, int device, int drop_old) {
  if (drop_old && old->buckets) cg_bucket_layouts_free(old->buckets, n_buckets, old->staging, device);
  free(old->buckets);
  free(old->send);
  free(old->recv);
  free(old->count);
}

/* Tells the backends of steps whose buffers changed. */
static cg_status_t rebind_states(cg_plan_t *p, const uint8_t *step_moved) {
  for (uint32_t i = 0; i < p->n_steps; i++) {
    cg_step_t *s = &p->steps[i];
    if (!step_moved[i] || !s->backend_state) continue;
    const cg_backend_t *b = s->comm->ops->backend;
    cg_status_t st = b->step_rebind(s->comm->impl, s->backend_state, s);
    if (st != CG_SUCCESS) {
      char step[700], detail[512];
      snprintf(detail, sizeof detail, "%s", cg_error_last());
      cg_step_describe(step, sizeof step, p, i);
      return cg_fail(st, WHERE ": %s: %s", step, detail);
    }
  }
  return CG_SUCCESS;
}

cg_status_t cg_plan_rebind(cg_plan_t *plan, const cg_rebind_t *binds, size_t n) {
  if (!plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": NULL plan");
  if (n && !binds) return cg_fail(CG_ERR_INVALID_ARGUMENT, WHERE ": NULL binds for %zu entries", n);
  if (!n) return CG_SUCCESS;
  /* its communication may still be posted and write the staging a rebind
   * would free */
  if (plan->timed_out)
    return cg_fail(CG_ERR_TIMEOUT, WHERE ": a replay of the plan timed out; destroy the plan");
  cg_status_t st = CG_SUCCESS;
  uint8_t *moved = calloc(plan->n_names ? plan->n_names : 1, 1);
  uint8_t *step_moved = calloc(plan->n_steps ? plan->n_steps : 1, 1);
  saved_node_t *saved = malloc(n * sizeof *saved);
  saved_layout_t layout = {0};
  int relaid = 0, applied = 0;
  if (!moved || !step_moved || !saved) {
    st = cg_fail(CG_ERR_NO_MEMORY, WHERE ": %zu entries", n);
    goto out;
  }
  for (size_t i = 0; i < n && st == CG_SUCCESS; i++) st = check_entry(plan, &binds[i], i, moved);
  if (st != CG_SUCCESS) goto out;
  for (size_t i = 0; i < n; i++) {
    const cg_plan_node_t *pn = &plan->nodes[binds[i].node.index];
    saved[i] = (saved_node_t){binds[i].node.index, pn->send, pn->recv};
  }
  if ((st = check_overlaps(plan, binds, n, moved, saved)) != CG_SUCCESS) goto out;
  /* a run in flight reads the buffers, tables and staging about to change */
  if (plan->exec->quiesce && (st = plan->exec->quiesce(plan, WHERE)) != CG_SUCCESS) goto out;
  int buckets_moved = 0;
  for (size_t i = 0; i < n; i++) {
    set_buffers(plan, binds[i].node.index, binds[i].send, binds[i].recv);
    const cg_step_t *s = &plan->steps[plan->nodes[binds[i].node.index].step];
    if (s->bucket != CG_NO_STEP) buckets_moved = 1;
    step_moved[plan->nodes[binds[i].node.index].step] = 1;
  }
  applied = 1;
  if (buckets_moved) {
    if ((st = relayout(plan, &layout)) != CG_SUCCESS) goto out;
    relaid = 1;
    for (uint32_t b = 0; b < plan->n_buckets; b++) step_moved[plan->buckets[b].collective_step] = 1;
  }
  if ((st = rebind_states(plan, step_moved)) != CG_SUCCESS) goto out;
  if (plan->exec->rebuild) st = plan->exec->rebuild(plan, WHERE);
out:
  if (st != CG_SUCCESS && applied) {
    /* back to the old buffers: the layout, the backends' states, the nodes */
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", cg_error_last());
    for (size_t i = 0; i < n; i++) set_buffers(plan, saved[i].node, saved[i].send, saved[i].recv);
    if (relaid) restore_layout(plan, &layout);
    rebind_states(plan, step_moved); /* recomputes what the old buffers gave */
    cg_fail(st, "%s", detail);
  }
  saved_layout_free(&layout, plan->n_buckets, plan->device, st == CG_SUCCESS);
  free(moved);
  free(step_moved);
  free(saved);
  return st;
}
