/* The CUDA realizer: a device plan becomes one CUDA graph.
 *
 * Each lane gets a stream. Every communicator is warmed up on its lane outside
 * any capture; then the plan is captured (cuda_capture.c) and the captured
 * graph is instantiated once. This file holds the plan's device state, its
 * building across ranks, the graph users embed (the lock around the plan's
 * graph), launching, start / test / wait and rebuilding after a rebind. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreement.h"
#include "backend.h"
#include "commgraph/cuda.h"
#include "cuda_check.h"
#include "cuda_plan_state.h"
#include "device_exec.h"
#include "error.h"
#include "executor.h"
#include "flight.h"
#include "plan_internal.h"
#include "plan_lock.h"
#include "stream_wait.h"
#include "watchdog.h"


void cg_cuda_release(cg_plan_t *p) {
  struct cg_cuda_plan *c = p->cuda;
  if (!c) return;
  /* the plan's device, whichever thread destroys it (a timeout handler's
   * starts on device 0) */
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(p->device);
  /* replays still running on a user's stream use the graph and the
   * communicators released right after this; a launch records nothing (it is
   * one cudaGraphLaunch), so waiting for them means waiting for the device */
  if (c->launched || c->embedded) cudaDeviceSynchronize();
  if (c->exec) cudaGraphExecDestroy(c->exec);
  if (c->graph) cudaGraphDestroy(c->graph);
  if (c->embed_exec) cudaGraphExecDestroy(c->embed_exec);
  if (c->embed_graph) cudaGraphDestroy(c->embed_graph);
  for (uint32_t i = 0; c->children && i < p->n_steps; i++)
    if (c->children[i]) cudaGraphDestroy(c->children[i]);
  free(c->children);
  if (c->lock) cudaFree(c->lock);
  cg_cuda_watch_forget(p);
  if (c->launch_done) cudaEventDestroy(c->launch_done);
  free(c->timeout_report);
  if (c->marks) cudaFreeHost(c->marks);
  if (c->mark_tally) cudaFree(c->mark_tally);
  free(c->marked);
  free(c->witness);
  free(c->seq_base);
  if (c->run_done) cudaEventDestroy(c->run_done);
  if (c->legacy_done) cudaEventDestroy(c->legacy_done);
  if (c->timed_begin) cudaEventDestroy(c->timed_begin);
  if (c->timed_end) cudaEventDestroy(c->timed_end);
  cg_device_prints_free(c->prints);
  for (uint32_t l = 0; c->mark_lanes && l < c->n_lanes; l++)
    if (c->mark_lanes[l]) cudaStreamDestroy(c->mark_lanes[l]);
  free(c->mark_lanes);
  for (uint32_t l = 0; c->lanes && l < c->n_lanes; l++)
    if (c->lanes[l]) cudaStreamDestroy(c->lanes[l]);
  free(c->lanes);
  free(c);
  p->cuda = NULL;
  cudaSetDevice(previous);
}

/* Streams, the lock, child graphs and the device: everything local that the
 * warm-up and the capture need, before the ranks agree to start it. */
