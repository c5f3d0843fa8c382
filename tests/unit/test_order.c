/* Deterministic topological order (graph/order.c) and per-communicator sequences
 * (sched/compile/comm_order.c), by hand and against brute-force references on random
 * graphs. Sequences come in order of each communicator's first use in record
 * order, and the comm-order edges keep each communicator's collectives in
 * record order, so ranks whose hazard edges differ still agree on them. */
#include <stdlib.h>
#include <string.h>

#include "comm_order.h"
#include "test_support.h"


/* The rule, the slow way: repeatedly emit the smallest-index node whose
 * predecessors have all been emitted. */
static void reference_order(const cg_graph_t *g, uint32_t *order) {
  uint32_t n = cg_graph_node_count(g);
  unsigned char *done = calloc(n + 1, 1);
  REQUIRE(done, "out of memory");
  for (uint32_t k = 0; k < n; k++) {
    uint32_t pick = UINT32_MAX;
    for (uint32_t i = 0; i < n && pick == UINT32_MAX; i++) {
      if (done[i]) continue;
      const cg_edge_vec_t *preds = &cg_graph_node(g, i)->preds;
      uint32_t e = 0;
      while (e < preds->len && done[preds->items[e].node]) e++;
      if (e == preds->len) pick = i;
    }
    REQUIRE(pick != UINT32_MAX, "reference: no node is ready after %u of %u", k, n);
    done[pick] = 1;
    order[k] = pick;
  }
  free(done);
}

/* `order` holds every node once and each after all of its predecessors. */
static void check_topological(const cg_graph_t *g, const uint32_t *order) {
  uint32_t n = cg_graph_node_count(g);
  uint32_t *pos = malloc((n + 1) * sizeof *pos);
  REQUIRE(pos, "out of memory");
  for (uint32_t i = 0; i < n; i++) pos[i] = UINT32_MAX;
  for (uint32_t k = 0; k < n; k++) {
    REQUIRE(order[k] < n && pos[order[k]] == UINT32_MAX, "order[%u] = %u: not a permutation", k, order[k]);
    pos[order[k]] = k;
  }
  for (uint32_t j = 0; j < n; j++) {
    const cg_edge_vec_t *preds = &cg_graph_node(g, j)->preds;
    for (uint32_t e = 0; e < preds->len; e++)
      REQUIRE(pos[preds->items[e].node] < pos[j], "#%u at %u comes before its predecessor #%u at %u", j, pos[j],
              preds->items[e].node, pos[preds->items[e].node]);
  }
  free(pos);
}

/* cg_graph_topo_order, checked to be topological; the caller frees it. */
static uint32_t *topo(const cg_graph_t *g) {
  uint32_t n = cg_graph_node_count(g);
  uint32_t *order = malloc((n + 1) * sizeof *order);
  REQUIRE(order, "out of memory");
  cg_status_t st = cg_graph_topo_order(g, order);
  REQUIRE(st == CG_SUCCESS, "cg_graph_topo_order: %s (%s)", cg_status_string(st), cg_error_last());
  check_topological(g, order);
  return order;
}

static void check_order_is(const cg_graph_t *g, const uint32_t *want, uint32_t n) {
  ck_assert_uint_eq(cg_graph_node_count(g), n);
  uint32_t *order = topo(g);
  for (uint32_t k = 0; k < n; k++)
    ck_assert_msg(order[k] == want[k], "order[%u] = %u, expected %u", k, order[k], want[k]);
  free(order);
}
#define ORDER_IS(g, ...)                                      \
  check_order_is((g), (const uint32_t[]){__VA_ARGS__},       \
                 (uint32_t)(sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t)))

static cg_node_t node_(const cg_graph_t *g, uint32_t index) { return (cg_node_t){g->serial, index}; }

/* Causes of the edge from -> to, 0 if there is none. */
static uint32_t causes_of(const cg_graph_t *g, uint32_t from, uint32_t to) {
  const cg_edge_vec_t *preds = &cg_graph_node(g, to)->preds;
  for (uint32_t e = 0; e < preds->len; e++)
    if (preds->items[e].node == from) return preds->items[e].causes;
  return 0;
}

/* ---- random programs, recordable any number of times */

#define BASE ((uintptr_t)1 << 24)

typedef enum op_kind {
  OP_SEND, OP_RECV, OP_ALLREDUCE, OP_EMPTY, OP_HOST, OP_HOST_FENCE, OP_BARRIER, OP_DEPEND
} op_kind_t;

