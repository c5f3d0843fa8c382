/* Shared helpers for the Check suites: a reproducible random source, status
 * assertions that print cg_error_last(), and a main() body. */
#ifndef CG_TEST_SUPPORT_H
#define CG_TEST_SUPPORT_H

#include <check.h>
#include <stdint.h>

#include "commgraph.h"

/* Seed of this run: $CG_TEST_SEED if set, else drawn from the clock. Printed by
 * cg_test_main so a failing run can be repeated. */
uint64_t cg_test_seed(void);
/* Next value of a xorshift64* stream seeded from cg_test_seed() (per process;
 * each forked test continues from the same state, so reseed with
 * cg_test_reseed(salt) at the start of a test for independent streams). */
uint64_t cg_test_rand(void);
void cg_test_reseed(uint64_t salt);
/* Uniform in [0, bound). */
uint64_t cg_test_below(uint64_t bound);

#define ck_assert_cg_ok(expr)                                                                           \
  do {                                                                                                 \
    cg_status_t cg_test_status_ = (expr);                                                              \
    ck_assert_msg(cg_test_status_ == CG_SUCCESS, "%s returned %s: %s", #expr,                          \
                  cg_status_string(cg_test_status_), cg_error_last());                                 \
  } while (0)

#define ck_assert_cg_status(expr, expected)                                                            \
  do {                                                                                                 \
    cg_status_t cg_test_status_ = (expr);                                                              \
    ck_assert_msg(cg_test_status_ == (expected), "%s returned %s (%s), expected %s", #expr,           \
                  cg_status_string(cg_test_status_), cg_error_last(), cg_status_string(expected));     \
  } while (0)

/* Runs `suite`, prints the seed, returns the process exit status. */
int cg_test_main(Suite *suite);

#endif
