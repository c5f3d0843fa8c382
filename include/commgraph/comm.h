/* Communicators: the ranks a collective runs over, with a backend.
 *
 * Real communicators come from cg_comm_create (commgraph/mpi.h), which takes an
 * MPI_Comm and a cg_comm_opts_t, and from cg_comm_from_nccl (commgraph/nccl.h),
 * which wraps an NCCL communicator. An offline communicator only knows its rank
 * and size: it lets a program record, validate, compile and draw a graph as one
 * rank of a job without any transport; its plans cannot run. */
#ifndef COMMGRAPH_COMM_H
#define COMMGRAPH_COMM_H

#include <stddef.h>

#include "commgraph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_comm cg_comm_t;

/* X(name, text): the backends a communicator can use. */
#define CG_BACKEND_LIST(X)                 \
  X(CG_BACKEND_AUTO, "auto")               \
  X(CG_BACKEND_MPI, "mpi")                 \
  X(CG_BACKEND_NCCL, "nccl")               \
  X(CG_BACKEND_HOSTTRANSFER, "hosttransfer")

#define CG_BACKEND_ENUMERATOR(name, text) name,
typedef enum cg_backend_kind { CG_BACKEND_LIST(CG_BACKEND_ENUMERATOR) CG_BACKEND_COUNT } cg_backend_kind_t;
#undef CG_BACKEND_ENUMERATOR

/* Static name ("mpi"); "unknown" outside the list. */
CG_API const char *cg_backend_kind_name(cg_backend_kind_t kind);

/* Where a communicator's buffers live: host memory, or the CUDA device with this
 * ordinal. */
#define CG_DEVICE_HOST (-1)
/* The GPU of this rank's local rank among the ranks on its node (local rank
 * modulo the GPUs it sees), unless the environment variable CG_DEVICE names
 * one. cg_comm_create resolves it collectively: pass it on every rank or on
 * none. */
#define CG_DEVICE_LOCAL_RANK (-2)

/* X(name, text): how an MPI communicator on a device moves device buffers.
 * HOST: through pinned host staging buffers (a device-to-host copy, MPI on the
 * copy, a host-to-device copy, all inside the plan's CUDA graph); works with
 * any MPI. DIRECT: device pointers handed to a CUDA-aware MPI (steps MPI
 * cannot run on device memory, such as float16 reductions, stay staged; on an
 * MPI that says it is not CUDA-aware only managed and host memory is handed
 * over). AUTO: DIRECT where the MPI says it is CUDA-aware (CG_MPI_CUDA_AWARE=1
 * or 0 overrides its answer), else HOST. docs/staged.md has the details. */
#define CG_STAGING_LIST(X)        \
  X(CG_STAGING_AUTO, "auto")      \
  X(CG_STAGING_HOST, "host")      \
  X(CG_STAGING_DIRECT, "direct")
#define CG_STAGING_ENUMERATOR(name, text) name,
typedef enum cg_staging { CG_STAGING_LIST(CG_STAGING_ENUMERATOR) CG_STAGING_COUNT } cg_staging_t;
#undef CG_STAGING_ENUMERATOR

/* chunk_bytes: CG_CHUNK_DEFAULT takes the environment variable CG_CHUNK_BYTES
 * ("4M", "65536"), else 4 MiB; CG_CHUNK_NONE never cuts a message. */
#define CG_CHUNK_DEFAULT ((size_t)0)
#define CG_CHUNK_NONE ((size_t)-1)

typedef struct cg_comm_opts {
  size_t size;               /* sizeof(cg_comm_opts_t) */
  cg_backend_kind_t backend; /* AUTO: mpi for host buffers, nccl for a device (mpi-staged without NCCL);
                                HOSTTRANSFER: device buffers over MPI with a progress thread */
  int device;                /* CG_DEVICE_HOST, CG_DEVICE_LOCAL_RANK or a CUDA device ordinal */
  /* MPI on a device only: */
  cg_staging_t staging;      /* AUTO */
  size_t chunk_bytes;        /* messages above this are cut into chunks whose copies overlap MPI's transfer of
                                the chunk before; CG_CHUNK_DEFAULT */
  double timeout_s;          /* how long to wait for the other ranks to call cg_comm_create too; then
                                CG_ERR_TIMEOUT naming the ranks that did not come (see below). 0 (default):
                                CG_TIMEOUT from the environment, else for ever; negative: for ever. The same
                                bounds the collective set-ups on the communicator outside plans
                                (cg_nccl_arena_create) */
} cg_comm_opts_t;
#define CG_COMM_OPTS_INIT                                                                                     \
  {sizeof(cg_comm_opts_t), CG_BACKEND_AUTO, CG_DEVICE_HOST, CG_STAGING_AUTO, CG_CHUNK_DEFAULT, 0.0}

/* A communicator of `size` ranks seen from `rank`, with no transport.
 * CG_ERR_INVALID_ARGUMENT for size < 1, CG_ERR_OUT_OF_RANGE for rank outside
 * [0, size). */
CG_API cg_status_t cg_comm_create_offline(cg_comm_t **out, int rank, int size);

/* Releases the caller's reference. Graphs that recorded nodes on the
 * communicator keep it alive until they are destroyed. NULL is fine. */
CG_API void cg_comm_destroy(cg_comm_t *comm);

CG_API cg_status_t cg_comm_rank(int *out, const cg_comm_t *comm);
CG_API cg_status_t cg_comm_size(int *out, const cg_comm_t *comm);
/* Backend name: "mpi", "nccl", "mpi-staged", "hosttransfer", or "offline" for
 * cg_comm_create_offline. Static text. */
CG_API cg_status_t cg_comm_backend_name(const char **out, const cg_comm_t *comm);
/* CG_DEVICE_HOST or the CUDA device ordinal the communicator's buffers live on. */
CG_API cg_status_t cg_comm_device(int *out, const cg_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif
