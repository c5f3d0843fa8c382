#include "random_program.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "mpi_test.h"
#include "test_support.h"

static double exact_limit(cg_dtype_t d) {
  switch (d) {
    case CG_INT8: return 127;
    case CG_UINT8: return 255;
    case CG_INT32: return 2147483647.0;
    case CG_UINT32: return 4294967295.0;
    case CG_FLOAT16: return 2048;
    case CG_BFLOAT16: return 256;
    case CG_FLOAT32: return 16777216.0;
    default: return 9007199254740992.0; /* int64, uint64 (the reference computes in double), float64 */
  }
}

static int is_float(cg_dtype_t d) {
  return d == CG_FLOAT16 || d == CG_BFLOAT16 || d == CG_FLOAT32 || d == CG_FLOAT64;
}

static int fits(const cg_rp_arena_t *a, double bound, int frac_bits) {
  return bound * ldexp(1.0, frac_bits) <= exact_limit(a->dtype);
}

/* Picks a reduction that keeps arena `a` exact over `ranks` contributions, and
 * updates its bounds. (NCCL's float avg multiplies each input by 1/ranks
 * before summing: exact too, with 1, 2 or 4 ranks.) */
static cg_redop_t pick_op(cg_rp_arena_t *a, int ranks) {
  cg_redop_t op = (cg_redop_t)cg_test_below(CG_REDOP_COUNT);
  int shift = ranks == 4 ? 2 : ranks == 2 ? 1 : 0;
  if (ranks == 1) return op; /* one contribution: every op is a copy (avg divides by 1) */
  if (op == CG_SUM && fits(a, a->bound * ranks, a->frac_bits)) {
    a->bound *= ranks;
    return op;
  }
  /* avg sums first, so the sum must fit too (integers wrap, floats round) */
  if (op == CG_AVG && fits(a, a->bound * ranks, a->frac_bits + (is_float(a->dtype) ? shift : 0))) {
    if (is_float(a->dtype)) a->frac_bits += shift;
    return op;
  }
  /* no products of floating types: 0 times a negative number is -0, and min
   * and max of -0 and +0 depend on the order contributions are combined */
  if (op == CG_PROD && !is_float(a->dtype) && fits(a, pow(a->bound, ranks), a->frac_bits * ranks)) {
    a->bound = pow(a->bound, ranks);
    a->frac_bits *= ranks;
    return op;
  }
  return cg_test_below(2) ? CG_MIN : CG_MAX;
}

static const cg_node_kind_t kinds[] = {CG_NODE_ALLREDUCE, CG_NODE_BROADCAST, CG_NODE_REDUCE,  CG_NODE_ALLGATHER,
                                       CG_NODE_REDUCE_SCATTER, CG_NODE_ALLTOALL, CG_NODE_GATHER, CG_NODE_SCATTER,
                                       CG_NODE_SEND, CG_NODE_BARRIER, CG_NODE_HOST_FUNC};

static size_t pick_count(int scale) {
  static const size_t counts[] = {0, 1, 2, 3, 5, 7, 13, 31, 64, 127, 255, 509};
  size_t c = counts[cg_test_below(sizeof counts / sizeof counts[0])];
  size_t max = CG_RP_HALF / (size_t)scale;
  return c > max ? max : c;
}

