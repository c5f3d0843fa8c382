/* Replaying a device plan (NCCL backend, one CUDA graph) against calling NCCL
 * directly for the same operations, side by side in one run:
 *
 *   mpiexec -n 4 build/tests/perf/bench_nccl_plan [--max-mb MB] [--rounds R] [--smoke]
 *
 * One MPI rank per GPU; each rank takes the GPU numbered by its rank on its
 * node (MPI_Comm_split_type). The direct calls use the NCCL communicator
 * underneath the commgraph one (cg_comm_nccl), on the same stream the plan is
 * launched on, so both sides run the same NCCL channels and algorithms.
 *
 * a) Large: one float32 sum allreduce of 256 MB, 512 MB and 1 GB per rank
 *    (--max-mb lowers the largest, or raises it by doubling; below 256 it is the
 *    only size): ncclAllReduce on a stream vs cg_plan_launch of a plan holding
 *    that one allreduce. Time per op and bus bandwidth
 *    (busbw = 2(n-1)/n x bytes / time), and plan/NCCL busbw (target >= 0.98).
 * b) Small: k = 1, 8, 32, 128 allreduces of 1 KB (256 floats, separate
 *    buffers): eager (k ncclAllReduce calls back to back), NCCL group
 *    (ncclGroupStart/End around them) and replayed (one plan of k independent
 *    allreduce nodes, launched once); per-op time, eager/replayed and
 *    group/replayed. Then one
 *    4-byte allreduce: the cost of replaying an almost empty plan, against
 *    the floor of any replay (a graph of the benchmark's holding one 4-byte
 *    cudaMemsetAsync, launched the same way, its result checked).
 * c) The watchdog's cost: 8 allreduces of 1 KB and one of 4 bytes, the plan
 *    compiled without a timeout, with one (60 s: progress marks, and the
 *    monitor thread following the replays) and fingerprint 0, and with one
 *    and the default fingerprint (an allgather of 16 bytes and a check kernel
 *    before the steps), launched with cg_plan_launch and
 *    embedded in a CUDA graph of the benchmark's (captured around
 *    cg_plan_launch, replayed with cudaGraphLaunch: the plan's lock, and with
 *    the timeout the lock's counts the monitor reads); per-replay time of
 *    each and watched/unwatched (the bound: 1.00, no cost). Then the same
 *    three plans replayed with cg_plan_run, one replay waited for at a time
 *    (timed on the host's clock, the slowest rank's): the watched plans'
 *    waits poll, and their replays are listed with the monitor thread.
 * d) Symmetric memory (issue 25): k = 1, 8, 128 allreduces of 1 KB and one
 *    each of 16, 64 and 256 KB, out of place: captured in one graph of the benchmark's on
 *    separate buffers and on a symmetric window of the program's
 *    communicator (ncclMemAlloc, ncclCommWindowRegister), and the plan on
 *    separate buffers (packed), over a cg_arena (zero-copy) and over a
 *    cg_nccl_arena_create arena; the last one's ratio to NCCL captured (the
 *    row's, and one 1 KB allreduce's: issue 25's yardsticks). Without peer
 *    access NCCL registers a window as ordinary memory and runs its usual
 *    kernels: the symmetric columns cannot tell.
 * e) Mid-sized allreduces (64 KB .. 16 MB, one float32 sum, out of place):
 *    NCCL captured in a graph of the benchmark's, the plan (commgraph's
 *    one-shot or two-shot kernel where its communicator measured them faster,
 *    the path named from its DOT) and the same plan on a second commgraph
 *    communicator whose own kernels are off (CG_ONESHOT_MAX_BYTES and
 *    CG_TWOSHOT_MAX_BYTES 0 for its first compile: NCCL's kernels); time per
 *    allreduce, busbw, plan/captured.
 *
 * Timing: cudaEvents on the stream around a batch of launches, after warm-up.
 * Modes are interleaved batch by batch, each figure is the median over rounds
 * of the slowest rank's time, because these machines are noisy. Every mode's
 * result is checked once before timing (part b's floor, its memset, after
 * it), and the plan's again after it (in
 * parts c and d every mode's; integer-valued floats against the ranks' sum); a
 * wrong result prints "WRONG" and exits non-zero, as does any error. Only
 * rank 0 prints. Without a GPU for every rank it says why and exits 0: this is
 * a benchmark, not a test.
 *
 * --smoke (tests/perf/CMakeLists.txt runs it so): a) at 4 MB only (unless
 * --max-mb), b) to e) every row, 1 round (unless --rounds) of 2 iterations
 * per batch; without a
 * GPU for every rank it exits 77 (ctest's skip), or 1 where CG_REQUIRE_GPU is
 * set. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph.h"
#include "commgraph/cuda.h"
#include "commgraph/mpi.h"
#include "commgraph/nccl.h"
#include "bench_smoke.h"
#include "gpu_bench.h"

#define MAX_ROUNDS 101
#define MAX_SMALL_OPS 128
#define SMALL_COUNT 256 /* floats: 1 KB */

static int rank, ranks;
static int smoke_iters; /* --smoke: iterations per batch; 0: each part's own */

/* ---- what one batch does */

/* _MARKS: compiled with a timeout and fingerprint 0 (the watchdog's progress
 * marks alone); _WATCHED: with a timeout and the default fingerprint */
/* CAPTURED(_SYMMETRIC): the k ncclAllReduce calls captured once in a graph of
 * the benchmark's, on plain buffers (on a symmetric window of the program's
 * communicator); PLAN_ARENA, PLAN_SYMMETRIC: the plan over a cg_arena and
 * over a cg_nccl_arena_create arena */
/* FLOOR: a graph of the benchmark's holding one 4-byte cudaMemsetAsync,
 * what launching any graph costs */
