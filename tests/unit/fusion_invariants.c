/* The fusion suite's reference for what a correct fused plan is, kept apart
 * from the tests in test_fusion.c because every plan they build goes through
 * it (fused(), the tuned test, the random test) and it has to stay
 * independent of the library: it recomputes, from the recorded graph and from
 * the buffers the test placed, which node is in which step or bucket, bucket
 * keys and sizes, independence of members, the plan's order against graph
 * edges and against every pair of nodes touching the same memory, the
 * reasons, the statistics, and each bucket's copies, replayed on real memory.
 * The random programs it is run on are built here too, since their buffers
 * live in the arena the replay uses. */
#include <stdlib.h>
#include <string.h>

#include "fusion.h"
#include "fusion_invariants.h"
#include "graph_view.h"
#include "plan_internal.h"
#include "test_support.h"

enum { ARENA = 4096 };
static unsigned char arena[ARENA], before[ARENA];

cg_node_t fusion_node(const cg_graph_t *g, uint32_t index) { return (cg_node_t){g->serial, index}; }

cg_graph_t *fusion_new_graph(void) {
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  return g;
}

/* ---- what a node touches, written out from the headers */

static int meets(uintptr_t a0, uintptr_t a1, uintptr_t b0, uintptr_t b1) {
  return a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1;
}

static int conflict(const acc_t *a, const acc_t *b) {
  return a->fence || b->fence || meets(a->w0, a->w1, b->w0, b->w1) || meets(a->w0, a->w1, b->r0, b->r1) ||
         meets(a->r0, a->r1, b->w0, b->w1);
}

static int fusible(cg_node_kind_t k) {
  return k == CG_NODE_ALLREDUCE || k == CG_NODE_REDUCE || k == CG_NODE_BROADCAST || k == CG_NODE_ALLGATHER ||
         k == CG_NODE_REDUCE_SCATTER;
}

/* What a node counts against the bucket size (plan.h). */
static size_t node_bytes(const cg_node_rec_t *n) {
  size_t b = n->count * cg_dtype_size(n->dtype);
  return n->kind == CG_NODE_ALLGATHER || n->kind == CG_NODE_REDUCE_SCATTER ? b * (size_t)n->comm->size : b;
}

static int same_key(const cg_node_rec_t *a, const cg_node_rec_t *b) {
  return a->comm == b->comm && a->kind == b->kind && a->dtype == b->dtype &&
         (!cg_test_kind_has_op(a->kind) || a->op == b->op) && (!cg_test_kind_is_rooted(a->kind) || a->root == b->root);
}

static acc_t comm_acc(const cg_node_rec_t *n) {
  size_t es = cg_dtype_size(n->dtype);
  size_t sb = cg_test_send_elems(n->kind, n->count, n->comm->size, n->comm->rank, n->root) * es;
  size_t rb = cg_test_recv_elems(n->kind, n->count, n->comm->size, n->comm->rank, n->root) * es;
  return (acc_t){(uintptr_t)n->send, (uintptr_t)n->send + sb, (uintptr_t)n->recv, (uintptr_t)n->recv + rb,
                 n->kind == CG_NODE_BARRIER};
}

/* Nodes reachable from `from` (itself included when `self`), as flags. */
static uint8_t *reachable(const cg_graph_t *g, uint32_t from, int self) {
  uint32_t n = cg_graph_node_count(g), top = 0;
  uint32_t *stack = malloc((n + 1) * 4);
  uint8_t *seen = calloc(n + 1, 1);
  REQUIRE(stack && seen, "out of memory");
  stack[top++] = from;
  while (top) {
    const cg_node_rec_t *x = cg_graph_node(g, stack[--top]);
    for (uint32_t e = 0; e < x->succs.len; e++) {
      uint32_t w = x->succs.items[e].node;
      if (!seen[w]) seen[w] = 1, stack[top++] = w;
    }
  }
  seen[from] |= (uint8_t)self;
  free(stack);
  return seen;
}

/* Whether something `u` feeds directly, other than `next` and not waiting for
 * `next` anyway, is or leads (through any path) to a send, a receive or a
 * collective of another communicator: work another rank may need before it
 * reaches `next`, so `u` and `next` must not share a bucket. Plain
 * reachability, independent of the library's pass. */
