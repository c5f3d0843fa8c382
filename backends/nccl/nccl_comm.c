/* Communicators over NCCL: created from an MPI_Comm (rank 0's unique id goes
 * out over MPI) or wrapped around one the application owns. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "commgraph/nccl.h"
#include "cuda_check.h"
#include "cuda_thread.h"
#include "error.h"
#include "graph_internal.h"
#include "memory_kind.h"
#include "nccl_backend.h"
#include "nccl_check.h"
#include "param.h"

/* Ends the communicators commgraph owns. The user's is aborted when a replay
 * timed out (finalizing may then wait for peers that are gone) unless the
 * abort took it along; otherwise both are finalized (flushing this rank's
 * outstanding operations), the plan's (non-blocking) in NCCL's thread while
 * the user's (blocking) ends on this one. */
static void end_owned(cg_nccl_comm_t *n) {
  int user_left = n->user_nccl && n->user_nccl != n->nccl && atomic_load(&n->user_state) != CG_NCCL_USER_ABORTED;
  if (n->aborted) {
    if (user_left) ncclCommAbort(n->user_nccl);
    return;
  }
  ncclResult_t plan_final = n->nccl ? ncclCommFinalize(n->nccl) : ncclSuccess;
  if (user_left) {
    cg_nccl_settle(n->user_nccl, ncclCommFinalize(n->user_nccl));
    ncclCommDestroy(n->user_nccl);
  }
  if (n->nccl) {
    cg_nccl_settle(n->nccl, plan_final);
    ncclCommDestroy(n->nccl);
  }
}

/* The fingerprint's communicator is commgraph's whoever owns the plan's:
 * aborted with it, else finalized before it. */
static void end_print(cg_nccl_comm_t *n) {
  ncclComm_t print = atomic_exchange(&n->print, NULL);
  if (!print) return;
  if (n->aborted) return; /* the abort ended it */
  cg_nccl_settle(print, ncclCommFinalize(print));
  ncclCommDestroy(print);
}

static void destroy_impl(void *impl) {
  cg_nccl_comm_t *n = impl;
  if (!n) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(n->device);
  end_print(n);
  if (n->owns_nccl) end_owned(n);
  if (n->barrier_word) cudaFree(n->barrier_word);
  if (n->stranded) cudaFree(n->stranded);
  cg_nccl_oneshot_free(&n->oneshot, n->aborted);
  cudaSetDevice(previous);
  cg_mpi_comm_close(n->control);
  cg_nccl_windows_free(&n->windows);
  free(n);
}

/* After a timeout the last release frees the MPI duplicates on its own
 * thread, and the NCCL teardown (destroy_impl) follows on the abort thread. */
static void detach_host(void *impl) {
  cg_nccl_comm_t *n = impl;
  cg_mpi_comm_close(n->control);
  n->control = NULL;
}

static cg_status_t control_allgather_start(void **request, void *impl, const void *mine, void *all, size_t bytes) {
  return cg_mpi_control_allgather_start(request, ((cg_nccl_comm_t *)impl)->control, mine, all, bytes);
}

static cg_status_t control_test(int *done, void *impl, void *request) {
  return cg_mpi_control_test(done, ((cg_nccl_comm_t *)impl)->control, request);
}

static void control_answer(void *impl, const char *waiting_in) {
  cg_mpi_comm_t *m = ((cg_nccl_comm_t *)impl)->control;
  if (m) cg_mpi_control_answer(m, waiting_in);
}

static void control_roll_call(char *report, size_t size, void *impl, const char *waiting_in, double timeout_s) {
  cg_mpi_comm_t *m = ((cg_nccl_comm_t *)impl)->control;
  if (m)
    cg_mpi_control_roll_call(report, size, m, waiting_in, timeout_s);
  else
    snprintf(report, size, "no roll call (the communicator was aborted)");
}

static int control_any_thread(void *impl) {
  cg_mpi_comm_t *m = ((cg_nccl_comm_t *)impl)->control;
  return m && cg_mpi_control_any_thread(m);
}

static void control_abandon(void *impl, void *request, const char *why) {
  cg_mpi_comm_t *m = ((cg_nccl_comm_t *)impl)->control;
  if (m) cg_mpi_control_abandon(m, request, why);
}