void cg_rp_generate(cg_rp_program_t *p, int world, int host_func_adds) {
  p->n_arenas = 1 + (int)cg_test_below(CG_RP_MAX_DTYPES);
  for (int a = 0; a < p->n_arenas; a++) {
    p->arenas[a].dtype = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
    p->arenas[a].bound = 15;
    p->arenas[a].frac_bits = 0;
    p->arenas[a].elems = 2 * CG_RP_HALF;
  }
  p->layout = CG_RP_SCATTERED;
  p->n_pieces = 0;
  p->zero_copy = 0;
  int n = 2 + (int)cg_test_below(CG_RP_MAX_NODES - 1);
  p->n_nodes = 0;
  for (int i = 0; i < n; i++) {
    cg_rp_spec_t s = {0};
    s.kind = kinds[cg_test_below(sizeof kinds / sizeof kinds[0])];
    s.arena = (int)cg_test_below((uint64_t)p->n_arenas);
    s.comm = (int)cg_test_below((uint64_t)p->n_comms);
    int ranks = s.comm == 2 ? world / 2 : world;
    if (ranks < 1) ranks = 1;
    s.root = (int)cg_test_below((uint64_t)ranks);
    s.shift = (int)cg_test_below((uint64_t)ranks);
    s.op = CG_SUM;
    if (cg_test_kind_has_op(s.kind)) s.op = pick_op(&p->arenas[s.arena], ranks);
    int scale = (s.kind == CG_NODE_ALLGATHER || s.kind == CG_NODE_REDUCE_SCATTER || s.kind == CG_NODE_ALLTOALL ||
                 s.kind == CG_NODE_GATHER || s.kind == CG_NODE_SCATTER) ? ranks : 1;
    s.count = pick_count(scale);
    size_t span = s.count * (size_t)scale;
    int inplace = s.kind != CG_NODE_ALLTOALL && s.kind != CG_NODE_SEND && cg_test_below(3) == 0;
    size_t base = cg_test_below(2) * CG_RP_HALF;
    size_t off = base + cg_test_below(CG_RP_HALF - span + 1);
    s.send_off = s.recv_off = off;
    if (!inplace) { /* send and recv in different halves */
      s.recv_off = (CG_RP_HALF - base) + cg_test_below(CG_RP_HALF - span + 1);
    }
    s.send_off |= (size_t)inplace << 62; /* remembered for recording */
    if (s.kind == CG_NODE_HOST_FUNC) { /* on [recv_off, +count) of the arena */
      p->arenas[s.arena].bound += host_func_adds;
      s.count = 1 + cg_test_below(64);
      s.recv_off = cg_test_below(2 * CG_RP_HALF - s.count);
      s.root = cg_test_below(6) == 0; /* 1: a fence (no declared access) */
    }
    s.depend_on = i > 0 && cg_test_below(4) == 0 ? (int)cg_test_below((uint64_t)i) : -1;
    p->nodes[p->n_nodes++] = s;
  }
}

void cg_rp_buffers(const cg_rp_spec_t *s, int rank, size_t *send, size_t *recv) {
  size_t off = s->send_off & ~((size_t)1 << 62);
  int inplace = (int)(s->send_off >> 62);
  *send = off;
  *recv = s->recv_off;
  if (!inplace) return;
  switch (s->kind) {
    case CG_NODE_ALLGATHER: *send = off + (size_t)rank * s->count; *recv = off; break;
    case CG_NODE_REDUCE_SCATTER: *send = off; *recv = off + (size_t)rank * s->count; break;
    case CG_NODE_GATHER: *recv = off; *send = off + (size_t)s->root * s->count; break;
    case CG_NODE_SCATTER: *send = off; *recv = off + (size_t)s->root * s->count; break;
    default: *send = *recv = off; break;
  }
}

void cg_rp_dump(const cg_rp_program_t *p) {
  if (p->n_pieces) { /* cg_rp_generate_fusible's */
    fprintf(stderr, "  layout %s, zero copy expected: %s;", cg_rp_layout_name(p->layout), p->zero_copy ? "yes" : "no");
    for (int a = 0; a < p->n_arenas; a++)
      fprintf(stderr, " arena %d: %zu x %s", a, p->arenas[a].elems, cg_dtype_name(p->arenas[a].dtype));
    fprintf(stderr, "\n");
  }
  for (int i = 0; i < p->n_nodes; i++) {
    const cg_rp_spec_t *s = &p->nodes[i];
    fprintf(stderr, "  node %d: %s comm %d arena %d (%s) count %zu op %s root %d shift %d send %zx recv %zu dep %d\n", i,
            cg_node_kind_name(s->kind), s->comm, s->arena, cg_dtype_name(p->arenas[s->arena].dtype), s->count,
            cg_redop_name(s->op), s->root, s->shift, s->send_off, s->recv_off, s->depend_on);
  }
}

