/* The host executor: runs a plan's steps on the calling thread. A step starts
 * once every dependency has completed. That alone keeps each communicator's
 * collectives in its total order (each depends on everything before it on the
 * communicator). Sends and receives inside a group are freer: a send starts
 * once the previous send to the same peer on the communicator has started, a
 * receive once the previous receive from the same peer has, because MPI
 * matches messages in posting order and nothing else; so a receive that waits
 * for a dependency never holds back an unrelated send. Backends post
 * nonblocking operations; cg_plan_test polls the started ones. A bucket's
 * pack and unpack copy on the calling thread, like host functions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "executor.h"
#include "fingerprint.h"
#include "flight.h"
#include "host_exec.h"
#include "plan_internal.h"
#include "watchdog.h"

enum { STEP_WAITING, STEP_READY, STEP_STARTED, STEP_DONE };

struct cg_host_run {
  uint32_t *pending;  /* dependencies not yet complete, per step */
  uint8_t *state;     /* STEP_*, per step */
  uint32_t *started;  /* steps in flight in a backend */
  uint32_t n_started;
  uint32_t *worklist; /* steps that just became ready */
  uint32_t n_work;
  uint32_t n_done;
  uint64_t *seq;      /* per step: its communicator's sequence number this replay */
  uint64_t started_ns; /* when this replay started (the watchdog's clock) */
  uint64_t *stamps;    /* profiling replays (cg_plan_tune): per step, its start and end in ns after
                          started_ns; NULL otherwise */
  uint32_t last_done;  /* the step that completed last, or CG_NO_STEP */
  uint64_t answered_ns; /* when roll calls were last answered (cg_watchdog_answer) */
  cg_fingerprint_t *fingerprint; /* plan->fingerprint: this replay's (fingerprint.h) */
  int running;
};

static void host_release(cg_plan_t *plan) {
  cg_host_run_t *r = plan->run;
  if (!r) return;
  free(r->pending);
  free(r->state);
  free(r->started);
  free(r->worklist);
  free(r->seq);
  cg_fingerprint_free(r->fingerprint);
  free(r);
  plan->run = NULL;
}

static cg_status_t run_alloc(cg_plan_t *plan) {
  if (plan->run) return CG_SUCCESS;
  size_t n = plan->n_steps ? plan->n_steps : 1;
  cg_host_run_t *r = calloc(1, sizeof *r);
  if (r) {
    r->pending = malloc(n * sizeof *r->pending);
    r->state = malloc(n * sizeof *r->state);
    r->started = malloc(n * sizeof *r->started);
    r->worklist = malloc(n * sizeof *r->worklist);
    r->seq = calloc(n, sizeof *r->seq);
  }
  plan->run = r;
  if (!r || !r->pending || !r->state || !r->started || !r->worklist || !r->seq) {
    host_release(plan);
    return cg_fail(CG_ERR_NO_MEMORY, "cg_plan_start: allocating the run state of %u steps", plan->n_steps);
  }
  return CG_SUCCESS;
}

/* Fails the run: the detail names the caller, the step and the backend's text. */
static cg_status_t fail_step(cg_plan_t *plan, cg_status_t st, uint32_t step, const char *caller) {
  char where[700], detail[512];
  snprintf(detail, sizeof detail, "%s", cg_error_last());
  cg_step_describe(where, sizeof where, plan, step);
  plan->run->running = 0;
  return cg_fail(st, "%s: %s: %s", caller, where, detail);
}

/* A bucket's pack or unpack: its copies, on the calling thread. */
static void copy_bucket(const cg_plan_t *p, const cg_step_t *step) {
  const cg_bucket_t *b = &p->buckets[step->bucket];
  const cg_copy_segment_t *segs = step->kind == CG_STEP_PACK ? b->pack : b->unpack;
  uint32_t n = step->kind == CG_STEP_PACK ? b->n_pack : b->n_unpack;
  for (uint32_t k = 0; k < n; k++) memcpy(segs[k].dst, segs[k].src, segs[k].bytes);
}

/* Profiling: when step `index` starts (which 0) or ends (1). */
static void stamp(cg_host_run_t *r, uint32_t index, int which) {
  if (r->stamps) r->stamps[2 * (size_t)index + which] = cg_clock_ns() - r->started_ns;
}

