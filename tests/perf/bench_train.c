/* bench_train: one data-parallel training iteration, a simulated backward pass
 * and its gradient all-reduces together, run the ways users run it today and
 * the way commgraph replays it, side by side in one run:
 *
 *   mpiexec -n N build/tests/perf/bench_train WORKLOAD.txt [--backward-ms 1,5,10] [--rounds R]
 *           [--iters I] [--bucket-mb 1,4,25] [--backend nccl|mpi-staged] [--trace DIR] [--smoke]
 *
 * WORKLOAD.txt lists one gradient tensor per line: its number of float32
 * elements (tests/perf/workloads/; cgb_read_workload). The backward pass is one
 * kernel per tensor, tensor n-1 first, each after the one before: it writes
 * its gradient ((rank + 1) x small integers, train_kernels.h), then spins on
 * %globaltimer until B x size_i / total after its start (so it takes B x its
 * share of the bytes, or its writes' time if that is longer), and stores its
 * start and end stamps in device memory: gradient ready times are measured
 * without events on the stream. 4 blocks of 256 threads per kernel, so NCCL
 * keeps its SMs. B (--backward-ms, default 1, 5 and 10 ms) is the spin time of
 * the whole pass. Modes, for each B, all timed in the same rounds:
 *
 *   1. backward alone: the kernels captured in one CUDA graph. Its time is the
 *      reference; its stamps give each gradient's ready time r (end of its
 *      kernel after the first kernel's start; slowest rank, median over rounds);
 *   2. communication alone: the allreduces of mode 4's buckets, no kernels,
 *      captured (the same for every B);
 *   3. DDP-style, copies: PyTorch DDP's buckets (tensors n-1 first; the first
 *      bucket closes at >= 1 MiB, later ones at >= 25 MiB); a communication
 *      stream waits (event) for a bucket's last kernel, copies each gradient
 *      into the flat bucket buffer (one cudaMemcpyAsync per tensor), runs
 *      ncclAllReduce on it and copies back; both streams, joined, captured in
 *      one CUDA graph;
 *   4. DDP-style, zero-copy: the same with the gradients inside the buckets;
 *   3s. (--backend mpi-staged only) DDP-style, staged: mode 4's buckets over
 *      MPI through host memory, as DDP on a host transport (Gloo's way for
 *      CUDA tensors) stages them: the communication stream copies a
 *      bucket into pinned memory, a host node runs MPI_Allreduce on it, the
 *      stream copies it back; captured in one CUDA graph. The DDP-style mode
 *      on the transport commgraph's mpi-staged backend uses;
 *   5. commgraph, default: one commgraph graph per iteration: per tensor (n-1
 *      first) a cg_child_graph node holding its kernel (declared writes: its
 *      gradient and stamps; a declared read and write of an "activation" word
 *      chains the kernels in order), then an in-place cg_allreduce of the
 *      gradient; gradients from a device cg_arena in record order (zero-copy
 *      buckets); compiled with the default options (fusion on, bucket_bytes 0:
 *      the library's choice); cg_plan_launch on one stream;
 *   5t. commgraph, tuned: mode 5's plan given to cg_plan_tune (5 profiling
 *      replays on the same stream) and compiled again with bucket boundaries
 *      from the measured ready times and collective costs (the fastest of
 *      the default and the model's boundaries at a few alpha scales); rank 0
 *      prints its "tune round" lines (each candidate's measured replay);
 *   5f. commgraph, tuned, from its tuning file: mode 5t's buckets compiled
 *      again from the tuning file it saves, with no timeout: what 5w and 5m
 *      are compared with (the same compile, the watchdog aside);
 *   5w. commgraph, tuned and watched: mode 5t's buckets (from its tuning
 *      file) compiled with a replay timeout (60 s) and the default
 *      fingerprint: the replay watchdog's marks and the fingerprint's
 *      allgather in the iteration (docs/watchdog.md);
 *   5m. the same with fingerprint 0: the marks alone, so that 5w's cost
 *      splits into the marks' and the fingerprint's;
 *   5n. (NCCL backend) mode 5t's buckets on a second commgraph communicator
 *      whose own allreduce kernels (one-shot, two-shot: docs/gpu.md) are off,
 *      so every collective runs on NCCL's kernels: 5f against 5n, in one run,
 *      is what commgraph's kernels give the iteration;
 *   6. commgraph at each --bucket-mb size (default 1, 4, 25 MiB) and in one
 *      bucket (the whole workload): the same graph, bucket_bytes set;
 *   7. the lower bound of the exposed time, computed: from the ready times of
 *      mode 1, alpha (the time of one 4 KB allreduce: 16 in a row, captured,
 *      per allreduce) and busbw (one allreduce of 256 MiB, or the workload's
 *      total if larger, captured: busbw = 2(n-1)/n x bytes / (time - alpha)),
 *      all measured in the same rounds. The bytes ready at or after gradient
 *      k (backward order) need at least alpha + 2(n-1)/n x bytes_from_k /
 *      busbw after r_k; the finish is at least the largest of these, and the
 *      exposed bound is that finish minus the last gradient's ready time.
 *
 * The DDP modes, mode 2 and the measurements use an NCCL communicator: the
 * commgraph communicator's own (cg_comm_nccl; blocking, docs/gpu.md) with the
 * nccl backend (default), or, with --backend mpi-staged (commgraph's MPI
 * backend on device buffers), one made with ncclCommInitRank over MPI; the
 * bound's alpha and busbw are then measured on the commgraph communicator (a
 * plan of the same allreduces, fusion off), so the bound is that
 * transport's (until session 19 it was NCCL's); mode 3s and the commgraph
 * modes do not use NCCL. Bucket sizes are in MiB (2^20 bytes).
 *
 * Output, per B: a row per mode: iteration µs, exposed µs (iteration -
 * backward alone), exposed / exposed bound, buckets (collectives of several
 * tensors; DDP: all its buckets), tensors in them, bytes copied per iteration,
 * the backward span (first kernel's start to last kernel's end, from the
 * stamps) inside that mode, and for commgraph's plans how many collectives
 * took its one-shot and two-shot allreduce kernels (docs/gpu.md); then the
 * bound. Timing: cudaEvents around a batch
 * of I iterations (default 20) on one stream; all modes interleaved round by
 * round after two warm-up iterations each; each figure the median over R
 * rounds (default 9) of the slowest rank's time per iteration (default I with
 * --backend mpi-staged: 3). Every mode's
 * gradients are checked before and after timing on the device (poisoned with
 * NaN, one iteration, compared with the exact sums); a wrong result prints
 * WRONG and exits non-zero, as does any error. One GPU per rank, numbered by
 * the rank's place on its node. Only rank 0 prints.
 *
 * --trace DIR: for each B, the default and tuned plans' profiled replays as
 * Chrome traces (cg_plan_trace; DIR/WORKLOAD-B<ms>-default.<rank>.json and
 * -tuned) and their dumps with measured times and the model (.dump.txt).
 *
 * --smoke (tests/perf/CMakeLists.txt runs it so): every tensor's count / 64
 * (at least 1), B = 1 ms, 1 round of 2 iterations (unless --backward-ms,
 * --rounds or --iters say otherwise), the busbw allreduce the size of the
 * workload; without a GPU for every rank it exits 77 (ctest's skip), or 1
 * where CG_REQUIRE_GPU is set. Run by hand without GPUs it exits 0. */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_smoke.h"
#include "bench_train.h"
#include "cgbench_workload.h"
#include "commgraph.h"
#include "commgraph/mpi.h"
#include "commgraph/nccl.h"
#include "gpu_bench.h"
#include "train_kernels.h"

#define SMOKE_DIVISOR 64
#define LARGE_FLOATS ((size_t)1 << 26) /* 256 MiB */

static int rank, ranks;

typedef struct args {
  const char *path;
  double backward_ms[BT_MAX_LIST], bucket_mb[BT_MAX_LIST];
  int n_backward, n_bucket; /* -1: not given */
  int iters, rounds, smoke, staged;
  const char *trace_dir; /* --trace: where the default and tuned plans' traces and dumps go */
} args_t;

static void usage(const char *argv0) {
  if (rank == 0)
    fprintf(stderr,
            "usage: mpiexec -n N %s WORKLOAD.txt [--backward-ms 1,5,10] [--rounds 1..%d] [--iters I]\n"
            "       [--bucket-mb 1,4,25] [--backend nccl|mpi-staged] [--trace DIR] [--smoke]\n"
            "  --backward-ms: the backward pass's spin time, one run of every mode per value (at most %d)\n"
            "  --bucket-mb:   commgraph's fixed bucket sizes in MiB (at most %d), besides its default and one bucket\n"
            "  --backend:     the commgraph communicator's backend (the DDP modes always use NCCL)\n"
            "  --trace:       write DIR/WORKLOAD-B<ms>-{default,tuned}.<rank>.json (cg_plan_trace) and .dump.txt\n"
            "  --smoke:       short: tensors / %d, B = 1 ms, 1 round of 2 iterations; exits 77 without a GPU "
            "per rank\n",
            argv0, BT_MAX_ROUNDS, BT_MAX_LIST, BT_MAX_LIST, SMOKE_DIVISOR);
  MPI_Finalize();
  exit(2);
}

/* "1,5,10" into v; the number of values, or -1 when malformed */
static int parse_list(const char *text, double *v, double min, double max) {
  int n = 0;
  for (const char *p = text; n < BT_MAX_LIST; p++) {
    char *end = NULL;
    v[n] = strtod(p, &end);
    if (end == p || !(v[n] >= min && v[n] <= max)) return -1;
    n++;
    p = end;
    if (!*p) return n;
    if (*p != ',') return -1;
  }
  return -1;
}

