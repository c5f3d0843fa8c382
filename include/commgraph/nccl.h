/* Communicators over NCCL.
 *
 * cg_comm_create (commgraph/mpi.h) with opts.backend = CG_BACKEND_NCCL (or
 * CG_BACKEND_AUTO) and opts.device = a CUDA device ordinal creates an NCCL
 * communicator over the ranks of the MPI_Comm: rank 0 makes the unique id and
 * broadcasts it over MPI. The MPI_Comm is duplicated as well; commgraph uses
 * the duplicate for control traffic (the cross-rank check at compile time),
 * never for data. One GPU per process: every rank names its own device.
 *
 * cg_comm_from_nccl wraps an NCCL communicator the application already owns.
 * `mpi` must hold the same ranks in the same order (NCCL rank r is MPI rank r);
 * the call checks that on every rank and fails on all of them alike. commgraph
 * never destroys a wrapped communicator: keep it alive until every graph and
 * plan that uses the wrapper is destroyed. Both calls are collective over
 * `mpi`. */
#ifndef COMMGRAPH_NCCL_H
#define COMMGRAPH_NCCL_H

#include "commgraph/config.h"
#if !CG_HAVE_NCCL || !CG_HAVE_MPI
#error "this commgraph was built without NCCL or without MPI: commgraph/nccl.h is not available"
#endif

#include <mpi.h>
#include <nccl.h>

#include "commgraph/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wraps `nccl`. CG_ERR_INVALID_ARGUMENT for NULL, MPI_COMM_NULL or ranks that
 * differ from the MPI_Comm's; CG_ERR_BACKEND when NCCL reports an error (the
 * communicator is then unusable, for instance after an abort). */
CG_API cg_status_t cg_comm_from_nccl(cg_comm_t **out, ncclComm_t nccl, MPI_Comm mpi);

/* The NCCL communicator behind a communicator of the NCCL backend (owned by
 * commgraph unless it was wrapped; do not destroy it). CG_ERR_UNSUPPORTED for
 * other backends. */
CG_API cg_status_t cg_comm_nccl(ncclComm_t *out, const cg_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif
