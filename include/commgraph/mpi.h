/* Communicators over MPI.
 *
 * cg_comm_create duplicates the given MPI_Comm (twice: one duplicate for the
 * plans' steps, one for control traffic), so commgraph's traffic never
 * matches the application's own messages, and sets MPI_ERRORS_RETURN on the
 * duplicates so a failing call becomes CG_ERR_BACKEND with MPI's error text
 * instead of aborting. A receive shorter than the message sent to it (MPI's
 * truncation) is found before MPI sees it and fails its step with
 * CG_ERR_BACKEND naming node and rank. Errors that MPI raises while
 * completing a request go to MPI_COMM_WORLD's handler in MPICH, whatever the
 * duplicate's: they still end the job unless the application sets
 * MPI_ERRORS_RETURN on MPI_COMM_WORLD (docs/host.md#mpi-errors). Creation is
 * collective over the MPI_Comm; destruction
 * (when the last graph and plan using the communicator are gone) frees the
 * duplicates and is collective as well, unless MPI is already finalized.
 *
 * Threads. Host plans run on the thread that calls cg_plan_run / start / test /
 * wait. Under MPI_THREAD_FUNNELED that must be the main thread; under
 * MPI_THREAD_SERIALIZED any one thread at a time; plans on different
 * communicators driven concurrently from several threads need
 * MPI_THREAD_MULTIPLE. cg_plan_start checks the FUNNELED case (a plan started
 * off the main thread fails with CG_ERR_UNSUPPORTED naming the level MPI
 * provides); the others cannot be checked from inside the library. Two plans
 * that share a communicator must not be in flight at the same time: nothing
 * orders one plan's steps against the other's, so ranks could post them in
 * different orders. Device buffers over MPI (mpi-staged and hosttransfer: a
 * progress thread and host nodes call MPI) always need MPI_THREAD_MULTIPLE. */
#ifndef COMMGRAPH_MPI_H
#define COMMGRAPH_MPI_H

#include "commgraph/config.h"
#if !CG_HAVE_MPI
#error "commgraph was built without MPI (CG_WITH_MPI=OFF or MPI not found)"
#endif

#include <mpi.h>

#include "commgraph/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator over the ranks of `mpi`. opts may be NULL for defaults (MPI
 * backend, host buffers). opts.device = a CUDA ordinal (or
 * CG_DEVICE_LOCAL_RANK) with backend AUTO or NCCL gives an NCCL communicator
 * on that device (commgraph/nccl.h); with backend MPI, the MPI backend on that
 * device ("mpi-staged"): each step copies device buffers into pinned host
 * staging memory, posts MPI from a host node and copies back, inside the
 * plan's CUDA graph, messages above opts.chunk_bytes pipelined in chunks;
 * with backend HOSTTRANSFER the same, MPI posted by a progress thread instead
 * of a host node; opts.staging DIRECT hands device pointers to a CUDA-aware
 * MPI instead of staging (docs/staged.md). Collective over `mpi`. Fails with
 * CG_ERR_INVALID_ARGUMENT for MPI_COMM_NULL or MPI not initialized,
 * CG_ERR_INVALID_ENUM for an unknown backend, CG_ERR_UNSUPPORTED for a backend
 * or device this build cannot use (the detail says which and why).
 *
 * With a timeout (opts.timeout_s, or CG_TIMEOUT), the ranks first meet in a
 * barrier on `mpi` that waits at most that long: a rank that never calls
 * cg_comm_create, or finalized MPI, makes the others fail with CG_ERR_TIMEOUT
 * naming it (the ranks that did not answer a roll call sent to every rank)
 * and what the others wait in, also on stderr. The barrier stays posted on
 * `mpi`, which MPI cannot take back: end the job (MPI_Abort). The roll call
 * uses tags 32701 and 32702 on `mpi`, after a timeout only. */
CG_API cg_status_t cg_comm_create(cg_comm_t **out, MPI_Comm mpi, const cg_comm_opts_t *opts);

/* The communicator's own MPI_Comm (the duplicate; do not free it; for an NCCL
 * communicator, the duplicate of the MPI_Comm it was created from). Fails with
 * CG_ERR_UNSUPPORTED for a communicator without one (offline). */
CG_API cg_status_t cg_comm_mpi(MPI_Comm *out, const cg_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif
