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

/* An allreduce the kernels can do, of at most `most` bytes, at any cut-over. */
static int fits_within(const cg_step_t *s, size_t most) {
  return s->op_kind == CG_NODE_ALLREDUCE && op_index(s->op) >= 0 && dtype_index(s->dtype) >= 0 && s->count > 0 &&
         s->count * cg_dtype_size(s->dtype) <= most;
}

/* Inside a symmetric window, a kernel measured `mine` times NCCL's plain
 * kernels at this size takes the allreduce only where NCCL's symmetric
 * kernels measured slower than that. The two ratios come from back-to-back
 * calls measured at different times. The first push kernel needed a margin
 * (0.75: "faster" sent 8 KB decode layers to it at 5.7 us where NCCL's
 * symmetric kernels took 4.8); the kernel with its chunks in registers beat
 * those kernels wherever both ran on 4 H100s (8 KB layers 4.3 against 4.9 us,
 * a plan of one 1 KB allreduce 5.5 against 9.5), and the margin only kept it
 * out. */
static int beats_window(double mine, double symmetric_ratio) {
  return mine > 0 && symmetric_ratio > 0 && mine < symmetric_ratio;
}

int cg_nccl_oneshot_takes(const cg_nccl_comm_t *n, const cg_step_t *s, int in_window, double symmetric_ratio) {
  const cg_nccl_oneshot_t *o = &n->oneshot;
  size_t bytes = s->count * cg_dtype_size(s->dtype);
  if (o->state != CG_ONESHOT_ON || !fits_within(s, CG_ONESHOT_MAX_BYTES) || bytes > o->max_bytes) return 0;
  return !in_window || beats_window(o->ratio[cg_nccl_measured_index(bytes)], symmetric_ratio);
}

int cg_nccl_twoshot_takes(const cg_nccl_comm_t *n, const cg_step_t *s, int in_window, double symmetric_ratio) {
  const cg_nccl_oneshot_t *o = &n->oneshot;
  size_t bytes = s->count * cg_dtype_size(s->dtype);
  if (o->state != CG_ONESHOT_ON || !o->twoshot_area || !fits_within(s, CG_TWOSHOT_MAX_BYTES) ||
      bytes > o->twoshot_max_bytes || cg_nccl_oneshot_takes(n, s, in_window, symmetric_ratio))
    return 0;
  double mine = o->twoshot_ratio[cg_nccl_measured_index(bytes)];
  if (in_window) return beats_window(mine, symmetric_ratio);
  return o->twoshot_forced ? bytes > o->max_bytes : mine > 0;
}

int cg_nccl_oneshot_path_us(double *kernel_us, double *nccl_us, const cg_nccl_comm_t *n, cg_node_kind_t kind,
                            cg_dtype_t dtype, cg_redop_t op, size_t bytes) {
  size_t size = cg_dtype_size(dtype);
  cg_step_t s = {0};
  s.op_kind = kind, s.dtype = dtype, s.op = op, s.count = size ? bytes / size : 0;
  int oneshot = cg_nccl_oneshot_takes(n, &s, 0, 0);
  if (!oneshot && !cg_nccl_twoshot_takes(n, &s, 0, 0)) return 0;
  int k = cg_nccl_measured_index(s.count * size);
  /* a one-shot size given between two measured ones: the next size up was
   * the two-shot's to measure, not the kernel that takes these */
  if (oneshot && (CG_NCCL_MEASURED_MIN_BYTES << k) > n->oneshot.max_bytes) return 0;
  if (!(n->oneshot.kernel_us[k] > 0) || !(n->oneshot.nccl_us[k] > 0)) return 0;
  *kernel_us = n->oneshot.kernel_us[k];
  *nccl_us = n->oneshot.nccl_us[k];
  return 1;
}

/* The kernels' arguments: `area` is the offset of the kernel's area in every
 * rank's staging (the two-shot's comes after the one-shot's). */
