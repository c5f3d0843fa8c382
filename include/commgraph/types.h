/* Data types, reductions, node kinds and node handles. */
#ifndef COMMGRAPH_TYPES_H
#define COMMGRAPH_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "commgraph/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, bytes, text): NCCL's set of element types. */
#define CG_DTYPE_LIST(X)          \
  X(CG_INT8, 1, "int8")           \
  X(CG_UINT8, 1, "uint8")         \
  X(CG_INT32, 4, "int32")         \
  X(CG_UINT32, 4, "uint32")       \
  X(CG_INT64, 8, "int64")         \
  X(CG_UINT64, 8, "uint64")       \
  X(CG_FLOAT16, 2, "float16")     \
  X(CG_BFLOAT16, 2, "bfloat16")   \
  X(CG_FLOAT32, 4, "float32")     \
  X(CG_FLOAT64, 8, "float64")

#define CG_DTYPE_ENUMERATOR(name, bytes, text) name,
typedef enum cg_dtype { CG_DTYPE_LIST(CG_DTYPE_ENUMERATOR) CG_DTYPE_COUNT } cg_dtype_t;
#undef CG_DTYPE_ENUMERATOR

/* X(name, text) */
#define CG_REDOP_LIST(X) \
  X(CG_SUM, "sum")       \
  X(CG_PROD, "prod")     \
  X(CG_MIN, "min")       \
  X(CG_MAX, "max")       \
  X(CG_AVG, "avg")

#define CG_REDOP_ENUMERATOR(name, text) name,
typedef enum cg_redop { CG_REDOP_LIST(CG_REDOP_ENUMERATOR) CG_REDOP_COUNT } cg_redop_t;
#undef CG_REDOP_ENUMERATOR

/* X(name, text) */
#define CG_NODE_KIND_LIST(X)                    \
  X(CG_NODE_ALLREDUCE, "allreduce")             \
  X(CG_NODE_BROADCAST, "broadcast")             \
  X(CG_NODE_REDUCE, "reduce")                   \
  X(CG_NODE_ALLGATHER, "allgather")             \
  X(CG_NODE_REDUCE_SCATTER, "reduce_scatter")   \
  X(CG_NODE_ALLTOALL, "alltoall")               \
  X(CG_NODE_GATHER, "gather")                   \
  X(CG_NODE_SCATTER, "scatter")                 \
  X(CG_NODE_SEND, "send")                       \
  X(CG_NODE_RECV, "recv")                       \
  X(CG_NODE_BARRIER, "barrier")                 \
  X(CG_NODE_HOST_FUNC, "host_func")             \
  X(CG_NODE_CHILD_GRAPH, "child_graph")         \
  X(CG_NODE_EVENT_WAIT, "event_wait")           \
  X(CG_NODE_EVENT_RECORD, "event_record")

#define CG_NODE_KIND_ENUMERATOR(name, text) name,
typedef enum cg_node_kind { CG_NODE_KIND_LIST(CG_NODE_KIND_ENUMERATOR) CG_NODE_KIND_COUNT } cg_node_kind_t;
#undef CG_NODE_KIND_ENUMERATOR

/* Size of one element in bytes; 0 for an unknown type. */
CG_API size_t cg_dtype_size(cg_dtype_t dtype);
/* Static names ("float32", "sum", "allreduce"); "unknown" outside the lists. */
CG_API const char *cg_dtype_name(cg_dtype_t dtype);
CG_API const char *cg_redop_name(cg_redop_t op);
CG_API const char *cg_node_kind_name(cg_node_kind_t kind);

/* A recorded node. Plain value; valid for the graph that returned it and only
 * while that graph lives. A handle from another graph is rejected with
 * CG_ERR_INVALID_NODE. */
typedef struct cg_node {
  uint64_t graph; /* serial of the graph that recorded it; 0 is never a graph */
  uint32_t index; /* record order, from 0 */
} cg_node_t;

#define CG_NODE_NULL {0, 0}

/* A byte range in memory, host or device. */
typedef struct cg_range {
  const void *ptr;
  size_t bytes;
} cg_range_t;

#ifdef __cplusplus
}
#endif
#endif
