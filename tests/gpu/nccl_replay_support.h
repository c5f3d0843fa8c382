/* What the two files of the nccl_replay suite share: test_nccl_replay.c (the
 * "nccl_replay" test case, the suite and main) and test_nccl_replay_api.c (the
 * "nccl_api" test case), through nccl_replay_support.c. */
#ifndef CG_TEST_NCCL_REPLAY_SUPPORT_H
#define CG_TEST_NCCL_REPLAY_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_test.h"

uint64_t replay_seed(int k);

/* On cg_gpu_stream(), not waited for; replay_poison_now waits. */
void replay_to_host(void *host, const void *dev, size_t bytes);
void replay_poison(void *dev, size_t bytes);

enum { SN = 70001 };

/* y must be the allreduce of x under `seed`: checked after a synchronous copy. */
int replay_sum_right(const int32_t *y, uint64_t seed);

void replay_poison_now(void *dev, size_t bytes);

/* Adds the "nccl_api" test case to `s` (test_nccl_replay_api.c). */
void replay_add_api_tcase(Suite *s);

#endif
