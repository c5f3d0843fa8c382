/* Hazard edges against brute-force references on random graphs: the "random"
 * test case of the hazard suite (test_hazard.c has the by-hand tests and the
 * suite). */
#include <stdlib.h>

#include "comm_order.h"
#include "graph_view.h"
#include "test_support.h"
#include "test_hazard.h"

#define HAZARD_CAUSES (CG_EDGE_RAW | CG_EDGE_WAR | CG_EDGE_WAW)
#define CO CG_EDGE_COMM_ORDER
#define ALL_CAUSES (CG_EDGE_EXPLICIT | HAZARD_CAUSES | CG_EDGE_FENCE | CG_EDGE_COMM_ORDER)
#define N_CAUSES 6

/* ---- random graphs against brute-force references
 *
 * Buffers are fake addresses in a few regions (the library never dereferences
 * them). Alongside the library, a byte-level shadow memory keeps per byte the
 * last writer and the readers since that write: the specification in
 * graph/hazard.h, computed the slow way. The comm-order rule is modelled from
 * each node's kind, communicator and record index only: a scan back over the
 * earlier nodes of the same communicator gives the expected comm-order
 * predecessors, and a position per node gives the order every graph must keep:
 * the k-th collective of a communicator (from 0) has position 2k, a send or
 * receive recorded after k of its collectives has position 2k - 1, and a node
 * of lower position on the same communicator must run first. */

#define MAX_SPANS 4
#define REG_STRIDE ((uintptr_t)1 << 24)

typedef struct ref_node {
  int fence;
  int comm; /* index into gen_t.comms, -1 for none */
  int p2p;  /* send or receive */
  long pos; /* comm-order position (set when recorded), when comm >= 0 */
  unsigned n_r, n_w;
  cg_span_t r[MAX_SPANS], w[MAX_SPANS];
} ref_node_t;

typedef struct params {
  unsigned nreg;
  size_t reg_bytes, max_off, max_count, max_host_bytes;
  int fences;  /* barriers and opaque host functions */
  int depends; /* random cg_depend calls */
} params_t;

typedef struct shadow_byte {
  uint32_t writer; /* CG_NO_NODE if none since the last fence */
  uint32_t n_readers, cap_readers;
  uint32_t *readers; /* since the writer */
} shadow_byte_t;

typedef struct gen {
  params_t p;
  cg_graph_t *g;
  cg_comm_t *comms[3];
  int rank[3], size[3];
  ref_node_t *ref;
  uint32_t n, cap;
  unsigned char *explicit_edges; /* cap * cap, [before * cap + after]: cg_depend succeeded */
  shadow_byte_t *mem;
  size_t mem_bytes;
  uint32_t *causes, *touched, n_touched; /* expected hazard causes into the node just recorded */
  uint32_t n_coll[3];                    /* collectives recorded on each communicator */
  int first_use[3], n_used;              /* communicators in order of first use */
  uint32_t *co_off, *co_preds, n_co;     /* expected comm-order preds of j: co_preds[co_off[j] .. co_off[j + 1]) */
} gen_t;

static size_t comm_order_cycles; /* random cg_depend calls the comm order alone forbids */

static void shadow_clear(gen_t *s) {
  for (size_t b = 0; b < s->mem_bytes; b++) {
    s->mem[b].writer = CG_NO_NODE;
    s->mem[b].n_readers = 0;
  }
}

static void gen_init(gen_t *s, const params_t *p, uint32_t cap) {
  memset(s, 0, sizeof *s);
  s->p = *p;
  s->cap = cap;
  ck_assert_cg_ok(cg_graph_create(&s->g, NULL));
  for (int c = 0; c < 3; c++) {
    s->size[c] = 1 + (int)cg_test_below(4);
    s->rank[c] = (int)cg_test_below((uint64_t)s->size[c]);
    ck_assert_cg_ok(cg_comm_create_offline(&s->comms[c], s->rank[c], s->size[c]));
  }
  s->mem_bytes = p->nreg * p->reg_bytes;
  s->ref = calloc(cap, sizeof *s->ref);
  s->explicit_edges = calloc((size_t)cap * (p->depends ? cap : 1), 1);
  s->mem = calloc(s->mem_bytes, sizeof *s->mem);
  s->causes = calloc(cap, sizeof *s->causes);
  s->touched = malloc(cap * sizeof *s->touched);
  s->co_off = calloc((size_t)cap + 1, sizeof *s->co_off);
  s->co_preds = malloc((2 * (size_t)cap + 1) * sizeof *s->co_preds); /* at most one per send or receive and one
                                                                       * per collective beyond its group */
  ck_assert(s->ref && s->explicit_edges && s->mem && s->causes && s->touched && s->co_off && s->co_preds);
  shadow_clear(s);
}

