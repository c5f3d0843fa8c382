/* The NCCL backend's list of symmetric windows (backends/nccl/nccl_windows.h),
 * which routes a collective whose buffers lie in them to NCCL's symmetric
 * kernels or, above a window's cut-over, through its plain view: random
 * windows added and removed against a brute-force reference of the rule, and
 * the edges (a range ending exactly at a window's end, one byte past it,
 * empty ranges, ranges that would wrap around the address space, the
 * cut-over itself). No NCCL call is made. */
#include <stdint.h>
#include <stdlib.h>

#include "nccl/nccl_windows.h"
#include "test_support.h"

enum { WINDOWS = 24, QUERIES = 6000 };

typedef struct ref_window {
  cg_nccl_window_t w;
  int live;
} ref_window_t;

/* The window holding [p, p + bytes), the reference's way; -1 if none. */
static int ref_holder(const ref_window_t *ref, int n, uintptr_t p, size_t bytes) {
  for (int i = 0; i < n; i++) {
    uintptr_t b = (uintptr_t)ref[i].w.base;
    if (ref[i].live && p >= b && p - b <= ref[i].w.bytes && bytes <= ref[i].w.bytes - (p - b)) return i;
  }
  return -1;
}

/* route() on an allreduce of `bytes` of float32 in place at p */
static cg_nccl_path_t route_allreduce(const cg_nccl_windows_t *w, const char *p, size_t bytes, const void **send,
                                      void **recv) {
  *send = p, *recv = (void *)p;
  return cg_nccl_windows_route(send, recv, w, bytes, bytes, CG_NODE_ALLREDUCE, CG_FLOAT32, bytes);
}

START_TEST(nccl_windows__edges_of_one_window) {
  cg_nccl_windows_t w = {0};
  static char block[256], view[256];
  const void *send;
  void *recv;
  ck_assert_int_eq(route_allreduce(&w, block, 1, &send, &recv), CG_NCCL_PATH_ORDINARY);
  cg_nccl_window_t window = {block + 64, 128, view + 64, {32, 0, SIZE_MAX}, {{0}}};
  ck_assert(cg_nccl_windows_add(&w, &window));
  ck_assert_int_eq(route_allreduce(&w, block + 64, 32, &send, &recv), CG_NCCL_PATH_SYMMETRIC); /* at the cut-over */
  ck_assert(send == block + 64 && recv == block + 64);
  ck_assert_int_eq(route_allreduce(&w, block + 64, 128, &send, &recv), CG_NCCL_PATH_PLAIN); /* above it */
  ck_assert(send == view + 64 && recv == view + 64);
  ck_assert_int_eq(route_allreduce(&w, block + 100, 92, &send, &recv), CG_NCCL_PATH_PLAIN); /* ends at its end */
  ck_assert(send == view + 100);
  ck_assert_int_eq(route_allreduce(&w, block + 100, 93, &send, &recv), CG_NCCL_PATH_ORDINARY); /* one byte past */
  ck_assert(send == block + 100);
  ck_assert_int_eq(route_allreduce(&w, block + 63, 2, &send, &recv), CG_NCCL_PATH_ORDINARY); /* a byte before */
  ck_assert_int_eq(route_allreduce(&w, block + 192, 0, &send, &recv), CG_NCCL_PATH_SYMMETRIC); /* empty, at the end */
  ck_assert_int_eq(route_allreduce(&w, block + 193, 0, &send, &recv), CG_NCCL_PATH_ORDINARY);  /* empty, past it */
  ck_assert_int_eq(route_allreduce(&w, block + 65, SIZE_MAX, &send, &recv), CG_NCCL_PATH_ORDINARY); /* would wrap */
  /* float16: no symmetric allreduce of any size; bfloat16: every size */
  send = block + 64, recv = block + 64;
  ck_assert_int_eq(cg_nccl_windows_route(&send, &recv, &w, 2, 2, CG_NODE_ALLREDUCE, CG_FLOAT16, 2), CG_NCCL_PATH_PLAIN);
  send = block + 64, recv = block + 64;
  ck_assert_int_eq(cg_nccl_windows_route(&send, &recv, &w, 128, 128, CG_NODE_ALLREDUCE, CG_BFLOAT16, 128),
                   CG_NCCL_PATH_SYMMETRIC);
  /* other dtypes, and allgather or reduce_scatter, are NCCL's to route */
  send = block + 64, recv = block + 64;
  ck_assert_int_eq(cg_nccl_windows_route(&send, &recv, &w, 128, 128, CG_NODE_ALLREDUCE, CG_INT32, 128),
                   CG_NCCL_PATH_SYMMETRIC);
  send = block + 64, recv = block + 96;
  ck_assert_int_eq(cg_nccl_windows_route(&send, &recv, &w, 32, 96, CG_NODE_ALLGATHER, CG_FLOAT32, 32),
                   CG_NCCL_PATH_SYMMETRIC);
  ck_assert(send == block + 64 && recv == block + 96);
  /* kinds NCCL has no symmetric kernels for: as on any memory */
  send = block + 64, recv = block + 64;
  ck_assert_int_eq(cg_nccl_windows_route(&send, &recv, &w, 8, 8, CG_NODE_BROADCAST, CG_FLOAT32, 8),
                   CG_NCCL_PATH_ORDINARY);
  /* the measured sizes: 1 KB holds up to 1 KB, the last one everything above */
  ck_assert_int_eq(cg_nccl_measured_index(0), 0);
  ck_assert_int_eq(cg_nccl_measured_index(1024), 0);
  ck_assert_int_eq(cg_nccl_measured_index(1025), 1);
  ck_assert_int_eq(cg_nccl_measured_index(65536), 6);
  ck_assert_int_eq(cg_nccl_measured_index(SIZE_MAX), CG_NCCL_MEASURED_SIZES - 1);
  cg_nccl_windows_remove(&w, block + 64);
  ck_assert_int_eq(route_allreduce(&w, block + 64, 1, &send, &recv), CG_NCCL_PATH_ORDINARY);
  cg_nccl_windows_remove(&w, block); /* not there: nothing */
  cg_nccl_windows_free(&w);
  ck_assert(w.list == NULL && w.n == 0);
}
END_TEST

