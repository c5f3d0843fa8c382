/* One plan step as NCCL calls on a stream (captured into the plan's CUDA
 * graph), and the warm-up that runs before the capture.
 *
 * NCCL has no alltoall, gather, scatter or barrier in every version we run on,
 * so alltoall, gather and scatter are grouped sends and receives (a nested
 * group is fine inside an outer one) and a barrier is a one-element allreduce
 * of a word the communicator owns. A step of zero elements enqueues nothing:
 * the cross-rank check has made sure every rank agrees on the count. */
#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_check.h"
#include "error.h"
#include "graph_internal.h"
#include "memory_kind.h"
#include "nccl_backend.h"
#include "nccl_check.h"
#include "stream_wait.h"

static ncclDataType_t nccl_type(cg_dtype_t dtype) {
  switch (dtype) {
    case CG_INT8: return ncclInt8;
    case CG_UINT8: return ncclUint8;
    case CG_INT32: return ncclInt32;
    case CG_UINT32: return ncclUint32;
    case CG_INT64: return ncclInt64;
    case CG_UINT64: return ncclUint64;
    case CG_FLOAT16: return ncclFloat16;
    case CG_BFLOAT16: return ncclBfloat16;
    case CG_FLOAT32: return ncclFloat32;
    case CG_FLOAT64: return ncclFloat64;
    default: return ncclUint8;
  }
}

static ncclRedOp_t nccl_op(cg_redop_t op) {
  switch (op) {
    case CG_PROD: return ncclProd;
    case CG_MIN: return ncclMin;
    case CG_MAX: return ncclMax;
    case CG_AVG: return ncclAvg;
    default: return ncclSum;
  }
}

/* A collective of one rank: a copy instead of NCCL (one_rank_copy). */
static int is_one_rank_copy(const cg_step_t *s) {
  return s->comm->size == 1 && s->op_kind != CG_NODE_BARRIER && !cg_kind_is_p2p(s->op_kind);
}

/* Where an allreduce, allgather or reduce_scatter (the kinds NCCL's
 * symmetric kernels cover) goes when its buffers lie in symmetric windows of
 * the step's communicator (cg_nccl_arena_create): *send and *recv are the
 * pointers to hand NCCL. */
static cg_nccl_path_t route(const void **send, void **recv, const cg_step_t *s) {
  *send = s->send, *recv = s->recv;
  if (!s->comm || !s->comm->impl) return CG_NCCL_PATH_ORDINARY;
  const cg_nccl_comm_t *n = s->comm->impl;
  size_t block = s->count * cg_dtype_size(s->dtype), all = block * (size_t)s->comm->size;
  size_t send_bytes = s->op_kind == CG_NODE_REDUCE_SCATTER ? all : block;
  size_t recv_bytes = s->op_kind == CG_NODE_ALLGATHER ? all : block;
  return cg_nccl_windows_route(send, recv, &n->windows, send_bytes, recv_bytes, s->op_kind, s->dtype, block);
}

typedef enum own_kernel { NCCL_KERNELS, ONESHOT_KERNEL, TWOSHOT_KERNEL } own_kernel_t;

/* Whether one of commgraph's own allreduce kernels takes the step on its path
 * (cg_nccl_oneshot_takes, cg_nccl_twoshot_takes). */
static own_kernel_t own_kernel(const cg_step_t *s, cg_nccl_path_t path) {
  if (!s->comm || !s->comm->impl || s->op_kind != CG_NODE_ALLREDUCE) return NCCL_KERNELS;
  const cg_nccl_comm_t *n = s->comm->impl;
  int in_window = path == CG_NCCL_PATH_SYMMETRIC;
  double ratio = in_window ? cg_nccl_windows_symmetric_ratio(&n->windows, s->send, s->recv, s->dtype,
                                                             s->count * cg_dtype_size(s->dtype))
                           : 0;
  if (cg_nccl_oneshot_takes(n, s, in_window, ratio)) return ONESHOT_KERNEL;
  return cg_nccl_twoshot_takes(n, s, in_window, ratio) ? TWOSHOT_KERNEL : NCCL_KERNELS;
}

int cg_nccl_step_on_own_kernel(const cg_step_t *s) {
  const void *send = NULL;
  void *recv = NULL;
  return own_kernel(s, route(&send, &recv, s)) != NCCL_KERNELS;
}

