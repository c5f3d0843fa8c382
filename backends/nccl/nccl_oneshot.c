/* The one-shot allreduce path of the NCCL backend: see nccl_oneshot.h. */
#include "nccl_oneshot.h"

#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "graph_internal.h"
#include "nccl_backend.h"
#include "nccl_check.h"
#include "nccl_cutover.h"
#include "nccl_oneshot_kernel.h"
#include "param.h"

static int dtype_index(cg_dtype_t dtype) {
  switch (dtype) {
    case CG_FLOAT32: return CG_ONESHOT_FLOAT32;
    case CG_FLOAT16: return CG_ONESHOT_FLOAT16;
    case CG_BFLOAT16: return CG_ONESHOT_BFLOAT16;
    default: return -1;
  }
}

static int op_index(cg_redop_t op) {
  switch (op) {
    case CG_SUM: return CG_ONESHOT_SUM;
    case CG_AVG: return CG_ONESHOT_AVG;
    case CG_MIN: return CG_ONESHOT_MIN;
    case CG_MAX: return CG_ONESHOT_MAX;
    case CG_PROD: return CG_ONESHOT_PROD;
    default: return -1;
  }
}

/* An allreduce the kernel can do, at any cut-over. */
static int fits(const cg_step_t *s) {
  return s->op_kind == CG_NODE_ALLREDUCE && op_index(s->op) >= 0 && dtype_index(s->dtype) >= 0 && s->count > 0 &&
         s->count * cg_dtype_size(s->dtype) <= CG_ONESHOT_MAX_BYTES;
}

int cg_nccl_oneshot_takes(const cg_nccl_comm_t *n, const cg_step_t *s, int in_window, double symmetric_ratio) {
  const cg_nccl_oneshot_t *o = &n->oneshot;
  size_t bytes = s->count * cg_dtype_size(s->dtype);
  if (o->state != CG_ONESHOT_ON || !fits(s) || bytes > o->max_bytes) return 0;
  if (!in_window) return 1;
  /* the two ratios come from back-to-back calls measured at different
   * times. The first push kernel needed a margin (0.75: "faster" sent 8 KB
   * decode layers to it at 5.7 us where NCCL's symmetric kernels took 4.8);
   * the kernel with its chunks in registers beat those kernels wherever both
   * ran on 4 H100s (8 KB layers 4.3 against 4.9 us, a plan of one 1 KB
   * allreduce 5.5 against 9.5), and the margin only kept it out. */
  double mine = o->ratio[cg_nccl_measured_index(bytes)];
  return mine > 0 && symmetric_ratio > 0 && mine < symmetric_ratio;
}

static cg_oneshot_args_t args_of(const cg_nccl_oneshot_t *o, const void *send, void *recv, size_t count, int op) {
  cg_oneshot_args_t a;
  memset(&a, 0, sizeof a);
  for (int r = 0; r < o->ranks; r++) a.peers[r] = o->peers[r];
  a.epochs = o->epochs;
  a.aborted = o->aborted_dev;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.rank = o->rank;
  a.ranks = o->ranks;
  a.op = op;
  return a;
}

cg_status_t cg_nccl_oneshot_enqueue(cg_nccl_comm_t *n, const cg_step_t *s, void *stream) {
  cg_oneshot_args_t a = args_of(&n->oneshot, s->send, s->recv, s->count, op_index(s->op));
  cudaError_t e = cg_oneshot_launch(&a, dtype_index(s->dtype), (cudaStream_t)stream);
  return e == cudaSuccess ? CG_SUCCESS
                          : cg_fail_cuda(e, "the one-shot allreduce kernel", "nccl backend on device %d: %zu %s",
                                         n->device, s->count, cg_dtype_name(s->dtype));
}

void cg_nccl_oneshot_abort(cg_nccl_oneshot_t *o) {
  if (!o->aborted) return;
  /* mapped host memory the kernels poll: as the progress engine raises its done flags */
  atomic_store_explicit((_Atomic unsigned *)o->aborted, 1u, memory_order_release);
}

