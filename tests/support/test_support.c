#include "test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t seed;
static uint64_t state;

uint64_t cg_test_seed(void) {
  if (!seed) {
    const char *env = getenv("CG_TEST_SEED");
    if (env && *env) {
      seed = strtoull(env, NULL, 0);
    } else {
      struct timespec ts;
      timespec_get(&ts, TIME_UTC);
      seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    if (!seed) seed = 1;
    state = seed;
  }
  return seed;
}

void cg_test_reseed(uint64_t salt) {
  state = cg_test_seed() ^ (salt * 0x9E3779B97F4A7C15ull);
  if (!state) state = 1;
}

uint64_t cg_test_rand(void) {
  if (!state) cg_test_seed();
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1Dull;
}

uint64_t cg_test_below(uint64_t bound) { return bound ? cg_test_rand() % bound : 0; }

int cg_test_main(Suite *suite) {
  printf("seed: CG_TEST_SEED=%llu\n", (unsigned long long)cg_test_seed());
  fflush(stdout);
  SRunner *runner = srunner_create(suite);
  srunner_run_all(runner, CK_NORMAL);
  int failed = srunner_ntests_failed(runner);
  srunner_free(runner);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