const char *cg_nccl_step_call(const cg_step_t *s) {
  if (is_one_rank_copy(s))
    return "cudaMemcpyAsync (one rank)";
  const void *send;
  void *recv;
  cg_nccl_path_t path = route(&send, &recv, s);
  switch (own_kernel(s, path)) {
    case ONESHOT_KERNEL: return "one-shot allreduce (commgraph's kernel: writes to every peer over NVLink)";
    case TWOSHOT_KERNEL:
      return "two-shot allreduce (commgraph's kernel: a reduce-scatter and an allgather over NVLink)";
    default: break;
  }
  switch (path) {
    case CG_NCCL_PATH_PLAIN: return "ncclAllReduce (symmetric arena, plain kernels: above the cut-over)";
    case CG_NCCL_PATH_SYMMETRIC:
      switch (s->op_kind) {
        case CG_NODE_ALLREDUCE: return "ncclAllReduce (symmetric window)";
        case CG_NODE_ALLGATHER: return "ncclAllGather (symmetric window)";
        default: return "ncclReduceScatter (symmetric window)";
      }
    default: break;
  }
  switch (s->op_kind) {
    case CG_NODE_ALLREDUCE: return "ncclAllReduce";
    case CG_NODE_BROADCAST: return "ncclBroadcast";
    case CG_NODE_REDUCE: return "ncclReduce";
    case CG_NODE_ALLGATHER: return "ncclAllGather";
    case CG_NODE_REDUCE_SCATTER: return "ncclReduceScatter";
    case CG_NODE_ALLTOALL: return "ncclSend/ncclRecv group (alltoall)";
    case CG_NODE_GATHER: return "ncclSend/ncclRecv group (gather)";
    case CG_NODE_SCATTER: return "ncclSend/ncclRecv group (scatter)";
    case CG_NODE_SEND: return "ncclSend";
    case CG_NODE_RECV: return "ncclRecv";
    case CG_NODE_BARRIER: return "ncclAllReduce (barrier)";
    default: return "none";
  }
}

cg_status_t cg_nccl_group_start(void *impl) {
  const cg_nccl_comm_t *n = impl;
  ncclResult_t r = ncclGroupStart();
  return r == ncclSuccess ? CG_SUCCESS
                          : cg_fail_nccl(r, n->nccl, "ncclGroupStart", "nccl backend on device %d", n->device);
}

cg_status_t cg_nccl_group_end(void *impl) {
  const cg_nccl_comm_t *n = impl;
  ncclResult_t r = cg_nccl_settle(n->nccl, ncclGroupEnd());
  return r == ncclSuccess ? CG_SUCCESS
                          : cg_fail_nccl(r, n->nccl, "ncclGroupEnd", "nccl backend on device %d", n->device);
}

static const char *at(const void *base, size_t elems, size_t elem_size) {
  return (const char *)base + elems * elem_size;
}

/* Sends and receives one step is made of, in one group: every rank's block of
 * alltoall; gather's blocks into the root; scatter's blocks out of it. The
 * root's own block of an in-place gather or scatter is already in place. */
static ncclResult_t exchange_blocks(cg_nccl_comm_t *n, const cg_step_t *s, cudaStream_t stream) {
  ncclDataType_t t = nccl_type(s->dtype);
  size_t es = cg_dtype_size(s->dtype), count = s->count;
  int rank = s->comm->rank, size = s->comm->size, root = s->root;
  ncclResult_t r = ncclGroupStart();
  for (int p = 0; p < size && r == ncclSuccess; p++) {
    if (s->op_kind == CG_NODE_ALLTOALL) {
      r = ncclSend(at(s->send, (size_t)p * count, es), count, t, p, n->nccl, stream);
      if (r == ncclSuccess) r = ncclRecv((void *)at(s->recv, (size_t)p * count, es), count, t, p, n->nccl, stream);
    } else if (s->op_kind == CG_NODE_GATHER) {
      int in_place = rank == root && s->send == at(s->recv, (size_t)root * count, es);
      if (p == rank && !in_place) r = ncclSend(s->send, count, t, root, n->nccl, stream);
      if (r == ncclSuccess && rank == root && !(p == root && in_place))
        r = ncclRecv((void *)at(s->recv, (size_t)p * count, es), count, t, p, n->nccl, stream);
    } else { /* scatter */
      int in_place = rank == root && s->recv == at(s->send, (size_t)root * count, es);
      if (rank == root && !(p == root && in_place))
        r = ncclSend(at(s->send, (size_t)p * count, es), count, t, p, n->nccl, stream);
      if (r == ncclSuccess && p == rank && !in_place) r = ncclRecv(s->recv, count, t, root, n->nccl, stream);
    }
  }
  ncclResult_t end = cg_nccl_settle(n->nccl, ncclGroupEnd());
  return r != ncclSuccess ? r : end;
}