static cg_oneshot_args_t args_of(const cg_nccl_oneshot_t *o, size_t area, const void *send, void *recv, size_t count,
                                 int op) {
  cg_oneshot_args_t a;
  memset(&a, 0, sizeof a);
  for (int r = 0; r < o->ranks; r++) a.peers[r] = o->peers[r] + area;
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

static size_t twoshot_area(const cg_nccl_oneshot_t *o) { return CG_ONESHOT_STAGING_BYTES(o->ranks); }

cg_status_t cg_nccl_oneshot_enqueue(cg_nccl_comm_t *n, const cg_step_t *s, void *stream) {
  cg_oneshot_args_t a = args_of(&n->oneshot, 0, s->send, s->recv, s->count, op_index(s->op));
  cudaError_t e = cg_oneshot_launch(&a, dtype_index(s->dtype), (cudaStream_t)stream);
  return e == cudaSuccess ? CG_SUCCESS
                          : cg_fail_cuda(e, "the one-shot allreduce kernel", "nccl backend on device %d: %zu %s",
                                         n->device, s->count, cg_dtype_name(s->dtype));
}

cg_status_t cg_nccl_twoshot_enqueue(cg_nccl_comm_t *n, const cg_step_t *s, void *stream) {
  cg_oneshot_args_t a = args_of(&n->oneshot, twoshot_area(&n->oneshot), s->send, s->recv, s->count, op_index(s->op));
  cudaError_t e = cg_twoshot_launch(&a, dtype_index(s->dtype), (cudaStream_t)stream);
  return e == cudaSuccess ? CG_SUCCESS
                          : cg_fail_cuda(e, "the two-shot allreduce kernel", "nccl backend on device %d: %zu %s",
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

/* Whether the plan has an allreduce of at most `most` bytes either kernel could take. */
static int plan_needs(const cg_plan_t *plan, uint32_t ci, size_t most) {
  const cg_plan_comm_t *pc = &plan->comms[ci];
  for (uint32_t k = 0; k < pc->n_steps; k++)
    if (fits_within(&plan->steps[pc->steps[k]], most)) return 1;
  return 0;
}

/* This rank's staging, epochs and abort flag; "" or why not in why. */
static void allocate(cg_nccl_oneshot_t *o, cudaIpcMemHandle_t *handle, char *why, size_t size) {
  const char *call = "cudaMalloc";
  size_t bytes = CG_ONESHOT_STAGING_BYTES(o->ranks) + (o->twoshot_area ? CG_TWOSHOT_STAGING_BYTES(o->ranks) : 0);
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

/* A kernel as a call to time against ncclAllReduce (nccl_cutover.h). */
typedef struct timed_kernel {
  cg_oneshot_args_t args;
  cudaError_t (*launch)(const cg_oneshot_args_t *args, int dtype_index, cudaStream_t stream);
  const char *name, *what;
} timed_kernel_t;

static cg_status_t enqueue_kernel(const void *ctx, cudaStream_t stream) {
  const timed_kernel_t *t = ctx;
  cudaError_t e = t->launch(&t->args, CG_ONESHOT_FLOAT32, stream);
  return e == cudaSuccess ? CG_SUCCESS : cg_fail_cuda(e, t->name, "%s", t->what);
}

/* us[i] for i in [from, to): the kernel (`twoshot` or the one-shot) against
 * ncclAllReduce at 1 KB << i, in place on `buf` (zeros), float32, each this
 * rank's time; stops at the first failure. */
static cg_status_t time_sizes(double (*us)[2], int from, int to, int twoshot, cg_nccl_comm_t *n, void *buf,
                              int *abort_comm, cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop,
                              const cg_wait_t *wait, const char *where) {
  cg_nccl_oneshot_t *o = &n->oneshot;
  const char *name = twoshot ? "the two-shot allreduce kernel" : "the one-shot allreduce kernel";
  char what[200];
  for (int i = from; i < to; i++) {
    snprintf(what, sizeof what, "%s: measuring the %s cut-over (%zu bytes)", where, twoshot ? "two-shot" : "one-shot",
             CG_CUTOVER_MIN_BYTES << i);
    size_t count = (CG_CUTOVER_MIN_BYTES << i) / sizeof(float);
    timed_kernel_t kernel = {args_of(o, twoshot ? twoshot_area(o) : 0, buf, buf, count, CG_ONESHOT_SUM),
                             twoshot ? cg_twoshot_launch : cg_oneshot_launch, name, what};
    cg_nccl_timed_allreduce_t nccl = {n, buf, count, ncclFloat32, what, wait};
    cg_nccl_call_t call[2] = {{enqueue_kernel, &kernel}, {cg_nccl_enqueue_allreduce, &nccl}};
    cg_status_t st = cg_nccl_time_two_ways(us[i], abort_comm, n, stream, start, stop, call, wait, what);
    if (st != CG_SUCCESS) return st;
  }
  return CG_SUCCESS;
}

/* From the slowest rank's times of both kernels: the one-shot's ratios and
 * cut-over (1 KB .. 1 MB: the two-losses rule, the kernel handicapped 5%; a
 * near tie goes to NCCL: at 512 KB it measured ahead and then ran a decode
 * layer in 12.45 us against NCCL's 12.31), unless given; then the two-shot's
 * over the sizes above the one-shot's from the first at which it wins, by the
 * same rule, unless given. The same on every rank. */
enum { ONESHOT_SIZES = 11, TWOSHOT_SIZES = CG_NCCL_MEASURED_SIZES }; /* 1 KB .. 1 MB, .. 8 MB */

static void pick_oneshot(cg_nccl_oneshot_t *o, const double (*slowest)[2]) {
  cg_nccl_cutover_ratios(o->ratio, slowest, ONESHOT_SIZES);
  size_t pick = cg_nccl_cutover_pick_handicapped(slowest, ONESHOT_SIZES, 1.05);
  o->max_bytes = pick > CG_ONESHOT_MAX_BYTES ? CG_ONESHOT_MAX_BYTES : pick;
  for (int k = 0; k < ONESHOT_SIZES && (CG_CUTOVER_MIN_BYTES << k) <= o->max_bytes; k++)
    o->kernel_us[k] = slowest[k][0], o->nccl_us[k] = slowest[k][1];
}

/* the first measured size above the one-shot's cut-over */
static int twoshot_first_size(const cg_nccl_oneshot_t *o) {
  int i = 0;
  while (i < TWOSHOT_SIZES && (CG_CUTOVER_MIN_BYTES << i) <= o->max_bytes) i++;
  return i;
}

static void pick_twoshot(cg_nccl_oneshot_t *o, const double (*slowest)[2]) {
  /* from where it first wins twice in a row (or at the last size): one win
   * alone among losses is taken for noise, as one loss alone among wins */
  int i = twoshot_first_size(o);
  while (i < TWOSHOT_SIZES && !(slowest[i][0] * 1.05 < slowest[i][1] &&
                                (i + 1 == TWOSHOT_SIZES || slowest[i + 1][0] * 1.05 < slowest[i + 1][1])))
    i++;
  o->twoshot_max_bytes = 0;
  if (i == TWOSHOT_SIZES) return;
  size_t pick = cg_nccl_cutover_pick_handicapped(slowest + i, TWOSHOT_SIZES - i, 1.05); /* as if i were 1 KB */
  o->twoshot_max_bytes = pick == SIZE_MAX ? CG_TWOSHOT_MAX_BYTES : pick << i;
  for (int k = i; k < TWOSHOT_SIZES && (CG_CUTOVER_MIN_BYTES << k) <= o->twoshot_max_bytes; k++) {
    o->twoshot_ratio[k] = slowest[k][1] > 0 ? slowest[k][0] / slowest[k][1] : 0;
    o->kernel_us[k] = slowest[k][0], o->nccl_us[k] = slowest[k][1];
  }
}

/* Times whichever kernel's size was not given and sets it. Collective. */
static cg_status_t measure(cg_nccl_comm_t *n, int oneshot_given, int twoshot_given, int *abort_comm,
                           const cg_wait_t *wait, const char *where) {
  cg_nccl_oneshot_t *o = &n->oneshot;
  double one[ONESHOT_SIZES][2] = {{0}}, two[TWOSHOT_SIZES][2] = {{0}};
  double slowest[ONESHOT_SIZES + TWOSHOT_SIZES][2] = {{0}};
  int measure_two = !twoshot_given && o->twoshot_area;
  size_t bytes = measure_two ? CG_TWOSHOT_MAX_BYTES : CG_ONESHOT_MAX_BYTES;
  cudaStream_t stream = NULL;
  cudaEvent_t start = NULL, stop = NULL;
  void *buf = NULL;
  char what[160];
  snprintf(what, sizeof what, "%s: measuring the one-shot and two-shot cut-overs", where);
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreate(&start);
  if (e == cudaSuccess) e = cudaEventCreate(&stop);
  if (e == cudaSuccess && (e = cudaMalloc(&buf, bytes)) != cudaSuccess) buf = NULL;
  if (e == cudaSuccess) e = cudaMemsetAsync(buf, 0, bytes, stream); /* sums of zeros stay zeros */
  cg_status_t st = e == cudaSuccess ? CG_SUCCESS : cg_fail_cuda(e, "cudaMalloc/cudaStreamCreate", "%s", what);
  int all_ok = 0;
  cg_status_t agreed = cg_nccl_agree_within(&all_ok, st == CG_SUCCESS, n, wait, what);
  if (agreed != CG_SUCCESS) st = agreed;
  if (!all_ok) {
    if (st == CG_SUCCESS) st = cg_fail(CG_ERR_BACKEND, "%s: another rank could not start", what);
    goto out;
  }
  if (!oneshot_given) {
    st = time_sizes(one, 0, ONESHOT_SIZES, 0, n, buf, abort_comm, stream, start, stop, wait, where);
    /* a rank that stopped after its last timed call is not waited for either */
    if (st == CG_SUCCESS)
      st = cg_nccl_max_within(&slowest[0][0], &one[0][0], 2 * ONESHOT_SIZES, n, wait, what);
    if (st != CG_SUCCESS) goto out;
    pick_oneshot(o, (const double (*)[2])slowest);
  }
  if (measure_two) {
    int from = twoshot_first_size(o);
    st = time_sizes(two, from, TWOSHOT_SIZES, 1, n, buf, abort_comm, stream, start, stop, wait, where);
    if (st == CG_SUCCESS)
      st = cg_nccl_max_within(&slowest[ONESHOT_SIZES][0], &two[0][0], 2 * TWOSHOT_SIZES, n, wait, what);
    if (st != CG_SUCCESS) goto out;
    pick_twoshot(o, (const double (*)[2])(slowest + ONESHOT_SIZES));
  }
out:
  if (st == CG_ERR_TIMEOUT) *abort_comm = 1; /* its peers may still run a timed call with this rank */
  if (stream && !*abort_comm) cudaStreamSynchronize(stream);
  if (stream) cudaStreamDestroy(stream);
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (buf && !*abort_comm) cudaFree(buf);
  return st;
}

/* The variable (CG_ONESHOT_MAX_BYTES, CG_TWOSHOT_MAX_BYTES) on every rank
 * alike, or on none. */
static cg_status_t read_env(size_t *given, int *set, cg_param_t param, cg_nccl_comm_t *n, int rank, int ranks,
                            const cg_wait_t *wait, const char *where) {
  const char *name = cg_param_name(param);
  cg_status_t st = cg_param_bytes(given, set, param, where);
  long long v = *set ? (*given > LLONG_MAX ? LLONG_MAX : (long long)*given) : -1;
  long long mine[2] = {st == CG_SUCCESS, v}, *each = NULL;
  char what[200];
  snprintf(what, sizeof what, "%s: agreeing on %s", where, name);
  cg_status_t agreed = cg_nccl_gather_within((void **)&each, mine, sizeof mine, n, wait, what);
  if (agreed != CG_SUCCESS) return agreed;
  int all_read = 1, alike = 1;
  for (int r = 0; r < ranks; r++) {
    all_read &= each[2 * r] != 0;
    alike &= each[2 * r + 1] == v;
  }
  free(each);
  if (st != CG_SUCCESS) return st;
  if (!all_read) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: another rank could not read %s", where, name);
  if (!alike)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: environment variable %s differs between the ranks "
                   "(rank %d: %s); set it alike everywhere or nowhere", where, name, rank, *set ? "set" : "unset");
  return CG_SUCCESS;
}

cg_status_t cg_nccl_oneshot_prepare(cg_nccl_comm_t *n, const cg_plan_t *plan, uint32_t ci, int *abort_comm,
                                    const cg_wait_t *wait, const char *where) {
  cg_nccl_oneshot_t *o = &n->oneshot;
  const cg_comm_t *comm = plan->comms[ci].comm;
  *abort_comm = 0;
  if (o->state != CG_ONESHOT_UNTRIED || comm->size < 2 || !plan_needs(plan, ci, CG_TWOSHOT_MAX_BYTES))
    return CG_SUCCESS;
  size_t given = 0, twoshot_given = 0;
  int set = 0, twoshot_set = 0;
  cg_status_t st = read_env(&given, &set, CG_PARAM_ONESHOT_MAX_BYTES, n, comm->rank, comm->size, wait, where);
  if (st == CG_SUCCESS)
    st = read_env(&twoshot_given, &twoshot_set, CG_PARAM_TWOSHOT_MAX_BYTES, n, comm->rank, comm->size, wait, where);
  if (st != CG_SUCCESS) return st;
  /* without the two-shot kernel only allreduces up to 1 MB need the set-up:
   * a later plan may have one (the ranks agree: the variable is agreed) */
  if (twoshot_set && twoshot_given == 0 && !plan_needs(plan, ci, CG_ONESHOT_MAX_BYTES)) return CG_SUCCESS;
  o->state = CG_ONESHOT_OFF;
  o->rank = comm->rank, o->ranks = comm->size;
  o->twoshot_area = !(twoshot_set && twoshot_given == 0);
  /* the same on every rank (the variables are agreed, and so are the links) */
  if ((set && given == 0 && !o->twoshot_area) || !n->peer_links || comm->size > CG_ONESHOT_MAX_RANKS)
    return CG_SUCCESS;
  /* from here on what fails is this rank's alone: the ranks agree. Each
   * agreement gives up at the caller's timeout (a peer that stopped): what
   * is mapped then stays until the communicator, aborted by that timeout,
   * goes (cg_nccl_oneshot_free keeps it after an abort) */
  char why[160] = "", what[200];
  snprintf(what, sizeof what, "%s: setting up the one-shot and two-shot allreduces", where);
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
      fprintf(stderr, "commgraph: %s: rank %d: the one-shot and two-shot allreduces stay off on every rank: %s\n",
              where, comm->rank, why);
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
  if (set) o->max_bytes = given > CG_ONESHOT_MAX_BYTES ? CG_ONESHOT_MAX_BYTES : given;
  if (twoshot_set) {
    o->twoshot_forced = 1;
    o->twoshot_max_bytes = twoshot_given > CG_TWOSHOT_MAX_BYTES ? CG_TWOSHOT_MAX_BYTES : twoshot_given;
  }
  if (set && (twoshot_set || !o->twoshot_area)) return CG_SUCCESS; /* nothing to measure */
  st = measure(n, set, twoshot_set, abort_comm, wait, where);
  if (st != CG_SUCCESS) o->state = CG_ONESHOT_OFF;
  return st;
}