/* ---- programs for the fusion suites
 *
 * Generated in two passes: nodes ask for regions (buffers) as they are drawn,
 * then the regions get their offsets for the layout. A region remembers a
 * bound on what it may hold, so a node reading an earlier node's output
 * picks a reduction that stays exact for it. */

#define MAX_REGIONS (CG_RP_MAX_SPECS * 2)

typedef struct region {
  int arena, stream; /* stream (contiguous layouts): communicator * 2 + (receive buffer) */
  size_t elems, off;
  double bound;
  int frac_bits;
} region_t;

typedef struct gen {
  cg_rp_program_t *p;
  int world, host_func_adds, allreduce_only;
  cg_rp_layout_t layout;
  size_t max_bytes;
  region_t regions[MAX_REGIONS];
  int n_regions;
  int send_region[CG_RP_MAX_SPECS], recv_region[CG_RP_MAX_SPECS];
  size_t host_rel[CG_RP_MAX_SPECS]; /* host function: offset of its range in its region */
} gen_t;

typedef struct run {
  int active, left, arena, comm, root, has_op;
  cg_node_kind_t kind;
  cg_redop_t op;
} run_t;

static int fusible_kind(cg_node_kind_t k) { /* as the header of commgraph/plan.h lists them */
  return k == CG_NODE_ALLREDUCE || k == CG_NODE_REDUCE || k == CG_NODE_BROADCAST || k == CG_NODE_ALLGATHER ||
         k == CG_NODE_REDUCE_SCATTER;
}

static int comm_ranks(int world, int comm) {
  int ranks = comm == 2 ? world / 2 : world;
  return ranks < 1 ? 1 : ranks;
}

static size_t send_span(cg_node_kind_t k, size_t count, int ranks) {
  return k == CG_NODE_REDUCE_SCATTER || k == CG_NODE_ALLTOALL ? count * (size_t)ranks : count;
}

static size_t recv_span(cg_node_kind_t k, size_t count, int ranks) {
  return k == CG_NODE_ALLGATHER || k == CG_NODE_ALLTOALL ? count * (size_t)ranks : count;
}

/* Whether `op` over `ranks` inputs bounded by (bound, frac) stays exact in
 * `dtype`; if so, the result's bound. Same rules as pick_op. */
static int op_fits(cg_dtype_t dtype, cg_redop_t op, int ranks, double *bound, int *frac) {
  cg_rp_arena_t a = {.dtype = dtype};
  int shift = ranks == 4 ? 2 : ranks == 2 ? 1 : 0;
  if (ranks == 1 || op == CG_MIN || op == CG_MAX) return 1;
  if (op == CG_SUM && fits(&a, *bound * ranks, *frac)) {
    *bound *= ranks;
    return 1;
  }
  if (op == CG_AVG && fits(&a, *bound * ranks, *frac + (is_float(dtype) ? shift : 0))) {
    if (is_float(dtype)) *frac += shift;
    return 1;
  }
  if (op == CG_PROD && !is_float(dtype) && fits(&a, pow(*bound, ranks), *frac * ranks)) {
    *bound = pow(*bound, ranks);
    *frac *= ranks;
    return 1;
  }
  return 0;
}

static int new_region(gen_t *g, int arena, int stream, size_t elems) {
  g->regions[g->n_regions] = (region_t){arena, stream, elems, 0, 15, 0};
  return g->n_regions++;
}

/* Scattered layout only: now and then an earlier region of the arena with
 * room for `elems` (not `avoid`), so the node depends on earlier ones. */
static int reuse_region(gen_t *g, int arena, size_t elems, int avoid, int one_in) {
  if (g->layout != CG_RP_SCATTERED || cg_test_below((uint64_t)one_in)) return -1;
  int fits_at[MAX_REGIONS], n = 0;
  for (int r = 0; r < g->n_regions; r++)
    if (g->regions[r].arena == arena && g->regions[r].elems >= elems && r != avoid) fits_at[n++] = r;
  return n ? fits_at[cg_test_below((uint64_t)n)] : -1;
}

