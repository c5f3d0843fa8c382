/* The measured symmetric/plain cut-over: see nccl_cutover.h. */
#include "nccl_cutover.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "cuda_check.h"
#include "nccl_check.h"

#define MIN_BYTES ((size_t)1 << 10)
#define MAX_BYTES ((size_t)8 << 20)
#define MAX_SIZES 14 /* 1 KB ... 8 MB */
#define CALLS_PER_GRAPH 8
#define ROUNDS 5

static const cg_dtype_t measured[CG_NCCL_SYMMETRIC_DTYPES] = {CG_FLOAT32, CG_FLOAT16, CG_BFLOAT16};
static const ncclDataType_t nccl_types[CG_NCCL_SYMMETRIC_DTYPES] = {ncclFloat32, ncclFloat16, ncclBfloat16};

typedef struct bench {
  cg_nccl_comm_t *n;
  cudaStream_t stream;
  cudaEvent_t start, stop;
  const char *where;
} bench_t;

/* One eager call (NCCL sets up what the buffers need outside any capture),
 * then a graph of CALLS_PER_GRAPH of them. */
static cg_status_t capture(cudaGraphExec_t *exec, bench_t *b, void *buf, size_t count, int d) {
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaSuccess;
  const char *call = "ncclAllReduce";
  *exec = NULL;
  ncclResult_t r = cg_nccl_settle(b->n->nccl, ncclAllReduce(buf, buf, count, nccl_types[d], ncclSum, b->n->nccl,
                                                            b->stream));
  if (r == ncclSuccess && (e = cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal)) != cudaSuccess)
    return cg_fail_cuda(e, "cudaStreamBeginCapture", "%s: measuring the symmetric cut-over", b->where);
  for (int i = 0; i < CALLS_PER_GRAPH && r == ncclSuccess; i++)
    r = cg_nccl_settle(b->n->nccl, ncclAllReduce(buf, buf, count, nccl_types[d], ncclSum, b->n->nccl, b->stream));
  if (r == ncclSuccess) call = "cudaStreamEndCapture";
  e = cudaStreamEndCapture(b->stream, &graph); /* ends a capture a failed call left open too */
  if (r != ncclSuccess)
    return cg_fail_nccl(r, b->n->nccl, call, "%s: measuring the symmetric cut-over, %zu %s elements", b->where,
                        count, cg_dtype_name(measured[d]));
  if (e == cudaSuccess) call = "cudaGraphInstantiate", e = cudaGraphInstantiate(exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    *exec = NULL;
    return cg_fail_cuda(e, call, "%s: measuring the symmetric cut-over", b->where);
  }
  return CG_SUCCESS;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median time of one call in the two graphs, launched in turn. */
static cg_status_t time_pair(double us[2], bench_t *b, cudaGraphExec_t exec[2]) {
  double t[2][ROUNDS];
  cudaError_t e = cudaSuccess;
  for (int p = 0; p < 2 && e == cudaSuccess; p++) e = cudaGraphLaunch(exec[p], b->stream);
  for (int r = 0; r < ROUNDS && e == cudaSuccess; r++)
    for (int p = 0; p < 2 && e == cudaSuccess; p++) {
      float ms = 0;
      if ((e = cudaEventRecord(b->start, b->stream)) == cudaSuccess &&
          (e = cudaGraphLaunch(exec[p], b->stream)) == cudaSuccess &&
          (e = cudaEventRecord(b->stop, b->stream)) == cudaSuccess &&
          (e = cudaEventSynchronize(b->stop)) == cudaSuccess &&
          (e = cudaEventElapsedTime(&ms, b->start, b->stop)) == cudaSuccess)
        t[p][r] = 1e3 * ms / CALLS_PER_GRAPH;
    }
  if (e != cudaSuccess) return cg_fail_cuda(e, "cudaGraphLaunch", "%s: measuring the symmetric cut-over", b->where);
  for (int p = 0; p < 2; p++) {
    qsort(t[p], ROUNDS, sizeof t[p][0], by_value);
    us[p] = t[p][ROUNDS / 2];
  }
  return CG_SUCCESS;
}

