/* A device plan's CUDA state, shared by the CUDA realizer (cuda_plan.c), the
 * device side of the replay watchdog (cuda_watchdog.c), profiling
 * (cuda_profile.c) and the executor's table (cuda_executor.c). */
#ifndef CG_SCHED_CUDA_PLAN_STATE_H
#define CG_SCHED_CUDA_PLAN_STATE_H

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdint.h>

#include "agreement.h"
#include "device_fingerprint.h"
#include "plan_internal.h"
#include "plan_lock.h"
#include "plan_measure.h"
#include "watchdog.h"

struct cg_cuda_plan {
  cudaStream_t *lanes;
  uint32_t n_lanes;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaGraph_t *children; /* per step: the plan's own clone of a child-graph node's graph, else NULL */
  unsigned *lock;        /* device word: the embedded plan's lock (plan_lock.cu) */
  cudaGraph_t embed_graph; /* lock, the plan's graph as a child, unlock: what users embed */
  cudaGraphExec_t embed_exec; /* embed_graph instantiated, for launches once the plan was embedded */
  int embedded;          /* handed out or captured: replays take the lock from now on */
  cudaEvent_t run_done; /* cg_plan_start's replay, on lanes[0] */
  cudaEvent_t legacy_done; /* the legacy default stream's work before cg_plan_start: its replay waits for it */
  /* cg_cuda_timed_replay's: around the replays it times, made on its first
   * use */
  cudaEvent_t timed_begin, timed_end;
  atomic_int running;   /* that replay's owner (CG_RUN_*): the waiter's (cg_plan_wait, _test, _run) while it
                           polls, or the monitor's once it took the replay over */
  int start_launches;   /* the graph launches of that start: 1, or 1 + the timed ones (cg_cuda_timed_replay) */
  int launched; /* by cg_plan_launch, on a stream the plan does not know */
  /* the watchdog (plans with a timeout): per step, a count the graph adds 1
   * to once the step is done (mapped host memory), then the counts of
   * replays that took and let go the embedded plan's lock (CG_MARK_ENTERED,
   * CG_MARK_LEFT), and when cg_plan_start's replay began; mark_tally: the
   * same counts in device memory, which the graph adds to (plan_lock.h) */
  unsigned *marks, *marks_dev, *mark_tally;
  cudaStream_t *mark_lanes; /* per lane: where its marks are captured, off the lane's path */
  /* per step (cg_cuda_choose_marks, at each capture): whether it has a mark
   * of its own, and for one that has not, the next step of its lane that
   * has (CG_NO_STEP if none): once that one is done, so is this one */
  uint8_t *marked;
  uint32_t *witness;
  /* the unit whose marks the replay's end counts (cg_marks_end_unit): the
   * embedded plan's unlock kernel, or a kernel after the plan's graph in
   * the plan's own executable graph; CG_NO_STEP: none (every marked unit
   * has its own kernel) */
  uint32_t end_unit;
  uint64_t started_ns;
  _Atomic uint64_t waiter_seen_ns; /* when a thread last polled that replay (cg_plan_wait, _test): the monitor
                                      takes it over once nobody has for a while (cuda_watchdog.c) */
  uint64_t *seq_base; /* per plan communicator: its sequence number at the latest launch */
  /* cg_plan_launch's replays under the watchdog (cuda_watchdog.c): recorded
   * on the user's stream after each launch; the monitor thread's state */
  cudaEvent_t launch_done;
  int watched;             /* listed with the monitor */
  int watch_embedded;      /* embedded: the monitor follows every replay that takes the lock, for good */
  atomic_int fired;        /* a replay's timeout: CG_FIRED_CLAIMED by the first of the waiter and the
                              monitor to see it, CG_FIRED_REPORTED once its report is stored */
  uint64_t answered_ns;    /* when the waiter last answered roll calls (cg_watchdog_answer) */
  uint64_t monitor_answered_ns; /* the same for the monitor thread, for a replay nobody waits for */
  uint64_t launched_replay; /* p->replays at the latest cg_plan_launch, stored under the monitor's lock:
                               what the monitor names (p->replays moves on the program's thread) */
  cg_status_t fired_status; /* what fired: CG_ERR_TIMEOUT, or CG_ERR_MISMATCH (fingerprints) */
  cg_device_prints_t *prints; /* the replay's fingerprint (plans with a timeout), or NULL */
  uint64_t progress_ns;    /* when the marks last moved */
  uint64_t marks_seen;     /* their sum then */
  char *timeout_report;    /* the monitor's report, for the next cg_plan_launch */
  /* while capturing profiling replays (cg_plan_tune): device slots for every
   * step's start (2 i) and end (2 i + 1) and the replay's start (2 n_steps),
   * %globaltimer ns; NULL otherwise */
  unsigned long long *stamps;
};

enum { CG_FIRED_NONE, CG_FIRED_CLAIMED, CG_FIRED_REPORTED };

/* c->running: no started replay; one that its waiter collects when it
 * ends; one the monitor took over (it reports it). The waiter's end and
 * the monitor's take-over both leave CG_RUN_STARTED atomically (an
 * exchange, a compare-and-swap), so a replay that ended in time is never
 * reported too. */
enum { CG_RUN_IDLE, CG_RUN_STARTED, CG_RUN_TAKEN };

/* The marks after the steps' (with n steps): replays in the lock, out of it. */
#define CG_MARK_ENTERED(n_steps) (n_steps)
#define CG_MARK_LEFT(n_steps) ((n_steps) + 1)
#define CG_MARK_SLOTS(n_steps) ((n_steps) + 2)

/* Which steps the capture marks (c->marked, c->witness): cg_marks_choose
 * (watch_marks.h). */
cg_status_t cg_cuda_choose_marks(cg_plan_t *p, const char *where);

/* The replay a report, a roll call and its answers name: the plan's own
 * launches (cg_plan_start, cg_plan_launch), or once the plan is embedded
 * every replay of its graph, as its marks count them (every rank runs the
 * same replays, so both are the same on every rank). */
uint64_t cg_cuda_replay_number(const cg_plan_t *p);
/* The steps the replay's end counts (c->end_unit's), into *list (n = 0 for
 * none: no timeout, profiling, or no end unit). */
void cg_cuda_end_marks(cg_mark_list_t *list, const cg_plan_t *p);
/* The communicator's sequence number of a collective step in replay
 * `replay`: the latest launch's, counted back by the plan's collectives on
 * the communicator per launch for an earlier one (cg_plan_start's timed
 * replays, launched together; exact unless another plan's launch on the
 * communicator came between). */
uint64_t cg_cuda_step_seq(const cg_plan_t *p, const cg_step_t *s, uint64_t replay);
/* The replay `replay` ran past the timeout: reports it (naming the step
 * waited for and the last completed, from the progress marks), marks the
 * plan timed out and aborts its communicators; CG_ERR_TIMEOUT. Once per
 * plan: *first is 0 when the monitor or the waiter had reported it already
 * (the status then repeats that report, and nobody is to notify again).
 * With roll_call, the report names the ranks that are not in this replay
 * (cg_watchdog_roll_call: MPI calls, so on the monitor's thread only where
 * cg_watchdog_any_thread allows). The handler is the caller's to call
 * (cg_watchdog_notify*). */
cg_status_t cg_cuda_time_out(int *first, cg_plan_t *p, const char *caller, uint64_t replay, int roll_call);
/* A profiling replay (cuda_profile.c: `hung` of `replays`, counted from 1;
 * 0: not known) ran past the timeout: reported like cg_cuda_time_out, with
 * the ranks not in it named, from `w` (what the replay's stamps show, if
 * stamps_read; w->extra is set here), as replay `replay` (the plan's replays
 * so far + 1 on every rank); the communicators are aborted and the handler
 * hears it (the caller waits: cg_watchdog_notify_waiter). */
cg_status_t cg_cuda_profile_time_out(cg_plan_t *p, const char *caller, uint64_t replay, int hung, int replays,
                                     cg_watchdog_where_t *w, int stamps_read);
/* A replay's fingerprints differed (mismatch: the sentence naming the
 * communicator and the ranks) while it ran: reported like a timeout, once,
 * with the communicators aborted; CG_ERR_MISMATCH. */
