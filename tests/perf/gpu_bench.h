/* What the GPU benchmarks share: one GPU per rank, calls that abort the job
 * with the rank and the error when they fail, and medians. */
#ifndef CG_GPU_BENCH_H
#define CG_GPU_BENCH_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "bench_stats.h"
#include "commgraph.h"
#include "nccl_settle.h"

/* Prints "rank R: FAILED what: why" and aborts the job (a non-zero exit). */
_Noreturn void cg_bench_fail(const char *what, const char *why);


#define CUDA_CHECK(call)                                                  \
  do {                                                                    \
    cudaError_t e_ = (call);                                              \
    if (e_ != cudaSuccess) cg_bench_fail(#call, cudaGetErrorString(e_));  \
  } while (0)
#define NCCL_CHECK(call)                                                  \
  do {                                                                    \
    ncclResult_t r_ = (call);                                             \
    if (r_ != ncclSuccess) cg_bench_fail(#call, ncclGetErrorString(r_));  \
  } while (0)
/* NCCL_CHECK for a call on `comm` outside a group: settled first */
#define NCCL_CHECK_ON(comm, call) NCCL_CHECK(cg_test_nccl_settle((comm), (call)))
#define CG_CHECK(call)                                                    \
  do {                                                                    \
    cg_status_t s_ = (call);                                              \
    if (s_ != CG_SUCCESS) cg_bench_fail(#call, cg_error_last());          \
  } while (0)


/* A commgraph communicator of the NCCL backend over MPI_COMM_WORLD on
 * `device`, and the program's NCCL communicator of it (cg_comm_nccl). */
cg_comm_t *cg_bench_nccl_comm(int device, ncclComm_t *nccl);

/* Rank 0 prints the lines every GPU benchmark starts with, after its title:
 * the GPU, the ranks and nodes, NCCL's version and NCCL_NVLS_ENABLE, the
 * commgraph version, and the command line. */
void cg_bench_print_setup(const char *title, int device, int nodes, int argc, char **argv);

/* Ends the capture on `stream` and instantiates what it captured. */
cudaGraphExec_t cg_bench_end_capture(cudaStream_t stream);

/* Waits for `stop` and returns the slowest rank's seconds per iteration of
 * the `iters` between `start` and `stop` (an MPI_Allreduce, which also lines
 * the ranks up for the next batch). */
double cg_bench_slowest_per_iter(cudaEvent_t start, cudaEvent_t stop, int iters);

/* `bytes` of ncclMemAlloc memory registered as a symmetric window
 * (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC) on the program's
 * communicator `nccl`, the registration waited for (on a non-blocking
 * communicator NCCL registers on a thread of its own and returns at once);
 * NULL where this NCCL has no symmetric windows (before 2.27) or registered
 * none on some rank (then on every rank). Collective over the communicator. *window is for
 * cg_bench_window_free. */
void *cg_bench_window_alloc(ncclComm_t nccl, size_t bytes, void **window);
/* Deregisters (waited for) and frees what cg_bench_window_alloc gave; NULL is fine. */
void cg_bench_window_free(ncclComm_t nccl, void *buf, void *window);

/* One GPU per rank, numbered by the rank's place on its node, made current.
 * Collective over MPI_COMM_WORLD: every rank must have one, or none runs; then
 * rank 0 prints "<tool>: not run: rank R has no GPU of its own (why)" and every
 * rank gets -1. *nodes is the number of nodes. */
int cg_bench_pick_gpu(const char *tool, int *nodes);
/* How ranks hold GPUs, for the header: "one GPU per rank", or ranks sharing
 * them (CG_TEST_SHARE_GPUS=1: cg_bench_pick_gpu shares, every time then far
 * from a machine with a GPU per rank). */
const char *cg_bench_gpus_per_rank(void);

/* How many times the plan's DOT (cg_plan_write_dot) holds `what`: for
 * instance "one-shot allreduce", the path the NCCL backend chose. */
int cg_bench_dot_count(const cg_plan_t *plan, const char *what);

/* commgraph's own allreduce kernels (one-shot, two-shot: docs/gpu.md) off
 * for the communicators whose first plan compiles until the restore
 * (CG_ONESHOT_MAX_BYTES and CG_TWOSHOT_MAX_BYTES set to 0), then the
 * variables as they were: a communicator reads them on its first plan. */
typedef struct cg_bench_saved_env {
  char *value[2];
  int set[2];
} cg_bench_saved_env_t;
void cg_bench_own_kernels_off(cg_bench_saved_env_t *saved);
void cg_bench_restore_env(cg_bench_saved_env_t *saved);

#endif