static cg_status_t prepare(cg_plan_t *p, const char *where) {
  struct cg_cuda_plan *c = p->cuda = calloc(1, sizeof *c);
  if (c) c->lanes = calloc(p->n_lanes ? p->n_lanes : 1, sizeof *c->lanes);
  if (c) c->seq_base = calloc(p->n_comms ? p->n_comms : 1, sizeof *c->seq_base);
  if (!c || !c->lanes || !c->seq_base) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the CUDA plan", where);
  cudaError_t err = cudaSetDevice(p->device);
  if (err != cudaSuccess) return cg_fail_cuda(err, "cudaSetDevice", "%s", where);
  c->n_lanes = p->n_lanes;
  c->end_unit = CG_NO_STEP;
  /* Collectives get the highest priority and bucket copies the lowest:
   * captured kernels keep their stream's priority (the graph is instantiated
   * to use it), so a copy kernel of thousands of blocks that overlaps a
   * collective does not keep NCCL's blocks from starting. */
  int least = 0, greatest = 0;
  if ((err = cudaDeviceGetStreamPriorityRange(&least, &greatest)) != cudaSuccess)
    return cg_fail_cuda(err, "cudaDeviceGetStreamPriorityRange", "%s", where);
  for (uint32_t l = 0; l < p->n_lanes; l++)
    if ((err = cudaStreamCreateWithPriority(&c->lanes[l], cudaStreamNonBlocking,
                                            p->lanes[l].kind == CG_LANE_PACK || p->lanes[l].kind == CG_LANE_UNPACK
                                                ? least
                                                : greatest)) != cudaSuccess)
      return cg_fail_cuda(err, "creating lane streams", "%s", where);
  if ((err = cudaEventCreateWithFlags(&c->run_done, cudaEventDisableTiming)) != cudaSuccess ||
      (err = cudaEventCreateWithFlags(&c->legacy_done, cudaEventDisableTiming)) != cudaSuccess)
    return cg_fail_cuda(err, "cudaEventCreateWithFlags", "%s", where);
  if ((err = cudaMalloc((void **)&c->lock, sizeof *c->lock)) != cudaSuccess) {
    c->lock = NULL;
    return cg_fail_cuda(err, "cudaMalloc (the plan's lock)", "%s", where);
  }
  if ((err = cudaMemset(c->lock, 0, sizeof *c->lock)) != cudaSuccess)
    return cg_fail_cuda(err, "cudaMemset", "%s", where);
  if (p->timeout_s > 0) {
    size_t bytes = CG_MARK_SLOTS(p->n_steps) * sizeof *c->marks;
    if ((err = cudaHostAlloc((void **)&c->marks, bytes, cudaHostAllocMapped)) != cudaSuccess) {
      c->marks = NULL;
      return cg_fail_cuda(err, "cudaHostAlloc (the watchdog's progress marks)", "%s", where);
    }
    memset(c->marks, 0, bytes);
    if ((err = cudaHostGetDevicePointer((void **)&c->marks_dev, c->marks, 0)) != cudaSuccess)
      return cg_fail_cuda(err, "cudaHostGetDevicePointer", "%s", where);
    if ((err = cudaMalloc((void **)&c->mark_tally, bytes)) != cudaSuccess) {
      c->mark_tally = NULL;
      return cg_fail_cuda(err, "cudaMalloc (the watchdog's counts)", "%s", where);
    }
    if ((err = cudaMemset(c->mark_tally, 0, bytes)) != cudaSuccess)
      return cg_fail_cuda(err, "cudaMemset (the watchdog's counts)", "%s", where);
    if ((err = cudaEventCreateWithFlags(&c->launch_done, cudaEventDisableTiming)) != cudaSuccess) {
      c->launch_done = NULL;
      return cg_fail_cuda(err, "cudaEventCreateWithFlags (the watchdog's)", "%s", where);
    }
    cg_status_t prints = p->fingerprint ? cg_device_prints_prepare(&c->prints, p, where) : CG_SUCCESS;
    if (prints != CG_SUCCESS) return prints;
    if (!(c->mark_lanes = calloc(p->n_lanes ? p->n_lanes : 1, sizeof *c->mark_lanes)))
      return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the watchdog's marks streams", where);
    for (uint32_t l = 0; l < p->n_lanes; l++)
      if ((err = cudaStreamCreateWithFlags(&c->mark_lanes[l], cudaStreamNonBlocking)) != cudaSuccess) {
        c->mark_lanes[l] = NULL;
        return cg_fail_cuda(err, "cudaStreamCreateWithFlags (the watchdog's marks streams)", "%s", where);
      }
  }
  /* the recorded graph owns the child graphs and may be destroyed after
   * compiling; the plan keeps its own copies, to capture again on rebinding */
  if (!(c->children = calloc(p->n_steps ? p->n_steps : 1, sizeof *c->children)))
    return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the CUDA plan", where);
  for (uint32_t i = 0; i < p->n_steps; i++) {
    cg_step_t *s = &p->steps[i];
    if (s->kind != CG_STEP_CUDA_NODE || s->op_kind != CG_NODE_CHILD_GRAPH) continue;
    if ((err = cudaGraphClone(&c->children[i], (cudaGraph_t)s->object)) != cudaSuccess) {
      c->children[i] = NULL;
      return cg_fail_cuda(err, "cudaGraphClone", "%s", where);
    }
    s->object = c->children[i];
  }
  return CG_SUCCESS;
}