/* A collective of one rank leaves its input as its output: a copy, or
 * nothing in place. NCCL 2.28.9 gets this wrong for ncclAvg on float64 (the
 * last 4 of 12800 elements stay unwritten, on H200). */
static cg_status_t one_rank_copy(const cg_step_t *s, cudaStream_t stream) {
  if (s->send == s->recv) return CG_SUCCESS;
  size_t bytes = s->count * cg_dtype_size(s->dtype);
  cudaError_t e = cudaMemcpyAsync(s->recv, s->send, bytes, cudaMemcpyDefault, stream);
  return e == cudaSuccess ? CG_SUCCESS
                          : cg_fail_cuda(e, "cudaMemcpyAsync", "a %s on one rank: copying %zu bytes",
                                         cg_node_kind_name(s->op_kind), bytes);
}

cg_status_t cg_nccl_step_enqueue(void *impl, const cg_step_t *s, void *stream_) {
  cg_nccl_comm_t *n = impl;
  cudaStream_t stream = stream_;
  ncclDataType_t t = nccl_type(s->dtype);
  ncclRedOp_t op = nccl_op(s->op);
  ncclResult_t r = ncclSuccess;
  if (s->count == 0 && s->op_kind != CG_NODE_BARRIER) return CG_SUCCESS;
  if (is_one_rank_copy(s)) return one_rank_copy(s, stream);
  const void *send;
  void *recv;
  switch (own_kernel(s, route(&send, &recv, s))) {
    case ONESHOT_KERNEL: return cg_nccl_oneshot_enqueue(n, s, stream);
    case TWOSHOT_KERNEL: return cg_nccl_twoshot_enqueue(n, s, stream);
    default: break;
  }
  switch (s->op_kind) {
    case CG_NODE_ALLREDUCE: r = ncclAllReduce(send, recv, s->count, t, op, n->nccl, stream); break;
    case CG_NODE_BROADCAST: r = ncclBroadcast(s->send, s->recv, s->count, t, s->root, n->nccl, stream); break;
    case CG_NODE_REDUCE: r = ncclReduce(s->send, s->recv, s->count, t, op, s->root, n->nccl, stream); break;
    case CG_NODE_ALLGATHER: r = ncclAllGather(send, recv, s->count, t, n->nccl, stream); break;
    case CG_NODE_REDUCE_SCATTER: r = ncclReduceScatter(send, recv, s->count, t, op, n->nccl, stream); break;
    case CG_NODE_ALLTOALL:
    case CG_NODE_GATHER:
    case CG_NODE_SCATTER: r = exchange_blocks(n, s, stream); break;
    case CG_NODE_SEND: r = ncclSend(s->send, s->count, t, s->root, n->nccl, stream); break;
    case CG_NODE_RECV: r = ncclRecv(s->recv, s->count, t, s->root, n->nccl, stream); break;
    case CG_NODE_BARRIER:
      r = ncclAllReduce(n->barrier_word, n->barrier_word, 1, ncclInt32, ncclSum, n->nccl, stream);
      break;
    default: return cg_fail(CG_ERR_INTERNAL, "the NCCL backend got a %s step", cg_node_kind_name(s->op_kind));
  }
  r = cg_nccl_settle(n->nccl, r);
  return r == ncclSuccess ? CG_SUCCESS
                          : cg_fail_nccl(r, n->nccl, cg_nccl_step_call(s), "nccl backend on device %d", n->device);
}

/* One CTA: the gather moves 16 bytes per rank, and a kernel of few blocks
 * beside the plan's first collective leaves it the SMs it would have had. */
