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
#include <stddef.h>
#include <stdio.h>

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

/* ---- for callers in other languages (the Python package) that hold no
 * MPI_Comm: MPI started by the library, communicators as Fortran handles
 * (MPI_Fint, what mpi4py's comm.py2f() gives), and which MPI the library is
 * linked against. */

/* Initializes MPI for a program that does not do it itself: when MPI is not
 * initialized yet, MPI_Init_thread asking for MPI_THREAD_MULTIPLE, and the
 * library remembers that it did (cg_mpi_finalize). When MPI is already
 * initialized it starts nothing. *provided (may be NULL) gets the thread level
 * MPI provides (MPI_Query_thread) either way. Collective over MPI_COMM_WORLD
 * when it initializes. Fails with CG_ERR_INVALID_ARGUMENT once MPI is
 * finalized (MPI cannot start again), CG_ERR_BACKEND when MPI_Init_thread
 * fails. */
CG_API cg_status_t cg_mpi_init(int *provided);

/* MPI_Finalize, when cg_mpi_init initialized MPI and it is not finalized yet;
 * otherwise nothing (MPI started by the application is the application's to
 * finalize). Collective over MPI_COMM_WORLD when it finalizes: destroy the
 * communicators, graphs and plans over MPI first. CG_ERR_BACKEND when
 * MPI_Finalize fails. */
CG_API cg_status_t cg_mpi_finalize(void);

/* Call right before MPI_Finalize while plans may still have replays in
 * flight (launched or embedded, under a timeout): stops the MPI calls of
 * the library's own threads (the watchdog's monitor answers and calls roll
 * calls on the plans' communicators) and waits for the one in flight, so
 * that none runs while MPI finalizes. From then on those threads make no MPI
 * call (a timeout is still reported, without a roll call). cg_mpi_finalize
 * calls it, and so does the MPI_Finalize of libcommgraph_pmpi (MPI's
 * profiling interface: link it before the MPI library, or preload it) for
 * programs that cannot call it themselves. Always CG_SUCCESS. */
CG_API cg_status_t cg_mpi_before_finalize(void);

/* cg_comm_create on MPI_Comm_f2c(mpi): the same communicator, options and
 * errors, plus CG_ERR_INVALID_ARGUMENT when MPI is not initialized (or
 * finalized), checked before the handle is converted. */
CG_API cg_status_t cg_comm_create_fortran(cg_comm_t **out, MPI_Fint mpi, const cg_comm_opts_t *opts);

/* MPI_COMM_WORLD as a Fortran handle (MPI_Comm_c2f), for cg_comm_create_fortran
 * and cg_info_write_fortran. */
CG_API MPI_Fint cg_mpi_world_fortran(void);

/* The first line of MPI_Get_library_version, as MPI gives it (tabs and blanks
 * kept, no newline): which MPI the library is linked against, so a caller can
 * refuse an mpi4py built on another. Works before MPI_Init and after
 * MPI_Finalize. Fails with CG_ERR_INVALID_ARGUMENT for a NULL buf, or a size
 * too small for the line and its terminating NUL (the detail says how many
 * bytes it needs; buf gets "" when size > 0). */
CG_API cg_status_t cg_mpi_library_version(char *buf, size_t size);

/* What the cginfo tool prints (it calls this on MPI_COMM_WORLD): this build's
 * versions and backends, the MPI and its thread level (MPI_Query_thread), the
 * ranks of `comm` with their local rank, GPU, NUMA node and host, the CG_*
 * environment variables and the machine's topology. Collective over `comm`:
 * every rank passes a file, rank 0 of `comm` writes to it and the others write
 * nothing. With CG_TIMEOUT set, the ranks first meet in a barrier that waits
 * at most that long: a rank that never calls makes the others fail with
 * CG_ERR_TIMEOUT naming it (the barrier stays posted: end the job). Fails
 * with CG_ERR_INVALID_ARGUMENT for a NULL file, MPI_COMM_NULL,
 * an intercommunicator, or MPI not initialized (or finalized);
 * CG_ERR_NO_MEMORY on every rank when rank 0 cannot hold the ranks' lines;
 * CG_ERR_IO on rank 0 when writing fails; CG_ERR_BACKEND when MPI fails. */
CG_API cg_status_t cg_info_write(FILE *file, MPI_Comm comm);
/* cg_info_write on MPI_Comm_f2c(comm), MPI initialization checked first. */
CG_API cg_status_t cg_info_write_fortran(FILE *file, MPI_Fint comm);

#ifdef __cplusplus
}
#endif
#endif