static int feeds_elsewhere(const cg_graph_t *g, uint32_t u, uint32_t next) {
  const cg_node_rec_t *from = cg_graph_node(g, u);
  uint8_t *after_next = reachable(g, next, 1);
  int found = 0;
  for (uint32_t e = 0; e < from->succs.len && !found; e++) {
    uint32_t w = from->succs.items[e].node;
    if (after_next[w]) continue;
    uint8_t *down = reachable(g, w, 1);
    for (uint32_t x = 0; x < cg_graph_node_count(g) && !found; x++) {
      const cg_node_rec_t *xn = cg_graph_node(g, x);
      found = down[x] && xn->comm && (xn->comm != from->comm || xn->kind == CG_NODE_SEND || xn->kind == CG_NODE_RECV);
    }
    free(down);
  }
  free(after_next);
  return found;
}

/* ---- random programs over `arena` */

static const cg_node_kind_t fusible_kinds[] = {CG_NODE_ALLREDUCE, CG_NODE_REDUCE, CG_NODE_BROADCAST, CG_NODE_ALLGATHER,
                                               CG_NODE_REDUCE_SCATTER};
static const cg_node_kind_t other_kinds[] = {CG_NODE_ALLTOALL, CG_NODE_GATHER, CG_NODE_SCATTER,
                                             CG_NODE_SEND,     CG_NODE_RECV,   CG_NODE_BARRIER};

static size_t place_in(size_t region, size_t bytes) { return (size_t)cg_test_below(region - bytes + 1); }

/* The next `bytes` at *cursor in [lo, hi), wrapping around. */
static size_t bump(size_t *cursor, size_t lo, size_t hi, size_t bytes) {
  if (*cursor + bytes > hi) *cursor = lo;
  *cursor += bytes;
  return *cursor - bytes;
}

/* Buffers packed into 512 bytes (many hazards), spread over the arena, or
 * bump-allocated (sends in the first half, receives in the second) so that
 * buckets find their members contiguous; two data types, mostly one reduction
 * and two roots, so neighbours often share a key. Fences (host functions
 * without access, barriers) only with `fences`. */