static void gen_free(gen_t *s) {
  cg_graph_destroy(s->g);
  for (int c = 0; c < 3; c++) cg_comm_destroy(s->comms[c]);
  for (size_t b = 0; b < s->mem_bytes; b++) free(s->mem[b].readers);
  free(s->ref);
  free(s->explicit_edges);
  free(s->mem);
  free(s->causes);
  free(s->touched);
  free(s->co_off);
  free(s->co_preds);
}

static uintptr_t rand_addr(const gen_t *s, unsigned reg) {
  return REG_STRIDE * (reg + 1) + (uintptr_t)cg_test_below(s->p.max_off);
}

/* The shadow bytes of span x. */
static shadow_byte_t *shadow_of(const gen_t *s, cg_span_t x) {
  uintptr_t reg = x.start / REG_STRIDE - 1, off = x.start % REG_STRIDE;
  REQUIRE(reg < s->p.nreg && off + (x.end - x.start) <= s->p.reg_bytes, "span outside the shadow memory");
  return &s->mem[reg * s->p.reg_bytes + off];
}

/* The comm-order reference for node j, just recorded: scanning back over the
 * earlier nodes of its communicator, a send or receive follows the nearest
 * collective; a collective follows every send and receive since the nearest
 * collective, or that collective where there are none. */
static void expect_comm_order(gen_t *s, uint32_t j) {
  const ref_node_t *y = &s->ref[j];
  REQUIRE(s->co_off[j] == s->n_co, "comm-order reference out of step at #%u", j);
  for (uint32_t i = j; y->comm >= 0 && i-- > 0;) {
    const ref_node_t *x = &s->ref[i];
    if (x->comm != y->comm) continue;
    if (!x->p2p) {
      if (y->p2p || s->n_co == s->co_off[j]) s->co_preds[s->n_co++] = i;
      break;
    }
    if (!y->p2p) s->co_preds[s->n_co++] = i;
  }
  s->co_off[j + 1] = s->n_co;
}

/* Whether the reference has a comm-order edge i -> j. */
static int co_expected(const gen_t *s, uint32_t i, uint32_t j) {
  for (uint32_t k = s->co_off[j]; k < s->co_off[j + 1]; k++)
    if (s->co_preds[k] == i) return 1;
  return 0;
}

/* Node i must run before node j by the comm order. */
static int co_before(const ref_node_t *x, const ref_node_t *y) {
  return x->comm >= 0 && x->comm == y->comm && x->pos < y->pos;
}

static void expect(gen_t *s, uint32_t from, uint32_t cause) {
  if (!s->causes[from]) s->touched[s->n_touched++] = from;
  s->causes[from] |= cause;
}

/* Node j was just recorded: checks its predecessors against the shadow memory,
 * then lets the shadow memory see its accesses (all reads, then all writes). */
