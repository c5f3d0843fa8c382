/* What cg_plan_rebind costs next to compiling the plan again:
 *
 *   mpiexec -n N build/tests/perf/bench_rebind [WORKLOAD.txt] [--rounds R] [--scale S] [--smoke]
 *
 * A model's gradient allreduces (WORKLOAD.txt: one tensor's float32 element
 * count per line; default tests/perf/workloads/resnet50.txt) recorded as
 * in-place sum allreduces, last tensor first as a backward pass produces them,
 * over an arena in that order (so buckets need no copies), fusion on. Per
 * round, interleaved: a full cg_compile of the graph (collective: the
 * cross-rank check, fusion and its agreement, lowering; for a device plan also
 * the warm-up, capture and instantiation); cg_plan_rebind of every node to a
 * second arena and back (two samples); cg_plan_rebind of one node to its place
 * in the second arena and back (two samples). Figures are medians over the
 * samples, of the slowest rank. Rows: a host plan (MPI backend, host memory),
 * and a device plan (NCCL, one GPU per rank) where the build has CUDA and NCCL
 * and every rank has a GPU; otherwise the device row says why it was skipped.
 * After timing, each plan runs once on each arena and the sums are checked
 * (integer-valued floats that differ from element to element); a wrong sum
 * prints "RESULTS WRONG" and exits non-zero, as does any error.
 *
 * --scale S divides every tensor's count by S (at least 1 element), for small
 * machines: the costs measured do not grow with the bytes.
 *
 * --smoke (tests/perf/CMakeLists.txt runs it so): 1 round unless --rounds;
 * then, where the device row cannot run (no GPU for every rank, or a build
 * without CUDA or NCCL), it exits 77 (ctest's skip) after the host row, or 1
 * where CG_REQUIRE_GPU is set. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_smoke.h"
#include "bench_stats.h"
#include "commgraph.h"
#include "commgraph/mpi.h"
#if CG_BENCH_DEVICE
#include "commgraph/cuda.h"
#include "gpu_bench.h"
#endif

#ifndef CG_BENCH_WORKLOADS
#define CG_BENCH_WORKLOADS "tests/perf/workloads"
#endif
#define MAX_ROUNDS 101

static int world_rank, world_size;

static void fail(const char *what, const char *why) {
  fprintf(stderr, "rank %d: FAILED %s: %s\n", world_rank, what, why);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void check(cg_status_t st, const char *what) {
  if (st != CG_SUCCESS) fail(what, cg_error_last());
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) fail("calloc", "out of memory");
  return p;
}

/* This rank's median of v[0 .. n), then the largest over ranks. */
static double slowest_median(double *v, int n) {
  double mine = cg_bench_median(v, n), most = 0;
  MPI_Allreduce(&mine, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return most;
}

/* The element counts of the workload file, read on rank 0 and broadcast;
 * exits the job on a missing or malformed file. */
static int read_counts(const char *path, size_t **out) {
  long long n = 0;
  unsigned long long *counts = NULL;
  if (world_rank == 0) {
    FILE *f = fopen(path, "r");
    size_t cap = 0;
    char line[256];
    if (!f) {
      fprintf(stderr, "bench_rebind: cannot open %s\n", path);
      n = -1;
    }
    while (f && n >= 0 && fgets(line, sizeof line, f)) {
      char *p = line + strspn(line, " \t\r\n"), *end;
      if (!*p || *p == '#') continue;
      unsigned long long c = strtoull(p, &end, 10);
      if (end == p || c == 0 || end[strspn(end, " \t\r\n")]) {
        fprintf(stderr, "bench_rebind: %s: not a positive element count: %s", path, line);
        n = -1;
        break;
      }
      if ((size_t)n == cap) {
        cap = cap ? 2 * cap : 256;
        counts = realloc(counts, cap * sizeof *counts);
        if (!counts) fail("realloc", "out of memory");
      }
      counts[n++] = c;
    }
    if (f) fclose(f);
  }
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  if (n <= 0) {
    if (world_rank == 0 && n == 0) fprintf(stderr, "bench_rebind: %s lists no tensors\n", path);
    MPI_Finalize();
    exit(1);
  }
  if (world_rank != 0) counts = xcalloc((size_t)n, sizeof *counts);
  MPI_Bcast(counts, (int)n, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  *out = xcalloc((size_t)n, sizeof **out);
  for (long long i = 0; i < n; i++) (*out)[i] = (size_t)counts[i];
  free(counts);
  return (int)n;
}

/* ---- one plan's measurements */

typedef struct bench {
  int device; /* CG_DEVICE_HOST or the CUDA device */
  cg_comm_t *comm;
  int k;
  const size_t *count;
  size_t total;         /* elements over all tensors */
  cg_arena_t *arena[2]; /* set A, set B */
  float **buf[2];       /* buf[set][tensor] */
  cg_graph_t *graph;
  cg_node_t *node; /* node[tensor] */
  cg_plan_t *plan;
  cg_rebind_t *to[2]; /* every node to set A, to set B */
} bench_t;

typedef struct result {
  double compile, all, one; /* seconds */
  cg_plan_stats_t stats, stats_rebound, stats_one; /* compiled; every node moved; one node moved */
  int checked;
} result_t;

static void make_sets(bench_t *b) {
  cg_arena_opts_t o = CG_ARENA_OPTS_INIT;
  o.device = b->device;
  for (int s = 0; s < 2; s++) {
    check(cg_arena_create(&b->arena[s], b->total * sizeof(float) + 256, &o), "cg_arena_create");
    b->buf[s] = xcalloc((size_t)b->k, sizeof *b->buf[s]);
    /* in record order: the last tensor first */
    for (int i = b->k - 1; i >= 0; i--)
      check(cg_arena_alloc((void **)&b->buf[s][i], b->arena[s], b->count[i], CG_FLOAT32), "cg_arena_alloc");
  }
}

static void record(bench_t *b) {
  check(cg_graph_create(&b->graph, NULL), "cg_graph_create");
  b->node = xcalloc((size_t)b->k, sizeof *b->node);
  for (int i = b->k - 1; i >= 0; i--)
    check(cg_allreduce(&b->node[i], b->graph, b->comm, b->buf[0][i], b->buf[0][i], b->count[i], CG_FLOAT32, CG_SUM),
          "cg_allreduce");
  for (int s = 0; s < 2; s++) {
    b->to[s] = xcalloc((size_t)b->k, sizeof *b->to[s]);
    for (int i = 0; i < b->k; i++) b->to[s][i] = (cg_rebind_t){b->node[i], b->buf[s][i], b->buf[s][i]};
  }
}

/* Element i of the set's arena, before the sum on rank r: (r + 1) * value(i). */
static float value(size_t i) { return (float)(1 + i % 7); }

/* Element i of set s := (rank + 1) * value(i) (device sets through a host copy). */
static void fill_set(bench_t *b, int s) {
  float *h = xcalloc(b->total, sizeof *h);
  for (size_t i = 0; i < b->total; i++) h[i] = (float)(world_rank + 1) * value(i);
  float *start = b->buf[s][b->k - 1]; /* the arena's first piece */
#if CG_BENCH_DEVICE
  if (b->device != CG_DEVICE_HOST) {
    CUDA_CHECK(cudaMemcpy(start, h, b->total * sizeof *h, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize()); /* done before the plan's own stream runs */
    free(h);
    return;
  }
#endif
  memcpy(start, h, b->total * sizeof *h);
  free(h);
}

/* 1 on every rank if every element of set s is the ranks' sum of fill_set. */
static int set_is_sum(bench_t *b, int s) {
  float *h = b->buf[s][b->k - 1], ranks_sum = (float)(world_size * (world_size + 1) / 2);
  float *copy = NULL;
#if CG_BENCH_DEVICE
  if (b->device != CG_DEVICE_HOST) {
    copy = xcalloc(b->total, sizeof *copy);
    CUDA_CHECK(cudaMemcpy(copy, h, b->total * sizeof *copy, cudaMemcpyDeviceToHost));
    h = copy;
  }
#endif
  int ok = 1;
  for (size_t i = 0; i < b->total && ok; i++) {
    ok = h[i] == ranks_sum * value(i);
    if (!ok)
      fprintf(stderr, "rank %d: %s plan, set %c: element %zu of the arena is %g, expected %g\n", world_rank,
              b->device == CG_DEVICE_HOST ? "host" : "device", 'A' + s, i, (double)h[i],
              (double)(ranks_sum * value(i)));
  }
  free(copy);
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

/* One replay, complete on return (a device plan too: on a stream it owns). */
static void run_once(bench_t *b) { check(cg_plan_run(b->plan), "cg_plan_run"); }

/* The plan must not be running when it is rebound: device work done. */
static void quiesce(const bench_t *b) {
#if CG_BENCH_DEVICE
  if (b->device != CG_DEVICE_HOST) CUDA_CHECK(cudaDeviceSynchronize());
#else
  (void)b;
#endif
}

static double timed_rebind(bench_t *b, const cg_rebind_t *binds, size_t n) {
  quiesce(b);
  double t0 = MPI_Wtime();
  check(cg_plan_rebind(b->plan, binds, n), "cg_plan_rebind");
  return MPI_Wtime() - t0;
}

static result_t measure(bench_t *b, int rounds) {
  result_t r;
  memset(&r, 0, sizeof r);
  make_sets(b);
  record(b);
  check(cg_compile(&b->plan, b->graph, NULL), "cg_compile");
  check(cg_plan_stats(&r.stats, b->plan), "cg_plan_stats");
  double *compile = xcalloc((size_t)rounds, sizeof *compile), *all = xcalloc(2 * (size_t)rounds, sizeof *all);
  double *one = xcalloc(2 * (size_t)rounds, sizeof *one);
  /* one warm-up of each, not counted */
  check(cg_plan_rebind(b->plan, b->to[1], (size_t)b->k), "cg_plan_rebind");
  check(cg_plan_rebind(b->plan, b->to[0], (size_t)b->k), "cg_plan_rebind");
  for (int round = 0; round < rounds; round++) {
    cg_plan_t *again = NULL;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    check(cg_compile(&again, b->graph, NULL), "cg_compile");
    compile[round] = MPI_Wtime() - t0;
    cg_plan_destroy(again);

    all[2 * round] = timed_rebind(b, b->to[1], (size_t)b->k);
    if (round == 0) check(cg_plan_stats(&r.stats_rebound, b->plan), "cg_plan_stats");
    all[2 * round + 1] = timed_rebind(b, b->to[0], (size_t)b->k);

    int j = (int)(((size_t)round * 37u) % (size_t)b->k);
    one[2 * round] = timed_rebind(b, &b->to[1][j], 1);
    if (round == 0) check(cg_plan_stats(&r.stats_one, b->plan), "cg_plan_stats");
    one[2 * round + 1] = timed_rebind(b, &b->to[0][j], 1);
  }
  r.compile = slowest_median(compile, rounds);
  r.all = slowest_median(all, 2 * rounds);
  r.one = slowest_median(one, 2 * rounds);
  free(compile);
  free(all);
  free(one);

  /* the plan still computes: on set A, then rebound to set B */
  fill_set(b, 0);
  run_once(b);
  int ok = set_is_sum(b, 0);
  quiesce(b);
  check(cg_plan_rebind(b->plan, b->to[1], (size_t)b->k), "cg_plan_rebind");
  fill_set(b, 1);
  run_once(b);
  r.checked = ok && set_is_sum(b, 1);

  cg_plan_destroy(b->plan);
  cg_graph_destroy(b->graph);
  for (int s = 0; s < 2; s++) {
    cg_arena_destroy(b->arena[s]);
    free(b->buf[s]);
    free(b->to[s]);
  }
  free(b->node);
  return r;
}

static void print_header(void) {
  printf("%-7s %7s %6s %10s %10s %12s %13s %12s %11s %12s %12s\n", "plan", "buckets", "fused", "copies all",
         "copies one", "compile", "rebind all", "per node", "rebind one", "compile/all", "compile/one");
}

static void print_row(const char *name, const result_t *r, int k) {
  printf("%-7s %7zu %6zu %10zu %10zu %9.3f ms %10.1f us %9.2f us %8.1f us %11.1fx %11.1fx%s\n", name,
         r->stats.buckets, r->stats.fused_nodes, r->stats_rebound.copy_bytes, r->stats_one.copy_bytes,
         r->compile * 1e3, r->all * 1e6, r->all * 1e6 / k, r->one * 1e6, r->compile / r->all, r->compile / r->one,
         r->checked ? "" : "  RESULTS WRONG");
  fflush(stdout);
}

static void usage(const char *argv0) {
  if (world_rank == 0)
    fprintf(stderr,
            "usage: mpiexec -n N %s [WORKLOAD.txt] [--rounds 1..%d] [--scale S] [--smoke]\n"
            "  --smoke: short: 1 round (unless --rounds); exits 77 after the host row where the device row\n"
            "           cannot run (a test)\n",
            argv0, MAX_ROUNDS);
  MPI_Finalize();
  exit(2);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const char *path = CG_BENCH_WORKLOADS "/resnet50.txt";
  int rounds = 0, smoke = 0; /* rounds 0: not given */
  long scale = 1;
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = (int)strtol(argv[++i], &end, 10);
      if (*end || rounds < 1 || rounds > MAX_ROUNDS) usage(argv[0]);
    } else if (!strcmp(argv[i], "--scale") && i + 1 < argc) {
      scale = strtol(argv[++i], &end, 10);
      if (*end || scale < 1) usage(argv[0]);
    } else if (!strcmp(argv[i], "--smoke")) {
      smoke = 1;
    } else if (argv[i][0] != '-') {
      path = argv[i];
    } else {
      usage(argv[0]);
    }
  }
  if (!rounds) rounds = smoke ? 1 : 9;
  size_t *count = NULL;
  int k = read_counts(path, &count);
  size_t total = 0;
  for (int i = 0; i < k; i++) {
    count[i] = count[i] / (size_t)scale ? count[i] / (size_t)scale : 1;
    total += count[i];
  }
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (world_rank == 0) {
    printf("bench_rebind: %d ranks; workload %s: %d tensors, %zu float32 (%.1f MB)%s; in-place sum allreduces over "
           "an arena, fusion on (unless CG_FUSION=0); median of %d rounds, slowest rank\n", world_size, base, k, total,
           (double)total * 4 / 1e6, scale > 1 ? " after --scale" : "", rounds);
    printf("compile: a full cg_compile; rebind all: every node to the other arena (and back); rebind one: one node "
           "to its place there (and back); copies: copy_bytes per run with every node, or one node, moved\n");
    print_header();
    fflush(stdout);
  }

  bench_t host = {.device = CG_DEVICE_HOST, .k = k, .count = count, .total = total};
  check(cg_comm_create(&host.comm, MPI_COMM_WORLD, NULL), "cg_comm_create (host)");
  result_t hr = measure(&host, rounds);
  cg_comm_destroy(host.comm);
  if (world_rank == 0) print_row("host", &hr, k);
  int wrong = !hr.checked, status = 0; /* the same on every rank: set_is_sum agrees */

#if CG_BENCH_DEVICE
  int nodes = 0;
  int device = cg_bench_pick_gpu("bench_rebind (device row)", &nodes);
  if (device >= 0) {
    bench_t dev = {.device = device, .k = k, .count = count, .total = total};
    cg_comm_opts_t o = CG_COMM_OPTS_INIT;
    o.backend = CG_BACKEND_NCCL;
    o.device = device;
    check(cg_comm_create(&dev.comm, MPI_COMM_WORLD, &o), "cg_comm_create (NCCL)");
    result_t dr = measure(&dev, rounds);
    cg_comm_destroy(dev.comm);
    if (world_rank == 0) print_row("device", &dr, k);
    wrong |= !dr.checked;
  } else {
    if (world_rank == 0) printf("device rows skipped (see the line above)\n");
    status = cg_bench_no_gpu_status("bench_rebind", "no device row: not every rank has a GPU of its own",
                                    world_rank, smoke);
  }
#else
  if (world_rank == 0) printf("device rows skipped: this build has no CUDA or no NCCL\n");
  status = cg_bench_no_gpu_status("bench_rebind", "no device row: this build has no CUDA or no NCCL", world_rank,
                                  smoke);
#endif
  if (wrong) {
    if (world_rank == 0) fprintf(stderr, "bench_rebind: RESULTS WRONG: a plan summed wrongly (see above)\n");
    status = 1;
  }
  free(count);
  MPI_Finalize();
  return status;
}
