/* Recording a graph: one iteration's communication as a DAG of nodes.
 *
 * A graph behaves as if its nodes ran one by one in record order. Edges are
 * added automatically where two nodes touch overlapping bytes and at least one
 * writes (read-after-write, write-after-read, write-after-write). Nodes that
 * touch memory the graph cannot see (barriers, host functions, child graphs and
 * events without declared accesses) are fences: ordered after every earlier node
 * and before every later one. The collectives of one communicator run in
 * record order on every rank: each follows the previous one (comm-order edges),
 * and the sends and receives recorded between two collectives form one group
 * that follows the first and precedes the second. Every recording call
 * validates its arguments first; a rejected call changes nothing.
 *
 * A graph is not thread-safe: record into it from one thread at a time.
 * Different graphs may be recorded on different threads. */
#ifndef COMMGRAPH_GRAPH_H
#define COMMGRAPH_GRAPH_H

#include <stdio.h>

#include "commgraph/comm.h"
#include "commgraph/status.h"
#include "commgraph/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_graph cg_graph_t;

typedef struct cg_graph_opts {
  size_t size;      /* sizeof(cg_graph_opts_t) */
  const char *name; /* shown in DOT output and error details; copied; may be NULL */
} cg_graph_opts_t;
#define CG_GRAPH_OPTS_INIT {sizeof(cg_graph_opts_t), NULL}

/* opts may be NULL for defaults. */
CG_API cg_status_t cg_graph_create(cg_graph_t **out, const cg_graph_opts_t *opts);
CG_API void cg_graph_destroy(cg_graph_t *graph);

/* ---- collectives. `count` is in elements, per rank where the layout is per rank
 * (allgather: send count; reduce_scatter: receive count; alltoall: count per
 * peer; gather: send count; scatter: receive count). In-place forms are NCCL's:
 * send == recv for allreduce, broadcast (root) and reduce (root); send == recv +
 * rank*count for allgather; recv == send + rank*count for reduce_scatter;
 * send == recv + root*count for gather (root); recv == send + root*count for
 * scatter (root). Any other overlap of send and recv is CG_ERR_ALIAS. Buffers a
 * rank does not use (send on a non-root of broadcast and scatter, recv on a
 * non-root of reduce and gather) are ignored and may be NULL. */
CG_API cg_status_t cg_allreduce(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm, const void *send,
                                void *recv, size_t count, cg_dtype_t dtype, cg_redop_t op);
CG_API cg_status_t cg_broadcast(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm, const void *send,
                                void *recv, size_t count, cg_dtype_t dtype, int root);
CG_API cg_status_t cg_reduce(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm, const void *send, void *recv,
                             size_t count, cg_dtype_t dtype, cg_redop_t op, int root);
CG_API cg_status_t cg_allgather(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm, const void *send,
                                void *recv, size_t send_count, cg_dtype_t dtype);
CG_API cg_status_t cg_reduce_scatter(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm, const void *send,
                                     void *recv, size_t recv_count, cg_dtype_t dtype, cg_redop_t op);
CG_API cg_status_t cg_alltoall(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm, const void *send,
                               void *recv, size_t count_per_peer, cg_dtype_t dtype);
CG_API cg_status_t cg_gather(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm, const void *send, void *recv,
                             size_t send_count, cg_dtype_t dtype, int root);
CG_API cg_status_t cg_scatter(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm, const void *send,
                              void *recv, size_t recv_count, cg_dtype_t dtype, int root);

/* ---- point to point. Independent sends and receives are issued together, so a
 * ring recorded as send-then-receive on every rank does not deadlock. A rank
 * may send to itself. */
CG_API cg_status_t cg_send(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm, const void *buf, size_t count,
                           cg_dtype_t dtype, int peer);
CG_API cg_status_t cg_recv(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm, void *buf, size_t count,
                           cg_dtype_t dtype, int peer);

/* A barrier on the communicator; a fence in the graph. */
CG_API cg_status_t cg_barrier(cg_node_t *out, cg_graph_t *graph, cg_comm_t *comm);

/* ---- nodes that run user code. What they touch is declared with cg_access_t;
 * NULL (or everything = 1) makes the node a fence. */
typedef struct cg_access {
  size_t size;              /* sizeof(cg_access_t) */
  int everything;           /* 1: may touch any memory; the node becomes a fence */
  const cg_range_t *reads;  /* ranges read, used when everything == 0; copied */
  size_t n_reads;
  const cg_range_t *writes; /* ranges written, used when everything == 0; copied */
  size_t n_writes;
} cg_access_t;
#define CG_ACCESS_INIT {sizeof(cg_access_t), 1, NULL, 0, NULL, 0}

/* Runs fn(arg) on a host thread. In a CUDA plan it becomes a host node, so fn
 * must not call CUDA. */
typedef void (*cg_host_fn_t)(void *arg);
CG_API cg_status_t cg_host_func(cg_node_t *out, cg_graph_t *graph, cg_host_fn_t fn, void *arg,
                                const cg_access_t *access);
/* Child graphs and event nodes take CUDA types: see commgraph/cuda.h. */

/* ---- edges and names */

/* `before` runs before `after`. Adding an edge that exists is a no-op;
 * CG_ERR_CYCLE if `after` already reaches `before`. */
CG_API cg_status_t cg_depend(cg_graph_t *graph, cg_node_t before, cg_node_t after);
/* Names a node for DOT output and error details; the text is copied (at most
 * 255 bytes). */
CG_API cg_status_t cg_node_name(cg_graph_t *graph, cg_node_t node, const char *name);

/* ---- inspection */

typedef struct cg_graph_stats {
  size_t nodes;
  size_t nodes_by_kind[CG_NODE_KIND_COUNT];
  size_t edges;          /* distinct (before, after) pairs */
  size_t explicit_edges; /* added with cg_depend */
  size_t raw_edges;      /* inferred read-after-write */
  size_t war_edges;      /* inferred write-after-read */
  size_t waw_edges;      /* inferred write-after-write */
  size_t fence_edges;    /* inferred from fences */
  size_t comm_order_edges; /* keep each communicator's collectives in record order */
  size_t bytes;          /* bytes this rank contributes, summed over collective nodes */
} cg_graph_stats_t;
/* An edge can be counted under several causes (explicit and raw, say), so the
 * cause counts may add up to more than `edges`. */
CG_API cg_status_t cg_graph_stats(cg_graph_stats_t *out, const cg_graph_t *graph);

/* Writes the recorded graph in Graphviz DOT: nodes labelled with kind, count,
 * dtype, reduction, root/peer and name. Explicit edges are solid black;
 * hazard edges dashed and labelled raw, war or waw; fence edges dotted and
 * labelled fence; edges that only keep a communicator's order thin and blue. */
CG_API cg_status_t cg_graph_write_dot(const cg_graph_t *graph, FILE *file);

#ifdef __cplusplus
}
#endif
#endif
