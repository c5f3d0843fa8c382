/* The measured symmetric/plain cut-over: see nccl_cutover.h. */
#include "nccl_cutover.h"

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_check.h"
#include "nccl_check.h"
#include "stream_wait.h"

#define MAX_BYTES ((size_t)8 << 20)
#define CALLS_PER_GRAPH 8
#define ROUNDS 5

static const cg_dtype_t measured[CG_NCCL_SYMMETRIC_DTYPES] = {CG_FLOAT32, CG_FLOAT16, CG_BFLOAT16};
static const ncclDataType_t nccl_types[CG_NCCL_SYMMETRIC_DTYPES] = {ncclFloat32, ncclFloat16, ncclBfloat16};

size_t cg_nccl_cutover_pick(const double (*us)[2], int sizes) {
  return cg_nccl_cutover_pick_handicapped(us, sizes, 1.0);
}

size_t cg_nccl_cutover_pick_handicapped(const double (*us)[2], int sizes, double handicap) {
  for (int i = 0; i < sizes; i++) {
    int loses = us[i][0] * handicap >= us[i][1];
    int next_loses = i + 1 == sizes || us[i + 1][0] * handicap >= us[i + 1][1];
    if (loses && next_loses) return i ? CG_CUTOVER_MIN_BYTES << (i - 1) : 0;
  }
  return SIZE_MAX;
}

void cg_nccl_cutover_ratios(double *ratio, const double (*us)[2], int sizes) {
  for (int i = 0; i < sizes; i++) ratio[i] = us[i][1] > 0 ? us[i][0] / us[i][1] : 0;
}

cg_status_t cg_nccl_enqueue_allreduce(const void *ctx, cudaStream_t stream) {
  const cg_nccl_timed_allreduce_t *a = ctx;
  ncclResult_t r = cg_nccl_settle_within(
      a->n->nccl, ncclAllReduce(a->buf, a->buf, a->count, a->type, ncclSum, a->n->nccl, stream), a->wait);
  if (r == ncclInProgress)
    return cg_fail(CG_ERR_TIMEOUT, "%s: ncclAllReduce of %zu elements did not finish: not every rank of the "
                   "communicator took part", a->what, a->count);
  return r == ncclSuccess ? CG_SUCCESS
                          : cg_fail_nccl(r, a->n->nccl, "ncclAllReduce", "%s, %zu elements", a->what, a->count);
}

/* One eager call (NCCL sets up what the buffers need outside any capture),
 * then a graph of CALLS_PER_GRAPH of them. */
static cg_status_t capture(cudaGraphExec_t *exec, const cg_nccl_call_t *call, cudaStream_t stream, const char *what) {
  cudaGraph_t graph = NULL;
  *exec = NULL;
  cg_status_t st = call->enqueue(call->ctx, stream);
  if (st != CG_SUCCESS) return st;
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) return cg_fail_cuda(e, "cudaStreamBeginCapture", "%s", what);
  for (int i = 0; i < CALLS_PER_GRAPH && st == CG_SUCCESS; i++) st = call->enqueue(call->ctx, stream);
  e = cudaStreamEndCapture(stream, &graph); /* ends a capture a failed call left open too */
  if (st == CG_SUCCESS && e != cudaSuccess) st = cg_fail_cuda(e, "cudaStreamEndCapture", "%s", what);
  if (st == CG_SUCCESS && (e = cudaGraphInstantiate(exec, graph, 0)) != cudaSuccess) {
    *exec = NULL;
    st = cg_fail_cuda(e, "cudaGraphInstantiate", "%s", what);
  }
  if (graph) cudaGraphDestroy(graph);
  return st;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median time of one call in each graph, launched in turn. */
static cg_status_t time_pair(double us[2], cudaGraphExec_t exec[2], cudaStream_t stream, cudaEvent_t start,
                             cudaEvent_t stop, const cg_wait_t *wait, const char *what) {
  double t[2][ROUNDS];
  cudaError_t e = cudaSuccess;
  const char *call = "cudaGraphLaunch";
  int gave_up = 0;
  for (int p = 0; p < 2 && e == cudaSuccess; p++) e = cudaGraphLaunch(exec[p], stream);
  for (int r = 0; r < ROUNDS && e == cudaSuccess; r++)
    for (int p = 0; p < 2 && e == cudaSuccess; p++) {
      float ms = 0;
      if ((e = cudaEventRecord(start, stream)) != cudaSuccess) call = "cudaEventRecord";
      else if ((e = cudaGraphLaunch(exec[p], stream)) != cudaSuccess) call = "cudaGraphLaunch";
      else if ((e = cudaEventRecord(stop, stream)) != cudaSuccess) call = "cudaEventRecord";
      /* `stop` is the stream's last work: waiting for the stream waits for it */
      else if ((e = cg_cuda_stream_wait(&gave_up, stream, wait)) != cudaSuccess) call = "cudaStreamSynchronize";
      else if ((e = cudaEventElapsedTime(&ms, start, stop)) != cudaSuccess) call = "cudaEventElapsedTime";
      else t[p][r] = 1e3 * ms / CALLS_PER_GRAPH;
    }
  if (gave_up)
    return cg_fail(CG_ERR_TIMEOUT, "%s: the timed calls did not finish: not every rank of the communicator took part",
                   what);
  if (e != cudaSuccess) return cg_fail_cuda(e, call, "%s", what);
  for (int p = 0; p < 2; p++) {
    qsort(t[p], ROUNDS, sizeof t[p][0], by_value);
    us[p] = t[p][ROUNDS / 2];
  }
  return CG_SUCCESS;
}

