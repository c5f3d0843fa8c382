/* The CUDA realizer: a device plan becomes one CUDA graph.
 *
 * Each lane gets a stream. Every communicator is warmed up on its lane outside
 * any capture; then the plan is captured unit by unit (issue_order.c) in
 * thread-local capture mode: lane 0 begins the capture, the other lanes join
 * it through an event, each unit first waits for the events of its
 * dependencies on other lanes, a unit of several sends and receives is
 * bracketed by the backend's group calls, and a step that a step on another
 * lane depends on records its event afterwards. The lanes join lane 0 again
 * and the captured graph is instantiated once. A bucket's pack and unpack are
 * one launch each of the batched copy kernel (bucket_cuda.c). Events used during capture
 * only become edges of the graph, so they are destroyed right after it. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "agreement.h"
#include "backend.h"
#include "commgraph/cuda.h"
#include "rank_check.h"
#include "error.h"
#include "lower.h"
#include "plan_internal.h"

struct cg_cuda_plan {
  cudaStream_t *lanes;
  uint32_t n_lanes;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaEvent_t run_done; /* cg_plan_start's replay, on lanes[0] */
  int running;
  int launched; /* by cg_plan_launch, on a stream the plan does not know */
};

static cg_status_t cuda_fail(cudaError_t err, const char *where, const char *call) {
  return cg_fail(CG_ERR_BACKEND, "%s: %s: %s", where, call, cudaGetErrorString(err));
}

void cg_cuda_plan_free(cg_plan_t *p) {
  struct cg_cuda_plan *c = p->cuda;
  if (!c) return;
  /* replays still running on a user's stream use the graph and the
   * communicators released right after this; a launch records nothing (it is
   * one cudaGraphLaunch), so waiting for them means waiting for the device */
  if (c->launched) cudaDeviceSynchronize();
  if (c->exec) cudaGraphExecDestroy(c->exec);
  if (c->graph) cudaGraphDestroy(c->graph);
  if (c->run_done) cudaEventDestroy(c->run_done);
  for (uint32_t l = 0; c->lanes && l < c->n_lanes; l++)
    if (c->lanes[l]) cudaStreamDestroy(c->lanes[l]);
  free(c->lanes);
  free(c);
  p->cuda = NULL;
}

static const cg_backend_t *backend_of(const cg_step_t *s) { return s->comm->ops->backend; }

/* Enqueues one unit on its lane: waits, the steps (grouped), event records. */
static cg_status_t capture_unit(cg_plan_t *p, const cg_issue_unit_t *u, cudaEvent_t *events, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  cudaStream_t lane = c->lanes[u->lane];
  cudaError_t err = cudaSuccess;
  cg_status_t st = CG_SUCCESS;
  for (uint32_t k = 0; k < u->n; k++) {
    const cg_step_t *s = &p->steps[p->issue_order[u->first + k]];
    for (uint32_t e = 0; e < s->n_deps; e++) {
      const cg_step_t *d = &p->steps[s->deps[e]];
      if (d->lane != u->lane && (err = cudaStreamWaitEvent(lane, events[s->deps[e]], 0)) != cudaSuccess)
        return cuda_fail(err, where, "cudaStreamWaitEvent");
    }
  }
  const cg_step_t *first = &p->steps[p->issue_order[u->first]];
  int grouped = u->n > 1;
  if (grouped && (st = backend_of(first)->device_group_start(first->comm->impl)) != CG_SUCCESS) return st;
  for (uint32_t k = 0; k < u->n && st == CG_SUCCESS; k++) {
    uint32_t index = p->issue_order[u->first + k];
    const cg_step_t *s = &p->steps[index];
    if (s->kind == CG_STEP_HOST_FUNC) {
      if ((err = cudaLaunchHostFunc(lane, s->fn, s->arg)) != cudaSuccess)
        st = cuda_fail(err, where, "cudaLaunchHostFunc");
    } else if (s->kind == CG_STEP_PACK || s->kind == CG_STEP_UNPACK) {
      st = cg_cuda_bucket_copy(p, s, lane, where);
    } else {
      st = backend_of(s)->device_step_enqueue(s->comm->impl, s, lane);
    }
    if (st != CG_SUCCESS) {
      char step[700], detail[512];
      snprintf(detail, sizeof detail, "%s", cg_error_last());
      cg_step_describe(step, sizeof step, p, index);
      st = cg_fail(st, "%s: %s: %s", where, step, detail);
    }
  }
  if (grouped) {
    cg_status_t end = backend_of(first)->device_group_end(first->comm->impl);
    if (st == CG_SUCCESS) st = end;
  }
  for (uint32_t k = 0; k < u->n && st == CG_SUCCESS; k++) {
    uint32_t index = p->issue_order[u->first + k];
    if (events[index] && (err = cudaEventRecord(events[index], lane)) != cudaSuccess)
      st = cuda_fail(err, where, "cudaEventRecord");
  }
  return st;
}

/* One event per step that a step on another lane waits for. */
static cg_status_t create_events(cudaEvent_t *events, const cg_plan_t *p, const char *where) {
  for (uint32_t i = 0; i < p->n_steps; i++) {
    const cg_step_t *s = &p->steps[i];
    int crosses = 0;
    for (uint32_t e = 0; e < s->n_succs && !crosses; e++) crosses = p->steps[s->succs[e]].lane != s->lane;
    if (!crosses) continue;
    cudaError_t err = cudaEventCreateWithFlags(&events[i], cudaEventDisableTiming);
    if (err != cudaSuccess) {
      events[i] = NULL;
      return cuda_fail(err, where, "cudaEventCreateWithFlags");
    }
  }
  return CG_SUCCESS;
}

static cg_status_t capture(cg_plan_t *p, cudaEvent_t *events, cudaEvent_t *joins, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  cudaError_t err = cudaStreamBeginCapture(c->lanes[0], cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) return cuda_fail(err, where, "cudaStreamBeginCapture");
  cg_status_t st = CG_SUCCESS;
  /* the other lanes join the capture from lane 0 and return to it at the end */
  if ((err = cudaEventRecord(joins[0], c->lanes[0])) != cudaSuccess) st = cuda_fail(err, where, "cudaEventRecord");
  for (uint32_t l = 1; l < c->n_lanes && st == CG_SUCCESS; l++)
    if ((err = cudaStreamWaitEvent(c->lanes[l], joins[0], 0)) != cudaSuccess)
      st = cuda_fail(err, where, "cudaStreamWaitEvent");
  for (uint32_t u = 0; u < p->n_units && st == CG_SUCCESS; u++) st = capture_unit(p, &p->units[u], events, where);
  for (uint32_t l = 1; l < c->n_lanes && st == CG_SUCCESS; l++) {
    if ((err = cudaEventRecord(joins[l], c->lanes[l])) != cudaSuccess ||
        (err = cudaStreamWaitEvent(c->lanes[0], joins[l], 0)) != cudaSuccess)
      st = cuda_fail(err, where, "joining the lanes");
  }
  /* ends the capture even after a failure, so the streams are usable again */
  err = cudaStreamEndCapture(c->lanes[0], &c->graph);
  if (st == CG_SUCCESS && err != cudaSuccess) st = cuda_fail(err, where, "cudaStreamEndCapture");
  return st;
}

/* Streams, events and the device: everything local that the warm-up needs,
 * before the ranks agree to start it. */
