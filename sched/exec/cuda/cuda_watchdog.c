/* The device side of the replay watchdog (watchdog.h): what a timed-out
 * replay was waiting for, read from the progress marks the graph writes;
 * aborting the plan's communicators; and the monitor thread that follows
 * the replays nobody waits for inside commgraph: those launched on users'
 * streams (cg_plan_launch) and those of users' graphs that embed the plan.
 *
 * It also takes over a cg_plan_start replay whose thread stopped polling it
 * (check_started): that thread may be inside a call that synchronizes the
 * device, behind the replay.
 *
 * The monitor cannot know when such a replay starts (it may queue behind
 * the user's work), so it bounds progress instead: while a launched replay
 * is outstanding, or an embedded plan's lock is held (its lock kernels
 * count the replays in and out), the plan's marks must move at least once
 * per timeout. It only reads mapped host memory for embedded plans: their
 * replays pay for no callback. Under MPI_THREAD_MULTIPLE it also answers
 * the other ranks' roll calls while such a replay is in flight, and calls
 * the roll itself before it reports (cg_watchdog_any_thread). */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "comm_abort.h"
#include "cuda_thread.h"
#include "cuda_plan_state.h"
#include "device_fingerprint.h"
#include "error.h"
#include "flight.h"
#include "watch_marks.h"
#include "watchdog.h"

uint64_t cg_cuda_step_seq(const cg_plan_t *p, const cg_step_t *s, uint64_t replay) {
  for (uint32_t c = 0; c < p->n_comms; c++) {
    if (p->comms[c].comm != s->comm) continue;
    uint64_t back = replay < p->replays ? (p->replays - replay) * p->comms[c].n_steps : 0;
    uint64_t base = p->cuda->seq_base[c];
    return (back <= base ? base - back : 0) + s->comm_position;
  }
  return 0;
}

cg_status_t cg_cuda_choose_marks(cg_plan_t *p, const char *where) {
  struct cg_cuda_plan *c = p->cuda;
  if (!c->marked) c->marked = calloc(p->n_steps ? p->n_steps : 1, sizeof *c->marked);
  if (!c->witness) c->witness = calloc(p->n_steps ? p->n_steps : 1, sizeof *c->witness);
  if (!c->marked || !c->witness)
    return cg_fail(CG_ERR_NO_MEMORY, "%s: choosing the watchdog's marks of %u steps", where, p->n_steps);
  cg_marks_choose(c->marked, c->witness, p);
  c->end_unit = cg_marks_end_unit(p);
  if (c->end_unit != CG_NO_STEP && p->units[c->end_unit].n > CG_MARKS_PER_KERNEL) c->end_unit = CG_NO_STEP;
  return CG_SUCCESS;
}

void cg_cuda_end_marks(cg_mark_list_t *list, const cg_plan_t *p) {
  const struct cg_cuda_plan *c = p->cuda;
  list->n = 0;
  if (!c->marks || c->stamps || !c->marked || c->end_unit == CG_NO_STEP) return;
  const cg_issue_unit_t *u = &p->units[c->end_unit];
  for (uint32_t k = 0; k < u->n; k++) list->slot[list->n++] = p->issue_order[u->first + k];
}

/* A step is done in the replay the marks are in (marks_replay) once its
 * mark has counted that many replays: every replay of the plan's graph,
 * launched by commgraph or by a user's graph that embeds it (watch_marks.h
 * for the steps without a mark of their own). */
static int step_marked(const cg_plan_t *p, uint32_t step, uint64_t replay) {
  const struct cg_cuda_plan *c = p->cuda;
  return cg_marks_step_done(p, c->marked, c->witness, c->marks, step, replay);
}

static uint64_t marks_sum(const cg_plan_t *p) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < CG_MARK_SLOTS(p->n_steps); i++) sum += ((volatile unsigned *)p->cuda->marks)[i];
  return sum;
}

/* The replay the marks are in, counting every replay of the plan's graph:
 * one past the fewest replays any step has finished. */
static uint64_t marks_replay(const cg_plan_t *p) {
  unsigned least = UINT32_MAX;
  for (uint32_t i = 0; i < p->n_steps; i++) {
    unsigned m = ((volatile unsigned *)p->cuda->marks)[i];
    if (cg_marks_has(p->cuda->marked, i) && m < least) least = m;
  }
  return least != UINT32_MAX ? (uint64_t)least + 1 : p->replays;
}

/* The replay a report is about: the plan's last launch, unless its replays
 * may be queued behind one another (embedded, or cg_plan_start's timed
 * replays, launched before the first has begun): then the one the marks are
 * in, so that the report names the step that replay waits in. */
uint64_t cg_cuda_replay_number(const cg_plan_t *p) {
  const struct cg_cuda_plan *c = p->cuda;
  int queued = c->embedded || (atomic_load(&c->running) && c->start_launches > 1);
  return queued && c->marks ? marks_replay(p) : p->replays;
}

static cg_comm_t *plan_comm_at(const void *plan, uint32_t i) { return ((const cg_plan_t *)plan)->comms[i].comm; }

/* The report of the plan's timed-out replay, for later calls (the monitor
 * writes it on its thread). */
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

static void remember_report(cg_plan_t *p, const char *report) {
  char *copy = cg_copy_text(report, 4096);
  pthread_mutex_lock(&report_lock);
  free(p->cuda->timeout_report);
  p->cuda->timeout_report = copy;
  pthread_mutex_unlock(&report_lock);
}

char *cg_cuda_timeout_report(const cg_plan_t *p) {
  pthread_mutex_lock(&report_lock);
  char *copy = p->cuda->timeout_report ? cg_copy_text(p->cuda->timeout_report, 4096) : NULL;
  pthread_mutex_unlock(&report_lock);
  return copy;
}

/* The report of the side that claimed the timeout, once it is stored: it
 * takes a roll call (at most 0.25 s) and a flight dump first. */
static void await_report(const cg_plan_t *p) {
  for (int waited_ms = 0; atomic_load(&p->cuda->fired) != CG_FIRED_REPORTED && waited_ms < 5000; waited_ms++) {
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
}

/* What fired: a timeout, or ranks on different sequences. */
static cg_status_t fired_status(const cg_plan_t *p) {
  return p->cuda->fired_status ? p->cuda->fired_status : CG_ERR_TIMEOUT;
}

cg_status_t cg_cuda_reported_elsewhere(cg_plan_t *p, const char *caller) {
  await_report(p);
  char *report = cg_cuda_timeout_report(p);
  cg_status_t st = cg_fail(fired_status(p), "%s: %s", caller,
                           report ? report : "a replay of the plan failed (its report is late on another thread)");
  free(report);
  return st;
}

/* The first of the waiter and the monitor to see a failed replay claims
 * it (1); the other gets 0 and the first's report (reported_elsewhere). */
static int claim(cg_plan_t *p) {
  int none = CG_FIRED_NONE;
  return atomic_compare_exchange_strong(&p->cuda->fired, &none, CG_FIRED_CLAIMED);
}

/* The claimed failure is reported (cg_error_last()): stored for later
 * calls, then the communicators are aborted so the device stops waiting. */
static cg_status_t settle(cg_plan_t *p, cg_status_t st) {
  remember_report(p, cg_error_last());
  atomic_store(&p->cuda->fired, CG_FIRED_REPORTED);
  cg_comm_abort_each(plan_comm_at, p, p->n_comms, p->device, st, cg_error_last());
  return st;
}

/* The replay ran past the timeout: the step waited for is the first in
 * capture order that is not done while everything it depends on is; the
 * flight recorder learns which collectives completed. */
static cg_status_t time_out_claimed(cg_plan_t *p, const char *caller, uint64_t replay, int roll_call) {
  struct cg_cuda_plan *c = p->cuda;
  cg_watchdog_where_t w = {CG_NO_STEP, CG_NO_STEP, 0, NULL};
  char extra[1600] = "";
  uint64_t in = c->marks ? marks_replay(p) : 0;
  for (uint32_t k = 0; k < p->n_steps && c->marks; k++) {
    uint32_t i = p->issue_order[k];
    const cg_step_t *s = &p->steps[i];
    if (step_marked(p, i, in)) {
      w.n_done++;
      w.last_done = i;
      if (s->kind == CG_STEP_COLLECTIVE)
        cg_flight_step(p, CG_FLIGHT_STEP_DONE, replay, i, cg_cuda_step_seq(p, s, replay));
      continue;
    }
    int ready = 1;
    for (uint32_t e = 0; e < s->n_deps && ready; e++) ready = step_marked(p, s->deps[e], in);
    if (ready && w.waiting == CG_NO_STEP) w.waiting = i;
  }
  const cg_comm_t *comm = w.waiting != CG_NO_STEP ? p->steps[w.waiting].comm : NULL;
  if (!c->marks) snprintf(extra, sizeof extra, "no progress marks: compiled without a timeout");
  if (w.waiting != CG_NO_STEP && !cg_marks_has(c->marked, w.waiting) && c->witness[w.waiting] != CG_NO_STEP)
    snprintf(extra, sizeof extra, "user compute is marked at the end of each run on a lane: the replay waits in "
             "this step or in a later one up to step %u", c->witness[w.waiting]);
  if (comm)
    snprintf(extra, sizeof extra, "communicator %016llx; the plan's communicators are being aborted",
             (unsigned long long)comm->id);
  if (c->embedded) {
    size_t used = strlen(extra);
    snprintf(extra + used, sizeof extra - used,
             "%sthe plan is embedded in CUDA graphs: every rank must run their replays and the plan's own in the "
             "same order (docs/embedding.md); stop replaying graphs that hold it",
             used ? "; " : "");
  }
  /* which ranks are not in this replay: the one the step waits for is among them */
  if (roll_call) cg_watchdog_roll_call(extra, sizeof extra, p, replay, comm ? comm : p->n_comms ? p->comms[0].comm : NULL);
  if (extra[0]) w.extra = extra;
  /* the report first: aborting may take long, and the report is the point
   * (the abort runs on its own thread anyway) */
  return settle(p, cg_watchdog_report(p, caller, replay, &w));
}

cg_status_t cg_cuda_time_out(int *first, cg_plan_t *p, const char *caller, uint64_t replay, int roll_call) {
  if (!(*first = claim(p))) return cg_cuda_reported_elsewhere(p, caller);
  return time_out_claimed(p, caller, replay, roll_call);
}

cg_status_t cg_cuda_profile_time_out(cg_plan_t *p, const char *caller, uint64_t replay, int hung, int replays,
                                     cg_watchdog_where_t *w, int stamps_read) {
  if (!claim(p)) return cg_cuda_reported_elsewhere(p, caller);
  char extra[1600], which[48] = "a profiling replay";
  const cg_comm_t *comm = w->waiting != CG_NO_STEP ? p->steps[w->waiting].comm : NULL;
  if (hung > 0) snprintf(which, sizeof which, "profiling replay %d of %d", hung, replays);
  int used = snprintf(extra, sizeof extra,
                      "in %s (cg_plan_tune or cg_plan_trace: the plan's steps with time stamps, not counted among its "
                      "replays)%s; the plan's communicators are being aborted", which,
                      stamps_read ? "" : "; its time stamps could not be read");
  if (comm && used > 0 && (size_t)used < sizeof extra)
    snprintf(extra + used, sizeof extra - (size_t)used, "; communicator %016llx", (unsigned long long)comm->id);
  cg_watchdog_roll_call(extra, sizeof extra, p, replay, comm ? comm : p->n_comms ? p->comms[0].comm : NULL);
  w->extra = extra;
  return cg_watchdog_notify_waiter(settle(p, cg_watchdog_report(p, caller, replay, w)));
}

static cg_status_t mismatch_claimed(cg_plan_t *p, const char *caller, uint64_t replay, const char *mismatch) {
  p->cuda->fired_status = CG_ERR_MISMATCH; /* read only once REPORTED is stored */
  const cg_comm_t *first_comm = p->n_comms ? p->comms[0].comm : NULL;
  cg_status_t st = cg_fail(CG_ERR_MISMATCH, "%s: %s%s%s on rank %d of %d, replay %llu: %s; the plan's communicators "
                           "are being aborted", caller, p->name ? "plan '" : "an unnamed plan", p->name ? p->name : "",
                           p->name ? "'" : "", first_comm ? first_comm->rank : 0, first_comm ? first_comm->size : 1,
                           (unsigned long long)replay, mismatch);
  fprintf(stderr, "commgraph: %s\n", cg_error_last());
  fflush(stderr);
  p->timed_out = 1;
  return settle(p, st);
}

cg_status_t cg_cuda_mismatch(int *first, cg_plan_t *p, const char *caller, uint64_t replay, const char *mismatch) {
  if (!(*first = claim(p))) {
    /* the report that won may lack which ranks ran what: this side read it */
    fprintf(stderr, "commgraph: %s: %s\n", caller, mismatch);
    fflush(stderr);
    return cg_cuda_reported_elsewhere(p, caller);
  }
  return mismatch_claimed(p, caller, replay, mismatch);
}

/* ---- the monitor of launched and embedded replays */

typedef struct watched {
  cg_plan_t *plan;
  struct watched *next;
} watched_t;

static pthread_mutex_t monitor_lock = PTHREAD_MUTEX_INITIALIZER;
static watched_t *watch_list;
static int monitor_running;

/* What the handler hears from the monitor: the status and its report. */
typedef struct fired {
  cg_status_t status;
  char *report; /* malloc'd; NULL: nothing to tell */
} fired_t;

/* The replay the monitor names: a cg_plan_start replay's and an embedded
 * plan's as cg_cuda_replay_number says, a launched one's as cg_plan_launch
 * left it under monitor_lock. */
static uint64_t monitor_replay(const cg_plan_t *p) {
  if (atomic_load(&p->cuda->running)) return cg_cuda_replay_number(p);
  return p->cuda->embedded && p->cuda->marks ? marks_replay(p) : p->cuda->launched_replay;
}

/* A replay in flight that nobody waits for in commgraph: the roll calls of
 * ranks whose replay timed out hear from this thread where this rank is
 * ("plan 'x', replay R", as a waiting rank says), where MPI allows it. */
static void answer_for(cg_plan_t *p) {
  if (cg_watchdog_any_thread(p)) cg_watchdog_answer(p, monitor_replay(p), &p->cuda->monitor_answered_ns);
}

/* The monitor's verdict on a plan whose replay made no progress for the
 * timeout, or whose ranks' fingerprints differed: 1 (the plan leaves the
 * list), with the report in *fired for the handler unless a waiting thread
 * claimed it first (then it reports; the monitor does not wait for that
 * under monitor_lock). The claim comes before the fingerprints are read
 * (reading clears them): a waiter that looks at the same time finds either
 * the mismatch or the claim. */
static int fire(cg_plan_t *p, const char *caller, int saw_differ, fired_t *fired) {
  int differ = saw_differ || cg_device_prints_pending(p->cuda->prints);
  if (!claim(p)) return 1;
  char mismatch[900];
  cg_status_t st;
  if (differ) {
    if (!cg_device_prints_mismatch(p->cuda->prints, mismatch, sizeof mismatch))
      snprintf(mismatch, sizeof mismatch, "the ranks ran different sequences on a communicator (its fingerprints "
               "differ; the waiting thread read which ones)");
    st = mismatch_claimed(p, caller, monitor_replay(p), mismatch);
  } else {
    /* the roll call too where MPI allows calls from this thread: it holds
     * monitor_lock meanwhile (at most 0.25 s), and it answers the others'
     * roll calls while it waits for theirs */
    st = time_out_claimed(p, caller, monitor_replay(p), cg_watchdog_any_thread(p));
  }
  *fired = (fired_t){st, cg_copy_text(cg_error_last(), 4096)};
  return 1;
}

/* How long a cg_plan_start replay's waiter may go without polling it and
 * still count as waiting: 2% of the timeout, at least 10 ms. */
static uint64_t waiter_grace_ns(const cg_plan_t *p) {
  double grace = p->timeout_s * 0.02e9;
  return grace > 1e7 ? (uint64_t)grace : 10000000u;
}

/* A cg_plan_start replay is its waiter's while the program's thread polls
 * it (cg_plan_wait, cg_plan_test): that thread reports it, with a roll
 * call. A thread that went elsewhere first, into a call that synchronizes
 * the device (a destroy, a rebind, its own cudaDeviceSynchronize), would
 * wait there for ever behind a replay that never ends: once nobody has
 * polled for a grace, the monitor answers roll calls for the replay and
 * reports it at the timeout (or once the fingerprints differ), which
 * aborts the communicators and lets that call return. 1 once reported. */
static int check_started(cg_plan_t *p, fired_t *fired) {
  struct cg_cuda_plan *c = p->cuda;
  /* the stamp before the clock: a poll between the two would otherwise
   * look like none for ever */
  uint64_t seen = atomic_load(&c->waiter_seen_ns), now = cg_clock_ns();
  if (now < seen || now - seen < waiter_grace_ns(p)) return 0;
  cudaSetDevice(p->device);
  if (cudaEventQuery(c->run_done) != cudaErrorNotReady) return 0; /* ended: the waiter collects it */
  int differ = cg_device_prints_pending(c->prints);
  if (!differ && !cg_watchdog_expired(p, c->started_ns)) {
    answer_for(p);
    return 0;
  }
  int owner = CG_RUN_STARTED;
  if (!atomic_compare_exchange_strong(&c->running, &owner, CG_RUN_TAKEN)) return 0; /* the waiter collected it */
  return fire(p, "cg_plan_start (watchdog: the replay's thread was not waiting for it)", differ, fired);
}

/* An embedded plan: a replay is in flight while the lock's holder counted
 * it in and not yet out, or while a launch from before the embedding
 * (which takes no lock) is outstanding. A cg_plan_start replay is
 * check_started's: the marks' clock starts again once it has ended. */
static int check_embedded(cg_plan_t *p, fired_t *fired) {
  struct cg_cuda_plan *c = p->cuda;
  volatile unsigned *m = c->marks;
  int waiters = atomic_load(&c->running);
  if (!waiters && cg_device_prints_pending(c->prints))
    return fire(p, "a replay of a CUDA graph that embeds the plan (watchdog)", 1, fired);
  unsigned entered = m[CG_MARK_ENTERED(p->n_steps)], left = m[CG_MARK_LEFT(p->n_steps)];
  int in_flight = !waiters && entered != left;
  if (!in_flight && !waiters && c->launched) {
    cudaSetDevice(p->device);
    in_flight = cudaEventQuery(c->launch_done) == cudaErrorNotReady;
  }
  if (in_flight) answer_for(p);
  uint64_t now = cg_clock_ns(), sum = marks_sum(p);
  if (!in_flight || sum != c->marks_seen) {
    c->marks_seen = sum;
    c->progress_ns = now;
    return 0;
  }
  if (!cg_watchdog_expired(p, c->progress_ns)) return 0;
  return fire(p, "a replay of a CUDA graph that embeds the plan (watchdog)", 0, fired);
}

/* One look at a plan, under monitor_lock: 1 when it leaves the list. A
 * timed-out plan leaves it with its report in *fired (malloc'd) for the
 * handler, which runs on its own thread and may destroy plans. */
static int check_plan(cg_plan_t *p, fired_t *fired) {
  struct cg_cuda_plan *c = p->cuda;
  if (atomic_load(&c->fired)) return 1; /* the waiter reported it */
  int started = atomic_load(&c->running);
  if (started && check_started(p, fired)) return 1;
  if (c->watch_embedded) return check_embedded(p, fired);
  if (!started && cg_device_prints_pending(c->prints))
    return fire(p, "cg_plan_launch (watchdog)", 1, fired);
  cudaSetDevice(p->device);
  cudaError_t err = cudaEventQuery(c->launch_done);
  if (err != cudaErrorNotReady) {
    /* done (or failed: the user's stream says so); its fingerprints may
     * have differed since the look above. The plan stays listed while a
     * started replay runs. */
    if (!started && cg_device_prints_pending(c->prints))
      return fire(p, "cg_plan_launch (watchdog)", 1, fired);
    return !started;
  }
  answer_for(p);
  uint64_t now = cg_clock_ns(), sum = marks_sum(p);
  if (sum != c->marks_seen) {
    c->marks_seen = sum;
    c->progress_ns = now;
    return 0;
  }
  if (!cg_watchdog_expired(p, c->progress_ns)) return 0;
  return fire(p, "cg_plan_launch (watchdog)", 0, fired);
}

static void *notify_main(void *arg) {
  fired_t *fired = arg;
  cg_cuda_thread_relax_capture(); /* a thread of ours: the handler's CUDA calls (a destroy) leave captures alone */
  cg_watchdog_notify_status(fired->status, fired->report);
  free(fired->report);
  free(fired);
  return NULL;
}

/* The handler on a thread of its own: it may destroy plans, which waits for
 * the device, and the monitor must go on watching the others meanwhile (a
 * second hung plan would otherwise never be reported). */
static void notify_detached(fired_t fired) {
  fired_t *copy = malloc(sizeof *copy);
  if (!copy) {
    cg_watchdog_notify_status(fired.status, fired.report);
    free(fired.report);
    return;
  }
  *copy = fired;
  if (!cg_cuda_thread_start_detached(notify_main, copy)) notify_main(copy);
}

static void *monitor_main(void *arg) {
  (void)arg;
  cg_cuda_thread_relax_capture();
  for (;;) {
    fired_t fired = {CG_SUCCESS, NULL};
    pthread_mutex_lock(&monitor_lock);
    for (watched_t **at = &watch_list; *at;) {
      watched_t *w = *at;
      if (!fired.report && check_plan(w->plan, &fired)) { /* one report per pass: each gets its handler call */
        w->plan->cuda->watched = 0;
        *at = w->next;
        free(w);
      } else {
        at = &w->next;
      }
    }
    pthread_mutex_unlock(&monitor_lock);
    if (fired.report) {
      notify_detached(fired);
      continue;
    }
    struct timespec nap = {0, 1000000}; /* 1 ms: timeouts are seconds */
    nanosleep(&nap, NULL);
  }
  return NULL;
}

/* Lists the plan with the monitor (started on first need), under
 * monitor_lock. */
static cg_status_t watch(cg_plan_t *p, const char *caller) {
  struct cg_cuda_plan *c = p->cuda;
  if (!monitor_running && !(monitor_running = cg_cuda_thread_start_detached(monitor_main, NULL)))
    return cg_fail(CG_ERR_NO_MEMORY, "%s: starting the watchdog's monitor thread", caller);
  if (c->watched) return CG_SUCCESS;
  watched_t *w = malloc(sizeof *w);
  if (!w) return cg_fail(CG_ERR_NO_MEMORY, "%s: listing the plan with the watchdog", caller);
  w->plan = p;
  w->next = watch_list;
  watch_list = w;
  c->watched = 1;
  c->progress_ns = cg_clock_ns();
  c->marks_seen = marks_sum(p);
  return CG_SUCCESS;
}

cg_status_t cg_cuda_watch_launch(cg_plan_t *p) {
  pthread_mutex_lock(&monitor_lock);
  p->cuda->launched_replay = p->replays;
  cg_status_t st = watch(p, "cg_plan_launch");
  pthread_mutex_unlock(&monitor_lock);
  return st;
}

cg_status_t cg_cuda_watch_start(cg_plan_t *p) {
  if (!p->cuda->marks) return CG_SUCCESS; /* no timeout, nothing to watch */
  pthread_mutex_lock(&monitor_lock);
  cg_status_t st = watch(p, "cg_plan_start");
  pthread_mutex_unlock(&monitor_lock);
  return st;
}

cg_status_t cg_cuda_watch_embedded(cg_plan_t *p, const char *caller) {
  if (!p->cuda->marks) return CG_SUCCESS; /* no timeout, nothing to watch */
  pthread_mutex_lock(&monitor_lock);
  cg_status_t st = watch(p, caller);
  if (st == CG_SUCCESS && !p->cuda->watch_embedded) {
    p->cuda->watch_embedded = 1;
    p->cuda->progress_ns = cg_clock_ns();
  }
  pthread_mutex_unlock(&monitor_lock);
  return st;
}

void cg_cuda_watch_forget(cg_plan_t *p) {
  pthread_mutex_lock(&monitor_lock);
  for (watched_t **at = &watch_list; *at; at = &(*at)->next)
    if ((*at)->plan == p) {
      watched_t *w = *at;
      *at = w->next;
      free(w);
      break;
    }
  if (p->cuda) p->cuda->watched = 0;
  pthread_mutex_unlock(&monitor_lock);
}

cg_status_t cg_cuda_check_runnable(const cg_plan_t *p, const char *caller) {
  if (p->timed_out || atomic_load(&p->cuda->fired)) {
    if (atomic_load(&p->cuda->fired)) await_report(p);
    char *report = cg_cuda_timeout_report(p);
    cg_status_t failed = fired_status(p);
    cg_status_t st = cg_fail(failed, "%s: a replay of the plan %s and its communicators were aborted (%s); destroy "
                             "the plan", caller, failed == CG_ERR_MISMATCH ? "ran a sequence other ranks did not"
                             : "timed out", report ? report : "see the log");
    free(report);
    return st;
  }
  for (uint32_t c = 0; c < p->n_comms; c++) {
    cg_status_t st = cg_comm_refuse_if_aborted(p->comms[c].comm, caller);
    if (st != CG_SUCCESS) return st;
  }
  return CG_SUCCESS;
}
