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
#include "stream_wait.h"

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

/* Every stamp of every kept replay was written: none is zero (the stamps
 * are cleared before each replay, and each replay writes every slot). */
static cg_status_t check_stamps(const uint64_t *all, size_t slots, int replays, const char *where) {
  for (int k = 0; k < replays; k++) {
    const uint64_t *row = all + (size_t)k * slots;
    for (size_t i = 0; i < slots; i++)
      if (!row[i])
        return cg_fail(CG_ERR_INTERNAL, "%s: profiling replay %d: stamp %zu of %zu was never written", where, k + 1, i,
                       slots);
  }
  return CG_SUCCESS;
}

/* Where a hung profiling replay is, from a copy of its stamps taken beside
 * it (on a stream of its own: the copy engine is not what hangs): the first
 * step in issue order that started and did not end, else the first that did
 * not start though everything it depends on ended. 0: the copy did not come
 * back within a second (`snap` may still be written to then). */
static int where_stamps(cg_watchdog_where_t *w, const cg_plan_t *p, const unsigned long long *dev, uint64_t *snap,
                        size_t bytes) {
  cudaStream_t peek = NULL;
  *w = (cg_watchdog_where_t){CG_NO_STEP, CG_NO_STEP, 0, NULL};
  int read = cudaStreamCreateWithFlags(&peek, cudaStreamNonBlocking) == cudaSuccess &&
             cudaMemcpyAsync(snap, dev, bytes, cudaMemcpyDeviceToHost, peek) == cudaSuccess &&
             cg_cuda_stream_wait_for(peek, 1.0) == cudaSuccess;
  if (peek) cudaStreamDestroy(peek);
  for (uint32_t k = 0; k < p->n_steps && read; k++) {
    uint32_t i = p->issue_order[k];
    if (snap[2 * (size_t)i + 1]) {
      w->n_done++;
      w->last_done = i;
    } else if (snap[2 * (size_t)i] && w->waiting == CG_NO_STEP) {
      w->waiting = i;
    }
  }
  for (uint32_t k = 0; k < p->n_steps && read && w->waiting == CG_NO_STEP; k++) {
    const cg_step_t *s = &p->steps[p->issue_order[k]];
    int ready = !snap[2 * (size_t)p->issue_order[k]];
    for (uint32_t e = 0; e < s->n_deps && ready; e++) ready = snap[2 * (size_t)s->deps[e] + 1] != 0;
    if (ready) w->waiting = p->issue_order[k];
  }
  return read;
}

/* Replays launched back to back on `s`, each followed by an event in `ends`
 * (n of them; the first of them is replay `first` of `replays`), waited for:
 * each at most the plan's timeout after the one before it ended, if it has
 * one (polled, answering the roll calls of other ranks as cg_plan_wait
 * does), else for as long as they take. At a timeout the report names the
 * step the hung replay waits in, the plan's communicators are aborted, and
 * *drained says whether the stream ran dry within another timeout (if not,
 * its memory must stay). */
static cg_status_t await_replays(int *drained, cg_plan_t *p, cudaStream_t s, const cudaEvent_t *ends, int n,
                                 int first, int replays, const unsigned long long *dev, uint64_t *snap, size_t bytes,
                                 const char *where) {
  cudaError_t err = cudaSuccess;
  *drained = 1;
  if (p->timeout_s <= 0) {
    err = cudaEventSynchronize(ends[n - 1]);
    return err == cudaSuccess ? CG_SUCCESS : cg_fail_cuda(err, "the profiling replays", "%s", where);
  }
  uint64_t began = cg_clock_ns(), started = began, answered = 0;
  int hung = 0; /* the first replay not yet ended */
  for (;;) {
    while (hung < n && (err = cudaEventQuery(ends[hung])) == cudaSuccess) hung++, started = cg_clock_ns();
    if (hung == n) return CG_SUCCESS;
    if (err != cudaErrorNotReady) return cg_fail_cuda(err, "the profiling replays", "%s", where);
    if (cg_watchdog_expired(p, started)) break;
    cg_watchdog_answer(p, p->replays + 1, &answered);
    cg_poll_pause(began);
  }
  cg_watchdog_where_t w;
  int read = where_stamps(&w, p, dev, snap, bytes);
  cg_status_t st = cg_cuda_profile_time_out(p, where, p->replays + 1, first + hung, replays, &w, read);
  *drained = read && cg_cuda_stream_wait_for(s, p->timeout_s) != cudaErrorNotReady;
  return st;
}

