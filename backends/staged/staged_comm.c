/* Communicators of the MPI backend on a CUDA device (staged through host
 * memory) and of the hosttransfer backend, and their backend tables. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "error.h"
#include "param.h"
#include "graph_internal.h"
#include "memory_kind.h"
#include "staged_backend.h"
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

int cg_mpi_cuda_aware(void) {
  int forced = 0, set = 0;
  /* no error path here: a bad value is reported on stderr (cg_comm_create
   * refuses it before it gets here) */
  cg_param_switch(&forced, &set, CG_PARAM_MPI_CUDA_AWARE, NULL);
  if (set) return forced;
#if defined(MPIX_GPU_SUPPORT_CUDA)
  int yes = 0;
  if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) == MPI_SUCCESS) return yes != 0;
  return -1;
#elif defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() != 0;
#else
  return -1;
#endif
}

static void destroy_impl(void *impl) {
  cg_staged_comm_t *s = impl;
  if (!s) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(s->device);
  if (s->copy_in) cudaStreamDestroy(s->copy_in);
  if (s->copy_out) cudaStreamDestroy(s->copy_out);
  if (s->fork) cudaEventDestroy(s->fork);
  if (s->joined) cudaEventDestroy(s->joined);
  cudaSetDevice(previous);
  free(s->group);
  if (s->engine_held) cg_ht_engine_release();
  cg_mpi_comm_close(s->mpi);
  free(s);
}

static cg_status_t control_allgather_start(void **request, void *impl, const void *mine, void *all, size_t bytes) {
  return cg_mpi_control_allgather_start(request, ((cg_staged_comm_t *)impl)->mpi, mine, all, bytes);
}

static cg_status_t control_test(int *done, void *impl, void *request) {
  return cg_mpi_control_test(done, ((cg_staged_comm_t *)impl)->mpi, request);
}

static void control_answer(void *impl, const char *waiting_in) {
  cg_mpi_comm_t *m = ((cg_staged_comm_t *)impl)->mpi;
  if (m) cg_mpi_control_answer(m, waiting_in);
}

static void control_roll_call(char *report, size_t size, void *impl, const char *waiting_in, double timeout_s) {
  cg_mpi_comm_t *m = ((cg_staged_comm_t *)impl)->mpi;
  if (m)
    cg_mpi_control_roll_call(report, size, m, waiting_in, timeout_s);
  else
    snprintf(report, size, "no roll call (the communicator was aborted)");
}

static int control_any_thread(void *impl) {
  cg_mpi_comm_t *m = ((cg_staged_comm_t *)impl)->mpi;
  return m && cg_mpi_control_any_thread(m);
}

static void control_abandon(void *impl, void *request, const char *why) {
  cg_mpi_comm_t *m = ((cg_staged_comm_t *)impl)->mpi;
  if (m) cg_mpi_control_abandon(m, request, why);
}

static size_t bucket_bytes(void *impl) {
  return ((cg_staged_comm_t *)impl)->mpi->one_node ? CG_MPI_BUCKET_BYTES_NODE : CG_MPI_BUCKET_BYTES_NETWORK;
}

/* Nothing is set up lazily: staging memory and flags are allocated when the
 * plan is compiled (cg_staged_step_prepare), and MPI needs no warm-up to be
 * captured (its calls are posted at replay time). */
static cg_status_t warmup(void *impl, const cg_plan_t *plan, uint32_t comm_index, void *stream,
                          const cg_wait_t *wait) {
  (void)impl, (void)plan, (void)comm_index, (void)stream, (void)wait;
  return CG_SUCCESS;
}

/* A timed-out replay: raise the done flags the GPU waits on (progress_engine.h). */
static void abort_comm(void *impl) {
  cg_ht_engine_abort(((cg_staged_comm_t *)impl)->mpi);
}