void fusion_sample_make(sample_t *s, uint32_t n_nodes, int fences) {
  memset(s, 0, sizeof *s);
  s->n_comms = 1 + (int)cg_test_below(MAX_COMMS);
  for (int c = 0; c < s->n_comms; c++) {
    int size = 1 + (int)cg_test_below(4);
    ck_assert_cg_ok(cg_comm_create_offline(&s->comms[c], (int)cg_test_below((uint64_t)size), size));
  }
  s->g = fusion_new_graph();
  int layout = (int)cg_test_below(3);
  size_t region = layout == 0 ? 512 : ARENA, cur_s = 0, cur_r = ARENA / 2;
  cg_dtype_t dtypes[2] = {(cg_dtype_t)cg_test_below(CG_DTYPE_COUNT), (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT)};
  for (uint32_t i = 0; i < n_nodes; i++) {
    acc_t *a = &s->acc[i];
    cg_status_t st;
    if (cg_test_below(100) < 15) {
      a->fence = fences && cg_test_below(4) == 0;
      size_t rb = cg_test_below(4) ? (size_t)cg_test_below(64) : 0;
      size_t wb = cg_test_below(4) ? (size_t)cg_test_below(64) : 0;
      size_t ro = place_in(region, rb), wo = place_in(region, wb);
      cg_range_t reads[] = {{arena + ro, rb}}, writes[] = {{arena + wo, wb}};
      cg_access_t access = CG_ACCESS_INIT;
      access.everything = 0, access.reads = reads, access.n_reads = rb ? 1 : 0;
      access.writes = writes, access.n_writes = wb ? 1 : 0;
      st = cg_host_func(NULL, s->g, cg_test_noop, NULL, a->fence ? NULL : &access);
      if (!a->fence) *a = (acc_t){(uintptr_t)(arena + ro), (uintptr_t)(arena + ro + rb), (uintptr_t)(arena + wo),
                                  (uintptr_t)(arena + wo + wb), 0};
    } else {
      cg_comm_t *comm = s->comms[cg_test_below((uint64_t)s->n_comms)];
      int size = comm->size, rank = comm->rank;
      cg_test_call_t call = {fusible_kinds[cg_test_below(5)], comm, NULL, NULL,
                             cg_test_below(6) ? 1 + (size_t)cg_test_below(12) : 0, dtypes[cg_test_below(2)],
                             cg_test_below(3) ? CG_SUM : (cg_redop_t)cg_test_below(CG_REDOP_COUNT),
                             cg_test_below(2) ? 0 : size - 1};
      if (cg_test_below(10) < 3) call.kind = other_kinds[cg_test_below(5 + (uint64_t)fences)];
      if (cg_test_kind_is_p2p(call.kind)) call.root = (int)cg_test_below((uint64_t)size);
      size_t es = cg_dtype_size(call.dtype), own = (size_t)rank * call.count * es, so, ro;
      size_t sb = cg_test_send_elems(call.kind, call.count, size, rank, call.root) * es;
      size_t rb = cg_test_recv_elems(call.kind, call.count, size, rank, call.root) * es;
      if (layout == 2) {
        so = bump(&cur_s, 0, ARENA / 2, sb);
        ro = bump(&cur_r, ARENA / 2, ARENA, rb);
      } else {
        size_t r = sb + rb > region ? ARENA : region;
        do so = place_in(r, sb), ro = place_in(r, rb);
        while (meets(so, so + sb, ro, ro + rb));
      }
      if (cg_test_below(4) == 0) { /* the in-place forms */
        if (call.kind == CG_NODE_ALLREDUCE) so = ro;
        if (call.kind == CG_NODE_ALLGATHER) so = ro + own;
        if (call.kind == CG_NODE_REDUCE_SCATTER) ro = so + own;
      }
      call.send = arena + so;
      call.recv = arena + ro;
      st = cg_test_record(NULL, s->g, &call);
      if (st == CG_SUCCESS) *a = comm_acc(cg_graph_node(s->g, i));
    }
    REQUIRE(st == CG_SUCCESS, "node %u: %s (%s)", i, cg_status_string(st), cg_error_last());
    if (cg_test_below(5) == 0) ck_assert_cg_ok(cg_node_name(s->g, fusion_node(s->g, i), "n"));
    if (i > 0 && cg_test_below(4) == 0) {
      st = cg_depend(s->g, fusion_node(s->g, (uint32_t)cg_test_below(i + 1)),
                     fusion_node(s->g, (uint32_t)cg_test_below(i + 1)));
      REQUIRE(st == CG_SUCCESS || st == CG_ERR_CYCLE || st == CG_ERR_INVALID_ARGUMENT, "cg_depend: %s (%s)",
              cg_status_string(st), cg_error_last());
    }
  }
  s->n = n_nodes;
}

void fusion_sample_free(sample_t *s) {
  cg_graph_destroy(s->g);
  for (int c = 0; c < s->n_comms; c++) cg_comm_destroy(s->comms[c]);
}

/* ---- a bucket replayed on `arena`: pack, a stand-in collective that puts
 * this rank's data where the real one would (other ranks' blocks get a
 * pattern), unpack. Each member must then hold what it would hold unfused,
 * and no byte outside the members' receive buffers may change. */

static unsigned char other_rank(int q, size_t byte) { return (unsigned char)(q * 131 + byte * 7 + 1); }