cg_status_t cg_nccl_print_setup(void *impl, const cg_wait_t *wait) {
  cg_nccl_comm_t *n = impl;
  if (atomic_load(&n->print)) return CG_SUCCESS;
  int rank = 0, previous = 0;
  ncclResult_t r = ncclCommUserRank(n->nccl, &rank);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.minCTAs = 1;
  config.maxCTAs = 1;
  config.splitShare = 0;
  ncclComm_t volatile *slot = &n->print_pending;
  *slot = NULL;
  cudaGetDevice(&previous);
  cudaSetDevice(n->device);
  if (r == ncclSuccess) r = ncclCommSplit(n->nccl, 0, rank, &n->print_pending, &config);
  /* on a non-blocking parent the split goes on in NCCL's thread, which sets
   * `print` only once it is done: the parent's state says when */
  if (r == ncclSuccess || r == ncclInProgress) r = cg_nccl_settle_within(n->nccl, ncclInProgress, wait);
  /* NCCL 2.28 returns ncclSuccess from the split and leaves the parent's
   * state ncclInProgress until the child is made */
  for (int spins = 0; r == ncclSuccess && !*slot && spins < 1000000; spins++) sched_yield();
  if (r == ncclSuccess && !*slot) r = ncclInternalError;
  ncclComm_t print = r == ncclSuccess ? *slot : NULL;
  if (r == ncclSuccess) r = cg_nccl_settle_within(print, ncclInProgress, wait);
  cudaSetDevice(previous);
  if (r == ncclInProgress) {
    atomic_store(&n->print_given_up, 1);
    return cg_fail(CG_ERR_TIMEOUT, "nccl backend on device %d, rank %d: ncclCommSplit (the communicator of the "
                   "replay's fingerprint) did not finish: not every rank of the communicator took part", n->device,
                   rank);
  }
  if (r != ncclSuccess) {
    /* a split that failed is left alone: NCCL may have freed it */
    return cg_fail_nccl(r, n->nccl, "ncclCommSplit", "nccl backend on device %d, rank %d: the communicator of the "
                        "replay's fingerprint", n->device, rank);
  }
  atomic_store(&n->print, print);
  return CG_SUCCESS;
}

cg_status_t cg_nccl_allgather_enqueue(void *impl, const void *mine, void *all, size_t bytes, void *stream,
                                      const cg_wait_t *wait) {
  cg_nccl_comm_t *n = impl;
  ncclComm_t print = atomic_load(&n->print);
  if (!print)
    return cg_fail(CG_ERR_INTERNAL, "nccl backend on device %d: the fingerprint's gather before its communicator "
                   "was made", n->device);
  ncclResult_t r =
      cg_nccl_settle_within(print, ncclAllGather(mine, all, bytes, ncclUint8, print, (cudaStream_t)stream), wait);
  if (r == ncclInProgress)
    return cg_fail(CG_ERR_TIMEOUT, "nccl backend on device %d: ncclAllGather (the replay's fingerprint) did not "
                   "finish its enqueue: not every rank of the communicator took part", n->device);
  return r == ncclSuccess ? CG_SUCCESS
                          : cg_fail_nccl(r, print, "ncclAllGather (the replay's fingerprint)", "nccl backend on "
                                         "device %d", n->device);
}

/* ---- warm-up */

/* Scratch the warm-up runs its collectives on: large enough for NCCL to pick
 * the protocols and algorithms of large messages, small enough to be cheap. */
#define WARMUP_SCRATCH_BYTES ((size_t)32 << 20)
#define WARMUP_MAX_SHAPES 256

typedef struct warm_shape {
  cg_node_kind_t kind;
  cg_dtype_t dtype;
  cg_redop_t op;
  int root;
  size_t count; /* clipped to the scratch, rounded down to a power of two */
} warm_shape_t;

static size_t floor_pow2(size_t x) {
  size_t p = 1;
  while (p <= x / 2) p *= 2;
  return x ? p : 0;
}

/* The collective shapes of the communicator's steps, each once, in the order
 * of first use: the same list on every rank, since the sequences agree. */
