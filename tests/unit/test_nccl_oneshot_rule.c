/* Which allreduces the NCCL backend's one-shot and two-shot kernels take
 * (cg_nccl_oneshot_takes, cg_nccl_twoshot_takes, backends/nccl/nccl_oneshot.h):
 * on or off, their cut-overs, the dtypes and sizes they can do, the two-shot
 * only where the one-shot does not and, measured, only at sizes it won, and
 * inside symmetric windows the measured ratios they must beat; random cases
 * against a reference of the documented rule (docs/gpu.md#one-shot-allreduce),
 * and the edges by hand. No CUDA or NCCL call is made. */
#include <stdint.h>
#include <string.h>

#include "nccl/nccl_backend.h"
#include "plan_internal.h"
#include "test_support.h"

enum { RANDOM_CASES = 20000 };

static cg_step_t allreduce(size_t count, cg_dtype_t dtype, cg_redop_t op) {
  cg_step_t s;
  memset(&s, 0, sizeof s);
  s.op_kind = CG_NODE_ALLREDUCE;
  s.count = count, s.dtype = dtype, s.op = op;
  return s;
}

static cg_nccl_comm_t *comm_on(size_t max_bytes) {
  static cg_nccl_comm_t n;
  memset(&n, 0, sizeof n);
  n.oneshot.state = CG_ONESHOT_ON;
  n.oneshot.max_bytes = max_bytes;
  return &n;
}

START_TEST(nccl_oneshot_rule__edges) {
  cg_nccl_comm_t *n = comm_on(65536);
  cg_step_t s = allreduce(16384, CG_FLOAT32, CG_SUM); /* 64 KB: at the cut-over */
  ck_assert(cg_nccl_oneshot_takes(n, &s, 0, 0));
  s.count++;
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 0, 0)); /* above it */
  s = allreduce(0, CG_FLOAT32, CG_SUM);
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 0, 0)); /* nothing to reduce */
  s = allreduce(16, CG_INT32, CG_SUM);
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 0, 0)); /* integers stay on NCCL */
  s = allreduce(16, CG_BFLOAT16, CG_PROD);
  ck_assert(cg_nccl_oneshot_takes(n, &s, 0, 0));
  s.op_kind = CG_NODE_ALLGATHER;
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 0, 0));
  n = comm_on(SIZE_MAX); /* a cut-over above the kernel's 1 MB */
  s = allreduce((size_t)1 << 18, CG_FLOAT32, CG_SUM);
  ck_assert(cg_nccl_oneshot_takes(n, &s, 0, 0));
  s.count++;
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 0, 0));
  n->oneshot.state = CG_ONESHOT_OFF;
  s.count = 1;
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 0, 0));
  /* in a window: only measured, and faster (its ratio under the symmetric one) */
  n = comm_on(65536);
  s = allreduce(2048, CG_FLOAT32, CG_SUM); /* 8 KB: measured size 3 */
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 1, 0.9)); /* the kernel's ratio not measured (forced size) */
  n->oneshot.ratio[3] = 0.5;
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 1, 0)); /* the window's not measured */
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 1, 0.5)); /* a tie keeps NCCL's symmetric kernels */
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 1, 0.4));
  ck_assert(cg_nccl_oneshot_takes(n, &s, 1, 0.51));
  ck_assert(cg_nccl_oneshot_takes(n, &s, 0, 0.6)); /* outside windows the cut-over alone decides */
}
END_TEST

/* the two-shot kernel beside a one-shot cut-over of 64 KB */
static cg_nccl_comm_t *twoshot_on(size_t max_bytes, int forced) {
  cg_nccl_comm_t *n = comm_on(65536);
  n->oneshot.twoshot_area = 1;
  n->oneshot.twoshot_max_bytes = max_bytes;
  n->oneshot.twoshot_forced = forced;
  return n;
}

