/* cgbench: a model's gradient all-reduces per training iteration, issued the
 * ways users issue them today and the ways commgraph replays them, side by
 * side in one run:
 *
 *   mpiexec -n N build/tests/perf/cgbench WORKLOAD.txt [--iters I] [--rounds R]
 *           [--bucket-mb MB] [--ddp-mb MB] [--sweep] [--smoke]
 *
 * WORKLOAD.txt lists one tensor per line: its number of float32 elements
 * (tests/perf/workloads/, ../shared/workloads/; blank lines and lines starting
 * with '#' are skipped). Every iteration sums every tensor over all ranks, in
 * place, on one stream and one NCCL communicator (the one under the commgraph
 * communicator, cg_comm_nccl). Bucket sizes are in MiB (2^20 bytes, as DDP's
 * bucket_cap_mb and CG_BUCKET_BYTES=25M). The modes:
 *
 *   1. eager NCCL: one ncclAllReduce per tensor, tensor 0 first;
 *   2. NCCL group: the same calls between ncclGroupStart and ncclGroupEnd;
 *   3. DDP-style buckets: tensors taken in reverse order (n-1 first, the order
 *      backward produces them) into buckets closed once they hold --ddp-mb MiB
 *      or more (default 25, PyTorch DDP's rule, without its small first
 *      bucket); per bucket one cudaMemcpyAsync per tensor into a flat bucket
 *      buffer, one ncclAllReduce, one cudaMemcpyAsync per tensor back;
 *   4. commgraph replay, unfused: a plan of one allreduce node per tensor
 *      compiled with fusion = 0 (one collective per tensor), cg_plan_launch;
 *   5. commgraph replay, copies: the same graph compiled with fusion on and
 *      bucket_bytes = --bucket-mb (absent: 0, so the library picks:
 *      CG_BUCKET_BYTES, else its default); the tensors do not touch (below),
 *      so every bucket packs its tensors into staging with one batched kernel,
 *      runs one allreduce and unpacks (cg_plan_stats copy_bytes > 0, checked);
 *   6. commgraph replay, arena: as 5, over tensors allocated from a device
 *      cg_arena in record order, back to back: every bucket runs in place on
 *      them, zero-copy (copy_bytes == 0, checked);
 *   7. one fused allreduce of the total element count: the floor in practice.
 *
 * commgraph graphs record one in-place allreduce per tensor in reverse order
 * (n-1 first, as DDP buckets them), nothing between them. Modes 1-5 and 7
 * keep their tensors in one device allocation of their own, tensor 0 first, at
 * 256-byte aligned offsets with at least 256 bytes between tensors; mode 6 in
 * its arena.
 * For each commgraph mode the table gives cg_plan_stats' buckets (collectives
 * that run several tensors), fused nodes, bucket size (bucket_bytes) and bytes
 * copied per iteration; a '*' marks buckets that differ from the documented
 * rule (consecutive greedy buckets of at most the bucket size). Each figure is
 * also given as a ratio to the floor 2(n-1)/n x bytes / busbw, with busbw
 * measured in the same run (in the same rotation) for one allreduce of 1 GiB or
 * the workload's total, whichever is larger.
 *
 * --sweep adds modes 5 and 6 at bucket sizes 4, 8, 16, 32, 64 and 128 MiB and
 * the whole workload in one bucket, one row per size, timed in the same rounds
 * as everything else (the sweep's plans share mode 5's and mode 6's tensors).
 *
 * A second case runs 128 in-place allreduces of 1 KB per iteration: eager,
 * group, one replay of the 128-node plan unfused and one fused (copies, as
 * mode 5, at the same bucket size); µs per replay and per op.
 *
 * Timing: cudaEvents around a batch of I iterations (default 20; the large
 * busbw allreduce: 3). All modes are interleaved round by round, after two
 * warm-up iterations each; each figure is the median over R rounds (default 9)
 * of the slowest rank's time per iteration. Every mode's result is checked
 * before timing and again after it (integer-valued floats against the ranks'
 * sum, padding untouched); the tensors are then zeroed so repeated sums stay
 * finite. A wrong result prints "WRONG" and exits non-zero, as does any error.
 * One GPU per rank, numbered by the rank's place on its node. Only rank 0
 * prints. Without a GPU for every rank it says why and exits 0: this is a
 * benchmark, not a test.
 *
 * --smoke (tests/perf/CMakeLists.txt runs it so): 1 round of 2 iterations
 * unless --rounds or --iters say otherwise, and the busbw allreduce only as
 * large as the workload; without a GPU for every rank it exits 77 (ctest's
 * skip), or 1 where CG_REQUIRE_GPU is set. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_smoke.h"
#include "cgbench_workload.h"
#include "commgraph.h"
#include "commgraph/cuda.h"
#include "commgraph/mpi.h"
#include "commgraph/nccl.h"
#include "gpu_bench.h"

#define MAX_ROUNDS 101
#define TINY_OPS 128
#define TINY_COUNT 256 /* floats: 1 KB */
#define LARGE_ITERS 3
#define SWEEP_SIZES 7 /* 4 .. 128 MiB, then the whole workload */

