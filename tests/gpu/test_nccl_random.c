/* Differential test on the GPU: random DAGs (mixed kinds, data types,
 * communicators, overlapping buffers, in-place forms, host functions, explicit
 * edges) compiled for NCCL and run on device buffers must leave memory
 * byte-identical to the reference executor run on host copies. The program is
 * the one of tests/mpi/test_mpi_random.c, recorded twice: on device buffers
 * with NCCL communicators (the plan) and on host mirrors with MPI
 * communicators over the same ranks (the reference). Every rank builds the
 * same program from the shared seed; data is fresh each run and differs per
 * rank.
 *
 * Sends and receives: ring exchanges with random shifts, recorded send-first
 * or receive-first, several between two collectives of a communicator, some
 * sending what an earlier one received. NCCL plans issue them in groups by
 * level, and the ranks agree on the levels at compile time (sched/p2p_levels.c)
 * so that a send and its receive land in groups of the same level; a mistake
 * there shows as a hang, which the time limit turns into a failure.
 *
 * Host functions become CUDA host nodes, which may only touch host memory:
 * here they append their node number to a log in host memory. Each declares
 * the log as written (so all host functions run in record order) and a range
 * of a device arena as read and written, which only orders it against the
 * collectives that touch that range. The log must match the reference's.
 *
 * Values stay exact: each arena tracks a bound on magnitudes and on fractional
 * bits (avg over 2 or 4 ranks halves or quarters), and an operation that could
 * leave the type's exact range is replaced by min or max, so no result depends
 * on the order in which NCCL combines contributions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

#define N_DAGS 150
#define MAX_NODES 14
#define HALF 2048 /* elements in each half of an arena */
#define MAX_DTYPES 3

typedef struct arena {
  cg_dtype_t dtype;
  double bound;  /* largest magnitude any element may hold */
  int frac_bits; /* fractional bits any element may need */
  char *dev_mem; /* the plan's buffers */
  char *ref_mem; /* the reference's host mirror */
  char *image;   /* host staging for dev_mem: the initial contents, then the plan's result */
} arena_t;

typedef struct spec {
  cg_node_kind_t kind;
  int arena, comm, root, shift;
  cg_redop_t op;
  size_t count;
  size_t send_off, recv_off; /* element offsets in the arena */
  int depend_on;             /* -1 or an earlier node: explicit edge */
} spec_t;

typedef struct host_log {
  int ids[MAX_NODES];
  int n;
} host_log_t;

typedef struct host_arg {
  host_log_t *log;
  int id;
} host_arg_t;

typedef struct program {
  arena_t arenas[MAX_DTYPES];
  int n_arenas;
  spec_t nodes[MAX_NODES * 2];
  int n_nodes;
  cg_comm_t *comms[3];     /* NCCL: world, world again, half of the ranks */
  cg_comm_t *ref_comms[3]; /* MPI over the same ranks */
  int n_comms;
} program_t;

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

static int fits(const arena_t *a, double bound, int frac_bits) {
  return bound * ldexp(1.0, frac_bits) <= exact_limit(a->dtype);
}

/* Picks a reduction that keeps arena `a` exact over `ranks` contributions, and
 * updates its bounds. (NCCL's float avg multiplies each input by 1/ranks
 * before summing: exact too, with 1, 2 or 4 ranks.) */
static cg_redop_t pick_op(arena_t *a, int ranks) {
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
  size_t max = HALF / (size_t)scale;
  return c > max ? max : c;
}

/* Builds the program shared by all ranks: same draws everywhere. */
static void generate(program_t *p, int world) {
  p->n_arenas = 1 + (int)cg_test_below(MAX_DTYPES);
  for (int a = 0; a < p->n_arenas; a++) {
    p->arenas[a].dtype = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
    p->arenas[a].bound = 15;
    p->arenas[a].frac_bits = 0;
  }
  int n = 2 + (int)cg_test_below(MAX_NODES - 1);
  p->n_nodes = 0;
  for (int i = 0; i < n; i++) {
    spec_t s = {0};
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
    size_t base = cg_test_below(2) * HALF;
    size_t off = base + cg_test_below(HALF - span + 1);
    s.send_off = s.recv_off = off;
    if (!inplace) { /* send and recv in different halves */
      s.recv_off = (HALF - base) + cg_test_below(HALF - span + 1);
    }
    s.send_off |= (size_t)inplace << 62; /* remembered for recording */
    if (s.kind == CG_NODE_HOST_FUNC) { /* declares [recv_off, +count) of the arena; changes no data */
      s.count = 1 + cg_test_below(64);
      s.recv_off = cg_test_below(2 * HALF - s.count);
      s.root = cg_test_below(6) == 0; /* 1: a fence (no declared access) */
    }
    s.depend_on = i > 0 && cg_test_below(4) == 0 ? (int)cg_test_below((uint64_t)i) : -1;
    p->nodes[p->n_nodes++] = s;
  }
}

