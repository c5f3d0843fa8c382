/* MPI on device buffers, staged through host memory inside the plan's CUDA
 * graph: a step becomes a device-to-host copy into pinned staging memory the
 * plan owns, the MPI call on the staging memory, and a host-to-device copy. A
 * message above the chunk size is cut into chunks on two forked streams
 * (copies in and posts, waits and copies out), so the copies of chunk k + 1
 * overlap MPI's transfer of chunk k.
 *
 * Two backends share this: mpi-staged, where a host node posts the
 * nonblocking MPI calls and returns, and hosttransfer, where the GPU raises a
 * flag and the progress thread posts them (no host nodes at all). In both the
 * progress thread completes the calls and the GPU waits on a flag it writes
 * (progress/progress_engine.h). Both need MPI_THREAD_MULTIPLE: the progress
 * thread and host nodes call MPI while the application may too. */
#ifndef CG_BACKENDS_STAGED_BACKEND_H
#define CG_BACKENDS_STAGED_BACKEND_H

#include <cuda_runtime_api.h>
#include <mpi.h>

#include "commgraph/comm.h"
#include "progress/progress_engine.h"
#include "mpi/mpi_backend.h"

#define CG_STAGED_CHUNK_BYTES ((size_t)4 << 20)
/* CG_BCAST_CHAIN_BYTES's default: from bench_staged on 4 H200s (docs/staged.md) */
#define CG_STAGED_BCAST_CHAIN_BYTES ((size_t)16 << 20)

typedef struct cg_staged_step cg_staged_step_t;

typedef struct cg_staged_comm {
  cg_mpi_comm_t *mpi; /* the MPI part: data and control duplicates, own types and operations */
  int device;
  size_t chunk_bytes; /* SIZE_MAX: no chunks */
  size_t bcast_chain_bytes; /* broadcasts this large (chunked, 3+ ranks) go down a chain; SIZE_MAX: never */
  int engine_held;    /* counted as a user of the progress engine */
  int post_by_flag;   /* hosttransfer: the GPU raises a flag, the progress thread posts */
  /* CG_STAGING_DIRECT (asked for, or AUTO on an MPI that says it is
   * CUDA-aware): steps hand device pointers to MPI, posted by the progress
   * thread (a CUDA-aware MPI makes CUDA calls, which host nodes must not) */
  int direct;
  /* MPI can read device memory: it says it is CUDA-aware, or cannot tell
   * (then DIRECT is the user's word). Else a direct step needs memory the
   * host reaches (managed, pinned), and the plan's own is managed. */
  int mpi_reads_device;
  /* streams a chunked step forks onto during capture (copies in and posts,
   * waits and copies out) and the events that join them; used only while a
   * plan is captured */
  cudaStream_t copy_in, copy_out;
  cudaEvent_t fork, joined;
  /* sends and receives issued together between device_group_start and _end:
   * posted as one op, completed as one */
  cg_staged_step_t **group;
  uint32_t n_group, group_cap;
  int grouping;
  cudaStream_t group_stream; /* the lane the group's steps went on */
} cg_staged_comm_t;

extern const cg_backend_t cg_staged_backend;
extern const cg_backend_t cg_hosttransfer_backend;

/* A communicator of the MPI backend on CUDA device `opts->device`, or of
 * the hosttransfer backend when opts->backend says so (collective over
 * `mpi`; the agreement after the device's set-up waits at most timeout_s,
 * 0: none). */
cg_status_t cg_staged_comm_create(cg_comm_t **out, MPI_Comm mpi, const cg_comm_opts_t *opts, int thread_level,
                                  double timeout_s);
/* The staged part of a communicator (mpi-staged or hosttransfer); NULL for
 * other backends. */
const cg_staged_comm_t *cg_staged_comm_of(const cg_comm_t *comm);
/* Whether the MPI library reports CUDA awareness: 1, 0, or -1 when it has no
 * way to say (CG_MPI_CUDA_AWARE=0/1 overrides it: some MPIs answer only for
 * one transport). */
int cg_mpi_cuda_aware(void);

/* Steps (staged_steps.c), referenced by the backend table. */
cg_status_t cg_staged_step_prepare(void **state, void *comm_impl, const cg_step_t *step);
void cg_staged_step_release(void *comm_impl, void *state);
/* The backends' step_rebind: the copies' device addresses. */
cg_status_t cg_staged_step_rebind(void *comm_impl, void *state, const cg_step_t *step);
cg_status_t cg_staged_step_enqueue(void *comm_impl, const cg_step_t *step, void *stream);
cg_status_t cg_staged_group_start(void *comm_impl);
cg_status_t cg_staged_group_end(void *comm_impl);
const char *cg_staged_step_call(const cg_step_t *step);

#endif