cg_status_t cg_nccl_cutover_measure(size_t symmetric_max[CG_NCCL_SYMMETRIC_DTYPES], cg_nccl_comm_t *n, void *window,
                                    void *plain, size_t bytes, const char *where) {
  /* [dtype][size][path]: microseconds per call, 0 is symmetric */
  double us[CG_NCCL_SYMMETRIC_DTYPES][MAX_SIZES][2] = {{{0}}}, slowest[CG_NCCL_SYMMETRIC_DTYPES][MAX_SIZES][2];
  bench_t b = {n, NULL, NULL, NULL, where};
  cudaError_t e = cudaSuccess;
  cg_status_t st = CG_SUCCESS;
  int sizes = 0;
  for (size_t s = MIN_BYTES; s <= bytes && s <= MAX_BYTES; s *= 2) sizes++;
  if ((e = cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking)) != cudaSuccess ||
      (e = cudaEventCreate(&b.start)) != cudaSuccess || (e = cudaEventCreate(&b.stop)) != cudaSuccess)
    st = cg_fail_cuda(e, "cudaStreamCreate/cudaEventCreate", "%s: measuring the symmetric cut-over", where);
  /* no rank starts the NCCL calls unless every rank can */
  int ready = st == CG_SUCCESS, all_ready = 0;
  if (MPI_Allreduce(&ready, &all_ready, 1, MPI_INT, MPI_MIN, n->control->control) != MPI_SUCCESS) all_ready = 0;
  if (st == CG_SUCCESS && !all_ready)
    st = cg_fail(CG_ERR_BACKEND, "%s: another rank could not measure the symmetric cut-over", where);
  for (int d = 0; d < CG_NCCL_SYMMETRIC_DTYPES && st == CG_SUCCESS; d++)
    for (int i = 0; i < sizes && st == CG_SUCCESS; i++) {
      size_t count = (MIN_BYTES << i) / cg_dtype_size(measured[d]);
      cudaGraphExec_t exec[2] = {NULL, NULL};
      st = capture(&exec[0], &b, window, count, d);
      if (st == CG_SUCCESS) st = capture(&exec[1], &b, plain, count, d);
      if (st == CG_SUCCESS) st = time_pair(us[d][i], &b, exec);
      for (int p = 0; p < 2; p++)
        if (exec[p]) cudaGraphExecDestroy(exec[p]);
    }
  /* a failure is a time no path beats; a rank that failed in the middle
   * leaves the others waiting in their next NCCL call (as a plan's replay
   * would), so most failures are agreed before the calls (ready) */
  if (st != CG_SUCCESS)
    for (int d = 0; d < CG_NCCL_SYMMETRIC_DTYPES; d++)
      for (int i = 0; i < MAX_SIZES; i++) us[d][i][0] = us[d][i][1] = 1e30;
  if (MPI_Allreduce(us, slowest, (int)(sizeof us / sizeof(double)), MPI_DOUBLE, MPI_MAX, n->control->control) !=
          MPI_SUCCESS &&
      st == CG_SUCCESS)
    st = cg_fail(CG_ERR_BACKEND, "%s: MPI_Allreduce of the cut-over times failed", where);
  if (st == CG_SUCCESS && slowest[0][0][0] >= 1e30)
    st = cg_fail(CG_ERR_BACKEND, "%s: another rank failed to measure the symmetric cut-over", where);
  for (int d = 0; d < CG_NCCL_SYMMETRIC_DTYPES; d++) {
    symmetric_max[d] = 0;
    for (int i = 0; i < sizes && slowest[d][i][0] < slowest[d][i][1]; i++) symmetric_max[d] = MIN_BYTES << i;
  }
  if (b.stream) cudaStreamSynchronize(b.stream), cudaStreamDestroy(b.stream);
  if (b.start) cudaEventDestroy(b.start);
  if (b.stop) cudaEventDestroy(b.stop);
  return st;
}