/* This rank's mappings of its peers' staging, once its kernels are done. */
static void unmap_peers(cg_nccl_oneshot_t *o) {
  if (o->staging) cudaDeviceSynchronize();
  for (int r = 0; r < o->ranks && r < CG_ONESHOT_MAX_RANKS; r++)
    if (o->peers[r] && o->peers[r] != o->staging) cudaIpcCloseMemHandle(o->peers[r]);
  memset(o->peers, 0, sizeof o->peers);
}

void cg_nccl_oneshot_free(cg_nccl_oneshot_t *o, int aborted) {
  if (!aborted) unmap_peers(o);
  /* after an abort a peer's kernel may still write its input into this
   * rank's staging before it sees the abort: the staging stays allocated (and
   * mapped), as the abort leaves NCCL's own buffers to NCCL */
  if (o->staging && !aborted) cudaFree(o->staging);
  if (o->epochs && !aborted) cudaFree(o->epochs);
  if (o->aborted && !aborted) cudaFreeHost(o->aborted);
  if (aborted) return; /* the epochs and the flag too: a kernel may still read them */
  o->staging = NULL, o->epochs = NULL, o->aborted = NULL, o->aborted_dev = NULL;
}

static int plan_needs(const cg_plan_t *plan, uint32_t ci) {
  const cg_plan_comm_t *pc = &plan->comms[ci];
  for (uint32_t k = 0; k < pc->n_steps; k++)
    if (fits(&plan->steps[pc->steps[k]])) return 1;
  return 0;
}

/* This rank's staging, epochs and abort flag; "" or why not in why. */
static void allocate(cg_nccl_oneshot_t *o, cudaIpcMemHandle_t *handle, char *why, size_t size) {
  const char *call = "cudaMalloc";
  size_t bytes = CG_ONESHOT_STAGING_BYTES(o->ranks);
  cudaError_t e = cudaMalloc((void **)&o->staging, bytes);
  if (e != cudaSuccess) o->staging = NULL;
  if (e == cudaSuccess && (e = cudaMemset(o->staging, CG_ONESHOT_SENTINEL_BYTE, bytes)) != cudaSuccess)
    call = "cudaMemset";
  if (e == cudaSuccess &&
      (e = cudaMalloc((void **)&o->epochs, CG_ONESHOT_MAX_BLOCKS * sizeof(unsigned))) != cudaSuccess)
    o->epochs = NULL;
  if (e == cudaSuccess && (e = cudaMemset(o->epochs, 0, CG_ONESHOT_MAX_BLOCKS * sizeof(unsigned))) != cudaSuccess)
    call = "cudaMemset";
  if (e == cudaSuccess &&
      (e = cudaHostAlloc((void **)&o->aborted, sizeof(unsigned), cudaHostAllocMapped)) != cudaSuccess) {
    call = "cudaHostAlloc";
    o->aborted = NULL;
  }
  if (e == cudaSuccess) {
    *o->aborted = 0;
    if ((e = cudaHostGetDevicePointer((void **)&o->aborted_dev, o->aborted, 0)) != cudaSuccess)
      call = "cudaHostGetDevicePointer";
  }
  if (e == cudaSuccess && (e = cudaIpcGetMemHandle(handle, o->staging)) != cudaSuccess) call = "cudaIpcGetMemHandle";
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) snprintf(why, size, "%s: %s", call, cudaGetErrorString(e));
}

/* Maps every peer's staging; "" or why not. */
static void map_peers(cg_nccl_oneshot_t *o, const cudaIpcMemHandle_t *handles, char *why, size_t size) {
  for (int r = 0; r < o->ranks; r++) {
    if (r == o->rank) {
      o->peers[r] = o->staging;
      continue;
    }
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, handles[r], cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      snprintf(why, size, "cudaIpcOpenMemHandle of rank %d's staging: %s", r, cudaGetErrorString(e));
      cudaGetLastError();
      return;
    }
    o->peers[r] = p;
  }
}

/* The kernel as a call to time against ncclAllReduce (nccl_cutover.h). */
typedef struct timed_oneshot {
  cg_oneshot_args_t args;
  const char *what;
} timed_oneshot_t;

static cg_status_t enqueue_oneshot(const void *ctx, cudaStream_t stream) {
  const timed_oneshot_t *t = ctx;
  cudaError_t e = cg_oneshot_launch(&t->args, CG_ONESHOT_FLOAT32, stream);
  return e == cudaSuccess ? CG_SUCCESS : cg_fail_cuda(e, "the one-shot allreduce kernel", "%s", t->what);
}

