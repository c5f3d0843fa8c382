/* The deadline wait of wait.h, and the pause between polls. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "wait.h"

#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "clock.h"

/* How long a wait spins (yielding) before it naps between polls. */
#define SPIN_NS 5000000ull

void cg_poll_pause(uint64_t began_ns) {
  if (cg_clock_ns() - began_ns < SPIN_NS) {
    sched_yield();
    return;
  }
  struct timespec nap = {0, 20000};
  nanosleep(&nap, NULL);
}

/* How often a rank that waits answers roll calls: a roll call's grace is at
 * least 5 ms (mpi_control.c). */
#define ANSWER_EVERY_NS 1000000ull

void cg_deadline_start(cg_deadline_t *d, double timeout_s, void (*answer)(void *, const char *), void *answer_ctx,
                       const char *waiting_in) {
  d->answered_ns = cg_clock_ns();
  d->timeout_s = timeout_s > 0 ? timeout_s < 1e9 ? timeout_s : 1e9 : 0;
  d->deadline_ns = d->timeout_s > 0 ? d->answered_ns + (uint64_t)(d->timeout_s * 1e9) : 0;
  d->expired = 0;
  d->answer = answer;
  d->answer_ctx = answer_ctx;
  snprintf(d->waiting_in, sizeof d->waiting_in, "%s", waiting_in);
}

int cg_deadline_go_on(void *ctx) {
  cg_deadline_t *d = ctx;
  uint64_t now = cg_clock_ns();
  if (d->answer && now - d->answered_ns >= ANSWER_EVERY_NS) {
    d->answer(d->answer_ctx, d->waiting_in);
    d->answered_ns = now;
  }
  if (!d->deadline_ns || now < d->deadline_ns) return 1;
  d->expired = 1;
  return 0;
}