#define STAGED_BACKEND_TABLE(backend_name)              \
  {                                                     \
    .interface_version = CG_BACKEND_INTERFACE_VERSION,  \
    .name = backend_name,                               \
    .memory = CG_BACKEND_DEVICE_MEMORY,                 \
    .node_kinds = CG_ALL_COMM_KINDS,                    \
    .dtypes = (1u << CG_DTYPE_COUNT) - 1u,              \
    .control_allgather_start = control_allgather_start, \
    .control_test = control_test,                       \
    .control_answer = control_answer,                   \
    .control_roll_call = control_roll_call,             \
    .control_any_thread = control_any_thread,           \
    .control_abandon = control_abandon,                 \
    .host_step_prepare = cg_staged_step_prepare,        \
    .host_step_release = cg_staged_step_release,        \
    .device_warmup = warmup,                            \
    .device_group_start = cg_staged_group_start,        \
    .device_group_end = cg_staged_group_end,            \
    .device_step_enqueue = cg_staged_step_enqueue,      \
    .step_rebind = cg_staged_step_rebind,               \
    .step_call = cg_staged_step_call,                   \
    .bucket_bytes = bucket_bytes,                       \
    .abort = abort_comm,                                \
    .abort_never_blocks = 1,                            \
  }

const cg_backend_t cg_staged_backend = STAGED_BACKEND_TABLE("mpi-staged");
const cg_backend_t cg_hosttransfer_backend = STAGED_BACKEND_TABLE("hosttransfer");

static const cg_comm_ops_t staged_ops = {.backend_name = "mpi-staged", .destroy_impl = destroy_impl,
                                         .backend = &cg_staged_backend, .memory_fits = cg_memory_fits};
static const cg_comm_ops_t hosttransfer_ops = {.backend_name = "hosttransfer", .destroy_impl = destroy_impl,
                                               .backend = &cg_hosttransfer_backend, .memory_fits = cg_memory_fits};

const cg_staged_comm_t *cg_staged_comm_of(const cg_comm_t *comm) {
  return comm->ops == &staged_ops || comm->ops == &hosttransfer_ops ? comm->impl : NULL;
}

/* This rank's device set-up; "" or why not (a CUDA error's detail as
 * cg_fail_cuda words it; the caller fails with CG_ERR_UNSUPPORTED). */
static void open_device(cg_staged_comm_t *s, char *why, size_t size) {
  int devices = 0, previous = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess) {
    cg_fail_cuda(err, "cudaGetDeviceCount", "no usable CUDA device");
    snprintf(why, size, "%s", cg_error_last());
    return;
  }
  if (s->device >= devices) {
    snprintf(why, size, "device %d does not exist (this process sees %d)", s->device, devices);
    return;
  }
  cudaGetDevice(&previous);
  const char *call = "cudaSetDevice";
  err = cudaSetDevice(s->device);
  if (err == cudaSuccess) {
    call = "cudaStreamCreateWithFlags";
    err = cudaStreamCreateWithFlags(&s->copy_in, cudaStreamNonBlocking);
    if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&s->copy_out, cudaStreamNonBlocking);
  }
  if (err == cudaSuccess) {
    call = "cudaEventCreateWithFlags";
    err = cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&s->joined, cudaEventDisableTiming);
  }
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    cg_fail_cuda(err, call, "device %d", s->device);
    snprintf(why, size, "%s", cg_error_last());
  } else if (!cg_ht_memops_supported())
    snprintf(why, size, "the CUDA driver offers no stream memory operations (cuStreamWaitValue32), which the GPU "
             "waits on");
}