static void complete(cg_plan_t *plan, uint32_t index) {
  cg_host_run_t *r = plan->run;
  const cg_step_t *s = &plan->steps[index];
  stamp(r, index, 1);
  r->state[index] = STEP_DONE;
  r->n_done++;
  r->last_done = index;
  if (s->kind == CG_STEP_COLLECTIVE) cg_flight_step(plan, CG_FLIGHT_STEP_DONE, plan->replays, index, r->seq[index]);
  for (uint32_t e = 0; e < s->n_succs; e++)
    if (--r->pending[s->succs[e]] == 0) r->worklist[r->n_work++] = s->succs[e];
}

static cg_status_t start_step(cg_plan_t *plan, uint32_t index, const char *caller) {
  cg_host_run_t *r = plan->run;
  cg_step_t *s = &plan->steps[index];
  const cg_backend_t *b = s->comm->ops->backend;
  r->seq[index] = atomic_fetch_add(&s->comm->issued, 1);
  stamp(r, index, 0);
  cg_flight_step(plan, CG_FLIGHT_STEP_START, plan->replays, index, r->seq[index]);
  cg_status_t st = b->host_step_start(s->comm->impl, s, s->backend_state);
  if (st != CG_SUCCESS) return fail_step(plan, st, index, caller);
  r->state[index] = STEP_STARTED;
  r->started[r->n_started++] = index;
  return CG_SUCCESS;
}

/* Starts every ready step that may start, running host functions inline, until
 * nothing more becomes ready without waiting for a backend. */
static cg_status_t start_ready(cg_plan_t *plan, const char *caller) {
  cg_host_run_t *r = plan->run;
  while (r->n_work) {
    uint32_t index = r->worklist[--r->n_work];
    cg_step_t *s = &plan->steps[index];
    if (s->kind == CG_STEP_HOST_FUNC || s->kind == CG_STEP_PACK || s->kind == CG_STEP_UNPACK) {
      stamp(r, index, 0);
      if (s->kind == CG_STEP_HOST_FUNC)
        s->fn(s->arg);
      else
        copy_bucket(plan, s);
      complete(plan, index);
      continue;
    }
    r->state[index] = STEP_READY;
    if (s->post_after != CG_NO_STEP && r->state[s->post_after] < STEP_STARTED) continue;
    /* this step, then the messages to the same peer queued behind it */
    for (uint32_t next = index; next != CG_NO_STEP && r->state[next] == STEP_READY;
         next = plan->steps[next].post_next) {
      cg_status_t st = start_step(plan, next, caller);
      if (st != CG_SUCCESS) return st;
    }
  }
  return CG_SUCCESS;
}

static cg_status_t poll_started(cg_plan_t *plan, const char *caller) {
  cg_host_run_t *r = plan->run;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < r->n_started; i++) {
    uint32_t index = r->started[i];
    cg_step_t *s = &plan->steps[index];
    int done = 0;
    cg_status_t st = s->comm->ops->backend->host_step_test(&done, s->comm->impl, s, s->backend_state);
    if (st != CG_SUCCESS) { /* keep the list exact: what is in flight still is */
      for (uint32_t j = i; j < r->n_started; j++) r->started[kept++] = r->started[j];
      r->n_started = kept;
      return fail_step(plan, st, index, caller);
    }
    if (done)
      complete(plan, index);
    else
      r->started[kept++] = index;
  }
  r->n_started = kept;
  return CG_SUCCESS;
}

/* The replay ran past the plan's timeout: the step it waits for is the
 * first in flight (steps start in an order every rank shares per
 * communicator). The run ends; what is posted stays posted. */
static cg_status_t time_out(cg_plan_t *plan, const char *caller) {
  cg_host_run_t *r = plan->run;
  cg_watchdog_where_t w = {CG_NO_STEP, r->last_done, r->n_done, NULL};
  for (uint32_t i = 0; i < r->n_started; i++)
    if (w.waiting == CG_NO_STEP || r->started[i] < w.waiting) w.waiting = r->started[i];
  char extra[1100] = "";
  const cg_comm_t *comm = w.waiting != CG_NO_STEP ? plan->steps[w.waiting].comm : NULL;
  if (w.waiting != CG_NO_STEP && plan->steps[w.waiting].kind == CG_STEP_COLLECTIVE)
    snprintf(extra, sizeof extra, "communicator %016llx, sequence number %llu; steps in flight: %u",
             (unsigned long long)comm->id, (unsigned long long)r->seq[w.waiting], r->n_started);
  /* ranks that ran other sequences: the likely cause */
  cg_fingerprint_time_out(r->fingerprint, extra, sizeof extra);
  /* which ranks are not in this replay: the one the step waits for is among them */
  cg_watchdog_roll_call(extra, sizeof extra, plan, plan->replays, comm ? comm : plan->n_comms ? plan->comms[0].comm : NULL);
  if (extra[0]) w.extra = extra;
  r->running = 0;
  return cg_watchdog_fire(plan, caller, plan->replays, &w);
}

static cg_status_t progress(int *done, cg_plan_t *plan, const char *caller) {
  cg_host_run_t *r = plan->run;
  cg_status_t st = poll_started(plan, caller);
  if (st == CG_SUCCESS) st = start_ready(plan, caller);
  if (st != CG_SUCCESS) return st;
  int printed = 1;
  if (plan->fingerprint && (st = cg_fingerprint_test(&printed, r->fingerprint, plan, caller)) != CG_SUCCESS) {
    r->running = 0;
    return st;
  }
  if (r->n_done == plan->n_steps && printed) {
    r->running = 0;
    cg_flight_plan(plan, CG_FLIGHT_REPLAY_DONE, plan->replays);
  } else if (cg_watchdog_expired(plan, r->started_ns)) {
    return time_out(plan, caller);
  } else {
    cg_watchdog_answer(plan, plan->replays, &r->answered_ns);
  }
  *done = !r->running;
  return CG_SUCCESS;
}

/* "plan 'name'", or "an unnamed plan", for error details. Uses a static
 * buffer per thread: one detail is formatted at a time. */
static const char *plan_label(const cg_plan_t *plan) {
  static _Thread_local char label[300];
  if (!plan->name) return "an unnamed plan";
  snprintf(label, sizeof label, "plan '%s'", plan->name);
  return label;
}

static cg_status_t check_runnable(const cg_plan_t *plan) {
  for (uint32_t c = 0; c < plan->n_comms; c++) {
    const cg_comm_t *comm = plan->comms[c].comm;
    const cg_backend_t *b = comm->ops->backend;
    if (!b || !b->host_step_start || !b->host_step_test)
      return cg_fail(CG_ERR_UNSUPPORTED,
                     "cg_plan_start: %s: communicator #%u (%s backend) cannot run steps on the host%s",
                     plan_label(plan), c, comm->ops->backend_name,
                     b ? "" : ": offline communicators compile and draw, they do not run");
    if (comm->device != CG_DEVICE_HOST)
      return cg_fail(CG_ERR_UNSUPPORTED, "cg_plan_start: %s: communicator #%u is on device %d; host plans "
                     "need host communicators", plan_label(plan), c, comm->device);
    if (b->host_check_thread) {
      cg_status_t st = b->host_check_thread(comm->impl);
      if (st != CG_SUCCESS) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", cg_error_last());
        return cg_fail(st, "cg_plan_start: %s: communicator #%u: %s", plan_label(plan), c,
                       detail);
      }
    }
  }
  return CG_SUCCESS;
}

