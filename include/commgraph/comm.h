/* Communicators: the ranks a collective runs over, with a backend.
 *
 * Real communicators (MPI, NCCL) come from backend-specific constructors. An
 * offline communicator only knows its rank and size: it lets a program record,
 * validate and draw a graph as one rank of a job without any transport. */
#ifndef COMMGRAPH_COMM_H
#define COMMGRAPH_COMM_H

#include "commgraph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_comm cg_comm_t;

/* A communicator of `size` ranks seen from `rank`, with no transport.
 * CG_ERR_INVALID_ARGUMENT for size < 1, CG_ERR_OUT_OF_RANGE for rank outside
 * [0, size). */
CG_API cg_status_t cg_comm_create_offline(cg_comm_t **out, int rank, int size);

/* Releases the caller's reference. Graphs that recorded nodes on the
 * communicator keep it alive until they are destroyed. NULL is fine. */
CG_API void cg_comm_destroy(cg_comm_t *comm);

CG_API cg_status_t cg_comm_rank(int *out, const cg_comm_t *comm);
CG_API cg_status_t cg_comm_size(int *out, const cg_comm_t *comm);
/* Backend name: "offline" for cg_comm_create_offline. Static text. */
CG_API cg_status_t cg_comm_backend_name(const char **out, const cg_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif
