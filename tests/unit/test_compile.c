/* cg_compile over offline communicators: the lowered plan (sched/compile/compile.c)
 * read field by field and compared with the recorded graph, its text dump and
 * DOT drawing (sched/plan/plan_dot.c), the refusal to run offline plans, and the host
 * executor (sched/exec/host_exec.c) on plans made only of host functions, which run
 * without any communicator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "plan_internal.h"
#include "test_support.h"

#ifndef CG_DOT_EXECUTABLE
#define CG_DOT_EXECUTABLE ""
#endif

/* ck_assert for hot loops: Check logs every passing ck_assert, which costs a
 * system call each. */
#define REQUIRE(cond, ...)                  \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

static cg_node_t node_(const cg_graph_t *g, uint32_t index) { return (cg_node_t){g->serial, index}; }

/* ---- random programs, recordable any number of times on any communicators
 * and arena: only offsets are stored, so two recordings differ in addresses
 * and communicator identities only */

enum { ARENA = 1024, MAX_COMMS = 4 };

typedef enum op_kind { OP_COMM, OP_HOST, OP_HOST_FENCE, OP_DEPEND } op_kind_t;

typedef struct op {
  op_kind_t kind;
  cg_node_kind_t node_kind; /* OP_COMM: a communicator kind or a barrier */
  int comm;
  size_t send_off, send_bytes, recv_off, recv_bytes; /* OP_HOST: the range read and the range written */
  size_t count;
  cg_dtype_t dtype;
  cg_redop_t op;
  int root;
  uint32_t x, y;    /* OP_DEPEND: cg_depend(#x, #y) */
  const char *name; /* NULL: unnamed */
} op_t;

