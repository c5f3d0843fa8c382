/* Tuning (cg_plan_tune, tune.c): what profiling replays measured, in the
 * form the fusion pass uses to choose bucket boundaries (fusion.c), and the
 * compile that takes it. */
#ifndef CG_SCHED_TUNING_H
#define CG_SCHED_TUNING_H

#include <stdint.h>

#include "comm_order.h"
#include "plan_internal.h"

struct cg_participants;

/* 1 when `plan` keeps a tuning whose default boundaries won
 * (cg_tuning_t.default_won). */
int cg_plan_default_won(const cg_plan_t *plan);

/* Makes every rank hold the same tuning for the collectives of `order`: per
 * participant communicator, each collective's ready time becomes the latest
 * over its ranks (a collective starts once its last rank is ready), alpha the
 * smallest and bytes_per_us the largest (a collective's measured time on a
 * rank includes waiting for the others; the rank that came last waited
 * least); *default_won becomes 1 if it is on any rank. Collective, like
 * cg_agree: a rank whose `mine` failed still takes part (t may then hold
 * nothing), and its status and detail travel in the round, so every other
 * rank fails with the same status, naming that rank and why. */
cg_status_t cg_tuning_agree(cg_tuning_t *t, int *default_won, const cg_graph_t *g, const cg_comm_order_t *order,
                            const struct cg_participants *pt, cg_status_t mine, const char *where);

/* cg_compile with bucket boundaries chosen from `tuning` (NULL: cg_compile).
 * `mine`: a failure of this rank before the compile (its detail set), which
 * the compile carries so every rank fails; CG_SUCCESS otherwise. */
cg_status_t cg_compile_tuned(cg_plan_t **out, cg_graph_t *graph, const cg_compile_opts_t *opts,
                             cg_tuning_t *tuning, cg_status_t mine);

/* The same, where default_won keeps the default boundaries while the ranks
 * still agree on `tuning` and the plan keeps it (cg_plan_tune's untimed
 * baseline; a loaded file that says "boundaries default"). With a tuning, or
 * a failed `mine`, or opts->tuning_file, the ranks agree on the tuning
 * (cg_tuning_agree), which carries any rank's failure: the cross-rank check
 * (opts->check_ranks) is not needed for that. */
cg_status_t cg_compile_tuning(cg_plan_t **out, cg_graph_t *graph, const cg_compile_opts_t *opts,
                              cg_tuning_t *tuning, int default_won, cg_status_t mine);

#endif