cg_status_t cg_nccl_time_two_ways(double us[2], int *abort_comm, cg_nccl_comm_t *n, cudaStream_t stream,
                                  cudaEvent_t start, cudaEvent_t stop, const cg_nccl_call_t call[2],
                                  const cg_wait_t *wait, const char *what) {
  cudaGraphExec_t exec[2] = {NULL, NULL};
  cg_status_t st = capture(&exec[0], &call[0], stream, what);
  if (st == CG_SUCCESS) st = capture(&exec[1], &call[1], stream, what);
  /* a rank that failed here has left eager calls the others wait in: all stop, and abort */
  int fine = 0;
  if (st != CG_ERR_TIMEOUT) {
    cg_status_t agreed = cg_nccl_agree_within(&fine, st == CG_SUCCESS, n, wait, what);
    if (agreed != CG_SUCCESS) st = agreed;
  }
  if (fine) st = time_pair(us, exec, stream, start, stop, wait, what);
  for (int p = 0; p < 2; p++)
    if (exec[p]) cudaGraphExecDestroy(exec[p]);
  if (!fine || st != CG_SUCCESS) {
    *abort_comm = 1;
    if (st == CG_SUCCESS) st = cg_fail(CG_ERR_BACKEND, "%s: another rank failed", what);
  }
  return st;
}

cg_status_t cg_nccl_cutover_measure(size_t symmetric_max[CG_NCCL_SYMMETRIC_DTYPES],
                                    double ratio[CG_NCCL_SYMMETRIC_DTYPES][CG_NCCL_MEASURED_SIZES], int *abort_comm,
                                    cg_nccl_comm_t *n, void *window, void *plain, size_t bytes,
                                    const cg_wait_t *wait, const char *where) {
  /* [dtype][size][path]: microseconds per call, path 0 symmetric */
  double us[CG_NCCL_SYMMETRIC_DTYPES][CG_CUTOVER_MAX_SIZES][2] = {{{0}}};
  double slowest[CG_NCCL_SYMMETRIC_DTYPES][CG_CUTOVER_MAX_SIZES][2] = {{{0}}};
  cudaStream_t stream = NULL;
  cudaEvent_t start = NULL, stop = NULL;
  cudaError_t e = cudaSuccess;
  cg_status_t st = CG_SUCCESS;
  int sizes = 0;
  *abort_comm = 0;
  for (int d = 0; d < CG_NCCL_SYMMETRIC_DTYPES; d++) {
    symmetric_max[d] = SIZE_MAX;
    for (int i = 0; i < CG_NCCL_MEASURED_SIZES; i++) ratio[d][i] = 0;
  }
  for (size_t s = CG_CUTOVER_MIN_BYTES; s <= bytes && s <= MAX_BYTES && sizes < CG_CUTOVER_MAX_SIZES; s *= 2) sizes++;
  if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess ||
      (e = cudaEventCreate(&start)) != cudaSuccess || (e = cudaEventCreate(&stop)) != cudaSuccess)
    st = cg_fail_cuda(e, "cudaStreamCreate/cudaEventCreate", "%s: measuring the symmetric cut-over", where);
  /* no rank starts the NCCL calls of a size unless every rank got there */
  int all_ok = 0;
  cg_status_t agreed = cg_nccl_agree_within(&all_ok, st == CG_SUCCESS, n, wait, where);
  if (agreed != CG_SUCCESS) st = agreed;
  if (!all_ok) {
    if (st == CG_SUCCESS) st = cg_fail(CG_ERR_BACKEND, "%s: another rank could not measure the symmetric cut-over",
                                       where);
    goto out;
  }
  for (int d = 0; d < CG_NCCL_SYMMETRIC_DTYPES; d++)
    for (int i = 0; i < sizes; i++) {
      char what[200];
      snprintf(what, sizeof what, "%s: measuring the symmetric cut-over (%zu bytes of %s)", where,
               CG_CUTOVER_MIN_BYTES << i, cg_dtype_name(measured[d]));
      size_t count = (CG_CUTOVER_MIN_BYTES << i) / cg_dtype_size(measured[d]);
      cg_nccl_timed_allreduce_t on[2] = {{n, window, count, nccl_types[d], what, wait},
                                         {n, plain, count, nccl_types[d], what, wait}};
      cg_nccl_call_t call[2] = {{cg_nccl_enqueue_allreduce, &on[0]}, {cg_nccl_enqueue_allreduce, &on[1]}};
      if ((st = cg_nccl_time_two_ways(us[d][i], abort_comm, n, stream, start, stop, call, wait, what)) != CG_SUCCESS)
        goto out;
    }
  /* a failure in time_pair on one rank leaves the others' graphs waiting on
   * the device before they get here: only the sticky errors of a broken
   * device fail there */
  if ((st = cg_nccl_max_within(&slowest[0][0][0], &us[0][0][0], (int)(sizeof us / sizeof(double)), n, wait,
                                where)) != CG_SUCCESS) {
    if (st == CG_ERR_TIMEOUT) *abort_comm = 1; /* its peers may still run a timed call with this rank */
    goto out;
  }
  for (int d = 0; d < CG_NCCL_SYMMETRIC_DTYPES; d++) {
    symmetric_max[d] = cg_nccl_cutover_pick((const double (*)[2])slowest[d], sizes);
    cg_nccl_cutover_ratios(ratio[d], (const double (*)[2])slowest[d], sizes);
  }
out:
  /* after an abort the stream may hold kernels that never end: the caller's abort ends them first */
  if (stream && !*abort_comm) cudaStreamSynchronize(stream);
  if (stream) cudaStreamDestroy(stream);
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  return st;
}