static size_t fusible_count(size_t max_elems) {
  static const size_t small[] = {1, 2, 3, 5, 7, 13, 31, 61, 127, 251};
  static const size_t large[] = {509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 102397};
  uint64_t r = cg_test_below(100);
  size_t c = r < 8    ? 0
             : r < 65 ? small[cg_test_below(10)]
             : r < 77 ? (size_t)64 << cg_test_below(6)
                      : large[cg_test_below(9)];
  return c > max_elems ? max_elems : c;
}

/* Appends node i's spec; send/recv offsets are region numbers until placed. */
static void add_node(gen_t *g, cg_rp_spec_t s, int send_region, int recv_region, int inplace) {
  int i = g->p->n_nodes++;
  s.send_off = (size_t)inplace << 62;
  s.depend_on = i > 0 && cg_test_below(10) == 0 ? (int)cg_test_below((uint64_t)i) : -1;
  g->p->nodes[i] = s;
  g->send_region[i] = send_region;
  g->recv_region[i] = recv_region;
}

/* The next member of `run`; ends the run when its reduction would not stay
 * exact on this member's input (the member then uses min or max). */
static void run_member(gen_t *g, run_t *run) {
  cg_dtype_t dt = g->p->arenas[run->arena].dtype;
  int ranks = comm_ranks(g->world, run->comm);
  size_t scale = run->kind == CG_NODE_ALLGATHER || run->kind == CG_NODE_REDUCE_SCATTER ? (size_t)ranks : 1;
  size_t count = fusible_count(g->max_bytes / (cg_dtype_size(dt) * scale));
  size_t ss = send_span(run->kind, count, ranks), rs = recv_span(run->kind, count, ranks);
  int inplace = g->layout == CG_RP_IN_PLACE || (g->layout == CG_RP_SCATTERED && cg_test_below(3) == 0);
  int sr, rr;
  if (inplace) {
    size_t span = ss > rs ? ss : rs;
    sr = reuse_region(g, run->arena, span, -1, 5);
    if (sr < 0) sr = new_region(g, run->arena, run->comm * 2, span);
    rr = sr;
  } else {
    sr = reuse_region(g, run->arena, ss, -1, 4);
    if (sr < 0) sr = new_region(g, run->arena, run->comm * 2, ss);
    rr = reuse_region(g, run->arena, rs, sr, 8);
    if (rr < 0) rr = new_region(g, run->arena, run->comm * 2 + 1, rs);
  }
  double bound = g->regions[sr].bound;
  int frac = g->regions[sr].frac_bits;
  cg_redop_t op = run->op;
  if (run->has_op && !op_fits(dt, op, ranks, &bound, &frac)) {
    op = cg_test_below(2) ? CG_MIN : CG_MAX;
    run->left = 0;
  }
  region_t *out = &g->regions[rr];
  if (bound > out->bound) out->bound = bound;
  if (frac > out->frac_bits) out->frac_bits = frac;
  cg_rp_spec_t s = {.kind = run->kind, .arena = run->arena, .comm = run->comm, .root = run->root, .op = op, .count = count};
  add_node(g, s, sr, rr, inplace);
  if (--run->left <= 0) run->active = 0;
}

static void start_run(gen_t *g, run_t *run, const run_t *other) {
  static const cg_node_kind_t fusible[] = {CG_NODE_ALLREDUCE, CG_NODE_ALLREDUCE, CG_NODE_REDUCE,
                                           CG_NODE_BROADCAST, CG_NODE_ALLGATHER, CG_NODE_REDUCE_SCATTER};
  *run = (run_t){.active = 1, .left = 1 + (int)cg_test_below(8)};
  run->kind = fusible[cg_test_below(sizeof fusible / sizeof fusible[0])];
  if (g->allreduce_only) run->kind = CG_NODE_ALLREDUCE;
  run->arena = (int)cg_test_below((uint64_t)g->p->n_arenas);
  run->comm = (int)cg_test_below((uint64_t)g->p->n_comms);
  if (other->active && other->comm == run->comm && cg_test_below(8)) /* mostly on another communicator */
    run->comm = (run->comm + 1 + (int)cg_test_below((uint64_t)g->p->n_comms - 1)) % g->p->n_comms;
  int ranks = comm_ranks(g->world, run->comm);
  run->root = cg_test_kind_is_rooted(run->kind) ? (int)cg_test_below((uint64_t)ranks) : 0;
  run->has_op = cg_test_kind_has_op(run->kind);
  run->op = CG_SUM;
  if (run->has_op) { /* drawn for fresh data; a member reading more than that may end the run */
    double bound = 15;
    int frac = 0;
    run->op = (cg_redop_t)cg_test_below(CG_REDOP_COUNT);
    if (!op_fits(g->p->arenas[run->arena].dtype, run->op, ranks, &bound, &frac))
      run->op = cg_test_below(2) ? CG_MIN : CG_MAX;
  }
}