static void shadow_record(gen_t *s, uint32_t j) {
  const ref_node_t *x = &s->ref[j];
  const cg_edge_vec_t *preds = &cg_graph_node(s->g, j)->preds;
  uint32_t n_co = 0, want_co = s->co_off[j + 1] - s->co_off[j];
  if (x->fence) {
    for (uint32_t e = 0; e < preds->len; e++) {
      uint32_t i = preds->items[e].node, c = preds->items[e].causes;
      REQUIRE(!!(c & CO) == co_expected(s, i, j), "fence #%u: edge from #%u has comm-order bit %d, reference says %d",
              j, i, !!(c & CO), co_expected(s, i, j));
      REQUIRE((c & ~(uint32_t)CO) == CG_EDGE_FENCE || c == CO, "fence #%u: edge from #%u has causes %#x", j, i, c);
      n_co += !!(c & CO);
    }
    REQUIRE(n_co == want_co, "fence #%u has %u of the %u comm-order predecessors the reference expects", j, n_co,
            want_co);
    shadow_clear(s);
    return;
  }
  s->n_touched = 0;
  for (unsigned k = 0; k < x->n_r; k++)
    for (shadow_byte_t *b = shadow_of(s, x->r[k]), *end = b + (x->r[k].end - x->r[k].start); b < end; b++)
      if (b->writer != CG_NO_NODE) expect(s, b->writer, CG_EDGE_RAW);
  for (unsigned k = 0; k < x->n_w; k++)
    for (shadow_byte_t *b = shadow_of(s, x->w[k]), *end = b + (x->w[k].end - x->w[k].start); b < end; b++) {
      for (uint32_t q = 0; q < b->n_readers; q++) expect(s, b->readers[q], CG_EDGE_WAR);
      if (!b->n_readers && b->writer != CG_NO_NODE) expect(s, b->writer, CG_EDGE_WAW);
    }
  uint32_t matched = 0;
  for (uint32_t e = 0; e < preds->len; e++) {
    uint32_t i = preds->items[e].node, c = preds->items[e].causes;
    REQUIRE((c & HAZARD_CAUSES) == s->causes[i], "edge #%u -> #%u has hazard causes %#x, reference says %#x", i, j,
            c & HAZARD_CAUSES, s->causes[i]);
    REQUIRE(!!(c & CO) == co_expected(s, i, j), "edge #%u -> #%u has comm-order bit %d, reference says %d", i, j,
            !!(c & CO), co_expected(s, i, j));
    REQUIRE((c & ~(uint32_t)(HAZARD_CAUSES | CO)) == 0 || c == CG_EDGE_FENCE,
            "edge #%u -> #%u has causes %#x when recorded", i, j, c);
    matched += s->causes[i] != 0;
    n_co += !!(c & CO);
  }
  REQUIRE(matched == s->n_touched, "node #%u has %u of the %u hazard predecessors the reference expects", j, matched,
          s->n_touched);
  REQUIRE(n_co == want_co, "node #%u has %u of the %u comm-order predecessors the reference expects", j, n_co,
          want_co);
  for (uint32_t t = 0; t < s->n_touched; t++) s->causes[s->touched[t]] = 0;
  for (unsigned k = 0; k < x->n_r; k++)
    for (shadow_byte_t *b = shadow_of(s, x->r[k]), *end = b + (x->r[k].end - x->r[k].start); b < end; b++) {
      if (b->n_readers && b->readers[b->n_readers - 1] == j) continue;
      if (b->n_readers == b->cap_readers) {
        b->cap_readers = b->cap_readers ? 2 * b->cap_readers : 4;
        b->readers = realloc(b->readers, b->cap_readers * sizeof *b->readers);
        REQUIRE(b->readers, "out of memory");
      }
      b->readers[b->n_readers++] = j;
    }
  for (unsigned k = 0; k < x->n_w; k++)
    for (shadow_byte_t *b = shadow_of(s, x->w[k]), *end = b + (x->w[k].end - x->w[k].start); b < end; b++) {
      b->writer = j;
      b->n_readers = 0;
    }
}

static void accept_node(gen_t *s, cg_status_t st, cg_node_t out, const ref_node_t *x) {
  REQUIRE(st == CG_SUCCESS, "recording node #%u: %s (%s)", s->n, cg_status_string(st), cg_error_last());
  REQUIRE(out.index == s->n && cg_graph_node_count(s->g) == s->n + 1, "node #%u recorded as #%u", s->n, out.index);
  REQUIRE(cg_graph_node(s->g, s->n)->is_fence == x->fence, "node #%u: is_fence %d, expected %d", s->n,
          cg_graph_node(s->g, s->n)->is_fence, x->fence);
  REQUIRE(cg_graph_node(s->g, s->n)->comm == (x->comm < 0 ? NULL : s->comms[x->comm]), "node #%u: wrong communicator",
          s->n);
  ref_node_t *y = &s->ref[s->n];
  *y = *x;
  if (y->comm >= 0) {
    int f = 0;
    while (f < s->n_used && s->first_use[f] != y->comm) f++;
    if (f == s->n_used) s->first_use[s->n_used++] = y->comm;
    y->pos = 2 * (long)s->n_coll[y->comm] - y->p2p;
    s->n_coll[y->comm] += !y->p2p;
  }
  expect_comm_order(s, s->n);
  shadow_record(s, s->n++);
}

static void add_span(cg_span_t *spans, unsigned *n, uintptr_t start, size_t bytes) {
  if (bytes) spans[(*n)++] = (cg_span_t){start, start + bytes};
}

static int spans_overlap(const cg_span_t *x, unsigned nx, const cg_span_t *y, unsigned ny) {
  for (unsigned a = 0; a < nx; a++)
    for (unsigned b = 0; b < ny; b++)
      if (x[a].start < y[b].end && y[b].start < x[a].end) return 1;
  return 0;
}

/* Earlier node x and later node y must be ordered. */
static int conflicts(const ref_node_t *x, const ref_node_t *y) {
  return x->fence || y->fence || spans_overlap(x->w, x->n_w, y->r, y->n_r) ||
         spans_overlap(x->r, x->n_r, y->w, y->n_w) || spans_overlap(x->w, x->n_w, y->w, y->n_w);
}

/* Per rank, as graph.h describes it: elements read from send and written to
 * recv when used; in place when send == recv + off elements (form 1) or
 * recv == send + off elements (form 2). */
typedef struct layout {
  size_t s_el, r_el;
  int use_s, use_r, form;
  size_t off;
} layout_t;

/* A random collective or point-to-point node; the reference decides from the
 * layout rules in graph.h what it reads and writes and whether its buffers
 * alias illegally. */
static void record_collective(gen_t *s) {
  static const cg_node_kind_t kinds[] = {CG_NODE_ALLREDUCE, CG_NODE_BROADCAST,      CG_NODE_REDUCE,
                                         CG_NODE_ALLGATHER, CG_NODE_REDUCE_SCATTER, CG_NODE_ALLTOALL,
                                         CG_NODE_GATHER,    CG_NODE_SCATTER,        CG_NODE_SEND,
                                         CG_NODE_RECV};
  cg_node_kind_t kind = kinds[cg_test_below(10)];
  int c = (int)cg_test_below(3), rank = s->rank[c], root = (int)cg_test_below((uint64_t)s->size[c]);
  int is_root = rank == root;
  size_t n = (size_t)s->size[c], count = cg_test_below(8) ? 1 + cg_test_below(s->p.max_count) : 0;
  cg_dtype_t dt = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
  cg_redop_t op = (cg_redop_t)cg_test_below(CG_REDOP_COUNT);
  size_t ds = cg_dtype_size(dt), all = n * count, at_rank = (size_t)rank * count, at_root = (size_t)root * count;
  layout_t l;
  switch (kind) {
    case CG_NODE_ALLREDUCE: l = (layout_t){count, count, 1, 1, 1, 0}; break;
    case CG_NODE_BROADCAST: l = (layout_t){count, count, is_root, 1, is_root, 0}; break;
    case CG_NODE_REDUCE: l = (layout_t){count, count, 1, is_root, is_root, 0}; break;
    case CG_NODE_ALLGATHER: l = (layout_t){count, all, 1, 1, 1, at_rank}; break;
    case CG_NODE_REDUCE_SCATTER: l = (layout_t){all, count, 1, 1, 2, at_rank}; break;
    case CG_NODE_ALLTOALL: l = (layout_t){all, all, 1, 1, 0, 0}; break;
    case CG_NODE_GATHER: l = (layout_t){count, all, 1, is_root, is_root, at_root}; break;
    case CG_NODE_SCATTER: l = (layout_t){all, count, is_root, 1, is_root ? 2 : 0, at_root}; break;
    case CG_NODE_SEND: l = (layout_t){count, 0, 1, 0, 0, 0}; break;
    default: l = (layout_t){0, count, 0, 1, 0, 0}; break;
  }
  unsigned reg = (unsigned)cg_test_below(s->p.nreg);
  uintptr_t send = rand_addr(s, reg), recv = rand_addr(s, cg_test_below(2) ? reg : (reg + 1) % s->p.nreg);
  if (l.form && cg_test_below(3) == 0) {
    if (l.form == 1) send = recv + l.off * ds;
    else recv = send + l.off * ds;
  }
  if ((!l.use_s || !count) && cg_test_below(2)) send = 0;
  if ((!l.use_r || !count) && cg_test_below(2)) recv = 0;
  ref_node_t x = {.comm = c, .p2p = kind == CG_NODE_SEND || kind == CG_NODE_RECV};
  if (l.use_s) add_span(x.r, &x.n_r, send, l.s_el * ds);
  if (l.use_r) add_span(x.w, &x.n_w, recv, l.r_el * ds);
  int alias = spans_overlap(x.r, x.n_r, x.w, x.n_w) && !(l.form == 1 && send == recv + l.off * ds) &&
              !(l.form == 2 && recv == send + l.off * ds);
  const void *sp = (const void *)send;
  void *rp = (void *)recv;
  cg_graph_t *g_ = s->g;
  cg_comm_t *cm = s->comms[c];
  cg_node_t out = CG_NODE_NULL;
  cg_status_t st;
  switch (kind) {
    case CG_NODE_ALLREDUCE: st = cg_allreduce(&out, g_, cm, sp, rp, count, dt, op); break;
    case CG_NODE_BROADCAST: st = cg_broadcast(&out, g_, cm, sp, rp, count, dt, root); break;
    case CG_NODE_REDUCE: st = cg_reduce(&out, g_, cm, sp, rp, count, dt, op, root); break;
    case CG_NODE_ALLGATHER: st = cg_allgather(&out, g_, cm, sp, rp, count, dt); break;
    case CG_NODE_REDUCE_SCATTER: st = cg_reduce_scatter(&out, g_, cm, sp, rp, count, dt, op); break;
    case CG_NODE_ALLTOALL: st = cg_alltoall(&out, g_, cm, sp, rp, count, dt); break;
    case CG_NODE_GATHER: st = cg_gather(&out, g_, cm, sp, rp, count, dt, root); break;
    case CG_NODE_SCATTER: st = cg_scatter(&out, g_, cm, sp, rp, count, dt, root); break;
    case CG_NODE_SEND: st = cg_send(&out, g_, cm, sp, count, dt, root); break;
    default: st = cg_recv(&out, g_, cm, rp, count, dt, root); break;
  }
  if (alias) {
    REQUIRE(st == CG_ERR_ALIAS, "%s rank %d of %zu root %d count %zu %s send %#jx recv %#jx: got %s, expected alias",
            cg_node_kind_name(kind), rank, n, root, count, cg_dtype_name(dt), (uintmax_t)send, (uintmax_t)recv,
            cg_status_string(st));
    REQUIRE(cg_graph_node_count(s->g) == s->n, "a rejected call recorded a node");
    return;
  }
  accept_node(s, st, out, &x);
}