/* The cost model's table (cost_model.c) and the kernels' measured sizes
 * count alike: 1 KB << k, the same number of sizes. */
_Static_assert(CG_COST_PATH_SIZES == CG_NCCL_MEASURED_SIZES && CG_NCCL_MEASURED_MIN_BYTES == 1024,
               "the cost model's path table and the measured sizes differ");

static int collective_path_us(double *path_us, double *library_us, void *impl, cg_node_kind_t kind, cg_dtype_t dtype,
                              cg_redop_t op, size_t bytes) {
  return cg_nccl_oneshot_path_us(path_us, library_us, impl, kind, dtype, op, bytes);
}

static size_t bucket_bytes(void *impl) {
  return ((cg_nccl_comm_t *)impl)->peer_links ? CG_NCCL_BUCKET_BYTES_PEER : CG_NCCL_BUCKET_BYTES_NETWORK;
}

/* Whether every rank is on one node and its GPU can access the other ranks'
 * GPUs directly; agreed by all ranks. */
static int find_peer_links(int device, const cg_mpi_comm_t *control) {
  int ok = control->one_node, local_size = 0, p2p_disabled = 0, set = 0;
  /* NCCL then moves data as between nodes, whatever the hardware offers. A
   * value this cannot read is said on stderr and taken as unset (NCCL has
   * its own rules), never a failure here, inside a collective creation. */
  cg_param_ordinal(&p2p_disabled, &set, CG_PARAM_NCCL_P2P_DISABLE, NULL);
  if (set && p2p_disabled) ok = 0;
  MPI_Comm local = MPI_COMM_NULL;
  if (ok && MPI_Comm_split_type(control->control, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS &&
      local != MPI_COMM_NULL) {
    MPI_Comm_size(local, &local_size);
    int *devices = malloc((size_t)local_size * sizeof *devices);
    if (devices && MPI_Allgather(&device, 1, MPI_INT, devices, 1, MPI_INT, local) == MPI_SUCCESS) {
      for (int r = 0; r < local_size && ok; r++) {
        int can = 0;
        if (devices[r] == device) continue;
        ok = cudaDeviceCanAccessPeer(&can, device, devices[r]) == cudaSuccess && can;
      }
    } else {
      ok = 0;
    }
    free(devices);
    MPI_Comm_free(&local);
  }
  return cg_nccl_all_ranks_ok(ok, control->control);
}

/* The fingerprint communicator's abort, on a thread of abort_comm's. */
typedef struct print_abort {
  ncclComm_t print;
  int device;
} print_abort_t;

static void *abort_print(void *arg) {
  print_abort_t *job = arg;
  cg_cuda_thread_relax_capture(); /* a thread of ours: its calls leave the program's captures alone */
  cudaSetDevice(job->device);
  ncclCommAbort(job->print);
  return NULL;
}

/* A timed-out replay's kernels wait for peers that will not come;
 * ncclCommAbort stops them and frees the communicator's resources. A
 * communicator of the user's (cg_comm_from_nccl) is aborted too: its
 * operations in our graph would otherwise hang the device forever. The
 * user's communicator of cg_comm_create goes along only if cg_comm_nccl never
 * handed it out: otherwise the program may be inside a call on it, which an
 * abort must not race, and the destroy aborts it. */
static void abort_comm(void *impl) {
  cg_nccl_comm_t *n = impl;
  if (!n->nccl || n->aborted) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(n->device);
  cg_nccl_oneshot_abort(&n->oneshot); /* its kernels wait for peers outside NCCL */
  ncclComm_t print = atomic_load(&n->print);
  if (!print && atomic_load(&n->print_given_up)) print = *(ncclComm_t volatile *)&n->print_pending;
  /* Both at once: an abort raises its kernels' flag and then tears its
   * transport down, which over NCCL's sockets takes about a second. One after
   * the other, the replay's kernels waited for the fingerprint communicator's
   * teardown (4 ranks sharing 2 H200s: still running 0.25 s after the report). */
  print_abort_t job = {print, n->device};
  pthread_t print_thread;
  int print_apart = print && pthread_create(&print_thread, NULL, abort_print, &job) == 0;
  if (print && !print_apart) ncclCommAbort(print);
  ncclCommAbort(n->nccl);
  if (print_apart) pthread_join(print_thread, NULL);
  n->aborted = 1;
  int untouched = CG_NCCL_USER_UNTOUCHED;
  if (n->owns_nccl && n->user_nccl != n->nccl &&
      atomic_compare_exchange_strong(&n->user_state, &untouched, CG_NCCL_USER_ABORTED))
    ncclCommAbort(n->user_nccl);
  cudaSetDevice(previous);
}

const cg_backend_t cg_nccl_backend = {
    .interface_version = CG_BACKEND_INTERFACE_VERSION,
    .name = "nccl",
    .memory = CG_BACKEND_DEVICE_MEMORY,
    .node_kinds = (1u << CG_NODE_ALLREDUCE) | (1u << CG_NODE_BROADCAST) | (1u << CG_NODE_REDUCE) |
                  (1u << CG_NODE_ALLGATHER) | (1u << CG_NODE_REDUCE_SCATTER) | (1u << CG_NODE_ALLTOALL) |
                  (1u << CG_NODE_GATHER) | (1u << CG_NODE_SCATTER) | (1u << CG_NODE_SEND) | (1u << CG_NODE_RECV) |
                  (1u << CG_NODE_BARRIER),
    .dtypes = (1u << CG_DTYPE_COUNT) - 1u,
    .control_allgather_start = control_allgather_start,
    .control_test = control_test,
    .control_answer = control_answer,
    .control_roll_call = control_roll_call,
    .control_any_thread = control_any_thread,
    .control_abandon = control_abandon,
    .device_warmup = cg_nccl_warmup,
    .device_group_start = cg_nccl_group_start,
    .device_group_end = cg_nccl_group_end,
    .device_step_enqueue = cg_nccl_step_enqueue,
    .device_allgather_setup = cg_nccl_print_setup,
    .device_allgather_enqueue = cg_nccl_allgather_enqueue,
    .step_call = cg_nccl_step_call,
    .bucket_bytes = bucket_bytes,
    .collective_path_us = collective_path_us,
    .step_on_own_path = cg_nccl_step_on_own_kernel,
    .abort = abort_comm,
};

static const cg_comm_ops_t nccl_ops = {.backend_name = "nccl", .destroy_impl = destroy_impl,
                                       .detach_host = detach_host, .backend = &cg_nccl_backend,
                                       .memory_fits = cg_memory_fits};

/* The barrier word, on the communicator's device; "" or why not (the CUDA
 * error's detail, as cg_fail_cuda words it). */
static void alloc_barrier_word(cg_nccl_comm_t *n, char *why, size_t size) {
  int previous = 0;
  cudaGetDevice(&previous);
  const char *call = "cudaSetDevice";
  cudaError_t err = cudaSetDevice(n->device);
  /* padded: NCCL reads its buffers in 16-byte units */
  if (err == cudaSuccess) {
    call = "cudaMalloc";
    err = cudaMalloc(&n->barrier_word, cg_pad16(sizeof(int32_t)));
  }
  if (err != cudaSuccess) n->barrier_word = NULL;
  if (err == cudaSuccess) {
    call = "cudaMemset";
    err = cudaMemset(n->barrier_word, 0, cg_pad16(sizeof(int32_t)));
  }
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    cg_fail_cuda(err, call, "allocating the barrier word (4 bytes) on device %d", n->device);
    snprintf(why, size, "%s", cg_error_last());
  }
}

