/* bench_staged: device buffers over MPI, against NCCL, in one run:
 *
 *   mpiexec -n N build/tests/perf/bench_staged [--min-mb 1] [--max-mb 1024] [--chunk-mb 4] [--rounds 3]
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
 * and staged / pipelined (the pipelining speed-up). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph.h"
#include "commgraph/cuda.h"
#include "commgraph/mpi.h"
#include "gpu_bench.h"

enum { STAGED, PIPELINED, NO_CHAIN, HOSTTRANSFER, NCCL, N_MODES };

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

/* Median µs per replay of a one-node plan. */
static double time_plan(cg_comm_t *comm, int broadcast, float *send, float *recv, size_t count, int rounds,
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
  int iters = bytes >= ((size_t)256 << 20) ? 3 : bytes >= ((size_t)16 << 20) ? 10 : 40;
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int w = 0; w < 2; w++) CG_CHECK(cg_plan_launch(plan, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  double *us = malloc((size_t)rounds * sizeof *us);
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

/* Every element of recv is `expect` (a sanity check of the staged path). */
static int check(const float *recv, size_t count, float expect) {
  size_t n = count < ((size_t)1 << 20) ? count : (size_t)1 << 20;
  float *h = malloc(n * sizeof *h);
  CUDA_CHECK(cudaMemcpy(h, recv + (count - n), n * sizeof *h, cudaMemcpyDeviceToHost));
  int ok = 1;
  for (size_t i = 0; i < n && ok; i++) ok = h[i] == expect;
  free(h);
  return ok;
}

static void fill(float *p, size_t count, float value) {
  float *h = malloc(count * sizeof *h);
  for (size_t i = 0; i < count; i++) h[i] = value;
  CUDA_CHECK(cudaMemcpy(p, h, count * sizeof *h, cudaMemcpyHostToDevice));
  free(h);
}

int main(int argc, char **argv) {
  int provided = 0, rank = 0, size = 0, nodes = 0, rounds = 3;
  size_t min_mb = 1, max_mb = 1024, chunk_mb = 4;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--min-mb")) min_mb = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--max-mb")) max_mb = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--chunk-mb")) chunk_mb = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
  }
  int device = cg_bench_pick_gpu("bench_staged", &nodes);
  if (device < 0) {
    MPI_Finalize();
    return 0;
  }
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  size_t max_count = (max_mb << 20) / sizeof(float);
  float *send = NULL, *recv = NULL;
  CUDA_CHECK(cudaMalloc((void **)&send, max_count * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&recv, max_count * sizeof(float)));
  fill(send, max_count, 1.0f);
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
        if (op == 1) fill(recv, count, rank == 0 ? 3.0f : 0.0f);
        us[m] = time_plan(comms[m], op == 1, send, recv, count, rounds, stream);
        all_ok &= check(recv, count, op == 1 ? 3.0f : (float)size);
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
  for (int m = 0; m < N_MODES; m++) cg_comm_destroy(comms[m]);
  cudaFree(send);
  cudaFree(recv);
  cudaStreamDestroy(stream);
  MPI_Finalize();
  return ok ? 0 : 1;
}
