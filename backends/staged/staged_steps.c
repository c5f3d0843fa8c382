/* One plan step of an MPI communicator on a device: copies into pinned
 * staging memory, MPI on the staging memory from a host node, copies back.
 *
 * Allreduce, broadcast and reduce stage one buffer and run MPI in place on it;
 * allgather stages its own block at its place in the gathered buffer (MPI in
 * place too); reduce_scatter stages all blocks and its own result. Those five
 * are cut into chunks of at most chunk_bytes (allgather and reduce_scatter:
 * that much over all ranks' blocks), each chunk's blocks side by side in the
 * staging memory, copied with cudaMemcpy2DAsync where the device layout
 * interleaves them. Every other kind runs whole, on separate send and receive
 * staging. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "graph_internal.h"
#include "staged_backend.h"

/* A cudaMemcpy2DAsync (height 1: a plain copy); width 0: none. */
typedef struct copy {
  void *dst;
  const void *src;
  size_t dpitch, spitch, width, height;
} copy_t;

typedef struct chunk {
  cg_step_t step; /* the MPI call, on staging memory */
  void *mpi_state;
  cg_mpi_comm_t *mpi;
  copy_t in, out;
  atomic_int reported; /* a failure was printed */
} chunk_t;

struct cg_staged_step {
  void *staging; /* pinned: the send part, then the receive part */
  size_t staging_bytes;
  chunk_t *chunks;
  uint32_t n_chunks;
  cg_staged_step_t **group; /* a group's first step: every member (itself first) */
  uint8_t *group_done;      /* per member, during a replay */
  uint32_t n_group;
};

static char *at(const void *base, size_t elems, size_t elem_size) { return (char *)base + elems * elem_size; }

static int is_chunked(cg_node_kind_t k) {
  return k == CG_NODE_ALLREDUCE || k == CG_NODE_BROADCAST || k == CG_NODE_REDUCE || k == CG_NODE_ALLGATHER ||
         k == CG_NODE_REDUCE_SCATTER;
}

/* Elements this rank sends from (receives into) device memory, for the
 * kinds that run whole. */
static size_t send_elems(const cg_step_t *s) {
  size_t c = s->count, n = (size_t)s->comm->size;
  int root = s->comm->rank == s->root;
  switch (s->op_kind) {
    case CG_NODE_ALLTOALL: return n * c;
    case CG_NODE_GATHER: return c;
    case CG_NODE_SCATTER: return root ? n * c : 0;
    case CG_NODE_SEND: return c;
    default: return 0;
  }
}

static size_t recv_elems(const cg_step_t *s) {
  size_t c = s->count, n = (size_t)s->comm->size;
  int root = s->comm->rank == s->root;
  switch (s->op_kind) {
    case CG_NODE_ALLTOALL: return n * c;
    case CG_NODE_GATHER: return root ? n * c : 0;
    case CG_NODE_SCATTER: return c;
    case CG_NODE_RECV: return c;
    default: return 0;
  }
}

static copy_t plain(void *dst, const void *src, size_t bytes) { return (copy_t){dst, src, bytes, bytes, bytes, 1}; }

/* The chunks' copies and MPI calls over `stage` (staging_bytes laid out as
 * the file comment says). Returns the number of chunks. */
static uint32_t plan_chunks(chunk_t *out, const cg_step_t *s, char *stage, size_t chunk_elems) {
  size_t es = cg_dtype_size(s->dtype), c = s->count, n = (size_t)s->comm->size, r = (size_t)s->comm->rank;
  int root = s->comm->rank == s->root;
  if (!is_chunked(s->op_kind)) {
    size_t se = send_elems(s), re = recv_elems(s);
    char *stage_send = stage, *stage_recv = stage + se * es;
    out[0].step = *s;
    out[0].step.send = se ? stage_send : NULL;
    out[0].step.recv = re ? stage_recv : NULL;
    out[0].in = se ? plain(stage_send, s->send, se * es) : (copy_t){0};
    out[0].out = re ? plain(s->recv, stage_recv, re * es) : (copy_t){0};
    return 1;
  }
  uint32_t k = 0;
  for (size_t off = 0; off < c; off += chunk_elems, k++) {
    size_t ck = c - off < chunk_elems ? c - off : chunk_elems, bytes = ck * es;
    chunk_t *ch = &out[k];
    ch->step = *s;
    ch->step.count = ck;
    switch (s->op_kind) {
      case CG_NODE_ALLREDUCE:
      case CG_NODE_BROADCAST:
      case CG_NODE_REDUCE: {
        char *here = at(stage, off, es);
        int sends = s->op_kind != CG_NODE_BROADCAST || root;
        int receives = s->op_kind == CG_NODE_ALLREDUCE || (s->op_kind == CG_NODE_BROADCAST && (!root || s->send != s->recv)) ||
                       (s->op_kind == CG_NODE_REDUCE && root);
        ch->step.send = ch->step.recv = here; /* MPI in place on the staging memory */
        ch->in = sends ? plain(here, at(s->send, off, es), bytes) : (copy_t){0};
        ch->out = receives ? plain(at(s->recv, off, es), here, bytes) : (copy_t){0};
        break;
      }
      case CG_NODE_ALLGATHER: {
        char *blocks = at(stage, n * off, es), *mine = at(blocks, r * ck, es);
        ch->step.send = mine;
        ch->step.recv = blocks;
        ch->in = plain(mine, at(s->send, off, es), bytes);
        ch->out = (copy_t){at(s->recv, off, es), blocks, c * es, bytes, bytes, n};
        break;
      }
      case CG_NODE_REDUCE_SCATTER: {
        char *blocks = at(stage, n * off, es), *result = at(stage, n * c + off, es);
        ch->step.send = blocks;
        ch->step.recv = result;
        ch->in = (copy_t){blocks, at(s->send, off, es), bytes, c * es, bytes, n};
        ch->out = plain(at(s->recv, off, es), result, bytes);
        break;
      }
      default: break;
    }
  }
  return k;
}

static size_t staging_bytes_of(const cg_step_t *s) {
  size_t es = cg_dtype_size(s->dtype), c = s->count, n = (size_t)s->comm->size;
  switch (s->op_kind) {
    case CG_NODE_ALLREDUCE:
    case CG_NODE_BROADCAST:
    case CG_NODE_REDUCE: return c * es;
    case CG_NODE_ALLGATHER: return n * c * es;
    case CG_NODE_REDUCE_SCATTER: return (n + 1) * c * es;
    default: return (send_elems(s) + recv_elems(s)) * es;
  }
}

void cg_staged_step_release(void *comm_impl, void *state) {
  cg_staged_comm_t *sc = comm_impl;
  cg_staged_step_t *st = state;
  if (!st) return;
  for (uint32_t k = 0; st->chunks && k < st->n_chunks; k++)
    if (st->chunks[k].mpi_state) cg_mpi_step_release(sc->mpi, st->chunks[k].mpi_state);
  free(st->chunks);
  free(st->group);
  free(st->group_done);
  if (st->staging) cudaFreeHost(st->staging);
  free(st);
}

cg_status_t cg_staged_step_prepare(void **state, void *comm_impl, const cg_step_t *s) {
  cg_staged_comm_t *sc = comm_impl;
  cg_status_t status = CG_SUCCESS;
  size_t es = cg_dtype_size(s->dtype), n = (size_t)s->comm->size;
  size_t per_chunk = s->op_kind == CG_NODE_ALLGATHER || s->op_kind == CG_NODE_REDUCE_SCATTER ? n * es : es;
  size_t chunk_elems = sc->chunk_bytes / per_chunk ? sc->chunk_bytes / per_chunk : 1;
  if (!is_chunked(s->op_kind) || chunk_elems > s->count) chunk_elems = s->count ? s->count : 1;
  size_t n_chunks = s->count && is_chunked(s->op_kind) ? (s->count + chunk_elems - 1) / chunk_elems : 1;
  cg_staged_step_t *st = calloc(1, sizeof *st);
  if (!st || !(st->chunks = calloc(n_chunks, sizeof *st->chunks))) {
    status = cg_fail(CG_ERR_NO_MEMORY, "allocating %zu staged chunks", n_chunks);
    goto out;
  }
  st->staging_bytes = staging_bytes_of(s);
  cudaError_t err = st->staging_bytes ? cudaHostAlloc(&st->staging, st->staging_bytes, cudaHostAllocPortable)
                                      : cudaSuccess;
  if (err != cudaSuccess) {
    st->staging = NULL;
    status = cg_fail(CG_ERR_NO_MEMORY, "cudaHostAlloc of %zu bytes of staging memory: %s", st->staging_bytes,
                     cudaGetErrorString(err));
    goto out;
  }
  st->n_chunks = s->count ? plan_chunks(st->chunks, s, st->staging, chunk_elems) : 1;
  if (!s->count) st->chunks[0].step = *s;
  for (uint32_t k = 0; k < st->n_chunks && status == CG_SUCCESS; k++) {
    st->chunks[k].mpi = sc->mpi;
    status = cg_mpi_step_prepare(&st->chunks[k].mpi_state, sc->mpi, &st->chunks[k].step);
  }
out:
  if (status != CG_SUCCESS) {
    cg_staged_step_release(sc, st);
    return status;
  }
  *state = st;
  return CG_SUCCESS;
}

/* ---- host nodes: no CUDA calls here */

static void report(chunk_t *ch, const char *what) {
  if (atomic_exchange(&ch->reported, 1)) return;
  fprintf(stderr, "commgraph: rank %d of a %d-rank mpi-staged communicator: %s of node #%u failed in a replay: "
          "%s (the device buffers of this step hold no result)\n",
          ch->step.comm->rank, ch->step.comm->size, what, ch->step.node, cg_error_last());
}

static void run_chunk(void *arg) {
  chunk_t *ch = arg;
  int done = 0;
  cg_status_t st = cg_mpi_step_start(ch->mpi, &ch->step, ch->mpi_state);
  while (st == CG_SUCCESS && !done) st = cg_mpi_step_test(&done, ch->mpi, &ch->step, ch->mpi_state);
  if (st != CG_SUCCESS) report(ch, cg_mpi_step_call(&ch->step));
}

/* Sends and receives that must progress together: all posted, then all
 * waited for. */
static void run_group(void *arg) {
  cg_staged_step_t *lead = arg;
  uint32_t pending = 0;
  uint8_t *done = lead->group_done;
  memset(done, 0, lead->n_group);
  for (uint32_t i = 0; i < lead->n_group; i++) {
    chunk_t *ch = &lead->group[i]->chunks[0];
    if (cg_mpi_step_start(ch->mpi, &ch->step, ch->mpi_state) == CG_SUCCESS)
      pending++;
    else
      done[i] = 1, report(ch, cg_mpi_step_call(&ch->step));
  }
  while (pending)
    for (uint32_t i = 0; i < lead->n_group; i++) {
      if (done[i]) continue;
      chunk_t *ch = &lead->group[i]->chunks[0];
      int finished = 0;
      cg_status_t st = cg_mpi_step_test(&finished, ch->mpi, &ch->step, ch->mpi_state);
      if (st != CG_SUCCESS) report(ch, "MPI_Test");
      if (finished || st != CG_SUCCESS) done[i] = 1, pending--;
    }
}

/* ---- capture */

/* CUDA may run host functions of independent streams one at a time, in any
 * order; two ranks running the host nodes of two communicators in opposite
 * orders would each block in MPI waiting for the other. So the host nodes of
 * every staged step of a plan form one chain, in the order the plan is
 * captured (its issue order, the same on every rank for the same graph). The
 * chain lives on the capturing thread; cg_staged_chain_reset starts a new one
 * before each capture. */
static _Thread_local struct {
  cudaEvent_t last; /* recorded after the chain's latest host node */
  int device;       /* where `last` was created */
  int open;         /* `last` has been recorded in this capture */
} chain = {NULL, -1, 0};

cg_status_t cg_staged_chain_reset(int device) {
  chain.open = 0;
  if (chain.last && chain.device == device) return CG_SUCCESS;
  if (chain.last) cudaEventDestroy(chain.last);
  chain.last = NULL;
  cudaError_t err = cudaEventCreateWithFlags(&chain.last, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    chain.last = NULL;
    return cg_fail(CG_ERR_BACKEND, "cudaEventCreateWithFlags: %s", cudaGetErrorString(err));
  }
  chain.device = device;
  return CG_SUCCESS;
}

/* A host node on `stream`, after the chain's latest one. */
static cudaError_t launch_chained(cudaStream_t stream, cudaHostFn_t fn, void *arg) {
  cudaError_t err = chain.open ? cudaStreamWaitEvent(stream, chain.last, 0) : cudaSuccess;
  if (err == cudaSuccess) err = cudaLaunchHostFunc(stream, fn, arg);
  if (err == cudaSuccess) err = cudaEventRecord(chain.last, stream);
  if (err == cudaSuccess) chain.open = 1;
  return err;
}

static cudaError_t enqueue_copy(const copy_t *c, cudaStream_t stream) {
  if (!c->width) return cudaSuccess;
  if (c->height == 1) return cudaMemcpyAsync(c->dst, c->src, c->width, cudaMemcpyDefault, stream);
  return cudaMemcpy2DAsync(c->dst, c->dpitch, c->src, c->spitch, c->width, c->height, cudaMemcpyDefault, stream);
}

static cg_status_t cuda_fail(cudaError_t err, const char *call) {
  return cg_fail(CG_ERR_BACKEND, "%s: %s", call, cudaGetErrorString(err));
}

/* Chunks on three streams forked from the lane: copies in on one, host nodes
 * on the next (each after its chunk's copy in and the host node before), copies
 * out on the third (each after its chunk's host node); then the lane waits for
 * all three. */
static cudaError_t enqueue_pipeline(cg_staged_comm_t *sc, cg_staged_step_t *st, cudaStream_t lane) {
  cudaError_t err = cudaEventRecord(sc->fork, lane);
  cudaStream_t forks[3] = {sc->copy_in, sc->calls, sc->copy_out};
  for (int i = 0; i < 3 && err == cudaSuccess; i++) err = cudaStreamWaitEvent(forks[i], sc->fork, 0);
  for (uint32_t k = 0; k < st->n_chunks && err == cudaSuccess; k++) {
    chunk_t *ch = &st->chunks[k];
    if (ch->in.width) {
      err = enqueue_copy(&ch->in, sc->copy_in);
      if (err == cudaSuccess) err = cudaEventRecord(sc->fork, sc->copy_in);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(sc->calls, sc->fork, 0);
    }
    if (err == cudaSuccess) err = launch_chained(sc->calls, run_chunk, ch);
    if (err == cudaSuccess && ch->out.width) {
      err = cudaEventRecord(sc->joined, sc->calls);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(sc->copy_out, sc->joined, 0);
      if (err == cudaSuccess) err = enqueue_copy(&ch->out, sc->copy_out);
    }
  }
  for (int i = 0; i < 3 && err == cudaSuccess; i++) {
    err = cudaEventRecord(sc->joined, forks[i]);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(lane, sc->joined, 0);
  }
  return err;
}

cg_status_t cg_staged_step_enqueue(void *comm_impl, const cg_step_t *s, void *stream) {
  cg_staged_comm_t *sc = comm_impl;
  cg_staged_step_t *st = s->backend_state;
  cudaStream_t lane = stream;
  cudaError_t err = cudaSuccess;
  if (!st) return cg_fail(CG_ERR_INTERNAL, "a staged step without its staging (not prepared)");
  if (s->count == 0 && s->op_kind != CG_NODE_BARRIER) return CG_SUCCESS;
  if (sc->grouping) {
    if (sc->n_group == sc->group_cap) {
      uint32_t cap = sc->group_cap ? 2 * sc->group_cap : 8;
      cg_staged_step_t **grown = realloc(sc->group, cap * sizeof *grown);
      if (!grown) return cg_fail(CG_ERR_NO_MEMORY, "growing a group of %u staged steps", cap);
      sc->group = grown, sc->group_cap = cap;
    }
    sc->group[sc->n_group++] = st;
    sc->group_stream = lane; /* a group's steps share their communicator's lane */
    err = enqueue_copy(&st->chunks[0].in, lane);
    return err == cudaSuccess ? CG_SUCCESS : cuda_fail(err, "cudaMemcpyAsync (device to staging)");
  }
  if (st->n_chunks > 1) {
    err = enqueue_pipeline(sc, st, lane);
    return err == cudaSuccess ? CG_SUCCESS : cuda_fail(err, "enqueueing a pipelined staged step");
  }
  chunk_t *ch = &st->chunks[0];
  err = enqueue_copy(&ch->in, lane);
  if (err == cudaSuccess) err = launch_chained(lane, run_chunk, ch);
  if (err == cudaSuccess) err = enqueue_copy(&ch->out, lane);
  return err == cudaSuccess ? CG_SUCCESS : cuda_fail(err, "enqueueing a staged step");
}

cg_status_t cg_staged_group_start(void *comm_impl) {
  cg_staged_comm_t *sc = comm_impl;
  sc->grouping = 1;
  sc->n_group = 0;
  return CG_SUCCESS;
}

cg_status_t cg_staged_group_end(void *comm_impl) {
  cg_staged_comm_t *sc = comm_impl;
  sc->grouping = 0;
  if (!sc->n_group) return CG_SUCCESS;
  cg_staged_step_t *lead = sc->group[0];
  free(lead->group);
  free(lead->group_done);
  lead->group = malloc(sc->n_group * sizeof *lead->group);
  lead->group_done = malloc(sc->n_group);
  if (!lead->group || !lead->group_done)
    return cg_fail(CG_ERR_NO_MEMORY, "allocating a group of %u staged steps", sc->n_group);
  memcpy(lead->group, sc->group, sc->n_group * sizeof *lead->group);
  lead->n_group = sc->n_group;
  cudaError_t err = launch_chained(sc->group_stream, run_group, lead);
  for (uint32_t i = 0; i < lead->n_group && err == cudaSuccess; i++)
    err = enqueue_copy(&lead->group[i]->chunks[0].out, sc->group_stream);
  return err == cudaSuccess ? CG_SUCCESS : cuda_fail(err, "enqueueing a group of staged sends and receives");
}

const char *cg_staged_step_call(const cg_step_t *s) {
  switch (s->op_kind) {
    case CG_NODE_ALLREDUCE: return "staged MPI_Iallreduce";
    case CG_NODE_BROADCAST: return "staged MPI_Ibcast";
    case CG_NODE_REDUCE: return "staged MPI_Ireduce";
    case CG_NODE_ALLGATHER: return "staged MPI_Iallgather";
    case CG_NODE_REDUCE_SCATTER: return "staged MPI_Ireduce_scatter_block";
    case CG_NODE_ALLTOALL: return "staged MPI_Ialltoall";
    case CG_NODE_GATHER: return "staged MPI_Igather";
    case CG_NODE_SCATTER: return "staged MPI_Iscatter";
    case CG_NODE_SEND: return "staged MPI_Isend";
    case CG_NODE_RECV: return "staged MPI_Irecv";
    case CG_NODE_BARRIER: return "MPI_Ibarrier (host node)";
    default: return "none";
  }
}