static void record_host_func(gen_t *s) {
  cg_range_t reads[MAX_SPANS - 1], writes[MAX_SPANS - 1];
  cg_access_t access = CG_ACCESS_INIT;
  ref_node_t x = {.comm = -1};
  access.everything = 0;
  access.reads = reads;
  access.n_reads = cg_test_below(MAX_SPANS);
  access.writes = writes;
  access.n_writes = cg_test_below(MAX_SPANS);
  for (size_t k = 0; k < access.n_reads + access.n_writes; k++) {
    cg_range_t *r = k < access.n_reads ? &reads[k] : &writes[k - access.n_reads];
    uintptr_t a = rand_addr(s, (unsigned)cg_test_below(s->p.nreg));
    r->bytes = cg_test_below(s->p.max_host_bytes);
    r->ptr = !r->bytes && cg_test_below(2) ? NULL : (const void *)a;
    if (k < access.n_reads) add_span(x.r, &x.n_r, a, r->bytes);
    else add_span(x.w, &x.n_w, a, r->bytes);
  }
  const cg_access_t *ap = &access;
  if (s->p.fences && cg_test_below(8) == 0) {
    x = (ref_node_t){.fence = 1, .comm = -1};
    if (cg_test_below(2)) ap = NULL;
    else access.everything = 1;
  }
  cg_node_t out = CG_NODE_NULL;
  accept_node(s, cg_host_func(&out, s->g, cg_test_noop, NULL, ap), out, &x);
}

static void random_depend(gen_t *s) {
  uint32_t a = (uint32_t)cg_test_below(s->n), b = (uint32_t)cg_test_below(s->n);
  cg_status_t want = a == b || reaches(s->g, b, a) ? CG_ERR_CYCLE : CG_SUCCESS;
  /* b before a by the comm order: the graph must already hold a path */
  if (co_before(&s->ref[b], &s->ref[a])) {
    REQUIRE(want == CG_ERR_CYCLE, "#%u must run before #%u on communicator %d, but no path leads there", b, a,
            s->ref[a].comm);
    comm_order_cycles++;
  }
  cg_status_t st = cg_depend(s->g, (cg_node_t){s->g->serial, a}, (cg_node_t){s->g->serial, b});
  REQUIRE(st == want, "cg_depend(#%u, #%u) returned %s, expected %s", a, b, cg_status_string(st),
          cg_status_string(want));
  if (want == CG_SUCCESS) s->explicit_edges[(size_t)a * s->cap + b] = 1;
}

static void gen_step(gen_t *s) {
  uint64_t r = cg_test_below(100);
  if (r < 72 || (!s->p.fences && r >= 90)) {
    record_collective(s);
  } else if (r < 90) {
    record_host_func(s);
  } else {
    cg_node_t out = CG_NODE_NULL;
    ref_node_t x = {.fence = 1, .comm = (int)cg_test_below(3)};
    accept_node(s, cg_barrier(&out, s->g, s->comms[x.comm]), out, &x);
  }
  if (s->p.depends && s->n >= 2 && cg_test_below(6) == 0) random_depend(s);
}

/* Structure of the stored edges: mirrored, no duplicates, no self edges, known
 * causes, counted right by cg_graph_stats. Returns the edge count. */
