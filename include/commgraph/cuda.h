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
 * A plan whose communicators live on a CUDA device (NCCL, mpi-staged and
 * hosttransfer backends), or that holds child-graph and event nodes, is
 * lowered at compile time to one CUDA graph: each communicator's steps are
 * captured in its total order on a lane stream of its own, host functions on a
 * host lane, child graphs and events on compute lanes (a node continues the
 * lane of a node it depends on, independent ones get lanes of their own, so
 * compute overlaps the communication it does not depend on), and dependencies
 * between lanes become event edges. Each communicator is warmed up outside the
 * capture first (its kinds of collectives on a scratch buffer and a message to
 * and from every point-to-point peer), so no lazy connection set-up happens
 * inside it. The graph is instantiated once. A graph of child-graph and event
 * nodes only (no communicator) becomes a device plan on the current device.
 *
 * cg_plan_launch enqueues one replay on `stream`: it starts after the work
 * already on `stream` and work enqueued on `stream` later waits for it. It does
 * not block the host and costs one cudaGraphLaunch, whatever the node count.
 * Replays of one plan run one after another in launch order. Launching is
 * collective in the NCCL sense: every rank must launch its plan the same number
 * of times, in the same order relative to its other plans. The stream must
 * belong to the plan's device. CG_ERR_UNSUPPORTED for a host plan (use
 * cg_plan_run).
 *
 * When `stream` is being captured (cudaStreamBeginCapture, any mode, or a
 * stream joined to a capture through an event), cg_plan_launch adds the plan
 * to that capture instead, as one child graph node that depends on what was
 * captured on `stream` so far; work captured on `stream` afterwards depends on
 * it. The user's graph then replays the plan each time it is launched.
 * cg_plan_cuda_graph hands out the same graph for cudaGraphAddChildGraphNode.
 *
 * Every copy of the plan in a user's graph, every instance of such a graph,
 * and cg_plan_launch share the plan's communicators and internal buffers (bucket
 * staging, flags): their replays must not overlap. commgraph enforces that on
 * the GPU: once a plan has been embedded, each replay begins by taking a lock
 * word in device memory and ends by releasing it, so instances launched on
 * unordered streams run one after another instead of corrupting each other.
 * As with NCCL, every rank must run them in the same order: instances that
 * really run concurrently take the lock in an order the GPU picks, which may
 * differ between ranks (and then hang). Order them with one stream or with
 * events. With a timeout (cg_compile_opts_t.timeout_s), the replay watchdog
 * follows every replay of an embedded plan, wherever it was launched: the lock
 * kernels count replays in and out in mapped host memory, and the monitor
 * thread reports a replay in flight whose steps make no progress for the
 * timeout (that hang included) to stderr and the timeout handler, and aborts
 * the plan's communicators so the user's stream drains. Then stop replaying
 * the graphs that hold the plan and destroy their instances before it. */
CG_API cg_status_t cg_plan_launch(cg_plan_t *plan, cudaStream_t stream);

/* The plan as a CUDA graph, for cudaGraphAddChildGraphNode (which clones it)
 * or cudaGraphExecChildGraphNodeSetParams. The graph belongs to the plan: do
 * not change or destroy it; it stays valid until the plan is destroyed or
 * rebound (cg_plan_rebind makes a new one; update the user's instances with
 * cudaGraphExecChildGraphNodeSetParams). Includes the lock described above.
 * CG_ERR_UNSUPPORTED for a host plan. */
CG_API cg_status_t cg_plan_cuda_graph(cudaGraph_t *out, cg_plan_t *plan);

#ifdef __cplusplus
}
#endif
#endif