typedef struct op {
  op_kind_t kind;
  int comm;
  uintptr_t a, b; /* buffers */
  size_t bytes;
  uint32_t x, y; /* OP_DEPEND: cg_depend(x, y) */
} op_t;

typedef struct program {
  op_t *ops;
  uint32_t n_ops, n_nodes;
} program_t;

/* `backward`: cg_depend may point from a later node to an earlier one. */
static program_t random_program(uint32_t n_nodes, int backward, int fences) {
  program_t p = {calloc(4 * (size_t)n_nodes + 1, sizeof(op_t)), 0, 0};
  REQUIRE(p.ops, "out of memory");
  while (p.n_nodes < n_nodes) {
    op_t *o = &p.ops[p.n_ops++];
    uint64_t r = cg_test_below(100);
    o->comm = (int)cg_test_below(3);
    o->a = BASE + cg_test_below(256);
    o->b = 2 * BASE + cg_test_below(256);
    o->bytes = 1 + cg_test_below(32);
    if (r < 25) o->kind = OP_SEND;
    else if (r < 45) o->kind = OP_RECV;
    else if (r < 65) o->kind = OP_ALLREDUCE;
    else if (r < 70) o->kind = OP_EMPTY;
    else if (r < 85) o->kind = OP_HOST;
    else if (r < 90 && fences) o->kind = OP_HOST_FENCE;
    else if (r < 93 && fences) o->kind = OP_BARRIER;
    else o->kind = OP_SEND;
    if (o->kind == OP_ALLREDUCE && cg_test_below(3) == 0) o->b = o->a; /* in place */
    p.n_nodes++;
    if (p.n_nodes >= 2 && cg_test_below(3) == 0) {
      op_t *d = &p.ops[p.n_ops++];
      d->kind = OP_DEPEND;
      d->x = (uint32_t)cg_test_below(p.n_nodes);
      d->y = (uint32_t)cg_test_below(p.n_nodes);
      if (!backward && d->x > d->y) {
        uint32_t t = d->x;
        d->x = d->y;
        d->y = t;
      }
      if (d->x == d->y) p.n_ops--;
    }
  }
  return p;
}

/* Records `p`; the status of each cg_depend goes to deps (may be NULL). */
static cg_graph_t *record(const program_t *p, cg_comm_t *const *comms, cg_status_t *deps) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (uint32_t k = 0; k < p->n_ops; k++) {
    const op_t *o = &p->ops[k];
    cg_comm_t *c = comms[o->comm];
    cg_range_t reads[] = {{(const void *)o->a, o->bytes}}, writes[] = {{(const void *)o->b, o->bytes}};
    cg_access_t access = CG_ACCESS_INIT;
    access.everything = 0;
    access.reads = reads;
    access.n_reads = 1;
    access.writes = writes;
    access.n_writes = 1;
    cg_status_t st = CG_SUCCESS;
    switch (o->kind) {
      case OP_SEND: st = cg_send(NULL, g, c, (const void *)o->a, o->bytes, CG_UINT8, 0); break;
      case OP_RECV: st = cg_recv(NULL, g, c, (void *)o->a, o->bytes, CG_UINT8, 0); break;
      case OP_ALLREDUCE:
        st = cg_allreduce(NULL, g, c, (const void *)o->a, (void *)o->b, o->bytes, CG_INT8, CG_SUM);
        break;
      case OP_EMPTY: st = cg_allreduce(NULL, g, c, NULL, NULL, 0, CG_FLOAT32, CG_SUM); break;
      case OP_HOST: st = cg_host_func(NULL, g, cg_test_noop, NULL, &access); break;
      case OP_HOST_FENCE: st = cg_host_func(NULL, g, cg_test_noop, NULL, NULL); break;
      case OP_BARRIER: st = cg_barrier(NULL, g, c); break;
      case OP_DEPEND:
        st = cg_depend(g, node_(g, o->x), node_(g, o->y));
        REQUIRE(st == CG_SUCCESS || st == CG_ERR_CYCLE, "cg_depend(#%u, #%u): %s (%s)", o->x, o->y,
                cg_status_string(st), cg_error_last());
        if (deps) *deps++ = st;
        continue;
    }
    REQUIRE(st == CG_SUCCESS, "op %u (kind %d): %s (%s)", k, (int)o->kind, cg_status_string(st), cg_error_last());
  }
  ck_assert_uint_eq(cg_graph_node_count(g), p->n_nodes);
  return g;
}

