/* Buffer placement (core/memory_kind.c) on the machine at hand: pageable
 * host memory everywhere; with a GPU, device, managed and pinned memory and
 * allocation bounds. Without a CUDA driver (CI) every buffer is host memory,
 * so device communicators refuse pageable memory and host ones take it.
 * And the padding for NCCL's 16-byte reads (cg_pad16), with a GPU also as a
 * device arena lays it out. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph/arena.h"
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

/* cg_pad16: a multiple of 16 with room for a 16-byte read from the last byte,
 * never more than that, and SIZE_MAX where it would overflow. */
START_TEST(memory_kind__padding_for_16_byte_reads) {
  ck_assert_uint_eq(cg_pad16(0), 0);
  ck_assert_uint_eq(cg_pad16(1), 16);
  ck_assert_uint_eq(cg_pad16(16), 32);
  ck_assert_uint_eq(cg_pad16(17), 32);
  ck_assert_uint_eq(cg_pad16(4194332), 4194352); /* the input of NVIDIA/nccl#265's report in test_nccl_replay.n4 */
  const size_t big[] = {(size_t)1 << 40, ((size_t)1 << 40) + 3, SIZE_MAX / 2, SIZE_MAX - 47, SIZE_MAX - 30};
  for (size_t b = 1; b < 1000; b++) {
    size_t p = cg_pad16(b);
    ck_assert_msg(p % CG_READ_PAD == 0 && p >= b + CG_READ_PAD - 1 && p < b + 2 * CG_READ_PAD - 1,
                  "cg_pad16(%zu) = %zu", b, p);
  }
  for (int k = 0; k < 5; k++) {
    size_t p = cg_pad16(big[k]);
    ck_assert_msg(p != SIZE_MAX && p % CG_READ_PAD == 0 && p - big[k] >= CG_READ_PAD - 1 &&
                      p - big[k] < 2 * CG_READ_PAD - 1,
                  "cg_pad16(%zu) = %zu", big[k], p);
  }
  ck_assert_uint_eq(cg_pad16(SIZE_MAX - 29), SIZE_MAX);
  ck_assert_uint_eq(cg_pad16(SIZE_MAX - 15), SIZE_MAX);
  ck_assert_uint_eq(cg_pad16(SIZE_MAX), SIZE_MAX);
  cg_arena_t *a = NULL;
  ck_assert_cg_status(cg_arena_create(&a, SIZE_MAX - 256, NULL), CG_ERR_OVERFLOW);
  ck_assert_ptr_null(a);
#if CG_HAVE_CUDA
  if (gpu_count() == 0) {
    printf("memory_kind: device arena padding skipped (no GPU)\n");
    return;
  }
  /* a device arena filled to its last byte: the 16 bytes from that byte are
   * in the same allocation, and zero */
  enum { CAPACITY = 4194332 };
  cg_arena_opts_t opts = CG_ARENA_OPTS_INIT;
  opts.device = 0;
  unsigned char *t = NULL, tail[CG_READ_PAD];
  ck_assert_cg_ok(cg_arena_create(&a, CAPACITY, &opts));
  ck_assert_cg_ok(cg_arena_alloc((void **)&t, a, CAPACITY, CG_UINT8));
  ck_assert_int_eq(cg_memory_one_allocation(t, cg_pad16(CAPACITY)), 1);
  ck_assert_int_eq(cudaMemcpy(tail, t + CAPACITY, sizeof tail, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int k = 0; k < CG_READ_PAD; k++) ck_assert_uint_eq(tail[k], 0);
  cg_arena_destroy(a);
#endif
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("memory_kind");
  TCase *tc = tcase_create("memory_kind");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, memory_kind__pageable_host_memory);
  tcase_add_test(tc, memory_kind__device_managed_and_pinned_memory);
  tcase_add_test(tc, memory_kind__padding_for_16_byte_reads);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