static cg_status_t host_start(cg_plan_t *plan) {
  if (plan->timed_out)
    return cg_fail(CG_ERR_TIMEOUT, "cg_plan_start: %s: a replay timed out and its communication may still be "
                   "posted; destroy the plan (and end the job: MPI cannot take back what it holds)",
                   plan_label(plan));
  if (plan->run && plan->run->running)
    return cg_fail(CG_ERR_IN_PROGRESS, "cg_plan_start: %s is still running: wait for it first",
                   plan_label(plan));
  /* a failed run can leave operations posted in the backend; starting again
   * would reuse their requests and buffers while MPI still owns them */
  if (plan->run && plan->run->n_started)
    return cg_fail(CG_ERR_BACKEND, "cg_plan_start: %s: %u steps of a failed run are still in flight in the "
                   "backend; destroy the plan (and compile again)", plan_label(plan),
                   plan->run->n_started);
  cg_status_t st = check_runnable(plan);
  if (st == CG_SUCCESS) st = run_alloc(plan);
  if (st != CG_SUCCESS) return st;
  cg_host_run_t *r = plan->run;
  r->n_started = r->n_work = r->n_done = 0;
  r->last_done = CG_NO_STEP;
  r->started_ns = cg_clock_ns();
  plan->replays++;
  cg_flight_plan(plan, CG_FLIGHT_REPLAY_START, plan->replays);
  /* roots in reverse, so the worklist (a stack) starts them in step order */
  for (uint32_t i = plan->n_steps; i-- > 0;) {
    r->pending[i] = plan->steps[i].n_deps;
    r->state[i] = STEP_WAITING;
    if (plan->steps[i].n_deps == 0) r->worklist[r->n_work++] = i;
  }
  r->running = 1;
  /* before the data: a rank on another sequence then pairs fingerprints
   * with this one first */
  if (plan->fingerprint && (st = cg_fingerprint_start(&r->fingerprint, plan, "cg_plan_start")) != CG_SUCCESS) {
    r->running = 0;
    return st;
  }
  if ((st = start_ready(plan, "cg_plan_start")) != CG_SUCCESS) return st;
  int printed = 1;
  if (plan->fingerprint && r->n_done == plan->n_steps &&
      (st = cg_fingerprint_test(&printed, r->fingerprint, plan, "cg_plan_start")) != CG_SUCCESS) {
    r->running = 0;
    return st;
  }
  if (r->n_done == plan->n_steps && printed) {
    r->running = 0;
    cg_flight_plan(plan, CG_FLIGHT_REPLAY_DONE, plan->replays);
  }
  return CG_SUCCESS;
}

static cg_status_t host_test(int *done, cg_plan_t *plan) {
  if (!plan->run || !plan->run->running) {
    *done = 1;
    return CG_SUCCESS;
  }
  return progress(done, plan, "cg_plan_test");
}

static cg_status_t host_wait(cg_plan_t *plan) {
  int done = !plan->run || !plan->run->running;
  while (!done) {
    cg_status_t st = progress(&done, plan, "cg_plan_wait");
    if (st != CG_SUCCESS) return st;
  }
  return CG_SUCCESS;
}

/* cg_plan_rebind may change the buffers of a plan whose run has ended. */
static cg_status_t host_quiesce(cg_plan_t *plan, const char *where) {
  if (plan->run && plan->run->running)
    return cg_fail(CG_ERR_IN_PROGRESS, "%s: the plan is running: wait for it first", where);
  return CG_SUCCESS;
}

static cg_status_t host_profile(cg_profile_t *out, cg_plan_t *plan, int replays, void *stream, const char *where) {
  (void)stream;
  /* rows of 2 n + 1 stamps, the last (the replay's start) 0: host stamps
   * count from it already */
  size_t row = 2 * (size_t)plan->n_steps + 1;
  uint64_t *all = calloc((size_t)replays * row, sizeof *all);
  *out = (cg_profile_t){0};
  cg_status_t st = all ? CG_SUCCESS : cg_fail(CG_ERR_NO_MEMORY, "%s: allocating profiling stamps", where);
  /* one warm-up replay, then the profiled ones */
  for (int k = -1; k < replays && st == CG_SUCCESS; k++) {
    if ((st = run_alloc(plan)) != CG_SUCCESS) break;
    plan->run->stamps = k >= 0 ? all + (size_t)k * row : NULL;
    st = host_start(plan);
    if (st == CG_SUCCESS) st = host_wait(plan);
    if (plan->run) plan->run->stamps = NULL;
  }
  if (st == CG_SUCCESS) st = cg_profile_from_stamps(out, all, plan->n_steps, replays, where);
  free(all);
  return st;
}

const cg_executor_t cg_host_executor = {
    .name = "host",
    .release = host_release,
    .start = host_start,
    .test = host_test,
    .wait = host_wait,
    .quiesce = host_quiesce,
    .profile = host_profile,
};
