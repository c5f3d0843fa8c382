/* cg_comm_create: checks the options and MPI's state, then hands over to the
 * backend that runs them (MPI for host buffers; NCCL, staged MPI or
 * hosttransfer for a device). */
#include <math.h>
#include <stdio.h>

#include "commgraph/mpi.h"
#include "error.h"
#include "param.h"
#include "mpi/mpi_backend.h"
#include "node/topology.h"
#if CG_HAVE_NCCL
#include "nccl/nccl_backend.h"
#endif
#if CG_HAVE_CUDA
#include "staged/staged_backend.h"
#endif

/* Refuses what this build cannot do, before any collective call, so every rank
 * fails alike (given the same options). */
static cg_status_t resolve_backend(cg_backend_kind_t *out, const cg_comm_opts_t *o) {
  if (o->backend < 0 || o->backend >= CG_BACKEND_COUNT)
    return cg_fail(CG_ERR_INVALID_ENUM, "cg_comm_create: opts.backend %d is not a cg_backend_kind_t", (int)o->backend);
  if (o->device < CG_DEVICE_LOCAL_RANK)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create: opts.device %d: use CG_DEVICE_HOST (-1), "
                   "CG_DEVICE_LOCAL_RANK (-2) or a CUDA device ordinal", o->device);
  if (isnan(o->timeout_s))
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create: opts.timeout_s is NaN: give seconds, 0 (CG_TIMEOUT) "
                   "or a negative value (none)");
  cg_backend_kind_t backend = o->backend;
  if (o->staging < 0 || o->staging >= CG_STAGING_COUNT)
    return cg_fail(CG_ERR_INVALID_ENUM, "cg_comm_create: opts.staging %d is not a cg_staging_t", (int)o->staging);
  if (backend == CG_BACKEND_AUTO)
    backend = o->device == CG_DEVICE_HOST || !CG_HAVE_NCCL ? CG_BACKEND_MPI : CG_BACKEND_NCCL;
  if (backend == CG_BACKEND_MPI && o->device != CG_DEVICE_HOST && !CG_HAVE_CUDA)
    return cg_fail(CG_ERR_UNSUPPORTED, "cg_comm_create: device %d: this commgraph was built without CUDA "
                   "(CG_WITH_CUDA)", o->device);
  if (backend == CG_BACKEND_NCCL && o->device == CG_DEVICE_HOST)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create: the nccl backend needs a CUDA device (opts.device)");
  if (backend == CG_BACKEND_NCCL && !CG_HAVE_NCCL)
    return cg_fail(CG_ERR_UNSUPPORTED, "cg_comm_create: this commgraph was built without NCCL (CG_WITH_NCCL)");
  if (backend == CG_BACKEND_HOSTTRANSFER && o->device == CG_DEVICE_HOST)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create: the hosttransfer backend needs a CUDA device "
                   "(opts.device); host buffers use the mpi backend");
  if (backend == CG_BACKEND_HOSTTRANSFER && !CG_HAVE_CUDA)
    return cg_fail(CG_ERR_UNSUPPORTED, "cg_comm_create: device %d: the hosttransfer backend needs CUDA, which this "
                   "commgraph was built without (CG_WITH_CUDA)", o->device);
  *out = backend;
  return CG_SUCCESS;
}

