/* Per-communicator order: the nodes of each communicator in the graph's
 * deterministic topological order. The graph keeps each communicator's
 * collectives in record order (comm-order edges), so every rank that recorded
 * the same program gets the same sequence of collectives, whatever its
 * rank-specific hazard edges; only the point-to-point operations inside one
 * group (between two collectives) may come in another order. This is what the
 * cross-rank check compares and what the lowering keeps in one total order. */
#ifndef CG_SCHED_COMM_ORDER_H
#define CG_SCHED_COMM_ORDER_H

#include "graph_view.h"

typedef struct cg_comm_sequence {
  cg_comm_t *comm;
  const uint32_t *nodes; /* node indices in execution order */
  uint32_t len;
} cg_comm_sequence_t;

typedef struct cg_comm_order {
  cg_comm_sequence_t *sequences; /* by first use in record order */
  uint32_t n_sequences;
  uint32_t *storage;
} cg_comm_order_t;

cg_status_t cg_comm_order_build(cg_comm_order_t *out, const cg_graph_t *g);
void cg_comm_order_free(cg_comm_order_t *order);

#endif
