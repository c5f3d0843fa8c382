/* The rule that turns measured times into a symmetric/plain cut-over
 * (cg_nccl_cutover_pick, backends/nccl/nccl_cutover.h): by hand at the edges
 * (nothing measured, a loss at the first size, one noisy loss, wins to the
 * end) and against a reference on random times. No NCCL call is made. */
#include <stdint.h>

#include "nccl/nccl_cutover.h"
#include "test_support.h"

enum { RANDOM_CASES = 5000 };

/* us[i] = {symmetric, plain} from a pattern of W (wins) and L (losses). */
static int from_pattern(double (*us)[2], const char *pattern) {
  int n = 0;
  for (; pattern[n]; n++) us[n][0] = pattern[n] == 'W' ? 5.0 : 9.0, us[n][1] = 7.0;
  return n;
}

static size_t pick(const char *pattern) {
  double us[CG_CUTOVER_MAX_SIZES][2];
  int n = from_pattern(us, pattern);
  return cg_nccl_cutover_pick((const double (*)[2])us, n);
}

START_TEST(nccl_cutover__edges) {
  ck_assert_uint_eq(pick(""), SIZE_MAX);           /* an arena under 1 KB: nothing measured */
  ck_assert_uint_eq(pick("WWWW"), SIZE_MAX);       /* wins at every measured size */
  ck_assert_uint_eq(pick("LL"), 0);                /* loses from 1 KB on */
  ck_assert_uint_eq(pick("L"), 0);                 /* one size, lost: the last counts as two */
  ck_assert_uint_eq(pick("WWLL"), 2048);           /* up to 2 KB */
  ck_assert_uint_eq(pick("WLWWLLW"), 8192);        /* one loss at 2 KB is noise; 16 and 32 KB are not */
  ck_assert_uint_eq(pick("WWWL"), 4096);           /* a loss at the last size */
  double tie[2][2] = {{7.0, 7.0}, {7.0, 7.0}};     /* a tie is a loss: the plain path needs no window */
  ck_assert_uint_eq(cg_nccl_cutover_pick((const double (*)[2])tie, 2), 0);
}
END_TEST

START_TEST(nccl_cutover__random_times_against_a_reference) {
  static const double handicaps[] = {1.0, 1.05, 1.5};
  for (int c = 0; c < RANDOM_CASES; c++) {
    double us[CG_CUTOVER_MAX_SIZES][2];
    int n = (int)(cg_test_rand() % (CG_CUTOVER_MAX_SIZES + 1)), h = (int)(cg_test_rand() % 3);
    int lose[CG_CUTOVER_MAX_SIZES];
    for (int i = 0; i < n; i++) {
      /* times in 1/20 us, so that a 5% handicap decides some */
      us[i][0] = (double)(cg_test_rand() % 800) / 20, us[i][1] = (double)(cg_test_rand() % 800) / 20;
      /* the first path wins only by more than the handicap */
      lose[i] = !(us[i][0] * handicaps[h] < us[i][1]);
    }
    size_t want = SIZE_MAX;
    for (int i = 0; i < n && want == SIZE_MAX; i++)
      if (lose[i] && (i + 1 == n || lose[i + 1])) want = i ? (size_t)1024 << (i - 1) : 0;
    size_t got = h == 0 ? cg_nccl_cutover_pick((const double (*)[2])us, n)
                        : cg_nccl_cutover_pick_handicapped((const double (*)[2])us, n, handicaps[h]);
    ck_assert_msg(got == want, "case %d (%d sizes, handicap %g): %zu, the reference says %zu", c, n, handicaps[h],
                  got, want);
  }
}
END_TEST

START_TEST(nccl_cutover__a_handicap_turns_near_ties_into_losses) {
  double us[3][2] = {{9.6, 10.0}, {9.6, 10.0}, {5.0, 10.0}}; /* 4% ahead, 4% ahead, 50% ahead */
  ck_assert_uint_eq(cg_nccl_cutover_pick((const double (*)[2])us, 3), SIZE_MAX);
  ck_assert_uint_eq(cg_nccl_cutover_pick_handicapped((const double (*)[2])us, 3, 1.05), 0);
  us[0][0] = 9.0; /* 10% ahead at 1 KB: kept */
  ck_assert_uint_eq(cg_nccl_cutover_pick_handicapped((const double (*)[2])us, 3, 1.05), SIZE_MAX); /* one loss: noise */
  us[2][0] = 9.9;
  ck_assert_uint_eq(cg_nccl_cutover_pick_handicapped((const double (*)[2])us, 3, 1.05), 1024);
}
END_TEST

START_TEST(nccl_cutover__ratios_of_the_two_times_and_zero_without_a_second) {
  double us[4][2] = {{3, 4}, {8, 2}, {5, 0}, {0, 7}}, ratio[5] = {-1, -1, -1, -1, -1};
  cg_nccl_cutover_ratios(ratio, (const double (*)[2])us, 4);
  ck_assert(ratio[0] == 0.75 && ratio[1] == 4 && ratio[2] == 0 && ratio[3] == 0);
  ck_assert(ratio[4] == -1); /* nothing past the sizes */
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("nccl_cutover");
  TCase *t = tcase_create("nccl_cutover");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, nccl_cutover__edges);
  tcase_add_test(t, nccl_cutover__random_times_against_a_reference);
  tcase_add_test(t, nccl_cutover__a_handicap_turns_near_ties_into_losses);
  tcase_add_test(t, nccl_cutover__ratios_of_the_two_times_and_zero_without_a_second);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return cg_test_main(suite()); }