cg_status_t cg_comm_create(cg_comm_t **out, MPI_Comm mpi, const cg_comm_opts_t *opts) {
  static const cg_comm_opts_t defaults = CG_COMM_OPTS_INIT;
  cg_status_t st = CG_SUCCESS;
  int initialized = 0, finalized = 0, level = MPI_THREAD_SINGLE;
  cg_backend_kind_t backend = CG_BACKEND_MPI;
  if (!out) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create: NULL out");
  if (!opts) opts = &defaults;
  if ((st = cg_check_opts_size(opts->size, sizeof(cg_comm_opts_t), "cg_comm_create", "opts")) != CG_SUCCESS)
    return st;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create: MPI is %s", finalized ? "finalized" : "not initialized");
  if (mpi == MPI_COMM_NULL) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create: MPI_COMM_NULL");
  MPI_Query_thread(&level);
  if ((st = resolve_backend(&backend, opts)) != CG_SUCCESS) return st;
  /* the option, else CG_TIMEOUT; negative: none. It bounds each wait of the
   * creation for the other ranks: their arrival, and each agreement after a
   * step one rank can stall in alone (mpi_setup.c) */
  double timeout_s = opts->timeout_s;
  if (timeout_s == 0 && (st = cg_param_seconds(&timeout_s, NULL, CG_PARAM_TIMEOUT, "cg_comm_create")) != CG_SUCCESS)
    return st;
  if ((st = cg_mpi_arrive(mpi, timeout_s, "cg_comm_create")) != CG_SUCCESS) return st;
  cg_comm_opts_t chosen = *opts;
  /* a rank can fail here alone (CG_DEVICE, no GPU) or stall (its first CUDA
   * call sets the driver up): the others learn of it before they go on */
  cg_status_t choice = CG_SUCCESS;
  char why[512] = "";
  /* the local rank is counted with MPI's blocking MPI_Comm_split_type: a
   * rank whose arrival completed against the barrier that the others left
   * posted when they gave up on it would wait there alone for ever; a
   * bounded round first has it report instead */
  if (chosen.device == CG_DEVICE_LOCAL_RANK &&
      (st = cg_mpi_setup_barrier(mpi, timeout_s, "cg_comm_create",
                                 "the ranks' arrival, before counting the node's ranks")) != CG_SUCCESS)
    return st;
  if (chosen.device == CG_DEVICE_LOCAL_RANK &&
      (choice = cg_topo_device_for_local_rank(&chosen.device, mpi)) != CG_SUCCESS)
    snprintf(why, sizeof why, "%s", cg_error_last());
  int all_ok = 0;
  if ((st = cg_mpi_setup_all_ok(&all_ok, choice == CG_SUCCESS, mpi, timeout_s, "cg_comm_create",
                                "each rank's choice of its device")) != CG_SUCCESS)
    return st;
  if (choice != CG_SUCCESS) return cg_fail(choice, "%s", why);
  if (!all_ok)
    return cg_fail(CG_ERR_BACKEND, "cg_comm_create: another rank could not choose its device (see its error)");
  opts = &chosen;
  int tried = 0;
#if CG_HAVE_NCCL
  if (backend == CG_BACKEND_NCCL) st = cg_nccl_comm_create(out, mpi, opts->device, level, timeout_s), tried = 1;
#endif
#if CG_HAVE_CUDA
  if (!tried && opts->device != CG_DEVICE_HOST)
    st = cg_staged_comm_create(out, mpi, opts, level, timeout_s), tried = 1;
#endif
  if (!tried) st = cg_mpi_comm_create(out, mpi, opts, level, timeout_s);
  if (st == CG_SUCCESS) (*out)->setup_timeout_s = timeout_s > 0 ? timeout_s : 0;
  return st;
}

cg_status_t cg_comm_mpi(MPI_Comm *out, const cg_comm_t *comm) {
  if (!out || !comm) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_mpi: NULL %s", out ? "comm" : "out");
  const cg_mpi_comm_t *m = cg_mpi_comm_of(comm);
#if CG_HAVE_NCCL
  if (!m) m = cg_nccl_comm_control(comm);
#endif
#if CG_HAVE_CUDA
  const cg_staged_comm_t *staged = cg_staged_comm_of(comm);
  if (!m && staged) m = staged->mpi;
#endif
  if (!m)
    return cg_fail(CG_ERR_UNSUPPORTED, "cg_comm_mpi: the communicator's backend (%s) has no MPI_Comm",
                   comm->ops ? comm->ops->backend_name : "none");
  *out = m->data;
  return CG_SUCCESS;
}
