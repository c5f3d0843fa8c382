#define _POSIX_C_SOURCE 200809L /* open_memstream, setenv, strdup */
#include "gpu_bench.h"

#include "commgraph/mpi.h"
#include "commgraph/nccl.h"
#include "share_gpus.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void cg_bench_fail(const char *what, const char *why) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "rank %d: FAILED %s: %s\n", rank, what, why);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  abort(); /* MPI_Abort does not return; this says so to the compiler */
}

cg_comm_t *cg_bench_nccl_comm(int device, ncclComm_t *nccl) {
  cg_comm_t *comm = NULL;
  cg_comm_opts_t opts = CG_COMM_OPTS_INIT;
  opts.backend = CG_BACKEND_NCCL;
  opts.device = device;
  CG_CHECK(cg_comm_create(&comm, MPI_COMM_WORLD, &opts));
  CG_CHECK(cg_comm_nccl(nccl, comm));
  return comm;
}

void cg_bench_print_setup(const char *title, int device, int nodes, int argc, char **argv) {
  int rank = 0, ranks = 0, version = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (rank != 0) return;
  struct cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  NCCL_CHECK(ncclGetVersion(&version));
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  printf("%s\n", title);
  printf("  GPU: %s (rank 0 on device %d); %d rank%s on %d node%s, %s\n", prop.name, device, ranks,
         ranks == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s", cg_bench_gpus_per_rank());
  printf("  NCCL %d.%d.%d, NCCL_NVLS_ENABLE=%s; commgraph %s\n", version / 10000, version % 10000 / 100,
         version % 100, nvls ? nvls : "(unset)", CG_VERSION_STRING);
  printf("  command: mpiexec -n %d", ranks);
  for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
  printf("\n");
  fflush(stdout);
}

cudaGraphExec_t cg_bench_end_capture(cudaStream_t stream) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

double cg_bench_slowest_per_iter(cudaEvent_t start, cudaEvent_t stop, int iters) {
  float ms = 0;
  CUDA_CHECK(cudaEventSynchronize(stop));
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  double mine = ms * 1e-3 / iters, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

void *cg_bench_window_alloc(ncclComm_t nccl, size_t bytes, void **window) {
  *window = NULL;
#if defined(NCCL_WIN_COLL_SYMMETRIC)
  int version = 0;
  NCCL_CHECK(ncclGetVersion(&version));
  if (version < 22700) return NULL;
  void *buf = NULL;
  ncclWindow_t win = NULL;
  NCCL_CHECK(ncclMemAlloc(&buf, bytes));
  NCCL_CHECK_ON(nccl, ncclCommWindowRegister(nccl, buf, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
  NCCL_CHECK(cg_test_nccl_settle(nccl, ncclInProgress));
  /* registration off (NCCL_LOCAL_REGISTER=0 without symmetric support) on
   * any rank: no window anywhere, so every rank runs the same modes */
  int have = win != NULL, all_have = 0;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_have) {
    if (win) NCCL_CHECK_ON(nccl, ncclCommWindowDeregister(nccl, win));
    NCCL_CHECK(ncclMemFree(buf));
    return NULL;
  }
  *window = (void *)win;
  return buf;
#else
  (void)nccl, (void)bytes;
  return NULL;
#endif
}

void cg_bench_window_free(ncclComm_t nccl, void *buf, void *window) {
  if (!buf) return;
#if defined(NCCL_WIN_COLL_SYMMETRIC)
  NCCL_CHECK_ON(nccl, ncclCommWindowDeregister(nccl, (ncclWindow_t)window));
  NCCL_CHECK(cg_test_nccl_settle(nccl, ncclInProgress));
  NCCL_CHECK(ncclMemFree(buf));
#else
  (void)nccl, (void)window;
#endif
}

/* The GPU of the rank at `local_rank` of `local_ranks` on its node; -1 and why
 * when there is none. */
static int choose_device(int local_rank, int local_ranks, char *why, size_t why_size) {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) {
    snprintf(why, why_size, "no GPU: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return -1;
  }
  if (devices < local_ranks && !(cg_test_share_gpus() && devices > 0)) {
    snprintf(why, why_size, "%d CUDA device%s for %d ranks on this node; one GPU per rank is needed "
             "(or CG_TEST_SHARE_GPUS=1)", devices, devices == 1 ? "" : "s", local_ranks);
    return -1;
  }
  return local_rank % devices;
}

const char *cg_bench_gpus_per_rank(void) {
  return cg_test_share_gpus() ? "ranks SHARING GPUs (CG_TEST_SHARE_GPUS=1, NCCL over sockets: times are not a "
                                "GPU per rank's)"
                              : "one GPU per rank";
}

int cg_bench_pick_gpu(const char *tool, int *nodes) {
  int rank, ranks, local_rank, local_ranks, first_on_node;
  MPI_Comm node;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  cg_test_share_gpus_setup(rank);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
  first_on_node = local_rank == 0;
  MPI_Allreduce(&first_on_node, nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  char why[256] = "";
  int device = choose_device(local_rank, local_ranks, why, sizeof why);
  int without = device < 0 ? rank : ranks, first_without; /* the lowest rank without a GPU says why */
  MPI_Allreduce(&without, &first_without, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_without < ranks) {
    MPI_Bcast(why, sizeof why, MPI_CHAR, first_without, MPI_COMM_WORLD);
    if (rank == 0) printf("%s: not run: rank %d has no GPU of its own (%s)\n", tool, first_without, why);
    return -1;
  }
  CUDA_CHECK(cudaSetDevice(device));
  return device;
}


int cg_bench_dot_count(const cg_plan_t *plan, const char *what) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) cg_bench_fail("open_memstream", "out of memory");
  cg_status_t st = cg_plan_write_dot(plan, f);
  fclose(f);
  if (st != CG_SUCCESS) cg_bench_fail("cg_plan_write_dot", cg_error_last());
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
  free(text);
  return n;
}

static const char *const own_kernel_sizes[2] = {"CG_ONESHOT_MAX_BYTES", "CG_TWOSHOT_MAX_BYTES"};

void cg_bench_own_kernels_off(cg_bench_saved_env_t *saved) {
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(own_kernel_sizes[i]);
    saved->set[i] = v != NULL;
    saved->value[i] = v ? strdup(v) : NULL;
    if (v && !saved->value[i]) cg_bench_fail("strdup", "out of memory");
    setenv(own_kernel_sizes[i], "0", 1);
  }
}

void cg_bench_restore_env(cg_bench_saved_env_t *saved) {
  for (int i = 0; i < 2; i++) {
    if (saved->set[i]) setenv(own_kernel_sizes[i], saved->value[i], 1);
    else unsetenv(own_kernel_sizes[i]);
    free(saved->value[i]);
    saved->value[i] = NULL;
  }
}