START_TEST(nccl_windows__random_windows_against_a_reference) {
  static const cg_dtype_t dtypes[] = {CG_FLOAT32, CG_FLOAT16, CG_BFLOAT16, CG_INT32, CG_FLOAT64};
  static const cg_node_kind_t kinds[] = {CG_NODE_ALLREDUCE, CG_NODE_ALLGATHER, CG_NODE_REDUCE_SCATTER,
                                         CG_NODE_BROADCAST};
  static const size_t limits[] = {0, 1024, 4096, 65536, SIZE_MAX};
  cg_nccl_windows_t w = {0};
  ref_window_t ref[WINDOWS];
  /* windows in a fake address range, apart from each other as NCCL's are;
   * their plain views far away, some without one */
  uintptr_t space = (uintptr_t)1 << 40, views = (uintptr_t)1 << 42, slot = (uintptr_t)1 << 17;
  for (int i = 0; i < WINDOWS; i++) {
    uintptr_t base = space + (uintptr_t)i * slot + (uintptr_t)(cg_test_rand() % 1024) * 16;
    ref[i].w = (cg_nccl_window_t){(const char *)base, (size_t)(cg_test_rand() % (1u << 16)),
                                  cg_test_rand() % 4 ? (char *)(views + (uintptr_t)i * slot) : NULL, {0}, {{0}}};
    for (int d = 0; d < CG_NCCL_SYMMETRIC_DTYPES; d++) {
      ref[i].w.symmetric_max[d] = limits[cg_test_rand() % 5];
      /* measured ratios, some sizes not measured (0) */
      for (int k = 0; k < CG_NCCL_MEASURED_SIZES; k++)
        ref[i].w.symmetric_ratio[d][k] = cg_test_rand() % 3 ? (double)(1 + cg_test_rand() % 200) / 100 : 0;
    }
    ref[i].live = 1;
    ck_assert(cg_nccl_windows_add(&w, &ref[i].w));
  }
  for (int q = 0; q < QUERIES; q++) {
    if (q % 200 == 199) { /* now and then one window goes */
      int i = (int)(cg_test_rand() % WINDOWS);
      if (ref[i].live) {
        cg_nccl_windows_remove(&w, ref[i].w.base);
        ref[i].live = 0;
      }
    }
    cg_node_kind_t kind = kinds[cg_test_rand() % 4];
    cg_dtype_t dtype = dtypes[cg_test_rand() % 5];
    uintptr_t p[2];
    size_t span[2];
    for (int k = 0; k < 2; k++) { /* send, then recv: each near a random window */
      int i = (int)(cg_test_rand() % WINDOWS);
      p[k] = (uintptr_t)ref[i].w.base + (uintptr_t)(cg_test_rand() % (ref[i].w.bytes + 64)) - 32;
      span[k] = (size_t)(cg_test_rand() % (ref[i].w.bytes + 64));
    }
    size_t bytes = span[0] < span[1] ? span[0] : span[1];
    int in = ref_holder(ref, WINDOWS, p[0], span[0]), out = ref_holder(ref, WINDOWS, p[1], span[1]);
    cg_nccl_path_t want = CG_NCCL_PATH_ORDINARY;
    uintptr_t want_send = p[0], want_recv = p[1];
    if (kind != CG_NODE_BROADCAST && in >= 0 && out >= 0) {
      want = CG_NCCL_PATH_SYMMETRIC;
      int d = dtype == CG_FLOAT32 ? 0 : dtype == CG_FLOAT16 ? 1 : dtype == CG_BFLOAT16 ? 2 : -1;
      if (kind == CG_NODE_ALLREDUCE && d >= 0 && ref[in].w.plain && ref[out].w.plain &&
          (bytes > ref[in].w.symmetric_max[d] || bytes > ref[out].w.symmetric_max[d])) {
        want = CG_NCCL_PATH_PLAIN;
        want_send = (uintptr_t)ref[in].w.plain + (p[0] - (uintptr_t)ref[in].w.base);
        want_recv = (uintptr_t)ref[out].w.plain + (p[1] - (uintptr_t)ref[out].w.base);
      }
    }
    const void *send = (const void *)p[0];
    void *recv = (void *)p[1];
    cg_nccl_path_t got = cg_nccl_windows_route(&send, &recv, &w, span[0], span[1], kind, dtype, bytes);
    if (kind == CG_NODE_ALLREDUCE) { /* the measured ratio the one-shot kernel is weighed against */
      int d = dtype == CG_FLOAT32 ? 0 : dtype == CG_FLOAT16 ? 1 : dtype == CG_BFLOAT16 ? 2 : -1;
      int a = ref_holder(ref, WINDOWS, p[0], bytes), b = ref_holder(ref, WINDOWS, p[1], bytes);
      int k = 0;
      while (k + 1 < CG_NCCL_MEASURED_SIZES && (CG_NCCL_MEASURED_MIN_BYTES << k) < bytes) k++;
      double want_ratio = 0;
      if (d >= 0 && a >= 0 && b >= 0 && ref[a].w.symmetric_ratio[d][k] > 0 && ref[b].w.symmetric_ratio[d][k] > 0)
        want_ratio = ref[a].w.symmetric_ratio[d][k] > ref[b].w.symmetric_ratio[d][k] ? ref[a].w.symmetric_ratio[d][k]
                                                                                      : ref[b].w.symmetric_ratio[d][k];
      double got_ratio = cg_nccl_windows_symmetric_ratio(&w, (const void *)p[0], (const void *)p[1], dtype, bytes);
      if (got_ratio != want_ratio)
        ck_abort_msg("query %d: allreduce of %zu bytes of %s: symmetric ratio %g, the reference says %g", q, bytes,
                     cg_dtype_name(dtype), got_ratio, want_ratio);
    }
    if (got != want || (uintptr_t)send != want_send || (uintptr_t)recv != want_recv)
      ck_abort_msg("query %d: %s of %s, [%#jx, +%zu) -> [%#jx, +%zu): path %d to %p, %p; the reference says %d to "
                   "%#jx, %#jx", q, cg_node_kind_name(kind), cg_dtype_name(dtype), (uintmax_t)p[0], span[0],
                   (uintmax_t)p[1], span[1], (int)got, send, recv, (int)want, (uintmax_t)want_send,
                   (uintmax_t)want_recv);
  }
  cg_nccl_windows_free(&w);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("nccl_windows");
  TCase *t = tcase_create("nccl_windows");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, nccl_windows__edges_of_one_window);
  tcase_add_test(t, nccl_windows__random_windows_against_a_reference);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return cg_test_main(suite()); }