START_TEST(nccl_oneshot_rule__twoshot_edges) {
  const size_t mb = (size_t)1 << 20;
  cg_nccl_comm_t *n = twoshot_on(8 * mb, 1); /* forced: every size above the one-shot's */
  cg_step_t s = allreduce(16384, CG_FLOAT32, CG_SUM); /* 64 KB: the one-shot's */
  ck_assert(cg_nccl_oneshot_takes(n, &s, 0, 0) && !cg_nccl_twoshot_takes(n, &s, 0, 0));
  s.count++;
  ck_assert(!cg_nccl_oneshot_takes(n, &s, 0, 0) && cg_nccl_twoshot_takes(n, &s, 0, 0));
  s.count = 2 * mb; /* 8 MB: the kernel's most */
  ck_assert(cg_nccl_twoshot_takes(n, &s, 0, 0));
  s.count++;
  ck_assert(!cg_nccl_twoshot_takes(n, &s, 0, 0));
  s = allreduce(mb, CG_BFLOAT16, CG_MIN);
  ck_assert(cg_nccl_twoshot_takes(n, &s, 0, 0));
  s.dtype = CG_INT32;
  ck_assert(!cg_nccl_twoshot_takes(n, &s, 0, 0)); /* integers stay on NCCL */
  s = allreduce(mb, CG_FLOAT32, CG_SUM);
  ck_assert(!cg_nccl_twoshot_takes(n, &s, 1, 0.9)); /* in a window: forced, nothing measured */
  n->oneshot.twoshot_area = 0;
  ck_assert(!cg_nccl_twoshot_takes(n, &s, 0, 0)); /* no staging for it (CG_TWOSHOT_MAX_BYTES=0) */
  n = twoshot_on(mb, 1);
  s.count = mb / 4 + 1; /* above a cut-over of 1 MB */
  ck_assert(!cg_nccl_twoshot_takes(n, &s, 0, 0));
  n->oneshot.state = CG_ONESHOT_OFF;
  s.count = mb / 4;
  ck_assert(!cg_nccl_twoshot_takes(n, &s, 0, 0));
  /* measured: only at sizes that won (a ratio), up to the cut-over */
  n = twoshot_on(4 * mb, 0);
  n->oneshot.twoshot_ratio[8] = 0.8; /* 256 KB */
  n->oneshot.twoshot_ratio[12] = 0.6; /* 4 MB */
  s.count = 65536 / 4 + 1; /* 64 KB + 4: rounds to the 128 KB size, not measured */
  ck_assert(!cg_nccl_twoshot_takes(n, &s, 0, 0));
  s.count = 200000 / 4; /* rounds to 256 KB */
  ck_assert(cg_nccl_twoshot_takes(n, &s, 0, 0));
  s.count = mb; /* 4 MB */
  ck_assert(cg_nccl_twoshot_takes(n, &s, 0, 0));
  ck_assert(cg_nccl_twoshot_takes(n, &s, 1, 0.7)); /* in a window where it beats the symmetric kernels */
  ck_assert(!cg_nccl_twoshot_takes(n, &s, 1, 0.6));
  s.count++;
  ck_assert(!cg_nccl_twoshot_takes(n, &s, 0, 0)); /* above its cut-over */
  /* the one-shot first: the two-shot never takes what the one-shot takes */
  n = twoshot_on(8 * mb, 1);
  n->oneshot.max_bytes = mb;
  s = allreduce(mb / 4, CG_FLOAT16, CG_SUM);
  ck_assert(cg_nccl_oneshot_takes(n, &s, 0, 0) && !cg_nccl_twoshot_takes(n, &s, 0, 0));
}
END_TEST

