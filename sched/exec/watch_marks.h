/* Which steps of a device plan carry the replay watchdog's progress marks,
 * and what the marks say about the steps without one (watch_marks.c). */
#ifndef CG_WATCH_MARKS_H
#define CG_WATCH_MARKS_H

#include <stdint.h>

#include "plan_internal.h"

/* marked[i] (n_steps): whether step i gets a mark of its own; witness[i]:
 * for a step without one, the next marked step of its lane in issue order
 * (CG_NO_STEP if none). Every step is marked but user compute (child graph,
 * event; or a zero-copy bucket's pack or unpack, which copies nothing) that
 * the next unit of its lane follows with the same again and that no host
 * function waits for. A mark is a kernel forked off the lane after the step,
 * and one after each kernel of a long chain of users' kernels (a backward
 * pass) slowed the chain by 1.3-1.6 us per kernel. */
void cg_marks_choose(uint8_t *marked, uint32_t *witness, const cg_plan_t *p);

/* The unit whose marks the replay's end can count instead of a mark kernel
 * of its own: the last unit in issue order, when every other step runs
 * before it (a dependency, or an earlier unit of the same lane, the closure
 * of both); CG_NO_STEP otherwise. Once it is done nothing of the plan's is
 * left but the lanes' joins, so a kernel at the replay's end (the embedded
 * plan's unlock, or one after the plan's graph) counts it as well as a mark
 * after it would, and a report of a replay that did not end still finds it
 * undone exactly when it is. A mark after a collective costs a training
 * iteration several microseconds (docs/watchdog.md); the end's kernel is
 * there anyway where the plan is embedded. */
uint32_t cg_marks_end_unit(const cg_plan_t *p);

/* Whether step `step` has a mark of its own (marked NULL: no choice made,
 * every step has). */
static inline int cg_marks_has(const uint8_t *marked, uint32_t step) { return !marked || marked[step]; }

/* Whether step `step` is done in replay `replay` by the marks (marks[i]
 * counts the replays step i finished; marked NULL: every step has its own).
 * A step without a mark is done once its witness is (a lane runs in issue
 * order) or a marked step that waits for it is. Never 1 for a step not done;
 * 0 for a done one only while neither has finished. */
int cg_marks_step_done(const cg_plan_t *p, const uint8_t *marked, const uint32_t *witness,
                       const volatile unsigned *marks, uint32_t step, uint64_t replay);

#endif