static int rank, ranks;

/* ---- one timed thing: a way of all-reducing the tensors of a layout */

enum { EAGER, GROUP, DDP, PLAN };

typedef struct bench {
  char label[128];
  int kind;
  const cgb_layout_t *layout;
  int iters;
  float *data;                /* the tensors: one allocation, or an arena's pieces */
  int owns_data;              /* 0: another bench's or an arena's */
  float *flat;                /* DDP: the bucket buffers, one allocation */
  const cgb_buckets_t *buckets; /* DDP */
  size_t cap_bytes;           /* DDP: its bucket size */
  cg_plan_t *plan;            /* PLAN */
  cg_plan_stats_t stats;      /* PLAN */
  size_t expect_buckets, expect_fused; /* PLAN: by the documented rule */
  ncclComm_t nccl;
  double t[MAX_ROUNDS];       /* slowest rank's seconds per iteration, per round */
  double med;
} bench_t;

/* eager calls settled (a non-blocking communicator under NCCL_COMM_BLOCKING=0);
 * inside a group a call returns ncclSuccess and the group's end is settled */
static void allreduce(const bench_t *b, float *buf, size_t count, cudaStream_t s) {
  NCCL_CHECK_ON(b->nccl, ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, b->nccl, s));
}

/* DDP: copies bucket k's tensors into its flat buffer (in = 1) or back out of
 * it (in = 0), one cudaMemcpyAsync per tensor. */
static void copy_bucket(const bench_t *b, int k, int in, cudaStream_t s) {
  const cgb_layout_t *l = b->layout;
  const cgb_buckets_t *bk = b->buckets;
  float *flat = b->flat + bk->offset[k];
  for (int p = bk->first[k]; p < bk->first[k + 1]; p++) {
    int i = l->n - 1 - p;
    float *tensor = b->data + l->offset[i];
    CUDA_CHECK(cudaMemcpyAsync(in ? flat : tensor, in ? tensor : flat, l->count[i] * sizeof(float),
                               cudaMemcpyDeviceToDevice, s));
    flat += l->count[i];
  }
}

static void one_iteration(const bench_t *b, cudaStream_t s) {
  const cgb_layout_t *l = b->layout;
  if (b->kind == PLAN) {
    CG_CHECK(cg_plan_launch(b->plan, s));
  } else if (b->kind == DDP) {
    for (int k = 0; k < b->buckets->n; k++) {
      copy_bucket(b, k, 1, s);
      allreduce(b, b->flat + b->buckets->offset[k], b->buckets->count[k], s);
      copy_bucket(b, k, 0, s);
    }
  } else {
    if (b->kind == GROUP) NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < l->n; i++) allreduce(b, b->data + l->offset[i], l->count[i], s);
    if (b->kind == GROUP) NCCL_CHECK_ON(b->nccl, ncclGroupEnd());
  }
}

/* Enqueues `iters` iterations between two events and returns the slowest
 * rank's seconds per iteration. The MPI allreduce lines the ranks up for the
 * next batch. */