static uint32_t collect_shapes(warm_shape_t *shapes, unsigned char *peers, const cg_plan_t *plan, uint32_t ci) {
  const cg_plan_comm_t *pc = &plan->comms[ci];
  int size = pc->comm->size, rank = pc->comm->rank;
  uint32_t n = 0;
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *s = &plan->steps[pc->steps[k]];
    if (s->count == 0 && s->op_kind != CG_NODE_BARRIER) continue;
    switch (s->op_kind) {
      case CG_NODE_SEND:
      case CG_NODE_RECV: peers[s->root] = 1; continue;
      case CG_NODE_ALLTOALL:
        for (int p = 0; p < size; p++) peers[p] = 1;
        continue;
      case CG_NODE_GATHER:
      case CG_NODE_SCATTER:
        if (rank == s->root)
          for (int p = 0; p < size; p++) peers[p] = 1;
        else
          peers[s->root] = 1;
        continue;
      default: break;
    }
    size_t es = cg_dtype_size(s->dtype);
    size_t per_rank = s->op_kind == CG_NODE_ALLGATHER || s->op_kind == CG_NODE_REDUCE_SCATTER ? (size_t)size : 1;
    size_t fit = WARMUP_SCRATCH_BYTES / (es * per_rank);
    warm_shape_t w = {s->op_kind, s->dtype, s->op, s->root, floor_pow2(s->count < fit ? s->count : fit)};
    if (s->op_kind == CG_NODE_BARRIER) w = (warm_shape_t){s->op_kind, CG_INT32, CG_SUM, -1, 1};
    int seen = 0;
    for (uint32_t i = 0; i < n && !seen; i++)
      seen = shapes[i].kind == w.kind && shapes[i].dtype == w.dtype && shapes[i].op == w.op &&
             shapes[i].root == w.root && shapes[i].count == w.count;
    if (!seen && n < WARMUP_MAX_SHAPES) shapes[n++] = w;
  }
  return n;
}

static ncclResult_t warm_collective(cg_nccl_comm_t *n, const warm_shape_t *w, char *scratch, int rank,
                                    cudaStream_t stream) {
  ncclDataType_t t = nccl_type(w->dtype);
  ncclRedOp_t op = nccl_op(w->op);
  size_t es = cg_dtype_size(w->dtype);
  switch (w->kind) {
    case CG_NODE_ALLREDUCE: return ncclAllReduce(scratch, scratch, w->count, t, op, n->nccl, stream);
    case CG_NODE_BROADCAST: return ncclBroadcast(scratch, scratch, w->count, t, w->root, n->nccl, stream);
    case CG_NODE_REDUCE: return ncclReduce(scratch, scratch, w->count, t, op, w->root, n->nccl, stream);
    case CG_NODE_ALLGATHER:
      return ncclAllGather(scratch + (size_t)rank * w->count * es, scratch, w->count, t, n->nccl, stream);
    case CG_NODE_REDUCE_SCATTER:
      return ncclReduceScatter(scratch, scratch + (size_t)rank * w->count * es, w->count, t, op, n->nccl, stream);
    case CG_NODE_BARRIER:
      return ncclAllReduce(n->barrier_word, n->barrier_word, 1, ncclInt32, ncclSum, n->nccl, stream);
    default: return ncclSuccess;
  }
}

/* The warm-up's NCCL call that gave up waiting for the other ranks. */
static cg_status_t warm_up_timed_out(const cg_nccl_comm_t *n, const char *what) {
  return cg_fail(CG_ERR_TIMEOUT, "warm-up on device %d: %s did not finish: not every rank of the communicator "
                 "took part", n->device, what);
}