/* Wraps an initialized NCCL communicator, lists it, and makes sure every rank
 * did; on failure every rank returns an error and the caller frees n. */
static cg_status_t finish(cg_comm_t **out, cg_nccl_comm_t *n, int rank, int size, const char *caller) {
  uint64_t id = 0;
  cg_comm_t *comm = NULL;
  n->peer_links = find_peer_links(n->device, n->control);
  cg_status_t st = cg_mpi_agree_on_id(&id, n->control->control);
  if (st == CG_SUCCESS && !(comm = cg_comm_alloc(rank, size, &nccl_ops, n)))
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the communicator", caller);
  if (comm) {
    comm->device = n->device;
    comm->id = id;
    if (!cg_comm_register(comm)) st = cg_fail(CG_ERR_NO_MEMORY, "%s: listing the communicator", caller);
  }
  if (!cg_nccl_all_ranks_ok(st == CG_SUCCESS, n->control->control)) {
    if (comm) {
      comm->impl = NULL; /* the caller frees n */
      cg_comm_destroy(comm);
    }
    return st != CG_SUCCESS ? st
                            : cg_fail(CG_ERR_BACKEND, "%s: another rank could not finish creating the communicator",
                                      caller);
  }
  *out = comm;
  return CG_SUCCESS;
}

