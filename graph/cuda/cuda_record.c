/* Recording the nodes that take CUDA types: child graphs and events. The graph
 * layer stores them as opaque objects; this file is the only one that knows
 * what they are. */
#include <cuda_runtime_api.h>

#include "commgraph/cuda.h"
#include "cuda_check.h"
#include "error.h"
#include "graph_internal.h"

static void destroy_cloned_graph(void *object) { cudaGraphDestroy((cudaGraph_t)object); }

cg_status_t cg_child_graph(cg_node_t *out, cg_graph_t *g, cudaGraph_t child, const cg_access_t *access) {
  if (!g) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_child_graph: NULL graph");
  if (!child) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_child_graph: node #%u: NULL child graph", g->n_nodes);
  cudaGraph_t clone = NULL;
  cudaError_t err = cudaGraphClone(&clone, child);
  if (err != cudaSuccess) /* the user's graph is what CUDA rejects */
    return cg_fail_cuda_as(CG_ERR_INVALID_ARGUMENT, err, "cudaGraphClone", "cg_child_graph: node #%u", g->n_nodes);
  cg_node_rec_t proto = {.kind = CG_NODE_CHILD_GRAPH,
                         .dtype = CG_UINT8,
                         .user_object = clone,
                         .release_user_object = destroy_cloned_graph};
  cg_status_t st = cg_graph_record_user_node(out, g, &proto, access, "cg_child_graph");
  if (st != CG_SUCCESS) cudaGraphDestroy(clone);
  return st;
}

static cg_status_t record_event(cg_node_t *out, cg_graph_t *g, cudaEvent_t event, const cg_access_t *access,
                                cg_node_kind_t kind, const char *caller) {
  if (!g) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: NULL graph", caller);
  if (!event) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: node #%u: NULL event", caller, g->n_nodes);
  cg_node_rec_t proto = {.kind = kind, .dtype = CG_UINT8, .user_object = event};
  return cg_graph_record_user_node(out, g, &proto, access, caller);
}

cg_status_t cg_event_wait(cg_node_t *out, cg_graph_t *g, cudaEvent_t event, const cg_access_t *access) {
  return record_event(out, g, event, access, CG_NODE_EVENT_WAIT, "cg_event_wait");
}

cg_status_t cg_event_record(cg_node_t *out, cg_graph_t *g, cudaEvent_t event, const cg_access_t *access) {
  return record_event(out, g, event, access, CG_NODE_EVENT_RECORD, "cg_event_record");
}
