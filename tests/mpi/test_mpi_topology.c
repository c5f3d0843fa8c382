/* Node topology on real ranks (backends/node): local ranks, the device a rank
 * takes (CG_DEVICE or local rank), pinned host memory near a GPU, binding a
 * thread near a GPU, the machine description. All ranks run on one machine
 * here, so the node's ranks are the world's. Without a GPU the device parts
 * check that each call refuses cleanly; with GPUs they check what it chose.
 * Every check that can differ between ranks is agreed on before asserting, so
 * a failure on one rank does not leave the others waiting in a collective. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"
#include "node/topology.h"
#if CG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if defined(CG_HAVE_HWLOC) && CG_HAVE_HWLOC
#include <hwloc.h>
#endif

/* CUDA devices this process sees; 0 without a driver or without CUDA. */
static int gpu_count(void) {
#if CG_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

/* GPUs on every rank, or none on any: the GPU-only checks need all ranks in. */
static int all_have_gpus(void) { return cg_mpi_all(gpu_count() > 0); }

START_TEST(topo__local_ranks_are_distinct_and_cover_the_node) {
  int local = -1, local_size = -1, rank = cg_mpi_rank(), size = cg_mpi_size();
  cg_status_t st = cg_topo_local_rank(&local, &local_size, MPI_COMM_WORLD);
  ck_assert_all_ranks(st == CG_SUCCESS, cg_error_last());
  int *all = calloc((size_t)size, sizeof *all), *seen = calloc((size_t)size, sizeof *seen);
  ck_assert_ptr_nonnull(all);
  ck_assert_ptr_nonnull(seen);
  MPI_Allgather(&local, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
  int ok = 1;
  for (int r = 0; r < size; r++) {
    if (all[r] < 0 || all[r] >= size) {
      ok = 0;
      continue;
    }
    seen[all[r]]++;
  }
  for (int l = 0; l < size; l++) ok &= seen[l] == 1;
  ck_assert_all_ranks(local >= 0 && local < local_size, "local rank within [0, local size)");
  ck_assert_all_ranks(local_size == size, "one machine: the node's ranks are all the ranks");
  ck_assert_all_ranks(ok, "local ranks distinct, covering 0 .. local size - 1");
  /* split with the world rank as key: local ranks keep the world's order */
  ck_assert_all_ranks(local == rank, "local rank == world rank on one node");
  free(all);
  free(seen);
}
END_TEST

START_TEST(topo__bad_arguments_are_refused) {
  int x = 0;
  ck_assert_cg_status(cg_topo_local_rank(NULL, &x, MPI_COMM_WORLD), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_topo_local_rank(&x, NULL, MPI_COMM_WORLD), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_topo_local_rank(&x, &x, MPI_COMM_NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_topo_device_for_local_rank(NULL, MPI_COMM_WORLD), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_topo_host_alloc(NULL, 64, 0), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_topo_bind_thread_near(NULL, 0), CG_ERR_INVALID_ARGUMENT);
}
END_TEST

/* cg_topo_device_for_local_rank with CG_DEVICE set to `value` (NULL: unset). */
static cg_status_t device_with(int *device, const char *value) {
  if (value) setenv("CG_DEVICE", value, 1);
  else unsetenv("CG_DEVICE");
  *device = -7;
  cg_status_t st = cg_topo_device_for_local_rank(device, MPI_COMM_WORLD);
  unsetenv("CG_DEVICE");
  return st;
}

START_TEST(topo__device_is_local_rank_modulo_gpus_unless_cg_device_says) {
  int local = 0, local_size = 0, device = -7, count = gpu_count();
  ck_assert_cg_ok(cg_topo_local_rank(&local, &local_size, MPI_COMM_WORLD));
  /* the same calls on every rank, in the same order: each one is collective */
  cg_status_t by_rank = device_with(&device, NULL);
  int chosen_by_rank = device;
  cg_status_t by_env = device_with(&device, "0");
  int chosen_by_env = device;
  char last[16];
  snprintf(last, sizeof last, "%d", count > 0 ? count - 1 : 0);
  cg_status_t by_env_last = device_with(&device, last);
  int chosen_last = device;
  cg_status_t words = device_with(&device, "gpu1");
  snprintf(last, sizeof last, "%d", count);
  cg_status_t past_end = device_with(&device, last);
  cg_status_t negative = device_with(&device, "-1");
  if (!all_have_gpus()) {
    ck_assert_all_ranks(by_rank == CG_ERR_UNSUPPORTED, "no GPU: unsupported");
    ck_assert_all_ranks(by_env == CG_ERR_UNSUPPORTED && by_env_last == CG_ERR_UNSUPPORTED,
                        "no GPU: unsupported with CG_DEVICE too");
    ck_assert_all_ranks(words == CG_ERR_UNSUPPORTED && negative == CG_ERR_UNSUPPORTED,
                        "no GPU: unsupported before CG_DEVICE is read");
    return;
  }
  ck_assert_all_ranks(by_rank == CG_SUCCESS && chosen_by_rank == local % count, "device = local rank % GPUs");
  ck_assert_all_ranks(by_env == CG_SUCCESS && chosen_by_env == 0, "CG_DEVICE=0");
  ck_assert_all_ranks(by_env_last == CG_SUCCESS && chosen_last == count - 1, "CG_DEVICE = last device");
  ck_assert_all_ranks(words == CG_ERR_INVALID_ARGUMENT, "CG_DEVICE=gpu1 refused");
  ck_assert_all_ranks(past_end == CG_ERR_INVALID_ARGUMENT, "CG_DEVICE past the last device refused");
  ck_assert_all_ranks(negative == CG_ERR_INVALID_ARGUMENT, "CG_DEVICE=-1 refused");
}
END_TEST

START_TEST(topo__numa_node_of_a_bad_device_is_unknown) {
  ck_assert_int_eq(cg_topo_gpu_numa_node(-5), -1);
  ck_assert_int_eq(cg_topo_gpu_numa_node(1 << 20), -1);
  int count = gpu_count();
  for (int d = 0; d < count; d++) ck_assert_int_ge(cg_topo_gpu_numa_node(d), -1);
}
END_TEST

#if CG_HAVE_CUDA && defined(CG_HAVE_HWLOC) && CG_HAVE_HWLOC
/* 1 when every page of [p, p + bytes) is on NUMA node `node`, 0 when some
 * page is elsewhere, -1 when the system will not say (move_pages refused). */
static int pages_on_node(const void *p, size_t bytes, int node) {
  hwloc_topology_t t;
  int on = -1;
  if (hwloc_topology_init(&t) != 0) return -1;
  hwloc_nodeset_t where = hwloc_bitmap_alloc();
  if (where && hwloc_topology_load(t) == 0 &&
      hwloc_get_area_memlocation(t, p, bytes, where, HWLOC_MEMBIND_BYNODESET) == 0)
    on = hwloc_bitmap_weight(where) == 1 && hwloc_bitmap_isset(where, (unsigned)node);
  hwloc_bitmap_free(where);
  hwloc_topology_destroy(t);
  return on;
}
#endif

START_TEST(topo__host_alloc_of_nothing_and_without_a_gpu) {
  void *p = (void *)&p;
  ck_assert_cg_ok(cg_topo_host_alloc(&p, 0, 0));
  ck_assert_ptr_null(p);
  p = (void *)&p;
  ck_assert_cg_ok(cg_topo_host_alloc(&p, 0, -5)); /* nothing asked: the device is not looked at */
  ck_assert_ptr_null(p);
  cg_topo_host_free(NULL, 0);
  int not_ours = 0;
  cg_topo_host_free(&not_ours, sizeof not_ours); /* ignored, not freed */
  if (gpu_count() > 0) return;
  p = (void *)&p;
  cg_status_t st = cg_topo_host_alloc(&p, 1 << 20, 0);
  ck_assert_msg(st != CG_SUCCESS, "allocated pinned memory without a GPU");
  ck_assert_cg_status(st, CG_ERR_UNSUPPORTED);
  ck_assert_ptr_null(p);
}
END_TEST

START_TEST(topo__host_alloc_is_pinned_mapped_and_near_the_gpu) {
#if CG_HAVE_CUDA
  if (gpu_count() == 0) return;
  enum { BYTES = 3 << 20 };
  int device = cg_mpi_rank() % gpu_count(), previous = 0;
  unsigned char *host = NULL, *back = malloc(BYTES), *dev = NULL;
  ck_assert_ptr_nonnull(back);
  ck_assert_cg_ok(cg_topo_host_alloc((void **)&host, BYTES, device));
  ck_assert_ptr_nonnull(host);
  ck_assert_uint_eq((uintptr_t)host % 4096u, 0);
  for (size_t i = 0; i < BYTES; i++) host[i] = (unsigned char)(i * 7u + 3u);
  unsigned flags = 0;
  ck_assert_int_eq(cudaHostGetFlags(&flags, host), cudaSuccess);
  ck_assert_msg(flags & cudaHostAllocMapped, "not mapped (flags %#x)", flags);
  void *mapped = NULL;
  ck_assert_int_eq(cudaHostGetDevicePointer(&mapped, host, 0), cudaSuccess);
  ck_assert_ptr_nonnull(mapped);
  /* through the device and back */
  cudaGetDevice(&previous);
  ck_assert_int_eq(cudaSetDevice(device), cudaSuccess);
  ck_assert_int_eq(cudaMalloc((void **)&dev, BYTES), cudaSuccess);
  ck_assert_int_eq(cudaMemcpy(dev, host, BYTES, cudaMemcpyHostToDevice), cudaSuccess);
  ck_assert_int_eq(cudaMemcpy(back, dev, BYTES, cudaMemcpyDeviceToHost), cudaSuccess);
  ck_assert_int_eq(memcmp(back, host, BYTES), 0);
  cudaFree(dev);
  cudaSetDevice(previous);
#if defined(CG_HAVE_HWLOC) && CG_HAVE_HWLOC
  int node = cg_topo_gpu_numa_node(device);
  if (node >= 0) ck_assert_msg(pages_on_node(host, BYTES, node) != 0, "pages are not all on NUMA node %d", node);
#endif
  cg_topo_host_free(host, BYTES);
  /* freed through CUDA too: it no longer knows the address */
  ck_assert_int_ne(cudaHostGetFlags(&flags, host), cudaSuccess);
  cudaGetLastError();
  free(back);
#endif
}
END_TEST

typedef struct bind_result {
  int device, bound;
  cg_status_t st;
} bind_result_t;

static void *bind_in_thread(void *arg) {
  bind_result_t *r = arg;
  r->st = cg_topo_bind_thread_near(&r->bound, r->device);
  return NULL;
}

START_TEST(topo__binding_near_a_gpu_is_best_effort) {
  /* in threads of their own: the test process's CPUs stay as they were */
  bind_result_t none = {.device = -1, .bound = -1}, gpu = {.device = 0, .bound = -1};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, bind_in_thread, &none), 0);
  pthread_join(th, NULL);
  ck_assert_cg_ok(none.st);
  ck_assert_int_eq(none.bound, 0);
  ck_assert_int_eq(pthread_create(&th, NULL, bind_in_thread, &gpu), 0);
  pthread_join(th, NULL);
  ck_assert_cg_ok(gpu.st);
  ck_assert_int_ge(gpu.bound, 0);
  ck_assert_int_le(gpu.bound, 1);
  if (gpu_count() == 0 || cg_topo_gpu_numa_node(0) < 0) ck_assert_int_eq(gpu.bound, 0);
}
END_TEST

START_TEST(topo__describe_names_hwloc_and_the_gpus) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  cg_topo_describe(f);
  cg_topo_describe(NULL); /* ignored */
  long n = ftell(f);
  ck_assert_int_gt(n, 0);
  char *text = calloc((size_t)n + 1, 1);
  ck_assert_ptr_nonnull(text);
  rewind(f);
  ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  ck_assert_msg(strstr(text, "hwloc"), "no \"hwloc\" in:\n%s", text);
  ck_assert_msg(strstr(text, "CUDA devices:"), "no \"CUDA devices:\" in:\n%s", text);
#if defined(CG_HAVE_HWLOC) && CG_HAVE_HWLOC
  ck_assert_msg(strstr(text, "NUMA nodes"), "no machine summary in:\n%s", text);
  ck_assert_msg(strstr(text, "network devices:"), "no network devices in:\n%s", text);
#else
  ck_assert_msg(strstr(text, "hwloc: not built in"), "no \"hwloc: not built in\" in:\n%s", text);
#endif
  free(text);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_topology");
  TCase *ranks = cg_mpi_tcase("local_ranks");
  tcase_add_test(ranks, topo__local_ranks_are_distinct_and_cover_the_node);
  tcase_add_test(ranks, topo__bad_arguments_are_refused);
  tcase_add_test(ranks, topo__device_is_local_rank_modulo_gpus_unless_cg_device_says);
  suite_add_tcase(s, ranks);
  TCase *near = cg_mpi_tcase("near_the_gpu");
  tcase_add_test(near, topo__numa_node_of_a_bad_device_is_unknown);
  tcase_add_test(near, topo__host_alloc_of_nothing_and_without_a_gpu);
  tcase_add_test(near, topo__host_alloc_is_pinned_mapped_and_near_the_gpu);
  tcase_add_test(near, topo__binding_near_a_gpu_is_best_effort);
  tcase_add_test(near, topo__describe_names_hwloc_and_the_gpus);
  suite_add_tcase(s, near);
  return cg_mpi_test_main(s);
}