typedef struct program {
  op_t *ops;
  uint32_t n_ops, n_nodes;
  int n_comms;
  int rank[MAX_COMMS], size[MAX_COMMS];
} program_t;

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
static program_t random_program(uint32_t n_nodes, int n_comms, int host_percent) {
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
static cg_graph_t *record(const program_t *p, cg_comm_t *const *comms, unsigned char *arena, cg_host_fn_t fn,
                          uint32_t *args) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  uint32_t node = 0;
  for (uint32_t k = 0; k < p->n_ops; k++) {
    const op_t *o = &p->ops[k];
    cg_status_t st;
    if (o->kind == OP_DEPEND) {
      st = cg_depend(g, node_(g, o->x), node_(g, o->y));
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
    if (o->name) ck_assert_cg_ok(cg_node_name(g, node_(g, node), o->name));
    node++;
  }
  ck_assert_uint_eq(cg_graph_node_count(g), p->n_nodes);
  return g;
}

/* A random program recorded on offline communicators of its own. */
typedef struct sample {
  program_t p;
  cg_comm_t *comms[MAX_COMMS];
  cg_graph_t *g;
} sample_t;

static void sample_make(sample_t *s, uint32_t n_nodes, int n_comms, int host_percent, unsigned char *arena,
                        cg_host_fn_t fn, uint32_t *args) {
  s->p = random_program(n_nodes, n_comms, host_percent);
  for (int c = 0; c < n_comms; c++) ck_assert_cg_ok(cg_comm_create_offline(&s->comms[c], s->p.rank[c], s->p.size[c]));
  s->g = record(&s->p, s->comms, arena, fn, args);
}

/* Frees what is left: the graph may have been destroyed (and set to NULL). */
static void sample_free(sample_t *s) {
  cg_graph_destroy(s->g);
  for (int c = 0; c < s->p.n_comms; c++) cg_comm_destroy(s->comms[c]);
  free(s->p.ops);
}

/* Without fusion: one step per node (test_fusion covers buckets). */
static cg_plan_t *compile(cg_graph_t *g) {
  cg_plan_t *plan = NULL;
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.fusion = 0;
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  ck_assert_ptr_nonnull(plan);
  return plan;
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
static void check_plan(const cg_graph_t *g, const cg_plan_t *plan) {
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

START_TEST(compile__random_graphs_lower_faithfully) {
  cg_test_reseed(201);
  static unsigned char arena[ARENA];
  for (int round = 0; round < 300; round++) {
    sample_t s;
    sample_make(&s, 1 + (uint32_t)cg_test_below(round % 10 ? 60 : 250), 1 + (int)cg_test_below(MAX_COMMS),
                (int)cg_test_below(3) * 20, arena, NULL, NULL);
    cg_plan_t *plan = compile(s.g);
    check_plan(s.g, plan);
    cg_plan_destroy(plan);
    sample_free(&s);
  }
}
END_TEST

/* Record order differs from the topological order: the steps follow the
 * latter, and so do the communicator positions of sends in one group. */
START_TEST(compile__steps_follow_topo_order) {
  cg_comm_t *comm;
  cg_graph_t *g;
  static unsigned char buf[64];
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 0, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int i = 0; i < 5; i++) ck_assert_cg_ok(cg_send(NULL, g, comm, buf + 8 * i, 8, CG_UINT8, 1));
  ck_assert_cg_ok(cg_depend(g, node_(g, 4), node_(g, 0)));
  ck_assert_cg_ok(cg_depend(g, node_(g, 3), node_(g, 1)));
  cg_plan_t *plan = compile(g);
  check_plan(g, plan);
  const uint32_t want[] = {2, 3, 1, 4, 0};
  for (uint32_t s = 0; s < 5; s++) {
    ck_assert_uint_eq(plan->steps[s].node, want[s]);
    ck_assert_uint_eq(plan->steps[s].comm_position, s);
    ck_assert_uint_eq(plan->steps[s].group, 0);
  }
  ck_assert(plan->steps[4].n_deps == 1 && plan->steps[4].deps[0] == 3); /* #0 after #4 */
  ck_assert(plan->steps[3].n_succs == 1 && plan->steps[3].succs[0] == 4);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
}
END_TEST

/* Positions count along each communicator; a send or receive's group is the
 * number of its communicator's collectives recorded before it; lanes follow
 * first use, and host functions get the last lane even when recorded first. */
START_TEST(compile__positions_groups_and_lanes_by_hand) {
  cg_comm_t *c, *d;
  cg_graph_t *g;
  static int32_t buf[8][4];
  cg_access_t nothing = CG_ACCESS_INIT;
  nothing.everything = 0;
  ck_assert_cg_ok(cg_comm_create_offline(&c, 0, 2));
  ck_assert_cg_ok(cg_comm_create_offline(&d, 1, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &nothing));                    /* #0 */
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, buf[0], buf[0], 4, CG_INT32, CG_SUM));          /* #1 */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[1], 4, CG_INT32, 1));                            /* #2 */
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[2], 4, CG_INT32, 1));                            /* #3 */
  ck_assert_cg_ok(cg_send(NULL, g, d, buf[3], 4, CG_INT32, 0));                            /* #4 */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[4], 4, CG_INT32, 1));                            /* #5 */
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, buf[5], buf[6], 4, CG_INT32, CG_MAX));          /* #6 */
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[7], 4, CG_INT32, 1));                            /* #7 */
  ck_assert_cg_ok(cg_barrier(NULL, g, c));                                                 /* #8 */
  cg_plan_t *plan = compile(g);
  check_plan(g, plan);
  /* every edge points forward, so steps are in record order */
  const uint32_t comm_index[] = {CG_NO_LANE, 0, 0, 0, 1, 0, 0, 0, 0};
  const uint32_t position[] = {0, 0, 1, 2, 0, 3, 4, 5, 6}, group[] = {0, 0, 1, 1, 0, 1, 1, 2, 2};
  const uint32_t lane[] = {2, 0, 0, 0, 1, 0, 0, 0, 0};
  for (uint32_t s = 0; s < 9; s++) {
    const cg_step_t *st = &plan->steps[s];
    ck_assert_uint_eq(st->node, s);
    ck_assert_uint_eq(st->comm_index, comm_index[s]);
    ck_assert_uint_eq(st->lane, lane[s]);
    if (s == 0) continue;
    ck_assert_uint_eq(st->comm_position, position[s]);
    ck_assert_uint_eq(st->group, group[s]);
  }
  ck_assert(plan->comms[0].comm == c && plan->comms[1].comm == d && plan->n_lanes == 3);
  /* the second allreduce waits for the group before it, not for the first */
  const cg_step_t *second = &plan->steps[6];
  ck_assert(second->n_deps == 3 && second->deps[0] == 2 && second->deps[1] == 3 && second->deps[2] == 5);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
  cg_comm_destroy(d);
}
END_TEST

