/* Functions that take CUDA types: nodes holding CUDA objects, and launching
 * device plans. Available when the library was built with CUDA
 * (CG_HAVE_CUDA == 1); include this header explicitly. */
#ifndef COMMGRAPH_CUDA_H
#define COMMGRAPH_CUDA_H

#include <cuda_runtime_api.h>

#include "commgraph/graph.h"
#include "commgraph/plan.h"

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

/* ---- device plans
 *
 * A plan whose communicators live on a CUDA device (NCCL backend) is lowered
 * at compile time to one CUDA graph: each communicator's steps are captured in
 * its total order on a lane stream of its own, host functions on a host lane,
 * and dependencies between lanes become event edges. Each communicator is
 * warmed up outside the capture first (its kinds of collectives on a scratch
 * buffer and a message to and from every point-to-point peer), so no lazy
 * connection set-up happens inside it. The graph is instantiated once.
 *
 * cg_plan_launch enqueues one replay on `stream`: it starts after the work
 * already on `stream` and work enqueued on `stream` later waits for it. It does
 * not block the host and costs one cudaGraphLaunch, whatever the node count.
 * Replays of one plan run one after another in launch order. Launching is
 * collective in the NCCL sense: every rank must launch its plan the same number
 * of times. The stream must belong to the plan's device; a stream that is
 * being captured is refused (CG_ERR_UNSUPPORTED) in this version.
 * CG_ERR_UNSUPPORTED for a host plan (use cg_plan_run). */
CG_API cg_status_t cg_plan_launch(cg_plan_t *plan, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