/* Something that is not fused: an alltoall, a ring exchange, a barrier or a
 * host function on part of an earlier buffer (a fence now and then). */
static void breaker(gen_t *g) {
  uint64_t what = cg_test_below(10);
  cg_rp_spec_t s = {.kind = CG_NODE_BARRIER, .op = CG_SUM};
  s.arena = (int)cg_test_below((uint64_t)g->p->n_arenas);
  s.comm = (int)cg_test_below((uint64_t)g->p->n_comms);
  int ranks = comm_ranks(g->world, s.comm);
  if (what >= 7) {
    int candidates[MAX_REGIONS], n = 0;
    for (int r = 0; r < g->n_regions; r++)
      if (g->regions[r].arena == s.arena && g->regions[r].elems) candidates[n++] = r;
    if (n) {
      int r = candidates[cg_test_below((uint64_t)n)];
      size_t rel = cg_test_below(g->regions[r].elems);
      size_t room = g->regions[r].elems - rel;
      s.kind = CG_NODE_HOST_FUNC;
      s.count = 1 + cg_test_below(room < 64 ? room : 64);
      s.root = cg_test_below(6) == 0; /* 1: a fence */
      g->regions[r].bound += g->host_func_adds;
      g->host_rel[g->p->n_nodes] = rel;
      add_node(g, s, -1, r, 0);
      return;
    }
  }
  if (what >= 7 || what == 6) {
    add_node(g, s, -1, -1, 0);
    return;
  }
  s.kind = what < 3 ? CG_NODE_ALLTOALL : CG_NODE_SEND;
  s.shift = (int)cg_test_below((uint64_t)ranks);
  s.count = 1 + cg_test_below(127);
  size_t span = s.kind == CG_NODE_ALLTOALL ? s.count * (size_t)ranks : s.count;
  int sr = reuse_region(g, s.arena, span, -1, 4);
  if (sr < 0) sr = new_region(g, s.arena, s.comm * 2, span);
  int rr = new_region(g, s.arena, s.comm * 2 + 1, span);
  if (g->regions[sr].bound > g->regions[rr].bound) g->regions[rr].bound = g->regions[sr].bound;
  if (g->regions[sr].frac_bits > g->regions[rr].frac_bits) g->regions[rr].frac_bits = g->regions[sr].frac_bits;
  add_node(g, s, sr, rr, 0);
}

/* Offsets for the layout: scattered regions in shuffled order with gaps,
 * the others back to back by stream, each stream in record order. */
static void place_regions(gen_t *g) {
  cg_rp_program_t *p = g->p;
  p->n_pieces = 0;
  for (int a = 0; a < p->n_arenas; a++) {
    int order[MAX_REGIONS], n = 0;
    if (g->layout == CG_RP_SCATTERED) {
      for (int r = 0; r < g->n_regions; r++)
        if (g->regions[r].arena == a) order[n++] = r;
    } else {
      for (int stream = 0; stream < 2 * p->n_comms; stream++)
        for (int r = 0; r < g->n_regions; r++)
          if (g->regions[r].arena == a && g->regions[r].stream == stream) order[n++] = r;
    }
    if (g->layout == CG_RP_SCATTERED)
      for (int k = n - 1; k > 0; k--) {
        int j = (int)cg_test_below((uint64_t)k + 1), t = order[k];
        order[k] = order[j];
        order[j] = t;
      }
    size_t at = 0;
    for (int k = 0; k < n; k++) {
      region_t *r = &g->regions[order[k]];
      if (g->layout == CG_RP_SCATTERED) at += 1 + cg_test_below(16);
      r->off = at;
      at += r->elems;
      p->pieces[p->n_pieces++] = (cg_rp_piece_t){a, r->off, r->elems};
    }
    if (g->layout == CG_RP_SCATTERED) at += 1 + cg_test_below(16);
    p->arenas[a].elems = at ? at : 1;
  }
}