/* Frees a communicator that failed half-way: NCCL communicators commgraph
 * created are aborted, not finalized (finalizing waits for peers that may
 * have given up). */
static void discard(cg_nccl_comm_t *n) {
  if (n && n->owns_nccl) {
    if (n->user_nccl && n->user_nccl != n->nccl) ncclCommAbort(n->user_nccl);
    if (n->nccl) ncclCommAbort(n->nccl);
    n->nccl = n->user_nccl = NULL;
  }
  destroy_impl(n);
}

cg_status_t cg_nccl_comm_create(cg_comm_t **out, MPI_Comm mpi, int device, int thread_level, double timeout_s) {
  cg_status_t st = CG_SUCCESS;
  cg_nccl_comm_t *n = NULL;
  int devices = 0, rank = 0, size = 0, previous = 0, all_ok = 0;
  char why[300] = "";
  /* the first CUDA calls may set the driver up, and one rank may stall there
   * alone: the agreement after them waits at most timeout_s */
  cudaError_t cerr = cudaGetDeviceCount(&devices);
  if (!(n = calloc(1, sizeof *n)))
    snprintf(why, sizeof why, "allocating the communicator");
  else if (cerr != cudaSuccess) {
    cg_fail_cuda(cerr, "cudaGetDeviceCount", "no usable CUDA device");
    snprintf(why, sizeof why, "%s", cg_error_last());
  } else if (device >= devices)
    snprintf(why, sizeof why, "device %d does not exist (this process sees %d)", device, devices);
  if (n && !why[0]) {
    n->device = device;
    n->owns_nccl = 1;
    alloc_barrier_word(n, why, sizeof why);
  }
  if ((st = cg_mpi_setup_all_ok(&all_ok, !why[0], mpi, timeout_s, "cg_comm_create",
                                "the set-up of each rank's device for the nccl backend")) != CG_SUCCESS)
    goto out;
  if (!all_ok) {
    st = cg_fail(n ? CG_ERR_INVALID_ARGUMENT : CG_ERR_NO_MEMORY, "cg_comm_create: nccl backend: %s",
                 why[0] ? why : "another rank cannot use its device");
    goto out;
  }
  if ((st = cg_mpi_comm_open(&n->control, mpi, thread_level, timeout_s)) != CG_SUCCESS) goto out;
  MPI_Comm_rank(n->control->control, &rank);
  MPI_Comm_size(n->control->control, &size);
  struct {
    int ok;
    ncclUniqueId ids[2]; /* the plan's, the user's */
  } hello = {0};
  ncclResult_t r = ncclSuccess;
  if (rank == 0) {
    r = ncclGetUniqueId(&hello.ids[0]);
    if (r == ncclSuccess) r = ncclGetUniqueId(&hello.ids[1]);
    hello.ok = r == ncclSuccess;
  }
  if ((st = cg_mpi_setup_bcast(&hello, (int)sizeof hello, 0, mpi, timeout_s, "cg_comm_create",
                               "the NCCL unique ids from rank 0")) != CG_SUCCESS)
    goto out;
  if (!hello.ok) {
    st = rank == 0 ? cg_fail_nccl(r, NULL, "ncclGetUniqueId", "cg_comm_create: nccl backend on device %d, rank 0",
                                  device)
                   : cg_fail(CG_ERR_BACKEND, "cg_comm_create: ncclGetUniqueId failed on rank 0");
    goto out;
  }
  cudaGetDevice(&previous);
  cerr = cudaSetDevice(device);
  char which[80] = "the communicators";
  r = cerr == cudaSuccess ? cg_nccl_init_pair(n, size, rank, hello.ids, mpi, timeout_s, which, sizeof which)
                          : ncclUnhandledCudaError;
  cudaSetDevice(previous);
  if (r == ncclInProgress) { /* timed out: reported */
    st = CG_ERR_TIMEOUT;
    goto out;
  }
  if ((st = cg_mpi_setup_all_ok(&all_ok, r == ncclSuccess, mpi, timeout_s, "cg_comm_create",
                                "NCCL's init on every rank")) != CG_SUCCESS)
    goto out;
  if (!all_ok) {
    if (cerr != cudaSuccess) {
      st = cg_fail_cuda(cerr, "cudaSetDevice", "cg_comm_create: nccl backend on device %d, rank %d", device, rank);
    } else if (r != ncclSuccess) {
      st = cg_fail_nccl(r, NULL, "ncclCommInitRankConfig", "cg_comm_create: %s on device %d, rank %d of %d", which,
                        device, rank, size);
    } else {
      st = cg_fail(CG_ERR_BACKEND, "cg_comm_create: ncclCommInitRankConfig failed on another rank");
    }
    goto out;
  }
  if ((st = finish(out, n, rank, size, "cg_comm_create")) != CG_SUCCESS) goto out;
  n = NULL;
out:
  discard(n);
  return st;
}

