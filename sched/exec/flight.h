/* The flight recorder: a per-process ring of recent plan events, dumped as
 * text on a timeout or on request (cg_flight_dump), which `cgflight`
 * (flight_merge.c) merges across ranks. Collective steps carry their
 * communicator's agreed id and sequence number (cg_comm_t.issued), which
 * match across ranks for as long as the ranks agree: the first sequence
 * number some rank never completed names where they diverged. */
#ifndef CG_SCHED_FLIGHT_H
#define CG_SCHED_FLIGHT_H

#include <stdint.h>

#include "plan_internal.h"

#define CG_FLIGHT_EVENTS 4096

#define CG_FLIGHT_EVENT_LIST(X)        \
  X(CG_FLIGHT_REPLAY_START, "replay")  \
  X(CG_FLIGHT_STEP_START, "start")     \
  X(CG_FLIGHT_STEP_DONE, "done")       \
  X(CG_FLIGHT_REPLAY_DONE, "finished") \
  X(CG_FLIGHT_TIMEOUT, "timeout")
#define CG_FLIGHT_ENUMERATOR(name, text) name,
typedef enum cg_flight_event { CG_FLIGHT_EVENT_LIST(CG_FLIGHT_ENUMERATOR) CG_FLIGHT_EVENT_COUNT } cg_flight_event_t;
#undef CG_FLIGHT_ENUMERATOR

/* A plan-level event (replay start, finish, timeout). */
void cg_flight_plan(const cg_plan_t *plan, cg_flight_event_t event, uint64_t replay);
/* A step's event; a collective step's `seq` is its communicator's sequence
 * number (ignored for other steps). */
void cg_flight_step(const cg_plan_t *plan, cg_flight_event_t event, uint64_t replay, uint32_t step, uint64_t seq);
/* Writes the ring into CG_FLIGHT_DIR/cg-flight.<host>.<pid>.txt when that
 * variable is set; the path written, or "" (a static buffer). */
const char *cg_flight_dump_to_dir(void);

#endif