static cg_status_t prepare(cg_plan_t *p, cudaEvent_t **events, cudaEvent_t **joins, const char *where) {
  *events = calloc(p->n_steps ? p->n_steps : 1, sizeof **events);
  *joins = calloc(p->n_lanes ? p->n_lanes : 1, sizeof **joins);
  struct cg_cuda_plan *c = p->cuda = calloc(1, sizeof *c);
  if (c) c->lanes = calloc(p->n_lanes ? p->n_lanes : 1, sizeof *c->lanes);
  if (!*events || !*joins || !c || !c->lanes) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the CUDA plan", where);
  cudaError_t err = cudaSetDevice(p->device);
  if (err != cudaSuccess) return cuda_fail(err, where, "cudaSetDevice");
  c->n_lanes = p->n_lanes;
  /* Collectives get the highest priority and bucket copies the lowest:
   * captured kernels keep their stream's priority (the graph is instantiated
   * to use it), so a copy kernel of thousands of blocks that overlaps a
   * collective does not keep NCCL's blocks from starting. */
  int least = 0, greatest = 0;
  if ((err = cudaDeviceGetStreamPriorityRange(&least, &greatest)) != cudaSuccess)
    return cuda_fail(err, where, "cudaDeviceGetStreamPriorityRange");
  for (uint32_t l = 0; l < p->n_lanes; l++)
    if ((err = cudaStreamCreateWithPriority(&c->lanes[l], cudaStreamNonBlocking,
                                            p->lanes[l].kind == CG_LANE_PACK || p->lanes[l].kind == CG_LANE_UNPACK
                                                ? least
                                                : greatest)) != cudaSuccess ||
        (err = cudaEventCreateWithFlags(&(*joins)[l], cudaEventDisableTiming)) != cudaSuccess)
      return cuda_fail(err, where, "creating lane streams");
  if ((err = cudaEventCreateWithFlags(&c->run_done, cudaEventDisableTiming)) != cudaSuccess)
    return cuda_fail(err, where, "cudaEventCreateWithFlags");
  return create_events(*events, p, where);
}

/* Warms up every communicator whose ranks all agreed to, in agreed-id order
 * (its peers are warming it up too, whatever failed elsewhere); returns the
 * first failure. */
static cg_status_t warm_up(cg_plan_t *p, const cg_participants_t *pt, const uint8_t *go, const char *where) {
  cg_status_t first = CG_SUCCESS;
  for (uint32_t i = 0; i < pt->n; i++) {
    uint32_t ci = UINT32_MAX;
    for (uint32_t k = 0; k < p->n_comms && ci == UINT32_MAX; k++)
      if (p->comms[k].comm == pt->comms[i]) ci = k;
    if (!go[i] || ci == UINT32_MAX) continue; /* joined only: no steps, no peers of this rank's */
    const cg_comm_t *comm = pt->comms[i];
    cg_status_t st = comm->ops->backend->device_warmup(comm->impl, p, ci, p->cuda->lanes[ci]);
    if (st != CG_SUCCESS && first == CG_SUCCESS) {
      char detail[512], label[64];
      snprintf(detail, sizeof detail, "%s", cg_error_last());
      first = cg_fail(st, "%s: warming up communicator %s (%s, rank %d of %d): %s", where,
                      cg_comm_id_label(label, sizeof label, comm->id), comm->ops->backend_name, comm->rank,
                      comm->size, detail);
    }
  }
  return first;
}

