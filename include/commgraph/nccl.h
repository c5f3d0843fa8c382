/* Communicators over NCCL.
 *
 * cg_comm_create (commgraph/mpi.h) with opts.backend = CG_BACKEND_NCCL (or
 * CG_BACKEND_AUTO) and opts.device = a CUDA device ordinal creates NCCL
 * communicators over the ranks of the MPI_Comm: rank 0 makes the unique ids
 * and broadcasts them over MPI. The MPI_Comm is duplicated as well; commgraph
 * uses the duplicate for control traffic (the cross-rank check at compile
 * time), never for data. One GPU per process: every rank names its own device.
 *
 * Two NCCL communicators over the same ranks, made at the same time:
 *  - the plan's own, non-blocking (config.blocking = 0). Plans warm up,
 *    capture and, when a replay times out, abort on it; a non-blocking
 *    communicator's abort never waits behind a call. Programs never see it.
 *  - the program's, blocking, as ncclCommInitRank makes it: cg_comm_nccl
 *    returns it. Eager and captured NCCL calls on it return ncclSuccess as on
 *    any blocking communicator; commgraph makes no call on it besides
 *    creating and destroying it. Order its operations against plan replays
 *    as for any two NCCL communicators on one GPU: the same order on every
 *    rank, for instance on one stream.
 * NCCL_COMM_BLOCKING (NCCL's variable) overrides config.blocking of every
 * communicator, both ways: with 0 the program's communicator is non-blocking
 * too (a call may return ncclInProgress; poll ncclCommGetAsyncError, as NCCL
 * documents); with 1 the plan's is blocking (its abort then runs to its end
 * on the abort thread, which is no slower for the program: see below).
 * commgraph settles every NCCL call of its own under any setting.
 *
 * After a replay timed out, cg_comm_destroy does not wait for NCCL: it frees
 * the MPI duplicates at once and leaves the NCCL teardown (a good part of a
 * second per communicator on H100) to the thread that runs the abort.
 *
 * cg_comm_from_nccl wraps an NCCL communicator the application already owns,
 * blocking or not, as the application made it; plans use it directly.
 * `mpi` must hold the same ranks in the same order (NCCL rank r is MPI rank r);
 * the call checks that on every rank and fails on all of them alike. commgraph
 * never destroys a wrapped communicator: keep it alive until every graph and
 * plan that uses the wrapper is destroyed. A replay that times out aborts it,
 * since the device would otherwise wait on it forever; ncclCommAbort frees
 * it, so the program must neither use nor destroy it afterwards. Both calls
 * are collective over `mpi`. */
#ifndef COMMGRAPH_NCCL_H
#define COMMGRAPH_NCCL_H

#include "commgraph/config.h"
#if !CG_HAVE_NCCL || !CG_HAVE_MPI
#error "this commgraph was built without NCCL or without MPI: commgraph/nccl.h is not available"
#endif

#include <mpi.h>
#include <nccl.h>

