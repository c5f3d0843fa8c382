/* Shared by the GPU suites (tests/gpu): MPI start-up with one GPU per rank,
 * picked from the node-local rank; the skip path (every rank prints one line
 * saying why and the job exits 77; with CG_REQUIRE_GPU=1 it fails instead); a
 * per-test time limit; NCCL communicators; poisoned device buffers. Seeds,
 * agreement across ranks (ck_assert_all_ranks), test values, the reference
 * executor and the independent conversions come from the MPI suites' support
 * (mpi_test.h). Do not call cg_mpi_test_main, cg_mpi_tcase, cg_mpi_rank or
 * cg_mpi_size here: their GPU counterparts below replace them. */
#ifndef CG_GPU_TEST_H
#define CG_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "commgraph/cuda.h"
#include "commgraph/nccl.h"
#include "mpi_test.h"
#include "nccl_settle.h"
#include "share_gpus.h"

/* Seconds a test may take before the run aborts with its name. */
#define CG_GPU_TEST_TIMEOUT 300

/* Initializes MPI (MPI_THREAD_MULTIPLE requested), picks this rank's GPU from
 * its node-local rank, and either skips (77, or failure with CG_REQUIRE_GPU=1)
 * on every rank when any rank has no GPU of its own, or runs `suite` without
 * forking with rank 0's seed; finalizes MPI; returns the exit status. `name`
 * goes in the skip line. */
int cg_gpu_test_main(Suite *suite, const char *name);
/* Adds a test case with the time limit; use instead of tcase_create. */
TCase *cg_gpu_tcase(const char *name);

int cg_gpu_rank(void);   /* in MPI_COMM_WORLD */
int cg_gpu_size(void);
int cg_gpu_device(void); /* this rank's CUDA device (current on the main thread) */

#undef CUDA_OK /* test_support.h's, with the rank */
#define CUDA_OK(expr)                                                                                \
  do {                                                                                               \
    cudaError_t cuda_err_ = (expr);                                                                  \
    ck_assert_msg(cuda_err_ == cudaSuccess, "%s failed on rank %d: %s", #expr, cg_gpu_rank(),       \
                  cudaGetErrorString(cuda_err_));                                                    \
  } while (0)

#define NCCL_OK(expr)                                                                                \
  do {                                                                                               \
    ncclResult_t nccl_res_ = (expr);                                                                 \
    ck_assert_msg(nccl_res_ == ncclSuccess, "%s failed on rank %d: %s", #expr, cg_gpu_rank(),       \
                  ncclGetErrorString(nccl_res_));                                                    \
  } while (0)

/* cg_compile on every rank, asserting on every rank that it worked
 * everywhere (`what` names the graph in the failure). */
cg_plan_t *cg_gpu_compile_all_ranks(cg_graph_t *g, const char *what);

/* A new device communicator over `mpi` on this rank's GPU: NCCL, or as
 * CG_GPU_TEST_BACKEND says: mpi (staged through host memory), hosttransfer,
 * or mixed (nccl, mpi, hosttransfer in turn); asserts on every rank that it
 * worked everywhere. */
cg_comm_t *cg_gpu_nccl_comm(MPI_Comm mpi);
/* For the suites of the NCCL backend alone: cg_gpu_nccl_comm over the world,
 * or NULL on every rank (rank 0 says "SUITE: skipped" and why) when
 * CG_GPU_TEST_BACKEND chose another backend. */
cg_comm_t *cg_gpu_nccl_only_comm(const char *suite);
/* The backend name the latest cg_gpu_nccl_comm asked for ("nccl",
 * "mpi-staged", "hosttransfer"). */
const char *cg_gpu_requested_backend(void);
/* NCCL communicators over MPI_COMM_WORLD kept for the whole suite (creating
 * one costs a noticeable fraction of a second): the first call creates all of
 * them, every rank must make it in the same test. i < CG_GPU_SHARED_COMMS. The
 * caller does not destroy them. */
#define CG_GPU_SHARED_COMMS 2
cg_comm_t *cg_gpu_shared_comm(int i);

/* cudaMalloc'ed bytes (at least 1) set to CG_MPI_POISON with cudaMemset,
 * which has completed on return. */
void *cg_gpu_alloc(size_t bytes);
/* CG_GPU_TEST_BACKEND=direct: mpi communicators with CG_STAGING_DIRECT, and
 * cg_gpu_alloc gives managed memory. */
int cg_gpu_direct(void);
/* cudaFree, asserting it worked; NULL is fine. */
void cg_gpu_free(void *p);
/* A stream of this rank's GPU for the suite (created on first use). */
cudaStream_t cg_gpu_stream(void);

/* The plan's DOT text (malloc'ed). */
char *cg_gpu_plan_dot(const cg_plan_t *plan);

#endif