static double time_batch(const bench_t *b, int iters, cudaStream_t s, cudaEvent_t start, cudaEvent_t stop) {
  CUDA_CHECK(cudaEventRecord(start, s));
  for (int i = 0; i < iters; i++) one_iteration(b, s);
  CUDA_CHECK(cudaEventRecord(stop, s));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  double mine = ms * 1e-3 / iters, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

/* Runs every bench for `rounds` rounds, interleaved, after two warm-up
 * iterations of each, and sets each one's median. */
static void time_all(bench_t *b, int nb, int rounds, cudaStream_t s, cudaEvent_t start, cudaEvent_t stop) {
  for (int k = 0; k < nb; k++) time_batch(&b[k], 2, s, start, stop);
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < nb; k++) b[k].t[r] = time_batch(&b[k], b[k].iters, s, start, stop);
  for (int k = 0; k < nb; k++) b[k].med = cg_bench_median(b[k].t, rounds);
}

/* ---- setting a bench up and checking it once */

/* Element j of tensor i holds (rank + 1) * v(i, j) before the sum and
 * ranks (ranks + 1) / 2 * v(i, j) after it; padding holds 0 throughout. */
static float v(int i, size_t j) { return (float)(1 + (size_t)i % 8 + j % 8); }

static void fill(const cgb_layout_t *l, float *host, float times) {
  memset(host, 0, l->span * sizeof *host);
  for (int i = 0; i < l->n; i++)
    for (size_t j = 0; j < l->count[i]; j++) host[l->offset[i] + j] = times * v(i, j);
}

/* The number of elements of `host` (padding included) that differ from
 * fill(l, times); reports the first few. */
static long long count_wrong(const cgb_layout_t *l, const float *host, float times, const char *what) {
  long long wrong = 0;
  char *tensor = cgb_xcalloc(l->span, 1); /* 1: element of a tensor */
  for (int i = 0; i < l->n; i++) memset(tensor + l->offset[i], 1, l->count[i]);
  for (size_t e = 0; e < l->span; e++)
    if (!tensor[e] && host[e] != 0 && wrong++ < 3)
      fprintf(stderr, "rank %d: %s: padding at %zu is %g\n", rank, what, e, (double)host[e]);
  free(tensor);
  for (int i = 0; i < l->n; i++)
    for (size_t j = 0; j < l->count[i]; j++)
      if (host[l->offset[i] + j] != times * v(i, j) && wrong++ < 3)
        fprintf(stderr, "rank %d: %s: element %zu of tensor %d is %g, expected %g\n", rank, what, j, i,
                (double)host[l->offset[i] + j], (double)(times * v(i, j)));
  return wrong;
}

/* data: the tensors' memory, or NULL for an allocation of the bench's own. */
static void set_up(bench_t *b, int kind, const char *label, const cgb_layout_t *l, float *data, int iters,
                   ncclComm_t nccl) {
  memset(b, 0, sizeof *b);
  snprintf(b->label, sizeof b->label, "%s", label);
  b->kind = kind;
  b->layout = l;
  b->iters = iters;
  b->nccl = nccl;
  b->data = data;
  b->owns_data = !data;
  if (!data) CUDA_CHECK(cudaMalloc((void **)&b->data, l->span * sizeof(float)));
}

static void set_up_ddp(bench_t *b, const char *label, const cgb_layout_t *l, const cgb_buckets_t *bk,
                       size_t cap_bytes, int iters, ncclComm_t nccl) {
  set_up(b, DDP, label, l, NULL, iters, nccl);
  b->buckets = bk;
  b->cap_bytes = cap_bytes;
  CUDA_CHECK(cudaMalloc((void **)&b->flat, bk->span * sizeof(float)));
}

/* A plan of one in-place allreduce per tensor, recorded n-1 first, compiled
 * with `fusion` and `bucket_bytes` (0: the library's choice). Compiling warms
 * the communicator up on a scratch buffer, not on the tensors. */