cg_status_t cg_cuda_plan_build(cg_plan_t *p, const cg_participants_t *pt, cg_status_t mine, const char *where) {
  cg_status_t st = mine;
  cudaError_t err = cudaSuccess;
  int previous = 0;
  cudaEvent_t *events = NULL, *joins = NULL;
  uint8_t *go = malloc(pt->n ? pt->n : 1);
  cudaGetDevice(&previous);
  if (st == CG_SUCCESS && !go) st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the CUDA plan", where);
  if (st == CG_SUCCESS) st = prepare(p, &events, &joins, where);
  /* the warm-up is collective: each communicator's ranks first agree that all
   * of them can take part */
  cg_status_t agreed = cg_agree(go, pt, st, "prepare its CUDA graph", where);
  if (st == CG_SUCCESS && go) st = warm_up(p, pt, go, where);
  if (st == CG_SUCCESS) st = agreed;
  if (st == CG_SUCCESS) st = capture(p, events, joins, where);
  struct cg_cuda_plan *c = st == CG_SUCCESS ? p->cuda : NULL;
  if (st == CG_SUCCESS && (err = cudaGraphInstantiateWithFlags(&c->exec, c->graph, cudaGraphInstantiateFlagUseNodePriority)) != cudaSuccess) {
    c->exec = NULL;
    st = cuda_fail(err, where, "cudaGraphInstantiateWithFlags");
  }
  /* the first launch would otherwise pay for moving the graph to the device */
  if (st == CG_SUCCESS && (err = cudaGraphUpload(c->exec, c->lanes[0])) != cudaSuccess)
    st = cuda_fail(err, where, "cudaGraphUpload");
  if (st == CG_SUCCESS && (err = cudaStreamSynchronize(c->lanes[0])) != cudaSuccess)
    st = cuda_fail(err, where, "cudaStreamSynchronize");
  cudaSetDevice(previous);
  for (uint32_t i = 0; events && i < p->n_steps; i++)
    if (events[i]) cudaEventDestroy(events[i]);
  for (uint32_t l = 0; joins && l < p->n_lanes; l++)
    if (joins[l]) cudaEventDestroy(joins[l]);
  free(events);
  free(joins);
  free(go);
  /* p may be NULL only when mine failed: nothing above touched it */
  /* so none is left with a graph whose peers have none */
  return cg_agree(NULL, pt, st, "build its CUDA graph", where);
}

cg_status_t cg_plan_launch(cg_plan_t *plan, cudaStream_t stream) {
  if (!plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_launch: NULL plan");
  if (!plan->cuda)
    return cg_fail(CG_ERR_UNSUPPORTED, "cg_plan_launch: plan%s%s%s runs on the host (its communicators hold host "
                   "buffers): use cg_plan_run", plan->name ? " '" : "", plan->name ? plan->name : "",
                   plan->name ? "'" : "");
  enum cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &capturing);
  if (err != cudaSuccess) return cuda_fail(err, "cg_plan_launch", "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone)
    return cg_fail(CG_ERR_UNSUPPORTED, "cg_plan_launch: the stream is being captured; launching a plan into a "
                   "capture is not supported in this version (launch it outside the capture)");
  if ((err = cudaGraphLaunch(plan->cuda->exec, stream)) != cudaSuccess)
    return cuda_fail(err, "cg_plan_launch", "cudaGraphLaunch");
  plan->cuda->launched = 1;
  return CG_SUCCESS;
}

cg_status_t cg_cuda_plan_start(cg_plan_t *p) {
  struct cg_cuda_plan *c = p->cuda;
  int done = 1;
  cg_status_t st = cg_cuda_plan_test(&done, p);
  if (st != CG_SUCCESS) return st;
  if (!done) return cg_fail(CG_ERR_IN_PROGRESS, "cg_plan_start: the plan's previous run has not finished");
  cudaError_t err = cudaGraphLaunch(c->exec, c->lanes[0]);
  if (err == cudaSuccess) err = cudaEventRecord(c->run_done, c->lanes[0]);
  if (err != cudaSuccess) return cuda_fail(err, "cg_plan_start", "cudaGraphLaunch");
  c->running = 1;
  return CG_SUCCESS;
}

cg_status_t cg_cuda_plan_test(int *done, cg_plan_t *p) {
  struct cg_cuda_plan *c = p->cuda;
  *done = 1;
  if (!c->running) return CG_SUCCESS;
  cudaError_t err = cudaEventQuery(c->run_done);
  if (err == cudaErrorNotReady) {
    *done = 0;
    return CG_SUCCESS;
  }
  c->running = 0;
  return err == cudaSuccess ? CG_SUCCESS : cuda_fail(err, "cg_plan_test", "the replay");
}

cg_status_t cg_cuda_plan_wait(cg_plan_t *p) {
  struct cg_cuda_plan *c = p->cuda;
  if (!c->running) return CG_SUCCESS;
  cudaError_t err = cudaEventSynchronize(c->run_done);
  c->running = 0;
  return err == cudaSuccess ? CG_SUCCESS : cuda_fail(err, "cg_plan_wait", "the replay");
}
