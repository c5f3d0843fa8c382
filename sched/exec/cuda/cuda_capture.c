/* The capture of a device plan's steps into one CUDA graph (cuda_plan.c
 * prepares the streams and instantiates it): each lane a stream, lane 0
 * begins the capture and the other lanes join it through an event (lanes
 * with collectives after the replay's fingerprint where its gathers are
 * steps ordered with theirs, the others at once), each
 * unit first waits for the events of its dependencies on other lanes, a unit
 * of several sends and receives is bracketed by the backend's group calls, a
 * step that a step on another lane depends on records its event afterwards,
 * and with a timeout each unit's progress marks go on its lane's marks
 * stream. The lanes and marks streams join lane 0 again at the end, and the
 * edges that longer paths imply are dropped from the graph. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bucket_cuda.h"
#include "cuda_check.h"
#include "cuda_graph_edges.h"
#include "cuda_plan_state.h"
#include "device_fingerprint.h"
#include "error.h"
#include "plan_internal.h"
#include "plan_lock.h"

static const cg_backend_t *backend_of(const cg_step_t *s) { return s->comm->ops->backend; }

cg_status_t cg_cuda_capture_child_graph(cudaStream_t stream, cudaGraph_t child, const char *where) {
#if CUDART_VERSION >= 12030
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = NULL;
  const cudaGraphNode_t *deps = NULL;
  const cudaGraphEdgeData *edges = NULL;
  size_t n_deps = 0;
#if CUDART_VERSION >= 13000
  cudaError_t err = cudaStreamGetCaptureInfo(stream, &status, NULL, &graph, &deps, &edges, &n_deps);
#else
  cudaError_t err = cudaStreamGetCaptureInfo_v3(stream, &status, NULL, &graph, &deps, &edges, &n_deps);
#endif
  if (err != cudaSuccess) return cg_fail_cuda(err, "cudaStreamGetCaptureInfo", "%s", where);
  if (status != cudaStreamCaptureStatusActive)
    return cg_fail(CG_ERR_BACKEND, "%s: the stream's capture was invalidated by an earlier error", where);
  struct cudaGraphNodeParams params;
  memset(&params, 0, sizeof params);
  params.type = cudaGraphNodeTypeGraph;
  params.graph.graph = child;
  cudaGraphNode_t node = NULL;
  if ((err = cudaGraphAddNode(&node, graph, deps, edges, n_deps, &params)) != cudaSuccess)
    return cg_fail_cuda(err, "cudaGraphAddNode (child graph)", "%s", where);
#if CUDART_VERSION >= 13000
  err = cudaStreamUpdateCaptureDependencies(stream, &node, NULL, 1, cudaStreamSetCaptureDependencies);
#else
  err = cudaStreamUpdateCaptureDependencies_v2(stream, &node, NULL, 1, cudaStreamSetCaptureDependencies);
#endif
  if (err != cudaSuccess) return cg_fail_cuda(err, "cudaStreamUpdateCaptureDependencies", "%s", where);
  return CG_SUCCESS;
#else
  (void)stream;
  (void)child;
  return cg_fail(CG_ERR_UNSUPPORTED, "%s: child graphs in a capture need CUDA 12.3 or later (built with %d)", where,
                 CUDART_VERSION);
#endif
}

/* A child graph, event wait or event record step on its compute lane. */
static cg_status_t capture_cuda_node(const cg_plan_t *p, uint32_t index, cudaStream_t lane, const char *where) {
  const cg_step_t *s = &p->steps[index];
  cudaError_t err = cudaSuccess;
  switch (s->op_kind) {
    case CG_NODE_CHILD_GRAPH: return cg_cuda_capture_child_graph(lane, p->cuda->children[index], where);
    case CG_NODE_EVENT_WAIT:
      if ((err = cudaStreamWaitEvent(lane, (cudaEvent_t)s->object, cudaEventWaitExternal)) != cudaSuccess)
        return cg_fail_cuda(err, "cudaStreamWaitEvent (external)", "%s", where);
      return CG_SUCCESS;
    case CG_NODE_EVENT_RECORD:
      if ((err = cudaEventRecordWithFlags((cudaEvent_t)s->object, lane, cudaEventRecordExternal)) != cudaSuccess)
        return cg_fail_cuda(err, "cudaEventRecordWithFlags (external)", "%s", where);
      return CG_SUCCESS;
    default: return cg_fail(CG_ERR_INTERNAL, "%s: step %u is not a CUDA node", where, index);
  }
}