enum { DIRECT, GROUPED, PLAN, PLAN_MARKS, PLAN_WATCHED, EMBEDDED, EMBEDDED_MARKS, EMBEDDED_WATCHED, CAPTURED,
       CAPTURED_SYMMETRIC, PLAN_ARENA, PLAN_SYMMETRIC, FLOOR, PLAN_NCCL_KERNELS, N_MODES };
static const char *const mode_names[] = {"direct NCCL",   "NCCL group",    "plan",
                                         "plan, marks",   "plan, watched", "embedded plan",
                                         "embedded plan, marks", "embedded plan, watched", "NCCL captured",
                                         "NCCL captured, symmetric window", "plan over an arena",
                                         "plan over a symmetric arena", "a graph of one memset",
                                         "plan on NCCL's kernels"};
_Static_assert(sizeof mode_names / sizeof *mode_names == N_MODES, "a name per mode");

typedef struct work {
  int mode;
  int ops; /* allreduces per iteration */
  float *send[MAX_SMALL_OPS], *recv[MAX_SMALL_OPS];
  size_t count;
  ncclComm_t nccl;
  cg_plan_t *plan; /* holds the same `ops` allreduces */
  cg_plan_t *watched[2]; /* PLAN_MARKS, PLAN_WATCHED: the same, compiled with a timeout */
  cudaGraphExec_t embedding[3]; /* EMBEDDED, EMBEDDED_MARKS, EMBEDDED_WATCHED: graphs that hold such plans */
  cudaGraphExec_t captured[2];  /* CAPTURED, CAPTURED_SYMMETRIC */
  cg_plan_t *in_arena[2];       /* PLAN_ARENA, PLAN_SYMMETRIC */
  cudaGraphExec_t floor;        /* FLOOR */
  cg_plan_t *nccl_kernels;      /* PLAN_NCCL_KERNELS */
} work_t;

static void one_iteration(const work_t *w, cudaStream_t stream) {
  switch (w->mode) {
    case DIRECT:
      for (int k = 0; k < w->ops; k++)
        NCCL_CHECK_ON(w->nccl, ncclAllReduce(w->send[k], w->recv[k], w->count, ncclFloat32, ncclSum, w->nccl, stream));
      break;
    case GROUPED:
      NCCL_CHECK(ncclGroupStart());
      for (int k = 0; k < w->ops; k++)
        NCCL_CHECK(ncclAllReduce(w->send[k], w->recv[k], w->count, ncclFloat32, ncclSum, w->nccl, stream));
      NCCL_CHECK_ON(w->nccl, ncclGroupEnd());
      break;
    case PLAN_MARKS:
    case PLAN_WATCHED:
      CG_CHECK(cg_plan_launch(w->watched[w->mode == PLAN_WATCHED], stream));
      break;
    case EMBEDDED:
    case EMBEDDED_MARKS:
    case EMBEDDED_WATCHED:
      CUDA_CHECK(cudaGraphLaunch(w->embedding[w->mode - EMBEDDED], stream));
      break;
    case CAPTURED:
    case CAPTURED_SYMMETRIC:
      CUDA_CHECK(cudaGraphLaunch(w->captured[w->mode - CAPTURED], stream));
      break;
    case PLAN_ARENA:
    case PLAN_SYMMETRIC:
      CG_CHECK(cg_plan_launch(w->in_arena[w->mode - PLAN_ARENA], stream));
      break;
    case FLOOR:
      CUDA_CHECK(cudaGraphLaunch(w->floor, stream));
      break;
    case PLAN_NCCL_KERNELS:
      CG_CHECK(cg_plan_launch(w->nccl_kernels, stream));
      break;
    default:
      CG_CHECK(cg_plan_launch(w->plan, stream));
      break;
  }
}

/* Enqueues `iters` iterations between two events and returns the slowest
 * rank's seconds per iteration. The allreduce of the result lines the ranks up
 * for the next batch. */
static double time_batch(const work_t *w, int iters, cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop) {
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; i++) one_iteration(w, stream);
  CUDA_CHECK(cudaEventRecord(stop, stream));
  return cg_bench_slowest_per_iter(start, stop, iters);
}

/* Runs every mode in `modes` for `rounds` rounds, interleaved, after two
 * warm-up iterations of each; med[m] is the median seconds per iteration. */
static void time_modes(work_t *w, const int *modes, int n_modes, int iters, int rounds, cudaStream_t stream,
                       cudaEvent_t start, cudaEvent_t stop, double *med) {
  static double t[N_MODES][MAX_ROUNDS];
  for (int m = 0; m < n_modes; m++) {
    w->mode = modes[m];
    time_batch(w, 2, stream, start, stop);
  }
  for (int r = 0; r < rounds; r++)
    for (int m = 0; m < n_modes; m++) {
      w->mode = modes[m];
      t[m][r] = time_batch(w, iters, stream, start, stop);
    }
  for (int m = 0; m < n_modes; m++) med[m] = cg_bench_median(t[m], rounds);
}

/* ---- checking a plan's result once */

static long long wrong;

/* Fills `n` floats of send buffer `buf` (device) with (rank + 1) * (1 + (i + salt) % 8). */
static void fill(float *buf, size_t n, size_t salt, float *host) {
  for (size_t i = 0; i < n; i++) host[i] = (float)(rank + 1) * (float)(1 + (i + salt) % 8);
  CUDA_CHECK(cudaMemcpy(buf, host, n * sizeof *host, cudaMemcpyHostToDevice));
}

