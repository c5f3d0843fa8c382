/* Profiling a device plan for cg_plan_tune: its steps captured again with a
 * time stamp before and after each one (and one at the start), replayed,
 * read back, and the stamps' own cost taken out (cg_profile_remove_stamps). */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "cuda_check.h"
#include "cuda_plan_state.h"
#include "error.h"
#include "plan_internal.h"
#include "plan_lock.h"
#include "plan_measure.h"

/* What one profiling stamp adds to a chain of dependent work inside a
 * replayed graph: a captured chain of stamps, replayed, the median gap. */
#define STAMP_CHAIN 33
static cg_status_t stamp_cost(double *us, cudaStream_t s, const char *where) {
  unsigned long long *dev = NULL, host[STAMP_CHAIN];
  double gaps[5];
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cg_status_t st = CG_SUCCESS;
  cudaError_t err = cudaMalloc((void **)&dev, sizeof host);
  *us = 0;
  if (err != cudaSuccess) return cg_fail_cuda(err, "cudaMalloc (profiling stamps)", "%s", where);
  cudaStream_t chain = NULL;
  if ((err = cudaStreamCreateWithFlags(&chain, cudaStreamNonBlocking)) != cudaSuccess) {
    chain = NULL;
    st = cg_fail_cuda(err, "cudaStreamCreateWithFlags", "%s", where);
  }
  if (st == CG_SUCCESS && (err = cudaStreamBeginCapture(chain, cudaStreamCaptureModeThreadLocal)) != cudaSuccess)
    st = cg_fail_cuda(err, "cudaStreamBeginCapture", "%s", where);
  for (int k = 0; k < STAMP_CHAIN && st == CG_SUCCESS; k++)
    if ((err = cg_time_stamp_launch(&dev[k], chain)) != cudaSuccess)
      st = cg_fail_cuda(err, "the profiling stamp", "%s", where);
  if (chain && (err = cudaStreamEndCapture(chain, &graph)) != cudaSuccess && st == CG_SUCCESS)
    st = cg_fail_cuda(err, "cudaStreamEndCapture", "%s", where);
  if (st == CG_SUCCESS) st = cg_cuda_instantiate(&exec, graph, s, where);
  for (int r = -1; r < 5 && st == CG_SUCCESS; r++) {
    if ((err = cudaGraphLaunch(exec, s)) != cudaSuccess || (err = cudaStreamSynchronize(s)) != cudaSuccess ||
        (err = cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost)) != cudaSuccess)
      st = cg_fail_cuda(err, "timing the profiling stamps", "%s", where);
    else if (r >= 0)
      gaps[r] = (double)(host[STAMP_CHAIN - 1] - host[0]) / 1e3 / (STAMP_CHAIN - 1);
  }
  if (st == CG_SUCCESS) {
    for (int i = 1; i < 5; i++)
      for (int j = i; j > 0 && gaps[j - 1] > gaps[j]; j--) {
        double t = gaps[j];
        gaps[j] = gaps[j - 1], gaps[j - 1] = t;
      }
    *us = gaps[2];
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (chain) cudaStreamDestroy(chain);
  cudaFree(dev);
  return st;
}

cg_status_t cg_cuda_profile(cg_profile_t *out, cg_plan_t *p, int replays, void *stream, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  size_t slots = 2 * (size_t)p->n_steps + 1;
  int done = 1, previous = 0;
  *out = (cg_profile_t){0};
  cg_status_t st = cg_cuda_check_runnable(p, where);
  if (st == CG_SUCCESS) st = cg_cuda_test(&done, p);
  if (st != CG_SUCCESS) return st;
  if (!done)
    return cg_fail(CG_ERR_IN_PROGRESS, "%s: the plan's cg_plan_start replay is running: wait for it first", where);
  unsigned long long *dev = NULL, *kept = NULL;
  uint64_t *all = calloc(slots * (size_t)replays, sizeof *all);
  if (!all) st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating profiling stamps", where);
  cudaGetDevice(&previous);
  cudaSetDevice(p->device);
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaStream_t s = stream ? (cudaStream_t)stream : c->lanes[0];
  cudaError_t err = cudaSuccess;
  if (st == CG_SUCCESS && (err = cudaMalloc((void **)&dev, slots * sizeof *dev)) != cudaSuccess) {
    dev = NULL;
    st = cg_fail_cuda(err, "cudaMalloc (profiling stamps)", "%s", where);
  }
  if (st == CG_SUCCESS) {
    /* the watchdog's marks count the plan's own replays: not these
     * (marking() leaves them out while stamps are set) */
    c->stamps = dev;
    st = cg_cuda_capture(&graph, p, where);
    c->stamps = NULL;
  }
  if (st == CG_SUCCESS) st = cg_cuda_instantiate(&exec, graph, s, where);
  /* One warm-up replay, waited for; then one more that absorbs the ranks'
   * skew at the start, and the profiled ones back to back, each one's stamps
   * copied aside on the device: a replay launched alone waits at its first
   * collective for the latest rank, and calibration would charge that wait
   * to every collective's fixed cost. */
  if (st == CG_SUCCESS && (err = cudaMalloc((void **)&kept, slots * (size_t)replays * sizeof *kept)) != cudaSuccess) {
    kept = NULL;
    st = cg_fail_cuda(err, "cudaMalloc (profiling stamps)", "%s", where);
  }
  if (st == CG_SUCCESS &&
      ((err = cudaGraphLaunch(exec, s)) != cudaSuccess || (err = cudaStreamSynchronize(s)) != cudaSuccess))
    st = cg_fail_cuda(err, "a profiling replay", "%s", where);
  for (int k = -1; k < replays && st == CG_SUCCESS; k++) {
    if ((err = cudaGraphLaunch(exec, s)) != cudaSuccess)
      st = cg_fail_cuda(err, "a profiling replay", "%s", where);
    else if (k >= 0 && (err = cudaMemcpyAsync(kept + (size_t)k * slots, dev, slots * sizeof *dev,
                                              cudaMemcpyDeviceToDevice, s)) != cudaSuccess)
      st = cg_fail_cuda(err, "cudaMemcpyAsync (profiling stamps)", "%s", where);
  }
  if (st == CG_SUCCESS && ((err = cudaStreamSynchronize(s)) != cudaSuccess ||
                           (err = cudaMemcpy(all, kept, slots * (size_t)replays * sizeof *kept,
                                             cudaMemcpyDeviceToHost)) != cudaSuccess))
    st = cg_fail_cuda(err, "the profiling replays", "%s", where);
  if (st == CG_SUCCESS) st = cg_profile_from_stamps(out, all, p->n_steps, replays, where);
  /* without the stamps' cost the profile still holds, only longer */
  double stamp_us = 0;
  if (st == CG_SUCCESS && stamp_cost(&stamp_us, s, where) != CG_SUCCESS) stamp_us = 0;
  if (st == CG_SUCCESS) cg_profile_remove_stamps(out, p, stamp_us);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (dev) cudaFree(dev);
  if (kept) cudaFree(kept);
  cudaSetDevice(previous);
  free(all);
  return st;
}