static void set_up_plan(bench_t *b, const char *label, const cgb_layout_t *l, float *data, int iters,
                        cg_comm_t *comm, ncclComm_t nccl, int fusion, size_t bucket_bytes) {
  set_up(b, PLAN, label, l, data, iters, nccl);
  cg_graph_t *g;
  CG_CHECK(cg_graph_create(&g, NULL));
  for (int p = 0; p < l->n; p++) {
    float *t = b->data + l->offset[l->n - 1 - p];
    CG_CHECK(cg_allreduce(NULL, g, comm, t, t, l->count[l->n - 1 - p], CG_FLOAT32, CG_SUM));
  }
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.fusion = fusion;
  opts.bucket_bytes = bucket_bytes;
  CG_CHECK(cg_compile(&b->plan, g, &opts));
  cg_graph_destroy(g);
  CG_CHECK(cg_plan_stats(&b->stats, b->plan));
  b->expect_buckets = b->stats.bucket_bytes ? cgb_expected_buckets(l, b->stats.bucket_bytes, &b->expect_fused) : 0;
  if (!fusion && b->stats.buckets) cg_bench_fail(label, "compiled with fusion = 0 but has buckets");
}

/* Mode 5: the copies must really happen wherever a bucket does. */
static void require_copies(const bench_t *b) {
  if (b->stats.buckets && !b->stats.copy_bytes)
    cg_bench_fail(b->label, "its tensors do not touch, yet its buckets copy nothing (cg_plan_stats copy_bytes 0)");
  if (!b->stats.buckets && rank == 0)
    fprintf(stderr, "cgbench: warning: %s formed no buckets (CG_FUSION=0 in the environment?)\n", b->label);
}

/* Mode 6: zero-copy. */
static void require_zero_copy(const bench_t *b) {
  if (b->stats.copy_bytes) {
    char why[160];
    snprintf(why, sizeof why, "arena tensors in record order, yet its buckets copy %zu bytes per run",
             b->stats.copy_bytes);
    cg_bench_fail(b->label, why);
  }
}

/* Runs one iteration on known values and compares every element (padding
 * included) on every rank; aborts if any is wrong. Then zeroes the tensors.
 * `when`: "before timing" or "after timing". */