/* Compares `n` floats of result buffer `buf` (device) with the ranks' sum of fill(salt). */
static void expect_sum(const float *buf, size_t n, size_t salt, float *host, const char *what) {
  CUDA_CHECK(cudaMemcpy(host, buf, n * sizeof *host, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) {
    float want = (float)(ranks * (ranks + 1) / 2) * (float)(1 + (i + salt) % 8);
    if (host[i] != want && wrong++ < 5)
      fprintf(stderr, "rank %d: %s: element %zu is %g, expected %g\n", rank, what, i, (double)host[i], (double)want);
  }
}

/* Aborts the job, after "WRONG" on rank 0, if any rank found a wrong value. */
static void all_checked(const char *what, int mode, const char *when) {
  long long all = 0;
  MPI_Allreduce(&wrong, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (all) {
    if (rank == 0) fprintf(stderr, "bench_nccl_plan: WRONG results %s: %s, %s computed %lld wrong values\n", when,
                           what, mode_names[mode], all);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Puts NaN in w's `ops` result buffers, runs one iteration of `mode` and waits.
 * The device synchronization orders the fills and the memsets (legacy default
 * stream) before the launch on `stream`, a non-blocking one. */
static void run_for_check(work_t *w, int mode, cudaStream_t stream) {
  for (int k = 0; k < w->ops; k++) CUDA_CHECK(cudaMemset(w->recv[k], 0xff, w->count * sizeof(float)));
  CUDA_CHECK(cudaDeviceSynchronize());
  w->mode = mode;
  one_iteration(w, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

/* A plan of `ops` independent float32 sum allreduces of `count` elements,
 * with the replay watchdog's timeout `timeout_s` (negative: none, whatever CG_TIMEOUT says) and, with one,
 * the replay's fingerprint or not. */
static cg_plan_t *compile_watched(cg_comm_t *comm, float **send, float **recv, int ops, size_t count, double timeout_s,
                                  int fingerprint, size_t *steps) {
  cg_graph_t *g;
  cg_plan_t *plan;
  CG_CHECK(cg_graph_create(&g, NULL));
  for (int k = 0; k < ops; k++) CG_CHECK(cg_allreduce(NULL, g, comm, send[k], recv[k], count, CG_FLOAT32, CG_SUM));
  cg_compile_opts_t co = CG_COMPILE_OPTS_INIT;
  co.timeout_s = timeout_s;
  co.fingerprint = fingerprint;
  CG_CHECK(cg_compile(&plan, g, &co));
  cg_graph_destroy(g);
  cg_plan_stats_t ps;
  CG_CHECK(cg_plan_stats(&ps, plan));
  *steps = ps.steps;
  return plan;
}

static cg_plan_t *compile_allreduces(cg_comm_t *comm, float **send, float **recv, int ops, size_t count,
                                     size_t *steps) {
  return compile_watched(comm, send, recv, ops, count, -1, 0, steps); /* never watched, whatever CG_TIMEOUT says */
}

/* ---- a) one large allreduce */

static void bench_large(cg_comm_t *comm, ncclComm_t nccl, size_t max_mb, int rounds, cudaStream_t stream,
                        cudaEvent_t start, cudaEvent_t stop) {
  float *host = malloc(((size_t)1 << 18) * sizeof *host);
  if (!host) cg_bench_fail("malloc", "out of memory");
  if (rank == 0) {
    printf("\na) one large float32 sum allreduce, out of place: ncclAllReduce vs cg_plan_launch of a plan holding it\n");
    printf("%10s %6s %14s %14s %14s %14s %10s\n", "MB/rank", "iters", "NCCL time", "plan time", "NCCL busbw",
           "plan busbw", "plan/NCCL");
  }
  for (size_t mb = max_mb < 256 ? max_mb : 256; mb <= max_mb; mb *= 2) {
    size_t bytes = mb << 20, count = bytes / sizeof(float);
    size_t check_count = count / 2 < ((size_t)1 << 18) ? count / 2 : (size_t)1 << 18; /* up to 1 MB at each end */
    work_t w = {.ops = 1, .count = count, .nccl = nccl};
    CUDA_CHECK(cudaMalloc((void **)&w.send[0], bytes));
    CUDA_CHECK(cudaMalloc((void **)&w.recv[0], bytes));
    size_t steps;
    w.plan = compile_allreduces(comm, w.send, w.recv, 1, count, &steps);

    /* check each mode: known values at both ends, zeros between, NaN in the result */
    const int modes[] = {DIRECT, PLAN};
    CUDA_CHECK(cudaMemset(w.send[0], 0, bytes));
    fill(w.send[0], check_count, 0, host);
    fill(w.send[0] + count - check_count, check_count, 1, host);
    for (int m = 0; m < 2; m++) {
      run_for_check(&w, modes[m], stream);
      expect_sum(w.recv[0], check_count, 0, host, "large allreduce, head");
      expect_sum(w.recv[0] + count - check_count, check_count, 1, host, "large allreduce, tail");
      all_checked("large allreduce", modes[m], "before timing");
    }

    /* about 40 ms per batch at 360 GB/s busbw on 4 ranks */
    int iters = (int)(((size_t)8 << 30) / bytes);
    if (iters < 4) iters = 4;
    if (iters > 200) iters = 200;
    if (smoke_iters) iters = smoke_iters;
    double med[2];
    time_modes(&w, modes, 2, iters, rounds, stream, start, stop, med);
    /* the plan ran last: its results, after every replay */
    expect_sum(w.recv[0], check_count, 0, host, "large allreduce, head");
    expect_sum(w.recv[0] + count - check_count, check_count, 1, host, "large allreduce, tail");
    all_checked("large allreduce", PLAN, "after timing");
    double factor = 2.0 * (ranks - 1) / ranks * (double)bytes / 1e9;
    double busbw_nccl = factor / med[0], busbw_plan = factor / med[1];
    if (rank == 0) {
      printf("%10zu %6d %11.1f us %11.1f us %9.1f GB/s %9.1f GB/s %10.3f\n", mb, iters, med[0] * 1e6, med[1] * 1e6,
             busbw_nccl, busbw_plan, ranks > 1 ? busbw_plan / busbw_nccl : med[0] / med[1]);
      fflush(stdout);
    }
    cg_plan_destroy(w.plan);
    CUDA_CHECK(cudaFree(w.send[0]));
    CUDA_CHECK(cudaFree(w.recv[0]));
  }
  free(host);
}

/* ---- b) small allreduces */

static void bench_small(cg_comm_t *comm, ncclComm_t nccl, int rounds, cudaStream_t stream, cudaEvent_t start,
                        cudaEvent_t stop) {
  float host[SMALL_COUNT];
  work_t w = {.count = SMALL_COUNT, .nccl = nccl};
  for (int k = 0; k < MAX_SMALL_OPS; k++) {
    CUDA_CHECK(cudaMalloc((void **)&w.send[k], SMALL_COUNT * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&w.recv[k], SMALL_COUNT * sizeof(float)));
  }
  if (rank == 0) {
    printf("\nb) k independent float32 sum allreduces of 1 KB each (separate buffers), time per allreduce\n");
    printf("%6s %6s %6s %14s %14s %14s %14s %12s\n", "bytes", "k", "steps", "eager", "NCCL group", "replayed",
           "eager/replay", "group/replay");
  }
  /* the floor: one 4-byte memset of the rank's number into `mark`, captured */
  int *mark = NULL, got = -1;
  cudaGraph_t floor_graph;
  CUDA_CHECK(cudaMalloc((void **)&mark, sizeof *mark));
  CUDA_CHECK(cudaMemset(mark, 0xff, sizeof *mark));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CUDA_CHECK(cudaMemsetAsync(mark, rank + 1, sizeof *mark, stream));
  CUDA_CHECK(cudaStreamEndCapture(stream, &floor_graph));
  CUDA_CHECK(cudaGraphInstantiate(&w.floor, floor_graph, 0));
  CUDA_CHECK(cudaGraphDestroy(floor_graph));
  const int ks[] = {1, 8, 32, 128, 1}; /* the last: one 4-byte allreduce, an almost empty plan */
  for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
    int last = i + 1 == sizeof ks / sizeof *ks;
    w.ops = ks[i];
    w.count = last ? 1 : SMALL_COUNT;
    size_t steps;
    w.plan = compile_allreduces(comm, w.send, w.recv, w.ops, w.count, &steps);
    const int modes[] = {DIRECT, GROUPED, PLAN, FLOOR};
    int n_modes = last ? 4 : 3;
    for (int k = 0; k < w.ops; k++) fill(w.send[k], w.count, (size_t)k, host);
    for (int m = 0; m < 3; m++) {
      run_for_check(&w, modes[m], stream);
      for (int k = 0; k < w.ops; k++) expect_sum(w.recv[k], w.count, (size_t)k, host, "small allreduce");
      all_checked(last ? "one 4-byte allreduce" : "small allreduces", modes[m], "before timing");
    }

    /* about 2000 allreduces per batch, at least 20 iterations */
    int iters = 2000 / w.ops;
    if (iters < 20) iters = 20;
    if (smoke_iters) iters = smoke_iters;
    double med[4];
    time_modes(&w, modes, n_modes, iters, rounds, stream, start, stop, med);
    for (int k = 0; k < w.ops; k++) expect_sum(w.recv[k], w.count, (size_t)k, host, "small allreduce");
    all_checked(last ? "one 4-byte allreduce" : "small allreduces", PLAN, "after timing");
    if (last) {
      int want = (rank + 1) * 0x01010101;
      CUDA_CHECK(cudaMemcpy(&got, mark, sizeof got, cudaMemcpyDeviceToHost));
      if (got != want && wrong++ < 5)
        fprintf(stderr, "rank %d: the floor's memset left %#x, not %#x\n", rank, got, want);
      all_checked("a graph of one memset", FLOOR, "after timing");
    }
    if (rank == 0) {
      if (last) printf("  an almost empty plan:\n");
      printf("%6zu %6d %6zu %11.2f us %11.2f us %11.2f us %14.2f %12.2f\n", w.count * sizeof(float), w.ops, steps,
             med[0] * 1e6 / w.ops, med[1] * 1e6 / w.ops, med[2] * 1e6 / w.ops, med[0] / med[2], med[1] / med[2]);
      if (last)
        printf("  the floor, a graph of one 4-byte cudaMemsetAsync launched the same way: %.2f us; the plan's replay "
               "beyond it (its collective included): %.2f us\n", med[3] * 1e6, (med[2] - med[3]) * 1e6);
      fflush(stdout);
    }
    cg_plan_destroy(w.plan);
  }
  for (int k = 0; k < MAX_SMALL_OPS; k++) {
    CUDA_CHECK(cudaFree(w.send[k]));
    CUDA_CHECK(cudaFree(w.recv[k]));
  }
  CUDA_CHECK(cudaGraphExecDestroy(w.floor));
  CUDA_CHECK(cudaFree(mark));
}

/* ---- c) what the watchdog costs a replay */

/* A graph of the benchmark's holding the plan (captured around
 * cg_plan_launch), instantiated. */
static cudaGraphExec_t embedding_of(cg_plan_t *plan, cudaStream_t stream) {
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CG_CHECK(cg_plan_launch(plan, stream));
  return cg_bench_end_capture(stream);
}

/* c) cg_plan_run of plans[0..2] (unwatched, marks, watched), their results
 * checked, then `rounds` batches of `iters` runs each, interleaved: med[p]
 * is the median seconds per run, the slowest rank's. */
static void time_runs(cg_plan_t *const *plans, const work_t *w, int iters, int rounds, double *med) {
  float host[SMALL_COUNT];
  double t[3][MAX_ROUNDS];
  for (int p = 0; p < 3; p++) {
    for (int k = 0; k < w->ops; k++) CUDA_CHECK(cudaMemset(w->recv[k], 0xff, w->count * sizeof(float)));
    CUDA_CHECK(cudaDeviceSynchronize());
    CG_CHECK(cg_plan_run(plans[p]));
    for (int k = 0; k < w->ops; k++) expect_sum(w->recv[k], w->count, (size_t)k, host, "watchdog allreduces, run");
    all_checked("watchdog allreduces run with cg_plan_run", p ? PLAN_MARKS + p - 1 : PLAN, "before timing");
    CG_CHECK(cg_plan_run(plans[p])); /* warm */
  }
  for (int r = 0; r < rounds; r++)
    for (int p = 0; p < 3; p++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double began = MPI_Wtime();
      for (int i = 0; i < iters; i++) CG_CHECK(cg_plan_run(plans[p]));
      double mine = (MPI_Wtime() - began) / iters, slowest = 0;
      MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t[p][r] = slowest;
    }
  for (int p = 0; p < 3; p++) med[p] = cg_bench_median(t[p], rounds);
}

static void bench_watchdog(cg_comm_t *comm, ncclComm_t nccl, int rounds, cudaStream_t stream, cudaEvent_t start,
                           cudaEvent_t stop) {
  const double timeout_s = 60;
  float host[SMALL_COUNT];
  work_t w = {.count = SMALL_COUNT, .nccl = nccl};
  for (int k = 0; k < 8; k++) {
    CUDA_CHECK(cudaMalloc((void **)&w.send[k], SMALL_COUNT * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&w.recv[k], SMALL_COUNT * sizeof(float)));
  }
  if (rank == 0) {
    printf("\nc) the replay watchdog's cost: the same plan without a timeout, with one (%g s) and fingerprint 0 "
           "(+ marks), and with one and the default fingerprint (+ fprint), launched and embedded in a graph of the "
           "benchmark's; time per replay and its ratio to the unwatched plan's (bound: 1.00)\n", timeout_s);
    printf("%6s %3s %10s %10s %6s %10s %6s %10s %10s %6s %10s %6s %10s\n", "bytes", "k", "launched", "+ marks",
           "ratio", "+ fprint", "ratio", "embedded", "+ marks", "ratio", "+ fprint", "ratio", "eager NCCL");
  }
  const int ks[] = {8, 1};
  for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
    w.ops = ks[i];
    w.count = w.ops == 1 ? 1 : SMALL_COUNT;
    size_t steps;
    w.plan = compile_watched(comm, w.send, w.recv, w.ops, w.count, -1, 0, &steps);
    for (int f = 0; f < 2; f++) w.watched[f] = compile_watched(comm, w.send, w.recv, w.ops, w.count, timeout_s, f, &steps);
    cg_plan_t *embedded[3];
    for (int e = 0; e < 3; e++) {
      embedded[e] = compile_watched(comm, w.send, w.recv, w.ops, w.count, e ? timeout_s : -1, e == 2, &steps);
      w.embedding[e] = embedding_of(embedded[e], stream);
    }
    const int modes[] = {PLAN, PLAN_MARKS, PLAN_WATCHED, EMBEDDED, EMBEDDED_MARKS, EMBEDDED_WATCHED, DIRECT};
    const int n_modes = sizeof modes / sizeof *modes;
    for (int k = 0; k < w.ops; k++) fill(w.send[k], w.count, (size_t)k, host);
    for (int m = 0; m < n_modes; m++) {
      run_for_check(&w, modes[m], stream);
      for (int k = 0; k < w.ops; k++) expect_sum(w.recv[k], w.count, (size_t)k, host, "watchdog allreduces");
      all_checked("watchdog allreduces", modes[m], "before timing");
    }
    int iters = smoke_iters ? smoke_iters : 2000 / w.ops;
    double med[sizeof modes / sizeof *modes];
    time_modes(&w, modes, n_modes, iters, rounds, stream, start, stop, med);
    /* every mode writes the same buffers: each is checked once more on its own */
    for (int m = 0; m < n_modes; m++) {
      run_for_check(&w, modes[m], stream);
      for (int k = 0; k < w.ops; k++) expect_sum(w.recv[k], w.count, (size_t)k, host, "watchdog allreduces");
      all_checked("watchdog allreduces", modes[m], "after timing");
    }
    if (rank == 0) {
      printf("%6zu %3d %7.2f us %7.2f us %6.3f %7.2f us %6.3f %7.2f us %7.2f us %6.3f %7.2f us %6.3f %7.2f us\n",
             w.count * sizeof(float), w.ops, med[0] * 1e6, med[1] * 1e6, med[1] / med[0], med[2] * 1e6,
             med[2] / med[0], med[3] * 1e6, med[4] * 1e6, med[4] / med[3], med[5] * 1e6, med[5] / med[3],
             med[6] * 1e6);
      fflush(stdout);
    }
    cg_plan_t *run[3] = {w.plan, w.watched[0], w.watched[1]};
    double run_med[3];
    time_runs(run, &w, smoke_iters ? smoke_iters : 500 / w.ops + 50, rounds, run_med);
    if (rank == 0) {
      printf("%6s %3s %10s %10s %6s %10s %6s   (cg_plan_run, one replay waited for at a time)\n", "", "",
             "run", "+ marks", "ratio", "+ fprint", "ratio");
      printf("%6zu %3d %7.2f us %7.2f us %6.3f %7.2f us %6.3f\n", w.count * sizeof(float), w.ops, run_med[0] * 1e6,
             run_med[1] * 1e6, run_med[1] / run_med[0], run_med[2] * 1e6, run_med[2] / run_med[0]);
      fflush(stdout);
    }
    for (int e = 0; e < 3; e++) CUDA_CHECK(cudaGraphExecDestroy(w.embedding[e])); /* before the plans they hold */
    for (int e = 0; e < 3; e++) cg_plan_destroy(embedded[e]);
    cg_plan_destroy(w.plan);
    for (int f = 0; f < 2; f++) cg_plan_destroy(w.watched[f]);
  }
  for (int k = 0; k < 8; k++) {
    CUDA_CHECK(cudaFree(w.send[k]));
    CUDA_CHECK(cudaFree(w.recv[k]));
  }
}

/* ---- d) issue 25: small allreduces on symmetric memory */

/* `ops` send and `ops` receive buffers of `count` floats from one allocation
 * at `base`: the sends back to back, then the receives (zero-copy buckets). */
static void carve(float **send, float **recv, float *base, int ops, size_t count) {
  for (int k = 0; k < ops; k++) {
    send[k] = base + (size_t)k * count;
    recv[k] = base + ((size_t)ops + k) * count;
  }
}

/* The k ncclAllReduce calls of w (its send and recv) captured in a graph. */
static cudaGraphExec_t capture_allreduces(const work_t *w, cudaStream_t stream) {
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < w->ops; k++)
    NCCL_CHECK_ON(w->nccl, ncclAllReduce(w->send[k], w->recv[k], w->count, ncclFloat32, ncclSum, w->nccl, stream));
  return cg_bench_end_capture(stream);
}

static void bench_symmetric(cg_comm_t *comm, ncclComm_t nccl, int rounds, cudaStream_t stream, cudaEvent_t start,
                            cudaEvent_t stop) {
  enum { SETS = 4 }; /* plain cudaMalloc, arena, symmetric arena, the program's window */
  /* rows up to 128 x 1 KB, and single allreduces up to 256 KB (past the symmetric cut-over) */
  const size_t max_count = 65536, set_bytes = 2 * max_count * sizeof(float);
  float *host = malloc(max_count * sizeof *host), *in_window = NULL, *in_arena = NULL, *in_sym = NULL;
  float *plain_send[MAX_SMALL_OPS], *plain_recv[MAX_SMALL_OPS]; /* separate allocations: the plan packs */
  if (!host) cg_bench_fail("malloc", "out of memory");
  for (int k = 0; k < MAX_SMALL_OPS; k++) {
    CUDA_CHECK(cudaMalloc((void **)&plain_send[k], max_count * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&plain_recv[k], max_count * sizeof(float)));
  }
  cg_arena_t *arena = NULL, *sym_arena = NULL;
  cg_arena_opts_t ao = CG_ARENA_OPTS_INIT;
  CG_CHECK(cg_comm_device(&ao.device, comm));
  CG_CHECK(cg_arena_create(&arena, set_bytes, &ao));
  CG_CHECK(cg_nccl_arena_create(&sym_arena, comm, set_bytes, NULL));
  CG_CHECK(cg_arena_alloc((void **)&in_arena, arena, set_bytes / sizeof(float), CG_FLOAT32));
  CG_CHECK(cg_arena_alloc((void **)&in_sym, sym_arena, set_bytes / sizeof(float), CG_FLOAT32));
  void *window = NULL;
  in_window = cg_bench_window_alloc(nccl, set_bytes, &window); /* on every rank or none */
  float *bases[SETS] = {NULL, in_arena, in_sym, in_window}; /* set 0: plain_send and plain_recv */
  size_t cut_over = 0;
  if (cg_nccl_arena_symmetric_max(&cut_over, sym_arena, CG_FLOAT32) != CG_SUCCESS) cut_over = 0;
  if (rank == 0) {
    printf("\nd) small float32 sum allreduces, out of place, on symmetric memory (issue 25): k of them per replay, "
           "us per replay: NCCL captured in one graph on separate buffers and on the program's symmetric window; the "
           "plan on separate buffers (packed), over a cg_arena (zero-copy) and over a cg_nccl_arena_create arena; "
           "ratios of the last to NCCL captured (the row's, and one 1 KB allreduce's); one-shot: the collectives of "
           "the three plans that take commgraph's one-shot kernel\n");
    printf("  the arena's float32 cut-over, measured when it was made: allreduces up to %zu bytes take NCCL's symmetric "
           "kernels, larger ones (a bucket counts whole) the plain kernels on the same memory\n", cut_over);
    printf("%6s %4s %10s %10s %10s %10s %10s %9s %9s   %s\n", "bytes", "k", "NCCL capt", "capt sym", "plan",
           "plan arena", "plan sym", "sym/capt", "/ 1 capt", "one-shot");
  }
  struct { int ops; size_t count; } rows[] = {{1, 256}, {1, 4096}, {1, 16384}, {1, 65536}, {8, 256}, {128, 256}};
  double one_captured = 0; /* the first row's NCCL captured: one 1 KB allreduce */
  for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
    work_t w = {.ops = rows[r].ops, .count = rows[r].count, .nccl = nccl};
    float *send[SETS][MAX_SMALL_OPS], *recv[SETS][MAX_SMALL_OPS];
    memcpy(send[0], plain_send, sizeof plain_send), memcpy(recv[0], plain_recv, sizeof plain_recv);
    for (int b = 1; b < SETS; b++)
      if (bases[b]) carve(send[b], recv[b], bases[b], w.ops, w.count);
    size_t steps;
    memcpy(w.send, send[0], sizeof send[0]), memcpy(w.recv, recv[0], sizeof recv[0]);
    w.plan = compile_allreduces(comm, send[0], recv[0], w.ops, w.count, &steps);
    w.captured[0] = capture_allreduces(&w, stream);
    w.in_arena[0] = compile_allreduces(comm, send[1], recv[1], w.ops, w.count, &steps);
    w.in_arena[1] = compile_allreduces(comm, send[2], recv[2], w.ops, w.count, &steps);
    if (in_window) {
      memcpy(w.send, send[3], sizeof send[3]), memcpy(w.recv, recv[3], sizeof recv[3]);
      w.captured[1] = capture_allreduces(&w, stream);
    }
    int modes[5] = {CAPTURED, CAPTURED_SYMMETRIC, PLAN, PLAN_ARENA, PLAN_SYMMETRIC}, n_modes = 0;
    int set_of[N_MODES] = {0};
    set_of[PLAN_ARENA] = 1, set_of[PLAN_SYMMETRIC] = 2, set_of[CAPTURED_SYMMETRIC] = 3;
    for (int m = 0; m < 5; m++)
      if (modes[m] != CAPTURED_SYMMETRIC || in_window) modes[n_modes++] = modes[m];
    /* each mode on its own buffers, filled, its outputs poisoned, checked before and after timing */
    for (int pass = 0; pass < 2; pass++) {
      for (int m = 0; m < n_modes; m++) {
        int b = set_of[modes[m]];
        memcpy(w.send, send[b], sizeof send[b]), memcpy(w.recv, recv[b], sizeof recv[b]);
        /* other values after timing: a stale result cannot pass */
        for (int k = 0; k < w.ops; k++) fill(w.send[k], w.count, (size_t)(k + pass), host);
        run_for_check(&w, modes[m], stream);
        for (int k = 0; k < w.ops; k++)
          expect_sum(w.recv[k], w.count, (size_t)(k + pass), host, "symmetric-memory allreduces");
        all_checked("symmetric-memory allreduces", modes[m], pass ? "after timing" : "before timing");
      }
      if (pass) break;
      int iters = smoke_iters ? smoke_iters : 2000 / w.ops > 20 ? 2000 / w.ops : 20;
      double med[5];
      time_modes(&w, modes, n_modes, iters, rounds, stream, start, stop, med);
      double by_mode[N_MODES] = {0};
      for (int m = 0; m < n_modes; m++) by_mode[modes[m]] = med[m];
      if (r == 0) one_captured = by_mode[CAPTURED];
      /* the collectives that took commgraph's one-shot kernel in each plan */
      int oneshot[3] = {cg_bench_dot_count(w.plan, "one-shot allreduce"),
                        cg_bench_dot_count(w.in_arena[0], "one-shot allreduce"),
                        cg_bench_dot_count(w.in_arena[1], "one-shot allreduce")};
      if (rank == 0) {
        char sym[16] = "       n/a";
        if (in_window) snprintf(sym, sizeof sym, "%7.2f us", by_mode[CAPTURED_SYMMETRIC] * 1e6);
        printf("%6zu %4d %7.2f us %s %7.2f us %7.2f us %7.2f us %9.3f %9.3f   %d/%d/%d\n", w.count * sizeof(float),
               w.ops, by_mode[CAPTURED] * 1e6, sym, by_mode[PLAN] * 1e6, by_mode[PLAN_ARENA] * 1e6,
               by_mode[PLAN_SYMMETRIC] * 1e6, by_mode[PLAN_SYMMETRIC] / by_mode[CAPTURED],
               one_captured > 0 ? by_mode[PLAN_SYMMETRIC] / one_captured : 0.0, oneshot[0], oneshot[1], oneshot[2]);
        fflush(stdout);
      }
    }
    cg_plan_destroy(w.plan);
    for (int a = 0; a < 2; a++) cg_plan_destroy(w.in_arena[a]);
    CUDA_CHECK(cudaGraphExecDestroy(w.captured[0]));
    if (w.captured[1]) CUDA_CHECK(cudaGraphExecDestroy(w.captured[1]));
  }
  cg_bench_window_free(nccl, in_window, window);
  cg_arena_destroy(sym_arena);
  cg_arena_destroy(arena);
  for (int k = 0; k < MAX_SMALL_OPS; k++) {
    CUDA_CHECK(cudaFree(plain_send[k]));
    CUDA_CHECK(cudaFree(plain_recv[k]));
  }
  free(host);
}

/* ---- e) mid-sized allreduces: commgraph's own kernels against NCCL's */

/* A second communicator over the same ranks whose first plan sees both of
 * commgraph's kernels off (the variables are read then, per communicator). */
static cg_comm_t *comm_on_nccl_kernels(int device) {
  ncclComm_t unused;
  cg_comm_t *second = cg_bench_nccl_comm(device, &unused);
  cg_bench_saved_env_t saved;
  cg_bench_own_kernels_off(&saved);
  float *buf;
  size_t steps;
  CUDA_CHECK(cudaMalloc((void **)&buf, 1024 * sizeof(float)));
  cg_plan_destroy(compile_allreduces(second, &buf, &buf, 1, 1024, &steps)); /* its first: the variables read */
  CUDA_CHECK(cudaFree(buf));
  cg_bench_restore_env(&saved);
  return second;
}

static void bench_mid(cg_comm_t *comm, ncclComm_t nccl, int device, int rounds, cudaStream_t stream,
                      cudaEvent_t start, cudaEvent_t stop) {
  const size_t max_count = (size_t)4 << 20; /* 16 MB */
  float *host = malloc(max_count * sizeof *host);
  if (!host) cg_bench_fail("malloc", "out of memory");
  cg_comm_t *second = comm_on_nccl_kernels(device);
  work_t w = {.ops = 1, .nccl = nccl};
  CUDA_CHECK(cudaMalloc((void **)&w.send[0], max_count * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&w.recv[0], max_count * sizeof(float)));
  if (rank == 0) {
    printf("\ne) one float32 sum allreduce of a mid size, out of place, time per allreduce: NCCL captured in a graph, "
           "the plan (commgraph's one-shot or two-shot kernel where its communicator measured them faster: path), "
           "the plan with both kernels off (NCCL's kernels); busbw of NCCL captured and of the plan\n");
    printf("%10s %10s %11s %11s %11s %10s %10s %10s\n", "bytes", "path", "NCCL capt", "plan", "plan NCCL", "plan/capt",
           "capt busbw", "plan busbw");
  }
  for (size_t count = 16384; count <= max_count; count *= 2) {
    if (count == 32768 || count == 131072) continue; /* 64 KB, 256 KB, then every doubling from 1 MB */
    w.count = count;
    size_t steps, bytes = count * sizeof(float);
    w.plan = compile_allreduces(comm, w.send, w.recv, 1, count, &steps);
    w.nccl_kernels = compile_allreduces(second, w.send, w.recv, 1, count, &steps);
    w.captured[0] = capture_allreduces(&w, stream);
    const int modes[] = {CAPTURED, PLAN, PLAN_NCCL_KERNELS};
    double med[3];
    for (int pass = 0; pass < 2; pass++) {
      for (int m = 0; m < 3; m++) {
        fill(w.send[0], count, (size_t)(m + pass), host); /* other values after timing: no stale pass */
        run_for_check(&w, modes[m], stream);
        expect_sum(w.recv[0], count, (size_t)(m + pass), host, "mid-sized allreduce");
        all_checked("mid-sized allreduce", modes[m], pass ? "after timing" : "before timing");
      }
      if (pass) break;
      int iters = (int)(((size_t)256 << 20) / bytes);
      iters = iters < 20 ? 20 : iters > 1000 ? 1000 : iters;
      if (smoke_iters) iters = smoke_iters;
      time_modes(&w, modes, 3, iters, rounds, stream, start, stop, med);
    }
    const char *path = cg_bench_dot_count(w.plan, "one-shot allreduce")   ? "one-shot"
                       : cg_bench_dot_count(w.plan, "two-shot allreduce") ? "two-shot"
                                                                          : "NCCL";
    double factor = 2.0 * (ranks - 1) / ranks * (double)bytes / 1e9;
    if (rank == 0) {
      printf("%10zu %10s %8.2f us %8.2f us %8.2f us %10.3f %5.1f GB/s %5.1f GB/s\n", bytes, path, med[0] * 1e6,
             med[1] * 1e6, med[2] * 1e6, med[1] / med[0], factor / med[0], factor / med[1]);
      fflush(stdout);
    }
    cg_plan_destroy(w.plan);
    cg_plan_destroy(w.nccl_kernels);
    CUDA_CHECK(cudaGraphExecDestroy(w.captured[0]));
  }
  CUDA_CHECK(cudaFree(w.send[0]));
  CUDA_CHECK(cudaFree(w.recv[0]));
  cg_comm_destroy(second);
  free(host);
}

/* ---- set-up */

static void usage(const char *argv0) {
  if (rank == 0)
    fprintf(stderr,
            "usage: mpiexec -n N %s [--max-mb MB] [--rounds 1..%d] [--parts LETTERS] [--smoke]\n"
            "  --parts: which parts to run, for instance c (default abcde)\n"
            "  --smoke: short: 4 MB (unless --max-mb), 1 round (unless --rounds) of 2 iterations per batch;\n"
            "           exits 77 without a GPU per rank (a test)\n",
            argv0, MAX_ROUNDS);
  MPI_Finalize();
  exit(2);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  size_t max_mb = 0; /* 0: not given */
  int rounds = 0, smoke = 0;
  const char *parts = "abcde";
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--max-mb") && i + 1 < argc) {
      max_mb = strtoull(argv[++i], &end, 10);
      if (*end || max_mb < 1) usage(argv[0]);
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = (int)strtol(argv[++i], &end, 10);
      if (*end || rounds < 1 || rounds > MAX_ROUNDS) usage(argv[0]);
    } else if (!strcmp(argv[i], "--parts") && i + 1 < argc) {
      parts = argv[++i];
      if (!parts[0] || strspn(parts, "abcde") != strlen(parts)) usage(argv[0]);
    } else if (!strcmp(argv[i], "--smoke")) {
      smoke = 1;
    } else {
      usage(argv[0]);
    }
  }
  if (!max_mb) max_mb = smoke ? 4 : 1024;
  if (!rounds) rounds = smoke ? 1 : 9;
  if (smoke) smoke_iters = 2;

  int nodes = 0, device = cg_bench_pick_gpu("bench_nccl_plan", &nodes);
  if (device < 0) {
    int status = cg_bench_no_gpu_status("bench_nccl_plan", "not every rank has a GPU of its own", rank, smoke);
    MPI_Finalize();
    return status;
  }

  ncclComm_t nccl;
  cg_comm_t *comm = cg_bench_nccl_comm(device, &nccl);

  cg_bench_print_setup("commgraph device plan vs direct NCCL", device, nodes, argc, argv);
  if (rank == 0) {
    printf("  each figure: median over %d rounds of the slowest rank's cudaEvent time per batch, modes "
           "interleaved\n",
           rounds);
    fflush(stdout);
  }

  cudaStream_t stream;
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));

  if (strchr(parts, 'a')) bench_large(comm, nccl, max_mb, rounds, stream, start, stop);
  if (strchr(parts, 'b')) bench_small(comm, nccl, rounds, stream, start, stop);
  if (strchr(parts, 'c')) bench_watchdog(comm, nccl, rounds, stream, start, stop);
  if (strchr(parts, 'd')) bench_symmetric(comm, nccl, rounds, stream, start, stop);
  if (strchr(parts, 'e')) bench_mid(comm, nccl, device, rounds, stream, start, stop);

  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaStreamDestroy(stream));
  cg_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