/* A cg_deadline_t's answer: roll calls on the MPI communicator *ctx. */
static void answer_on_mpi(void *ctx, const char *waiting_in) { cg_mpi_answer_roll_calls(*(MPI_Comm *)ctx, waiting_in); }

cg_status_t cg_comm_from_nccl(cg_comm_t **out, ncclComm_t nccl, MPI_Comm mpi) {
  cg_status_t st = CG_SUCCESS;
  cg_nccl_comm_t *n = NULL;
  int initialized = 0, finalized = 0, level = MPI_THREAD_SINGLE;
  int nccl_rank = -1, nccl_size = -1, device = -1, rank = 0, size = 0;
  ncclResult_t async = ncclSuccess;
  char why[300] = "";
  if (!out || !nccl)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_from_nccl: NULL %s", out ? "NCCL communicator" : "out");
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_from_nccl: MPI is %s", finalized ? "finalized" : "not initialized");
  if (mpi == MPI_COMM_NULL) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_from_nccl: MPI_COMM_NULL");
  /* no options here: CG_TIMEOUT bounds the wait for the other ranks, as
   * cg_comm_create's default does, and the set-ups on the communicator */
  double timeout_s = 0;
  if ((st = cg_param_seconds(&timeout_s, NULL, CG_PARAM_TIMEOUT, "cg_comm_from_nccl")) != CG_SUCCESS) return st;
  if ((st = cg_mpi_arrive(mpi, timeout_s, "cg_comm_from_nccl")) != CG_SUCCESS) return st;
  MPI_Query_thread(&level);
  MPI_Comm_rank(mpi, &rank);
  MPI_Comm_size(mpi, &size);
  ncclResult_t r = ncclCommUserRank(nccl, &nccl_rank);
  if (r == ncclSuccess) r = ncclCommCount(nccl, &nccl_size);
  if (r == ncclSuccess) r = ncclCommCuDevice(nccl, &device);
  if (r == ncclSuccess) r = ncclCommGetAsyncError(nccl, &async);
  /* a non-blocking communicator may still be finishing the user's last call
   * (an init or split waiting for a rank that never comes): at most the
   * timeout, answering the others' roll calls meanwhile */
  if (r == ncclSuccess && async == ncclInProgress) {
    cg_deadline_t deadline;
    cg_deadline_start(&deadline, timeout_s, timeout_s > 0 ? answer_on_mpi : NULL, &mpi,
                      "cg_comm_from_nccl (the NCCL communicator's last call, still in progress)");
    const cg_wait_t wait = {cg_deadline_go_on, &deadline};
    if ((async = cg_nccl_settle_within(nccl, async, &wait)) == ncclInProgress) {
      st = cg_fail(CG_ERR_TIMEOUT, "cg_comm_from_nccl: rank %d of %d: the NCCL communicator was still busy with the "
                   "program's last call on it (ncclInProgress) after %g s (CG_TIMEOUT): the other ranks wait for "
                   "this one in their check of it", rank, size, timeout_s);
      fprintf(stderr, "commgraph: %s\n", cg_error_last());
      return st;
    }
  }
  if (r != ncclSuccess || async != ncclSuccess) {
    /* a query failed, or the communicator holds an error of an earlier call */
    cg_fail_nccl(r != ncclSuccess ? r : async, nccl,
                 r != ncclSuccess ? "ncclCommUserRank/ncclCommCount/ncclCommCuDevice" : "ncclCommGetAsyncError",
                 "the NCCL communicator of MPI rank %d", rank);
    snprintf(why, sizeof why, "%s", cg_error_last());
  } else if (nccl_rank != rank || nccl_size != size)
    snprintf(why, sizeof why, "NCCL rank %d of %d is MPI rank %d of %d: the ranks must be the same", nccl_rank,
             nccl_size, rank, size);
  if (!why[0] && !(n = calloc(1, sizeof *n))) snprintf(why, sizeof why, "allocating the communicator");
  if (n) {
    n->nccl = n->user_nccl = nccl;
    n->device = device;
    alloc_barrier_word(n, why, sizeof why);
  }
  int all_ok = 0;
  if ((st = cg_mpi_setup_all_ok(&all_ok, !why[0], mpi, timeout_s, "cg_comm_from_nccl",
                                "each rank's check of its NCCL communicator")) != CG_SUCCESS)
    goto out;
  if (!all_ok) {
    if (why[0])
      st = cg_fail(r != ncclSuccess || async != ncclSuccess || n ? CG_ERR_BACKEND : CG_ERR_INVALID_ARGUMENT,
                   "cg_comm_from_nccl: %s", why);
    else
      st = cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_from_nccl: the NCCL communicator does not fit on another rank");
    goto out;
  }
  if ((st = cg_mpi_comm_open(&n->control, mpi, level, timeout_s)) != CG_SUCCESS) goto out;
  if ((st = finish(out, n, rank, size, "cg_comm_from_nccl")) != CG_SUCCESS) goto out;
  n = NULL;
  (*out)->setup_timeout_s = timeout_s > 0 ? timeout_s : 0;
out:
  destroy_impl(n);
  return st;
}

