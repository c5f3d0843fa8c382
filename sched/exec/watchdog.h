/* The replay watchdog (include/commgraph/plan.h, docs/watchdog.md): a plan's
 * timeout (replays are measured with core/clock.h), and the report a timeout
 * makes. The executors (host_exec.c, cuda_plan.c) decide which step was
 * waited for; this file words it the same way for both. */
#ifndef CG_SCHED_WATCHDOG_H
#define CG_SCHED_WATCHDOG_H

#include <stdint.h>

#include "clock.h"
#include "plan_internal.h"

/* Whether the plan's current replay, started at `started_ns`, has run past
 * the plan's timeout. */
int cg_watchdog_expired(const cg_plan_t *plan, uint64_t started_ns);

/* What a timed-out replay was doing: the step it waited for (CG_NO_STEP:
 * unknown), the last step that completed (CG_NO_STEP: none), how many were
 * done. */
typedef struct cg_watchdog_where {
  uint32_t waiting, last_done, n_done;
  const char *extra; /* appended to the report (may be NULL) */
} cg_watchdog_where_t;

/* Reports the timeout of the plan's replay `replay`: fails with
 * CG_ERR_TIMEOUT naming caller, plan, rank, replay, the step waited for and
 * the last completed (the report is then cg_error_last()); prints it on
 * stderr, records it and dumps the flight recorder (CG_FLIGHT_DIR). The
 * handler is not called: cg_watchdog_notify does that, last, since it may
 * destroy the plan. */
cg_status_t cg_watchdog_report(cg_plan_t *plan, const char *caller, uint64_t replay, const cg_watchdog_where_t *w);
/* Passes a report to the handler set with cg_set_timeout_handler, if any. */
void cg_watchdog_notify(const char *report);
/* The same with the status the handler hears (CG_ERR_MISMATCH: a device
 * replay's fingerprints differed, device_fingerprint.h). */
void cg_watchdog_notify_status(cg_status_t status, const char *report);
/* The handler hears the report in cg_error_last() (of status `st`), which
 * still holds it afterwards; returns `st`. For a caller that waits
 * (cg_plan_wait, _test, _run): the handler runs on its thread and must not
 * destroy the plan there. */
cg_status_t cg_watchdog_notify_waiter(cg_status_t st);
/* cg_watchdog_report, then cg_watchdog_notify_waiter. */
cg_status_t cg_watchdog_fire(cg_plan_t *plan, const char *caller, uint64_t replay, const cg_watchdog_where_t *w);

/* Where the ranks are (issue 23): while a replay is waited for on the
 * caller's thread, cg_watchdog_answer answers, at most once a millisecond
 * (*last_ns keeps the time), the roll calls of ranks whose replay timed out,
 * on the control channels of the plan's communicators: "plan 'x', replay R".
 * At a timeout, cg_watchdog_roll_call asks every rank of `comm` where it is
 * and appends to `buf` (at `*used`) the ranks that did not answer (not in
 * this replay: late, in other code, or gone) and where the others are.
 * Neither runs without a timeout. */
void cg_watchdog_answer(const cg_plan_t *plan, uint64_t replay, uint64_t *last_ns);
/* Whether both may also run on a thread of the library's beside the
 * program's (the device watchdog's monitor, for the replays nobody waits
 * for in commgraph): every communicator's control channel allows it
 * (MPI_THREAD_MULTIPLE). */
int cg_watchdog_any_thread(const cg_plan_t *plan);
void cg_watchdog_roll_call(char *buf, size_t size, const cg_plan_t *plan, uint64_t replay, const cg_comm_t *comm);

#endif