cg_status_t cg_cuda_profile(cg_profile_t *out, cg_plan_t *p, int replays, void *stream, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  size_t slots = 2 * (size_t)p->n_steps + 1, bytes = slots * sizeof(unsigned long long);
  int previous = 0, launched = 0, drained = 1;
  *out = (cg_profile_t){0};
  /* the plan's replays launched on users' streams or in their graphs may
   * still run: the profiling replays' collectives must not meet theirs on
   * the communicators (as for cg_plan_rebind) */
  cg_status_t st = cg_cuda_check_runnable(p, where);
  if (st == CG_SUCCESS) st = cg_cuda_quiesce(p, where);
  if (st != CG_SUCCESS) return st;
  unsigned long long *dev = NULL;
  /* pinned: every kept replay's stamps, copied there after it, and a look
   * at a hung replay's */
  uint64_t *all = NULL, *snap = NULL;
  cudaEvent_t *ends = calloc((size_t)replays + 2, sizeof *ends);
  if (!ends) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating profiling events", where);
  cudaGetDevice(&previous);
  cudaSetDevice(p->device);
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaStream_t s = stream ? (cudaStream_t)stream : c->lanes[0];
  cudaError_t err = cudaMalloc((void **)&dev, bytes);
  if (err != cudaSuccess) {
    dev = NULL;
    st = cg_fail_cuda(err, "cudaMalloc (the profiling stamps)", "%s", where);
  }
  if (st == CG_SUCCESS && (err = cudaMallocHost((void **)&all, bytes * ((size_t)replays + 1))) != cudaSuccess) {
    all = NULL;
    st = cg_fail_cuda(err, "cudaMallocHost (every profiled replay's stamps)", "%s", where);
  }
  snap = all ? all + (size_t)replays * slots : NULL;
  for (int k = 0; k < replays + 2 && st == CG_SUCCESS; k++)
    if ((err = cudaEventCreateWithFlags(&ends[k], cudaEventDisableTiming)) != cudaSuccess) {
      ends[k] = NULL;
      st = cg_fail_cuda(err, "cudaEventCreateWithFlags (profiling)", "%s", where);
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
   * cleared before it and copied to the host behind it: a replay launched
   * alone waits at its first collective for the latest rank, and
   * calibration would charge that wait to every collective's fixed cost. */
  for (int k = -2; k < replays && st == CG_SUCCESS; k++) {
    if ((err = cudaMemsetAsync(dev, 0, bytes, s)) != cudaSuccess ||
        (err = cudaGraphLaunch(exec, s)) != cudaSuccess) {
      st = cg_fail_cuda(err, "a profiling replay", "%s", where);
      break;
    }
    launched = 1;
    if (k >= 0 &&
        (err = cudaMemcpyAsync(all + (size_t)k * slots, dev, bytes, cudaMemcpyDeviceToHost, s)) != cudaSuccess)
      st = cg_fail_cuda(err, "cudaMemcpyAsync (the profiling stamps)", "%s", where);
    if (st == CG_SUCCESS && (err = cudaEventRecord(ends[k + 2], s)) != cudaSuccess)
      st = cg_fail_cuda(err, "cudaEventRecord (profiling)", "%s", where);
    if (st == CG_SUCCESS && k == -2) /* the warm-up */
      st = await_replays(&drained, p, s, ends, 1, 1, replays + 2, dev, snap, bytes, where);
  }
  if (st == CG_SUCCESS)
    st = await_replays(&drained, p, s, ends + 1, replays + 1, 2, replays + 2, dev, snap, bytes, where);
  /* after another failure the replays launched before it may still run;
   * one that hangs is reported and aborted as at a timeout */
  if (st != CG_SUCCESS && launched && drained && cg_cuda_stream_wait_for(s, p->timeout_s) == cudaErrorNotReady) {
    cg_watchdog_where_t w;
    int read = where_stamps(&w, p, dev, snap, bytes);
    st = cg_cuda_profile_time_out(p, where, p->replays + 1, 0, replays + 2, &w, read);
    drained = read && cg_cuda_stream_wait_for(s, p->timeout_s) != cudaErrorNotReady;
  }
  if (st == CG_SUCCESS) st = check_stamps(all, slots, replays, where);
  if (st == CG_SUCCESS) st = cg_profile_from_stamps(out, all, p->n_steps, replays, where);
  /* without the stamps' cost the profile still holds, only longer */
  double stamp_us = 0;
  if (st == CG_SUCCESS && stamp_cost(&stamp_us, s, where) != CG_SUCCESS) stamp_us = 0;
  if (st == CG_SUCCESS) cg_profile_remove_stamps(out, p, stamp_us);
  /* a replay that never ended may still write the stamps: they stay */
  if (drained) {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (dev) cudaFree(dev);
    if (all) cudaFreeHost(all);
    for (int k = 0; k < replays + 2; k++)
      if (ends[k]) cudaEventDestroy(ends[k]);
  }
  free(ends);
  cudaSetDevice(previous);
  return st;
}
