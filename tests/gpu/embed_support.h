/* What the embed suite's files share (test_embed.c, test_embed_rebind.c,
 * test_embed_compute.c): the device counters every test checks its replays
 * with, the helpers that make and check data on the device, and the hooks by
 * which the suite in test_embed.c adds the tests of the other two files. See
 * test_embed.c for what the suite checks and how. */
#ifndef CG_TEST_EMBED_SUPPORT_H
#define CG_TEST_EMBED_SUPPORT_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_kernels.h"
#include "gpu_test.h"

/* ck_assert_msg, agreed on every rank, so that no rank goes on alone into
 * collective work (launching is collective) after another failed. */
#define assert_all_ranks_msg(ok, ...)                   \
  do {                                                  \
    char all_ranks_text_[1500];                         \
    snprintf(all_ranks_text_, sizeof all_ranks_text_, __VA_ARGS__); \
    ck_assert_all_ranks((ok), all_ranks_text_);         \
  } while (0)

/* ---- counters in device memory: the replay number and what the checking
 * kernels found (bad[0]: wrong elements, bad[1]: first wrong replay) */

typedef struct counters {
  unsigned long long *round;
  unsigned long long *bad;
} counters_t;

/* Sizes of the plan-lock test (test_embed.c); the event-wait test
 * (test_embed_compute.c) gives its slow kernel a buffer of LOCK_N too. */
enum { LOCK_N = 4096, LOCK_TIMES = 16, LOCK_DELAY_NS = 2000, LOCK_LAUNCHES = 40 };

/* Defined in embed_support.c. */
uint64_t embed_base_seed(uint64_t salt);
cudaStream_t embed_new_stream(void);
cudaEvent_t embed_new_event(void);
counters_t embed_counters_new(void);
void embed_counters_free(counters_t *c);
void embed_expect_clean(const counters_t *c, unsigned long long replays, const char *what);
int embed_holds_sum(const int32_t *p, size_t n, uint64_t base, unsigned long long k);
void embed_poison_async(void *p, size_t bytes, cudaStream_t s);
cudaGraphExec_t embed_instantiate(cudaGraph_t g);
cudaGraphNode_t embed_add_poison_node(cudaGraph_t g, void *p, size_t bytes, const cudaGraphNode_t *deps,
                                      size_t n_deps);
int embed_fusion_disabled(void);

/* The tests of the tcases embed_rebind (test_embed_rebind.c) and
 * embed_compute (test_embed_compute.c), added in the suite's order. */
void embed_add_rebind_tests(TCase *rebind);
void embed_add_compute_tests(TCase *compute);

#endif