static void check(const bench_t *b, float *host, cudaStream_t s, const char *when) {
  const cgb_layout_t *l = b->layout;
  fill(l, host, (float)(rank + 1));
  CUDA_CHECK(cudaMemcpy(b->data, host, l->span * sizeof(float), cudaMemcpyHostToDevice));
  if (b->flat) CUDA_CHECK(cudaMemset(b->flat, 0xff, b->buckets->span * sizeof(float))); /* NaN */
  CUDA_CHECK(cudaDeviceSynchronize()); /* the copy and the memset before the iteration on s, a non-blocking stream */
  one_iteration(b, s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaMemcpy(host, b->data, l->span * sizeof(float), cudaMemcpyDeviceToHost));
  long long wrong = count_wrong(l, host, (float)ranks * (float)(ranks + 1) / 2, b->label), all = 0;
  MPI_Allreduce(&wrong, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (all) {
    if (rank == 0) fprintf(stderr, "cgbench: WRONG results %s: %s computed %lld wrong values\n", when, b->label, all);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  CUDA_CHECK(cudaMemset(b->data, 0, l->span * sizeof(float)));
  CUDA_CHECK(cudaDeviceSynchronize());
}

/* After every plan over its tensors is destroyed. */
static void tear_down(bench_t *b) {
  if (b->owns_data) CUDA_CHECK(cudaFree(b->data));
  if (b->flat) CUDA_CHECK(cudaFree(b->flat));
}

/* ---- printing */

/* Plans whose buckets differ from the documented rule, one line each. */
static char rule_notes[4096];

/* '*' (and a note) where a fused plan's buckets differ from the rule, else ' '. */
static char rule_mark(const bench_t *b) {
  if (!b->stats.bucket_bytes || (b->stats.buckets == b->expect_buckets && b->stats.fused_nodes == b->expect_fused))
    return ' ';
  size_t used = strlen(rule_notes);
  snprintf(rule_notes + used, sizeof rule_notes - used, "  %s: %zu buckets of %zu tensors; the rule gives %zu of %zu\n",
           b->label, b->stats.buckets, b->stats.fused_nodes, b->expect_buckets, b->expect_fused);
  return '*';
}

/* A bench's buckets, fused tensors, bucket size and copies per iteration, as
 * table columns ("-" where they do not apply). */
static const char *bucket_columns(char *out, size_t size, const bench_t *b) {
  char copied[32], cap[32];
  if (b->kind == DDP) {
    snprintf(cap, sizeof cap, "%.1f", (double)b->cap_bytes / CGB_MIB);
    snprintf(out, size, "%8d  %6d %10s %11s", b->buckets->n, b->layout->n, cap,
             cgb_bytes_text(copied, sizeof copied, 2.0 * (double)b->layout->total * sizeof(float)));
  } else if (b->kind == PLAN) {
    int off = b->stats.bucket_bytes == 0;
    char mark = rule_mark(b);
    snprintf(cap, sizeof cap, "%.1f", (double)b->stats.bucket_bytes / CGB_MIB);
    snprintf(out, size, "%8zu%c %6zu %10s %11s", b->stats.buckets, mark, b->stats.fused_nodes, off ? "off" : cap,
             cgb_bytes_text(copied, sizeof copied, (double)b->stats.copy_bytes));
  } else {
    snprintf(out, size, "%8s  %6s %10s %11s", "-", "-", "-", "-");
  }
  return out;
}

static void print_rows(const bench_t *b, int from, int to, double floor_s, int per_op) {
  char cols[96];
  printf("%-52s %10s %9s  %8s  %6s %10s %11s\n", "mode", "us/iter", per_op ? "us/op" : "x floor", "buckets", "fused",
         "bucket MiB", "copied/iter");
  for (int k = from; k <= to; k++)
    printf("%-52s %10.1f %9.2f  %s\n", b[k].label, b[k].med * 1e6,
           per_op ? b[k].med * 1e6 / per_op : b[k].med / floor_s, bucket_columns(cols, sizeof cols, &b[k]));
}

/* One row per bucket size: modes 5 and 6 side by side. */
static void print_sweep(const bench_t *b, const char size_text[][32], double floor_s) {
  char copied[32];
  printf("\nbucket sweep: commgraph fused replay at each bucket size, timed in the same rounds as above\n");
  printf("%-18s | %-47s | %s\n", "", "copies (mode 5)", "arena, zero-copy (mode 6)");
  printf("%-18s | %8s  %6s %11s %9s %8s | %8s  %6s %9s %8s\n", "bucket MiB", "buckets", "fused", "copied/iter",
         "us/iter", "x floor", "buckets", "fused", "us/iter", "x floor");
  for (int z = 0; z < SWEEP_SIZES; z++) {
    const bench_t *c = &b[2 * z], *a = &b[2 * z + 1];
    char mc = rule_mark(c), ma = rule_mark(a);
    printf("%-18s | %8zu%c %6zu %11s %9.1f %8.2f | %8zu%c %6zu %9.1f %8.2f\n", size_text[z], c->stats.buckets, mc,
           c->stats.fused_nodes, cgb_bytes_text(copied, sizeof copied, (double)c->stats.copy_bytes), c->med * 1e6,
           c->med / floor_s, a->stats.buckets, ma, a->stats.fused_nodes, a->med * 1e6, a->med / floor_s);
  }
}

static void usage(const char *argv0) {
  if (rank == 0)
    fprintf(stderr,
            "usage: mpiexec -n N %s WORKLOAD.txt [--iters I] [--rounds 1..%d] [--bucket-mb MB] [--ddp-mb MB] "
            "[--sweep] [--smoke]\n"
            "  --bucket-mb: commgraph's bucket size in MiB (default: CG_BUCKET_BYTES, else the library's)\n"
            "  --ddp-mb:    the DDP-style buckets' size in MiB (default 25)\n"
            "  --sweep:     also time commgraph's fused modes at 4..128 MiB and the whole workload\n"
            "  --smoke:     short: 1 round of 2 iterations (unless --rounds, --iters), the busbw allreduce\n"
            "               only as large as the workload; exits 77 without a GPU per rank (a test)\n",
            argv0, MAX_ROUNDS);
  MPI_Finalize();
  exit(2);
}

static void print_header(int argc, char **argv, int device, int nodes, const char *name, const cgb_layout_t *l,
                         int iters, int rounds) {
  struct cudaDeviceProp prop;
  int version = 0;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  NCCL_CHECK(ncclGetVersion(&version));
  const char *nvls = getenv("NCCL_NVLS_ENABLE"), *env_bucket = getenv("CG_BUCKET_BYTES"),
             *env_fusion = getenv("CG_FUSION");
  printf("cgbench: gradient allreduces per training iteration\n");
  printf("  GPU: %s (rank 0 on device %d); %d rank%s on %d node%s, %s\n", prop.name, device, ranks,
         ranks == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s", cg_bench_gpus_per_rank());
  printf("  NCCL %d.%d.%d, NCCL_NVLS_ENABLE=%s; commgraph %s, CG_BUCKET_BYTES=%s, CG_FUSION=%s\n", version / 10000,
         version % 10000 / 100, version % 100, nvls ? nvls : "(unset)", CG_VERSION_STRING,
         env_bucket ? env_bucket : "(unset)", env_fusion ? env_fusion : "(unset)");
  printf("  workload: %s, %d tensors, %.1f MB float32 (%zu elements)\n", name, l->n,
         (double)l->total * sizeof(float) / 1e6, l->total);
  printf("  command: mpiexec -n %d", ranks);
  for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
  printf("\n  each figure: median over %d rounds of the slowest rank's cudaEvent time per iteration, %d iterations "
         "per round, all modes interleaved round by round\n",
         rounds, iters);
  fflush(stdout);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const char *path = NULL;
  int iters = 0, rounds = 0, sweep = 0, smoke = 0; /* 0: not given */
  double bucket_mb = 0, ddp_mb = 25; /* bucket_mb 0: the library's choice */
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = (int)strtol(argv[++i], &end, 10);
      if (*end || iters < 1 || iters > 100000) usage(argv[0]);
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = (int)strtol(argv[++i], &end, 10);
      if (*end || rounds < 1 || rounds > MAX_ROUNDS) usage(argv[0]);
    } else if ((!strcmp(argv[i], "--bucket-mb") || !strcmp(argv[i], "--ddp-mb")) && i + 1 < argc) {
      double *mb = argv[i][2] == 'b' ? &bucket_mb : &ddp_mb;
      *mb = strtod(argv[++i], &end);
      if (*end || !(*mb * CGB_MIB >= sizeof(float)) || *mb > 1e6) usage(argv[0]);
    } else if (!strcmp(argv[i], "--sweep")) {
      sweep = 1;
    } else if (!strcmp(argv[i], "--smoke")) {
      smoke = 1;
    } else if (argv[i][0] != '-' && !path) {
      path = argv[i];
    } else {
      usage(argv[0]);
    }
  }
  if (!path) usage(argv[0]);
  if (!iters) iters = smoke ? 2 : 20;
  if (!rounds) rounds = smoke ? 1 : 9;
  size_t *counts = NULL;
  int n = cgb_read_workload(path, &counts);
  if (!n) {
    MPI_Finalize();
    return 2;
  }
  char name[128];
  cgb_workload_name(path, name, sizeof name);

  int nodes = 0, device = cg_bench_pick_gpu("cgbench", &nodes);
  if (device < 0) {
    free(counts);
    int status = cg_bench_no_gpu_status("cgbench", "not every rank has a GPU of its own", rank, smoke);
    MPI_Finalize();
    return status;
  }

  cg_comm_t *comm;
  cg_comm_opts_t copts = CG_COMM_OPTS_INIT;
  copts.backend = CG_BACKEND_NCCL;
  copts.device = device;
  CG_CHECK(cg_comm_create(&comm, MPI_COMM_WORLD, &copts));
  ncclComm_t nccl;
  CG_CHECK(cg_comm_nccl(&nccl, comm));

  /* the workload (gapped, and packed as the arena places it), its total as one
   * tensor, the busbw allreduce, the tiny ops */
  cgb_layout_t work = cgb_make_layout(n, counts, CGB_GAPPED), packed = cgb_make_layout(n, counts, CGB_PACKED_REVERSE);
  size_t large_count = work.total > ((size_t)1 << 28) || smoke ? work.total : (size_t)1 << 28; /* >= 1 GiB */
  size_t tiny_counts[TINY_OPS];
  for (int i = 0; i < TINY_OPS; i++) tiny_counts[i] = TINY_COUNT;
  cgb_layout_t fused = cgb_make_layout(1, &work.total, CGB_GAPPED),
               large = cgb_make_layout(1, &large_count, CGB_GAPPED),
               tiny = cgb_make_layout(TINY_OPS, tiny_counts, CGB_GAPPED);
  size_t ddp_cap = (size_t)(ddp_mb * CGB_MIB), cg_cap = (size_t)(bucket_mb * CGB_MIB);
  cgb_buckets_t buckets = cgb_make_ddp_buckets(&work, ddp_cap, ddp_cap); /* no small first bucket */
  if (rank == 0) print_header(argc, argv, device, nodes, name, &work, iters, rounds);

  /* the arena: pieces allocated in record order (n-1 first) lie where `packed` says */
  cg_arena_t *arena;
  cg_arena_opts_t aopts = CG_ARENA_OPTS_INIT;
  aopts.device = device;
  CG_CHECK(cg_arena_create(&arena, packed.total * sizeof(float), &aopts));
  float *arena_data = NULL;
  for (int p = 0; p < n; p++) {
    void *piece;
    CG_CHECK(cg_arena_alloc(&piece, arena, packed.count[n - 1 - p], CG_FLOAT32));
    if (!p) arena_data = piece;
    if ((float *)piece != arena_data + packed.offset[n - 1 - p])
      cg_bench_fail("cg_arena_alloc", "the arena's pieces are not back to back");
  }

  char ddp_label[128], cap_text[48];
  snprintf(ddp_label, sizeof ddp_label, "DDP-style buckets (%g MiB, copies)", ddp_mb);
  if (bucket_mb > 0)
    snprintf(cap_text, sizeof cap_text, "%g MiB", bucket_mb);
  else
    snprintf(cap_text, sizeof cap_text, "library's size");
  char copy_label[128], arena_label[128], tiny_label[128];
  snprintf(copy_label, sizeof copy_label, "commgraph replay, copies (%s, gapped)", cap_text);
  snprintf(arena_label, sizeof arena_label, "commgraph replay, arena zero-copy (%s)", cap_text);
  snprintf(tiny_label, sizeof tiny_label, "commgraph replay, fused (%s, copies)", cap_text);

  enum { W_EAGER, W_GROUP, W_DDP, W_UNFUSED, W_COPY, W_ARENA, W_FUSED, LARGE, T_EAGER, T_GROUP, T_UNFUSED, T_FUSED,
         SWEEP, MAX_BENCHES = SWEEP + 2 * SWEEP_SIZES };
  static bench_t b[MAX_BENCHES];
  set_up(&b[W_EAGER], EAGER, "eager NCCL (one ncclAllReduce per tensor)", &work, NULL, iters, nccl);
  set_up(&b[W_GROUP], GROUP, "NCCL group (all of them in one group)", &work, NULL, iters, nccl);
  set_up_ddp(&b[W_DDP], ddp_label, &work, &buckets, ddp_cap, iters, nccl);
  set_up_plan(&b[W_UNFUSED], "commgraph replay, unfused (fusion=0)", &work, NULL, iters, comm, nccl, 0, 0);
  set_up_plan(&b[W_COPY], copy_label, &work, NULL, iters, comm, nccl, 1, cg_cap);
  set_up_plan(&b[W_ARENA], arena_label, &packed, arena_data, iters, comm, nccl, 1, cg_cap);
  set_up(&b[W_FUSED], EAGER, "one fused allreduce of the total", &fused, NULL, iters, nccl);
  set_up(&b[LARGE], EAGER, "one large allreduce (busbw)", &large, NULL, smoke ? iters : LARGE_ITERS, nccl);
  set_up(&b[T_EAGER], EAGER, "eager NCCL", &tiny, NULL, iters, nccl);
  set_up(&b[T_GROUP], GROUP, "NCCL group", &tiny, NULL, iters, nccl);
  set_up_plan(&b[T_UNFUSED], "commgraph replay, unfused (fusion=0)", &tiny, NULL, iters, comm, nccl, 0, 0);
  set_up_plan(&b[T_FUSED], tiny_label, &tiny, NULL, iters, comm, nccl, 1, cg_cap);
  require_copies(&b[W_COPY]);
  require_zero_copy(&b[W_ARENA]);
  require_copies(&b[T_FUSED]);

  /* the sweep: modes 5 and 6 per size, over mode 5's and mode 6's tensors */
  int nb = sweep ? MAX_BENCHES : SWEEP;
  char size_text[SWEEP_SIZES][32];
  for (int z = 0; sweep && z < SWEEP_SIZES; z++) {
    size_t cap = z < SWEEP_SIZES - 1 ? ((size_t)4 << z) * CGB_MIB : work.total * sizeof(float);
    char label[128];
    if (z < SWEEP_SIZES - 1)
      snprintf(size_text[z], sizeof size_text[z], "%zu", cap / CGB_MIB);
    else
      snprintf(size_text[z], sizeof size_text[z], "whole (%.1f)", (double)cap / CGB_MIB);
    snprintf(label, sizeof label, "sweep %.31s MiB: commgraph replay, copies", size_text[z]);
    set_up_plan(&b[SWEEP + 2 * z], label, &work, b[W_COPY].data, iters, comm, nccl, 1, cap);
    snprintf(label, sizeof label, "sweep %.31s MiB: commgraph replay, arena", size_text[z]);
    set_up_plan(&b[SWEEP + 2 * z + 1], label, &packed, arena_data, iters, comm, nccl, 1, cap);
    require_copies(&b[SWEEP + 2 * z]);
    require_zero_copy(&b[SWEEP + 2 * z + 1]);
  }

  cudaStream_t stream;
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));

  size_t host_span = 0; /* the largest layout */
  const cgb_layout_t *layouts[] = {&work, &packed, &fused, &large, &tiny};
  for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
    if (layouts[i]->span > host_span) host_span = layouts[i]->span;
  float *host = cgb_xcalloc(host_span, sizeof(float));
  for (int k = 0; k < nb; k++) check(&b[k], host, stream, "before timing");
  if (rank == 0) {
    printf("  results checked: every mode sums every element correctly\n");
    fflush(stdout);
  }

  time_all(b, nb, rounds, stream, start, stop);
  for (int k = 0; k < nb; k++) check(&b[k], host, stream, "after timing");
  free(host);

  if (rank == 0) {
    /* floor = 2(n-1)/n x bytes / busbw = bytes / large bytes x large time */
    double large_bytes = (double)large.total * sizeof(float), bytes = (double)work.total * sizeof(float);
    double floor_s = b[LARGE].med * bytes / large_bytes;
    double factor = 2.0 * (ranks - 1) / ranks;
    printf("\nbusbw: one in-place float32 sum allreduce of %.1f MB (%.0f MiB): %.1f us, busbw = 2(n-1)/n x bytes "
           "/ time = %.1f GB/s\n",
           large_bytes / 1e6, large_bytes / CGB_MIB, b[LARGE].med * 1e6, factor * large_bytes / b[LARGE].med / 1e9);
    printf("floor for %s: 2(n-1)/n x %.1f MB / busbw = %.1f us\n\n", name, bytes / 1e6, floor_s * 1e6);
    print_rows(b, W_EAGER, W_FUSED, floor_s, 0);
    if (sweep) print_sweep(b + SWEEP, (const char(*)[32])size_text, floor_s);
    printf("\nmany tiny ops: %d in-place float32 sum allreduces of %d bytes per iteration\n", TINY_OPS,
           TINY_COUNT * (int)sizeof(float));
    print_rows(b, T_EAGER, T_FUSED, 0, TINY_OPS);
    printf("\nbuckets: collectives that run several tensors (commgraph: cg_plan_stats buckets and fused_nodes; DDP: "
           "all its buckets, each copied); bucket MiB: the size used (cg_plan_stats bucket_bytes)\n");
    if (rule_notes[0])
      printf("* buckets differ from the documented rule (consecutive greedy buckets of at most the bucket size):\n%s",
             rule_notes);
    printf("results checked again after timing: every mode still sums every element correctly\n");
    fflush(stdout);
  }

  for (int k = 0; k < nb; k++) cg_plan_destroy(b[k].plan);
  for (int k = 0; k < nb; k++) tear_down(&b[k]);
  cg_arena_destroy(arena);
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaStreamDestroy(stream));
  cgb_free_buckets(&buckets);
  cgb_free_layout(&work);
  cgb_free_layout(&packed);
  cgb_free_layout(&fused);
  cgb_free_layout(&large);
  cgb_free_layout(&tiny);
  free(counts);
  cg_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