static size_t check_structure(const cg_graph_t *gr, uint32_t n, int forward_only) {
  size_t n_preds = 0, n_succs = 0, by_cause[N_CAUSES] = {0};
  for (uint32_t j = 0; j < n; j++) {
    const cg_node_rec_t *x = cg_graph_node(gr, j);
    n_succs += x->succs.len;
    for (uint32_t e = 0; e < x->succs.len; e++) {
      REQUIRE(x->succs.items[e].node < n && x->succs.items[e].node != j, "#%u has successor #%u", j,
              x->succs.items[e].node);
      for (uint32_t f = 0; f < e; f++)
        REQUIRE(x->succs.items[f].node != x->succs.items[e].node, "#%u lists successor #%u twice", j,
                x->succs.items[e].node);
    }
    for (uint32_t e = 0; e < x->preds.len; e++) {
      uint32_t i = x->preds.items[e].node, c = x->preds.items[e].causes;
      REQUIRE(i < n, "#%u has predecessor #%u", j, i);
      REQUIRE(c != 0 && (c & ~(uint32_t)ALL_CAUSES) == 0, "edge #%u -> #%u has causes %#x", i, j, c);
      REQUIRE(!forward_only || i < j, "backward edge #%u -> #%u", i, j);
      REQUIRE(edge(gr, i, j) == c, "edge #%u -> #%u", i, j); /* also: once on each side, same causes */
      for (int b = 0; b < N_CAUSES; b++) by_cause[b] += !!(c & (1u << b));
      n_preds++;
    }
  }
  ck_assert_uint_eq(n_preds, n_succs);
  check_stats(gr, n_preds, by_cause[0], by_cause[1], by_cause[2], by_cause[3], by_cause[4], by_cause[5]);
  ck_assert_uint_eq(cg_graph_node_count(gr), n);
  return n_preds;
}

/* The per-communicator sequences (sched/compile/comm_order.c): one per communicator,
 * in order of first use in record order, each holding exactly that
 * communicator's nodes with non-decreasing comm-order positions: its
 * collectives in record order, and each send or receive between the two
 * collectives recorded around it. */
static void check_comm_sequences(const gen_t *s) {
  cg_comm_order_t o;
  cg_status_t st = cg_comm_order_build(&o, s->g);
  REQUIRE(st == CG_SUCCESS, "cg_comm_order_build: %s (%s)", cg_status_string(st), cg_error_last());
  REQUIRE(o.n_sequences == (uint32_t)s->n_used, "%u sequences, %d communicators used", o.n_sequences, s->n_used);
  unsigned char *seen = calloc((size_t)s->n + 1, 1);
  REQUIRE(seen, "out of memory");
  uint32_t in_sequences = 0, with_comm = 0;
  for (uint32_t j = 0; j < s->n; j++) with_comm += s->ref[j].comm >= 0;
  for (uint32_t q = 0; q < o.n_sequences; q++) {
    const cg_comm_sequence_t *seq = &o.sequences[q];
    int c = s->first_use[q];
    REQUIRE(seq->comm == s->comms[c], "sequence %u is not for communicator %d, the %u-th used", q, c, q + 1);
    long prev = -1;
    for (uint32_t k = 0; k < seq->len; k++) {
      uint32_t v = seq->nodes[k];
      REQUIRE(v < s->n && !seen[v] && s->ref[v].comm == c, "sequence %u item %u: #%u", q, k, v);
      seen[v] = 1;
      REQUIRE(s->ref[v].pos >= prev, "sequence %u item %u: #%u (comm-order position %ld) after position %ld", q, k,
              v, s->ref[v].pos, prev);
      prev = s->ref[v].pos;
    }
    in_sequences += seq->len;
  }
  REQUIRE(in_sequences == with_comm, "sequences hold %u nodes, %u nodes have a communicator", in_sequences,
          with_comm);
  free(seen);
  cg_comm_order_free(&o);
}

/* Full check of a small random graph with all-pairs references; returns the
 * number of edges. */