cg_status_t cg_comm_nccl(ncclComm_t *out, const cg_comm_t *comm) {
  if (!out || !comm) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_nccl: NULL %s", out ? "comm" : "out");
  if (comm->ops != &nccl_ops)
    return cg_fail(CG_ERR_UNSUPPORTED, "cg_comm_nccl: the communicator's backend (%s) is not nccl",
                   comm->ops ? comm->ops->backend_name : "none");
  cg_nccl_comm_t *n = comm->impl;
  int state = CG_NCCL_USER_UNTOUCHED;
  if (!atomic_compare_exchange_strong(&n->user_state, &state, CG_NCCL_USER_HANDED_OUT) &&
      state == CG_NCCL_USER_ABORTED) {
    cg_status_t st = cg_comm_refuse_if_aborted(comm, "cg_comm_nccl");
    /* aborted by the backend alone (no replay marked it): a timeout all the same */
    return st != CG_SUCCESS ? st : cg_fail(CG_ERR_TIMEOUT, "cg_comm_nccl: communicator %016llx (rank %d of %d) was "
                                           "aborted", (unsigned long long)comm->id, comm->rank, comm->size);
  }
  *out = n->user_nccl;
  return CG_SUCCESS;
}

cg_nccl_comm_t *cg_nccl_comm_of(const cg_comm_t *comm) { return comm->ops == &nccl_ops ? comm->impl : NULL; }

const cg_mpi_comm_t *cg_nccl_comm_control(const cg_comm_t *comm) {
  return comm->ops == &nccl_ops ? ((const cg_nccl_comm_t *)comm->impl)->control : NULL;
}
