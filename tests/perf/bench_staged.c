/* bench_staged: device buffers over MPI, against NCCL, in one run:
 *
 *   mpiexec -n N build/tests/perf/bench_staged [--min-mb 1] [--max-mb 1024] [--chunk-mb 4] [--rounds 3]
 *                                              [--smoke]
 *
 * For allreduce (float32 sum, out of place) and broadcast (root 0, in place)
 * of 1 MiB to 1 GiB (times 4), one plan of one node per size and mode,
 * replayed with cg_plan_launch; time per replay from CUDA events around a
 * batch of replays, the median of --rounds batches. The modes:
 *
 *   staged:    MPI backend on the device, whole message through pinned host
 *              staging (chunk_bytes = CG_CHUNK_NONE): copy in, MPI, copy out;
 *   pipelined: the same, cut into --chunk-mb chunks whose copies overlap
 *              MPI's transfer of the chunk before (host nodes post the MPI
 *              calls);
 *              A broadcast of at least CG_BCAST_CHAIN_BYTES (16 MiB) on 3+
 *              ranks goes down a pipelined chain of sends and receives;
 *   no chain:  broadcast only: pipelined, always through MPI_Ibcast per
 *              chunk (CG_BCAST_CHAIN_BYTES=never), to compare with the chain;
 *   hosttr:    the hosttransfer backend, pipelined alike (the GPU raises a
 *              flag, the progress thread posts the MPI calls: no host nodes);
 *   nccl:      the NCCL backend (the bandwidth this machine's links give).
 *
 * Columns: µs per operation and algorithm bandwidth (bytes / time) per mode,
 * and staged / pipelined (the pipelining speed-up).
 *
 * Every mode's result at every size is checked after its timing: the result
 * buffer holds NaN before each mode, and its first and last 4 Mi elements
 * must hold the ranks' sum (allreduce) or the root's values (broadcast),
 * integer-valued floats that differ from element to element. A wrong result
 * prints "WRONG" and exits non-zero, as does any error. Without a GPU for
 * every rank it says why and exits 0: this is a benchmark, not a test.
 *
 * --smoke (tests/perf/CMakeLists.txt runs it so): 1, 4 and 16 MiB (16 MiB: a
 * broadcast chain on 3+ ranks) in 3 MiB chunks, so that chunks do not divide
 * the messages, 1 round of 2 replays, unless the options above say otherwise;
 * without a GPU for every rank it exits 77 (ctest's skip), or 1 where
 * CG_REQUIRE_GPU is set. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph.h"
#include "commgraph/cuda.h"
#include "commgraph/mpi.h"
#include "bench_smoke.h"
#include "gpu_bench.h"

enum { STAGED, PIPELINED, NO_CHAIN, HOSTTRANSFER, NCCL, N_MODES };

static const char *const mode_names[N_MODES] = {"staged", "pipelined", "no chain", "hosttransfer", "nccl"};
static int rank, size;

static cg_comm_t *make_comm(int mode, int device, size_t chunk_bytes) {
  cg_comm_t *c = NULL;
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  o.device = device;
  o.backend = mode == NCCL ? CG_BACKEND_NCCL : mode == HOSTTRANSFER ? CG_BACKEND_HOSTTRANSFER : CG_BACKEND_MPI;
  o.staging = CG_STAGING_HOST;
  o.chunk_bytes = mode == STAGED ? CG_CHUNK_NONE : chunk_bytes;
  const char *chain = getenv("CG_BCAST_CHAIN_BYTES");
  char *saved = chain ? strdup(chain) : NULL;
  if (mode == NO_CHAIN) setenv("CG_BCAST_CHAIN_BYTES", "never", 1);
  CG_CHECK(cg_comm_create(&c, MPI_COMM_WORLD, &o));
  if (saved) setenv("CG_BCAST_CHAIN_BYTES", saved, 1);
  else unsetenv("CG_BCAST_CHAIN_BYTES");
  free(saved);
  return c;
}

/* Median µs per replay of a one-node plan; `iters` replays per batch (0: by size). */
static double time_plan(cg_comm_t *comm, int broadcast, float *send, float *recv, size_t count, int rounds, int iters,
                        cudaStream_t stream) {
  cg_graph_t *g = NULL;
  cg_plan_t *plan = NULL;
  CG_CHECK(cg_graph_create(&g, NULL));
  if (broadcast)
    CG_CHECK(cg_broadcast(NULL, g, comm, recv, recv, count, CG_FLOAT32, 0));
  else
    CG_CHECK(cg_allreduce(NULL, g, comm, send, recv, count, CG_FLOAT32, CG_SUM));
  CG_CHECK(cg_compile(&plan, g, NULL));
  size_t bytes = count * sizeof(float);
  if (!iters) iters = bytes >= ((size_t)256 << 20) ? 3 : bytes >= ((size_t)16 << 20) ? 10 : 40;
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int w = 0; w < 2; w++) CG_CHECK(cg_plan_launch(plan, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  double *us = malloc((size_t)rounds * sizeof *us);
  if (!us) cg_bench_fail("malloc", "out of memory");
  for (int r = 0; r < rounds; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < iters; i++) CG_CHECK(cg_plan_launch(plan, stream));
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    double mine = 1000.0 * ms / iters, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    us[r] = slowest;
  }
  double median = cg_bench_median(us, rounds);
  free(us);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  return median;
}

