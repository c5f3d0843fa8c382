/* What profiling replays measured of a plan, and the tuning made from it
 * (cg_plan_tune, docs/tuning.md): plan-level data that the executors fill
 * (a profile), the compile layer turns into a tuning (cost_model.c), and the
 * plan keeps for its dump, DOT and trace. */
#ifndef CG_SCHED_PLAN_MEASURE_H
#define CG_SCHED_PLAN_MEASURE_H

#include <stdint.h>

#include "commgraph/status.h"
#include "graph_internal.h"

/* What profiling replays measured: per step, when it started and ended, in
 * microseconds from its replay's start, the median over the replays. A
 * collective's start is when it was issued, so its end minus its start
 * includes waiting for the other ranks. */
typedef struct cg_profile {
  double *start_us, *end_us; /* n_steps each */
  uint32_t n_steps;
} cg_profile_t;

struct cg_plan;

/* Takes out of `prof` what the profiling stamps themselves cost: a device
 * executor stamps each step before and after (a dependent kernel each), so a
 * step's stamps run late by `stamp_us` for every stamp on the longest chain
 * of stamps before them (its lane's earlier units and its dependencies', unit
 * by unit in issue order). Without this a profiled backward pass of 160
 * kernels runs 36% longer than the plan does, and the tuning inherits it. */
void cg_profile_remove_stamps(cg_profile_t *prof, const struct cg_plan *plan, double stamp_us);

/* Fills *out from `replays` rows of 2 n_steps + 1 stamps each, in ns on one
 * clock: every step's start (2 i) and end (2 i + 1), then the replay's start;
 * each time is the median over the rows, in us after its row's start. */
cg_status_t cg_profile_from_stamps(cg_profile_t *out, const uint64_t *stamps, uint32_t n_steps, int replays,
                                   const char *where);
/* A copy of `from` in *out. */
cg_status_t cg_profile_copy(cg_profile_t *out, const cg_profile_t *from, const char *where);
void cg_profile_free(cg_profile_t *profile);

/* One communicator's measured collective cost: alpha_us + bytes / bytes_per_us
 * (bytes: a node's largest buffer, as buckets count them); overlap_us: how
 * much each collective on it delays the compute that later collectives wait
 * for (the fusion's search shifts the ready times of the k-th bucket's
 * members by k - 1 times it; 0: none). */
/* The longest sequence of collectives on one communicator that the fusion's
 * search with overlap takes (fusion.c); longer ones are searched without it,
 * and cg_cost_model_overlap leaves their communicators without one. */
#define CG_OVERLAP_MAX_COLLECTIVES 1024u

/* Allreduces the communicator's backend runs by a path of its own rather
 * than its library's (backend.h's collective_path_us: the NCCL backend's
 * one-shot and two-shot kernels), as the cost model saw them when it was
 * made: those of a dtype in `dtypes` and an op in `ops` (bits 1u << dtype,
 * 1u << op) of up to 1 KB << k bytes per rank take path_us[k] alone where
 * the library took library_us[k] (the smallest k that holds them; 0 and 0:
 * the library's path at that size). Kept with the tuning, so that a tuning
 * loaded in another run prices its buckets as it was measured. */
#define CG_COST_PATH_SIZES 14u

typedef struct cg_cost_path {
  uint32_t dtypes, ops;
  double path_us[CG_COST_PATH_SIZES], library_us[CG_COST_PATH_SIZES];
} cg_cost_path_t;

typedef struct cg_comm_cost {
  const cg_comm_t *comm;
  double alpha_us, bytes_per_us, overlap_us;
  cg_cost_path_t path;
} cg_comm_cost_t;

typedef struct cg_tuning {
  double *ready_us; /* per graph node: when a collective's inputs were ready, in us from the replay's start (the
                       latest end of the compute nodes it depends on directly; 0: none); unused for others */
  uint32_t n_nodes;
  cg_comm_cost_t *costs;
  uint32_t n_costs;
  int default_won; /* a plan's: cg_plan_tune timed the default boundaries faster, so the plan has them (and a
                      file saved from it says so) */
} cg_tuning_t;

void cg_tuning_free(cg_tuning_t *t);
/* A copy of `from` in *out. */
cg_status_t cg_tuning_copy(cg_tuning_t *out, const cg_tuning_t *from, const char *where);

/* The cost of `comm` in `t`; NULL if it was not measured. */
const cg_comm_cost_t *cg_tuning_cost(const cg_tuning_t *t, const cg_comm_t *comm);

#endif
