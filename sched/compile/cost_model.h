/* The cost model of cg_plan_tune (docs/tuning.md): from a plan's profiling
 * replays, when each collective's inputs were ready and what a collective
 * costs on each communicator. */
#ifndef CG_SCHED_COST_MODEL_H
#define CG_SCHED_COST_MODEL_H

#include "plan_internal.h"

/* The tuning of `plan` (compiled from `g`, unchanged) measured by `prof`:
 * ready times from the ends of the compute nodes each collective depends on
 * directly; per communicator, alpha + bytes / bytes_per_us fitted to its
 * collective steps and calibrated against the profiled replay. This rank's
 * alone: the compile makes the ranks agree (tuning.h). */
cg_status_t cg_cost_model_make(cg_tuning_t *t, const cg_plan_t *plan, const cg_graph_t *g, const cg_profile_t *prof,
                               const char *where);

#endif
