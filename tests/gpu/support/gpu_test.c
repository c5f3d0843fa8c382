#include "gpu_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int world_rank, world_size, device = -1;
static cg_comm_t *shared[CG_GPU_SHARED_COMMS];
static cudaStream_t stream;
static int have_stream;

int cg_gpu_rank(void) { return world_rank; }
int cg_gpu_size(void) { return world_size; }
int cg_gpu_device(void) { return device; }

TCase *cg_gpu_tcase(const char *name) { return cg_mpi_tcase_limit(name, CG_GPU_TEST_TIMEOUT); }

/* ---- one GPU per rank, or shared (share_gpus.h) */

/* 1 if this rank has a GPU (device = node-local rank; with CG_TEST_SHARE_GPUS
 * that modulo the GPUs), else 0 with the reason in `why`. */
static int pick_device(char *why, size_t len) {
  MPI_Comm local;
  int local_rank = 0, local_size = 1, count = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    snprintf(why, len, "no usable GPU (cudaGetDeviceCount: %s)", cudaGetErrorString(err));
    return 0;
  }
  if (count < local_size && !cg_test_share_gpus()) {
    snprintf(why, len, "%d GPU(s) on this node for %d ranks on it; one GPU per rank is needed "
             "(or CG_TEST_SHARE_GPUS=1)", count, local_size);
    return 0;
  }
  int chosen = count > 0 ? local_rank % count : 0;
  if ((err = cudaSetDevice(chosen)) != cudaSuccess || (err = cudaFree(NULL)) != cudaSuccess) {
    snprintf(why, len, "cannot use GPU %d (%s)", chosen, cudaGetErrorString(err));
    return 0;
  }
  device = chosen;
  return 1;
}

static int gpu_required(void) {
  const char *v = getenv("CG_REQUIRE_GPU");
  return v && *v && strcmp(v, "0") != 0;
}

