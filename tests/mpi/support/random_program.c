#include "random_program.h"

#include <math.h>
#include <stdio.h>

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
  }
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
  for (int i = 0; i < p->n_nodes; i++) {
    const cg_rp_spec_t *s = &p->nodes[i];
    fprintf(stderr, "  node %d: %s comm %d arena %d (%s) count %zu op %s root %d shift %d send %zx recv %zu dep %d\n", i,
            cg_node_kind_name(s->kind), s->comm, s->arena, cg_dtype_name(p->arenas[s->arena].dtype), s->count,
            cg_redop_name(s->op), s->root, s->shift, s->send_off, s->recv_off, s->depend_on);
  }
}