static void make_comms(cg_comm_t **comms, int n) {
  for (int c = 0; c < n; c++) {
    int size = 1 + (int)cg_test_below(4);
    ck_assert_cg_ok(cg_comm_create_offline(&comms[c], (int)cg_test_below((uint64_t)size), size));
  }
}

static void destroy_comms(cg_comm_t **comms, int n) {
  for (int c = 0; c < n; c++) cg_comm_destroy(comms[c]);
}

static int has_backward_edge(const cg_graph_t *g) {
  for (uint32_t j = 0; j < cg_graph_node_count(g); j++) {
    const cg_edge_vec_t *preds = &cg_graph_node(g, j)->preds;
    for (uint32_t e = 0; e < preds->len; e++)
      if (preds->items[e].node > j) return 1;
  }
  return 0;
}

/* ---- topological order */

START_TEST(topo__empty_graph) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  uint32_t sentinel = 12345;
  ck_assert_cg_ok(cg_graph_topo_order(g, &sentinel));
  ck_assert_uint_eq(sentinel, 12345);
  cg_comm_order_t o;
  memset(&o, 0xff, sizeof o);
  ck_assert_cg_ok(cg_comm_order_build(&o, g));
  ck_assert_uint_eq(o.n_sequences, 0);
  cg_comm_order_free(&o);
  ck_assert_ptr_null(o.sequences);
  cg_comm_order_free(NULL);
  cg_graph_destroy(g);
}
END_TEST

START_TEST(topo__forward_edges_give_record_order) {
  cg_test_reseed(11);
  cg_comm_t *comms[3];
  make_comms(comms, 3);
  for (int round = 0; round < 100; round++) {
    program_t p = random_program(1 + (uint32_t)cg_test_below(100), 0, round % 2);
    cg_graph_t *g = record(&p, comms, NULL);
    ck_assert(!has_backward_edge(g));
    uint32_t *order = topo(g), *want = malloc((p.n_nodes + 1) * sizeof *want);
    reference_order(g, want);
    for (uint32_t k = 0; k < p.n_nodes; k++) {
      REQUIRE(order[k] == k, "round %d: order[%u] = %u, expected record order", round, k, order[k]);
      REQUIRE(want[k] == k, "round %d: reference order[%u] = %u", round, k, want[k]);
    }
    free(order);
    free(want);
    cg_graph_destroy(g);
    free(p.ops);
  }
  destroy_comms(comms, 3);
}
END_TEST

START_TEST(topo__backward_edges_by_hand) {
  cg_comm_t *comm;
  cg_graph_t *g;
  static unsigned char buf[64];
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 0, 2));
  /* five independent nodes, two of them held back */
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int i = 0; i < 5; i++) ck_assert_cg_ok(cg_send(NULL, g, comm, buf + 8 * i, 8, CG_UINT8, 1));
  ck_assert_cg_ok(cg_depend(g, node_(g, 4), node_(g, 0)));
  ck_assert_cg_ok(cg_depend(g, node_(g, 3), node_(g, 1)));
  ORDER_IS(g, 2, 3, 1, 4, 0);
  cg_graph_destroy(g);
  /* a chain recorded backwards */
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int i = 0; i < 6; i++) ck_assert_cg_ok(cg_recv(NULL, g, comm, buf + 8 * i, 8, CG_UINT8, 1));
  for (uint32_t i = 5; i > 0; i--) ck_assert_cg_ok(cg_depend(g, node_(g, i), node_(g, i - 1)));
  ORDER_IS(g, 5, 4, 3, 2, 1, 0);
  cg_graph_destroy(g);
  /* hazard edges and an explicit edge together: 0 -> 1 (RAW), 2 -> 0 */
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_recv(NULL, g, comm, buf, 8, CG_UINT8, 1));
  ck_assert_cg_ok(cg_send(NULL, g, comm, buf, 8, CG_UINT8, 1));
  ck_assert_cg_ok(cg_send(NULL, g, comm, buf + 32, 8, CG_UINT8, 1));
  ck_assert_cg_ok(cg_send(NULL, g, comm, buf + 40, 8, CG_UINT8, 1));
  ck_assert_cg_ok(cg_depend(g, node_(g, 2), node_(g, 0)));
  ORDER_IS(g, 2, 0, 1, 3);
  /* a fence after it: everything before, then the fence, then the rest */
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));                           /* #4 */
  ck_assert_cg_ok(cg_send(NULL, g, comm, buf + 48, 8, CG_UINT8, 1));    /* #5 */
  ck_assert_cg_ok(cg_send(NULL, g, comm, buf + 56, 8, CG_UINT8, 1));    /* #6 */
  ck_assert_cg_ok(cg_depend(g, node_(g, 6), node_(g, 5)));
  ORDER_IS(g, 2, 0, 1, 3, 4, 6, 5);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
}
END_TEST

START_TEST(topo__random_graphs_match_reference) {
  cg_test_reseed(12);
  cg_comm_t *comms[3];
  make_comms(comms, 3);
  uint32_t with_backward = 0;
  for (int round = 0; round < 400; round++) {
    program_t p = random_program(1 + (uint32_t)cg_test_below(round % 10 ? 60 : 200), 1, round % 3 == 0);
    cg_graph_t *g = record(&p, comms, NULL);
    with_backward += has_backward_edge(g);
    uint32_t *order = topo(g), *want = malloc((p.n_nodes + 1) * sizeof *want);
    reference_order(g, want);
    for (uint32_t k = 0; k < p.n_nodes; k++)
      REQUIRE(order[k] == want[k], "round %d (%u nodes): order[%u] = %u, reference says %u", round, p.n_nodes, k,
              order[k], want[k]);
    free(order);
    free(want);
    cg_graph_destroy(g);
    free(p.ops);
  }
  ck_assert_uint_gt(with_backward, 200);
  destroy_comms(comms, 3);
}
END_TEST

START_TEST(topo__same_program_same_order) {
  cg_test_reseed(13);
  cg_comm_t *comms[3], *others[3];
  make_comms(comms, 3);
  make_comms(others, 3);
  for (int round = 0; round < 50; round++) {
    program_t p = random_program(1 + (uint32_t)cg_test_below(150), 1, round % 2);
    uint32_t n_deps = 0;
    for (uint32_t k = 0; k < p.n_ops; k++) n_deps += p.ops[k].kind == OP_DEPEND;
    cg_status_t *deps1 = malloc((n_deps + 1) * sizeof *deps1), *deps2 = malloc((n_deps + 1) * sizeof *deps2);
    cg_graph_t *g1 = record(&p, comms, deps1), *g2 = record(&p, comms, deps2), *g3 = record(&p, others, NULL);
    for (uint32_t k = 0; k < n_deps; k++) REQUIRE(deps1[k] == deps2[k], "round %d: cg_depend %u differs", round, k);
    for (uint32_t j = 0; j < p.n_nodes; j++) {
      const cg_edge_vec_t *a = &cg_graph_node(g1, j)->preds, *b = &cg_graph_node(g2, j)->preds;
      REQUIRE(a->len == b->len, "round %d: #%u has %u and %u predecessors", round, j, a->len, b->len);
      for (uint32_t e = 0; e < a->len; e++)
        REQUIRE(a->items[e].node == b->items[e].node && a->items[e].causes == b->items[e].causes,
                "round %d: predecessor %u of #%u differs", round, e, j);
    }
    uint32_t *o1 = topo(g1), *again = topo(g1), *o2 = topo(g2), *o3 = topo(g3);
    for (uint32_t k = 0; k < p.n_nodes; k++)
      REQUIRE(o1[k] == again[k] && o1[k] == o2[k] && o1[k] == o3[k],
              "round %d: order[%u] is %u, then %u; re-recorded %u; other communicators %u", round, k, o1[k], again[k],
              o2[k], o3[k]);
    /* other communicators, same program: the same sequences of node indices */
    cg_comm_order_t q1, q3;
    ck_assert_cg_ok(cg_comm_order_build(&q1, g1));
    ck_assert_cg_ok(cg_comm_order_build(&q3, g3));
    REQUIRE(q1.n_sequences == q3.n_sequences, "round %d: %u and %u sequences", round, q1.n_sequences,
            q3.n_sequences);
    for (uint32_t q = 0; q < q1.n_sequences; q++) {
      REQUIRE(q1.sequences[q].len == q3.sequences[q].len, "round %d: sequence %u lengths differ", round, q);
      for (uint32_t k = 0; k < q1.sequences[q].len; k++)
        REQUIRE(q1.sequences[q].nodes[k] == q3.sequences[q].nodes[k], "round %d: sequence %u item %u differs", round,
                q, k);
    }
    cg_comm_order_free(&q1);
    cg_comm_order_free(&q3);
    free(o1);
    free(again);
    free(o2);
    free(o3);
    free(deps1);
    free(deps2);
    cg_graph_destroy(g1);
    cg_graph_destroy(g2);
    cg_graph_destroy(g3);
    free(p.ops);
  }
  destroy_comms(comms, 3);
  destroy_comms(others, 3);
}
END_TEST

/* ---- per-communicator sequences */

static int is_p2p(const cg_node_rec_t *x) { return x->kind == CG_NODE_SEND || x->kind == CG_NODE_RECV; }

/* Each sequence is exactly its communicator's nodes in `order`; sequences come
 * in order of first use in record order (node index), whatever `order` is.
 * Along each sequence the collectives are in record order and each send or
 * receive sits between the collectives recorded around it: with position 2k
 * for a communicator's k-th collective (from 0) and 2k - 1 for a send or
 * receive recorded after k of them, positions never decrease. */
static void check_comm_order(const cg_graph_t *g, const cg_comm_order_t *o, const uint32_t *order) {
  uint32_t n = cg_graph_node_count(g), seen = 0, with_comm = 0;
  const cg_comm_t *firsts[64];
  uint32_t n_firsts = 0, collectives[64] = {0};
  long *pos = malloc((n + 1) * sizeof *pos);
  REQUIRE(pos, "out of memory");
  for (uint32_t i = 0; i < n; i++) {
    const cg_node_rec_t *x = cg_graph_node(g, i);
    if (!x->comm) continue;
    with_comm++;
    uint32_t f = 0;
    while (f < n_firsts && firsts[f] != x->comm) f++;
    if (f == n_firsts) {
      REQUIRE(n_firsts < 64, "too many communicators");
      firsts[n_firsts++] = x->comm;
    }
    pos[i] = 2 * (long)collectives[f] - is_p2p(x);
    collectives[f] += !is_p2p(x);
  }
  REQUIRE(o->n_sequences == n_firsts, "%u sequences, expected %u", o->n_sequences, n_firsts);
  for (uint32_t s = 0; s < o->n_sequences; s++) {
    const cg_comm_sequence_t *q = &o->sequences[s];
    REQUIRE(q->comm == firsts[s], "sequence %u is for the wrong communicator", s);
    uint32_t at = 0;
    for (uint32_t k = 0; k < n; k++) {
      if (cg_graph_node(g, order[k])->comm != q->comm) continue;
      REQUIRE(at < q->len && q->nodes[at] == order[k], "sequence %u item %u is #%u, expected #%u", s, at,
              at < q->len ? q->nodes[at] : UINT32_MAX, order[k]);
      REQUIRE(at == 0 || pos[q->nodes[at]] >= pos[q->nodes[at - 1]],
              "sequence %u item %u: #%u (position %ld) after #%u (position %ld)", s, at, q->nodes[at],
              pos[q->nodes[at]], q->nodes[at - 1], pos[q->nodes[at - 1]]);
      at++;
    }
    REQUIRE(at == q->len, "sequence %u has %u nodes, expected %u", s, q->len, at);
    seen += q->len;
  }
  REQUIRE(seen == with_comm, "sequences hold %u nodes, %u nodes have a communicator", seen, with_comm);
  free(pos);
}

START_TEST(comm_order__by_hand) {
  cg_comm_t *a, *b, *c;
  cg_graph_t *g;
  static unsigned char buf[256];
  ck_assert_cg_ok(cg_comm_create_offline(&a, 0, 2));
  ck_assert_cg_ok(cg_comm_create_offline(&b, 1, 2));
  ck_assert_cg_ok(cg_comm_create_offline(&c, 2, 3));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  ck_assert_cg_ok(cg_allreduce(NULL, g, b, buf, buf, 4, CG_INT32, CG_SUM)); /* #0 B */
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &access));             /* #1 no comm */
  ck_assert_cg_ok(cg_send(NULL, g, a, buf + 16, 4, CG_INT32, 1));           /* #2 A */
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf + 32, 4, CG_INT32, 0));           /* #3 C */
  ck_assert_cg_ok(cg_allreduce(NULL, g, b, buf + 48, buf + 64, 4, CG_INT32, CG_SUM)); /* #4 B */
  ck_assert_cg_ok(cg_barrier(NULL, g, a));                                  /* #5 A */
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL));                 /* #6 no comm, fence */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf + 80, 4, CG_INT32, 1));           /* #7 C */
  ck_assert_cg_ok(cg_allreduce(NULL, g, b, buf, buf, 4, CG_INT32, CG_SUM)); /* #8 B */
  cg_comm_order_t o;
  ck_assert_cg_ok(cg_comm_order_build(&o, g));
  ck_assert_uint_eq(o.n_sequences, 3);
  const cg_comm_t *comms[] = {b, a, c};
  const uint32_t want[3][3] = {{0, 4, 8}, {2, 5}, {3, 7}}, lens[] = {3, 2, 2};
  for (int s = 0; s < 3; s++) {
    ck_assert_ptr_eq(o.sequences[s].comm, comms[s]);
    ck_assert_uint_eq(o.sequences[s].len, lens[s]);
    for (uint32_t k = 0; k < lens[s]; k++) ck_assert_uint_eq(o.sequences[s].nodes[k], want[s][k]);
  }
  cg_comm_order_free(&o);
  ck_assert_ptr_null(o.sequences);
  ck_assert_uint_eq(o.n_sequences, 0);
  cg_graph_destroy(g);
  /* explicit backward edges change the topological order, not the order of the
   * sequences: first use in record order (A, B, C) */
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_send(NULL, g, a, buf, 4, CG_INT32, 1));       /* #0 A */
  ck_assert_cg_ok(cg_send(NULL, g, b, buf + 16, 4, CG_INT32, 1));  /* #1 B */
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &access));     /* #2 no comm */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf + 32, 4, CG_INT32, 1));  /* #3 C */
  ck_assert_cg_ok(cg_recv(NULL, g, a, buf + 48, 4, CG_INT32, 1));  /* #4 A */
  ck_assert_cg_ok(cg_depend(g, node_(g, 3), node_(g, 0)));
  ck_assert_cg_ok(cg_depend(g, node_(g, 4), node_(g, 1)));
  ORDER_IS(g, 2, 3, 0, 4, 1);
  ck_assert_cg_ok(cg_comm_order_build(&o, g));
  ck_assert_uint_eq(o.n_sequences, 3);
  ck_assert_ptr_eq(o.sequences[0].comm, a);
  ck_assert_uint_eq(o.sequences[0].len, 2);
  ck_assert_uint_eq(o.sequences[0].nodes[0], 0);
  ck_assert_uint_eq(o.sequences[0].nodes[1], 4);
  ck_assert_ptr_eq(o.sequences[1].comm, b);
  ck_assert_uint_eq(o.sequences[1].len, 1);
  ck_assert_uint_eq(o.sequences[1].nodes[0], 1);
  ck_assert_ptr_eq(o.sequences[2].comm, c);
  ck_assert_uint_eq(o.sequences[2].len, 1);
  ck_assert_uint_eq(o.sequences[2].nodes[0], 3);
  check_comm_order(g, &o, (const uint32_t[]){2, 3, 0, 4, 1});
  cg_comm_order_free(&o);
  cg_graph_destroy(g);
  cg_comm_destroy(a);
  cg_comm_destroy(b);
  cg_comm_destroy(c);
}
END_TEST

/* Two ranks of communicators c and d record the same program. Only rank 0, the
 * broadcast's root, reads S there, so only its graph orders G after H, and the
 * two topological orders differ: rank 1 can start with G. Ordered by first
 * appearance in the topological order, rank 1's sequences would list d first;
 * by first use in record order both ranks list c, then d, with the same nodes. */
START_TEST(comm_order__ranks_with_different_hazards_agree) {
  static float xb[16], S[16], T[16];
  cg_comm_t *c[2], *d[2];
  cg_graph_t *gr[2];
  cg_comm_order_t o[2];
  cg_status_t k_after_x[2], k_after_h[2];
  for (int r = 0; r < 2; r++) {
    ck_assert_cg_ok(cg_comm_create_offline(&c[r], r, 2));
    ck_assert_cg_ok(cg_comm_create_offline(&d[r], r, 2));
    ck_assert_cg_ok(cg_graph_create(&gr[r], NULL));
    cg_graph_t *g = gr[r];
    cg_range_t writes_s[] = {{S, sizeof S}};
    cg_access_t h_access = CG_ACCESS_INIT, k_access = CG_ACCESS_INIT;
    h_access.everything = 0;
    h_access.writes = writes_s;
    h_access.n_writes = 1;
    k_access.everything = 0; /* declares no ranges: touches nothing, not a fence */
    cg_node_t x, h, gb, y, k;
    ck_assert_cg_ok(cg_allreduce(&x, g, c[r], xb, xb, 16, CG_FLOAT32, CG_SUM)); /* X #0 */
    ck_assert_cg_ok(cg_host_func(&h, g, cg_test_noop, NULL, &h_access));       /* H #1 writes S */
    ck_assert_cg_ok(cg_broadcast(&gb, g, d[r], S, T, 16, CG_FLOAT32, 0));      /* G #2 reads S on rank 0 */
    ck_assert_cg_ok(cg_allreduce(&y, g, c[r], T, T, 16, CG_FLOAT32, CG_SUM));  /* Y #3 */
    ck_assert_cg_ok(cg_host_func(&k, g, cg_test_noop, NULL, &k_access));       /* K #4 */
    ck_assert_uint_eq(k.index, 4);
    k_after_x[r] = cg_depend(g, k, x);
    k_after_h[r] = cg_depend(g, k, h);
  }
  /* nothing reaches K, so both backward edges are accepted on both ranks */
  for (int r = 0; r < 2; r++) {
    ck_assert_cg_status(k_after_x[r], CG_SUCCESS);
    ck_assert_cg_status(k_after_h[r], CG_SUCCESS);
    ck_assert_uint_eq(causes_of(gr[r], 4, 0), CG_EDGE_EXPLICIT);
    ck_assert_uint_eq(causes_of(gr[r], 4, 1), CG_EDGE_EXPLICIT);
    ck_assert_uint_eq(causes_of(gr[r], 0, 3), CG_EDGE_COMM_ORDER); /* X before Y on c */
    ck_assert_uint_eq(causes_of(gr[r], 2, 3), CG_EDGE_RAW | CG_EDGE_WAW);
    ck_assert_uint_eq(cg_graph_node(gr[r], 2)->preds.len, r == 0 ? 1 : 0);
  }
  ck_assert_uint_eq(causes_of(gr[0], 1, 2), CG_EDGE_RAW);
  ORDER_IS(gr[0], 4, 0, 1, 2, 3);
  ORDER_IS(gr[1], 2, 4, 0, 1, 3);
  for (int r = 0; r < 2; r++) {
    uint32_t *order = topo(gr[r]);
    ck_assert_cg_ok(cg_comm_order_build(&o[r], gr[r]));
    check_comm_order(gr[r], &o[r], order);
    free(order);
    ck_assert_uint_eq(o[r].n_sequences, 2);
    ck_assert_ptr_eq(o[r].sequences[0].comm, c[r]);
    ck_assert_ptr_eq(o[r].sequences[1].comm, d[r]);
  }
  for (uint32_t s = 0; s < 2; s++) {
    ck_assert_uint_eq(o[0].sequences[s].len, o[1].sequences[s].len);
    for (uint32_t k = 0; k < o[0].sequences[s].len; k++)
      ck_assert_uint_eq(o[0].sequences[s].nodes[k], o[1].sequences[s].nodes[k]);
  }
  ck_assert_uint_eq(o[0].sequences[0].len, 2);
  ck_assert_uint_eq(o[0].sequences[0].nodes[0], 0);
  ck_assert_uint_eq(o[0].sequences[0].nodes[1], 3);
  ck_assert_uint_eq(o[0].sequences[1].len, 1);
  ck_assert_uint_eq(o[0].sequences[1].nodes[0], 2);
  for (int r = 0; r < 2; r++) {
    cg_comm_order_free(&o[r]);
    cg_graph_destroy(gr[r]);
    cg_comm_destroy(c[r]);
    cg_comm_destroy(d[r]);
  }
}
END_TEST

/* Sends and receives recorded between collectives P and Q on one communicator
 * follow P and precede Q; among themselves they may be reordered. */
START_TEST(comm_order__sends_and_receives_between_collectives) {
  cg_comm_t *c, *d;
  cg_graph_t *g;
  static unsigned char buf[256];
  ck_assert_cg_ok(cg_comm_create_offline(&c, 0, 3));
  ck_assert_cg_ok(cg_comm_create_offline(&d, 0, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, buf, buf, 4, CG_INT32, CG_SUM));           /* #0 P */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf + 16, 4, CG_INT32, 1));                     /* #1 */
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf + 32, 4, CG_INT32, 2));                     /* #2 */
  ck_assert_cg_ok(cg_send(NULL, g, d, buf + 48, 4, CG_INT32, 1));                     /* #3 other comm */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf + 64, 4, CG_INT32, 2));                     /* #4 */
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, buf + 80, buf + 80, 4, CG_INT32, CG_SUM)); /* #5 Q */
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf + 96, 4, CG_INT32, 1));                     /* #6 after Q */
  for (uint32_t i = 1; i <= 4; i++) {
    if (i == 3) continue;
    ck_assert_uint_eq(cg_graph_node(g, i)->preds.len, 1);
    ck_assert_uint_eq(causes_of(g, 0, i), CG_EDGE_COMM_ORDER);
    ck_assert_uint_eq(causes_of(g, i, 5), CG_EDGE_COMM_ORDER);
  }
  ck_assert_uint_eq(cg_graph_node(g, 3)->preds.len, 0);
  ck_assert_uint_eq(cg_graph_node(g, 5)->preds.len, 3); /* #1, #2, #4: not P itself */
  ck_assert_uint_eq(cg_graph_node(g, 6)->preds.len, 1);
  ck_assert_uint_eq(causes_of(g, 5, 6), CG_EDGE_COMM_ORDER);
  /* reorder the group; crossing P or Q is a cycle */
  ck_assert_cg_ok(cg_depend(g, node_(g, 4), node_(g, 1)));
  ck_assert_cg_ok(cg_depend(g, node_(g, 2), node_(g, 4)));
  ck_assert_cg_status(cg_depend(g, node_(g, 5), node_(g, 1)), CG_ERR_CYCLE);
  ck_assert_cg_status(cg_depend(g, node_(g, 1), node_(g, 0)), CG_ERR_CYCLE);
  ck_assert_cg_status(cg_depend(g, node_(g, 6), node_(g, 2)), CG_ERR_CYCLE);
  ck_assert_cg_status(cg_depend(g, node_(g, 5), node_(g, 0)), CG_ERR_CYCLE);
  ORDER_IS(g, 0, 2, 3, 4, 1, 5, 6);
  cg_comm_order_t o;
  ck_assert_cg_ok(cg_comm_order_build(&o, g));
  check_comm_order(g, &o, (const uint32_t[]){0, 2, 3, 4, 1, 5, 6});
  ck_assert_uint_eq(o.n_sequences, 2);
  ck_assert_ptr_eq(o.sequences[0].comm, c);
  const uint32_t want[] = {0, 2, 4, 1, 5, 6};
  ck_assert_uint_eq(o.sequences[0].len, 6);
  for (uint32_t k = 0; k < 6; k++) ck_assert_uint_eq(o.sequences[0].nodes[k], want[k]);
  ck_assert_ptr_eq(o.sequences[1].comm, d);
  ck_assert_uint_eq(o.sequences[1].len, 1);
  ck_assert_uint_eq(o.sequences[1].nodes[0], 3);
  cg_comm_order_free(&o);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
  cg_comm_destroy(d);
}
END_TEST

START_TEST(comm_order__random_graphs_match_reference) {
  cg_test_reseed(14);
  for (int round = 0; round < 200; round++) {
    cg_comm_t *comms[3];
    int n_comms = 2 + (int)cg_test_below(2);
    make_comms(comms, 3);
    program_t p = random_program(1 + (uint32_t)cg_test_below(120), 1, round % 2);
    for (uint32_t k = 0; k < p.n_ops; k++) p.ops[k].comm %= n_comms;
    cg_graph_t *g = record(&p, comms, NULL);
    uint32_t *want = malloc((p.n_nodes + 1) * sizeof *want);
    reference_order(g, want);
    cg_comm_order_t o;
    ck_assert_cg_ok(cg_comm_order_build(&o, g));
    check_comm_order(g, &o, want);
    cg_comm_order_free(&o);
    free(want);
    cg_graph_destroy(g);
    free(p.ops);
    destroy_comms(comms, 3);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("order");
  TCase *tc = tcase_create("order");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, topo__empty_graph);
  tcase_add_test(tc, topo__forward_edges_give_record_order);
  tcase_add_test(tc, topo__backward_edges_by_hand);
  tcase_add_test(tc, topo__random_graphs_match_reference);
  tcase_add_test(tc, topo__same_program_same_order);
  suite_add_tcase(s, tc);
  TCase *co = tcase_create("comm_order");
  tcase_set_timeout(co, 60);
  tcase_add_test(co, comm_order__by_hand);
  tcase_add_test(co, comm_order__ranks_with_different_hazards_agree);
  tcase_add_test(co, comm_order__sends_and_receives_between_collectives);
  tcase_add_test(co, comm_order__random_graphs_match_reference);
  suite_add_tcase(s, co);
  return s;
}

int main(void) { return cg_test_main(suite()); }
