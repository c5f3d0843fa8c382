/* The one place that turns an MPI error code into the library's error detail
 * (as nccl_check does for NCCL and core/cuda/cuda_check for CUDA): the
 * caller's context, the MPI call, MPI's text for the code and the name of its
 * error class. Every MPI error is CG_ERR_BACKEND.
 *
 * The library's own communicators (the duplicates cg_mpi_comm_open makes, the
 * short-lived node communicators of a split) get MPI_ERRORS_RETURN, so MPI
 * returns their errors instead of aborting. MPICH (4.0.x) raises errors of
 * request completion (MPI_Test, MPI_Wait and their variants) on
 * MPI_COMM_WORLD's handler, not on the request's communicator: only where the
 * application gave MPI_COMM_WORLD MPI_ERRORS_RETURN does such an error come
 * back here. The MPI backend therefore receives through a matched probe
 * (mpi_steps.c), so that a message longer than its receive is reported by the
 * library, never by MPI_Test. */
#ifndef CG_BACKENDS_MPI_CHECK_H
#define CG_BACKENDS_MPI_CHECK_H

#include <mpi.h>

#include "error.h"

/* cg_fail(CG_ERR_BACKEND) with "<context>: <call>: <MPI's text> (<class>)",
 * the context formatted from `fmt` ("" for none: the detail starts with the
 * call). MPI's text is trimmed to its first line (MPICH appends an error stack). */
cg_status_t cg_fail_mpi(int mpi_error, const char *call, const char *fmt, ...) CG_PRINTF_LIKE(3, 4);

/* CG_ERR_BACKEND with "<call>: <MPI's text> (<class>)". */
cg_status_t cg_mpi_fail(int mpi_error, const char *call);

/* The name of an MPI error class ("MPI_ERR_TRUNCATE"), or "MPI error class
 * <n>" in `buf` for one this file does not name. */
const char *cg_mpi_error_class_name(int error_class, char *buf, size_t size);

/* The error a completion call reports for one request: `returned` itself,
 * except MPI_ERR_IN_STATUS (the *all / *some variants), which means the
 * request's own error is in status->MPI_ERROR. */
int cg_mpi_request_error(int returned, const MPI_Status *status);

/* Sets MPI_ERRORS_RETURN on a communicator the library made (never on the
 * application's); MPI_COMM_NULL is fine. */
cg_status_t cg_mpi_errors_return(MPI_Comm comm, const char *where);

#endif