/* Offsets of the send and recv buffers on this rank, in elements. */
static void buffers(const spec_t *s, int rank, size_t *send, size_t *recv) {
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

static void log_node(void *arg) {
  host_arg_t *h = arg;
  if (h->log->n < MAX_NODES) h->log->ids[h->log->n] = h->id;
  h->log->n++;
}

/* Records the program into `g`: over the device arenas and NCCL
 * communicators, or (use_ref) over the host mirrors and MPI communicators. */
static void record(cg_graph_t *g, program_t *p, int use_ref, host_log_t *log, host_arg_t *args) {
  cg_node_t handles[MAX_NODES * 2];
  for (int i = 0; i < p->n_nodes; i++) {
    const spec_t *s = &p->nodes[i];
    arena_t *a = &p->arenas[s->arena];
    char *mem = use_ref ? a->ref_mem : a->dev_mem;
    size_t es = cg_dtype_size(a->dtype), send, recv;
    cg_comm_t *c = use_ref ? p->ref_comms[s->comm] : p->comms[s->comm];
    int rank = 0, size = 1;
    cg_comm_rank(&rank, c);
    cg_comm_size(&size, c);
    buffers(s, rank, &send, &recv);
    cg_status_t st;
    if (s->kind == CG_NODE_HOST_FUNC) {
      args[i] = (host_arg_t){log, i};
      cg_range_t reads[] = {{mem + s->recv_off * es, s->count * es}};
      cg_range_t writes[] = {{mem + s->recv_off * es, s->count * es}, {log, sizeof *log}};
      cg_access_t access = CG_ACCESS_INIT;
      access.everything = 0;
      access.reads = reads;
      access.n_reads = 1;
      access.writes = writes;
      access.n_writes = 2;
      st = cg_host_func(&handles[i], g, log_node, &args[i], s->root ? NULL : &access);
    } else if (s->kind == CG_NODE_SEND) {
      /* a shifted ring: send to rank+shift, receive from rank-shift, in either order */
      int to = (rank + s->shift) % size, from = (rank - s->shift + size) % size;
      int recv_first = (int)(s->recv_off & 1);
      for (int k = 0; k < 2; k++) {
        if ((k == 0) == !recv_first)
          st = cg_send(&handles[i], g, c, mem + send * es, s->count, a->dtype, to);
        else
          st = cg_recv(&handles[i], g, c, mem + recv * es, s->count, a->dtype, from);
        ck_assert_msg(st == CG_SUCCESS, "node %d: %s", i, cg_error_last());
      }
    } else {
      cg_test_call_t call = {s->kind, c, mem + send * es, mem + recv * es, s->count, a->dtype, s->op, s->root};
      st = cg_test_record(&handles[i], g, &call);
    }
    ck_assert_msg(st == CG_SUCCESS, "node %d (%s): %s", i, cg_node_kind_name(s->kind), cg_error_last());
    if (s->depend_on >= 0) ck_assert_cg_ok(cg_depend(g, handles[s->depend_on], handles[i]));
  }
}

/* Fresh data in the image, the mirror and the device; bytes whose first
 * access in record order is a write get the poison pattern instead, so bytes a
 * run fails to write show. */
static void fill(program_t *p, uint64_t salt) {
  int rank = cg_gpu_rank();
  for (int a = 0; a < p->n_arenas; a++) {
    arena_t *ar = &p->arenas[a];
    size_t es = cg_dtype_size(ar->dtype);
    cg_mpi_test_fill(ar->image, 2 * HALF, ar->dtype, CG_SUM, 1, cg_test_seed() ^ salt,
                     (uint64_t)rank * 131 + (uint64_t)a);
    unsigned char *seen = calloc(2 * HALF, 1);
    ck_assert_ptr_nonnull(seen);
    for (int i = 0; i < p->n_nodes; i++) {
      const spec_t *s = &p->nodes[i];
      if (s->arena != a || s->kind == CG_NODE_HOST_FUNC || s->kind == CG_NODE_BARRIER) continue;
      cg_comm_t *c = p->comms[s->comm];
      int r = 0, size = 1;
      cg_comm_rank(&r, c);
      cg_comm_size(&size, c);
      size_t send, recv;
      buffers(s, r, &send, &recv);
      size_t reads = cg_test_send_elems(s->kind, s->count, size, r, s->root);
      size_t writes = s->kind == CG_NODE_SEND ? s->count : cg_test_recv_elems(s->kind, s->count, size, r, s->root);
      for (size_t e = 0; e < reads; e++) seen[send + e] = 1;
      for (size_t e = 0; e < writes; e++) {
        if (!seen[recv + e]) memset(ar->image + (recv + e) * es, CG_MPI_POISON, es);
        seen[recv + e] = 1;
      }
    }
    free(seen);
    memcpy(ar->ref_mem, ar->image, 2 * HALF * es);
    CUDA_OK(cudaMemcpy(ar->dev_mem, ar->image, 2 * HALF * es, cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaDeviceSynchronize()); /* on the device before any stream reads it */
}

static void dump_program(const program_t *p) {
  for (int i = 0; i < p->n_nodes; i++) {
    const spec_t *s = &p->nodes[i];
    fprintf(stderr, "  node %d: %s comm %d arena %d (%s) count %zu op %s root %d shift %d send %zx recv %zu dep %d\n", i,
            cg_node_kind_name(s->kind), s->comm, s->arena, cg_dtype_name(p->arenas[s->arena].dtype), s->count,
            cg_redop_name(s->op), s->root, s->shift, s->send_off, s->recv_off, s->depend_on);
  }
}

/* Runs the plan once: run 0 with cg_plan_launch on a stream, run 1 with
 * cg_plan_start and cg_plan_test. */
static cg_status_t run_plan(cg_plan_t *plan, int run) {
  cg_status_t st;
  if (run == 0) {
    st = cg_plan_launch(plan, cg_gpu_stream());
    if (st == CG_SUCCESS && cudaStreamSynchronize(cg_gpu_stream()) != cudaSuccess) st = CG_ERR_BACKEND;
    return st;
  }
  int done = 0;
  st = cg_plan_start(plan);
  while (st == CG_SUCCESS && !done) st = cg_plan_test(&done, plan); /* no assertion per poll: Check logs each */
  return st;
}

/* 1 if the plan's arenas and log match the reference's; else prints where. */
static int compare(program_t *p, const host_log_t *plan_log, const host_log_t *ref_log, int dag, int run) {
  int ok = 1;
  for (int a = 0; a < p->n_arenas; a++) {
    arena_t *ar = &p->arenas[a];
    size_t bytes = 2 * HALF * cg_dtype_size(ar->dtype);
    CUDA_OK(cudaMemcpy(ar->image, ar->dev_mem, bytes, cudaMemcpyDeviceToHost));
    if (memcmp(ar->image, ar->ref_mem, bytes) == 0) continue;
    size_t at = 0, last = bytes - 1, n_diff = 0;
    while (ar->image[at] == ar->ref_mem[at]) at++;
    while (ar->image[last] == ar->ref_mem[last]) last--;
    for (size_t b = 0; b < bytes; b++) n_diff += ar->image[b] != ar->ref_mem[b];
    fprintf(stderr, "rank %d: dag %d run %d: arena %d (%s) differs in %zu bytes from byte %zu to %zu (plan %02x, "
            "reference %02x)\n", cg_gpu_rank(), dag, run, a, cg_dtype_name(ar->dtype), n_diff, at, last,
            (unsigned char)ar->image[at], (unsigned char)ar->ref_mem[at]);
    ok = 0;
  }
  int same_log = plan_log->n == ref_log->n;
  for (int i = 0; same_log && i < plan_log->n && i < MAX_NODES; i++) same_log = plan_log->ids[i] == ref_log->ids[i];
  if (!same_log) {
    fprintf(stderr, "rank %d: dag %d run %d: the plan ran %d host functions, the reference %d, or in another order:",
            cg_gpu_rank(), dag, run, plan_log->n, ref_log->n);
    for (int i = 0; i < plan_log->n && i < MAX_NODES; i++) fprintf(stderr, " %d", plan_log->ids[i]);
    fprintf(stderr, " vs");
    for (int i = 0; i < ref_log->n && i < MAX_NODES; i++) fprintf(stderr, " %d", ref_log->ids[i]);
    fprintf(stderr, "\n");
    ok = 0;
  }
  return ok;
}

START_TEST(nccl_random__device_plans_match_reference) {
  int world = cg_gpu_size();
  MPI_Comm split;
  MPI_Comm_split(MPI_COMM_WORLD, cg_gpu_rank() % 2, cg_gpu_rank(), &split);
  cg_comm_t *comms[3], *ref_comms[3];
  comms[0] = cg_gpu_nccl_comm(MPI_COMM_WORLD);
  comms[1] = cg_gpu_nccl_comm(MPI_COMM_WORLD);
  comms[2] = cg_gpu_nccl_comm(split);
  ck_assert_cg_ok(cg_comm_create(&ref_comms[0], MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&ref_comms[1], MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&ref_comms[2], split, NULL));
  size_t steps = 0, events = 0;
  for (int dag = 0; dag < N_DAGS; dag++) {
    cg_test_reseed(1000 + (uint64_t)dag);
    program_t p;
    memset(&p, 0, sizeof p);
    p.n_comms = 3;
    for (int c = 0; c < 3; c++) {
      p.comms[c] = comms[c];
      p.ref_comms[c] = ref_comms[c];
    }
    generate(&p, world);
    for (int a = 0; a < p.n_arenas; a++) {
      size_t bytes = 2 * HALF * cg_dtype_size(p.arenas[a].dtype);
      p.arenas[a].dev_mem = cg_gpu_alloc(bytes);
      p.arenas[a].ref_mem = malloc(bytes);
      p.arenas[a].image = malloc(bytes);
      ck_assert(p.arenas[a].ref_mem && p.arenas[a].image);
    }
    host_log_t plan_log, ref_log;
    host_arg_t plan_args[MAX_NODES * 2], ref_args[MAX_NODES * 2];
    cg_graph_t *g, *ref;
    cg_plan_t *plan = NULL;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    ck_assert_cg_ok(cg_graph_create(&ref, NULL));
    record(g, &p, 0, &plan_log, plan_args);
    record(ref, &p, 1, &ref_log, ref_args);
    cg_status_t st = cg_compile(&plan, g, NULL);
    char what[300];
    snprintf(what, sizeof what, "random DAG %d: cg_compile: %s", dag, st == CG_SUCCESS ? "" : cg_error_last());
    if (!cg_mpi_all(st == CG_SUCCESS) && cg_gpu_rank() == 0) dump_program(&p);
    ck_assert_all_ranks(st == CG_SUCCESS, what);
    cg_plan_stats_t stats;
    ck_assert_cg_ok(cg_plan_stats(&stats, plan));
    ck_assert_int_eq(stats.device, cg_gpu_device());
    steps += stats.steps;
    events += stats.events;
    int ok = 1;
    /* two runs with fresh data: replays must not depend on leftovers */
    for (int run = 0; run < 2 && ok; run++) {
      fill(&p, (uint64_t)dag * 7919 + (uint64_t)run);
      memset(&plan_log, 0, sizeof plan_log);
      memset(&ref_log, 0, sizeof ref_log);
      st = run_plan(plan, run);
      snprintf(what, sizeof what, "random DAG %d run %d: %s", dag, run, st == CG_SUCCESS ? "" : cg_error_last());
      ck_assert_all_ranks(st == CG_SUCCESS, what);
      ck_assert_cg_ok(cg_reference_run(ref));
      ok = cg_mpi_all(compare(&p, &plan_log, &ref_log, dag, run)); /* every rank stops after the same run */
    }
    if (!ok && cg_gpu_rank() == 0) dump_program(&p);
    snprintf(what, sizeof what, "random DAG %d", dag);
    ck_assert_all_ranks(ok, what);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
    cg_graph_destroy(ref);
    for (int a = 0; a < p.n_arenas; a++) {
      cg_gpu_free(p.arenas[a].dev_mem);
      free(p.arenas[a].ref_mem);
      free(p.arenas[a].image);
    }
  }
  if (cg_gpu_rank() == 0)
    printf("%d random DAGs, %zu steps, %zu event edges, matched the reference\n", N_DAGS, steps, events);
  for (int c = 0; c < 3; c++) {
    cg_comm_destroy(comms[c]);
    cg_comm_destroy(ref_comms[c]);
  }
  MPI_Comm_free(&split);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nccl_random");
  TCase *tc = cg_gpu_tcase("nccl_random");
  tcase_add_test(tc, nccl_random__device_plans_match_reference);
  suite_add_tcase(s, tc);
  return cg_gpu_test_main(s, "test_nccl_random");
}