static size_t check_random_graph(const gen_t *s) {
  const cg_graph_t *gr = s->g;
  uint32_t n = s->n;
  size_t edges = check_structure(gr, n, 0);
  /* (d) acyclic: Kahn's algorithm orders every node */
  uint32_t *order = malloc((n + 1) * sizeof *order), *waiting = malloc((n + 1) * sizeof *waiting), *last_fence =
      malloc((n + 1) * sizeof *last_fence);
  size_t words = (n + 63) / 64;
  uint64_t *reach = calloc((size_t)n * words + 1, sizeof *reach);
  ck_assert(order && waiting && reach && last_fence);
  uint32_t emitted = 0, head = 0;
  for (uint32_t i = 0; i < n; i++)
    if (!(waiting[i] = cg_graph_node(gr, i)->preds.len)) order[emitted++] = i;
  while (head < emitted) {
    const cg_edge_vec_t *succs = &cg_graph_node(gr, order[head++])->succs;
    for (uint32_t e = 0; e < succs->len; e++)
      if (--waiting[succs->items[e].node] == 0) order[emitted++] = succs->items[e].node;
  }
  REQUIRE(emitted == n, "graph has a cycle: %u of %u nodes ordered", emitted, n);
  /* transitive closure, sinks first */
  for (uint32_t k = n; k-- > 0;) {
    uint32_t v = order[k];
    const cg_edge_vec_t *succs = &cg_graph_node(gr, v)->succs;
    for (uint32_t e = 0; e < succs->len; e++) {
      uint32_t w = succs->items[e].node;
      reach[(size_t)v * words + w / 64] |= 1ull << (w % 64);
      for (size_t q = 0; q < words; q++) reach[(size_t)v * words + q] |= reach[(size_t)w * words + q];
    }
  }
#define REACHES(i, j) ((reach[(size_t)(i) * words + (j) / 64] >> ((j) % 64)) & 1)
  /* (a) soundness over all pairs */
  for (uint32_t j = 0; j < n; j++)
    for (uint32_t i = 0; i < j; i++)
      REQUIRE(!conflicts(&s->ref[i], &s->ref[j]) || REACHES(i, j), "#%u and #%u conflict but #%u does not reach #%u",
              i, j, i, j);
  /* (e) the comm order: every node of lower position on the same communicator
   * reaches a node, so every topological order keeps the collectives of one
   * communicator in record order */
  for (uint32_t j = 0; j < n; j++)
    for (uint32_t i = 0; i < j; i++)
      REQUIRE(!co_before(&s->ref[i], &s->ref[j]) || REACHES(i, j),
              "#%u (position %ld) must run before #%u (position %ld) on communicator %d, but does not reach it", i,
              s->ref[i].pos, j, s->ref[j].pos, s->ref[j].comm);
  check_comm_sequences(s);
  /* (b) no spurious edges, and exactly the comm-order edges of the reference */
  size_t co_edges = 0;
  uint32_t lf = CG_NO_NODE;
  for (uint32_t j = 0; j < n; j++) {
    last_fence[j] = lf;
    if (s->ref[j].fence) lf = j;
  }
  for (uint32_t j = 0; j < n; j++) {
    const ref_node_t *y = &s->ref[j];
    const cg_edge_vec_t *preds = &cg_graph_node(gr, j)->preds;
    for (uint32_t e = 0; e < preds->len; e++) {
      uint32_t i = preds->items[e].node, c = preds->items[e].causes;
      const ref_node_t *x = &s->ref[i];
      REQUIRE(!!(c & CG_EDGE_EXPLICIT) == s->explicit_edges[(size_t)i * s->cap + j],
              "edge #%u -> #%u: explicit bit %d, cg_depend added it: %d", i, j, !!(c & CG_EDGE_EXPLICIT),
              s->explicit_edges[(size_t)i * s->cap + j]);
      REQUIRE(!!(c & CO) == co_expected(s, i, j), "edge #%u -> #%u: comm-order bit %d, reference says %d", i, j,
              !!(c & CO), co_expected(s, i, j));
      co_edges += !!(c & CO);
      if (c & HAZARD_CAUSES)
        REQUIRE(i < j && !x->fence && !y->fence && (last_fence[j] == CG_NO_NODE || last_fence[j] < i),
                "hazard edge #%u -> #%u (causes %#x) across or onto a fence", i, j, c);
      if (c & CG_EDGE_RAW) REQUIRE(spans_overlap(x->w, x->n_w, y->r, y->n_r), "spurious RAW #%u -> #%u", i, j);
      if (c & CG_EDGE_WAR) REQUIRE(spans_overlap(x->r, x->n_r, y->w, y->n_w), "spurious WAR #%u -> #%u", i, j);
      if (c & CG_EDGE_WAW) REQUIRE(spans_overlap(x->w, x->n_w, y->w, y->n_w), "spurious WAW #%u -> #%u", i, j);
      if (c & CG_EDGE_FENCE) {
        /* into a fence from a node since the previous fence (or that fence), or
         * out of the last fence before a node */
        int ok = y->fence ? i < j && (last_fence[j] == CG_NO_NODE || i >= last_fence[j]) : i == last_fence[j];
        REQUIRE(ok, "fence edge #%u -> #%u breaks the fence rules (last fence before #%u: %d)", i, j, j,
                last_fence[j] == CG_NO_NODE ? -1 : (int)last_fence[j]);
      }
    }
  }
  REQUIRE(co_edges == s->n_co, "%zu comm-order edges, the reference expects %u", co_edges, s->n_co);
  /* every cg_depend that succeeded left an explicit edge */
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < n; j++)
      if (s->explicit_edges[(size_t)i * s->cap + j])
        REQUIRE(edge(gr, i, j) & CG_EDGE_EXPLICIT, "cg_depend(#%u, #%u) left no explicit edge", i, j);
#undef REACHES
  free(order);
  free(waiting);
  free(last_fence);
  free(reach);
  return edges;
}