#include "commgraph/arena.h"
#include "commgraph/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wraps `nccl`. CG_ERR_INVALID_ARGUMENT for NULL, MPI_COMM_NULL or ranks that
 * differ from the MPI_Comm's; CG_ERR_BACKEND when NCCL reports an error (the
 * communicator is then unusable, for instance after an abort). Collective
 * over `mpi`: with CG_TIMEOUT in the environment it waits that long at most
 * for the other ranks to call it too, then CG_ERR_TIMEOUT naming the ranks
 * that did not come (a barrier stays posted on `mpi`: end the job), and the
 * same timeout bounds the set-ups on the communicator (cg_nccl_arena_create);
 * without it, it waits for ever. The bound holds for a non-blocking NCCL
 * communicator (ncclConfig_t.blocking = 0): on a blocking one a collective
 * NCCL call of a set-up (the arena's window registration) waits inside NCCL
 * for a rank that stopped. */
CG_API cg_status_t cg_comm_from_nccl(cg_comm_t **out, ncclComm_t nccl, MPI_Comm mpi);

/* The program's NCCL communicator of a communicator of the NCCL backend: the
 * blocking one cg_comm_create made (owned by commgraph; do not destroy it), or
 * the wrapped one. CG_ERR_UNSUPPORTED for other backends; CG_ERR_TIMEOUT (or
 * CG_ERR_MISMATCH) when a replay timed out (or its ranks ran different
 * sequences) and the communicator was aborted before this call first handed
 * it out. A timeout leaves a communicator already handed out as it
 * is: its peers may be gone; cg_comm_destroy then aborts it instead of
 * finalizing it. */
CG_API cg_status_t cg_comm_nccl(ncclComm_t *out, const cg_comm_t *comm);

/* A device arena (commgraph/arena.h) in NCCL symmetric memory: `capacity`
 * bytes from ncclMemAlloc on the communicator's device, registered as a
 * symmetric window (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC) on the
 * NCCL communicator its plans use. A collective of a plan on `comm` whose
 * buffers lie in the arena then runs NCCL's symmetric kernels where NCCL has
 * them (NCCL 2.27 and later, ranks of one node with peer access: allreduce
 * and reduce_scatter with sum of floating-point types of 32 bits and less,
 * allgather of any type; NCCL picks); everything else runs as on any device
 * memory. NCCL's symmetric kernels win for small messages and lose above
 * some size: an allreduce of float32, float16 or bfloat16 in the arena larger
 * than the arena's cut-over (cg_nccl_arena_symmetric_max) takes NCCL's plain
 * kernels instead, on the same memory through a second mapping of it that
 * NCCL has no window for (no copy). The cut-over is measured when the arena
 * is made (captured allreduces of 1 KB, 2 KB, ... up to the capacity or 8 MB
 * on both paths, the slowest rank's times; the size before the first at
 * which the symmetric kernels lose twice in a row; some 0.1 s), unless
 * CG_SYMMETRIC_MAX_BYTES gives it (docs/architecture.md). A failure while
 * measuring fails every rank and aborts the communicator. With an NCCL older
 * than 2.27 the arena is plain device memory (cg_arena_create). Every rank passes the same capacity (checked:
 * CG_ERR_INVALID_ARGUMENT on every rank otherwise), and, since NCCL's
 * symmetric kernels need every rank's buffers at the same offsets, allocates
 * the same pieces in the same order. opts may be NULL; opts->device must be
 * CG_DEVICE_HOST (the communicator's device) or the communicator's device.
 * Collective over the communicator's ranks, in the same order as the other
 * collective calls on it (cg_compile); destroy it in the same order on every
 * rank too, after the plans over it. The arena keeps the communicator alive
 * until it is destroyed (destroy it before MPI_Finalize); a wrapped one
 * (cg_comm_from_nccl) is the program's: keep that NCCL communicator alive
 * until the arena is gone. A failure on one rank fails every rank; a failed
 * registration aborts the communicator. On a communicator made by
 * cg_comm_create with a timeout (opts.timeout_s or CG_TIMEOUT), the whole
 * set-up (agreements, registration, measured cut-over) waits for the other
 * ranks at most that long in all: then CG_ERR_TIMEOUT naming the
 * ranks that did not answer a roll call (a rank that never calls this), the
 * communicator aborted; on a wrapped one (cg_comm_from_nccl), CG_TIMEOUT as
 * it was when the communicator was wrapped, and the program's NCCL
 * communicator is aborted then (no timeout: it waits for ever).
 * CG_ERR_UNSUPPORTED for a
 * communicator of another backend, CG_ERR_OVERFLOW (on every rank) for a
 * capacity too large to pad. */
CG_API cg_status_t cg_nccl_arena_create(cg_arena_t **out, cg_comm_t *comm, size_t capacity,
                                        const cg_arena_opts_t *opts);

/* The largest allreduce (bytes per rank) of `dtype` in `arena` that takes
 * NCCL's symmetric kernels; larger ones take the plain kernels. 0: none does
 * (they lost at 1 KB and 2 KB); SIZE_MAX: every size does (they never lost
 * at two measured sizes in a row, CG_SYMMETRIC_MAX_BYTES=never, ranks without
 * peer links, a driver that cannot map the memory twice), and for dtypes
 * other than float32, float16 and bfloat16, which NCCL routes itself. The same on every rank. CG_ERR_UNSUPPORTED for an arena that is not
 * in symmetric memory (another arena, or an NCCL older than 2.27). */
CG_API cg_status_t cg_nccl_arena_symmetric_max(size_t *out_bytes, const cg_arena_t *arena, cg_dtype_t dtype);

#ifdef __cplusplus
}
#endif
#endif
