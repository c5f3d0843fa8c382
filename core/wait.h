/* A wait that can be told to give up. Whoever waits for other ranks or for
 * the device in a loop (a backend's warm-up at compile time, the polled wait
 * for a stream) calls cg_wait_go_on between polls; the owner of the wait
 * (the scheduler) decides there whether the time is up, and may do work of
 * its own meanwhile (answer other ranks' roll calls). */
#ifndef CG_CORE_WAIT_H
#define CG_CORE_WAIT_H

#include <stdint.h>

typedef struct cg_wait {
  int (*go_on)(void *ctx); /* 0: stop waiting now */
  void *ctx;
} cg_wait_t;

/* 1 while the wait goes on; a NULL wait (or one without go_on) never gives
 * up. */
static inline int cg_wait_go_on(const cg_wait_t *wait) { return !wait || !wait->go_on || wait->go_on(wait->ctx); }

/* The usual owner of a wait for other ranks (wait.c): a deadline, and
 * meanwhile the other ranks' roll calls answered every millisecond with
 * what this rank waits in (answer(answer_ctx, waiting_in): a communicator's
 * control channel; NULL: none). A compile's warm-up waits under one, and so
 * does an NCCL arena's set-up under its communicator's timeout. */
typedef struct cg_deadline {
  uint64_t deadline_ns, answered_ns; /* deadline 0: none */
  double timeout_s;                  /* 0: none; at most 1e9 (for ever, and no overflow) */
  int expired;                       /* go_on said stop */
  void (*answer)(void *answer_ctx, const char *waiting_in);
  void *answer_ctx;
  char waiting_in[512];
} cg_deadline_t;

/* Between two polls of a wait that began at began_ns (cg_clock_ns): for its
 * first milliseconds the core is only yielded to whoever else is runnable,
 * as the CUDA runtime's own synchronize does by default; then a nap of
 * 20 us, which leaves a core to NCCL's proxy and MPI. (On Linux a nap that
 * short takes some 60 us, its timer slack: napping from the start tripled
 * a small replay's cg_plan_run; bench_nccl_plan part c.) */
void cg_poll_pause(uint64_t began_ns);

/* Starts now; timeout_s 0 or less: never gives up. */
void cg_deadline_start(cg_deadline_t *d, double timeout_s, void (*answer)(void *, const char *), void *answer_ctx,
                       const char *waiting_in);
/* A cg_wait_t's go_on, ctx a cg_deadline_t. */
int cg_deadline_go_on(void *ctx);

#endif