/* Whether this capture carries the watchdog's marks: plans with a timeout,
 * except in the profiling replays (stamps), which the marks must not count.
 * The marks stay allocated meanwhile: the monitor may be reading them. */
static int marking(const struct cg_cuda_plan *c) { return c->marks && !c->stamps; }

/* The unit's progress marks (plans with a timeout; not after a unit of user
 * compute that more user compute follows, cg_cuda_choose_marks, nor after
 * the plan's end unit, which the replay's end counts), off the lanes' path:
 * the lane's marks stream waits for the unit and counts its steps, and
 * nothing but the replay's end waits for the marks, so they cost the steps
 * no launch latency; a stream per lane, so a step is counted once its own
 * lane is through it, whatever the other lanes do. */
static cg_status_t mark_unit(cg_plan_t *p, const cg_issue_unit_t *u, cudaEvent_t done, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  cudaStream_t marks = c->mark_lanes[u->lane];
  if (!c->marked[p->issue_order[u->first + u->n - 1]]) return CG_SUCCESS; /* cg_cuda_choose_marks */
  if ((uint32_t)(u - p->units) == c->end_unit) return CG_SUCCESS; /* the replay's end counts it (cg_cuda_end_marks) */
  cudaError_t err = cudaEventRecord(done, c->lanes[u->lane]);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(marks, done, 0);
  for (uint32_t k = 0; k < u->n && err == cudaSuccess; k += CG_MARKS_PER_KERNEL) {
    cg_mark_list_t list = {.n = u->n - k < CG_MARKS_PER_KERNEL ? u->n - k : CG_MARKS_PER_KERNEL};
    for (uint32_t i = 0; i < list.n; i++) list.slot[i] = p->issue_order[u->first + k + i];
    err = cg_progress_marks_launch(c->mark_tally, c->marks_dev, &list, marks);
  }
  return err == cudaSuccess ? CG_SUCCESS : cg_fail_cuda(err, "the watchdog's progress marks", "%s", where);
}

/* Enqueues one unit on its lane: waits, the steps (grouped), event records,
 * its marks (unit_done: the event the marks lane waits for). */