/* The graph users embed: the lock, the plan's graph as a child, the unlock. */
static cg_status_t build_embed_graph(cudaGraph_t *out, cg_plan_t *p, cudaGraph_t plan_graph, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  cudaStream_t s = c->lanes[0];
  cudaError_t err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) return cg_fail_cuda(err, "cudaStreamBeginCapture", "%s", where);
  cg_status_t st = CG_SUCCESS;
  /* the watchdog counts the replays in and out of the lock */
  unsigned *entered = c->marks_dev ? &c->marks_dev[CG_MARK_ENTERED(p->n_steps)] : NULL;
  unsigned *left = c->marks_dev ? &c->marks_dev[CG_MARK_LEFT(p->n_steps)] : NULL;
  unsigned *entered_tally = c->mark_tally ? &c->mark_tally[CG_MARK_ENTERED(p->n_steps)] : NULL;
  unsigned *left_tally = c->mark_tally ? &c->mark_tally[CG_MARK_LEFT(p->n_steps)] : NULL;
  if ((err = cg_plan_lock_launch(c->lock, entered_tally, entered, s)) != cudaSuccess)
    st = cg_fail_cuda(err, "the plan's lock kernel", "%s", where);
  if (st == CG_SUCCESS) st = cg_cuda_capture_child_graph(s, plan_graph, where);
  cg_mark_list_t ends;
  cg_cuda_end_marks(&ends, p);
  if (st == CG_SUCCESS &&
      (err = cg_plan_unlock_launch(c->lock, left_tally, left, c->mark_tally, c->marks_dev, &ends, s)) != cudaSuccess)
    st = cg_fail_cuda(err, "the plan's unlock kernel", "%s", where);
  err = cudaStreamEndCapture(s, out);
  if (st == CG_SUCCESS && err != cudaSuccess) st = cg_fail_cuda(err, "cudaStreamEndCapture", "%s", where);
  return st;
}

/* The graph the plan's own launches replay until it is embedded: the plan's
 * graph, then the kernel that counts its end unit's marks
 * (cg_cuda_end_marks) where it has one; *out is plan_graph itself where it
 * has none (*owned 0), else a graph of its own (*owned 1). */
static cg_status_t build_run_graph(cudaGraph_t *out, int *owned, cg_plan_t *p, cudaGraph_t plan_graph,
                                   const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  cg_mark_list_t ends;
  cg_cuda_end_marks(&ends, p);
  *out = plan_graph;
  *owned = 0;
  if (!ends.n) return CG_SUCCESS;
  cudaStream_t s = c->lanes[0];
  cudaError_t err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) return cg_fail_cuda(err, "cudaStreamBeginCapture", "%s", where);
  cg_status_t st = cg_cuda_capture_child_graph(s, plan_graph, where);
  if (st == CG_SUCCESS && (err = cg_progress_marks_launch(c->mark_tally, c->marks_dev, &ends, s)) != cudaSuccess)
    st = cg_fail_cuda(err, "the watchdog's end marks", "%s", where);
  cudaGraph_t run = NULL;
  err = cudaStreamEndCapture(s, &run);
  if (st == CG_SUCCESS && err != cudaSuccess) st = cg_fail_cuda(err, "cudaStreamEndCapture", "%s", where);
  if (st == CG_SUCCESS) {
    *out = run;
    *owned = 1;
  } else if (run) {
    cudaGraphDestroy(run);
  }
  return st;
}

/* Instantiates `graph` into *exec and moves it to the device, so the first
 * launch does not pay for it. */
cg_status_t cg_cuda_instantiate(cudaGraphExec_t *exec, cudaGraph_t graph, cudaStream_t stream, const char *where) {
  cudaError_t err = cudaGraphInstantiateWithFlags(exec, graph, cudaGraphInstantiateFlagUseNodePriority);
  if (err != cudaSuccess) {
    *exec = NULL;
    return cg_fail_cuda(err, "cudaGraphInstantiateWithFlags", "%s", where);
  }
  if ((err = cudaGraphUpload(*exec, stream)) != cudaSuccess) return cg_fail_cuda(err, "cudaGraphUpload", "%s", where);
  return CG_SUCCESS;
}

/* The ranks of each communicator agree on whether its plans carry the
 * replay's fingerprint (it depends on the ranks' own options: fingerprint,
 * timeout_s or CG_TIMEOUT): a gather on some ranks only would hang. */
typedef struct prints_agreement {
  const cg_plan_t *plan;
  const cg_participants_t *pt;
  uint8_t *differ; /* per participant */
} prints_agreement_t;

static size_t prints_bytes(void *ctx, uint32_t i) {
  (void)ctx, (void)i;
  return 1;
}

static void prints_fill(void *ctx, uint32_t i, uint8_t *mine) {
  const prints_agreement_t *a = ctx;
  *mine = a->plan && a->plan->cuda && cg_device_prints_has(a->plan->cuda->prints, a->pt->comms[i]);
}

static void prints_use(void *ctx, uint32_t i, const uint8_t *all, size_t stride, int size) {
  prints_agreement_t *a = ctx;
  for (int r = 1; r < size; r++) a->differ[i] |= all[(size_t)r * stride] != all[0];
}

cg_status_t cg_cuda_build(cg_plan_t *p, const cg_participants_t *pt, cg_status_t mine, const char *where) {
  cg_status_t st = mine;
  cudaError_t err = cudaSuccess;
  int previous = 0;
  uint8_t *go = malloc(pt->n ? pt->n : 1), *differ = calloc(pt->n ? pt->n : 1, 1);
  cudaGetDevice(&previous);
  if (st == CG_SUCCESS && (!go || !differ)) st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the CUDA plan", where);
  if (st == CG_SUCCESS) st = prepare(p, where);
  /* the warm-up is collective: each communicator's ranks first agree that all
   * of them can take part, and whether they gather a fingerprint on it */
  prints_agreement_t pa = {st == CG_SUCCESS ? p : NULL, pt, differ};
  cg_agree_payload_t payload = {prints_bytes, prints_fill, prints_use};
  cg_status_t agreed = go && differ ? cg_agree_with(go, pt, st, &payload, &pa, "prepare its CUDA graph", where)
                                    : cg_agree(NULL, pt, st, "prepare its CUDA graph", where);
  if (st == CG_SUCCESS && go && differ) st = cg_cuda_warm_up(p, pt, go, differ, where);
  int warm_up_timed_out = st == CG_ERR_TIMEOUT;
  if (st == CG_SUCCESS) st = agreed;
  for (uint32_t i = 0; i < pt->n && st == CG_SUCCESS && differ; i++) {
    char label[64];
    if (differ[i])
      st = cg_fail(CG_ERR_MISMATCH, "%s: the ranks of communicator %s differ in whether device plans carry the "
                   "replay's fingerprint (cg_compile_opts_t.fingerprint and timeout_s, or CG_TIMEOUT, must be "
                   "alike on every rank)", where, cg_comm_id_label(label, sizeof label, pt->comms[i]->id));
  }
  if (st == CG_SUCCESS) st = cg_cuda_capture(&p->cuda->graph, p, where);
  struct cg_cuda_plan *c = st == CG_SUCCESS ? p->cuda : NULL;
  cudaGraph_t run = NULL;
  int run_owned = 0;
  if (st == CG_SUCCESS) st = build_run_graph(&run, &run_owned, p, c->graph, where);
  if (st == CG_SUCCESS) st = cg_cuda_instantiate(&c->exec, run, c->lanes[0], where);
  if (run_owned) cudaGraphDestroy(run);
  if (st == CG_SUCCESS) st = build_embed_graph(&c->embed_graph, p, c->graph, where);
  if (st == CG_SUCCESS && (err = cudaStreamSynchronize(c->lanes[0])) != cudaSuccess)
    st = cg_fail_cuda(err, "cudaStreamSynchronize", "%s", where);
  cudaSetDevice(previous);
  free(go);
  free(differ);
  /* p may be NULL only when mine failed: nothing above touched it */
  /* so none is left with a graph whose peers have none */
  if (!warm_up_timed_out) return cg_agree(NULL, pt, st, "build its CUDA graph", where);
  /* The ranks that finished their warm-up wait in this round: they learn at
   * once that this one failed. A rank missing from the warm-up will not come
   * (the report named it), so the round waits briefly, and the warm-up's
   * report stays this rank's. */
  char report[2048];
  snprintf(report, sizeof report, "%s", cg_error_last());
  cg_participants_t brief = *pt;
  brief.timeout_s = 0.05 * pt->timeout_s;
  (void)cg_agree(NULL, &brief, st, "build its CUDA graph", where);
  return cg_fail(st, "%s", report);
}

/* The executable graph a launch uses: the plan's own, or once the plan has
 * been embedded, the one that takes the lock (instantiated on first need,
 * outside any capture). */
static cg_status_t launch_exec(cudaGraphExec_t *out, cg_plan_t *p, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  *out = c->exec;
  if (!c->embedded) return CG_SUCCESS;
  if (!c->embed_exec) {
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(p->device);
    cg_status_t st = cg_cuda_instantiate(&c->embed_exec, c->embed_graph, c->lanes[0], where);
    cudaSetDevice(previous);
    if (st != CG_SUCCESS) return st;
  }
  *out = c->embed_exec;
  return CG_SUCCESS;
}

static cg_status_t check_device_plan(const cg_plan_t *plan, const char *caller) {
  if (!plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: NULL plan", caller);
  if (!plan->cuda)
    return cg_fail(CG_ERR_UNSUPPORTED, "%s: plan%s%s%s runs on the host (its communicators hold host "
                   "buffers): use cg_plan_run", caller, plan->name ? " '" : "", plan->name ? plan->name : "",
                   plan->name ? "'" : "");
  return CG_SUCCESS;
}

/* A replay was launched: counted, and each communicator's sequence numbers
 * advance by the plan's collectives on it (the graph issues them all). */
static void note_launch(cg_plan_t *p) {
  p->replays++;
  for (uint32_t c = 0; c < p->n_comms; c++)
    p->cuda->seq_base[c] = atomic_fetch_add(&p->comms[c].comm->issued, p->comms[c].n_steps);
  cg_flight_plan(p, CG_FLIGHT_REPLAY_START, p->replays);
}


cg_status_t cg_plan_launch(cg_plan_t *plan, cudaStream_t stream) {
  cg_status_t st = check_device_plan(plan, "cg_plan_launch");
  if (st != CG_SUCCESS) return st;
  struct cg_cuda_plan *c = plan->cuda;
  enum cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &capturing);
  if (err != cudaSuccess) return cg_fail_cuda(err, "cudaStreamIsCapturing", "cg_plan_launch");
  if (capturing == cudaStreamCaptureStatusInvalidated)
    return cg_fail(CG_ERR_BACKEND, "cg_plan_launch: the stream's capture was invalidated by an earlier error");
  if (capturing == cudaStreamCaptureStatusActive) {
    if ((st = cg_cuda_check_runnable(plan, "cg_plan_launch (into the stream's capture)")) != CG_SUCCESS) return st;
    /* from now on every replay, this copy's and the plan's own, takes the
     * lock, and the watchdog follows them all */
    c->embedded = 1;
    st = cg_cuda_capture_child_graph(stream, c->embed_graph, "cg_plan_launch (into the stream's capture)");
    return st == CG_SUCCESS ? cg_cuda_watch_embedded(plan, "cg_plan_launch (into the stream's capture)") : st;
  }
  if ((st = cg_cuda_check_runnable(plan, "cg_plan_launch")) != CG_SUCCESS) return st;
  cudaGraphExec_t exec = NULL;
  if ((st = launch_exec(&exec, plan, "cg_plan_launch")) != CG_SUCCESS) return st;
  if ((err = cudaGraphLaunch(exec, stream)) != cudaSuccess)
    return cg_fail_cuda(err, "cudaGraphLaunch", "cg_plan_launch");
  note_launch(plan);
  c->launched = 1;
  if (c->marks) {
    if ((err = cudaEventRecord(c->launch_done, stream)) != cudaSuccess)
      return cg_fail_cuda(err, "cudaEventRecord (the watchdog's)", "cg_plan_launch");
    return cg_cuda_watch_launch(plan);
  }
  return CG_SUCCESS;
}

cg_status_t cg_plan_cuda_graph(cudaGraph_t *out, cg_plan_t *plan) {
  if (!out) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_cuda_graph: NULL out");
  cg_status_t st = check_device_plan(plan, "cg_plan_cuda_graph");
  if (st == CG_SUCCESS) st = cg_cuda_check_runnable(plan, "cg_plan_cuda_graph");
  if (st != CG_SUCCESS) return st;
  plan->cuda->embedded = 1;
  *out = plan->cuda->embed_graph;
  return cg_cuda_watch_embedded(plan, "cg_plan_cuda_graph");
}

/* cg_plan_start failed (err) after launching `launches` replays: they still
 * run, and the plan is idle once they end. Waited for under the plan's
 * timeout, past which they are reported and the communicators aborted as a
 * replay's would be (peers wait for the replay not launched under their
 * own watchdog); without a timeout, as long as they take, so that the plan
 * is idle when this returns. */
static cg_status_t start_failed(cg_plan_t *p, cudaError_t err, int launches) {
  struct cg_cuda_plan *c = p->cuda;
  cg_status_t st = cg_fail_cuda(err, "cudaGraphLaunch or cudaEventRecord", "cg_plan_start");
  int first = 0;
  /* this call waits and reports: not the monitor's to take over, and idle
   * before the handler hears it (it may destroy the plan) */
  atomic_store(&c->running, CG_RUN_IDLE);
  if (launches && cg_cuda_stream_wait_for(c->lanes[0], p->timeout_s) == cudaErrorNotReady) {
    st = cg_cuda_time_out(&first, p, "cg_plan_start", cg_cuda_replay_number(p), 1);
    cg_cuda_stream_wait_for(c->lanes[0], p->timeout_s);
  }
  char mismatch[900]; /* read, so that the monitor does not take it for a launched replay's */
  if (cg_device_prints_mismatch(c->prints, mismatch, sizeof mismatch) && !first)
    st = cg_cuda_mismatch(&first, p, "cg_plan_start", cg_cuda_replay_number(p), mismatch);
  return first ? cg_watchdog_notify_waiter(st) : st;
}

/* cg_plan_start's replay; with `begin` and `end` (cg_cuda_timed_replay's;
 * NULL: none), one replay and then `timed` more back to back between them. */
static cg_status_t start_replay(cg_plan_t *p, cudaEvent_t begin, cudaEvent_t end, int timed) {
  struct cg_cuda_plan *c = p->cuda;
  int done = 1;
  cg_status_t st = cg_cuda_check_runnable(p, "cg_plan_start");
  if (st != CG_SUCCESS) return st;
  st = cg_cuda_test(&done, p);
  if (st != CG_SUCCESS) return st;
  if (!done) return cg_fail(CG_ERR_IN_PROGRESS, "cg_plan_start: the plan's previous run has not finished");
  cudaGraphExec_t exec = NULL;
  if ((st = launch_exec(&exec, p, "cg_plan_start")) != CG_SUCCESS) return st;
  /* the waiter's from the start; listed (once running, or a pass of the
   * monitor could drop it as idle) before it runs, so that the monitor
   * takes it over if the program's thread goes elsewhere instead */
  c->started_ns = cg_clock_ns();
  atomic_store(&c->waiter_seen_ns, c->started_ns);
  atomic_store(&c->running, CG_RUN_STARTED);
  if ((st = cg_cuda_watch_start(p)) != CG_SUCCESS) {
    atomic_store(&c->running, CG_RUN_IDLE);
    return st;
  }
  /* The plan's streams are non-blocking, and a cudaMemcpy from pageable
   * memory (or a cudaMemset) returns before it has landed: the replay waits
   * for the legacy default stream, so it reads what the program wrote there
   * (test_nccl_oneshot once saw its last-filled input arrive late). */
  cudaError_t err = cudaEventRecord(c->legacy_done, cudaStreamLegacy);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(c->lanes[0], c->legacy_done, 0);
  int launches = 0;
  for (int k = 0; err == cudaSuccess && k <= (begin ? timed : 0); k++) {
    if (k == 1) err = cudaEventRecord(begin, c->lanes[0]);
    if (err == cudaSuccess) err = cudaGraphLaunch(exec, c->lanes[0]);
    launches += err == cudaSuccess;
  }
  if (err == cudaSuccess && end) err = cudaEventRecord(end, c->lanes[0]);
  if (err == cudaSuccess) err = cudaEventRecord(c->run_done, c->lanes[0]);
  for (int k = 0; k < launches; k++) note_launch(p);
  c->start_launches = launches;
  /* what the monitor may read once nobody polls (the replay's number) is
   * written by now */
  atomic_store(&c->waiter_seen_ns, cg_clock_ns());
  return err == cudaSuccess ? CG_SUCCESS : start_failed(p, err, launches);
}

cg_status_t cg_cuda_start(cg_plan_t *p) { return start_replay(p, NULL, NULL, 0); }

/* cg_plan_start's replay has ended (err: how the event says it did). The
 * ranks' fingerprints may have differed even so (the same shapes in another
 * order): the data may be mixed, and the caller hears it. */