static void replay_bucket(const cg_plan_t *plan, const cg_graph_t *g, uint32_t bi) {
  static unsigned char covered[ARENA];
  const cg_bucket_t *b = &plan->buckets[bi];
  const cg_step_t *cs = &plan->steps[b->collective_step];
  const cg_node_rec_t *head = cg_graph_node(g, b->members[0]);
  int rank = head->comm->rank, size = head->comm->size, root = head->root, is_root = rank == root;
  size_t es = cg_dtype_size(head->dtype), fb = cs->count * es, pos = 0; /* pos: a member's offset in elements */
  for (size_t k = 0; k < ARENA; k++) arena[k] = before[k] = (unsigned char)(k * 37 + bi + 3), covered[k] = 0;
  for (uint32_t k = 0; k < b->n_pack; k++) memcpy(b->pack[k].dst, b->pack[k].src, b->pack[k].bytes);
  unsigned char *send = (unsigned char *)(uintptr_t)cs->send, *recv = cs->recv;
  cg_node_kind_t kind = head->kind;
  if (fb && (kind == CG_NODE_ALLREDUCE || ((kind == CG_NODE_REDUCE || kind == CG_NODE_BROADCAST) && is_root)))
    memmove(recv, send, fb);
  for (size_t k = 0; k < fb && kind == CG_NODE_BROADCAST && !is_root; k++) recv[k] = other_rank(root, k);
  if (fb && kind == CG_NODE_REDUCE_SCATTER) memmove(recv, send + (size_t)rank * fb, fb);
  if (fb && kind == CG_NODE_ALLGATHER) {
    for (size_t k = 0; k < fb * (size_t)size; k++)
      if (k / fb != (size_t)rank) recv[k] = other_rank((int)(k / fb), k);
    memmove(recv + (size_t)rank * fb, send, fb);
  }
  for (uint32_t k = 0; k < b->n_unpack; k++) memcpy(b->unpack[k].dst, b->unpack[k].src, b->unpack[k].bytes);
  for (uint32_t m = 0; m < b->n_members; m++) {
    const cg_node_rec_t *n = cg_graph_node(g, b->members[m]);
    acc_t a = comm_acc(n);
    size_t nb = n->count * es;
    const unsigned char *out = (const unsigned char *)a.w0, *in = before + (a.r0 - (uintptr_t)arena);
    for (size_t k = 0; k < a.w1 - a.w0; k++) {
      size_t q = nb ? k / nb : 0;
      int other = kind == CG_NODE_ALLGATHER && q != (size_t)rank;
      unsigned char want = other                            ? other_rank((int)q, q * fb + pos * es + k % nb)
                           : kind == CG_NODE_ALLGATHER        ? in[k % nb]
                           : kind == CG_NODE_REDUCE_SCATTER   ? in[(size_t)rank * nb + k]
                           : kind == CG_NODE_BROADCAST && !is_root ? other_rank(root, pos * es + k)
                                                                   : in[k];
      covered[a.w0 - (uintptr_t)arena + k] = 1;
      REQUIRE(out[k] == want, "bucket %u (%s, rank %d of %d) member #%u byte %zu: %u, expected %u", bi,
              cg_node_kind_name(kind), rank, size, b->members[m], k, out[k], want);
    }
    pos += n->count;
  }
  for (size_t k = 0; k < ARENA; k++)
    REQUIRE(covered[k] || arena[k] == before[k], "bucket %u changed byte %zu outside its members' outputs", bi, k);
}

/* ---- the invariants */

static int bit(const uint64_t *set, uint32_t i) { return (int)(set[i / 64] >> (i % 64) & 1); }

/* `limit`: the bucket size asked for (0 with fusion off); `acc`: what each
 * node touches, in `arena` (NULL: skip the memory checks). */
