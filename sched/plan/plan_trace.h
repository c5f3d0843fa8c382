/* A plan's measurements made visible (docs/tuning.md, "The timeline"): a
 * profile written as a Chrome trace (plan_trace.c, behind cg_plan_trace),
 * and the words the dump, the DOT and the trace share for measured times,
 * the cost model and a step's bytes (plan_describe.c). */
#ifndef CG_SCHED_PLAN_TRACE_H
#define CG_SCHED_PLAN_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "plan_internal.h"

/* Writes `prof` (a profile of `plan`: one start and end per step) to `path`
 * as Chrome trace JSON ({"traceEvents": [...]}, what ui.perfetto.dev and
 * chrome://tracing open): one complete event ("ph": "X", ts and dur in us
 * from the replay's start) per step, pid this rank (its rank in the plan's
 * first communicator; 0 without one), tid the step's lane, lanes and the
 * process named by metadata events, and per step its node, kind, bytes and,
 * for a bucket, its members. Every "%r" in `path` becomes the rank, so one
 * path serves all ranks; a path without one is used as given (ranks must
 * then pass different paths). Errors start with `where`. */
cg_status_t cg_profile_write_trace(const cg_plan_t *plan, const cg_profile_t *prof, const char *path,
                                   const char *where);

/* The rank the trace is written for: the plan's rank in its first
 * communicator, 0 without one. */
int cg_plan_trace_rank(const cg_plan_t *plan);

/* ---- shared words (plan_describe.c) */

/* A node's bytes as buckets count them (its largest buffer: an allgather's
 * receive buffer, a reduce_scatter's send buffer); 0 for nodes that move
 * none. */
size_t cg_plan_node_bytes(const cg_plan_t *plan, uint32_t node);
/* What a step moves: a bucket's collective its bucket's bytes, a pack or
 * unpack the bytes it copies, a collective its node's bytes; 0 else. */
size_t cg_plan_step_bytes(const cg_plan_t *plan, uint32_t step);
/* "measured 12.3 µs at 140.0 µs" (the step's median duration and start in
 * its replay) when the plan holds a profile of its steps; "" otherwise.
 * Returns whether it wrote something. */
int cg_plan_measured_text(char *buf, size_t size, const cg_plan_t *plan, uint32_t step);
/* "alpha 6.5 µs, 301 GB/s": the cost model of the plan's communicator
 * `comm_index` from its tuning; "" when there is none. Returns whether it
 * wrote something. */
int cg_plan_model_text(char *buf, size_t size, const cg_plan_t *plan, uint32_t comm_index);
/* When a collective step's inputs were ready by the plan's tuning (a
 * bucket's: its latest member's), in us from the replay's start; returns 0
 * when the plan has no tuning or the step is no collective. */
int cg_plan_ready_us(double *ready_us, const cg_plan_t *plan, uint32_t step);

#endif