static cg_status_t replay_ended(cg_plan_t *p, cudaError_t err, const char *caller) {
  struct cg_cuda_plan *c = p->cuda;
  char mismatch[900];
  int differ = cg_device_prints_mismatch(c->prints, mismatch, sizeof mismatch);
  uint64_t replay = cg_cuda_replay_number(p); /* while it counts as running */
  /* the end is this thread's unless the monitor took the replay over
   * first (and reports it, having aborted the communicators); the replay
   * is idle from here either way, before the handler hears anything (it
   * may destroy the plan) */
  int taken = atomic_exchange(&c->running, CG_RUN_IDLE) == CG_RUN_TAKEN;
  if (taken && !differ) return cg_cuda_reported_elsewhere(p, caller);
  cg_status_t st = CG_SUCCESS;
  int first = 0;
  if (differ) {
    /* as while it ran: every rank's plan ends alike (another rank may have
     * seen it mid-replay and aborted the communicators) */
    st = cg_cuda_mismatch(&first, p, caller, replay, mismatch);
  }
  if (err == cudaSuccess && st == CG_SUCCESS)
    for (int k = c->start_launches - 1; k >= 0; k--) cg_flight_plan(p, CG_FLIGHT_REPLAY_DONE, p->replays - (uint64_t)k);
  if (first) st = cg_watchdog_notify_waiter(st);
  if (st != CG_SUCCESS) return st;
  if (err != cudaSuccess) return cg_fail_cuda(err, "the replay", "%s", caller);
  return st;
}

/* cg_plan_start's replay is still running: a timeout once it ran too long
 * (or once the monitor reported it: an embedded plan's replays are its
 * too), reported with a roll call, since this is the program's thread;
 * until then, the roll calls of ranks whose replay timed out are answered. */
static int replay_expired(cg_plan_t *p, cg_status_t *st, const char *caller) {
  struct cg_cuda_plan *c = p->cuda;
  atomic_store_explicit(&c->waiter_seen_ns, cg_clock_ns(), memory_order_relaxed);
  uint64_t replay = cg_cuda_replay_number(p);
  char mismatch[900];
  int first = 0;
  /* ranks on different sequences: their collectives may never pair up, so
   * the replay ends here, with the communicators aborted */
  if (!atomic_load(&c->fired) && cg_device_prints_mismatch(c->prints, mismatch, sizeof mismatch)) {
    cg_status_t differ = cg_cuda_mismatch(&first, p, caller, replay, mismatch);
    atomic_store(&c->running, CG_RUN_IDLE);
    *st = first ? cg_watchdog_notify_waiter(differ) : differ;
    return 1;
  }
  if (!atomic_load(&c->fired) && !cg_watchdog_expired(p, c->started_ns)) {
    cg_watchdog_answer(p, replay, &c->answered_ns);
    return 0;
  }
  cg_status_t timeout = cg_cuda_time_out(&first, p, caller, replay, 1);
  atomic_store(&c->running, CG_RUN_IDLE);
  *st = first ? cg_watchdog_notify_waiter(timeout) : timeout;
  return 1;
}

cg_status_t cg_cuda_test(int *done, cg_plan_t *p) {
  cg_status_t st = CG_SUCCESS;
  *done = 1;
  if (!atomic_load(&p->cuda->running)) return CG_SUCCESS;
  cudaError_t err = cudaEventQuery(p->cuda->run_done);
  if (err != cudaErrorNotReady) return replay_ended(p, err, "cg_plan_test");
  if (replay_expired(p, &st, "cg_plan_test")) return st;
  *done = 0;
  return CG_SUCCESS;
}

cg_status_t cg_cuda_wait(cg_plan_t *p) {
  struct cg_cuda_plan *c = p->cuda;
  cg_status_t st = CG_SUCCESS;
  if (!atomic_load(&c->running)) return CG_SUCCESS;
  if (p->timeout_s <= 0) return replay_ended(p, cudaEventSynchronize(c->run_done), "cg_plan_wait");
  /* polled, so the wait can end */
  uint64_t began = cg_clock_ns();
  for (;;) {
    cudaError_t err = cudaEventQuery(c->run_done);
    if (err != cudaErrorNotReady) return replay_ended(p, err, "cg_plan_wait");
    if (replay_expired(p, &st, "cg_plan_wait")) return st;
    cg_poll_pause(began);
  }
}

/* Replays timed back to back after a first, untimed one: the first absorbs
 * the ranks' skew at the start (each rank waits for the others at its first
 * collective) and the host's launch; the next run as in a training loop. On
 * 2 H200 (ResNet-50, B = 1 and 5 ms), single replays timed from before
 * their launch took 13-40 us longer than the kept plans ran in bench_train,
 * with the candidates 10-20 us apart; holding the lane until the launch
 * returned (a host function) changed neither. */
#define TIMED_BACK_TO_BACK 2

/* cg_plan_tune times its candidates by the device's clock: the host's,
 * around cg_plan_start and cg_plan_wait, also counts the wake-up after the
 * wait (a plan with a timeout polls, napping after its first milliseconds), which moves
 * more from replay to replay than candidates differ by. */
