/* The progress engine (progress_engine.h): one thread, a list of watched
 * sequences, a list of ops in flight, and the stream memory operations the
 * GPU side uses. */
#include "progress_engine.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>

#include "cuda_check.h"
#include "error.h"
#include "graph_internal.h"
#include "node/topology.h"

/* ---- stream memory operations, from the driver through the runtime (the
 * library links only the runtime, so a machine without a driver still loads
 * it) */

typedef CUresult (*wait_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*write_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
static once_flag memops_once = ONCE_FLAG_INIT;
static wait_value_fn wait_value;
static write_value_fn write_value;

static void load_memops(void) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found;
  /* 11070: the version whose signature the typedefs above spell (v2 memops) */
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 11070, cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    wait_value = (wait_value_fn)fn;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 11070, cudaEnableDefault, &found) ==
          cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    write_value = (write_value_fn)fn;
}

static cudaError_t memop_result(CUresult r) {
  return r == CUDA_SUCCESS ? cudaSuccess : r == CUDA_ERROR_NOT_SUPPORTED ? cudaErrorNotSupported : cudaErrorUnknown;
}

int cg_ht_memops_supported(void) {
  call_once(&memops_once, load_memops);
  return wait_value && write_value;
}

cudaError_t cg_ht_write_flag(cudaStream_t stream, void *flag_dev, uint32_t value) {
  call_once(&memops_once, load_memops);
  if (!write_value) return cudaErrorNotSupported;
  /* the default flags order the write after the stream's earlier work,
   * copies included, so the host sees staged data before the flag */
  return memop_result(write_value((CUstream)stream, (CUdeviceptr)flag_dev, value, CU_STREAM_WRITE_VALUE_DEFAULT));
}

cudaError_t cg_ht_wait_flag(cudaStream_t stream, void *flag_dev, uint32_t value) {
  call_once(&memops_once, load_memops);
  if (!wait_value) return cudaErrorNotSupported;
  return memop_result(wait_value((CUstream)stream, (CUdeviceptr)flag_dev, value, CU_STREAM_WAIT_VALUE_EQ));
}

cudaError_t cg_ht_enqueue_wait_done(cudaStream_t stream, const cg_ht_op_t *op) {
  cudaError_t err = cg_ht_wait_flag(stream, op->done_dev, 1);
  if (err == cudaSuccess) err = cg_ht_write_flag(stream, op->done_dev, 0);
  return err;
}

/* ---- flags */