/* Times the kernel against ncclAllReduce at 1 KB, 2 KB, ... 1 MB, keeps
 * each size's time ratio (the slowest rank's) and sets max_bytes by the
 * two-losses rule with the kernel handicapped 5%: the same everywhere. */
static cg_status_t measure(cg_nccl_comm_t *n, int *abort_comm, const cg_wait_t *wait, const char *where) {
  enum { SIZES = 11 }; /* 1 KB .. 1 MB */
  double us[SIZES][2] = {{0}}, slowest[SIZES][2] = {{0}};
  cudaStream_t stream = NULL;
  cudaEvent_t start = NULL, stop = NULL;
  void *buf = NULL;
  char what[160];
  snprintf(what, sizeof what, "%s: measuring the one-shot cut-over", where);
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreate(&start);
  if (e == cudaSuccess) e = cudaEventCreate(&stop);
  if (e == cudaSuccess && (e = cudaMalloc(&buf, CG_ONESHOT_MAX_BYTES)) != cudaSuccess) buf = NULL;
  if (e == cudaSuccess) e = cudaMemsetAsync(buf, 0, CG_ONESHOT_MAX_BYTES, stream); /* sums of zeros stay zeros */
  cg_status_t st = e == cudaSuccess ? CG_SUCCESS : cg_fail_cuda(e, "cudaMalloc/cudaStreamCreate", "%s", what);
  int all_ok = 0;
  cg_status_t agreed = cg_nccl_agree_within(&all_ok, st == CG_SUCCESS, n, wait, what);
  if (agreed != CG_SUCCESS) st = agreed;
  if (!all_ok) {
    if (st == CG_SUCCESS) st = cg_fail(CG_ERR_BACKEND, "%s: another rank could not start", what);
    goto out;
  }
  for (int i = 0; i < SIZES; i++) {
    snprintf(what, sizeof what, "%s: measuring the one-shot cut-over (%zu bytes)", where, CG_CUTOVER_MIN_BYTES << i);
    size_t count = (CG_CUTOVER_MIN_BYTES << i) / sizeof(float);
    timed_oneshot_t kernel = {args_of(&n->oneshot, buf, buf, count, CG_ONESHOT_SUM), what};
    cg_nccl_timed_allreduce_t nccl = {n, buf, count, ncclFloat32, what, wait};
    cg_nccl_call_t call[2] = {{enqueue_oneshot, &kernel}, {cg_nccl_enqueue_allreduce, &nccl}};
    st = cg_nccl_time_two_ways(us[i], abort_comm, n, stream, start, stop, call, wait, what);
    if (st != CG_SUCCESS) goto out;
  }
  /* a rank that stopped after its last timed call is not waited for either */
  if ((st = cg_nccl_max_within(&slowest[0][0], &us[0][0], 2 * SIZES, n, wait, what)) != CG_SUCCESS) {
    if (st == CG_ERR_TIMEOUT) *abort_comm = 1; /* its peers may still run a timed call with this rank */
    goto out;
  }
  cg_nccl_cutover_ratios(n->oneshot.ratio, (const double (*)[2])slowest, SIZES);
  /* a near tie goes to NCCL: the kernel counts as losing unless 5% faster
   * (at 512 KB it measured ahead and then ran a decode layer in 12.45 us
   * against NCCL's 12.31) */
  size_t pick = cg_nccl_cutover_pick_handicapped((const double (*)[2])slowest, SIZES, 1.05);
  n->oneshot.max_bytes = pick > CG_ONESHOT_MAX_BYTES ? CG_ONESHOT_MAX_BYTES : pick;
out:
  if (stream && !*abort_comm) cudaStreamSynchronize(stream);
  if (stream) cudaStreamDestroy(stream);
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (buf && !*abort_comm) cudaFree(buf);
  return st;
}