static args_t parse(int argc, char **argv) {
  args_t a = {.n_backward = -1, .n_bucket = -1};
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    int more = i + 1 < argc;
    if (!strcmp(argv[i], "--backward-ms") && more) {
      if ((a.n_backward = parse_list(argv[++i], a.backward_ms, 0, 10000)) < 0) usage(argv[0]);
    } else if (!strcmp(argv[i], "--bucket-mb") && more) {
      if ((a.n_bucket = parse_list(argv[++i], a.bucket_mb, 1.0 / (1 << 18), 1e6)) < 0) usage(argv[0]);
    } else if (!strcmp(argv[i], "--rounds") && more) {
      a.rounds = (int)strtol(argv[++i], &end, 10);
      if (*end || a.rounds < 1 || a.rounds > BT_MAX_ROUNDS) usage(argv[0]);
    } else if (!strcmp(argv[i], "--iters") && more) {
      a.iters = (int)strtol(argv[++i], &end, 10);
      if (*end || a.iters < 1 || a.iters > 100000) usage(argv[0]);
    } else if (!strcmp(argv[i], "--backend") && more) {
      i++;
      if (!strcmp(argv[i], "mpi-staged"))
        a.staged = 1;
      else if (strcmp(argv[i], "nccl"))
        usage(argv[0]);
    } else if (!strcmp(argv[i], "--trace") && more) {
      a.trace_dir = argv[++i];
    } else if (!strcmp(argv[i], "--smoke")) {
      a.smoke = 1;
    } else if (argv[i][0] != '-' && !a.path) {
      a.path = argv[i];
    } else {
      usage(argv[0]);
    }
  }
  if (!a.path) usage(argv[0]);
  if (a.n_backward < 0) {
    static const double defaults[] = {1, 5, 10};
    a.n_backward = a.smoke ? 1 : 3;
    memcpy(a.backward_ms, defaults, sizeof defaults);
  }
  if (a.n_bucket < 0) {
    static const double defaults[] = {1, 4, 25};
    a.n_bucket = 3;
    memcpy(a.bucket_mb, defaults, sizeof defaults);
  }
  if (!a.iters) a.iters = a.smoke ? 2 : a.staged ? 3 : 20; /* MPI through host memory: ~100x slower than NCCL */
  if (!a.rounds) a.rounds = a.smoke ? 1 : 9;
  return a;
}

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v ? v : "(unset)";
}

/* --trace: a plan's profiled replay as a Chrome trace (cg_plan_trace) and
 * its dump, measured times and model included. Collective. */
static void write_trace(const char *dir, const char *workload, double backward_ms, const char *what, cg_plan_t *plan,
                        cudaStream_t stream) {
  char path[1024];
  cg_trace_opts_t t = CG_TRACE_OPTS_INIT;
  t.stream = stream;
  snprintf(path, sizeof path, "%s/%s-B%g-%s.%%r.json", dir, workload, backward_ms, what);
  CG_CHECK(cg_plan_trace(plan, path, &t));
  snprintf(path, sizeof path, "%s/%s-B%g-%s.%d.dump.txt", dir, workload, backward_ms, what, rank);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "rank %d: bench_train: cannot write %s\n", rank, path);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  CG_CHECK(cg_plan_dump(plan, f));
  fclose(f);
}

/* Rank 0 prints the tuned plan's "tune round" lines (its dump's): what each
 * candidate measured in cg_plan_tune and which one was kept, beside the
 * table's figures for the kept one. */
static void print_tune_log(const cg_plan_t *plan, double backward_ms) {
  if (rank != 0) return;
  FILE *f = tmpfile();
  if (!f) return;
  char line[4096];
  if (cg_plan_dump(plan, f) == CG_SUCCESS) {
    rewind(f);
    while (fgets(line, sizeof line, f))
      if (!strncmp(line, "tune round", strlen("tune round"))) printf("  B = %g ms, %s", backward_ms, line);
  }
  fclose(f);
  fflush(stdout);
}