cg_status_t cg_staged_comm_create(cg_comm_t **out, MPI_Comm mpi, const cg_comm_opts_t *opts, int thread_level,
                                  double timeout_s) {
  cg_status_t st = CG_SUCCESS;
  cg_comm_t *comm = NULL;
  char why[300] = "";
  int rank = 0, size = 0, ok = 0, all = 0;
  uint64_t id = 0;
  cg_staged_comm_t *s = calloc(1, sizeof *s);
  if (!s) return cg_fail(CG_ERR_NO_MEMORY, "cg_comm_create: allocating the communicator");
  s->device = opts->device;
  s->post_by_flag = opts->backend == CG_BACKEND_HOSTTRANSFER;
  const char *name = s->post_by_flag ? "hosttransfer" : "mpi";
  /* the environment: a bad value is this rank's failure, which the other
   * ranks learn below like any other */
  size_t chunk = 0, chain = 0; /* chain "never": SIZE_MAX */
  int forced = 0;
  cg_status_t env = cg_param_bytes(&chunk, NULL, CG_PARAM_CHUNK_BYTES, "cg_comm_create");
  if (env == CG_SUCCESS) env = cg_param_bytes(&chain, NULL, CG_PARAM_BCAST_CHAIN_BYTES, "cg_comm_create");
  if (env == CG_SUCCESS) env = cg_param_switch(&forced, NULL, CG_PARAM_MPI_CUDA_AWARE, "cg_comm_create");
  if (env != CG_SUCCESS) snprintf(why, sizeof why, "%s", cg_error_last());
  if (opts->chunk_bytes) chunk = opts->chunk_bytes;
  s->chunk_bytes = chunk == CG_CHUNK_NONE ? SIZE_MAX : chunk ? chunk : CG_STAGED_CHUNK_BYTES;
  s->bcast_chain_bytes = chain ? chain : CG_STAGED_BCAST_CHAIN_BYTES;
  int aware = env == CG_SUCCESS ? cg_mpi_cuda_aware() : 0;
  s->direct = opts->staging == CG_STAGING_DIRECT || (opts->staging == CG_STAGING_AUTO && aware == 1);
  s->mpi_reads_device = aware != 0;
  if (why[0]) {
    /* a bad environment value: nothing more to try */
  } else if (thread_level < MPI_THREAD_MULTIPLE)
    snprintf(why, sizeof why, "device buffers over MPI need MPI_THREAD_MULTIPLE (a progress thread completes MPI "
             "calls while the application may call MPI too), but MPI provides %s",
             cg_mpi_thread_level_name(thread_level));
  else
    open_device(s, why, sizeof why);
  if (!why[0]) {
    if (cg_ht_engine_acquire(s->device) == CG_SUCCESS)
      s->engine_held = 1;
    else
      snprintf(why, sizeof why, "%s", cg_error_last());
  }
  /* every rank learns whether all can go on, so none waits in a collective
   * the others skipped, and that all cut messages alike: different chunk
   * sizes or chain thresholds would pair different MPI calls across ranks.
   * MIN over x and ~x gives the smallest and (inverted) the largest. */
  ok = !why[0];
  uint64_t mine[5] = {(uint64_t)ok, s->chunk_bytes, ~(uint64_t)s->chunk_bytes, s->bcast_chain_bytes,
                      ~(uint64_t)s->bcast_chain_bytes};
  uint64_t least[5] = {0, 0, 0, 0, 0};
  char stage[80];
  snprintf(stage, sizeof stage, "the set-up of each rank's device for the %s backend", name);
  if ((st = cg_mpi_setup_min(least, mine, 5, MPI_UINT64_T, mpi, timeout_s, "cg_comm_create", stage)) != CG_SUCCESS)
    goto out;
  all = (int)least[0];
  if (all && (least[1] != ~least[2] || least[3] != ~least[4])) {
    all = 0;
    snprintf(why, sizeof why, "ranks cut messages differently (chunk_bytes / CG_CHUNK_BYTES from %llu to %llu, "
             "CG_BCAST_CHAIN_BYTES from %llu to %llu): give every rank the same", (unsigned long long)least[1],
             (unsigned long long)~least[2], (unsigned long long)least[3], (unsigned long long)~least[4]);
  }
  if (!all) {
    if (env != CG_SUCCESS)
      st = cg_fail(env, "%s", why);
    else
      st = cg_fail(why[0] ? CG_ERR_UNSUPPORTED : CG_ERR_BACKEND, "cg_comm_create: %s backend on device %d: %s",
                   name, opts->device, why[0] ? why : "another rank cannot use its device or refused a "
                   "value in its environment (see its error)");
    goto out;
  }
  if ((st = cg_mpi_comm_open(&s->mpi, mpi, thread_level, timeout_s)) != CG_SUCCESS) goto out;
  int err = MPI_Comm_rank(s->mpi->data, &rank);
  if (err == MPI_SUCCESS) err = MPI_Comm_size(s->mpi->data, &size);
  if (err != MPI_SUCCESS) {
    st = cg_mpi_fail(err, "cg_comm_create: MPI_Comm_size");
    goto out;
  }
  if ((st = cg_mpi_agree_on_id(&id, s->mpi->control)) != CG_SUCCESS) goto out;
  if (!(comm = cg_comm_alloc(rank, size, s->post_by_flag ? &hosttransfer_ops : &staged_ops, s))) {
    st = cg_fail(CG_ERR_NO_MEMORY, "cg_comm_create: allocating the communicator");
    goto out;
  }
  comm->device = s->device;
  comm->id = id;
  s = NULL;
  if (!cg_comm_register(comm)) {
    cg_comm_destroy(comm);
    st = cg_fail(CG_ERR_NO_MEMORY, "cg_comm_create: listing the communicator");
    goto out;
  }
  *out = comm;
out:
  destroy_impl(s);
  return st;
}
