/* The replay watchdog's shared part (watchdog.h). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "error.h"
#include "flight.h"
#include "watchdog.h"

static pthread_mutex_t handler_lock = PTHREAD_MUTEX_INITIALIZER;
static cg_timeout_handler_t handler;
static void *handler_arg;

cg_status_t cg_set_timeout_handler(cg_timeout_handler_t fn, void *arg) {
  pthread_mutex_lock(&handler_lock);
  handler = fn;
  handler_arg = arg;
  pthread_mutex_unlock(&handler_lock);
  return CG_SUCCESS;
}

cg_status_t cg_plan_timeout(double *seconds, const cg_plan_t *plan) {
  if (!seconds || !plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_timeout: NULL %s", seconds ? "plan" : "seconds");
  *seconds = plan->timeout_s;
  return CG_SUCCESS;
}

int cg_watchdog_expired(const cg_plan_t *plan, uint64_t started_ns) {
  return plan->timeout_s > 0 && (double)(cg_clock_ns() - started_ns) >= plan->timeout_s * 1e9;
}

/* "rank r of n" in the plan's first communicator: the rank a reader knows. */
static void plan_rank(char *buf, size_t size, const cg_plan_t *plan) {
  if (plan->n_comms)
    snprintf(buf, size, "rank %d of %d", plan->comms[0].comm->rank, plan->comms[0].comm->size);
  else
    snprintf(buf, size, "a plan without communicators");
}

void cg_watchdog_notify_status(cg_status_t status, const char *report) {
  pthread_mutex_lock(&handler_lock);
  cg_timeout_handler_t fn = handler;
  void *arg = handler_arg;
  pthread_mutex_unlock(&handler_lock);
  if (fn) fn(status, report, arg);
}

void cg_watchdog_notify(const char *report) { cg_watchdog_notify_status(CG_ERR_TIMEOUT, report); }

cg_status_t cg_watchdog_report(cg_plan_t *plan, const char *caller, uint64_t replay, const cg_watchdog_where_t *w) {
  char rank[64], waiting[700] = "an unknown step", last[700] = "none", report[3400];
  plan_rank(rank, sizeof rank, plan);
  if (w->waiting != CG_NO_STEP) cg_step_describe(waiting, sizeof waiting, plan, w->waiting);
  if (w->last_done != CG_NO_STEP) cg_step_describe(last, sizeof last, plan, w->last_done);
  plan->timed_out = 1;
  cg_flight_plan(plan, CG_FLIGHT_TIMEOUT, replay);
  const char *dump = cg_flight_dump_to_dir();
  snprintf(report, sizeof report,
           "%s: %s%s%s timed out after %.3g s on %s, replay %llu: waiting for %s; last completed: %s; %u of %u "
           "steps done%s%s%s%s",
           caller, plan->name ? "plan '" : "an unnamed plan", plan->name ? plan->name : "", plan->name ? "'" : "",
           plan->timeout_s, rank, (unsigned long long)replay, waiting, last, w->n_done, plan->n_steps,
           w->extra ? "; " : "", w->extra ? w->extra : "", dump[0] ? "; flight recorder: " : "", dump);
  fprintf(stderr, "commgraph: %s\n", report);
  fflush(stderr);
  return cg_fail(CG_ERR_TIMEOUT, "%s", report);
}

cg_status_t cg_watchdog_notify_waiter(cg_status_t st) {
  char *report = cg_copy_text(cg_error_last(), 4096);
  if (!report) {
    cg_watchdog_notify_status(st, cg_error_last());
    return st;
  }
  cg_watchdog_notify_status(st, report);
  st = cg_fail(st, "%s", report); /* the handler may have called the library */
  free(report);
  return st;
}

cg_status_t cg_watchdog_fire(cg_plan_t *plan, const char *caller, uint64_t replay, const cg_watchdog_where_t *w) {
  return cg_watchdog_notify_waiter(cg_watchdog_report(plan, caller, replay, w));
}

/* What this rank waits in, as the roll call tells it: the same text on
 * every rank in the same replay, so the report can group them. */
static void waiting_in(char *buf, size_t size, const cg_plan_t *plan, uint64_t replay) {
  snprintf(buf, size, "%s%s%s, replay %llu", plan->name ? "plan '" : "an unnamed plan", plan->name ? plan->name : "",
           plan->name ? "'" : "", (unsigned long long)replay);
}

void cg_watchdog_answer(const cg_plan_t *plan, uint64_t replay, uint64_t *last_ns) {
  if (plan->timeout_s <= 0) return;
  uint64_t now = cg_clock_ns();
  if (now - *last_ns < 1000000u) return;
  *last_ns = now;
  char text[192];
  waiting_in(text, sizeof text, plan, replay);
  for (uint32_t c = 0; c < plan->n_comms; c++) {
    const cg_comm_t *comm = plan->comms[c].comm;
    const cg_backend_t *b = comm->ops->backend;
    if (b && b->control_answer) b->control_answer(comm->impl, text);
  }
}

int cg_watchdog_any_thread(const cg_plan_t *plan) {
  if (plan->timeout_s <= 0 || !plan->n_comms) return 0;
  for (uint32_t c = 0; c < plan->n_comms; c++) {
    const cg_comm_t *comm = plan->comms[c].comm;
    const cg_backend_t *b = comm->ops->backend;
    if (!b || !b->control_any_thread || !b->control_any_thread(comm->impl)) return 0;
  }
  return 1;
}

void cg_watchdog_roll_call(char *buf, size_t size, const cg_plan_t *plan, uint64_t replay, const cg_comm_t *comm) {
  const cg_backend_t *b = comm ? comm->ops->backend : NULL;
  if (plan->timeout_s <= 0 || !b || !b->control_roll_call) return;
  char text[192], roll[768];
  waiting_in(text, sizeof text, plan, replay);
  b->control_roll_call(roll, sizeof roll, comm->impl, text, plan->timeout_s);
  size_t used = strlen(buf);
  if (used < size) snprintf(buf + used, size - used, "%sroll call: %s", used ? "; " : "", roll);
}
