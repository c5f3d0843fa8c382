/* Ranks sharing GPUs, for a machine with fewer GPUs than ranks
 * (CG_TEST_SHARE_GPUS=1: scripts/gpu-test's phase `shared`,
 * tests/faults/run-faults). NCCL refuses two ranks of one host on one GPU
 * ("Duplicate GPU detected"); a rank that names a host of its own
 * (NCCL_HOSTID) is taken for another node, and NCCL connects the ranks over
 * its socket transport, here on the loopback interface. So the multi-rank
 * suites run, for their results: processes on one GPU take turns on it (time
 * slices), so every time they measure is far from a machine with a GPU per
 * rank. Header-only: the GPU suites and fault injection share no support
 * library. */
#ifndef CG_TESTS_SHARE_GPUS_H
#define CG_TESTS_SHARE_GPUS_H

#include <stdio.h>
#include <stdlib.h> /* setenv: the including file defines _POSIX_C_SOURCE */
#include <string.h>

/* Whether CG_TEST_SHARE_GPUS asks for it. */
static inline int cg_test_share_gpus(void) {
  const char *v = getenv("CG_TEST_SHARE_GPUS");
  return v && *v && strcmp(v, "0") != 0;
}

/* With sharing asked for, gives this process (rank `world_rank`) a host id
 * of its own and NCCL's sockets on lo, unless the environment already sets
 * them; call before the process's first NCCL call (NCCL reads them at each
 * communicator's init). Returns whether sharing is on. */
static inline int cg_test_share_gpus_setup(int world_rank) {
  if (!cg_test_share_gpus()) return 0;
  char id[64]; /* a world rank names one process on whatever node */
  snprintf(id, sizeof id, "commgraph-test-rank-%d", world_rank);
  setenv("NCCL_HOSTID", id, 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  return 1;
}

#endif