START_TEST(nccl_oneshot_rule__random_against_a_reference) {
  static const cg_dtype_t dtypes[] = {CG_FLOAT32, CG_FLOAT16, CG_BFLOAT16, CG_INT32, CG_FLOAT64, CG_INT8};
  static const size_t cuts[] = {0, 4096, 65536, (size_t)1 << 20, SIZE_MAX};
  static const size_t twoshot_cuts[] = {0, 65536, (size_t)1 << 20, (size_t)4 << 20, (size_t)8 << 20};
  for (int c = 0; c < RANDOM_CASES; c++) {
    cg_nccl_comm_t *n = comm_on(cuts[cg_test_rand() % 5]);
    if (cg_test_rand() % 8 == 0) n->oneshot.state = cg_test_rand() % 2 ? CG_ONESHOT_OFF : CG_ONESHOT_UNTRIED;
    for (int i = 0; i < CG_NCCL_MEASURED_SIZES; i++)
      n->oneshot.ratio[i] = cg_test_rand() % 4 ? (double)(1 + cg_test_rand() % 150) / 100 : 0;
    cg_dtype_t dtype = dtypes[cg_test_rand() % 6];
    size_t count = cg_test_rand() % 3 ? cg_test_rand() % 300000 : cg_test_rand() % 70;
    cg_step_t s = allreduce(count, dtype, (cg_redop_t)(cg_test_rand() % CG_REDOP_COUNT));
    int in_window = (int)(cg_test_rand() % 2);
    double symmetric = cg_test_rand() % 4 ? (double)(1 + cg_test_rand() % 150) / 100 : 0;
    /* the reference: docs/gpu.md's words */
    size_t bytes = count * cg_dtype_size(dtype);
    int kernel_dtype = dtype == CG_FLOAT32 || dtype == CG_FLOAT16 || dtype == CG_BFLOAT16;
    int want = n->oneshot.state == CG_ONESHOT_ON && kernel_dtype && count > 0 && bytes <= ((size_t)1 << 20) &&
               bytes <= n->oneshot.max_bytes;
    if (want && in_window) {
      int i = cg_nccl_measured_index(bytes); /* against its own reference in test_nccl_windows */
      want = n->oneshot.ratio[i] > 0 && symmetric > 0 && n->oneshot.ratio[i] < symmetric;
    }
    int got = cg_nccl_oneshot_takes(n, &s, in_window, symmetric);
    ck_assert_msg(got == want, "case %d: %zu %s, cut-over %zu, state %d, window %d (symmetric %g): %d, the "
                  "reference says %d", c, count, cg_dtype_name(dtype), n->oneshot.max_bytes, (int)n->oneshot.state,
                  in_window, symmetric, got, want);
    /* the two-shot kernel: where the one-shot does not, up to its cut-over and
     * 8 MB; measured, only at sizes with a ratio; forced, at any size above
     * the one-shot's; in windows only where its ratio beats theirs */
    n->oneshot.twoshot_area = cg_test_rand() % 8 != 0;
    n->oneshot.twoshot_forced = (int)(cg_test_rand() % 2);
    n->oneshot.twoshot_max_bytes = twoshot_cuts[cg_test_rand() % 5];
    for (int i = 0; i < CG_NCCL_MEASURED_SIZES; i++)
      n->oneshot.twoshot_ratio[i] = cg_test_rand() % 3 ? (double)(1 + cg_test_rand() % 150) / 100 : 0;
    s.count = cg_test_rand() % 3 ? cg_test_rand() % 2500000 : count;
    bytes = s.count * cg_dtype_size(dtype);
    int one = cg_nccl_oneshot_takes(n, &s, in_window, symmetric);
    double mine = n->oneshot.twoshot_ratio[cg_nccl_measured_index(bytes)];
    int two = !one && n->oneshot.state == CG_ONESHOT_ON && n->oneshot.twoshot_area && kernel_dtype && s.count > 0 &&
              bytes <= ((size_t)8 << 20) && bytes <= n->oneshot.twoshot_max_bytes;
    if (two && in_window) two = mine > 0 && symmetric > 0 && mine < symmetric;
    else if (two) two = n->oneshot.twoshot_forced ? bytes > n->oneshot.max_bytes : mine > 0;
    got = cg_nccl_twoshot_takes(n, &s, in_window, symmetric);
    ck_assert_msg(got == two, "case %d: two-shot, %zu %s, cut-overs %zu / %zu, forced %d, window %d: %d, the "
                  "reference says %d", c, s.count, cg_dtype_name(dtype), n->oneshot.max_bytes,
                  n->oneshot.twoshot_max_bytes, n->oneshot.twoshot_forced, in_window, got, two);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("nccl_oneshot_rule");
  TCase *t = tcase_create("nccl_oneshot_rule");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, nccl_oneshot_rule__edges);
  tcase_add_test(t, nccl_oneshot_rule__twoshot_edges);
  tcase_add_test(t, nccl_oneshot_rule__random_against_a_reference);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return cg_test_main(suite()); }