void fusion_check_fused(const cg_graph_t *g, const cg_plan_t *plan, const acc_t *acc, size_t limit, int fusion) {
  uint32_t n = cg_graph_node_count(g), ns = plan->n_steps, nb = plan->n_buckets, singles = 0, len[64] = {0};
  size_t words = ns / 64 + 1, fused_nodes = 0, copy_bytes = 0;
  uint32_t *item = malloc((n + 1) * 4), *first = malloc((ns + 1) * 4), *last = malloc((ns + 1) * 4);
  uint32_t *topo = malloc((n + 1) * 4), *fence = malloc((n + 1) * 4), *pos = malloc((n + 1) * 4);
  uint32_t *cidx = malloc((n + 1) * 4), *stack = malloc((n + 1) * 4), *seen = calloc(n + 1, 4);
  int *midx = malloc((n + 1) * sizeof(int));
  uint64_t *anc = calloc((size_t)(ns + 1) * words, sizeof *anc);
  REQUIRE(item && first && last && topo && fence && pos && cidx && stack && midx && seen && anc, "out of memory");
  for (uint32_t v = 0; v < n; v++) item[v] = UINT32_MAX, midx[v] = -1;
  /* every node in exactly one singleton step or one bucket */
  for (uint32_t s = 0; s < ns; s++) {
    const cg_step_t *st = &plan->steps[s];
    first[s] = last[s] = s;
    if (st->bucket == CG_NO_STEP) {
      REQUIRE((st->kind == CG_STEP_COLLECTIVE || st->kind == CG_STEP_HOST_FUNC) && st->node < n &&
                  item[st->node] == UINT32_MAX,
              "step %u (kind %d, no bucket): node #%u out of range or seen before", s, st->kind, st->node);
      item[st->node] = s;
      singles++;
      continue;
    }
    REQUIRE(st->bucket < nb, "step %u: bucket %u of %u", s, st->bucket, nb);
    const cg_bucket_t *b = &plan->buckets[st->bucket];
    REQUIRE((st->kind == CG_STEP_PACK && b->pack_step == s) || (st->kind == CG_STEP_UNPACK && b->unpack_step == s) ||
                (st->kind == CG_STEP_COLLECTIVE && b->collective_step == s),
            "step %u (kind %d) is not bucket %u's step of its kind", s, st->kind, st->bucket);
  }
  REQUIRE(ns == singles + 3 * nb && (fusion || nb == 0), "%u steps: %u singletons and %u buckets", ns, singles, nb);
  /* each communicator's sequence: its nodes in the topological order */
  ck_assert_cg_ok(cg_graph_topo_order(g, topo));
  REQUIRE(plan->n_comms <= 64, "too many communicators");
  for (uint32_t k = 0; k < n; k++) {
    const cg_node_rec_t *node = cg_graph_node(g, topo[k]);
    uint32_t c = 0;
    cidx[topo[k]] = UINT32_MAX;
    if (!node->comm) continue;
    while (c < plan->n_comms && plan->comms[c].comm != node->comm) c++;
    REQUIRE(c < plan->n_comms, "node #%u: communicator not in the plan", topo[k]);
    cidx[topo[k]] = c;
    pos[topo[k]] = len[c]++;
  }
  for (uint32_t bi = 0; bi < nb; bi++) {
    const cg_bucket_t *b = &plan->buckets[bi];
    const cg_step_t *cs = &plan->steps[b->collective_step];
    const cg_node_rec_t *head = cg_graph_node(g, b->members[0]);
    size_t bytes = 0, count = 0;
    REQUIRE(b->n_members >= 2 && b->pack_step < b->collective_step && b->collective_step < b->unpack_step &&
                b->unpack_step < ns && plan->steps[b->pack_step].bucket == bi &&
                plan->steps[b->unpack_step].bucket == bi,
            "bucket %u: %u members, steps %u %u %u", bi, b->n_members, b->pack_step, b->collective_step,
            b->unpack_step);
    first[b->collective_step] = b->pack_step;
    last[b->collective_step] = b->unpack_step;
    for (uint32_t m = 0; m < b->n_members; m++) {
      uint32_t v = b->members[m];
      const cg_node_rec_t *node = cg_graph_node(g, v);
      REQUIRE(v < n && item[v] == UINT32_MAX, "bucket %u: member #%u out of range or seen before", bi, v);
      item[v] = b->collective_step;
      midx[v] = (int)m;
      REQUIRE(fusible(node->kind) && same_key(node, head), "bucket %u: #%u (%s) does not share #%u's key", bi, v,
              cg_node_kind_name(node->kind), b->members[0]);
      REQUIRE(m == 0 || (cidx[v] == cidx[b->members[m - 1]] && pos[v] == pos[b->members[m - 1]] + 1),
              "bucket %u: #%u does not follow #%u on its communicator", bi, v, b->members[m - 1]);
      bytes += node_bytes(node);
      count += node->count;
      for (uint32_t o = 0; o < m && acc; o++)
        REQUIRE(!conflict(&acc[v], &acc[b->members[o]]), "bucket %u: #%u and #%u touch the same memory", bi, v,
                b->members[o]);
    }
    REQUIRE(bytes <= limit, "bucket %u: %zu bytes, at most %zu allowed (%u members)", bi, bytes, limit, b->n_members);
    REQUIRE(b->bytes == bytes && cs->count == count && cs->op_kind == head->kind && cs->dtype == head->dtype &&
                cs->comm == head->comm && cs->kind == CG_STEP_COLLECTIVE,
            "bucket %u: the collective step does not match its members", bi);
    /* no member reaches another but through the direct comm-order edge */
    for (uint32_t m = 0, top = 0; m < b->n_members; m++) {
      uint32_t mark = bi * 1024 + m + 1;
      stack[top++] = b->members[m];
      while (top) {
        const cg_node_rec_t *x = cg_graph_node(g, stack[--top]);
        int xm = midx[stack[top]];
        for (uint32_t e = 0; e < x->succs.len; e++) {
          uint32_t y = x->succs.items[e].node;
          if (xm >= 0 && midx[y] == xm + 1 && x->succs.items[e].causes == CG_EDGE_COMM_ORDER) continue;
          REQUIRE(midx[y] < 0, "bucket %u: #%u reaches #%u through other nodes or a data edge", bi, b->members[m], y);
          if (seen[y] != mark) seen[y] = mark, stack[top++] = y;
        }
      }
    }
    for (uint32_t m = 0; m < b->n_members; m++) midx[b->members[m]] = -1;
    fused_nodes += b->n_members;
    for (uint32_t k = 0; k < b->n_pack; k++) copy_bytes += b->pack[k].bytes;
    for (uint32_t k = 0; k < b->n_unpack; k++) copy_bytes += b->unpack[k].bytes;
    if (acc) replay_bucket(plan, g, bi);
  }
  for (uint32_t v = 0; v < n; v++) REQUIRE(item[v] != UINT32_MAX, "node #%u is in no step", v);
  /* each communicator lists its items' collective steps in sequence order */
  for (uint32_t c = 0, items = 0; c < plan->n_comms; c++, items = 0) {
    const cg_plan_comm_t *pc = &plan->comms[c];
    for (uint32_t v = 0; v < n; v++) items += cidx[v] == c && plan->steps[item[v]].node == v;
    REQUIRE(pc->n_steps == items, "communicator %u lists %u steps for %u items", c, pc->n_steps, items);
    for (uint32_t k = 0; k < pc->n_steps; k++) {
      const cg_step_t *st = &plan->steps[pc->steps[k]];
      REQUIRE(st->kind == CG_STEP_COLLECTIVE && st->comm_index == c && st->comm_position == k &&
                  item[st->node] == pc->steps[k] && (k == 0 || pos[st->node] > pos[plan->steps[pc->steps[k - 1]].node]),
              "communicator %u position %u: step %u out of place", c, k, pc->steps[k]);
    }
  }
  /* dependencies: earlier steps, ascending, mirrored; ancestors as bit sets */
  for (uint32_t s = 0; s < ns; s++) {
    const cg_step_t *st = &plan->steps[s];
    for (uint32_t e = 0, k = 0; e < st->n_deps; e++, k = 0) {
      uint32_t d = st->deps[e];
      REQUIRE(d < s && (e == 0 || d > st->deps[e - 1]), "step %u: dependency %u not earlier or not ascending", s, d);
      while (k < plan->steps[d].n_succs && plan->steps[d].succs[k] != s) k++;
      REQUIRE(k < plan->steps[d].n_succs, "step %u depends on %u, which does not list it", s, d);
      for (size_t w = 0; w < words; w++) anc[(size_t)s * words + w] |= anc[(size_t)d * words + w];
      anc[(size_t)s * words + d / 64] |= 1ull << (d % 64);
    }
  }
  /* graph edges between items: data after the item's last step, the
   * communicator's order between collectives (lower.c) */
  for (uint32_t v = 0; v < n; v++) {
    const cg_edge_vec_t *preds = &cg_graph_node(g, v)->preds;
    for (uint32_t e = 0; e < preds->len; e++) {
      uint32_t u = preds->items[e].node, iu = item[u], iv = item[v];
      int order = preds->items[e].causes == CG_EDGE_COMM_ORDER;
      uint32_t a = order ? iu : last[iu], b = order ? iv : first[iv];
      REQUIRE(iu == iv || bit(anc + (size_t)b * words, a), "edge #%u -> #%u (causes %#x): step %u does not precede %u",
              u, v, preds->items[e].causes, a, b);
    }
  }
  /* nodes touching the same memory, no fence between them (across fences,
   * see the "bugs" test case in test_fusion.c): the earlier one's item ends before the later starts */
  for (uint32_t v = 0; v < n && acc; v++) fence[v] = acc[v].fence ? v + 1 : v ? fence[v - 1] : 0;
  for (uint32_t v = 0; v < n && acc; v++)
    for (uint32_t u = 0; u < v; u++)
      if (item[u] != item[v] && fence[u] == fence[v] && !acc[u].fence && !acc[v].fence && conflict(&acc[u], &acc[v]))
        REQUIRE(bit(anc + (size_t)first[item[v]] * words, last[item[u]]),
                "#%u and #%u touch the same memory, but step %u (last of #%u) does not precede step %u (first of #%u)",
                u, v, last[item[u]], u, first[item[v]], v);
  /* the reasons agree with the buckets */
  for (uint32_t c = 0; c < plan->n_comms; c++) {
    uint32_t p = 0, prev = UINT32_MAX;
    size_t run = 0; /* bytes of the item before */
    for (uint32_t k = 0; k < n; k++) {
      uint32_t v = topo[k];
      if (cidx[v] != c) continue;
      const cg_node_rec_t *node = cg_graph_node(g, v), *pn = prev == UINT32_MAX ? NULL : cg_graph_node(g, prev);
      uint8_t why = plan->fuse_why[v];
      int joined = pn && item[prev] == item[v];
      REQUIRE((why == CG_FUSE_JOINED) == joined, "#%u: reason '%s', %s the item before it", v, cg_fuse_why_text(why),
              joined ? "in" : "not in");
      REQUIRE(fusible(node->kind) ? (fusion ? (why == CG_FUSE_FIRST) == (p == 0) : why == CG_FUSE_OFF)
                                  : why == CG_FUSE_NOT_FUSIBLE,
              "#%u (%s) at %u on its communicator: reason '%s'", v, cg_node_kind_name(node->kind), p,
              cg_fuse_why_text(why));
      REQUIRE(why != CG_FUSE_DIFFERS || !same_key(node, pn), "#%u: 'differs' from #%u of the same key", v, prev);
      REQUIRE(why != CG_FUSE_FULL || (same_key(node, pn) && run + node_bytes(node) > limit),
              "#%u: 'full' after a bucket of %zu bytes, %zu more, limit %zu", v, run, node_bytes(node), limit);
      int direct = 0;
      for (uint32_t e = 0; e < node->preds.len && why == CG_FUSE_DEPENDS; e++) {
        uint32_t u = node->preds.items[e].node;
        direct |= item[u] == item[prev] && !(u == prev && node->preds.items[e].causes == CG_EDGE_COMM_ORDER);
      }
      REQUIRE(why != CG_FUSE_DEPENDS || direct, "#%u: 'depends' without an edge from the bucket before (#%u)", v, prev);
      if (joined || why == CG_FUSE_FEEDS) {
        int feeds = feeds_elsewhere(g, prev, v);
        REQUIRE(!joined || !feeds, "#%u joined #%u, which feeds communication elsewhere", v, prev);
        REQUIRE(why != CG_FUSE_FEEDS || feeds, "#%u: 'feeds' but #%u feeds no communication elsewhere", v, prev);
      }
      run = joined ? run + node_bytes(node) : node_bytes(node);
      prev = v;
      p++;
    }
  }
  cg_plan_stats_t st;
  ck_assert_cg_ok(cg_plan_stats(&st, plan));
  REQUIRE(st.steps == ns && st.buckets == nb && st.fused_nodes == fused_nodes && st.copy_bytes == copy_bytes &&
              st.bucket_bytes == (plan->n_comms ? limit : 0), /* no communicator: 0 */
          "stats: %zu steps %zu buckets %zu fused %zu copied %zu bucket bytes; expected %u %u %zu %zu %zu", st.steps,
          st.buckets, st.fused_nodes, st.copy_bytes, st.bucket_bytes, ns, nb, fused_nodes, copy_bytes, limit);
  free(item), free(first), free(last), free(topo), free(fence), free(pos), free(cidx), free(stack), free(midx);
  free(seen), free(anc);
}
