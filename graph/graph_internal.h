/* The recorded graph as stored. Read by the rest of graph/; sched/ reads it
 * through graph_view.h. */
#ifndef CG_GRAPH_INTERNAL_H
#define CG_GRAPH_INTERNAL_H

#include <stdint.h>

#include "commgraph/graph.h"
#include "comm_internal.h"
#include "hazard.h"
#include "text.h"

typedef struct cg_node_rec {
  cg_node_kind_t kind;
  cg_comm_t *comm; /* NULL for host functions, child graphs and events */
  const void *send;
  void *recv;
  size_t count;
  cg_dtype_t dtype;
  cg_redop_t op;
  int root; /* root of rooted collectives, peer of send/recv, -1 otherwise */
  int is_fence;
  char *name; /* NULL until cg_node_name */
  cg_host_fn_t fn;
  void *arg;
  void *user_object; /* cloned cudaGraph_t or cudaEvent_t, opaque here */
  void (*release_user_object)(void *user_object);
  cg_span_t *spans; /* user nodes that are not fences: what they read, then what they write (normalized) */
  uint32_t n_read_spans, n_write_spans;
  cg_edge_vec_t preds; /* sorted by node index when recorded */
  cg_edge_vec_t succs;
} cg_node_rec_t;

/* One communicator as this graph uses it. Its collectives run in record order on
 * every rank: each follows the previous one, and the point-to-point operations
 * between two collectives (which form one group, issued together) follow the
 * first and precede the second. */
typedef struct cg_comm_use {
  cg_comm_t *comm;
  uint32_t last_collective; /* CG_NO_NODE before the first */
  uint32_t *p2p_since;      /* sends and receives recorded since last_collective */
  uint32_t n_p2p;
  uint32_t cap_p2p;
} cg_comm_use_t;

struct cg_graph {
  uint64_t serial;
  char *name;
  cg_node_rec_t *nodes;
  uint32_t n_nodes;
  uint32_t cap_nodes;
  size_t n_edges;
  int has_backward_edges; /* an explicit edge from a later node to an earlier one */
  uint32_t last_fence;    /* CG_NO_NODE before the first fence */
  cg_hazard_t hazards;
  cg_edge_vec_t scratch; /* predecessors of the node being recorded */
  cg_comm_use_t *comms; /* by first use in record order; each communicator retained once */
  uint32_t n_comms;
  uint32_t cap_comms;
};

/* What a node kind takes, for the layers that describe or compare nodes. */
static inline int cg_kind_is_p2p(cg_node_kind_t k) { return k == CG_NODE_SEND || k == CG_NODE_RECV; }
static inline int cg_kind_has_op(cg_node_kind_t k) {
  return k == CG_NODE_ALLREDUCE || k == CG_NODE_REDUCE || k == CG_NODE_REDUCE_SCATTER;
}
static inline int cg_kind_has_root(cg_node_kind_t k) {
  return k == CG_NODE_BROADCAST || k == CG_NODE_REDUCE || k == CG_NODE_GATHER || k == CG_NODE_SCATTER;
}
/* Kinds that fuse into buckets (sched/compile/fusion.c). */
static inline int cg_kind_is_fusible(cg_node_kind_t k) {
  return k == CG_NODE_ALLREDUCE || k == CG_NODE_REDUCE || k == CG_NODE_BROADCAST || k == CG_NODE_ALLGATHER ||
         k == CG_NODE_REDUCE_SCATTER;
}

/* Adds `proto` (kind, comm, buffers, ...; edges and name ignored) as the next
 * node, with hazard edges for `access` (ignored for a fence). The caller has
 * validated everything; this only fails for lack of memory and then changes
 * nothing. */
cg_status_t cg_graph_add_node(cg_graph_t *graph, const cg_node_rec_t *proto, const cg_access_set_t *access,
                              cg_node_t *out);

/* CG_SUCCESS if `node` is a live node of `graph`; otherwise the error detail
 * names `caller`. */
cg_status_t cg_graph_check_node(const cg_graph_t *graph, cg_node_t node, const char *caller);

/* Adds the edge before -> after with `causes`, or ORs the causes into an
 * existing one. Does not check for cycles. */
cg_status_t cg_graph_link(cg_graph_t *graph, uint32_t before, uint32_t after, uint32_t causes);

/* Records a node that runs user code (host function, child graph, event) with
 * the memory it declares in `access` (NULL: a fence). `caller` names the public
 * function in error details. On failure nothing is recorded and the caller
 * still owns `proto->user_object`. */
cg_status_t cg_graph_record_user_node(cg_node_t *out, cg_graph_t *graph, const cg_node_rec_t *proto,
                                      const cg_access_t *access, const char *caller);

/* The bytes collective node `n` (a send, receive or barrier too) reads
 * (spans[0]) and writes (spans[1]) on this rank, after the checks recording
 * makes of its buffers (present, not past the end of memory, aliased only in
 * an in-place form, and with `check_placement`, memory its communicator can
 * use); failures name `caller` and node #index. Placement is asked of new
 * buffers only: old ones may have been freed by now. */
cg_status_t cg_collective_spans(cg_span_t spans[2], const cg_node_rec_t *n, uint32_t index, const char *caller,
                                int check_placement);

#endif
