/* One plan step of an MPI communicator on a device: copies into pinned
 * staging memory (on the GPU's NUMA node), MPI on the staging memory, copies
 * back. The MPI calls of a chunk (or of a group of sends and receives) form an
 * op of the progress engine (progress/progress_engine.h): posted by a host node
 * (mpi-staged) or by the engine when the GPU raises the op's ready flag
 * (hosttransfer); the GPU waits for its done flag before copying back.
 *
 * Allreduce, broadcast and reduce stage one buffer and run MPI in place on it;
 * allgather stages its own block at its place in the gathered buffer (MPI in
 * place too); reduce_scatter stages all blocks and its own result. Those five
 * are cut into chunks of at most chunk_bytes (allgather and reduce_scatter:
 * that much over all ranks' blocks), each chunk's blocks side by side in the
 * staging memory, copied with cudaMemcpy2DAsync where the device layout
 * interleaves them. Every other kind runs whole, on separate send and receive
 * staging.
 *
 * CG_STAGING_DIRECT hands MPI the device buffers instead (a direct step),
 * cut into the same chunks, so a direct rank and a staged one make the same
 * MPI calls and may be mixed: allreduce, broadcast and reduce chunks are
 * ranges of the buffers; allgather's and reduce_scatter's interleaved chunks,
 * and reduce_scatter in place, go through device staging laid out as above
 * (copies within the GPU). Average sums in MPI and divides on the device. A
 * step whose reduction MPI runs as one of commgraph's own host functions
 * (float16, bfloat16, unsigned min/max), or whose memory MPI cannot read, is
 * staged through host memory as before. Direct ops are always posted by the
 * progress thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "error.h"
#include "graph_internal.h"
#include "memory_kind.h"
#include "staged_backend.h"
#include "staged_divide.h"
#include "node/topology.h"

/* A cudaMemcpy2DAsync (height 1: a plain copy); width 0: none. */
typedef struct copy {
  void *dst;
  const void *src;
  size_t dpitch, spitch, width, height;
} copy_t;

typedef struct chunk {
  cg_ht_part_t part;    /* the MPI call, on staging memory */
  cg_ht_part_t forward; /* a chain broadcast's send on to the next rank */
  cg_ht_part_t *part_list[2];
  uint8_t part_done[2];
  cg_ht_op_t op; /* the chunk alone */
  copy_t in, out;
} chunk_t;

struct cg_staged_step {
  int direct;    /* MPI runs on device memory */
  void *staging; /* pinned: the send part, then the receive part; direct:
                    device memory (managed where MPI cannot read device
                    memory), for the kinds that need it, else NULL */
  size_t staging_bytes;
  void *average; /* direct: the result to divide on the device, or NULL */
  chunk_t *chunks;
  uint32_t n_chunks;
  cg_ht_flags_t flags; /* one pair per chunk, then the group's */
  /* a group's first step: every member's MPI call, posted and completed as one */
  cg_ht_op_t group_op;
  cg_ht_part_t **group_parts;
  uint8_t *group_done;
  cg_staged_step_t **group;
  uint32_t n_group;
  /* hosttransfer: what the engine watches (the chunks, or the group) */
  cg_ht_sequence_t seq;
  cg_ht_op_t **seq_ops;
  int watched;
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
    out[0].part.step = *s;
    out[0].part.step.send = se ? stage_send : NULL;
    out[0].part.step.recv = re ? stage_recv : NULL;
    out[0].in = se ? plain(stage_send, s->send, se * es) : (copy_t){0};
    out[0].out = re ? plain(s->recv, stage_recv, re * es) : (copy_t){0};
    return 1;
  }
  uint32_t k = 0;
  for (size_t off = 0; off < c; off += chunk_elems, k++) {
    size_t ck = c - off < chunk_elems ? c - off : chunk_elems, bytes = ck * es;
    chunk_t *ch = &out[k];
    ch->part.step = *s;
    ch->part.step.count = ck;
    switch (s->op_kind) {
      case CG_NODE_ALLREDUCE:
      case CG_NODE_BROADCAST:
      case CG_NODE_REDUCE: {
        char *here = at(stage, off, es);
        int sends = s->op_kind != CG_NODE_BROADCAST || root;
        int receives = s->op_kind == CG_NODE_ALLREDUCE || (s->op_kind == CG_NODE_BROADCAST && (!root || s->send != s->recv)) ||
                       (s->op_kind == CG_NODE_REDUCE && root);
        ch->part.step.send = ch->part.step.recv = here; /* MPI in place on the staging memory */
        ch->in = sends ? plain(here, at(s->send, off, es), bytes) : (copy_t){0};
        ch->out = receives ? plain(at(s->recv, off, es), here, bytes) : (copy_t){0};
        break;
      }
      case CG_NODE_ALLGATHER: {
        char *blocks = at(stage, n * off, es), *mine = at(blocks, r * ck, es);
        ch->part.step.send = mine;
        ch->part.step.recv = blocks;
        ch->in = plain(mine, at(s->send, off, es), bytes);
        ch->out = (copy_t){at(s->recv, off, es), blocks, c * es, bytes, bytes, n};
        break;
      }
      case CG_NODE_REDUCE_SCATTER: {
        char *blocks = at(stage, n * off, es), *result = at(stage, n * c + off, es);
        ch->part.step.send = blocks;
        ch->part.step.recv = result;
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

/* A broadcast down a chain (root, root + 1, ...): each chunk is received
 * from the rank before and then sent on to the next, so while one rank
 * forwards chunk k the next chunk is already arriving. Faster than MPI's own
 * broadcast for large messages on three or more ranks (docs/staged.md). */
static int uses_chain(const cg_staged_comm_t *sc, const cg_step_t *s, uint32_t n_chunks) {
  return s->op_kind == CG_NODE_BROADCAST && n_chunks > 1 && s->comm->size >= 3 &&
         s->count * cg_dtype_size(s->dtype) >= sc->bcast_chain_bytes;
}

/* Chunk k travels with tag 1 + k (modulo what every MPI allows): the engine
 * may forward chunk k + 1 before chunk k, so order alone cannot match them. */
static void make_chain_link(chunk_t *ch, const cg_step_t *s, uint32_t k) {
  int n = s->comm->size, r = s->comm->rank, from_root = (r - s->root + n) % n;
  void *here = ch->part.step.recv;
  ch->part.step.tag = 1 + (int)(k % 32000u); /* MPI_TAG_UB is at least 32767 */
  ch->forward = ch->part;
  if (from_root == 0) {
    ch->part.step.op_kind = CG_NODE_SEND;
  } else {
    ch->part.step.op_kind = CG_NODE_RECV;
    ch->forward.step.op_kind = CG_NODE_SEND;
  }
  ch->part.step.root = from_root == 0 ? (r + 1) % n : (r - 1 + n) % n;
  ch->part.step.send = from_root == 0 ? here : NULL;
  ch->part.step.recv = from_root == 0 ? NULL : here;
  ch->forward.step.root = (r + 1) % n;
  ch->forward.step.send = here;
  ch->forward.step.recv = NULL;
  ch->op.n_parts = from_root == 0 || from_root == n - 1 ? 1 : 2;
  ch->op.sequential = 1;
}

static int host_reaches(const void *p) {
  if (!p) return 1;
  struct cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError(); /* not sticky: plain host memory on older runtimes */
    return 1;
  }
  return attr.type != cudaMemoryTypeDevice;
}

static int reduces(cg_node_kind_t k) {
  return k == CG_NODE_ALLREDUCE || k == CG_NODE_REDUCE || k == CG_NODE_REDUCE_SCATTER;
}

/* Whether the step can hand its buffers to MPI (see the file comment). */
static int goes_direct(const cg_staged_comm_t *sc, const cg_step_t *s) {
  if (!sc->direct) return 0;
  if (reduces(s->op_kind) && cg_mpi_op_is_own(sc->mpi, s->dtype, s->op)) return 0;
  return sc->mpi_reads_device || (host_reaches(s->send) && host_reaches(s->recv));
}

/* Device staging of a direct step: what the interleaved chunks of allgather
 * and reduce_scatter, and reduce_scatter in place, need; 0 for the rest. */
static size_t direct_staging_bytes_of(const cg_step_t *s, uint32_t n_chunks) {
  size_t es = cg_dtype_size(s->dtype);
  int in_place = s->count && (const char *)s->recv == at(s->send, (size_t)s->comm->rank * s->count, es);
  if (s->op_kind == CG_NODE_ALLGATHER && n_chunks > 1) return staging_bytes_of(s);
  if (s->op_kind == CG_NODE_REDUCE_SCATTER && (n_chunks > 1 || in_place)) return staging_bytes_of(s);
  return 0;
}

/* A direct step's chunks over the user's buffers, or over device staging
 * `stage` where direct_staging_bytes_of asks for it. */
static uint32_t plan_direct_chunks(chunk_t *out, const cg_step_t *s, char *stage, size_t chunk_elems) {
  size_t es = cg_dtype_size(s->dtype), c = s->count;
  int root = s->comm->rank == s->root;
  if (stage) return plan_chunks(out, s, stage, chunk_elems);
  if (!is_chunked(s->op_kind) || chunk_elems >= c) {
    out[0].part.step = *s;
    if (s->op_kind == CG_NODE_BROADCAST && root && s->send != s->recv) {
      out[0].part.step.send = s->recv; /* MPI in place; the copy is the GPU's */
      out[0].in = plain(s->recv, s->send, c * es);
    }
    return 1;
  }
  uint32_t k = 0;
  for (size_t off = 0; off < c; off += chunk_elems, k++) {
    size_t ck = c - off < chunk_elems ? c - off : chunk_elems;
    chunk_t *ch = &out[k];
    ch->part.step = *s;
    ch->part.step.count = ck;
    ch->part.step.send = s->send ? at(s->send, off, es) : NULL;
    ch->part.step.recv = s->recv ? at(s->recv, off, es) : NULL;
    if (s->op_kind == CG_NODE_BROADCAST) {
      ch->part.step.send = ch->part.step.recv;
      if (root && s->send != s->recv) ch->in = plain(ch->part.step.recv, at(s->send, off, es), ck * es);
    }
  }
  return k;
}

static uint32_t n_chunks_of(const cg_step_t *s, size_t chunk_elems) {
  return s->count && is_chunked(s->op_kind) ? (uint32_t)((s->count + chunk_elems - 1) / chunk_elems) : 1;
}

/* The chunks' MPI calls and copies, staged or direct; a chain broadcast's
 * links; a direct average summed. Returns the number of chunks. */
static uint32_t plan_step(chunk_t *out, const cg_staged_comm_t *sc, const cg_step_t *s, int direct, char *stage,
                          size_t chunk_elems) {
  uint32_t n = 1;
  if (!s->count)
    out[0].part.step = *s;
  else
    n = direct ? plan_direct_chunks(out, s, stage, chunk_elems) : plan_chunks(out, s, stage, chunk_elems);
  int chain = uses_chain(sc, s, n);
  for (uint32_t k = 0; k < n; k++) {
    out[k].op.n_parts = 1;
    if (chain) make_chain_link(&out[k], s, k);
    if (direct && s->op == CG_AVG) out[k].part.step.op = out[k].forward.step.op = CG_SUM;
  }
  return n;
}

/* `bytes` of staging, padded (cg_pad16) like every buffer the library hands
 * to collectives and copies, with the padding zeroed (docs/safety.md). */
static cg_status_t staging_alloc(void **out, size_t bytes, const cg_staged_comm_t *sc, int direct) {
  *out = NULL;
  if (!bytes) return CG_SUCCESS;
  size_t padded = cg_pad16(bytes);
  if (padded == SIZE_MAX)
    return cg_fail(CG_ERR_OVERFLOW, "%zu bytes of staging overflow size_t once padded", bytes);
  if (!direct) {
    cg_status_t st = cg_topo_host_alloc(out, padded, sc->device);
    if (st == CG_SUCCESS) memset((char *)*out + bytes, 0, padded - bytes);
    return st;
  }
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(sc->device);
  const char *call = sc->mpi_reads_device ? "cudaMalloc" : "cudaMallocManaged";
  cudaError_t err = sc->mpi_reads_device ? cudaMalloc(out, padded) : cudaMallocManaged(out, padded, cudaMemAttachGlobal);
  if (err != cudaSuccess) *out = NULL;
  if (err == cudaSuccess) {
    call = "cudaMemset (padding)";
    err = cudaMemset((char *)*out + bytes, 0, padded - bytes);
  }
  if (err != cudaSuccess && *out) {
    cudaFree(*out);
    *out = NULL;
  }
  cudaSetDevice(previous);
  if (err != cudaSuccess) /* whatever CUDA says, the staging could not be had */
    return cg_fail_cuda_as(CG_ERR_NO_MEMORY, err, call, "allocating %zu bytes of device staging on device %d", padded,
                           sc->device);
  return CG_SUCCESS;
}

static void staging_free(void *p, size_t bytes, const cg_staged_comm_t *sc, int direct) {
  if (!p) return;
  if (!direct) {
    cg_topo_host_free(p, cg_pad16(bytes)); /* what staging_alloc asked for */
    return;
  }
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(sc->device);
  cudaFree(p);
  cudaSetDevice(previous);
}

void cg_staged_step_release(void *comm_impl, void *state) {
  cg_staged_comm_t *sc = comm_impl;
  cg_staged_step_t *st = state;
  if (!st) return;
  if (st->watched) cg_ht_engine_unwatch(&st->seq);
  cg_ht_op_t *group_op = &st->group_op;
  cg_ht_engine_forget(&group_op, 1);
  int abandoned = atomic_load(&group_op->abandoned);
  for (uint32_t k = 0; st->chunks && k < st->n_chunks; k++) {
    cg_ht_op_t *op = &st->chunks[k].op;
    cg_ht_engine_forget(&op, 1);
    abandoned |= atomic_load(&op->abandoned);
    if (st->chunks[k].part.mpi_state) cg_mpi_step_release(sc->mpi, st->chunks[k].part.mpi_state);
    if (st->chunks[k].forward.mpi_state) cg_mpi_step_release(sc->mpi, st->chunks[k].forward.mpi_state);
  }
  free(st->chunks);
  free(st->group);
  free(st->group_parts);
  free(st->group_done);
  free(st->seq_ops);
  cg_ht_flags_free(&st->flags);
  /* MPI may still write the staging memory of a step an abort took from
   * the engine mid-flight (left to it, as cg_mpi_step_release leaves
   * requests in flight) */
  if (!abandoned) staging_free(st->staging, st->staging_bytes, sc, st->direct);
  free(st);
}

/* Elements per chunk of the step. */
static size_t chunk_elems_of(const cg_staged_comm_t *sc, const cg_step_t *s) {
  size_t es = cg_dtype_size(s->dtype), n = (size_t)s->comm->size;
  size_t per_chunk = s->op_kind == CG_NODE_ALLGATHER || s->op_kind == CG_NODE_REDUCE_SCATTER ? n * es : es;
  size_t chunk_elems = sc->chunk_bytes / per_chunk ? sc->chunk_bytes / per_chunk : 1;
  if (!is_chunked(s->op_kind) || chunk_elems > s->count) chunk_elems = s->count ? s->count : 1;
  return chunk_elems;
}

cg_status_t cg_staged_step_rebind(void *comm_impl, void *state, const cg_step_t *s) {
  cg_staged_comm_t *sc = comm_impl;
  cg_staged_step_t *st = state;
  cg_status_t status = CG_SUCCESS;
  if (!s->count) return CG_SUCCESS;
  int direct = goes_direct(sc, s);
  if (direct != st->direct)
    return cg_fail(CG_ERR_UNSUPPORTED, "the new buffers would move the step from %s to %s (MPI %s read them): "
                   "compile a new plan", st->direct ? "direct" : "staged", direct ? "direct" : "staged",
                   direct ? "can" : "cannot");
  size_t chunk_elems = chunk_elems_of(sc, s);
  size_t staging_bytes = direct ? direct_staging_bytes_of(s, st->n_chunks) : st->staging_bytes;
  void *staging = st->staging;
  /* a direct reduce_scatter that moves in or out of place gains or loses
   * its device staging; staged memory stays (its size depends on the shape) */
  if (staging_bytes != st->staging_bytes &&
      (status = staging_alloc(&staging, staging_bytes, sc, direct)) != CG_SUCCESS)
    return status;
  chunk_t *fresh = calloc(st->n_chunks, sizeof *fresh);
  if (!fresh) {
    if (staging != st->staging) staging_free(staging, staging_bytes, sc, direct);
    return cg_fail(CG_ERR_NO_MEMORY, "allocating %u staged chunks", st->n_chunks);
  }
  plan_step(fresh, sc, s, direct, staging, chunk_elems);
  /* a direct step's MPI calls name the buffers; a staged one's only its
   * copies do (its MPI runs on the staging memory, which stays) */
  for (uint32_t k = 0; k < st->n_chunks && status == CG_SUCCESS; k++) {
    chunk_t *ch = &st->chunks[k];
    ch->in = fresh[k].in;
    ch->out = fresh[k].out;
    ch->part.step.send = fresh[k].part.step.send, ch->part.step.recv = fresh[k].part.step.recv;
    ch->forward.step.send = fresh[k].forward.step.send, ch->forward.step.recv = fresh[k].forward.step.recv;
    status = cg_mpi_step_rebind(sc->mpi, ch->part.mpi_state, &ch->part.step);
    if (status == CG_SUCCESS && ch->forward.mpi_state)
      status = cg_mpi_step_rebind(sc->mpi, ch->forward.mpi_state, &ch->forward.step);
  }
  free(fresh);
  if (staging != st->staging) {
    staging_free(st->staging, st->staging_bytes, sc, direct);
    st->staging = staging;
    st->staging_bytes = staging_bytes;
  }
  st->average = direct ? cg_mpi_average_target(s) : NULL;
  return status;
}

cg_status_t cg_staged_step_prepare(void **state, void *comm_impl, const cg_step_t *s) {
  cg_staged_comm_t *sc = comm_impl;
  cg_status_t status = CG_SUCCESS;
  size_t chunk_elems = chunk_elems_of(sc, s);
  uint32_t n_chunks = n_chunks_of(s, chunk_elems);
  cg_staged_step_t *st = calloc(1, sizeof *st);
  if (!st || !(st->chunks = calloc(n_chunks, sizeof *st->chunks)) ||
      !(st->seq_ops = calloc(n_chunks, sizeof *st->seq_ops))) {
    status = cg_fail(CG_ERR_NO_MEMORY, "allocating %u staged chunks", n_chunks);
    goto out;
  }
  st->direct = s->count && goes_direct(sc, s);
  st->staging_bytes = st->direct ? direct_staging_bytes_of(s, n_chunks) : staging_bytes_of(s);
  if ((status = staging_alloc(&st->staging, st->staging_bytes, sc, st->direct)) != CG_SUCCESS) goto out;
  if ((status = cg_ht_flags_alloc(&st->flags, n_chunks + 1)) != CG_SUCCESS) goto out;
  st->n_chunks = plan_step(st->chunks, sc, s, st->direct, st->staging, chunk_elems);
  st->average = st->direct ? cg_mpi_average_target(s) : NULL;
  for (uint32_t k = 0; k < st->n_chunks && status == CG_SUCCESS; k++) {
    chunk_t *ch = &st->chunks[k];
    ch->part.mpi = ch->forward.mpi = sc->mpi;
    ch->part_list[0] = &ch->part;
    ch->part_list[1] = &ch->forward;
    ch->op.parts = ch->part_list;
    ch->op.part_done = ch->part_done;
    ch->op.seq = &st->seq;
    st->seq_ops[k] = &ch->op;
    cg_ht_flags_assign(&ch->op, &st->flags, k);
    status = cg_mpi_step_prepare(&ch->part.mpi_state, sc->mpi, &ch->part.step);
    if (status == CG_SUCCESS && ch->op.n_parts == 2)
      status = cg_mpi_step_prepare(&ch->forward.mpi_state, sc->mpi, &ch->forward.step);
  }
  cg_ht_flags_assign(&st->group_op, &st->flags, st->n_chunks);
  st->seq.ops = st->seq_ops;
  st->seq.n_ops = st->n_chunks;
  st->seq.window = uses_chain(sc, s, st->n_chunks) ? 0 : 1;
out:
  if (status != CG_SUCCESS) {
    cg_staged_step_release(sc, st);
    return status;
  }
  *state = st;
  return CG_SUCCESS;
}

/* ---- capture */

/* Host node (mpi-staged): starts the op's nonblocking calls and returns; no
 * CUDA calls. */
static void post_op(void *arg) { cg_ht_engine_post(arg); }

/* The op's MPI calls begin: a host node posts them (mpi-staged), or the GPU
 * raises the op's ready flag for the engine to post them (hosttransfer, and
 * every op of a direct communicator). */
static int posts_by_flag(const cg_staged_comm_t *sc) { return sc->post_by_flag || sc->direct; }

static cudaError_t enqueue_post(const cg_staged_comm_t *sc, cudaStream_t stream, cg_ht_op_t *op) {
  if (posts_by_flag(sc)) return cg_ht_write_flag(stream, op->ready_dev, 1);
  return cudaLaunchHostFunc(stream, post_op, op);
}

/* hosttransfer: the engine watches these ops' ready flags, in this order. */
static cg_status_t watch(const cg_staged_comm_t *sc, cg_staged_step_t *st, cg_ht_op_t *const *ops, uint32_t n) {
  if (!posts_by_flag(sc)) return CG_SUCCESS;
  if (st->watched) cg_ht_engine_unwatch(&st->seq);
  st->watched = 0;
  memmove(st->seq_ops, ops, n * sizeof *ops);
  st->seq.ops = st->seq_ops;
  st->seq.n_ops = n;
  cg_status_t status = cg_ht_engine_watch(&st->seq);
  st->watched = status == CG_SUCCESS;
  return status;
}

static cudaError_t enqueue_copy(const copy_t *c, cudaStream_t stream) {
  if (!c->width) return cudaSuccess;
  if (c->height == 1) return cudaMemcpyAsync(c->dst, c->src, c->width, cudaMemcpyDefault, stream);
  return cudaMemcpy2DAsync(c->dst, c->dpitch, c->src, c->spitch, c->width, c->height, cudaMemcpyDefault, stream);
}

/* Chunks on two streams forked from the lane: copies in and posts on one
 * (chunk k's MPI calls begin as soon as its copy lands, while chunk k + 1
 * copies), waits for completion and copies out on the other; then the lane
 * waits for both. */
static cudaError_t enqueue_pipeline(cg_staged_comm_t *sc, cg_staged_step_t *st, cudaStream_t lane) {
  cudaError_t err = cudaEventRecord(sc->fork, lane);
  cudaStream_t forks[2] = {sc->copy_in, sc->copy_out};
  for (int i = 0; i < 2 && err == cudaSuccess; i++) err = cudaStreamWaitEvent(forks[i], sc->fork, 0);
  for (uint32_t k = 0; k < st->n_chunks && err == cudaSuccess; k++) {
    chunk_t *ch = &st->chunks[k];
    err = enqueue_copy(&ch->in, sc->copy_in);
    if (err == cudaSuccess) err = enqueue_post(sc, sc->copy_in, &ch->op);
    /* the flag already orders the wait after the post; the event tells CUDA */
    if (err == cudaSuccess) err = cudaEventRecord(sc->fork, sc->copy_in);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(sc->copy_out, sc->fork, 0);
    if (err == cudaSuccess) err = cg_ht_enqueue_wait_done(sc->copy_out, &ch->op);
    if (err == cudaSuccess) err = enqueue_copy(&ch->out, sc->copy_out);
  }
  for (int i = 0; i < 2 && err == cudaSuccess; i++) {
    err = cudaEventRecord(sc->joined, forks[i]);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(lane, sc->joined, 0);
  }
  return err;
}

/* A direct average: MPI summed on the device buffers; divide there. */
static cudaError_t enqueue_average(const cg_staged_step_t *st, const cg_step_t *s, cudaStream_t lane) {
  if (!st->average) return cudaSuccess;
  return cg_staged_divide_launch(st->average, s->count, s->dtype, s->comm->size, lane);
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
    return err == cudaSuccess ? CG_SUCCESS
                              : cg_fail_cuda(err, "cudaMemcpyAsync (device to staging)", "device %d", sc->device);
  }
  cg_ht_op_t *ops[1] = {&st->chunks[0].op};
  cg_status_t status = CG_SUCCESS;
  if (st->n_chunks > 1) {
    /* seq_ops already lists the chunks (cg_staged_step_prepare) */
    if ((status = watch(sc, st, st->seq_ops, st->n_chunks)) != CG_SUCCESS) return status;
    err = enqueue_pipeline(sc, st, lane);
    if (err == cudaSuccess) err = enqueue_average(st, s, lane);
    return err == cudaSuccess ? CG_SUCCESS
                              : cg_fail_cuda(err, "enqueueing a pipelined staged step", "device %d", sc->device);
  }
  if ((status = watch(sc, st, ops, 1)) != CG_SUCCESS) return status;
  chunk_t *ch = &st->chunks[0];
  err = enqueue_copy(&ch->in, lane);
  if (err == cudaSuccess) err = enqueue_post(sc, lane, &ch->op);
  if (err == cudaSuccess) err = cg_ht_enqueue_wait_done(lane, &ch->op);
  if (err == cudaSuccess) err = enqueue_copy(&ch->out, lane);
  if (err == cudaSuccess) err = enqueue_average(st, s, lane);
  return err == cudaSuccess ? CG_SUCCESS : cg_fail_cuda(err, "enqueueing a staged step", "device %d", sc->device);
}

cg_status_t cg_staged_group_start(void *comm_impl) {
  cg_staged_comm_t *sc = comm_impl;
  sc->grouping = 1;
  sc->n_group = 0;
  return CG_SUCCESS;
}

/* Sends and receives that must progress together: one op of every member's
 * call. */
cg_status_t cg_staged_group_end(void *comm_impl) {
  cg_staged_comm_t *sc = comm_impl;
  cg_status_t status = CG_SUCCESS;
  sc->grouping = 0;
  if (!sc->n_group) return CG_SUCCESS;
  cg_staged_step_t *lead = sc->group[0];
  free(lead->group);
  free(lead->group_parts);
  free(lead->group_done);
  lead->group_op.parts = NULL, lead->group_op.part_done = NULL, lead->group_op.n_parts = 0, lead->n_group = 0;
  lead->group = malloc(sc->n_group * sizeof *lead->group);
  lead->group_parts = malloc(sc->n_group * sizeof *lead->group_parts);
  lead->group_done = malloc(sc->n_group);
  if (!lead->group || !lead->group_parts || !lead->group_done)
    return cg_fail(CG_ERR_NO_MEMORY, "allocating a group of %u staged steps", sc->n_group);
  memcpy(lead->group, sc->group, sc->n_group * sizeof *lead->group);
  lead->n_group = sc->n_group;
  for (uint32_t i = 0; i < lead->n_group; i++) lead->group_parts[i] = &lead->group[i]->chunks[0].part;
  lead->group_op.parts = lead->group_parts;
  lead->group_op.part_done = lead->group_done;
  lead->group_op.n_parts = lead->n_group;
  cg_ht_op_t *ops[1] = {&lead->group_op};
  if ((status = watch(sc, lead, ops, 1)) != CG_SUCCESS) return status;
  cudaError_t err = enqueue_post(sc, sc->group_stream, &lead->group_op);
  if (err == cudaSuccess) err = cg_ht_enqueue_wait_done(sc->group_stream, &lead->group_op);
  for (uint32_t i = 0; i < lead->n_group && err == cudaSuccess; i++)
    err = enqueue_copy(&lead->group[i]->chunks[0].out, sc->group_stream);
  return err == cudaSuccess
             ? CG_SUCCESS
             : cg_fail_cuda(err, "enqueueing a group of staged sends and receives", "device %d", sc->device);
}

const char *cg_staged_step_call(const cg_step_t *s) {
  const cg_staged_step_t *st = s->backend_state;
  int direct = st && st->direct;
  switch (s->op_kind) {
    case CG_NODE_ALLREDUCE: return direct ? "direct MPI_Iallreduce" : "staged MPI_Iallreduce";
    case CG_NODE_BROADCAST: return direct ? "direct MPI_Ibcast" : "staged MPI_Ibcast";
    case CG_NODE_REDUCE: return direct ? "direct MPI_Ireduce" : "staged MPI_Ireduce";
    case CG_NODE_ALLGATHER: return direct ? "direct MPI_Iallgather" : "staged MPI_Iallgather";
    case CG_NODE_REDUCE_SCATTER: return direct ? "direct MPI_Ireduce_scatter_block" : "staged MPI_Ireduce_scatter_block";
    case CG_NODE_ALLTOALL: return direct ? "direct MPI_Ialltoall" : "staged MPI_Ialltoall";
    case CG_NODE_GATHER: return direct ? "direct MPI_Igather" : "staged MPI_Igather";
    case CG_NODE_SCATTER: return direct ? "direct MPI_Iscatter" : "staged MPI_Iscatter";
    case CG_NODE_SEND: return direct ? "direct MPI_Isend" : "staged MPI_Isend";
    case CG_NODE_RECV: return direct ? "direct MPI_Irecv" : "staged MPI_Irecv";
    case CG_NODE_BARRIER: return "MPI_Ibarrier";
    default: return "none";
  }
}
