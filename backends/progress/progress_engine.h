/* The progress engine shared by the MPI backends on device buffers: one thread
 * per process that owns every in-flight MPI request of a replay and tells the
 * GPU through flags in pinned, device-mapped host memory.
 *
 * A unit of work is an op: one or more MPI steps (on staging memory) that are
 * posted together and complete together, with two flags:
 *
 *   ready  the GPU writes 1 when the op's inputs are staged (hosttransfer);
 *          the engine sees it, sets it back to 0 and posts the op;
 *   done   the engine writes 1 when every request of the op has completed;
 *          the GPU waits for 1, then writes 0 (stream memory operations,
 *          captured as graph nodes), so the same graph replays with the same
 *          constant values.
 *
 * mpi-staged posts an op from a host node instead of a ready flag: the host
 * node only starts nonblocking calls and returns, so CUDA's callback thread
 * never blocks in MPI (two ranks blocking it on different communicators in
 * different orders would deadlock). Either way the GPU waits on `done` in a
 * stream, not on the host.
 *
 * Ordering: all steps of a communicator are on one lane, so a communicator's
 * ops become ready (or their host nodes run) one after the other, in the
 * plan's order, the same on every rank. The chunks of one pipelined step are
 * watched as a sequence and posted strictly in order. */
#ifndef CG_BACKENDS_HT_ENGINE_H
#define CG_BACKENDS_HT_ENGINE_H

#include <stdatomic.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "mpi/mpi_backend.h"

typedef struct cg_ht_part {
  cg_mpi_comm_t *mpi;
  cg_step_t step; /* an MPI call on host (staging) memory */
  void *mpi_state;
} cg_ht_part_t;

struct cg_ht_sequence;

typedef struct cg_ht_op {
  struct cg_ht_sequence *seq; /* the step's chunks it belongs to, or NULL */
  cg_ht_part_t **parts; /* posted in this order */
  uint32_t n_parts;
  int sequential; /* each part is posted when the one before completes (a
                     chain broadcast: receive a chunk, then forward it) */
  volatile uint32_t *ready, *done; /* host view of the flags */
  void *ready_dev, *done_dev;      /* device view (stream memory operations) */
  /* engine's, while in flight */
  uint32_t pending, started;
  uint8_t *part_done;
  struct cg_ht_op *next_in_flight, *next_deferred;
  atomic_int reported; /* a failure was printed */
  /* an abort took it from the engine while MPI still held its requests:
   * MPI may still write its buffers (cg_ht_engine_abort) */
  atomic_int abandoned;
} cg_ht_op_t;

/* The ops of one step (its chunks), posted in order. At most `window` of
 * them are in MPI at once (0: no limit); the others wait their turn in
 * order. Several large collectives in flight on one communicator run
 * slower than one after the other (MPICH over shared memory: the pipelined
 * allreduce fell from 1.8x to 1.2x of the unpipelined one at 64 MiB), so
 * collectives go one at a time while their copies overlap; a chain
 * broadcast's chunks need several in flight to pipeline along the chain. */
typedef struct cg_ht_sequence {
  cg_ht_op_t **ops;
  uint32_t n_ops, cursor; /* cursor: the next whose ready flag is watched */
  uint32_t window, in_mpi;
  cg_ht_op_t *deferred, *deferred_tail; /* posted, waiting for the window */
  struct cg_ht_sequence *next;
} cg_ht_sequence_t;

/* Starts the engine's thread on first use (bound near `device` where the
 * topology is known) and counts a user; release stops it with the last one. */
cg_status_t cg_ht_engine_acquire(int device);
void cg_ht_engine_release(void);

/* Posts the op now (from a host node: no CUDA calls) and hands it to the
 * engine, which writes `done` when it completes. */
void cg_ht_engine_post(cg_ht_op_t *op);
/* The engine watches the sequence's ready flags until it is unwatched. */
cg_status_t cg_ht_engine_watch(cg_ht_sequence_t *seq);
void cg_ht_engine_unwatch(cg_ht_sequence_t *seq);
/* Drops ops about to be freed from the in-flight list (a replay abandoned
 * mid-way must not leave the engine holding them). */
void cg_ht_engine_forget(cg_ht_op_t *const *ops, uint32_t n);
/* A replay on `mpi` timed out: its ops in flight or waiting for their window
 * are dropped and their done flags raised, and later ops of `mpi` raise
 * theirs at once, without MPI, so the GPU's waits end and its streams drain
 * (the buffers hold no result). MPI cannot cancel a collective, so requests
 * already posted stay with MPI: their ops are marked `abandoned`. */
void cg_ht_engine_abort(cg_mpi_comm_t *mpi);

/* Flags: `n` pairs (ready, done) in pinned device-mapped memory, zeroed;
 * ops take them with cg_ht_flags_assign. */
typedef struct cg_ht_flags {
  uint32_t *host;
  void *dev;
  uint32_t n;
} cg_ht_flags_t;
cg_status_t cg_ht_flags_alloc(cg_ht_flags_t *out, uint32_t n);
void cg_ht_flags_free(cg_ht_flags_t *f);
void cg_ht_flags_assign(cg_ht_op_t *op, const cg_ht_flags_t *f, uint32_t index);

/* Whether the driver offers the stream memory operations below. */
int cg_ht_memops_supported(void);
/* Stream memory operations on `stream` (captured as graph nodes). */
cudaError_t cg_ht_write_flag(cudaStream_t stream, void *flag_dev, uint32_t value);
cudaError_t cg_ht_wait_flag(cudaStream_t stream, void *flag_dev, uint32_t value);
/* Waits until the op's done flag is 1, then clears it. */
cudaError_t cg_ht_enqueue_wait_done(cudaStream_t stream, const cg_ht_op_t *op);

#endif