cg_status_t cg_nccl_warmup(void *impl, const cg_plan_t *plan, uint32_t ci, void *stream_, const cg_wait_t *wait) {
  cg_nccl_comm_t *n = impl;
  cudaStream_t stream = stream_;
  const cg_comm_t *comm = plan->comms[ci].comm;
  int size = comm->size, rank = comm->rank;
  cg_status_t st = CG_SUCCESS;
  char *scratch = NULL;
  warm_shape_t *shapes = NULL;
  unsigned char *peers = NULL;
  /* first: its agreements run on every rank, whatever fails here after */
  int abort_comm = 0;
  st = cg_nccl_oneshot_prepare(n, plan, ci, &abort_comm, wait, "the one-shot allreduce");
  /* a timeout's abort is the caller's, after its roll call (backend.h) */
  if (abort_comm && st != CG_ERR_TIMEOUT && cg_comm_mark_aborted((cg_comm_t *)comm, st, cg_error_last()))
    comm->ops->backend->abort(n); /* every rank alike: a kernel may wait for a peer that stopped */
  if (st != CG_SUCCESS) goto out;
  shapes = malloc(WARMUP_MAX_SHAPES * sizeof *shapes);
  peers = calloc((size_t)size, 1);
  if (!shapes || !peers) {
    st = cg_fail(CG_ERR_NO_MEMORY, "warming up communicator %u", ci);
    goto out;
  }
  uint32_t n_shapes = collect_shapes(shapes, peers, plan, ci);
  int any_peer = 0;
  for (int p = 0; p < size; p++) any_peer |= peers[p];
  if (!n_shapes && !any_peer) goto out;
  size_t bytes = 2 * (size_t)size; /* point-to-point: one byte out, one byte in per peer */
  for (uint32_t i = 0; i < n_shapes; i++) {
    size_t per_rank = shapes[i].kind == CG_NODE_ALLGATHER || shapes[i].kind == CG_NODE_REDUCE_SCATTER ? size : 1;
    size_t need = shapes[i].count * cg_dtype_size(shapes[i].dtype) * per_rank;
    if (need > bytes) bytes = need;
  }
  const char *call = "cudaMalloc";
  cudaError_t cerr = cudaMalloc((void **)&scratch, cg_pad16(bytes)); /* NCCL's 16-byte reads */
  if (cerr != cudaSuccess) scratch = NULL;
  if (cerr == cudaSuccess) {
    call = "cudaMemsetAsync";
    cerr = cudaMemsetAsync(scratch, 0, bytes, stream);
  }
  if (cerr != cudaSuccess) {
    st = cg_fail_cuda(cerr, call, "warm-up: %zu bytes of scratch on device %d", bytes, n->device);
    goto out;
  }
  for (uint32_t i = 0; i < n_shapes; i++) {
    ncclResult_t r = cg_nccl_settle_within(n->nccl, warm_collective(n, &shapes[i], scratch, rank, stream), wait);
    if (r == ncclInProgress) {
      char what[160];
      snprintf(what, sizeof what, "a %s of %zu %s elements", cg_node_kind_name(shapes[i].kind), shapes[i].count,
               cg_dtype_name(shapes[i].dtype));
      st = warm_up_timed_out(n, what);
      goto out;
    }
    if (r != ncclSuccess) {
      st = cg_fail_nccl(r, n->nccl, "the warm-up collective", "warm-up on device %d: a %s of %zu %s elements",
                        n->device, cg_node_kind_name(shapes[i].kind), shapes[i].count, cg_dtype_name(shapes[i].dtype));
      goto out;
    }
  }
  if (any_peer) {
    /* peers are symmetric (the cross-rank check paired every send with a
     * receive; alltoall, gather and scatter run on every rank), so this group
     * matches on both sides and connects both directions */
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < size && r == ncclSuccess; p++) {
      if (!peers[p]) continue;
      r = ncclSend(scratch + p, 1, ncclUint8, p, n->nccl, stream);
      if (r == ncclSuccess) r = ncclRecv(scratch + size + p, 1, ncclUint8, p, n->nccl, stream);
    }
    ncclResult_t end = cg_nccl_settle_within(n->nccl, ncclGroupEnd(), wait);
    if (r == ncclSuccess && end == ncclInProgress) {
      st = warm_up_timed_out(n, "a byte to and from each peer");
      goto out;
    }
    if (r != ncclSuccess || end != ncclSuccess) {
      st = cg_fail_nccl(r != ncclSuccess ? r : end, n->nccl,
                        r != ncclSuccess ? "ncclGroupStart/ncclSend/ncclRecv" : "ncclGroupEnd",
                        "warm-up on device %d: a byte to and from each peer", n->device);
      goto out;
    }
  }
  int gave_up = 0;
  if ((cerr = cg_cuda_stream_wait(&gave_up, stream, wait)) != cudaSuccess)
    st = gave_up ? warm_up_timed_out(n, "its collectives")
                 : cg_fail_cuda(cerr, "cudaStreamSynchronize", "warm-up on device %d", n->device);
out:
  if (scratch && st == CG_ERR_TIMEOUT && !n->stranded) {
    n->stranded = scratch; /* the queued collectives use it until the caller aborts the communicator */
  } else if (scratch) {
    int stuck = 0;
    if (cg_cuda_stream_wait(&stuck, stream, wait) != cudaErrorNotReady) cudaFree(scratch);
  }
  free(shapes);
  free(peers);
  return st;
}