/* Element i of a buffer filled with `scale`: an integer that differs from its
 * neighbours' and repeats every 7 elements, not at a power of two. */
static float pattern(size_t i, float scale) { return scale * (float)(1 + i % 7); }

#define CHECK_WINDOW ((size_t)1 << 22) /* elements checked at each end */

/* 1 if the first and last CHECK_WINDOW elements of recv (all of it, when
 * shorter) are pattern(i, scale); else reports the first wrong ones and 0. */
static int check(const float *recv, size_t count, float scale, const char *what) {
  size_t n = count < 2 * CHECK_WINDOW ? count : 2 * CHECK_WINDOW;
  float *h = malloc(n * sizeof *h);
  if (!h) cg_bench_fail("malloc", "out of memory");
  size_t head = n < count ? CHECK_WINDOW : n; /* elements [0, head) and [count - (n - head), count) */
  CUDA_CHECK(cudaMemcpy(h, recv, head * sizeof *h, cudaMemcpyDeviceToHost));
  if (n > head) CUDA_CHECK(cudaMemcpy(h + head, recv + (count - (n - head)), (n - head) * sizeof *h,
                                      cudaMemcpyDeviceToHost));
  long long wrong = 0;
  for (size_t j = 0; j < n; j++) {
    size_t i = j < head ? j : count - (n - j);
    if (h[j] != pattern(i, scale) && wrong++ < 3)
      fprintf(stderr, "rank %d: %s: element %zu is %g, expected %g\n", rank, what, i, (double)h[j],
              (double)pattern(i, scale));
  }
  free(h);
  return !wrong;
}

/* count elements of p (device) := pattern(i, scale) */
static void fill(float *p, size_t count, float scale) {
  float *h = malloc(count * sizeof *h);
  if (!h) cg_bench_fail("malloc", "out of memory");
  for (size_t i = 0; i < count; i++) h[i] = pattern(i, scale);
  CUDA_CHECK(cudaMemcpy(p, h, count * sizeof *h, cudaMemcpyHostToDevice));
  free(h);
}

static void usage(const char *argv0) {
  if (rank == 0)
    fprintf(stderr,
            "usage: mpiexec -n N %s [--min-mb MiB] [--max-mb MiB] [--chunk-mb MiB] [--rounds R] [--smoke]\n"
            "  sizes: min-mb, 4 x min-mb, .. up to max-mb (default 1 .. 1024); chunks: default 4 MiB; rounds:\n"
            "  default 3\n"
            "  --smoke: short: 1 .. 16 MiB in 3 MiB chunks, 1 round of 2 replays (unless given);\n"
            "           exits 77 without a GPU per rank (a test)\n",
            argv0);
  MPI_Finalize();
  exit(2);
}

/* A positive whole number for option argv[i], at most `most`; else usage. */
static size_t positive(char **argv, int i, size_t most) {
  char *end = NULL;
  unsigned long long v = strtoull(argv[i], &end, 10);
  if (!*argv[i] || *end || v < 1 || v > most) usage(argv[0]);
  return (size_t)v;
}

