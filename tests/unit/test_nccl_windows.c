/* The NCCL backend's list of symmetric windows (backends/nccl/nccl_windows.h),
 * which the plan's DOT asks whether a collective's buffers lie in one: random
 * windows added and removed against a brute-force reference, and the edges
 * (a range ending exactly at a window's end, one byte past it, empty ranges,
 * ranges that would wrap around the address space). No NCCL call is made. */
#include <stdint.h>
#include <stdlib.h>

#include "nccl/nccl_windows.h"
#include "test_support.h"

enum { WINDOWS = 24, QUERIES = 4000 };

typedef struct ref_window {
  uintptr_t base;
  size_t bytes;
  int live;
} ref_window_t;

static int ref_hold(const ref_window_t *ref, int n, uintptr_t p, size_t bytes) {
  for (int i = 0; i < n; i++)
    if (ref[i].live && p >= ref[i].base && p - ref[i].base <= ref[i].bytes && bytes <= ref[i].bytes - (p - ref[i].base))
      return 1;
  return 0;
}

START_TEST(nccl_windows__edges_of_one_window) {
  cg_nccl_windows_t w = {0};
  static const char block[256];
  ck_assert(!cg_nccl_windows_hold(&w, block, 1));
  ck_assert(cg_nccl_windows_add(&w, block + 64, 128));
  ck_assert(cg_nccl_windows_hold(&w, block + 64, 128));   /* the whole window */
  ck_assert(cg_nccl_windows_hold(&w, block + 100, 92));   /* ends exactly at its end */
  ck_assert(!cg_nccl_windows_hold(&w, block + 100, 93));  /* one byte past */
  ck_assert(!cg_nccl_windows_hold(&w, block + 63, 2));    /* starts one byte before */
  ck_assert(cg_nccl_windows_hold(&w, block + 192, 0));    /* empty, at the end */
  ck_assert(!cg_nccl_windows_hold(&w, block + 193, 0));   /* empty, past it */
  ck_assert(!cg_nccl_windows_hold(&w, block + 65, SIZE_MAX)); /* would wrap */
  cg_nccl_windows_remove(&w, block + 64);
  ck_assert(!cg_nccl_windows_hold(&w, block + 64, 1));
  cg_nccl_windows_remove(&w, block); /* not there: nothing */
  cg_nccl_windows_free(&w);
  ck_assert(w.list == NULL && w.n == 0);
}
END_TEST

START_TEST(nccl_windows__random_windows_against_a_reference) {
  cg_nccl_windows_t w = {0};
  ref_window_t ref[WINDOWS] = {{0}};
  /* windows in one fake address range, some overlapping (NCCL never gives
   * overlapping ones, but the list must not care) */
  uintptr_t space = (uintptr_t)1 << 40;
  for (int i = 0; i < WINDOWS; i++) {
    int unique;
    do { /* one window per base: remove names a window by its base */
      ref[i].base = space + (uintptr_t)(cg_test_rand() % (1u << 20)) * 16;
      unique = 1;
      for (int j = 0; j < i; j++) unique &= ref[j].base != ref[i].base;
    } while (!unique);
    ref[i].bytes = (size_t)(cg_test_rand() % (1u << 16));
    ref[i].live = 1;
    ck_assert(cg_nccl_windows_add(&w, (const void *)ref[i].base, ref[i].bytes));
  }
  for (int q = 0; q < QUERIES; q++) {
    if (q % 200 == 199) { /* now and then one window goes */
      int i = (int)(cg_test_rand() % WINDOWS);
      if (ref[i].live) {
        cg_nccl_windows_remove(&w, (const void *)ref[i].base);
        ref[i].live = 0;
      }
    }
    int i = (int)(cg_test_rand() % WINDOWS);
    uintptr_t p = ref[i].base + (uintptr_t)(cg_test_rand() % (ref[i].bytes + 64)) - 32;
    size_t bytes = (size_t)(cg_test_rand() % (ref[i].bytes + 64));
    int want = ref_hold(ref, WINDOWS, p, bytes), got = cg_nccl_windows_hold(&w, (const void *)p, bytes);
    if (want != got)
      ck_abort_msg("query %d: [%#jx, +%zu) held %d, the reference says %d", q, (uintmax_t)p, bytes, got, want);
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