int cg_gpu_test_main(Suite *suite, const char *name) {
  int provided = 0;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  cg_mpi_test_adopt(world_rank, world_size);
  setenv("NCCL_NVLS_ENABLE", "0", 0); /* NVLink multicast stays off on shared hosts (unless set) */
  int sharing = cg_test_share_gpus_setup(world_rank);
  char why[256] = "";
  int mine = pick_device(why, sizeof why);
  if (!cg_mpi_all(mine)) {
    if (mine) snprintf(why, sizeof why, "another rank has no GPU of its own");
    int required = gpu_required();
    printf("%s %s (rank %d of %d): %s%s\n", required ? "FAILED" : "SKIPPED", name, world_rank, world_size, why,
           required ? " (CG_REQUIRE_GPU is set)" : "");
    fflush(stdout);
    srunner_free(srunner_create(suite)); /* frees the suite */
    MPI_Finalize();
    return required ? EXIT_FAILURE : 77;
  }
  unsigned long long seed = cg_test_seed();
  MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  cg_test_set_seed(seed);
  if (world_rank == 0) {
    printf("%d ranks, %s, seed: CG_TEST_SEED=%llu\n", world_size,
           sharing ? "sharing GPUs (CG_TEST_SHARE_GPUS; NCCL over sockets)" : "one GPU each", seed);
    fflush(stdout);
  }
  SRunner *runner = srunner_create(suite);
  srunner_set_fork_status(runner, CK_NOFORK);
  srunner_run_all(runner, world_rank == 0 ? CK_VERBOSE : CK_NORMAL);
  int failed = srunner_ntests_failed(runner);
  srunner_free(runner);
  for (int i = 0; i < CG_GPU_SHARED_COMMS; i++) cg_comm_destroy(shared[i]);
  if (have_stream) cudaStreamDestroy(stream);
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* ---- communicators, buffers, streams */

/* CG_GPU_TEST_BACKEND: nccl (default), mpi (staged), hosttransfer, direct
 * (mpi with CG_STAGING_DIRECT), or mixed: nccl, mpi and hosttransfer in turn,
 * one per communicator created, so plans over several communicators mix
 * backends (every rank creates its communicators in the same order, so they
 * agree). */
static const char *requested = "nccl";

const char *cg_gpu_requested_backend(void) { return requested; }

static cg_backend_kind_t test_backend(void) {
  static const cg_backend_kind_t turn[] = {CG_BACKEND_NCCL, CG_BACKEND_MPI, CG_BACKEND_HOSTTRANSFER};
  static unsigned created;
  const char *b = getenv("CG_GPU_TEST_BACKEND");
  if (!b || !*b || strcmp(b, "nccl") == 0) return CG_BACKEND_NCCL;
  if (strcmp(b, "mpi") == 0 || strcmp(b, "direct") == 0) return CG_BACKEND_MPI;
  if (strcmp(b, "hosttransfer") == 0) return CG_BACKEND_HOSTTRANSFER;
  ck_assert_msg(strcmp(b, "mixed") == 0, "CG_GPU_TEST_BACKEND=%s: use nccl, mpi, hosttransfer or mixed", b);
  return turn[created++ % 3];
}

cg_comm_t *cg_gpu_nccl_comm(MPI_Comm mpi) {
  cg_comm_t *c = NULL;
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  o.backend = test_backend();
  o.device = device;
  if (cg_gpu_direct()) o.staging = CG_STAGING_DIRECT;
  requested = o.backend == CG_BACKEND_MPI ? "mpi-staged" : cg_backend_kind_name(o.backend);
  cg_status_t st = cg_comm_create(&c, mpi, &o);
  char what[400];
  snprintf(what, sizeof what, "cg_comm_create (%s, device %d): %s: %s", cg_backend_kind_name(o.backend), device,
           cg_status_string(st), st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, what);
  return c;
}

cg_comm_t *cg_gpu_nccl_only_comm(const char *suite) {
  cg_comm_t *comm = cg_gpu_nccl_comm(MPI_COMM_WORLD);
  const char *backend = NULL;
  ck_assert_cg_ok(cg_comm_backend_name(&backend, comm));
  if (strcmp(backend, "nccl") == 0) return comm;
  if (cg_gpu_rank() == 0) printf("%s: skipped: CG_GPU_TEST_BACKEND chose %s, not nccl\n", suite, backend);
  cg_comm_destroy(comm);
  return NULL;
}

cg_comm_t *cg_gpu_shared_comm(int i) {
  ck_assert_int_lt(i, CG_GPU_SHARED_COMMS);
  if (!shared[0])
    for (int k = 0; k < CG_GPU_SHARED_COMMS; k++) shared[k] = cg_gpu_nccl_comm(MPI_COMM_WORLD);
  return shared[i];
}

int cg_gpu_direct(void) {
  const char *b = getenv("CG_GPU_TEST_BACKEND");
  return b && strcmp(b, "direct") == 0;
}

void *cg_gpu_alloc(size_t bytes) {
  void *p = NULL;
  /* NCCL reads user buffers in 16-byte units, up to 15 bytes past their end
   * (NVIDIA/nccl#265): padded as docs/safety.md tells users to, so that
   * compute-sanitizer's memcheck sees no read outside the allocation */
  size_t padded = (bytes + 2 * 15) & ~(size_t)15;
  /* managed memory reaches MPI directly even when MPI is not CUDA-aware
   * (neither MPI here is), so direct steps run on it */
  if (cg_gpu_direct())
    CUDA_OK(cudaMallocManaged(&p, padded, cudaMemAttachGlobal));
  else
    CUDA_OK(cudaMalloc(&p, padded));
  CUDA_OK(cudaMemset(p, CG_MPI_POISON, padded));
  CUDA_OK(cudaDeviceSynchronize()); /* done before work on any stream touches it */
  return p;
}

void cg_gpu_free(void *p) { CUDA_OK(cudaFree(p)); }

cudaStream_t cg_gpu_stream(void) {
  if (!have_stream) {
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    have_stream = 1;
  }
  return stream;
}

char *cg_gpu_plan_dot(const cg_plan_t *plan) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  cg_status_t st = cg_plan_write_dot(plan, f);
  fclose(f);
  ck_assert_msg(st == CG_SUCCESS, "cg_plan_write_dot: %s: %s", cg_status_string(st), cg_error_last());
  return text;
}


cg_plan_t *cg_gpu_compile_all_ranks(cg_graph_t *g, const char *what) {
  cg_plan_t *plan = NULL;
  cg_status_t st = cg_compile(&plan, g, NULL);
  char text[600];
  snprintf(text, sizeof text, "%s: cg_compile: %s", what, st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, text);
  return plan;
}
