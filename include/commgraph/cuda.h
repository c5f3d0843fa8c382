/* Nodes that take CUDA types. Available when the library was built with CUDA
 * (CG_HAVE_CUDA == 1); include this header explicitly. */
#ifndef COMMGRAPH_CUDA_H
#define COMMGRAPH_CUDA_H

#include <cuda_runtime_api.h>

#include "commgraph/graph.h"

#if !CG_HAVE_CUDA
#error "this commgraph was built without CUDA: commgraph/cuda.h is not available"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Embeds a user CUDA graph. The graph is cloned at record time, as
 * cudaGraphAddChildGraphNode does, so the caller may destroy or change its copy. */
CG_API cg_status_t cg_child_graph(cg_node_t *out, cg_graph_t *graph, cudaGraph_t child,
                                  const cg_access_t *access);
/* Waits for `event`, recorded by work outside the plan. The event must outlive
 * the graph and every plan compiled from it. */
CG_API cg_status_t cg_event_wait(cg_node_t *out, cg_graph_t *graph, cudaEvent_t event,
                                 const cg_access_t *access);
/* Records `event` once the work ordered before this node is done. */
CG_API cg_status_t cg_event_record(cg_node_t *out, cg_graph_t *graph, cudaEvent_t event,
                                   const cg_access_t *access);

#ifdef __cplusplus
}
#endif
#endif
