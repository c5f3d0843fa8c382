/* A wait that can be told to give up. Whoever waits for other ranks or for
 * the device in a loop (a backend's warm-up at compile time, the polled wait
 * for a stream) calls cg_wait_go_on between polls; the owner of the wait
 * (the scheduler) decides there whether the time is up, and may do work of
 * its own meanwhile (answer other ranks' roll calls). */
#ifndef CG_CORE_WAIT_H
#define CG_CORE_WAIT_H

typedef struct cg_wait {
  int (*go_on)(void *ctx); /* 0: stop waiting now */
  void *ctx;
} cg_wait_t;

/* 1 while the wait goes on; a NULL wait (or one without go_on) never gives
 * up. */
static inline int cg_wait_go_on(const cg_wait_t *wait) { return !wait || !wait->go_on || wait->go_on(wait->ctx); }

#endif