/* 1 if every pair of consecutive non-empty nodes that could share a bucket
 * (same communicator, kind, data type, reduction and root, nothing else on the
 * communicator between them) has its buffers back to back in one arena, for
 * kinds whose fused buffers are laid out member after member. */
static int zero_copy(const gen_t *g) {
  const cg_rp_program_t *p = g->p;
  for (int c = 0; c < p->n_comms; c++) {
    int prev = -1, last = -1; /* previous node on c; last non-empty one of its chain */
    for (int i = 0; i < p->n_nodes; i++) {
      const cg_rp_spec_t *s = &p->nodes[i];
      if (s->kind == CG_NODE_HOST_FUNC || s->comm != c) continue;
      const cg_rp_spec_t *q = prev >= 0 ? &p->nodes[prev] : NULL;
      int chained = q && fusible_kind(s->kind) && q->kind == s->kind &&
                    p->arenas[q->arena].dtype == p->arenas[s->arena].dtype &&
                    (!cg_test_kind_has_op(s->kind) || q->op == s->op) &&
                    (!cg_test_kind_is_rooted(s->kind) || q->root == s->root);
      if (!chained) last = -1;
      if (chained && last >= 0 && s->count) {
        const cg_rp_spec_t *l = &p->nodes[last];
        int ranks = comm_ranks(g->world, c);
        if ((s->kind == CG_NODE_ALLGATHER || s->kind == CG_NODE_REDUCE_SCATTER) && ranks > 1) return 0;
        size_t ls, lr, ns, nr;
        cg_rp_buffers(l, 0, &ls, &lr);
        cg_rp_buffers(s, 0, &ns, &nr);
        if (l->arena != s->arena || ns != ls + l->count || nr != lr + l->count) return 0;
      }
      if (s->count) last = i;
      prev = i;
    }
  }
  return 1;
}