static cg_status_t capture_unit(cg_plan_t *p, const cg_issue_unit_t *u, cudaEvent_t *events, cudaEvent_t unit_done,
                                const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  cudaStream_t lane = c->lanes[u->lane];
  cudaError_t err = cudaSuccess;
  cg_status_t st = CG_SUCCESS;
  for (uint32_t k = 0; k < u->n; k++) {
    const cg_step_t *s = &p->steps[p->issue_order[u->first + k]];
    for (uint32_t e = 0; e < s->n_deps; e++) {
      const cg_step_t *d = &p->steps[s->deps[e]];
      if (d->lane != u->lane && (err = cudaStreamWaitEvent(lane, events[s->deps[e]], 0)) != cudaSuccess)
        return cg_fail_cuda(err, "cudaStreamWaitEvent", "%s", where);
    }
  }
  for (uint32_t k = 0; k < u->n && c->stamps; k++)
    if ((err = cg_time_stamp_launch(&c->stamps[2 * (size_t)p->issue_order[u->first + k]], lane)) != cudaSuccess)
      return cg_fail_cuda(err, "the profiling stamp", "%s", where);
  const cg_step_t *first = &p->steps[p->issue_order[u->first]];
  int grouped = u->n > 1;
  if (grouped && (st = backend_of(first)->device_group_start(first->comm->impl)) != CG_SUCCESS) return st;
  for (uint32_t k = 0; k < u->n && st == CG_SUCCESS; k++) {
    uint32_t index = p->issue_order[u->first + k];
    const cg_step_t *s = &p->steps[index];
    if (s->kind == CG_STEP_HOST_FUNC) {
      if ((err = cudaLaunchHostFunc(lane, s->fn, s->arg)) != cudaSuccess)
        st = cg_fail_cuda(err, "cudaLaunchHostFunc", "%s", where);
    } else if (s->kind == CG_STEP_PACK || s->kind == CG_STEP_UNPACK) {
      st = cg_cuda_bucket_copy(p, s, lane, where);
    } else if (s->kind == CG_STEP_CUDA_NODE) {
      st = capture_cuda_node(p, index, lane, where);
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
  for (uint32_t k = 0; k < u->n && st == CG_SUCCESS && c->stamps; k++)
    if ((err = cg_time_stamp_launch(&c->stamps[2 * (size_t)p->issue_order[u->first + k] + 1], lane)) != cudaSuccess)
      st = cg_fail_cuda(err, "the profiling stamp", "%s", where);
  if (st == CG_SUCCESS && marking(c)) st = mark_unit(p, u, unit_done, where);
  for (uint32_t k = 0; k < u->n && st == CG_SUCCESS; k++) {
    uint32_t index = p->issue_order[u->first + k];
    if (events[index] && (err = cudaEventRecord(events[index], lane)) != cudaSuccess)
      st = cg_fail_cuda(err, "cudaEventRecord", "%s", where);
  }
  return st;
}

static cg_status_t new_event(cudaEvent_t *event, const char *where) {
  cudaError_t err = cudaEventCreateWithFlags(event, cudaEventDisableTiming);
  if (err == cudaSuccess) return CG_SUCCESS;
  *event = NULL;
  return cg_fail_cuda(err, "cudaEventCreateWithFlags", "%s", where);
}

/* One event per step that a step on another lane waits for, one per lane
 * and one per marks stream to join lane 0's capture and return to it, and
 * with marks one per unit that its marks stream waits for. */
static cg_status_t create_events(cudaEvent_t *events, cudaEvent_t *joins, cudaEvent_t *unit_done, const cg_plan_t *p,
                                 const char *where) {
  for (uint32_t i = 0; i < p->n_steps; i++) {
    const cg_step_t *s = &p->steps[i];
    int crosses = 0;
    for (uint32_t e = 0; e < s->n_succs && !crosses; e++) crosses = p->steps[s->succs[e]].lane != s->lane;
    if (!crosses) continue;
    cudaError_t err = cudaEventCreateWithFlags(&events[i], cudaEventDisableTiming);
    if (err != cudaSuccess) {
      events[i] = NULL;
      return cg_fail_cuda(err, "cudaEventCreateWithFlags", "%s", where);
    }
  }
  cg_status_t st = CG_SUCCESS;
  for (uint32_t l = 0; l <= 2 * p->n_lanes && st == CG_SUCCESS; l++) st = new_event(&joins[l], where);
  for (uint32_t u = 0; u < p->n_units && marking(p->cuda) && st == CG_SUCCESS; u++)
    st = new_event(&unit_done[u], where);
  return st;
}

/* Collectives (sends and receives too) run on their communicator's lane. */
static int lane_has_collectives(const cg_plan_t *p, uint32_t lane) { return p->lanes[lane].kind == CG_LANE_COMM; }

static cg_status_t capture_units(cudaGraph_t *out, cg_plan_t *p, cudaEvent_t *events, cudaEvent_t *joins,
                                 cudaEvent_t *unit_done, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  cudaError_t err = cudaStreamBeginCapture(c->lanes[0], cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) return cg_fail_cuda(err, "cudaStreamBeginCapture", "%s", where);
  cg_status_t st = CG_SUCCESS;
  if (c->stamps && (err = cg_time_stamp_launch(&c->stamps[2 * (size_t)p->n_steps], c->lanes[0])) != cudaSuccess)
    st = cg_fail_cuda(err, "the profiling stamp", "%s", where);
  /* joins[2 n_lanes]: the capture's start; joins[0]: after the gathers of
   * the fingerprint that are steps ordered with the plan's (the staged
   * backends'), on the first lane with collectives, which every lane with
   * collectives waits for (they come first on their communicators); lanes of
   * user compute and copies start at once. The gathers apart from the steps
   * (NCCL's, on a communicator of their own) go on that lane's marks stream,
   * beside the steps, before the comparison */
  cudaEvent_t begun = joins[2 * (size_t)c->n_lanes];
  uint32_t gathers = 0;
  while (gathers + 1 < c->n_lanes && !lane_has_collectives(p, gathers)) gathers++;
  if (st == CG_SUCCESS && (err = cudaEventRecord(begun, c->lanes[0])) != cudaSuccess)
    st = cg_fail_cuda(err, "cudaEventRecord", "%s", where);
  if (st == CG_SUCCESS && gathers != 0 && (err = cudaStreamWaitEvent(c->lanes[gathers], begun, 0)) != cudaSuccess)
    st = cg_fail_cuda(err, "cudaStreamWaitEvent", "%s", where);
  if (st == CG_SUCCESS && marking(c)) st = cg_device_prints_gather(c->prints, 0, c->lanes[gathers], where);
  if (st == CG_SUCCESS && (err = cudaEventRecord(joins[0], c->lanes[gathers])) != cudaSuccess)
    st = cg_fail_cuda(err, "cudaEventRecord", "%s", where);
  for (uint32_t l = 0; l < c->n_lanes && st == CG_SUCCESS; l++) {
    if (l == gathers || (l == 0 && !lane_has_collectives(p, 0))) continue; /* lane 0 began the capture */
    if ((err = cudaStreamWaitEvent(c->lanes[l], lane_has_collectives(p, l) ? joins[0] : begun, 0)) != cudaSuccess)
      st = cg_fail_cuda(err, "cudaStreamWaitEvent", "%s", where);
  }
  /* the marks streams fork at the start; the first one holds the
   * fingerprint's gathers apart and the comparisons, off the lanes' path */
  for (uint32_t l = 0; l < c->n_lanes && st == CG_SUCCESS && marking(c); l++)
    if ((err = cudaStreamWaitEvent(c->mark_lanes[l], l == gathers ? joins[0] : begun, 0)) != cudaSuccess)
      st = cg_fail_cuda(err, "cudaStreamWaitEvent (the marks streams)", "%s", where);
  if (st == CG_SUCCESS && marking(c) && c->n_lanes)
    st = cg_device_prints_gather(c->prints, 1, c->mark_lanes[gathers], where);
  if (st == CG_SUCCESS && marking(c) && c->n_lanes)
    st = cg_device_prints_check(c->prints, c->mark_lanes[gathers], where);
  for (uint32_t u = 0; u < p->n_units && st == CG_SUCCESS; u++)
    st = capture_unit(p, &p->units[u], events, marking(c) ? unit_done[u] : NULL, where);
  for (uint32_t l = 1; l < c->n_lanes && st == CG_SUCCESS; l++) {
    if ((err = cudaEventRecord(joins[l], c->lanes[l])) != cudaSuccess ||
        (err = cudaStreamWaitEvent(c->lanes[0], joins[l], 0)) != cudaSuccess)
      st = cg_fail_cuda(err, "joining the lanes", "%s", where);
  }
  for (uint32_t l = 0; l < c->n_lanes && st == CG_SUCCESS && marking(c); l++)
    if ((err = cudaEventRecord(joins[c->n_lanes + l], c->mark_lanes[l])) != cudaSuccess ||
        (err = cudaStreamWaitEvent(c->lanes[0], joins[c->n_lanes + l], 0)) != cudaSuccess)
      st = cg_fail_cuda(err, "joining the marks streams", "%s", where);
  /* ends the capture even after a failure, so the streams are usable again */
  err = cudaStreamEndCapture(c->lanes[0], out);
  if (st == CG_SUCCESS && err != cudaSuccess) st = cg_fail_cuda(err, "cudaStreamEndCapture", "%s", where);
  return st;
}

/* Captures the plan's steps into *out (compiling, and again on rebinding).
 * Events used during capture only become edges of the graph, so they live
 * only as long as this call. */
cg_status_t cg_cuda_capture(cudaGraph_t *out, cg_plan_t *p, const char *where) {
  cudaEvent_t *events = calloc(p->n_steps ? p->n_steps : 1, sizeof *events);
  cudaEvent_t *joins = calloc(2 * (size_t)p->n_lanes + 1, sizeof *joins);
  cudaEvent_t *unit_done = calloc(p->n_units ? p->n_units : 1, sizeof *unit_done);
  cg_status_t st = events && joins && unit_done ? create_events(events, joins, unit_done, p, where)
                                                : cg_fail(CG_ERR_NO_MEMORY, "%s: allocating capture events", where);
  if (st == CG_SUCCESS && marking(p->cuda)) st = cg_cuda_choose_marks(p, where);
  if (st == CG_SUCCESS) st = capture_units(out, p, events, joins, unit_done, where);
  /* a lane that enqueues nothing (a zero-copy bucket's pack, a collective of
   * one rank in place) gathers the dependencies of every wait until its
   * next node, which then depends on all of them: in a training iteration
   * each collective on every backward kernel before it. Edges the graph
   * orders anyway, but each cost the replay (docs/watchdog.md) */
  if (st == CG_SUCCESS) st = cg_cuda_drop_implied_edges(*out, where);
  for (uint32_t i = 0; events && i < p->n_steps; i++)
    if (events[i]) cudaEventDestroy(events[i]);
  for (uint32_t l = 0; joins && l <= 2 * p->n_lanes; l++)
    if (joins[l]) cudaEventDestroy(joins[l]);
  for (uint32_t u = 0; unit_done && u < p->n_units; u++)
    if (unit_done[u]) cudaEventDestroy(unit_done[u]);
  free(events);
  free(joins);
  free(unit_done);
  return st;
}