/* CG_ONESHOT_MAX_BYTES on every rank alike, or on none. */
static cg_status_t read_env(size_t *given, int *set, cg_nccl_comm_t *n, int rank, int ranks, const cg_wait_t *wait,
                            const char *where) {
  cg_status_t st = cg_param_bytes(given, set, CG_PARAM_ONESHOT_MAX_BYTES, where);
  long long v = *set ? (*given > LLONG_MAX ? LLONG_MAX : (long long)*given) : -1;
  long long mine[2] = {st == CG_SUCCESS, v}, *each = NULL;
  char what[200];
  snprintf(what, sizeof what, "%s: agreeing on CG_ONESHOT_MAX_BYTES", where);
  cg_status_t agreed = cg_nccl_gather_within((void **)&each, mine, sizeof mine, n, wait, what);
  if (agreed != CG_SUCCESS) return agreed;
  int all_read = 1, alike = 1;
  for (int r = 0; r < ranks; r++) {
    all_read &= each[2 * r] != 0;
    alike &= each[2 * r + 1] == v;
  }
  free(each);
  if (st != CG_SUCCESS) return st;
  if (!all_read) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: another rank could not read CG_ONESHOT_MAX_BYTES", where);
  if (!alike)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: environment variable CG_ONESHOT_MAX_BYTES differs between the ranks "
                   "(rank %d: %s); set it alike everywhere or nowhere", where, rank, *set ? "set" : "unset");
  return CG_SUCCESS;
}

cg_status_t cg_nccl_oneshot_prepare(cg_nccl_comm_t *n, const cg_plan_t *plan, uint32_t ci, int *abort_comm,
                                    const cg_wait_t *wait, const char *where) {
  cg_nccl_oneshot_t *o = &n->oneshot;
  const cg_comm_t *comm = plan->comms[ci].comm;
  *abort_comm = 0;
  if (o->state != CG_ONESHOT_UNTRIED || comm->size < 2 || !plan_needs(plan, ci)) return CG_SUCCESS;
  size_t given = 0;
  int set = 0;
  cg_status_t st = read_env(&given, &set, n, comm->rank, comm->size, wait, where);
  if (st != CG_SUCCESS) return st;
  o->state = CG_ONESHOT_OFF;
  o->rank = comm->rank, o->ranks = comm->size;
  /* the same on every rank (the variable is agreed, and so are the links) */
  if ((set && given == 0) || !n->peer_links || comm->size > CG_ONESHOT_MAX_RANKS) return CG_SUCCESS;
  /* from here on what fails is this rank's alone: the ranks agree. Each
   * agreement gives up at the caller's timeout (a peer that stopped): what
   * is mapped then stays until the communicator, aborted by that timeout,
   * goes (cg_nccl_oneshot_free keeps it after an abort) */
  char why[160] = "", what[200];
  snprintf(what, sizeof what, "%s: setting up the one-shot allreduce", where);
  cudaIpcMemHandle_t mine, *handles = NULL;
  memset(&mine, 0, sizeof mine);
  allocate(o, &mine, why, sizeof why);
  int ok = 0;
  st = cg_nccl_agree_within(&ok, !why[0], n, wait, what);
  if (st == CG_SUCCESS && ok) st = cg_nccl_gather_within((void **)&handles, &mine, sizeof mine, n, wait, what);
  if (st == CG_SUCCESS && ok) map_peers(o, handles, why, sizeof why);
  if (st == CG_SUCCESS && ok) st = cg_nccl_agree_within(&ok, !why[0], n, wait, what);
  free(handles);
  if (st != CG_SUCCESS) return st;
  if (!ok) {
    if (why[0])
      fprintf(stderr, "commgraph: %s: rank %d: the one-shot allreduce stays off on every rank: %s\n", where,
              comm->rank, why);
    /* every rank unmaps before any frees: freeing memory another process
     * still maps is undefined (cudaIpcCloseMemHandle) */
    unmap_peers(o);
    void *none = NULL;
    st = cg_nccl_gather_within(&none, NULL, 0, n, wait, what);
    free(none);
    if (st == CG_SUCCESS) cg_nccl_oneshot_free(o, 0);
    return st;
  }
  o->state = CG_ONESHOT_ON;
  if (set) {
    o->max_bytes = given > CG_ONESHOT_MAX_BYTES ? CG_ONESHOT_MAX_BYTES : given;
    return CG_SUCCESS;
  }
  st = measure(n, abort_comm, wait, where);
  if (st != CG_SUCCESS) o->state = CG_ONESHOT_OFF;
  return st;
}
