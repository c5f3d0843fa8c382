/* The program machinery of the cg_plan_rebind suite (rebind_programs.h says
 * what a program is): kept out of test_mpi_rebind.c so that the tests there
 * read as what they check, and the layouts, fills and reference comparison
 * they all lean on are written once. */
#include "rebind_programs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rebind_support.h"

static size_t es_of(const pnode_t *p) { return cg_dtype_size(p->dtype); }

/* Bytes of regions 0 and 1 on this rank. */
static void region_bytes(const pnode_t *p, size_t r[2]) {
  int me = cg_mpi_rank(), n = cg_mpi_size(), root = me == p->root;
  size_t c = p->count, all = c * (size_t)n;
  switch (p->kind) {
    case CG_NODE_ALLREDUCE: r[0] = c, r[1] = p->inplace ? 0 : c; break;
    case CG_NODE_BROADCAST: r[0] = p->inplace || root ? c : 0, r[1] = p->inplace ? 0 : c; break;
    case CG_NODE_REDUCE: r[0] = c, r[1] = root ? c : 0; break;
    case CG_NODE_ALLGATHER: r[0] = p->inplace ? all : c, r[1] = p->inplace ? 0 : all; break;
    case CG_NODE_REDUCE_SCATTER: r[0] = all, r[1] = c; break;
    case CG_NODE_ALLTOALL: r[0] = all, r[1] = all; break;
    default: r[0] = c, r[1] = c; break; /* ring */
  }
  r[0] *= es_of(p);
  r[1] *= es_of(p);
}

/* The node's send and recv pointers in `pool` under offsets `off`. */
static void pointers(const pnode_t *p, const size_t off[2], char *pool, const void **send, void **recv) {
  char *r0 = off[0] == NO_OFF ? NULL : pool + off[0], *r1 = off[1] == NO_OFF ? NULL : pool + off[1];
  *send = r0;
  *recv = r1;
  if (p->inplace && p->kind == CG_NODE_ALLGATHER) {
    *recv = r0;
    *send = r0 + (size_t)cg_mpi_rank() * p->count * es_of(p);
  } else if (p->inplace) {
    *recv = r0;
  }
}

void prog_record(cg_graph_t *g, pprog_t *pg, int ref) {
  int me = cg_mpi_rank(), n = cg_mpi_size();
  for (int i = 0; i < pg->n; i++) {
    const pnode_t *p = &pg->nodes[i];
    const void *send;
    void *recv;
    pointers(p, pg->off[i], pg->pool[ref], &send, &recv);
    cg_comm_t *c = pg->comms[p->comm];
    cg_node_t scratch[2], *h = ref ? scratch : pg->h[i];
    if (p->kind == CG_NODE_SEND) {
      ck_assert_cg_ok(cg_send(&h[0], g, c, send, p->count, p->dtype, (me + p->root) % n));
      ck_assert_cg_ok(cg_recv(&h[1], g, c, recv, p->count, p->dtype, (me + n - p->root) % n));
    } else {
      cg_test_call_t call = {p->kind, c, send, recv, p->count, p->dtype, p->op, p->root};
      cg_status_t st = cg_test_record(&h[0], g, &call);
      ck_assert_msg(st == CG_SUCCESS, "recording node %d (%s): %s", i, cg_node_kind_name(p->kind), cg_error_last());
    }
  }
}

size_t prog_binds(cg_rebind_t *out, const pprog_t *pg, int i, const size_t off[2]) {
  const void *send;
  void *recv;
  pointers(&pg->nodes[i], off, pg->pool[0], &send, &recv);
  if (pg->nodes[i].kind == CG_NODE_SEND) {
    out[0] = (cg_rebind_t){pg->h[i][0], send, NULL};
    out[1] = (cg_rebind_t){pg->h[i][1], NULL, recv};
    return 2;
  }
  out[0] = (cg_rebind_t){pg->h[i][0], send, recv};
  return 1;
}

static uint64_t local_next(pprog_t *pg) {
  uint64_t x = pg->local;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  pg->local = x;
  return x * 0x2545F4914F6CDD1Dull;
}

size_t prog_align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t prog_layout_packed(pprog_t *pg, size_t base, size_t offs[P_MAX][2]) {
  size_t at = base;
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < pg->n; i++) {
      size_t bytes[2];
      region_bytes(&pg->nodes[i], bytes);
      if (!bytes[r]) {
        offs[i][r] = NO_OFF;
        continue;
      }
      at = prog_align_up(at, es_of(&pg->nodes[i]));
      offs[i][r] = at;
      at += bytes[r];
    }
  ck_assert_uint_le(at, base + pg->half);
  return at;
}

