/* The CUDA realizer: a device plan becomes one CUDA graph.
 *
 * Each lane gets a stream. Every communicator is warmed up on its lane outside
 * any capture; then the plan is captured unit by unit (issue_order.c) in
 * thread-local capture mode: lane 0 begins the capture, the other lanes join
 * it through an event, each unit first waits for the events of its
 * dependencies on other lanes, a unit of several sends and receives is
 * bracketed by the backend's group calls, and a step that a step on another
 * lane depends on records its event afterwards. The lanes join lane 0 again
 * and the captured graph is instantiated once. Events used during capture
 * only become edges of the graph, so they are destroyed right after it. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "commgraph/cuda.h"
#include "error.h"
#include "plan_internal.h"

struct cg_cuda_plan {
  cudaStream_t *lanes;
  uint32_t n_lanes;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaEvent_t run_done; /* cg_plan_start's replay, on lanes[0] */
  int running;
};

static cg_status_t cuda_fail(cudaError_t err, const char *where, const char *call) {
  return cg_fail(CG_ERR_BACKEND, "%s: %s: %s", where, call, cudaGetErrorString(err));
}

void cg_cuda_plan_free(cg_plan_t *p) {
  struct cg_cuda_plan *c = p->cuda;
  if (!c) return;
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

/* Every rank learns whether all ranks of each communicator built their graph,
 * so none is left with a graph whose peers have none. */
static cg_status_t agree(cg_plan_t *p, const uint32_t *by_id, cg_status_t mine, const char *where) {
  for (uint32_t k = 0; k < p->n_comms; k++) {
    uint32_t ci = by_id[k];
    cg_comm_t *comm = p->comms[ci].comm;
    const cg_backend_t *b = comm->ops->backend;
    int32_t ok = mine == CG_SUCCESS, *all = malloc((size_t)comm->size * sizeof *all);
    void *request = NULL;
    int done = 0;
    if (!all) return cg_fail(CG_ERR_NO_MEMORY, "%s: agreeing on the build", where);
    cg_status_t st = b->control_allgather_start(&request, comm->impl, &ok, all, sizeof ok);
    while (st == CG_SUCCESS && !done) st = b->control_test(&done, comm->impl, request);
    int failed = -1;
    for (int r = 0; st == CG_SUCCESS && r < comm->size && failed < 0; r++)
      if (!all[r]) failed = r;
    free(all);
    if (st != CG_SUCCESS) return st;
    if (mine != CG_SUCCESS) return mine;
    if (failed >= 0)
      return cg_fail(CG_ERR_BACKEND, "%s: rank %d of communicator %u could not build its CUDA graph (its "
                     "cg_compile says why)", where, failed, ci);
  }
  return mine;
}

cg_status_t cg_cuda_plan_build(cg_plan_t *p, const char *where) {
  cg_status_t st = CG_SUCCESS;
  cudaError_t err = cudaSuccess;
  int previous = 0;
  cudaEvent_t *events = calloc(p->n_steps ? p->n_steps : 1, sizeof *events);
  cudaEvent_t *joins = calloc(p->n_lanes ? p->n_lanes : 1, sizeof *joins);
  uint32_t *by_id = malloc((p->n_comms ? p->n_comms : 1) * sizeof *by_id);
  struct cg_cuda_plan *c = p->cuda = calloc(1, sizeof *c);
  if (c) c->lanes = calloc(p->n_lanes ? p->n_lanes : 1, sizeof *c->lanes);
  if (!events || !joins || !by_id || !c || !c->lanes) {
    free(by_id);
    free(events);
    free(joins);
    return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the CUDA plan", where);
  }
  cg_plan_comms_by_id(by_id, p);
  cudaGetDevice(&previous);
  if ((err = cudaSetDevice(p->device)) != cudaSuccess) {
    st = cuda_fail(err, where, "cudaSetDevice");
    goto out;
  }
  c->n_lanes = p->n_lanes;
  for (uint32_t l = 0; l < p->n_lanes && st == CG_SUCCESS; l++) {
    if ((err = cudaStreamCreateWithFlags(&c->lanes[l], cudaStreamNonBlocking)) != cudaSuccess ||
        (err = cudaEventCreateWithFlags(&joins[l], cudaEventDisableTiming)) != cudaSuccess)
      st = cuda_fail(err, where, "creating lane streams");
  }
  if (st == CG_SUCCESS && (err = cudaEventCreateWithFlags(&c->run_done, cudaEventDisableTiming)) != cudaSuccess)
    st = cuda_fail(err, where, "cudaEventCreateWithFlags");
  for (uint32_t k = 0; k < p->n_comms && st == CG_SUCCESS; k++) {
    uint32_t ci = by_id[k];
    const cg_comm_t *comm = p->comms[ci].comm;
    st = comm->ops->backend->device_warmup(comm->impl, p, ci, c->lanes[ci]);
    if (st != CG_SUCCESS) {
      char detail[512];
      snprintf(detail, sizeof detail, "%s", cg_error_last());
      st = cg_fail(st, "%s: warming up communicator %u (%s, rank %d of %d): %s", where, ci,
                   comm->ops->backend_name, comm->rank, comm->size, detail);
    }
  }
  if (st == CG_SUCCESS) st = create_events(events, p, where);
  if (st == CG_SUCCESS) st = capture(p, events, joins, where);
  if (st == CG_SUCCESS && (err = cudaGraphInstantiate(&c->exec, c->graph, 0)) != cudaSuccess) {
    c->exec = NULL;
    st = cuda_fail(err, where, "cudaGraphInstantiate");
  }
  /* the first launch would otherwise pay for moving the graph to the device */
  if (st == CG_SUCCESS && (err = cudaGraphUpload(c->exec, c->lanes[0])) != cudaSuccess)
    st = cuda_fail(err, where, "cudaGraphUpload");
  if (st == CG_SUCCESS && (err = cudaStreamSynchronize(c->lanes[0])) != cudaSuccess)
    st = cuda_fail(err, where, "cudaStreamSynchronize");
  cudaSetDevice(previous);
out:
  for (uint32_t i = 0; events && i < p->n_steps; i++)
    if (events[i]) cudaEventDestroy(events[i]);
  for (uint32_t l = 0; joins && l < p->n_lanes; l++)
    if (joins[l]) cudaEventDestroy(joins[l]);
  free(events);
  free(joins);
  st = agree(p, by_id, st, where);
  free(by_id);
  return st;
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