cg_status_t cg_cuda_timed_replay(double *seconds, cg_plan_t *p) {
  struct cg_cuda_plan *c = p->cuda;
  cudaError_t err = cudaSuccess;
  *seconds = 0;
  if (!c->timed_begin) {
    int previous = 0;
    cudaGetDevice(&previous);
    err = cudaSetDevice(p->device);
    if (err == cudaSuccess) err = cudaEventCreate(&c->timed_begin);
    if (err == cudaSuccess) err = cudaEventCreate(&c->timed_end);
    cudaSetDevice(previous);
    if (err != cudaSuccess) {
      if (c->timed_begin) cudaEventDestroy(c->timed_begin);
      c->timed_begin = NULL;
      return cg_fail_cuda(err, "cudaEventCreate", "cg_plan_tune: timing a replay");
    }
  }
  cg_status_t st = start_replay(p, c->timed_begin, c->timed_end, TIMED_BACK_TO_BACK);
  if (st == CG_SUCCESS) st = cg_cuda_wait(p);
  float ms = 0;
  if (st == CG_SUCCESS && (err = cudaEventElapsedTime(&ms, c->timed_begin, c->timed_end)) != cudaSuccess)
    st = cg_fail_cuda(err, "cudaEventElapsedTime", "cg_plan_tune: timing a replay");
  *seconds = (double)ms * 1e-3 / TIMED_BACK_TO_BACK;
  return st;
}

/* ---- rebinding (rebind.c decides; this captures again) */

cg_status_t cg_cuda_quiesce(cg_plan_t *p, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  int done = 1;
  cg_status_t st = cg_cuda_test(&done, p);
  if (st != CG_SUCCESS) return st;
  if (!done) return cg_fail(CG_ERR_IN_PROGRESS, "%s: the plan's cg_plan_start replay is running: wait for it first", where);
  /* launches on users' streams record nothing the plan could wait for */
  if (c->launched || c->embedded) {
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(p->device);
    cudaError_t err = cudaDeviceSynchronize();
    cudaSetDevice(previous);
    if (err != cudaSuccess) return cg_fail_cuda(err, "cudaDeviceSynchronize (replays in flight)", "%s", where);
  }
  return CG_SUCCESS;
}

/* Points `*exec` at `graph`: updated in place where CUDA can, instantiated
 * anew otherwise. */
static cg_status_t update_exec(cudaGraphExec_t *exec, cudaGraph_t graph, cudaStream_t stream, const char *where) {
  cudaGraphExecUpdateResultInfo info;
  if (cudaGraphExecUpdate(*exec, graph, &info) == cudaSuccess) return CG_SUCCESS;
  cudaGetLastError();
  cudaGraphExec_t fresh = NULL;
  cg_status_t st = cg_cuda_instantiate(&fresh, graph, stream, where);
  if (st != CG_SUCCESS) return st;
  cudaGraphExecDestroy(*exec);
  *exec = fresh;
  return CG_SUCCESS;
}

cg_status_t cg_cuda_rebuild(cg_plan_t *p, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  cudaGraph_t graph = NULL, embed = NULL, run = NULL;
  int previous = 0, run_owned = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(p->device);
  cg_status_t st = cg_cuda_capture(&graph, p, where);
  if (st == CG_SUCCESS) st = build_embed_graph(&embed, p, graph, where);
  if (st == CG_SUCCESS) st = build_run_graph(&run, &run_owned, p, graph, where);
  /* the executable graphs change only once everything new exists */
  if (st == CG_SUCCESS) st = update_exec(&c->exec, run, c->lanes[0], where);
  if (run_owned) cudaGraphDestroy(run);
  if (st == CG_SUCCESS && c->embed_exec && update_exec(&c->embed_exec, embed, c->lanes[0], where) != CG_SUCCESS) {
    cudaGraphExecDestroy(c->embed_exec); /* instantiated again when next needed */
    c->embed_exec = NULL;
  }
  if (st == CG_SUCCESS) {
    cudaGraphDestroy(c->graph);
    cudaGraphDestroy(c->embed_graph);
    c->graph = graph;
    c->embed_graph = embed;
    graph = embed = NULL;
  }
  if (graph) cudaGraphDestroy(graph);
  if (embed) cudaGraphDestroy(embed);
  cudaSetDevice(previous);
  return st;
}

cg_status_t cg_executor_current_device(int *device, const char *where) {
  cudaError_t err = cudaGetDevice(device);
  return err == cudaSuccess ? CG_SUCCESS : cg_fail_cuda(err, "cudaGetDevice", "%s", where);
}