/* ---- text: dump and DOT */

static size_t count_of(const char *text, const char *what) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

START_TEST(compile__rejects_bad_arguments_and_changes_nothing) {
  cg_comm_t *c;
  cg_graph_t *g;
  static float buf[4];
  cg_graph_opts_t go = CG_GRAPH_OPTS_INIT;
  go.name = "iteration";
  ck_assert_cg_ok(cg_comm_create_offline(&c, 0, 2));
  ck_assert_cg_ok(cg_graph_create(&g, &go));
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, buf, buf, 4, CG_FLOAT32, CG_SUM));
  static int token;
  cg_plan_t *const sentinel = (cg_plan_t *)(void *)&token, *out = sentinel;
  ck_assert_cg_status(cg_compile(NULL, g, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_compile(&out, NULL, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_eq(out, sentinel);
  const size_t bad_sizes[] = {0, sizeof(cg_compile_opts_t) - 1, sizeof(cg_compile_opts_t) + 8, 1};
  for (int i = 0; i < 4; i++) {
    cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
    o.size = bad_sizes[i];
    ck_assert_cg_status(cg_compile(&out, g, &o), CG_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(out, sentinel);
    ck_assert_ptr_nonnull(strstr(cg_error_last(), "size"));
  }
  /* the graph still compiles; the plan takes the graph's name unless given one */
  cg_plan_t *plan = compile(g);
  char *text = cg_test_plan_text(plan, 0);
  ck_assert_msg(strncmp(text, "plan 'iteration': 1 steps", 25) == 0, "dump starts '%s'", text);
  free(text);
  cg_plan_destroy(plan);
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.check_ranks = 0;
  o.name = "custom \"plan\"";
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  text = cg_test_plan_text(plan, 0);
  ck_assert_msg(strncmp(text, "plan 'custom \"plan\"': ", 22) == 0, "dump starts '%s'", text);
  free(text);
  text = cg_test_plan_text(plan, 1);
  ck_assert_ptr_nonnull(strstr(text, "label=\"plan custom \\\"plan\\\"\""));
  free(text);
  /* every plan function checks for NULL */
  cg_plan_stats_t stats;
  int done;
  ck_assert_cg_status(cg_plan_stats(NULL, plan), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_stats(&stats, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_dump(NULL, stdout), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_dump(plan, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_write_dot(NULL, stdout), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_write_dot(plan, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_run(NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_start(NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_test(NULL, plan), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_test(&done, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_wait(NULL), CG_ERR_INVALID_ARGUMENT);
  cg_plan_destroy(NULL);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
}
END_TEST

START_TEST(compile__empty_graph_gives_empty_plan) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  cg_plan_t *plan = compile(g);
  cg_graph_destroy(g);
  cg_plan_stats_t stats;
  memset(&stats, 0xff, sizeof stats);
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  ck_assert_uint_eq(stats.steps, 0);
  ck_assert_uint_eq(stats.lanes, 0);
  ck_assert_uint_eq(stats.dependencies, 0);
  ck_assert_uint_eq(stats.communicators, 0);
  char *text = cg_test_plan_text(plan, 0);
  ck_assert_str_eq(text, "plan: 0 steps, 0 lanes, 0 communicators, 0 dependencies\n");
  free(text);
  text = cg_test_plan_text(plan, 1);
  ck_assert_uint_eq(count_of(text, "cluster"), 0);
  ck_assert_uint_eq(count_of(text, "->"), 0);
  free(text);
  /* nothing to run: it completes at once */
  int done = 0;
  ck_assert_cg_ok(cg_plan_run(plan));
  ck_assert_cg_ok(cg_plan_start(plan));
  ck_assert_cg_ok(cg_plan_test(&done, plan));
  ck_assert_int_eq(done, 1);
  ck_assert_cg_ok(cg_plan_wait(plan));
  cg_plan_destroy(plan);
}
END_TEST

/* Same program, compiled twice, and recorded again on other communicators of
 * the same ranks over another arena: the same dump, which shows no address. */
START_TEST(compile__same_program_same_dump) {
  cg_test_reseed(202);
  static unsigned char arena1[ARENA], arena2[ARENA];
  for (int round = 0; round < 60; round++) {
    sample_t s1, s2;
    sample_make(&s1, 1 + (uint32_t)cg_test_below(80), 1 + (int)cg_test_below(MAX_COMMS), 25, arena1, NULL, NULL);
    s2.p = s1.p;
    s2.p.ops = NULL; /* shared with s1 */
    for (int c = 0; c < s1.p.n_comms; c++)
      ck_assert_cg_ok(cg_comm_create_offline(&s2.comms[c], s1.p.rank[c], s1.p.size[c]));
    s2.g = record(&s1.p, s2.comms, arena2, NULL, NULL);
    cg_plan_t *a = compile(s1.g), *b = compile(s1.g), *c = compile(s2.g);
    char *ta = cg_test_plan_text(a, 0), *tb = cg_test_plan_text(b, 0), *tc = cg_test_plan_text(c, 0);
    REQUIRE(strcmp(ta, tb) == 0, "round %d: compiled twice:\n%s\n---\n%s", round, ta, tb);
    REQUIRE(strcmp(ta, tc) == 0, "round %d: recorded again:\n%s\n---\n%s", round, ta, tc);
    REQUIRE(!strstr(ta, "0x") && !strstr(ta, "(nil)"), "round %d: an address in the dump:\n%s", round, ta);
    REQUIRE(count_of(ta, "\n") == s1.p.n_nodes + 1, "round %d: %zu lines for %u steps", round, count_of(ta, "\n"),
            s1.p.n_nodes);
    free(ta);
    free(tb);
    free(tc);
    cg_plan_destroy(a);
    cg_plan_destroy(b);
    cg_plan_destroy(c);
    sample_free(&s1);
    sample_free(&s2);
  }
}
END_TEST

/* The plan keeps its communicators and copies the names: it outlives the graph
 * and the caller's communicator handles. */
START_TEST(compile__plan_outlives_graph_and_communicators) {
  cg_test_reseed(203);
  static unsigned char arena[ARENA];
  for (int round = 0; round < 20; round++) {
    sample_t s;
    sample_make(&s, 1 + (uint32_t)cg_test_below(60), 1 + (int)cg_test_below(MAX_COMMS), 20, arena, NULL, NULL);
    cg_plan_t *plan = compile(s.g);
    char *before = cg_test_plan_text(plan, 0), *more;
    /* recording on after compiling changes the graph, not the plan */
    ck_assert_cg_ok(cg_host_func(NULL, s.g, cg_test_noop, NULL, NULL));
    ck_assert_cg_ok(cg_depend(s.g, node_(s.g, 0), node_(s.g, s.p.n_nodes)));
    more = cg_test_plan_text(plan, 0);
    ck_assert_str_eq(before, more);
    free(more);
    int n_comms = s.p.n_comms;
    s.p.n_comms = 0; /* the plan outlives our handles: release them now */
    sample_free(&s);
    for (int c = 0; c < n_comms; c++) cg_comm_destroy(s.comms[c]);
    char *after = cg_test_plan_text(plan, 0), *dot = cg_test_plan_text(plan, 1);
    ck_assert_str_eq(before, after);
    for (uint32_t c = 0; c < plan->n_comms; c++) {
      int rank = -1, size = -1;
      ck_assert_cg_ok(cg_comm_rank(&rank, plan->comms[c].comm));
      ck_assert_cg_ok(cg_comm_size(&size, plan->comms[c].comm));
      ck_assert_int_lt(rank, size);
    }
    free(before);
    free(after);
    free(dot);
    cg_plan_destroy(plan);
  }
}
END_TEST

/* plan.h promises one line per step, so ranks can compare dumps line by line;
 * names are user text and may hold line breaks. */
START_TEST(compile__dump_keeps_one_line_per_step_whatever_the_names) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL));
  ck_assert_cg_ok(cg_node_name(g, node_(g, 0), "two\nlines"));
  ck_assert_cg_ok(cg_node_name(g, node_(g, 1), "carriage\rreturn"));
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.name = "plan\nname";
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  char *text = cg_test_plan_text(plan, 0);
  ck_assert_msg(count_of(text, "\n") == 3 && !strchr(text, '\r'), "dump of 2 steps:\n%s", text);
  free(text);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
}
END_TEST

/* One cluster per lane holding exactly its steps, one edge per dependency. */
static void check_dot(const cg_plan_t *plan, const char *text) {
  REQUIRE(count_of(text, "subgraph cluster_lane") == plan->n_lanes, "%zu clusters for %u lanes",
          count_of(text, "subgraph cluster_lane"), plan->n_lanes);
  REQUIRE(count_of(text, " -> ") == plan->n_deps, "%zu edges for %zu dependencies", count_of(text, " -> "),
          plan->n_deps);
  char key[64];
  for (uint32_t s = 0; s < plan->n_steps; s++) {
    const cg_step_t *st = &plan->steps[s];
    snprintf(key, sizeof key, "\n    s%u [", s);
    const char *decl = strstr(text, key);
    REQUIRE(decl && count_of(text, key) == 1, "step %u is declared %zu times", s, count_of(text, key));
    snprintf(key, sizeof key, "subgraph cluster_lane%u {", st->lane);
    const char *open = strstr(text, key), *close = open ? strstr(open, "\n  }\n") : NULL;
    REQUIRE(open && close && open < decl && decl < close, "step %u is not inside the cluster of lane %u", s,
            st->lane);
    for (uint32_t e = 0; e < st->n_deps; e++) {
      snprintf(key, sizeof key, "\n  s%u -> s%u;", st->deps[e], s);
      REQUIRE(strstr(text, key), "no edge s%u -> s%u", st->deps[e], s);
    }
  }
}

START_TEST(compile__dot_has_a_cluster_per_lane_and_an_edge_per_dependency) {
  cg_test_reseed(204);
  static unsigned char arena[ARENA];
  for (int round = 0; round < 60; round++) {
    sample_t s;
    sample_make(&s, 1 + (uint32_t)cg_test_below(80), (int)cg_test_below(MAX_COMMS + 1), (int)cg_test_below(3) * 20,
                arena, NULL, NULL);
    cg_plan_t *plan = compile(s.g);
    char *text = cg_test_plan_text(plan, 1);
    check_dot(plan, text);
    free(text);
    cg_plan_destroy(plan);
    sample_free(&s);
  }
}
END_TEST

static void check_graphviz_parses(const cg_plan_t *plan) {
  char path[] = "/tmp/cg_test_plan_dot_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_cg_ok(cg_plan_write_dot(plan, f));
  fclose(f);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "'%s' -Tsvg '%s' -o /dev/null", CG_DOT_EXECUTABLE, path);
  int rc = system(cmd);
  remove(path);
  ck_assert_msg(rc == 0, "Graphviz rejected the plan (%s returned %d)", cmd, rc);
}

START_TEST(compile__graphviz_parses_plan_dot) {
  ck_assert_msg(CG_DOT_EXECUTABLE[0], "Graphviz 'dot' was not found at configure time (install graphviz)");
  cg_test_reseed(205);
  static unsigned char arena[ARENA];
  sample_t s;
  sample_make(&s, 40, 3, 30, arena, NULL, NULL);
  cg_graph_t *g = s.g;
  ck_assert_cg_ok(cg_node_name(g, node_(g, 0), "two\nlines, a \"quote\", a \\ and a tab\t"));
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.name = "plan \"one\" \\ {x}";
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  check_graphviz_parses(plan);
  cg_plan_destroy(plan);
  /* and the empty plan */
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  plan = compile(g);
  check_graphviz_parses(plan);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  sample_free(&s);
}
END_TEST

/* ---- running */

enum { LOG_MAX = 4096 };
static struct {
  uint32_t order[LOG_MAX];
  uint32_t n;
} run_log;

/* A host function that writes its node index into the run log. */
static void log_node(void *arg) {
  if (run_log.n < LOG_MAX) run_log.order[run_log.n] = *(const uint32_t *)arg;
  run_log.n++;
}

/* Every node ran exactly once, each after all of its predecessors. */
static void check_log(const cg_graph_t *g, const char *how) {
  uint32_t n = cg_graph_node_count(g);
  REQUIRE(run_log.n == n, "%s: %u host functions ran, the graph has %u", how, run_log.n, n);
  uint32_t *pos = malloc((n + 1) * sizeof *pos);
  REQUIRE(pos, "out of memory");
  for (uint32_t i = 0; i < n; i++) pos[i] = UINT32_MAX;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t node = run_log.order[k];
    REQUIRE(node < n && pos[node] == UINT32_MAX, "%s: #%u ran twice or is out of range", how, node);
    pos[node] = k;
  }
  for (uint32_t i = 0; i < n; i++) {
    const cg_edge_vec_t *preds = &cg_graph_node(g, i)->preds;
    for (uint32_t e = 0; e < preds->len; e++)
      REQUIRE(pos[preds->items[e].node] < pos[i], "%s: #%u ran at %u, before its predecessor #%u at %u", how, i,
              pos[i], preds->items[e].node, pos[preds->items[e].node]);
  }
  free(pos);
}

START_TEST(compile__offline_plans_compile_but_do_not_run) {
  cg_test_reseed(206);
  static unsigned char arena[ARENA];
  static uint32_t ids[128];
  for (uint32_t i = 0; i < 128; i++) ids[i] = i;
  sample_t s;
  sample_make(&s, 100, 2, 40, arena, log_node, ids);
  cg_graph_t *g = s.g;
  cg_plan_t *plan = compile(g);
  check_plan(g, plan);
  /* never started: done, and nothing to wait for */
  int done = 0;
  ck_assert_cg_ok(cg_plan_test(&done, plan));
  ck_assert_int_eq(done, 1);
  ck_assert_cg_ok(cg_plan_wait(plan));
  run_log.n = 0;
  ck_assert_cg_status(cg_plan_run(plan), CG_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(cg_error_last(), "offline"), "detail: %s", cg_error_last());
  ck_assert_cg_status(cg_plan_start(plan), CG_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(cg_error_last(), "offline"), "detail: %s", cg_error_last());
  ck_assert_uint_eq(run_log.n, 0); /* refused before any host function ran */
  done = 0;
  ck_assert_cg_ok(cg_plan_test(&done, plan));
  ck_assert_int_eq(done, 1);
  ck_assert_cg_ok(cg_plan_wait(plan));
  ck_assert_cg_status(cg_plan_run(plan), CG_ERR_UNSUPPORTED);
  ck_assert_uint_eq(run_log.n, 0);
  cg_plan_destroy(plan);
  sample_free(&s);
}
END_TEST

/* Host functions only: no communicator, so the host executor runs the plan on
 * this thread, with cg_plan_run and with start/test and start/wait, again and
 * again. */
START_TEST(compile__host_only_plans_run_in_dependency_order) {
  cg_test_reseed(208);
  static unsigned char arena[ARENA];
  static uint32_t ids[LOG_MAX];
  for (uint32_t i = 0; i < LOG_MAX; i++) ids[i] = i;
  for (int round = 0; round < 100; round++) {
    program_t p = random_program(1 + (uint32_t)cg_test_below(round % 10 ? 60 : 400), 0, 100);
    cg_graph_t *g = record(&p, NULL, arena, log_node, ids);
    cg_plan_t *plan = compile(g);
    check_plan(g, plan);
    ck_assert_uint_eq(plan->n_lanes, 1);
    ck_assert_uint_eq(plan->n_comms, 0);
    for (int again = 0; again < 2; again++) {
      run_log.n = 0;
      ck_assert_cg_ok(cg_plan_run(plan));
      check_log(g, "cg_plan_run");
      run_log.n = 0;
      ck_assert_cg_ok(cg_plan_start(plan));
      int done = 0;
      for (int polls = 0; !done; polls++) {
        REQUIRE(polls < 1000, "round %d: not done after %d polls", round, polls);
        ck_assert_cg_ok(cg_plan_test(&done, plan));
      }
      check_log(g, "cg_plan_start and cg_plan_test");
      ck_assert_cg_ok(cg_plan_test(&done, plan)); /* still done, nothing runs again */
      ck_assert_int_eq(done, 1);
      ck_assert_uint_eq(run_log.n, p.n_nodes);
      run_log.n = 0;
      ck_assert_cg_ok(cg_plan_start(plan));
      ck_assert_cg_ok(cg_plan_wait(plan));
      check_log(g, "cg_plan_start and cg_plan_wait");
    }
    /* the plan, not the graph, holds what the run needs */
    cg_graph_destroy(g);
    run_log.n = 0;
    ck_assert_cg_ok(cg_plan_run(plan));
    ck_assert_uint_eq(run_log.n, p.n_nodes);
    cg_plan_destroy(plan);
    free(p.ops);
  }
}
END_TEST

/* A chain recorded backwards through explicit edges runs backwards. */
START_TEST(compile__host_only_plan_by_hand) {
  static uint32_t ids[5] = {0, 1, 2, 3, 4};
  cg_access_t nothing = CG_ACCESS_INIT;
  nothing.everything = 0;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int i = 0; i < 5; i++) ck_assert_cg_ok(cg_host_func(NULL, g, log_node, &ids[i], &nothing));
  for (uint32_t i = 4; i > 0; i--) ck_assert_cg_ok(cg_depend(g, node_(g, i), node_(g, i - 1)));
  cg_plan_t *plan = compile(g);
  check_plan(g, plan);
  run_log.n = 0;
  ck_assert_cg_ok(cg_plan_run(plan));
  ck_assert_uint_eq(run_log.n, 5);
  for (uint32_t k = 0; k < 5; k++) ck_assert_uint_eq(run_log.order[k], 4 - k);
  char *text = cg_test_plan_text(plan, 0);
  ck_assert_ptr_nonnull(strstr(text, "plan: 5 steps, 1 lanes, 0 communicators, 4 dependencies\n"));
  ck_assert_ptr_nonnull(strstr(text, "step 0 lane 0 host_func node 4 after -\n"));
  ck_assert_ptr_nonnull(strstr(text, "step 4 lane 0 host_func node 0 after 3\n"));
  free(text);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("compile");
  TCase *lower = tcase_create("lower");
  tcase_set_timeout(lower, 120);
  tcase_add_test(lower, compile__random_graphs_lower_faithfully);
  tcase_add_test(lower, compile__steps_follow_topo_order);
  tcase_add_test(lower, compile__positions_groups_and_lanes_by_hand);
  tcase_add_test(lower, compile__rejects_bad_arguments_and_changes_nothing);
  tcase_add_test(lower, compile__empty_graph_gives_empty_plan);
  tcase_add_test(lower, compile__plan_outlives_graph_and_communicators);
  suite_add_tcase(s, lower);
  TCase *text = tcase_create("text");
  tcase_set_timeout(text, 120);
  tcase_add_test(text, compile__same_program_same_dump);
  tcase_add_test(text, compile__dump_keeps_one_line_per_step_whatever_the_names);
  tcase_add_test(text, compile__dot_has_a_cluster_per_lane_and_an_edge_per_dependency);
  tcase_add_test(text, compile__graphviz_parses_plan_dot);
  suite_add_tcase(s, text);
  TCase *run = tcase_create("run");
  tcase_set_timeout(run, 120);
  tcase_add_test(run, compile__offline_plans_compile_but_do_not_run);
  tcase_add_test(run, compile__host_only_plans_run_in_dependency_order);
  tcase_add_test(run, compile__host_only_plan_by_hand);
  suite_add_tcase(s, run);
  return s;
}

int main(void) { return cg_test_main(suite()); }