/* `rounds` random graphs of up to `max_nodes` nodes; returns nodes and edges. */
static void run_random(const params_t *p, int rounds, uint32_t max_nodes, size_t *nodes, size_t *edges) {
  for (int round = 0; round < rounds; round++) {
    gen_t s;
    uint32_t target = 1 + (uint32_t)cg_test_below(round % 10 == 0 ? 3 * max_nodes : max_nodes);
    gen_init(&s, p, target);
    for (uint32_t tries = 0; s.n < target && tries < 8 * target; tries++) gen_step(&s);
    *edges += check_random_graph(&s);
    *nodes += s.n;
    gen_free(&s);
  }
}

START_TEST(hazard__random_graphs_match_brute_force_reference) {
  cg_test_reseed(101);
  const params_t p = {.nreg = 3, .reg_bytes = 1024, .max_off = 256, .max_count = 12, .max_host_bytes = 96,
                      .fences = 1, .depends = 1};
  size_t nodes = 0, edges = 0;
  comm_order_cycles = 0;
  run_random(&p, 300, 80, &nodes, &edges);
  ck_assert_uint_gt(nodes, 10000);
  ck_assert_uint_gt(edges, nodes / 2);
  ck_assert_uint_gt(comm_order_cycles, 100); /* cg_depend against the comm order was tried, and refused */
}
END_TEST

/* Dense traffic on one small region: almost every pair conflicts. */
START_TEST(hazard__random_dense_graphs_match_brute_force_reference) {
  cg_test_reseed(202);
  const params_t p = {.nreg = 1, .reg_bytes = 256, .max_off = 48, .max_count = 6, .max_host_bytes = 48,
                      .fences = 0, .depends = 1};
  size_t nodes = 0, edges = 0;
  run_random(&p, 150, 60, &nodes, &edges);
  ck_assert_uint_gt(edges, nodes);
}
END_TEST

START_TEST(hazard__large_graph_keeps_every_conflict_ordered) {
  cg_test_reseed(303);
  const uint32_t n = 20000;
  const params_t p = {.nreg = 4, .reg_bytes = 1 << 16, .max_off = (1 << 16) - 2048, .max_count = 16,
                      .max_host_bytes = 256, .fences = 0, .depends = 0};
  gen_t s;
  gen_init(&s, &p, n);
  for (uint32_t tries = 0; s.n < n && tries < 4 * n; tries++) {
    if (s.n == n / 2) {
      cg_node_t out = CG_NODE_NULL;
      ref_node_t x = {.fence = 1, .comm = 0};
      accept_node(&s, cg_barrier(&out, s.g, s.comms[0]), out, &x); /* one fence clears a big tree */
    }
    gen_step(&s); /* each node's hazard edges are checked against the shadow memory as it is recorded */
  }
  ck_assert_uint_eq(s.n, n);
  ck_assert_uint_gt(s.g->hazards.n_segs, 1000);
  check_structure(s.g, n, 1);
  /* sampled soundness */
  uint32_t checked = 0;
  for (uint32_t t = 1; t <= 3000; t++) {
    /* from a random start below a random j, the nearest earlier node that conflicts with j */
    uint32_t j = 1 + (uint32_t)cg_test_below(n - 1), window = t % 4 ? 64 : j;
    uint32_t i = j - 1 - (uint32_t)cg_test_below(j < window ? j : window);
    while (i > 0 && !conflicts(&s.ref[i], &s.ref[j])) i--;
    if (!conflicts(&s.ref[i], &s.ref[j])) continue;
    checked++;
    REQUIRE(reaches_within(s.g, i, j, j), "#%u and #%u conflict but #%u does not reach #%u", i, j, i, j);
  }
  ck_assert_uint_gt(checked, 2000);
  /* sampled comm order: the nearest earlier node that must run first by it */
  checked = 0;
  for (uint32_t t = 1; t <= 1000; t++) {
    uint32_t j = 1 + (uint32_t)cg_test_below(n - 1), i = j;
    if (s.ref[j].comm < 0) continue;
    while (i-- > 0 && !co_before(&s.ref[i], &s.ref[j])) {
    }
    if (i == UINT32_MAX) continue;
    checked++;
    REQUIRE(reaches_within(s.g, i, j, j), "#%u must run before #%u by the comm order but does not reach it", i, j);
  }
  ck_assert_uint_gt(checked, 500);
  check_comm_sequences(&s);
  ck_assert_uint_gt(s.n_co, n / 2);
  gen_free(&s);
}
END_TEST

void hazard_add_random_tcase(Suite *s) {
  TCase *rnd = tcase_create("random");
  tcase_set_timeout(rnd, 120);
  tcase_add_test(rnd, hazard__random_graphs_match_brute_force_reference);
  tcase_add_test(rnd, hazard__random_dense_graphs_match_brute_force_reference);
  tcase_add_test(rnd, hazard__large_graph_keeps_every_conflict_ordered);
  suite_add_tcase(s, rnd);
}