int main(int argc, char **argv) {
  int provided = 0, nodes = 0, rounds = 0, iters = 0, smoke = 0;
  size_t min_mb = 0, max_mb = 0, chunk_mb = 0; /* 0: not given */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--smoke")) smoke = 1;
    else if (i + 1 == argc) usage(argv[0]);
    else if (!strcmp(argv[i], "--min-mb")) min_mb = positive(argv, ++i, (size_t)1 << 20);
    else if (!strcmp(argv[i], "--max-mb")) max_mb = positive(argv, ++i, (size_t)1 << 20);
    else if (!strcmp(argv[i], "--chunk-mb")) chunk_mb = positive(argv, ++i, (size_t)1 << 20);
    else if (!strcmp(argv[i], "--rounds")) rounds = (int)positive(argv, ++i, 101);
    else usage(argv[0]);
  }
  if (!min_mb) min_mb = 1;
  if (!max_mb) max_mb = smoke ? 16 : 1024;
  if (!chunk_mb) chunk_mb = smoke ? 3 : 4;
  if (!rounds) rounds = smoke ? 1 : 3;
  if (smoke) iters = 2;
  if (min_mb > max_mb) usage(argv[0]);
  int device = cg_bench_pick_gpu("bench_staged", &nodes);
  if (device < 0) {
    int status = cg_bench_no_gpu_status("bench_staged", "not every rank has a GPU of its own", rank, smoke);
    MPI_Finalize();
    return status;
  }
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  size_t max_count = (max_mb << 20) / sizeof(float);
  float *send = NULL, *recv = NULL;
  CUDA_CHECK(cudaMalloc((void **)&send, max_count * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&recv, max_count * sizeof(float)));
  fill(send, max_count, (float)(rank + 1));
  cg_comm_t *comms[N_MODES];
  for (int m = 0; m < N_MODES; m++) comms[m] = make_comm(m, device, chunk_mb << 20);
  if (rank == 0) {
    printf("bench_staged: %d ranks on %d node(s), one GPU each; MPI through pinned host staging; pipelined chunks "
           "of %zu MiB; median of %d batches\n", size, nodes, chunk_mb, rounds);
    printf("%-9s %8s | %11s %8s | %11s %8s | %11s %8s | %11s %8s | %11s %8s | %12s\n", "op", "MiB", "staged us",
           "GB/s", "pipelined us", "GB/s", "no chain us", "GB/s", "hosttr us", "GB/s", "nccl us", "GB/s",
           "staged/pipe");
  }
  int all_ok = 1;
  for (int op = 0; op < 2; op++)
    for (size_t mb = min_mb; mb <= max_mb; mb *= 4) {
      size_t count = (mb << 20) / sizeof(float);
      double us[N_MODES];
      for (int m = 0; m < N_MODES; m++) {
        if (m == NO_CHAIN && op == 0) {
          us[m] = 0;
          continue;
        }
        /* NaN where the result goes; a broadcast's root holds its values there */
        CUDA_CHECK(cudaMemset(recv, 0xff, count * sizeof(float)));
        if (op == 1 && rank == 0) fill(recv, count, 3.0f);
        CUDA_CHECK(cudaDeviceSynchronize()); /* before the launches on `stream`, a non-blocking one */
        us[m] = time_plan(comms[m], op == 1, send, recv, count, rounds, iters, stream);
        char what[96];
        snprintf(what, sizeof what, "%s of %zu MiB, %s", op ? "broadcast" : "allreduce", mb, mode_names[m]);
        int ok = check(recv, count, op == 1 ? 3.0f : (float)(size * (size + 1) / 2), what), all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all && rank == 0) {
          fprintf(stderr, "bench_staged: WRONG results: %s\n", what);
          fflush(stderr);
        }
        all_ok &= all;
      }
      if (rank == 0) {
        double gb = (double)(mb << 20) / 1e3;
        char no_chain[48] = "          -        -";
        if (us[NO_CHAIN] > 0) snprintf(no_chain, sizeof no_chain, "%11.1f %8.2f", us[NO_CHAIN], gb / us[NO_CHAIN]);
        printf("%-9s %8zu | %11.1f %8.2f | %11.1f %8.2f | %s | %11.1f %8.2f | %11.1f %8.2f | %11.2fx\n",
               op ? "broadcast" : "allreduce", mb, us[STAGED], gb / us[STAGED], us[PIPELINED], gb / us[PIPELINED],
               no_chain, us[HOSTTRANSFER], gb / us[HOSTTRANSFER], us[NCCL], gb / us[NCCL],
               us[STAGED] / us[PIPELINED]);
        fflush(stdout);
      }
    }
  int ok = 0;
  MPI_Allreduce(&all_ok, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) printf("results %s\n", ok ? "checked: right" : "WRONG on some rank");
  fflush(stdout);
  for (int m = 0; m < N_MODES; m++) cg_comm_destroy(comms[m]);
  cudaFree(send);
  cudaFree(recv);
  cudaStreamDestroy(stream);
  MPI_Finalize();
  return ok ? 0 : 1;
}
