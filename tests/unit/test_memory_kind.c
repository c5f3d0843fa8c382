/* Buffer placement (sched/memory_kind.c) on the machine at hand: pageable
 * host memory everywhere; with a GPU, device, managed and pinned memory and
 * allocation bounds. Without a CUDA driver (CI) every buffer is host memory,
 * so device communicators refuse pageable memory and host ones take it. */
#include <stdlib.h>
#include <string.h>

#include "commgraph/comm.h"
#include "commgraph/config.h"
#include "memory_kind.h"
#include "test_support.h"
#if CG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

enum { BYTES = 1 << 20 };

#if CG_HAVE_CUDA
static int gpu_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}
#endif

/* Whether GPU `device` exists and reads pageable host memory itself. */
static int reads_pageable(int device) {
#if CG_HAVE_CUDA
  int value = 0;
  if (device >= gpu_count()) return 0;
  return cudaDeviceGetAttribute(&value, cudaDevAttrPageableMemoryAccess, device) == cudaSuccess && value;
#else
  (void)device;
  return 0;
#endif
}

START_TEST(memory_kind__pageable_host_memory) {
  char *buf = malloc(BYTES), why[200] = "";
  ck_assert_ptr_nonnull(buf);
  cg_memory_kind_t kind = CG_MEMORY_DEVICE;
  int device = 7;
  cg_memory_locate(&kind, &device, buf);
  ck_assert_int_eq(kind, CG_MEMORY_HOST);
  ck_assert_int_eq(device, -1);
  ck_assert_int_eq(cg_memory_fits(CG_DEVICE_HOST, buf, why, sizeof why), 0);
  int fits = cg_memory_fits(0, buf + 64, why, sizeof why);
  if (!CG_HAVE_CUDA || reads_pageable(0)) {
    ck_assert_int_eq(fits, 0);
  } else {
    ck_assert_int_eq(fits, -1);
    ck_assert_msg(strstr(why, "host memory") && strstr(why, "device 0"), "why: %s", why);
  }
  ck_assert_int_eq(cg_memory_one_allocation(buf, BYTES), 1);
  ck_assert_int_eq(cg_memory_one_allocation(buf, 0), 1);
  cg_memory_locate(&kind, &device, NULL);
  ck_assert_int_eq(kind, CG_MEMORY_HOST);
  free(buf);
}
END_TEST

START_TEST(memory_kind__device_managed_and_pinned_memory) {
#if CG_HAVE_CUDA
  int gpus = gpu_count();
  if (gpus == 0) {
    printf("memory_kind: device memory checks skipped (no GPU)\n");
    return;
  }
  ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
  char *dev = NULL, *managed = NULL, *pinned = NULL, why[200] = "";
  ck_assert_int_eq(cudaMalloc((void **)&dev, BYTES), cudaSuccess);
  ck_assert_int_eq(cudaMallocManaged((void **)&managed, BYTES, cudaMemAttachGlobal), cudaSuccess);
  ck_assert_int_eq(cudaMallocHost((void **)&pinned, BYTES), cudaSuccess);
  cg_memory_kind_t kind;
  int device = -5;
  cg_memory_locate(&kind, &device, dev + 100);
  ck_assert_int_eq(kind, CG_MEMORY_DEVICE);
  ck_assert_int_eq(device, 0);
  cg_memory_locate(&kind, &device, managed);
  ck_assert_int_eq(kind, CG_MEMORY_MANAGED);
  cg_memory_locate(&kind, &device, pinned);
  ck_assert_int_eq(kind, CG_MEMORY_PINNED);

  ck_assert_int_eq(cg_memory_fits(0, dev, why, sizeof why), 0);
  ck_assert_int_eq(cg_memory_fits(CG_DEVICE_HOST, dev, why, sizeof why), -1);
  ck_assert_msg(strstr(why, "memory of device 0") && strstr(why, "host"), "why: %s", why);
  for (int d = 0; d < gpus && d < 2; d++) {
    ck_assert_int_eq(cg_memory_fits(d, managed, why, sizeof why), 0);
    ck_assert_int_eq(cg_memory_fits(d, pinned, why, sizeof why), 0);
  }
  ck_assert_int_eq(cg_memory_fits(CG_DEVICE_HOST, managed, why, sizeof why), 0);
  ck_assert_int_eq(cg_memory_fits(CG_DEVICE_HOST, pinned, why, sizeof why), 0);
  if (gpus > 1) {
    ck_assert_int_eq(cg_memory_fits(1, dev, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "runs on device 1"), "why: %s", why);
  }

  /* allocation bounds: inside one block, and running past its end */
  ck_assert_int_eq(cg_memory_one_allocation(dev, BYTES), 1);
  ck_assert_int_eq(cg_memory_one_allocation(dev + 4096, BYTES - 4096), 1);
  ck_assert_int_eq(cg_memory_one_allocation(dev + BYTES - 8, 16), 0);
  ck_assert_int_eq(cg_memory_one_allocation(managed, BYTES), 1);
  ck_assert_int_eq(cg_memory_one_allocation(pinned + BYTES - 8, 16), 0);
  cudaFree(dev);
  cudaFree(managed);
  cudaFreeHost(pinned);
#else
  printf("memory_kind: device memory checks skipped (built without CUDA)\n");
#endif
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("memory_kind");
  TCase *tc = tcase_create("memory_kind");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, memory_kind__pageable_host_memory);
  tcase_add_test(tc, memory_kind__device_managed_and_pinned_memory);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
