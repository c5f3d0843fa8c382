/* How a plan runs: a table of run functions, one table per kind of plan (the
 * host executor for host plans, the CUDA executor for device plans). The
 * compiler picks one with cg_executor_for and calls its build; the public run
 * API (sched/exec/run.c), cg_plan_rebind and cg_plan_destroy call through the
 * plan's table and never name an executor, so no layer calls back into the
 * one that called it. The tables are defined by sched/exec; which ones exist
 * is the build's choice (CMake builds exec/cuda/ or exec/nocuda/). */
#ifndef CG_SCHED_EXECUTOR_H
#define CG_SCHED_EXECUTOR_H

#include "plan_internal.h"

struct cg_participants;

typedef struct cg_executor {
  const char *name; /* "host", "cuda": for messages */
  /* The last step of cg_compile, once the plan's steps, buckets and issue
   * order exist. Collective over the participants for device plans: a rank
   * whose `mine` failed (plan may then be NULL) still takes part, so every
   * rank fails alike. NULL: nothing to build. */
  cg_status_t (*build)(cg_plan_t *plan, const struct cg_participants *pt, cg_status_t mine, const char *where);
  /* Whatever a device needs of each bucket's layout (CUDA: the copy kernels'
   * chunk tables), after cg_plan_layout_buckets at compile and rebind time.
   * NULL: nothing. */
  cg_status_t (*prepare_buckets)(cg_plan_t *plan, const char *where);
  /* Frees the executor's state of a plan that is not running (NULL-safe on
   * a plan it never built). */
  void (*release)(cg_plan_t *plan);
  /* cg_plan_start, cg_plan_test, cg_plan_wait (plan and done checked). */
  cg_status_t (*start)(cg_plan_t *plan);
  cg_status_t (*test)(int *done, cg_plan_t *plan);
  cg_status_t (*wait)(cg_plan_t *plan);
  /* cg_plan_rebind: CG_ERR_IN_PROGRESS while cg_plan_start's replay runs,
   * else waits for whatever may still read the plan's buffers; then, once
   * the buffers moved, makes the plan use them (CUDA: captures again and
   * updates the executable graphs). NULL: nothing to do. */
  cg_status_t (*quiesce)(cg_plan_t *plan, const char *where);
  cg_status_t (*rebuild)(cg_plan_t *plan, const char *where);
  /* cg_plan_tune: one warm-up replay, then `replays` replays with every
   * step's start and end recorded (device plans on `stream`, a cudaStream_t;
   * NULL: the plan's own; back to back after one unrecorded replay).
   * Collective like any replay. NULL: this executor
   * cannot profile. */
  cg_status_t (*profile)(cg_profile_t *out, cg_plan_t *plan, int replays, void *stream, const char *where);
  /* cg_plan_tune's timing of its candidates: a run as cg_plan_start and
   * cg_plan_wait run it, and *seconds, how long one replay took by the
   * device's clock, without the host's wake-up after the wait (CUDA: events
   * around replays back to back after a first one). NULL: tune times start
   * and wait by the host's clock. */
  cg_status_t (*timed_replay)(double *seconds, cg_plan_t *plan);
} cg_executor_t;

/* The executor for plans on `device` (CG_DEVICE_HOST or a CUDA ordinal);
 * NULL for a device when the library was built without CUDA. */
const cg_executor_t *cg_executor_for(int device);

/* The device a plan of user GPU work alone (no communicator) runs on: the
 * calling thread's current CUDA device. */
cg_status_t cg_executor_current_device(int *device, const char *where);

#endif