void cg_rp_generate_fusible(cg_rp_program_t *p, int world, const cg_rp_fusion_opts_t *opts) {
  static gen_t g; /* large; the suites are single-threaded */
  memset(&g, 0, sizeof g);
  g.p = p;
  g.world = world;
  g.host_func_adds = opts->host_func_adds;
  g.layout = opts->layout;
  g.max_bytes = opts->max_bytes;
  g.allreduce_only = opts->allreduce_only;
  p->layout = opts->layout;
  p->n_arenas = 1 + (int)cg_test_below(CG_RP_MAX_DTYPES);
  for (int a = 0; a < p->n_arenas; a++) {
    /* two arenas of one type now and then: runs across them fuse but are not contiguous */
    p->arenas[a].dtype = a > 0 && cg_test_below(4) == 0 ? p->arenas[a - 1].dtype
                                                        : (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
    p->arenas[a].bound = 15;
    p->arenas[a].frac_bits = 0;
  }
  int n = 6 + (int)cg_test_below(CG_RP_MAX_SPECS - 6 + 1);
  run_t runs[2] = {{0}, {0}};
  p->n_nodes = 0;
  while (p->n_nodes < n) {
    if (cg_test_below(100) < 10) {
      breaker(&g);
      continue;
    }
    int k = (int)cg_test_below(2);
    if (!runs[k].active && runs[1 - k].active && cg_test_below(3)) k = 1 - k; /* mostly continue a run */
    if (!runs[k].active) start_run(&g, &runs[k], &runs[1 - k]);
    run_member(&g, &runs[k]);
  }
  place_regions(&g);
  for (int i = 0; i < p->n_nodes; i++) {
    cg_rp_spec_t *s = &p->nodes[i];
    int inplace = (int)(s->send_off >> 62);
    if (s->kind == CG_NODE_HOST_FUNC) {
      s->recv_off = g.regions[g.recv_region[i]].off + g.host_rel[i];
    } else if (g.send_region[i] >= 0) {
      s->send_off = g.regions[g.send_region[i]].off | ((size_t)inplace << 62);
      s->recv_off = g.regions[g.recv_region[i]].off;
    }
  }
  p->zero_copy = g.layout != CG_RP_SCATTERED && zero_copy(&g);
}

const char *cg_rp_layout_name(cg_rp_layout_t layout) {
  switch (layout) {
    case CG_RP_SCATTERED: return "scattered";
    case CG_RP_CONTIGUOUS: return "contiguous";
    case CG_RP_IN_PLACE: return "in place";
    default: return "?";
  }
}

void cg_rp_fill(const cg_rp_program_t *p, int a, char *image, const int *comm_rank, const int *comm_size,
                uint64_t seed, uint64_t salt) {
  const cg_rp_arena_t *ar = &p->arenas[a];
  size_t es = cg_dtype_size(ar->dtype);
  cg_mpi_test_fill(image, ar->elems, ar->dtype, CG_SUM, 1, seed, salt);
  unsigned char *seen = calloc(ar->elems, 1);
  if (!seen) abort();
  for (int i = 0; i < p->n_nodes; i++) {
    const cg_rp_spec_t *s = &p->nodes[i];
    if (s->arena != a || s->kind == CG_NODE_BARRIER) continue;
    if (s->kind == CG_NODE_HOST_FUNC) { /* reads its range */
      for (size_t e = 0; e < s->count; e++) seen[s->recv_off + e] = 1;
      continue;
    }
    int r = comm_rank[s->comm], size = comm_size[s->comm];
    size_t send, recv;
    cg_rp_buffers(s, r, &send, &recv);
    size_t reads = cg_test_send_elems(s->kind, s->count, size, r, s->root);
    size_t writes = s->kind == CG_NODE_SEND ? s->count : cg_test_recv_elems(s->kind, s->count, size, r, s->root);
    for (size_t e = 0; e < reads; e++) seen[send + e] = 1;
    for (size_t e = 0; e < writes; e++) {
      if (!seen[recv + e]) memset(image + (recv + e) * es, CG_MPI_POISON, es);
      seen[recv + e] = 1;
    }
  }
  free(seen);
}

cg_status_t cg_rp_record(cg_graph_t *g, const cg_rp_program_t *p, char *const *mem, cg_comm_t *const *comms,
                         cg_rp_host_fn host, void *ctx, cg_node_t *handles, int *bad_node) {
  for (int i = 0; i < p->n_nodes; i++) {
    const cg_rp_spec_t *s = &p->nodes[i];
    cg_dtype_t dt = p->arenas[s->arena].dtype;
    char *m = mem[s->arena];
    size_t es = cg_dtype_size(dt), send, recv;
    cg_status_t st = CG_SUCCESS;
    if (s->kind == CG_NODE_HOST_FUNC) {
      st = host(&handles[i], g, i, s, m, ctx);
    } else {
      cg_comm_t *c = comms[s->comm];
      int rank = 0, size = 1;
      cg_comm_rank(&rank, c);
      cg_comm_size(&size, c);
      cg_rp_buffers(s, rank, &send, &recv);
      if (s->kind == CG_NODE_SEND) { /* a shifted ring, send or receive first */
        int to = (rank + s->shift) % size, from = (rank - s->shift + size) % size;
        int recv_first = (int)(s->recv_off & 1);
        for (int k = 0; k < 2 && st == CG_SUCCESS; k++)
          st = (k == 0) == !recv_first ? cg_send(&handles[i], g, c, m + send * es, s->count, dt, to)
                                       : cg_recv(&handles[i], g, c, m + recv * es, s->count, dt, from);
      } else {
        cg_test_call_t call = {s->kind, c, m + send * es, m + recv * es, s->count, dt, s->op, s->root};
        st = cg_test_record(&handles[i], g, &call);
      }
    }
    if (st == CG_SUCCESS && s->depend_on >= 0) st = cg_depend(g, handles[s->depend_on], handles[i]);
    if (st != CG_SUCCESS) {
      if (bad_node) *bad_node = i;
      return st;
    }
  }
  return CG_SUCCESS;
}