static void print_header(int argc, char **argv, const args_t *a, int device, int nodes, const char *name,
                         const bt_ctx_t *c, size_t total, const bt_ddp_t *d, unsigned long long resolution) {
  struct cudaDeviceProp prop;
  int version = 0;
  const char *backend = "?";
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  NCCL_CHECK(ncclGetVersion(&version));
  CG_CHECK(cg_comm_backend_name(&backend, c->comm));
  printf("bench_train: a data-parallel training iteration, simulated backward pass and gradient allreduces\n");
  printf("  GPU: %s (rank 0 on device %d); %d rank%s on %d node%s, %s\n", prop.name, device, ranks,
         ranks == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s", cg_bench_gpus_per_rank());
  printf("  NCCL %d.%d.%d; NCCL_NVLS_ENABLE=%s NCCL_P2P_DISABLE=%s NCCL_SHM_DISABLE=%s NCCL_SOCKET_IFNAME=%s\n",
         version / 10000, version % 10000 / 100, version % 100, env("NCCL_NVLS_ENABLE"), env("NCCL_P2P_DISABLE"),
         env("NCCL_SHM_DISABLE"), env("NCCL_SOCKET_IFNAME"));
  printf("  commgraph %s, backend %s (modes 5, 6); CG_BUCKET_BYTES=%s CG_FUSION=%s\n", CG_VERSION_STRING, backend,
         env("CG_BUCKET_BYTES"), env("CG_FUSION"));
  printf("  DDP modes, communication alone, alpha and busbw: NCCL, %s\n",
         a->staged ? "a communicator of their own (ncclCommInitRank)" : "the commgraph communicator's (cg_comm_nccl)");
  printf("  workload: %s, %d tensors, %.1f MB float32 (%zu elements)%s\n", name, c->n,
         (double)total * sizeof(float) / 1e6, total, a->smoke ? ", every count / 64 (--smoke)" : "");
  printf("  DDP buckets: %d (first %.2f MB, closed at >= 1 MiB; later ones at >= 25 MiB)\n", d->n,
         (double)d->count[0] * sizeof(float) / 1e6);
  printf("  backward: one kernel per tensor, n-1 first, %d blocks x %d threads: writes its gradient, spins on "
         "%%globaltimer until B x size / total after its start (timer step seen: %llu ns)\n",
         TRAIN_BLOCKS, TRAIN_THREADS, resolution);
  printf("  command: mpiexec -n %d", ranks);
  for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
  printf("\n  timing: median over %d rounds of the slowest rank's cudaEvent time per iteration, %d iterations "
         "(graph launches or cg_plan_launch, one stream) per round, all modes interleaved round by round; ready "
         "times and backward spans from the kernels' %%globaltimer stamps\n",
         a->rounds, a->iters);
  fflush(stdout);
}

/* ---- timing */

typedef struct timer {
  bt_ctx_t *c;
  cudaEvent_t start, stop;
} bt_timer_t;

/* `iters` iterations between two events; sets b->t[round] and b->span[round]
 * (round >= 0) to the slowest rank's, and ready[] (not NULL) to the slowest
 * rank's ready times. The MPI allreduce lines the ranks up for the next batch. */
static void time_batch(const bt_timer_t *tm, bt_bench_t *b, int iters, int round, double *ready) {
  const bt_ctx_t *c = tm->c;
  CUDA_CHECK(cudaEventRecord(tm->start, c->s));
  for (int i = 0; i < iters; i++) bt_launch(c, b);
  CUDA_CHECK(cudaEventRecord(tm->stop, c->s));
  CUDA_CHECK(cudaEventSynchronize(tm->stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, tm->start, tm->stop));
  double mine[2] = {ms * 1e-3 / iters, b->stamps ? bt_read_stamps(c, b, ready) : 0}, slowest[2];
  MPI_Allreduce(mine, slowest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (ready) MPI_Allreduce(MPI_IN_PLACE, ready, c->n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (round >= 0) {
    b->t[round] = slowest[0];
    b->span[round] = slowest[1];
  }
}

/* ---- the table */

static void print_row(const bt_bench_t *b, const bt_ctx_t *c, const bt_ddp_t *d, size_t total, double backward,
                      double bound) {
  char exposed[32] = "-", ratio[32] = "-", buckets[32] = "-", fused[32] = "-", copied[32] = "-", span[32] = "-",
       own[32] = "-";
  if (b->kind != BT_BACKWARD && b->kind != BT_ALLREDUCES) {
    snprintf(exposed, sizeof exposed, "%.1f", (b->med - backward) * 1e6);
    if (bound > 0) snprintf(ratio, sizeof ratio, "%.2f", (b->med - backward) / bound);
  }
  if (b->kind == BT_PLAN) {
    snprintf(buckets, sizeof buckets, "%zu", b->stats.buckets);
    snprintf(fused, sizeof fused, "%zu", b->stats.fused_nodes);
    cgb_bytes_text(copied, sizeof copied, (double)b->stats.copy_bytes);
    snprintf(own, sizeof own, "%d/%d", cg_bench_dot_count(b->plan, "one-shot allreduce"),
             cg_bench_dot_count(b->plan, "two-shot allreduce"));
  } else if (b->kind != BT_BACKWARD) {
    snprintf(buckets, sizeof buckets, "%d", d->n);
    snprintf(fused, sizeof fused, "%d", c->n);
    int copies = b->kind == BT_DDP_COPY || b->kind == BT_DDP_STAGED; /* into the bucket or host, and back */
    cgb_bytes_text(copied, sizeof copied, copies ? 2.0 * (double)total * sizeof(float) : 0);
  }
  if (b->stamps) snprintf(span, sizeof span, "%.1f", b->span_med * 1e6);
  printf("%-52s %10.1f %10s %8s %8s %6s %11s %10s %7s\n", b->label, b->med * 1e6, exposed, ratio, buckets, fused,
         copied, span, own);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided); /* mpi-staged needs MULTIPLE */
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  args_t a = parse(argc, argv);
  size_t *counts = NULL;
  int n = cgb_read_workload(a.path, &counts);
  if (!n) {
    MPI_Finalize();
    return 2;
  }
  char name[128];
  cgb_workload_name(a.path, name, sizeof name);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    if (a.smoke) counts[i] = counts[i] / SMOKE_DIVISOR ? counts[i] / SMOKE_DIVISOR : 1;
    total += counts[i];
  }

  int nodes = 0, device = cg_bench_pick_gpu("bench_train", &nodes);
  if (device < 0) {
    free(counts);
    int status = cg_bench_no_gpu_status("bench_train", "not every rank has a GPU of its own", rank, a.smoke);
    MPI_Finalize();
    return status;
  }
  if (a.staged && provided < MPI_THREAD_MULTIPLE)
    cg_bench_fail("MPI_Init_thread", "the mpi-staged backend needs MPI_THREAD_MULTIPLE, which this MPI does not give");

  bt_ctx_t c = {.rank = rank, .ranks = ranks, .n = n, .count = counts};
  cg_comm_opts_t copts = CG_COMM_OPTS_INIT;
  copts.backend = a.staged ? CG_BACKEND_MPI : CG_BACKEND_NCCL;
  copts.device = device;
  CG_CHECK(cg_comm_create(&c.comm, MPI_COMM_WORLD, &copts));
  if (a.staged) { /* an NCCL communicator of the DDP modes' own: rank 0's id over MPI */
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclResult_t init = ncclCommInitRank(&c.nccl, ranks, id, rank); /* sets c.nccl, also when in progress */
    NCCL_CHECK(cg_test_nccl_settle(c.nccl, init));
  } else {
    CG_CHECK(cg_comm_nccl(&c.nccl, c.comm));
  }
  c.ddp_mpi = MPI_COMM_NULL;
  if (a.staged) MPI_Comm_dup(MPI_COMM_WORLD, &c.ddp_mpi);
  cudaStream_t *streams[] = {&c.s, &c.cs, &c.ms, &c.cap};
  for (size_t i = 0; i < sizeof streams / sizeof *streams; i++)
    CUDA_CHECK(cudaStreamCreateWithFlags(streams[i], cudaStreamNonBlocking));
  c.events = cgb_xcalloc((size_t)n + 2, sizeof *c.events);
  for (int i = 0; i < n + 2; i++) CUDA_CHECK(cudaEventCreateWithFlags(&c.events[i], cudaEventDisableTiming));
  CUDA_CHECK(cudaMalloc((void **)&c.act, sizeof *c.act));
  CUDA_CHECK(cudaMemset(c.act, 0, sizeof *c.act));
  CUDA_CHECK(cudaMalloc((void **)&c.wrong, 3 * sizeof *c.wrong));
  unsigned long long resolution = 0;
  CUDA_CHECK(train_timer_resolution(&resolution));

  /* ---- where the tensors live */
  bt_ddp_t d = bt_make_ddp(&c);
  bt_tensors_t plain = bt_alloc_tensors(n, counts, NULL);             /* mode 1 */
  bt_tensors_t copy_grads = bt_alloc_tensors(n, counts, NULL);        /* mode 3, and its bucket buffer: */
  bt_tensors_t copy_flat = bt_alloc_tensors(d.n, d.count, d.offset);
  bt_tensors_t zero_grads = bt_alloc_tensors(n, counts, d.pos);       /* mode 4: inside its bucket buffer */
  bt_tensors_t comm_only = bt_alloc_tensors(d.n, d.count, d.offset);  /* mode 2: the buckets */
  size_t alpha_counts[BT_ALPHA_OPS], large_count = a.smoke || total > LARGE_FLOATS ? total : LARGE_FLOATS;
  for (int k = 0; k < BT_ALPHA_OPS; k++) alpha_counts[k] = BT_ALPHA_COUNT;
  bt_tensors_t alpha = bt_alloc_tensors(BT_ALPHA_OPS, alpha_counts, NULL);
  bt_tensors_t large = bt_alloc_tensors(1, &large_count, NULL);
  /* the arena: pieces allocated in record order (n-1 first), back to back */
  cg_arena_t *arena;
  cg_arena_opts_t aopts = CG_ARENA_OPTS_INIT;
  aopts.device = device;
  CG_CHECK(cg_arena_create(&arena, total * sizeof(float), &aopts));
  bt_tensors_t arena_grads = {.n = n, .count = counts, .span = total, .off = cgb_xcalloc((size_t)n, sizeof(size_t))};
  for (int i = n - 1; i >= 0; i--) {
    void *piece;
    CG_CHECK(cg_arena_alloc(&piece, arena, counts[i], CG_FLOAT32));
    if (i == n - 1) arena_grads.base = piece;
    arena_grads.off[i] = (size_t)((float *)piece - arena_grads.base);
    if (i < n - 1 && arena_grads.off[i] != arena_grads.off[i + 1] + counts[i + 1])
      cg_bench_fail("cg_arena_alloc", "the arena's pieces are not back to back");
  }
  if (rank == 0) print_header(argc, argv, &a, device, nodes, name, &c, total, &d, resolution);

  /* NCCL's connections for every size captured below, made outside the captures */
  for (int k = 0; k < d.n; k++)
    NCCL_CHECK_ON(c.nccl, ncclAllReduce(comm_only.base + d.offset[k], comm_only.base + d.offset[k], d.count[k],
                                        ncclFloat32, ncclSum, c.nccl, c.s));
  NCCL_CHECK_ON(c.nccl, ncclAllReduce(alpha.base, alpha.base, BT_ALPHA_COUNT, ncclFloat32, ncclSum, c.nccl, c.s));
  NCCL_CHECK_ON(c.nccl, ncclAllReduce(large.base, large.base, large_count, ncclFloat32, ncclSum, c.nccl, c.s));
  CUDA_CHECK(cudaStreamSynchronize(c.s));

  /* ---- the benches: 3 shared, then per B: modes 1, 3, 4, 5, 5t, 5f, 5w, 5m, (NCCL) 5n, 6 and (staged) 3s */
  enum { NCCL_KERNELS = 8 };        /* mode 5n, NCCL backend only */
  const int first_fixed = 8 + !a.staged; /* the first mode 6 */
  bt_ctx_t c_nccl_kernels = c;     /* mode 5n's: another commgraph communicator */
  if (!a.staged) CG_CHECK(cg_comm_create(&c_nccl_kernels.comm, MPI_COMM_WORLD, &copts));
  int nb_per_b = first_fixed + a.n_bucket + 1 + a.staged, nb = 3 + a.n_backward * nb_per_b;
  int staged_k = a.staged ? nb_per_b - 1 : -1; /* mode 3s */
  bt_bench_t *b = cgb_xcalloc((size_t)nb, sizeof *b);
  unsigned long long **stamps = cgb_xcalloc((size_t)nb, sizeof *stamps), *ns = cgb_xcalloc((size_t)n, sizeof *ns);
  size_t stamp_bytes = 2 * (size_t)n * TRAIN_BLOCKS * sizeof **stamps;
  float sum = (float)ranks * (float)(ranks + 1) / 2;
  enum { ALPHA, LARGE, COMM };
  bt_bench_t shared[] = {{.label = "alpha: 16 allreduces of 4 KB", .grads = &alpha},
                         {.label = "busbw: one large allreduce", .grads = &large},
                         {.label = "2. communication alone (DDP zero-copy buckets)", .grads = &comm_only}};
  for (int k = 0; k < 3; k++) {
    b[k] = shared[k];
    b[k].kind = BT_ALLREDUCES;
    b[k].b = -1;
    b[k].filled = 1;
    b[k].expect = sum;
    b[k].iters = a.iters;
    /* mpi-staged: the bound from that transport's costs, not NCCL's */
    if (a.staged && k != COMM) {
      b[k].plan = bt_compile_allreduces(&c, b[k].grads);
      strncat(b[k].label, " (commgraph, mpi-staged)", sizeof b[k].label - strlen(b[k].label) - 1);
    } else {
      b[k].exec = bt_capture_allreduces(&c, b[k].grads);
    }
  }
  for (int bi = 0; bi < a.n_backward; bi++) {
    for (int i = 0; i < n; i++)
      ns[i] = (unsigned long long)(a.backward_ms[bi] * 1e6 * (double)counts[i] / (double)total + 0.5);
    bt_bench_t *m = b + 3 + bi * nb_per_b;
    for (int k = 0; k < nb_per_b; k++) {
      m[k].b = bi;
      m[k].iters = a.iters;
      m[k].expect = sum;
      m[k].grads = &arena_grads;
      m[k].kind = BT_PLAN;
      int own = k < 4 || k == staged_k; /* commgraph's plans share their graph's */
      if (own) {
        CUDA_CHECK(cudaMalloc((void **)&stamps[m - b + k], stamp_bytes));
        CUDA_CHECK(cudaMemset(stamps[m - b + k], 0, stamp_bytes));
      }
      m[k].stamps = stamps[m - b + (own ? k : 3)];
    }
    snprintf(m[0].label, sizeof m[0].label, "1. backward alone (CUDA graph)");
    m[0].kind = BT_BACKWARD;
    m[0].grads = &plain;
    m[0].expect = (float)(rank + 1);
    m[0].exec = bt_capture_backward(&c, &plain, ns, m[0].stamps);
    snprintf(m[1].label, sizeof m[1].label, "3. DDP-style, copies (CUDA graph)");
    m[1].kind = BT_DDP_COPY;
    m[1].grads = &copy_grads;
    m[1].flat = copy_flat.base;
    m[1].flat_span = copy_flat.span;
    m[1].exec = bt_capture_ddp(&c, &copy_grads, copy_flat.base, &d, ns, m[1].stamps);
    snprintf(m[2].label, sizeof m[2].label, "4. DDP-style, zero-copy (CUDA graph)");
    m[2].kind = BT_DDP_ZERO;
    m[2].grads = &zero_grads;
    m[2].exec = bt_capture_ddp(&c, &zero_grads, NULL, &d, ns, m[2].stamps);
    if (a.staged) { /* the same buckets and memory as mode 4, through the host */
      bt_bench_t *st = &m[staged_k];
      snprintf(st->label, sizeof st->label, "3s. DDP-style, staged, MPI (CUDA graph)");
      st->kind = BT_DDP_STAGED;
      st->grads = &zero_grads;
      st->exec = bt_capture_ddp_staged(&c, &zero_grads, &d, ns, st->stamps, &st->staging);
    }
    cg_graph_t *graph = bt_record_graph(&c, &arena_grads, ns, m[3].stamps);
    m[3].plan = bt_compile(graph, 0, &m[3].stats);
    snprintf(m[3].label, sizeof m[3].label, "5. commgraph, default (library's: %.1f MiB)",
             (double)m[3].stats.bucket_bytes / CGB_MIB);
    /* tuned: the default plan profiled (cg_plan_tune) and compiled again */
    cg_tune_opts_t tune = CG_TUNE_OPTS_INIT;
    tune.stream = c.s;
    CG_CHECK(cg_plan_tune(&m[4].plan, m[3].plan, graph, &tune));
    CG_CHECK(cg_plan_stats(&m[4].stats, m[4].plan));
    snprintf(m[4].label, sizeof m[4].label, "5t. commgraph, tuned (cg_plan_tune, %d replays)", tune.replays);
    print_tune_log(m[4].plan, a.backward_ms[bi]);
    if (a.trace_dir) {
      write_trace(a.trace_dir, name, a.backward_ms[bi], "default", m[3].plan, c.s);
      write_trace(a.trace_dir, name, a.backward_ms[bi], "tuned", m[4].plan, c.s);
    }
    /* watched: the tuned plan's buckets (its tuning file) with the replay
     * watchdog on: what the watchdog costs an iteration */
    m[5].plan = bt_compile_watched(graph, m[4].plan, -1, 1, &m[5].stats);
    snprintf(m[5].label, sizeof m[5].label, "5f. commgraph, tuned, from its tuning file");
    m[6].plan = bt_compile_watched(graph, m[4].plan, BT_WATCH_TIMEOUT_S, 1, &m[6].stats);
    snprintf(m[6].label, sizeof m[6].label, "5w. commgraph, tuned, watched (%g s timeout)", BT_WATCH_TIMEOUT_S);
    m[7].plan = bt_compile_watched(graph, m[4].plan, BT_WATCH_TIMEOUT_S, 0, &m[7].stats);
    snprintf(m[7].label, sizeof m[7].label, "5m. commgraph, tuned, watched, fingerprint 0");
    if (!a.staged) {
      m[NCCL_KERNELS].plan = bt_compile_on_nccl_kernels(&c_nccl_kernels, &arena_grads, ns, m[3].stamps, m[4].plan,
                                                        &m[NCCL_KERNELS].stats);
      snprintf(m[NCCL_KERNELS].label, sizeof m[NCCL_KERNELS].label, "5n. commgraph, tuned, on NCCL's kernels");
    }
    for (int z = 0; z <= a.n_bucket; z++) {
      bt_bench_t *fixed = &m[first_fixed + z];
      size_t cap = z < a.n_bucket ? (size_t)(a.bucket_mb[z] * CGB_MIB) : total * sizeof(float);
      fixed->plan = bt_compile(graph, cap, &fixed->stats);
      if (z < a.n_bucket)
        snprintf(fixed->label, sizeof fixed->label, "6. commgraph, %g MiB buckets", a.bucket_mb[z]);
      else
        snprintf(fixed->label, sizeof fixed->label, "6. commgraph, one bucket (%.1f MiB)", (double)cap / CGB_MIB);
    }
    cg_graph_destroy(graph);
    for (int k = 3; k < nb_per_b; k++)
      if (m[k].stats.copy_bytes && rank == 0)
        fprintf(stderr, "bench_train: warning: %s: arena gradients in record order, yet its buckets copy %zu bytes\n",
                m[k].label, m[k].stats.copy_bytes);
  }

  for (int k = 0; k < nb; k++) bt_check(&c, &b[k], "before timing");
  if (rank == 0) {
    printf("  results checked: every mode's gradients hold the exact sums\n");
    fflush(stdout);
  }

  /* ---- timing: every bench once per round; mode 1 also yields ready times */
  bt_timer_t tm = {.c = &c};
  CUDA_CHECK(cudaEventCreate(&tm.start));
  CUDA_CHECK(cudaEventCreate(&tm.stop));
  double *ready = cgb_xcalloc((size_t)a.n_backward * (size_t)a.rounds * (size_t)n, sizeof *ready);
  for (int k = 0; k < nb; k++) time_batch(&tm, &b[k], 2, -1, NULL);
  for (int r = 0; r < a.rounds; r++)
    for (int k = 0; k < nb; k++)
      time_batch(&tm, &b[k], b[k].iters, r,
                 b[k].kind == BT_BACKWARD ? ready + ((size_t)b[k].b * (size_t)a.rounds + (size_t)r) * (size_t)n
                                          : NULL);
  for (int k = 0; k < nb; k++) {
    b[k].med = cg_bench_median(b[k].t, a.rounds);
    b[k].span_med = cg_bench_median(b[k].span, a.rounds);
  }
  for (int k = 0; k < nb; k++) bt_check(&c, &b[k], "after timing");

  if (rank == 0) {
    /* alpha and busbw: the collective cost alpha + 2(n-1)/n x bytes / busbw */
    double factor = 2.0 * (ranks - 1) / ranks, alpha_s = b[ALPHA].med / BT_ALPHA_OPS;
    double large_bytes = (double)large_count * sizeof(float), busbw = 0;
    if (ranks > 1)
      busbw = factor * large_bytes / (b[LARGE].med > 2 * alpha_s ? b[LARGE].med - alpha_s : b[LARGE].med);
    const char *how = a.staged ? "commgraph on the mpi-staged backend, fusion off" : "NCCL, captured";
    printf("\nalpha: %.1f us per 4 KB allreduce (%d in a row, %s)\n", alpha_s * 1e6, BT_ALPHA_OPS, how);
    printf("busbw: one in-place float32 sum allreduce of %.1f MB: %.1f us; busbw = 2(n-1)/n x bytes / (time - alpha) "
           "= %.1f GB/s\n",
           large_bytes / 1e6, b[LARGE].med * 1e6, busbw / 1e9);
    double *column = cgb_xcalloc((size_t)a.rounds, sizeof *column), *r = cgb_xcalloc((size_t)n, sizeof *r);
    for (int bi = 0; bi < a.n_backward; bi++) {
      const bt_bench_t *m = b + 3 + bi * nb_per_b;
      for (int p = 0; p < n; p++) {
        for (int q = 0; q < a.rounds; q++) column[q] = ready[((size_t)bi * (size_t)a.rounds + (size_t)q) * n + p];
        r[p] = cg_bench_median(column, a.rounds);
      }
      /* finish >= r_k + alpha + 2(n-1)/n x bytes ready from k on / busbw, for every k */
      double finish = 0, from = 0;
      for (int p = n - 1; p >= 0; p--) {
        from += (double)counts[n - 1 - p] * sizeof(float);
        double f = r[p] + alpha_s + (busbw > 0 ? factor * from / busbw : 0);
        if (f > finish) finish = f;
      }
      double bound = finish - r[n - 1] > 0 ? finish - r[n - 1] : 0, backward = m[0].med;
      printf("\nB = %g ms: backward alone %.1f us per iteration; gradients ready from %.1f to %.1f us after the first "
             "kernel's start (median)\n",
             a.backward_ms[bi], backward * 1e6, r[0] * 1e6, r[n - 1] * 1e6);
      printf("%-52s %10s %10s %8s %8s %6s %11s %10s %7s\n", "mode", "us/iter", "exposed us", "x bound", "buckets",
             "fused", "copied/iter", "bwd span", "1s/2s");
      print_row(&m[0], &c, &d, total, backward, bound);
      print_row(&b[COMM], &c, &d, total, backward, bound);
      for (int k = 1; k < 3; k++) print_row(&m[k], &c, &d, total, backward, bound);
      if (staged_k >= 0) print_row(&m[staged_k], &c, &d, total, backward, bound);
      for (int k = 3; k < nb_per_b; k++)
        if (k != staged_k) print_row(&m[k], &c, &d, total, backward, bound);
      printf("%-52s %10.1f %10.1f %8.2f\n", "7. lower bound of the exposed time (computed)", (backward + bound) * 1e6,
             bound * 1e6, 1.0);
    }
    free(column);
    free(r);
    printf("\nexposed: iteration - backward alone; x bound: exposed / the bound's exposed time; bound: the largest "
           "r_k + alpha + 2(n-1)/n x bytes ready at or after k / busbw, minus the last ready time r_n-1\n"
           "buckets: collectives of several tensors (commgraph: cg_plan_stats buckets, fused_nodes, copy_bytes; DDP: "
           "all its buckets); bwd span: first kernel's start to last kernel's end inside that mode (us); 1s/2s: the "
           "plan's collectives on commgraph's one-shot / two-shot allreduce kernels (the rest on NCCL's)\n"
           "results checked again after timing: every mode's gradients still hold the exact sums\n");
    fflush(stdout);
  }

  for (int k = 0; k < nb; k++) {
    cg_plan_destroy(b[k].plan); /* synchronizes the device */
    if (b[k].exec) CUDA_CHECK(cudaGraphExecDestroy(b[k].exec));
    bt_free_staging(b[k].staging);
  }
  for (int k = 0; k < nb; k++)
    if (stamps[k]) CUDA_CHECK(cudaFree(stamps[k]));
  bt_tensors_t *owned[] = {&plain, &copy_grads, &copy_flat, &zero_grads, &comm_only, &alpha, &large, &arena_grads};
  for (size_t i = 0; i < sizeof owned / sizeof *owned; i++) bt_free_tensors(owned[i]);
  cg_arena_destroy(arena);
  CUDA_CHECK(cudaEventDestroy(tm.start));
  CUDA_CHECK(cudaEventDestroy(tm.stop));
  for (int i = 0; i < n + 2; i++) CUDA_CHECK(cudaEventDestroy(c.events[i]));
  for (size_t i = 0; i < sizeof streams / sizeof *streams; i++) CUDA_CHECK(cudaStreamDestroy(*streams[i]));
  CUDA_CHECK(cudaFree(c.act));
  CUDA_CHECK(cudaFree(c.wrong));
  if (a.staged) {
    MPI_Comm_free(&c.ddp_mpi);
    NCCL_CHECK_ON(c.nccl, ncclCommFinalize(c.nccl));
    NCCL_CHECK(ncclCommDestroy(c.nccl));
  }
  if (!a.staged) cg_comm_destroy(c_nccl_kernels.comm);
  cg_comm_destroy(c.comm);
  cgb_free_buckets(&d);
  free(ready);
  free(stamps);
  free(ns);
  free(b);
  free(c.events);
  free(counts);
  MPI_Finalize();
  return 0;
}