void prog_take(prog_taken_t *t, const pprog_t *pg, size_t offs[P_MAX][2], const int *mask) {
  for (int i = 0; i < pg->n; i++) {
    if (mask && !mask[i]) continue;
    size_t bytes[2];
    region_bytes(&pg->nodes[i], bytes);
    for (int r = 0; r < 2; r++)
      if (offs[i][r] != NO_OFF) {
        ck_assert_int_lt(t->n, 4 * P_MAX);
        t->lo[t->n] = offs[i][r];
        t->hi[t->n++] = offs[i][r] + bytes[r];
      }
  }
}

/* A place for `bytes` in [lo, hi) at least 64 bytes from every taken
 * interval, aligned to 16: random tries, then the first gap that fits. */
static size_t place(pprog_t *pg, prog_taken_t *t, size_t lo, size_t hi, size_t bytes) {
  const size_t gap = 64;
  ck_assert_uint_gt(hi - lo, bytes + 4 * gap);
  for (int attempt = 0; attempt < 400; attempt++) {
    size_t at = lo + prog_align_up((size_t)(local_next(pg) % (hi - lo - bytes - gap)), 16);
    int free_here = at + bytes + gap <= hi;
    for (int k = 0; k < t->n && free_here; k++) free_here = at + bytes + gap <= t->lo[k] || t->hi[k] + gap <= at;
    if (free_here) return at;
  }
  for (size_t at = prog_align_up(lo + gap, 16); at + bytes + gap <= hi; at += 16) {
    int free_here = 1;
    for (int k = 0; k < t->n && free_here; k++) free_here = at + bytes + gap <= t->lo[k] || t->hi[k] + gap <= at;
    if (free_here) return at;
  }
  ck_abort_msg("rank %d: no room for %zu bytes in [%zu, %zu)", cg_mpi_rank(), bytes, lo, hi);
  return 0;
}

void prog_layout_scattered(pprog_t *pg, prog_taken_t *t, size_t lo, size_t hi, const int *move,
                           size_t offs[P_MAX][2]) {
  for (int i = 0; i < pg->n; i++) {
    if (!move[i]) continue;
    size_t bytes[2];
    region_bytes(&pg->nodes[i], bytes);
    for (int r = 0; r < 2; r++) {
      if (!bytes[r]) {
        offs[i][r] = NO_OFF;
        continue;
      }
      offs[i][r] = place(pg, t, lo, hi, bytes[r]);
      ck_assert_int_lt(t->n, 4 * P_MAX);
      t->lo[t->n] = offs[i][r];
      t->hi[t->n++] = offs[i][r] + bytes[r];
    }
  }
}

