/* MPI on device buffers, staged through host memory inside the plan's CUDA
 * graph: a step becomes a device-to-host copy into pinned staging memory the
 * plan owns, a host node that runs the MPI call on the staging memory, and a
 * host-to-device copy. A message above the chunk size is cut into chunks on
 * three forked streams (copies in, MPI, copies out), so the copies of chunk
 * k + 1 overlap MPI's transfer of chunk k. Host nodes make no CUDA calls; they
 * wait for MPI, which is why MPI_THREAD_MULTIPLE is required (they run on
 * CUDA's callback thread while the application may call MPI too). */
#ifndef CG_BACKENDS_STAGED_BACKEND_H
#define CG_BACKENDS_STAGED_BACKEND_H

#include <cuda_runtime_api.h>
#include <mpi.h>

#include "commgraph/comm.h"
#include "mpi/mpi_backend.h"

#define CG_STAGED_CHUNK_BYTES ((size_t)4 << 20)

typedef struct cg_staged_step cg_staged_step_t;

typedef struct cg_staged_comm {
  cg_mpi_comm_t *mpi; /* the MPI part: data and control duplicates, own types and operations */
  int device;
  size_t chunk_bytes; /* SIZE_MAX: no chunks */
  /* streams a chunked step forks onto during capture (copies in, MPI, copies
   * out) and the events that join them; used only while a plan is captured */
  cudaStream_t copy_in, calls, copy_out;
  cudaEvent_t fork, joined;
  /* sends and receives issued together between device_group_start and _end:
   * one host node posts them all, then waits for all */
  cg_staged_step_t **group;
  uint32_t n_group, group_cap;
  int grouping;
  cudaStream_t group_stream; /* the lane the group's steps went on */
} cg_staged_comm_t;

extern const cg_backend_t cg_staged_backend;

/* A communicator of the MPI backend on CUDA device `opts->device`
 * (collective over `mpi`). */
cg_status_t cg_staged_comm_create(cg_comm_t **out, MPI_Comm mpi, const cg_comm_opts_t *opts, int thread_level);
/* The staged part of a communicator; NULL for other backends. */
const cg_staged_comm_t *cg_staged_comm_of(const cg_comm_t *comm);
/* Whether the MPI library reports CUDA awareness: 1, 0, or -1 when it has no
 * way to say. */
int cg_mpi_cuda_aware(void);

/* Starts a new chain of host nodes on this thread (staged_steps.c) for the
 * plan about to be captured on `device`. */
cg_status_t cg_staged_chain_reset(int device);

/* Steps (staged_steps.c), referenced by the backend table. */
cg_status_t cg_staged_step_prepare(void **state, void *comm_impl, const cg_step_t *step);
void cg_staged_step_release(void *comm_impl, void *state);
cg_status_t cg_staged_step_enqueue(void *comm_impl, const cg_step_t *step, void *stream);
cg_status_t cg_staged_group_start(void *comm_impl);
cg_status_t cg_staged_group_end(void *comm_impl);
const char *cg_staged_step_call(const cg_step_t *step);

#endif
