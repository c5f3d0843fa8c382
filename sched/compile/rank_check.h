/* The cross-rank check: before a plan exists, every rank's operations on each
 * communicator are compared with every other rank's, so a program that would
 * deadlock or mix up data at run time fails at compile time instead, on every
 * rank, with CG_ERR_MISMATCH naming the first difference. */
#ifndef CG_SCHED_RANK_CHECK_H
#define CG_SCHED_RANK_CHECK_H

#include "agreement.h"
#include "comm_order.h"

/* Checks every sequence of `order` whose communicator has a control channel.
 * `where` starts the error detail ("cg_compile: graph 'g'"). `local_status` is
 * this rank's verdict on the graph before the check (an unsupported node, say):
 * it travels in the first round, so a rank that cannot compile makes every rank
 * fail instead of leaving them waiting for it; this rank then returns
 * `local_status` with the detail the caller set. On success, when `joined` is
 * not NULL, *joined lists (retained; the caller releases them and frees the
 * list) the communicators this rank joined without using them, which take part
 * in later agreements too. A round that waits longer than timeout_s (when
 * positive) for the other ranks fails with CG_ERR_TIMEOUT naming the ranks
 * that did not come (cg_control_complete). */
cg_status_t cg_rank_check(const cg_graph_t *g, const cg_comm_order_t *order, const char *where,
                          cg_status_t local_status, double timeout_s, cg_comm_t ***joined, uint32_t *n_joined);

#endif
