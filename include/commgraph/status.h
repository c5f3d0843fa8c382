/* Status codes and per-thread error detail.
 *
 * Every commgraph function that can fail returns a cg_status_t. The codes and
 * their texts come from one list, CG_STATUS_LIST, so they cannot drift apart.
 * After a failure, cg_error_last() gives a one-line detail for the calling
 * thread (which node, which rank, what was expected). */
#ifndef COMMGRAPH_STATUS_H
#define COMMGRAPH_STATUS_H

#include "commgraph/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, text) */
#define CG_STATUS_LIST(X)                                                              \
  X(CG_SUCCESS, 0, "success")                                                          \
  X(CG_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                    \
  X(CG_ERR_INVALID_ENUM, 2, "unknown enumeration value")                               \
  X(CG_ERR_INVALID_NODE, 3, "node handle does not belong to this graph")               \
  X(CG_ERR_OVERFLOW, 4, "count times element size overflows")                          \
  X(CG_ERR_OUT_OF_RANGE, 5, "root or peer rank out of range")                          \
  X(CG_ERR_ALIAS, 6, "buffers overlap in a way that is not a supported in-place form") \
  X(CG_ERR_CYCLE, 7, "edge would create a cycle")                                      \
  X(CG_ERR_NO_MEMORY, 8, "out of memory")                                              \
  X(CG_ERR_IO, 9, "write failed")                                                      \
  X(CG_ERR_UNSUPPORTED, 10, "not supported by this build or backend")                  \
  X(CG_ERR_INTERNAL, 11, "internal error")                                             \
  X(CG_ERR_MISMATCH, 12, "ranks recorded different operations on a communicator")      \
  X(CG_ERR_BACKEND, 13, "the communication library reported an error")                 \
  X(CG_ERR_IN_PROGRESS, 14, "the plan is running")                                     \
  X(CG_ERR_TIMEOUT, 15, "waited longer than the timeout: a replay, or for the other ranks in a collective call")

#define CG_STATUS_ENUMERATOR(name, value, text) name = value,
typedef enum cg_status { CG_STATUS_LIST(CG_STATUS_ENUMERATOR) } cg_status_t;
#undef CG_STATUS_ENUMERATOR

/* Static text for a status; "unknown status" for values outside the list. */
CG_API const char *cg_status_string(cg_status_t status);

/* One-line detail of the last failed call on the calling thread, or "" if none
 * failed yet. The text stays valid until the next failing call on this thread. */
CG_API const char *cg_error_last(void);

#ifdef __cplusplus
}
#endif
#endif