cg_status_t cg_ht_flags_alloc(cg_ht_flags_t *out, uint32_t n) {
  memset(out, 0, sizeof *out);
  size_t bytes = (size_t)2 * n * sizeof(uint32_t);
  void *host = NULL, *dev = NULL;
  cudaError_t err = cudaHostAlloc(&host, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (err != cudaSuccess) /* whatever CUDA says, the flags could not be had */
    return cg_fail_cuda_as(CG_ERR_NO_MEMORY, err, "cudaHostAlloc", "%zu bytes of progress flags", bytes);
  if ((err = cudaHostGetDevicePointer(&dev, host, 0)) != cudaSuccess) {
    cudaFreeHost(host);
    return cg_fail_cuda(err, "cudaHostGetDevicePointer", "the device address of %zu bytes of progress flags", bytes);
  }
  memset(host, 0, bytes);
  *out = (cg_ht_flags_t){host, dev, n};
  return CG_SUCCESS;
}

void cg_ht_flags_free(cg_ht_flags_t *f) {
  if (f && f->host) cudaFreeHost(f->host);
  if (f) memset(f, 0, sizeof *f);
}

void cg_ht_flags_assign(cg_ht_op_t *op, const cg_ht_flags_t *f, uint32_t index) {
  op->ready = &f->host[2 * index];
  op->done = &f->host[2 * index + 1];
  op->ready_dev = (char *)f->dev + (2 * (size_t)index) * sizeof(uint32_t);
  op->done_dev = (char *)f->dev + (2 * (size_t)index + 1) * sizeof(uint32_t);
}

/* ---- the engine */

static struct {
  mtx_t lock;
  cnd_t wake, stopped;
  thrd_t thread;
  int users, running, stop, device;
  cg_ht_sequence_t *watched;
  cg_ht_op_t *in_flight;
} engine;
static once_flag engine_once = ONCE_FLAG_INIT;

static void init_engine(void) {
  mtx_init(&engine.lock, mtx_plain);
  cnd_init(&engine.wake);
  cnd_init(&engine.stopped);
}

static void report(cg_ht_op_t *op, const cg_ht_part_t *part, const char *what) {
  if (atomic_exchange(&op->reported, 1)) return;
  fprintf(stderr, "commgraph: rank %d of a %d-rank %s communicator: %s of node #%u failed in a replay: %s (the "
          "device buffers of this step hold no result)\n",
          part->step.comm->rank, part->step.comm->size, part->step.comm->ops->backend_name, what, part->step.node,
          cg_error_last());
}

static void complete_locked(cg_ht_op_t *op);

static void finish(cg_ht_op_t *op) {
  /* a release store: MPI's writes into staging memory are visible before
   * the flag (a fence before a plain store is not a release in C11, and
   * ThreadSanitizer saw the difference) */
  atomic_store_explicit((_Atomic uint32_t *)op->done, 1, memory_order_release);
}

/* Starts parts from op->started on: one (sequential) or all; a part that
 * fails to start counts as done. */
static void begin_parts(cg_ht_op_t *op) {
  while (op->started < op->n_parts) {
    uint32_t i = op->started++;
    cg_ht_part_t *p = op->parts[i];
    if (cg_mpi_step_start(p->mpi, &p->step, p->mpi_state) == CG_SUCCESS) {
      if (op->sequential) return;
      continue;
    }
    op->part_done[i] = 1;
    op->pending--;
    report(op, p, cg_mpi_step_call(&p->step));
  }
}

/* Starts the op now; the caller holds the lock. */
static void launch_locked(cg_ht_op_t *op) {
  op->pending = op->n_parts;
  op->started = 0;
  memset(op->part_done, 0, op->n_parts);
  begin_parts(op);
  if (!op->pending) {
    complete_locked(op);
    return;
  }
  op->next_in_flight = engine.in_flight;
  engine.in_flight = op;
}

/* The op's calls ended: tell the GPU, and let the next op of its sequence
 * into MPI. */
static void complete_locked(cg_ht_op_t *op) {
  /* the window first, the flag last: once done reads 1, the engine is
   * through with the op and its sequence (found by ThreadSanitizer: a waiter
   * read in_mpi while the engine still updated it) */
  cg_ht_sequence_t *seq = op->seq;
  if (seq && seq->window) {
    seq->in_mpi--;
    cg_ht_op_t *next = seq->deferred;
    if (next) {
      seq->deferred = next->next_deferred;
      if (!seq->deferred) seq->deferred_tail = NULL;
      seq->in_mpi++;
      launch_locked(next);
    }
  }
  finish(op);
}

static int aborted_op(const cg_ht_op_t *op) {
  return op->n_parts && atomic_load_explicit(&op->parts[0]->mpi->aborted, memory_order_relaxed);
}

/* Starts the op, or queues it behind its sequence's window. */
static void start_locked(cg_ht_op_t *op) {
  if (aborted_op(op)) {
    finish(op);
    return;
  }
  cg_ht_sequence_t *seq = op->seq;
  if (seq && seq->window) {
    if (seq->in_mpi >= seq->window) {
      op->next_deferred = NULL;
      if (seq->deferred_tail)
        seq->deferred_tail->next_deferred = op;
      else
        seq->deferred = op;
      seq->deferred_tail = op;
      return;
    }
    seq->in_mpi++;
  }
  launch_locked(op);
}

void cg_ht_engine_post(cg_ht_op_t *op) {
  call_once(&engine_once, init_engine);
  mtx_lock(&engine.lock);
  start_locked(op);
  cnd_signal(&engine.wake);
  mtx_unlock(&engine.lock);
}

/* One pass: posts what became ready, tests what is in flight. Returns
 * whether anything happened. */
static int progress_locked(void) {
  int moved = 0;
  for (cg_ht_sequence_t *seq = engine.watched; seq; seq = seq->next) {
    while (seq->cursor < seq->n_ops) {
      cg_ht_op_t *op = seq->ops[seq->cursor];
      if (atomic_load_explicit((_Atomic uint32_t *)op->ready, memory_order_acquire) != 1) break;
      atomic_store_explicit((_Atomic uint32_t *)op->ready, 0, memory_order_relaxed);
      start_locked(op);
      moved = 1;
      if (++seq->cursor == seq->n_ops) seq->cursor = 0; /* the next replay starts over */
      if (seq->cursor == 0) break;
    }
  }
  for (cg_ht_op_t **at = &engine.in_flight; *at;) {
    cg_ht_op_t *op = *at;
    for (uint32_t i = 0; i < op->started; i++) {
      if (op->part_done[i]) continue;
      cg_ht_part_t *p = op->parts[i];
      int finished = 0;
      if (cg_mpi_step_test(&finished, p->mpi, &p->step, p->mpi_state) != CG_SUCCESS) {
        report(op, p, "MPI_Test");
        finished = 1;
      }
      if (!finished) continue;
      op->part_done[i] = 1, op->pending--, moved = 1;
      if (op->sequential) begin_parts(op);
    }
    if (op->pending) {
      at = &op->next_in_flight;
      continue;
    }
    *at = op->next_in_flight;
    complete_locked(op);
  }
  return moved;
}

/* Spins while work moves, yields for a while, then naps: a flag the GPU
 * writes is noticed within about the nap (50 us) even when idle for long;
 * with nothing watched and nothing in flight, sleeps until a post. */
static int engine_main(void *arg) {
  (void)arg;
  int bound = 0;
  cg_topo_bind_thread_near(&bound, engine.device);
  unsigned idle = 0;
  mtx_lock(&engine.lock);
  while (!engine.stop) {
    if (progress_locked()) {
      idle = 0;
      continue;
    }
    if (!engine.watched && !engine.in_flight) {
      cnd_wait(&engine.wake, &engine.lock);
      continue;
    }
    int busy = engine.in_flight != NULL;
    idle++;
    mtx_unlock(&engine.lock);
    if (busy || idle < 20000) {
      thrd_yield();
    } else {
      struct timespec nap = {0, 50000};
      thrd_sleep(&nap, NULL);
    }
    mtx_lock(&engine.lock);
  }
  mtx_unlock(&engine.lock);
  return 0;
}

cg_status_t cg_ht_engine_acquire(int device) {
  cg_status_t st = CG_SUCCESS;
  call_once(&engine_once, init_engine);
  mtx_lock(&engine.lock);
  /* a thread the last user is stopping must be gone before another starts */
  while (engine.running && engine.stop) cnd_wait(&engine.stopped, &engine.lock);
  if (engine.users++ == 0) {
    engine.stop = 0;
    engine.device = device;
    if (thrd_create(&engine.thread, engine_main, NULL) != thrd_success) {
      engine.users = 0;
      st = cg_fail(CG_ERR_BACKEND, "starting the MPI progress thread failed");
    } else {
      engine.running = 1;
    }
  }
  mtx_unlock(&engine.lock);
  return st;
}

void cg_ht_engine_release(void) {
  call_once(&engine_once, init_engine);
  mtx_lock(&engine.lock);
  int last = engine.users > 0 && --engine.users == 0 && engine.running;
  thrd_t thread = engine.thread;
  if (last) {
    engine.stop = 1;
    cnd_signal(&engine.wake);
  }
  mtx_unlock(&engine.lock);
  if (!last) return;
  thrd_join(thread, NULL);
  mtx_lock(&engine.lock);
  engine.running = 0;
  cnd_broadcast(&engine.stopped);
  mtx_unlock(&engine.lock);
}

cg_status_t cg_ht_engine_watch(cg_ht_sequence_t *seq) {
  call_once(&engine_once, init_engine);
  mtx_lock(&engine.lock);
  seq->cursor = 0;
  seq->next = engine.watched;
  engine.watched = seq;
  cnd_signal(&engine.wake);
  mtx_unlock(&engine.lock);
  return CG_SUCCESS;
}

void cg_ht_engine_unwatch(cg_ht_sequence_t *seq) {
  call_once(&engine_once, init_engine);
  mtx_lock(&engine.lock);
  for (cg_ht_sequence_t **at = &engine.watched; *at; at = &(*at)->next)
    if (*at == seq) {
      *at = seq->next;
      break;
    }
  mtx_unlock(&engine.lock);
  cg_ht_engine_forget(seq->ops, seq->n_ops);
}

void cg_ht_engine_abort(cg_mpi_comm_t *mpi) {
  call_once(&engine_once, init_engine);
  mtx_lock(&engine.lock);
  atomic_store_explicit(&mpi->aborted, 1, memory_order_relaxed);
  for (cg_ht_op_t **at = &engine.in_flight; *at;) {
    cg_ht_op_t *op = *at;
    if (!aborted_op(op)) {
      at = &op->next_in_flight;
      continue;
    }
    *at = op->next_in_flight;
    atomic_store(&op->abandoned, 1);
    /* an op waits for its window only while another of its sequence is in
     * flight, so every waiting op of `mpi` is found here */
    cg_ht_sequence_t *seq = op->seq;
    for (cg_ht_op_t *waiting = seq ? seq->deferred : NULL; waiting; waiting = waiting->next_deferred)
      finish(waiting);
    if (seq) {
      seq->deferred = seq->deferred_tail = NULL;
      seq->in_mpi = 0;
    }
    finish(op);
  }
  mtx_unlock(&engine.lock);
}

void cg_ht_engine_forget(cg_ht_op_t *const *ops, uint32_t n) {
  call_once(&engine_once, init_engine);
  mtx_lock(&engine.lock);
  for (uint32_t k = 0; k < n; k++)
    if (ops[k]->seq) {
      ops[k]->seq->deferred = ops[k]->seq->deferred_tail = NULL;
      ops[k]->seq->in_mpi = 0;
    }
  for (uint32_t k = 0; k < n; k++)
    for (cg_ht_op_t **at = &engine.in_flight; *at;)
      if (*at == ops[k])
        *at = ops[k]->next_in_flight;
      else
        at = &(*at)->next_in_flight;
  mtx_unlock(&engine.lock);
}
