/* The machinery of the compile suite (compile_programs.h says what a program
 * is): random programs, their recording on offline communicators, and the
 * check of a lowered plan against the graph it came from. Kept out of
 * test_compile.c because most of its tests lean on them (the lowering, the
 * dumps, the DOT drawing, the host executor) and none of them is what a test
 * checks; there the tests read as what they check. */
#include <stdlib.h>
#include <string.h>

#include "compile_programs.h"
#include "graph_view.h"
#include "plan_internal.h"
#include "test_support.h"

cg_node_t compile_node(const cg_graph_t *g, uint32_t index) { return (cg_node_t){g->serial, index}; }

/* Characters DOT must escape; no newline, so dumps keep one line per step. */
static const char *const names[] = {"grad.0", "odd \"quoted\" \\ name", "caf\xc3\xa9 {1}", "a<b>&c", "x"};

static size_t place(size_t bytes) { return (size_t)cg_test_below(ARENA - bytes + 1); }

static int spans_overlap(size_t a, size_t a_bytes, size_t b, size_t b_bytes) {
  return a_bytes && b_bytes && a < b + b_bytes && b < a + a_bytes;
}

/* A communicator node with buffers somewhere in the arena that do not overlap
 * each other (or, for allreduce now and then, in place), so that different
 * nodes overlap in every combination of reads and writes. */
static void random_comm_op(op_t *o, const program_t *p) {
  o->kind = OP_COMM;
  o->comm = (int)cg_test_below((uint64_t)p->n_comms);
  int size = p->size[o->comm], rank = p->rank[o->comm];
  o->node_kind = cg_test_below(10) == 0 ? CG_NODE_BARRIER : cg_test_comm_kinds[cg_test_below(CG_TEST_N_COMM_KINDS)];
  o->count = (size_t)cg_test_below(9);
  o->dtype = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
  o->op = (cg_redop_t)cg_test_below(CG_REDOP_COUNT);
  o->root = (int)cg_test_below((uint64_t)size);
  size_t es = cg_dtype_size(o->dtype);
  o->send_bytes = cg_test_send_elems(o->node_kind, o->count, size, rank, o->root) * es;
  o->recv_bytes = cg_test_recv_elems(o->node_kind, o->count, size, rank, o->root) * es;
  if (o->node_kind == CG_NODE_ALLREDUCE && cg_test_below(4) == 0) {
    o->send_off = o->recv_off = place(o->send_bytes);
    return;
  }
  do {
    o->send_off = place(o->send_bytes);
    o->recv_off = place(o->recv_bytes);
  } while (spans_overlap(o->send_off, o->send_bytes, o->recv_off, o->recv_bytes));
}

/* `host_percent` of the nodes are host functions (some of them fences); with
 * no communicators every node is one. Explicit edges go either way; those that
 * would close a cycle are refused, the same way on every recording. */
program_t compile_random_program(uint32_t n_nodes, int n_comms, int host_percent) {
  program_t p = {calloc(3 * (size_t)n_nodes + 1, sizeof(op_t)), 0, 0, n_comms, {0}, {0}};
  REQUIRE(p.ops, "out of memory");
  for (int c = 0; c < n_comms; c++) {
    p.size[c] = 1 + (int)cg_test_below(4);
    p.rank[c] = (int)cg_test_below((uint64_t)p.size[c]);
  }
  while (p.n_nodes < n_nodes) {
    op_t *o = &p.ops[p.n_ops++];
    *o = (op_t){0}; /* the slot of a dropped cg_depend is reused */
    if (n_comms == 0 || (int)cg_test_below(100) < host_percent) {
      o->kind = cg_test_below(6) == 0 ? OP_HOST_FENCE : OP_HOST;
      o->send_bytes = cg_test_below(4) == 0 ? 0 : 1 + (size_t)cg_test_below(64);
      o->recv_bytes = cg_test_below(4) == 0 ? 0 : 1 + (size_t)cg_test_below(64);
      o->send_off = place(o->send_bytes);
      o->recv_off = place(o->recv_bytes);
    } else {
      random_comm_op(o, &p);
    }
    if (cg_test_below(4) == 0) o->name = names[cg_test_below(sizeof names / sizeof names[0])];
    p.n_nodes++;
    if (p.n_nodes >= 2 && cg_test_below(3) == 0) {
      op_t *d = &p.ops[p.n_ops++];
      d->kind = OP_DEPEND;
      d->x = (uint32_t)cg_test_below(p.n_nodes);
      d->y = (uint32_t)cg_test_below(p.n_nodes);
      if (d->x == d->y) p.n_ops--;
    }
  }
  return p;
}

/* Records `p` over `arena`. Host functions are fn(&args[node]) when args is
 * given, else cg_test_noop with an argument unique to the node. */
cg_graph_t *compile_record(const program_t *p, cg_comm_t *const *comms, unsigned char *arena, cg_host_fn_t fn,
                           uint32_t *args) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  uint32_t node = 0;
  for (uint32_t k = 0; k < p->n_ops; k++) {
    const op_t *o = &p->ops[k];
    cg_status_t st;
    if (o->kind == OP_DEPEND) {
      st = cg_depend(g, compile_node(g, o->x), compile_node(g, o->y));
      REQUIRE(st == CG_SUCCESS || st == CG_ERR_CYCLE, "cg_depend(#%u, #%u): %s (%s)", o->x, o->y,
              cg_status_string(st), cg_error_last());
      continue;
    }
    void *arg = args ? (void *)&args[node] : (void *)(arena + node % ARENA);
    if (o->kind == OP_COMM) {
      cg_test_call_t call = {o->node_kind, comms[o->comm], arena + o->send_off, arena + o->recv_off, o->count,
                             o->dtype,     o->op,          o->root};
      st = cg_test_record(NULL, g, &call);
    } else {
      cg_range_t reads[] = {{arena + o->send_off, o->send_bytes}}, writes[] = {{arena + o->recv_off, o->recv_bytes}};
      cg_access_t access = CG_ACCESS_INIT;
      access.everything = 0;
      access.reads = reads;
      access.n_reads = o->send_bytes ? 1 : 0;
      access.writes = writes;
      access.n_writes = o->recv_bytes ? 1 : 0;
      st = cg_host_func(NULL, g, fn ? fn : cg_test_noop, arg, o->kind == OP_HOST ? &access : NULL);
    }
    REQUIRE(st == CG_SUCCESS, "op %u (%s): %s (%s)", k, cg_node_kind_name(o->node_kind), cg_status_string(st),
            cg_error_last());
    if (o->name) ck_assert_cg_ok(cg_node_name(g, compile_node(g, node), o->name));
    node++;
  }
  ck_assert_uint_eq(cg_graph_node_count(g), p->n_nodes);
  return g;
}

void compile_sample_make(sample_t *s, uint32_t n_nodes, int n_comms, int host_percent, unsigned char *arena,
                         cg_host_fn_t fn, uint32_t *args) {
  s->p = compile_random_program(n_nodes, n_comms, host_percent);
  for (int c = 0; c < n_comms; c++) ck_assert_cg_ok(cg_comm_create_offline(&s->comms[c], s->p.rank[c], s->p.size[c]));
  s->g = compile_record(&s->p, s->comms, arena, fn, args);
}

/* Frees what is left: the graph may have been destroyed (and set to NULL). */
void compile_sample_free(sample_t *s) {
  cg_graph_destroy(s->g);
  for (int c = 0; c < s->p.n_comms; c++) cg_comm_destroy(s->comms[c]);
  free(s->p.ops);
}

static int is_p2p(cg_node_kind_t k) { return k == CG_NODE_SEND || k == CG_NODE_RECV; }

/* ---- the plan compared with the graph it came from */

static void check_step_fields(const cg_plan_t *plan, uint32_t s, const cg_node_rec_t *n) {
  const cg_step_t *st = &plan->steps[s];
  REQUIRE(st->kind == (n->comm ? CG_STEP_COLLECTIVE : CG_STEP_HOST_FUNC), "step %u: kind %d", s, (int)st->kind);
  REQUIRE(st->op_kind == n->kind && st->comm == n->comm && st->send == n->send && st->recv == n->recv &&
              st->count == n->count && st->dtype == n->dtype && st->op == n->op && st->root == n->root &&
              st->fn == n->fn && st->arg == n->arg,
          "step %u: fields differ from node #%u", s, st->node);
  const char *name = plan->node_names[plan->steps[s].node];
  REQUIRE((name == NULL) == (n->name == NULL) && (!name || strcmp(name, n->name) == 0),
          "step %u: name '%s', node #%u is named '%s'", s, name ? name : "(none)", st->node,
          n->name ? n->name : "(none)");
}

/* Every node is exactly one step, in cg_graph_topo_order's order; each step's
 * dependencies are its node's predecessors, its successors their inverse;
 * communicators and lanes come in order of first use in record order; each
 * communicator's steps are numbered along it, keep its collectives in record
 * order, and count in `group` the collectives recorded before them. */
void compile_check_plan(const cg_graph_t *g, const cg_plan_t *plan) {
  uint32_t n = cg_graph_node_count(g);
  REQUIRE(plan->n_steps == n, "%u steps for %u nodes", plan->n_steps, n);
  uint32_t *topo = malloc((n + 1) * sizeof *topo), *step_of = malloc((n + 1) * sizeof *step_of);
  REQUIRE(topo && step_of, "out of memory");
  ck_assert_cg_ok(cg_graph_topo_order(g, topo));
  for (uint32_t i = 0; i < n; i++) step_of[i] = UINT32_MAX;
  for (uint32_t s = 0; s < n; s++) {
    uint32_t node = plan->steps[s].node;
    REQUIRE(node < n && step_of[node] == UINT32_MAX, "step %u: node #%u out of range or seen before", s, node);
    REQUIRE(node == topo[s], "step %u is node #%u, the topological order has #%u", s, node, topo[s]);
    step_of[node] = s;
  }
  /* communicators by first use in record order, with their collectives */
  cg_comm_t *first_use[64];
  uint32_t n_used = 0, collectives_before[64] = {0}, total_deps = 0, total_succs = 0;
  int has_host = 0;
  for (uint32_t i = 0; i < n; i++) {
    const cg_node_rec_t *node = cg_graph_node(g, i);
    const cg_step_t *st = &plan->steps[step_of[i]];
    check_step_fields(plan, step_of[i], node);
    if (!node->comm) {
      has_host = 1;
      REQUIRE(st->comm_index == CG_NO_LANE, "host step %u: comm_index %u", step_of[i], st->comm_index);
      continue;
    }
    uint32_t c = 0;
    while (c < n_used && first_use[c] != node->comm) c++;
    if (c == n_used) {
      REQUIRE(n_used < 64, "too many communicators");
      first_use[n_used++] = node->comm;
    }
    REQUIRE(st->comm_index == c && st->lane == c, "step %u (node #%u): comm_index %u lane %u, expected %u",
            step_of[i], i, st->comm_index, st->lane, c);
    REQUIRE(st->group == collectives_before[c], "step %u (node #%u, %s): group %u, %u collectives recorded before it",
            step_of[i], i, cg_node_kind_name(node->kind), st->group, collectives_before[c]);
    if (!is_p2p(node->kind)) collectives_before[c]++;
  }
  REQUIRE(plan->n_comms == n_used, "%u communicators, expected %u", plan->n_comms, n_used);
  REQUIRE(plan->n_lanes == n_used + (uint32_t)has_host, "%u lanes for %u communicators%s", plan->n_lanes, n_used,
          has_host ? " and host functions" : "");
  for (uint32_t c = 0; c < n_used; c++) {
    const cg_plan_comm_t *pc = &plan->comms[c];
    REQUIRE(pc->comm == first_use[c], "communicator %u is not the %u-th first used", c, c);
    uint32_t count = 0, last_collective = 0;
    int seen_collective = 0;
    for (uint32_t s = 0; s < n; s++) count += plan->steps[s].comm_index == c;
    REQUIRE(pc->n_steps == count, "communicator %u lists %u steps, %u are on it", c, pc->n_steps, count);
    for (uint32_t k = 0; k < pc->n_steps; k++) {
      const cg_step_t *st = &plan->steps[pc->steps[k]];
      REQUIRE(st->comm_index == c && st->comm_position == k, "communicator %u position %u: step %u has %u #%u", c, k,
              pc->steps[k], st->comm_index, st->comm_position);
      REQUIRE(k == 0 || pc->steps[k] > pc->steps[k - 1], "communicator %u: steps out of step order at %u", c, k);
      if (is_p2p(st->op_kind)) continue;
      REQUIRE(!seen_collective || st->node > last_collective, "communicator %u: collective #%u after #%u", c,
              st->node, last_collective);
      seen_collective = 1;
      last_collective = st->node;
    }
  }
  for (uint32_t s = 0; s < n; s++) {
    const cg_step_t *st = &plan->steps[s];
    const cg_edge_vec_t *preds = &cg_graph_node(g, st->node)->preds;
    if (st->kind == CG_STEP_HOST_FUNC)
      REQUIRE(st->lane == n_used, "host step %u on lane %u, expected %u", s, st->lane, n_used);
    REQUIRE(st->n_deps == preds->len, "step %u: %u deps, node #%u has %u predecessors", s, st->n_deps, st->node,
            preds->len);
    for (uint32_t e = 0; e < st->n_deps; e++) {
      REQUIRE(st->deps[e] < s, "step %u depends on later step %u", s, st->deps[e]);
      REQUIRE(e == 0 || st->deps[e] > st->deps[e - 1], "step %u: deps not strictly ascending", s);
    }
    for (uint32_t e = 0; e < preds->len; e++) {
      uint32_t want = step_of[preds->items[e].node], k = 0;
      while (k < st->n_deps && st->deps[k] != want) k++;
      REQUIRE(k < st->n_deps, "step %u: predecessor #%u (step %u) missing from deps", s, preds->items[e].node, want);
    }
    for (uint32_t e = 0; e < st->n_succs; e++) {
      uint32_t t = st->succs[e], k = 0;
      REQUIRE(t < n && t > s && (e == 0 || t > st->succs[e - 1]), "step %u: bad successor list", s);
      while (k < plan->steps[t].n_deps && plan->steps[t].deps[k] != s) k++;
      REQUIRE(k < plan->steps[t].n_deps, "step %u lists successor %u, which does not depend on it", s, t);
    }
    total_deps += st->n_deps;
    total_succs += st->n_succs;
  }
  REQUIRE(total_succs == total_deps, "%u successors for %u dependencies", total_succs, total_deps);
  cg_plan_stats_t stats;
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  REQUIRE(stats.steps == n && stats.lanes == plan->n_lanes && stats.dependencies == total_deps &&
              stats.communicators == n_used,
          "stats: %zu steps %zu lanes %zu dependencies %zu communicators; expected %u %u %u %u", stats.steps,
          stats.lanes, stats.dependencies, stats.communicators, n, plan->n_lanes, total_deps, n_used);
  free(topo);
  free(step_of);
}