void prog_alloc(pprog_t *pg) {
  size_t total = 0, largest = 0;
  for (int i = 0; i < pg->n; i++) {
    size_t bytes[2];
    region_bytes(&pg->nodes[i], bytes);
    total += bytes[0] + bytes[1] + 16;
    for (int r = 0; r < 2; r++) largest = bytes[r] > largest ? bytes[r] : largest;
  }
  /* every rank the same size (sizes differ by rank): the largest */
  unsigned long long mine[2] = {total, largest}, most[2] = {0, 0};
  MPI_Allreduce(mine, most, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  pg->half = prog_align_up(2 * (size_t)most[0] + (4 * P_MAX + 1) * ((size_t)most[1] + 256) + 4096, 256);
  for (int k = 0; k < 2; k++) pg->pool[k] = rb_xmalloc(2 * pg->half);
  pg->local = (cg_test_seed() ^ ((uint64_t)cg_mpi_rank() + 1) * 0x9E3779B97F4A7C15ull) | 1;
}

void prog_free(pprog_t *pg) {
  free(pg->pool[0]);
  free(pg->pool[1]);
}

/* Fresh values in every region 0 (per rank, per round), the poison pattern
 * in every region 1 and a round-dependent byte elsewhere; both pools alike. */
static void prog_fill(pprog_t *pg, uint64_t round) {
  int n = cg_mpi_size();
  memset(pg->pool[0], (int)(0x11 + round % 100), 2 * pg->half);
  for (int i = 0; i < pg->n; i++) {
    const pnode_t *p = &pg->nodes[i];
    size_t bytes[2];
    region_bytes(p, bytes);
    if (bytes[0])
      cg_mpi_test_fill(pg->pool[0] + pg->off[i][0], bytes[0] / es_of(p), p->dtype, p->op, n,
                       cg_test_seed() ^ round * 0x9E3779B97F4A7C15ull, (uint64_t)cg_mpi_rank() * 1000 + (uint64_t)i);
    if (bytes[1]) memset(pg->pool[0] + pg->off[i][1], CG_MPI_POISON, bytes[1]);
  }
  memcpy(pg->pool[1], pg->pool[0], 2 * pg->half);
}

/* Runs the reference over the current binding and compares the pools: 1 on
 * every rank if they match everywhere (else the first difference is printed). */
static int prog_matches_reference(pprog_t *pg, const char *what) {
  cg_graph_t *ref;
  ck_assert_cg_ok(cg_graph_create(&ref, NULL));
  prog_record(ref, pg, 1);
  ck_assert_cg_ok(cg_reference_run(ref));
  cg_graph_destroy(ref);
  size_t bytes = 2 * pg->half, at = 0;
  int ok = memcmp(pg->pool[0], pg->pool[1], bytes) == 0;
  if (!ok) {
    while (pg->pool[0][at] == pg->pool[1][at]) at++;
    int node = -1, region = -1;
    for (int i = 0; i < pg->n; i++) {
      size_t rb[2];
      region_bytes(&pg->nodes[i], rb);
      for (int r = 0; r < 2; r++)
        if (pg->off[i][r] != NO_OFF && at >= pg->off[i][r] && at < pg->off[i][r] + rb[r]) node = i, region = r;
    }
    fprintf(stderr, "rank %d: %s: pool byte %zu differs from the reference (plan 0x%02x, reference 0x%02x): %s\n",
            cg_mpi_rank(), what, at, (unsigned char)pg->pool[0][at], (unsigned char)pg->pool[1][at],
            node < 0 ? "outside every node's current buffers (an old or foreign buffer was written)" : "");
    if (node >= 0)
      fprintf(stderr, "rank %d:   it lies in region %d of node %d (%s %s count %zu%s)\n", cg_mpi_rank(), region, node,
              cg_node_kind_name(pg->nodes[node].kind), cg_dtype_name(pg->nodes[node].dtype), pg->nodes[node].count,
              pg->nodes[node].inplace ? " in place" : "");
  }
  return cg_mpi_all(ok);
}

void prog_run_and_check(pprog_t *pg, cg_plan_t *plan, uint64_t round, int nonblocking, const char *what) {
  prog_fill(pg, round);
  rb_run_all(plan, nonblocking, what);
  ck_assert_all_ranks(prog_matches_reference(pg, what), what);
}

void prog_add(pprog_t *pg, cg_node_kind_t kind, cg_dtype_t dtype, cg_redop_t op, int root, size_t count,
              int inplace, int comm) {
  ck_assert_int_lt(pg->n, P_MAX);
  pg->nodes[pg->n++] = (pnode_t){kind, dtype, op, root, count, inplace, comm};
}

void prog_random(pprog_t *pg) {
  static const cg_node_kind_t kinds[] = {CG_NODE_ALLREDUCE, CG_NODE_ALLREDUCE, CG_NODE_BROADCAST, CG_NODE_REDUCE,
                                         CG_NODE_ALLGATHER, CG_NODE_REDUCE_SCATTER, CG_NODE_ALLTOALL, CG_NODE_SEND};
  static const cg_dtype_t dtypes[] = {CG_INT32, CG_FLOAT32, CG_FLOAT64, CG_INT8, CG_INT64};
  static const cg_redop_t ops[] = {CG_SUM, CG_MAX, CG_MIN};
  static const size_t counts[] = {1, 2, 3, 7, 31, 64, 129, 1000};
  int n = cg_mpi_size();
  int target = 6 + (int)cg_test_below(9);
  while (pg->n < target) {
    /* a run of one kind, type, reduction and root: fusible neighbours */
    cg_node_kind_t k = kinds[cg_test_below(sizeof kinds / sizeof kinds[0])];
    cg_dtype_t d = dtypes[cg_test_below(sizeof dtypes / sizeof dtypes[0])];
    cg_redop_t op = ops[cg_test_below(3)];
    int root = k == CG_NODE_SEND ? 1 + (int)cg_test_below((uint64_t)(n > 1 ? n - 1 : 1))
                                 : (int)cg_test_below((uint64_t)n);
    int comm = (int)cg_test_below(2), len = 1 + (int)cg_test_below(4);
    for (int j = 0; j < len && pg->n < target; j++) {
      int inplace = (k == CG_NODE_ALLREDUCE || k == CG_NODE_BROADCAST || k == CG_NODE_ALLGATHER) &&
                    cg_test_below(3) == 0;
      prog_add(pg, k, d, op, root, counts[cg_test_below(sizeof counts / sizeof counts[0])], inplace, comm);
    }
  }
}

int prog_reads_everywhere(const pnode_t *p) { return p->kind != CG_NODE_BROADCAST || p->inplace; }

int prog_written_everywhere(const pnode_t *p) {
  if (p->inplace) return 0;
  return p->kind == CG_NODE_REDUCE ? -1 : 1;
}