cg_status_t cg_cuda_mismatch(int *first, cg_plan_t *p, const char *caller, uint64_t replay, const char *mismatch);
/* A copy of the monitor's report of the plan's timed-out launch (free it);
 * NULL if none. */
char *cg_cuda_timeout_report(const cg_plan_t *p);
/* CG_ERR_TIMEOUT when the plan timed out or one of its communicators was
 * aborted after a timeout (of any plan): nothing runs on those any more. */
cg_status_t cg_cuda_check_runnable(const cg_plan_t *p, const char *caller);
/* cg_plan_launch under a timeout: the monitor thread follows the plan's
 * launched replays (its launch_done event) and reports a replay that makes
 * no progress for the timeout. Forget drops the plan (before it is freed). */
cg_status_t cg_cuda_watch_launch(cg_plan_t *p);
/* The plan was embedded in a user's graph (captured or handed out): from
 * now on the monitor follows every replay that takes its lock, wherever it
 * was launched, and reports one in flight whose marks do not move for the
 * timeout. */
cg_status_t cg_cuda_watch_embedded(cg_plan_t *p, const char *caller);
/* cg_plan_start under a timeout: the monitor lists the plan and takes its
 * replay over once nobody polls it (check_started in cuda_watchdog.c). */
cg_status_t cg_cuda_watch_start(cg_plan_t *p);
/* The status and report of a failed replay another thread claimed
 * (cg_cuda_time_out's *first == 0 case), for `caller`. */
cg_status_t cg_cuda_reported_elsewhere(cg_plan_t *p, const char *caller);
void cg_cuda_watch_forget(cg_plan_t *p);

/* ---- the realizer (cuda_plan.c, its capture in cuda_capture.c): the device
 * executor's entries (cuda_executor.c) and what profiling uses */

cg_status_t cg_cuda_build(cg_plan_t *p, const cg_participants_t *pt, cg_status_t mine, const char *where);
void cg_cuda_release(cg_plan_t *p);
cg_status_t cg_cuda_start(cg_plan_t *p);
cg_status_t cg_cuda_wait(cg_plan_t *p);
cg_status_t cg_cuda_timed_replay(double *seconds, cg_plan_t *p);
cg_status_t cg_cuda_quiesce(cg_plan_t *p, const char *where);
cg_status_t cg_cuda_rebuild(cg_plan_t *p, const char *where);

/* Warms up every communicator whose ranks all agreed to (go, not differ:
 * per participant), in agreed-id order (cuda_warmup.c). Each waits at most
 * the plan's timeout for the other ranks; one that times out is aborted and
 * named, with the ranks its roll call found missing. Returns the first
 * failure. */
cg_status_t cg_cuda_warm_up(cg_plan_t *p, const cg_participants_t *pt, const uint8_t *go, const uint8_t *differ,
                            const char *where);
/* Captures the plan's steps into *out: with the progress marks of a plan
 * with a timeout, or with the profiling stamps instead while p->cuda->stamps
 * is set. */
cg_status_t cg_cuda_capture(cudaGraph_t *out, cg_plan_t *p, const char *where);
/* Adds `child` (cloned) to the capture `stream` is part of, after what was
 * captured on it so far; what is captured on it next follows the new node
 * (cuda_capture.c; CUDA 12.3 or later, else CG_ERR_UNSUPPORTED). */
cg_status_t cg_cuda_capture_child_graph(cudaStream_t stream, cudaGraph_t child, const char *where);
/* Instantiates `graph` into *exec and uploads it on `stream`. */
cg_status_t cg_cuda_instantiate(cudaGraphExec_t *exec, cudaGraph_t graph, cudaStream_t stream, const char *where);
/* Whether the plan's cg_plan_start replay is done (*done), and how it ended. */
cg_status_t cg_cuda_test(int *done, cg_plan_t *p);
/* cg_plan_tune's profile of a device plan (cuda_profile.c): `replays`
 * replays with time stamps around every step, on `stream` (NULL: lane 0). */
cg_status_t cg_cuda_profile(cg_profile_t *out, cg_plan_t *p, int replays, void *stream, const char *where);

#endif
