/* Lowering a checked graph to a plan's steps (lower.c) and laying out its
 * buckets' buffers and copies (bucket_layout.c); the order in which a
 * realizer issues the steps (p2p_levels.c, issue_order.c). */
#ifndef CG_SCHED_LOWER_H
#define CG_SCHED_LOWER_H

#include "comm_order.h"
#include "fusion.h"
#include "plan_internal.h"

/* Fills the plan's steps, dependencies, communicators, lanes, buckets (their
 * members and steps), node names and fusion reasons. p->device must be set. */
cg_status_t cg_plan_lower(cg_plan_t *p, const cg_graph_t *g, const cg_comm_order_t *order, const cg_fusion_t *f,
                          const char *where);

/* Decides, per bucket, which side runs on the members' own buffers, allocates
 * the staging memory (device memory for a device plan), builds the copy
 * segments and points each bucket's collective step at its fused buffers. */
cg_status_t cg_plan_layout_buckets(cg_plan_t *p, const char *where);

struct cg_participants;

/* Levels of sends and receives (p2p_levels.c): levels[step] for every send
 * and receive, 0 for other steps, computed from this rank's plan. With `pt`,
 * the ranks of each participant communicator then agree (collective; a rank
 * whose `mine` failed, with plan NULL or not, still takes part and makes the
 * others fail) so that matching operations have the same level. */
cg_status_t cg_p2p_levels(uint32_t *levels, const cg_plan_t *plan, const struct cg_participants *pt,
                          cg_status_t mine, const char *where);

/* Fills issue_order, units and each step's unit (issue_order.c), grouping
 * sends and receives by `levels`. */
cg_status_t cg_plan_issue_order(cg_plan_t *plan, const uint32_t *levels, const char *where);

#endif
