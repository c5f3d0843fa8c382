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

/* What a collective of `bytes` (a node's largest buffer, as buckets count
 * them) of this kind, dtype and op costs on cost->comm: alpha + bytes /
 * bytes_per_us, less what the backend's own path saves against its library
 * at that size where it has one (cost->path, plan_measure.h: the NCCL
 * backend's allreduce kernels), and never less than that path's own time.
 * The line is fitted to the profile's collectives each taken back to the
 * library's cost, so it describes the library; without that correction a
 * line fitted to a default plan's few large NCCL buckets charges every small
 * bucket NCCL's fixed cost, where the kernels take a third of it. */
double cg_cost_model_collective_us(const cg_comm_cost_t *cost, cg_node_kind_t kind, cg_dtype_t dtype, cg_redop_t op,
                                   size_t bytes);

/* What comm's backend measured of its own path (backend.h's
 * collective_path_us) at the table's sizes; none without one. */
void cg_cost_model_query_path(cg_cost_path_t *out, const cg_comm_t *comm);

/* Candidate tunings: `t` with every communicator's alpha multiplied by
 * `alpha_scale`. Inside a busy replay a collective's fixed cost is poorly
 * known from the few collectives of the profiled plan (launches, dependency
 * edges and the GPU's scheduling between streams add to it, more so the more
 * collectives there are), so cg_plan_tune compiles the boundaries of a few
 * scales and keeps the one that runs fastest. */
cg_status_t cg_cost_model_scaled(cg_tuning_t *out, const cg_tuning_t *t, double alpha_scale, const char *where);

/* Candidate tunings with overlap: `t` (made from `plan`'s profile `prof`)
 * where every collective also delays the compute later collectives wait for
 * by overlap_us = alpha_us * overlap_scale (each collective lengthens a
 * backward pass that runs beside it: on 2 H200 a few microseconds each, so
 * one alpha charged to every bucket both makes buckets few, which is right,
 * and keeps the last one large, which is not). The ready times go back to
 * what they were before the profiled plan's collectives delayed them (each
 * that started earlier: overlap_us less); the fusion's search adds its own
 * candidates' delays (fusion.c). */
cg_status_t cg_cost_model_overlap(cg_tuning_t *out, const cg_tuning_t *t, const cg_plan_t *plan,
                                  const cg_profile_t *prof, double overlap_scale, const char *where);

#endif
