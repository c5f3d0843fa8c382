/* Arenas in NCCL symmetric memory (cg_nccl_arena_create, commgraph/nccl.h):
 * plans over their pieces give the right results replay after replay, fused
 * without copies; allreduces above the cut-over (CG_SYMMETRIC_MAX_BYTES, or
 * measured: the same on every rank) take the plain kernels on the same
 * memory, and DOT says which path each takes; the arena outlives the
 * communicator it was made on; two arenas on one communicator; a device
 * that is not the communicator's, or the variable set on one rank only, is
 * refused on every rank. Inputs are random integers (exact in float32),
 * outputs poisoned before every replay, sums checked on the device. NCCL
 * only: the suite is not in the per-backend list. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_kernels.h"
#include "gpu_test.h"

enum { ROUNDS = 6, TENSORS = 7, GATHER = 3001 };

static uint64_t round_seed(int k, int salt) {
  return cg_test_seed() ^ ((uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)salt << 40);
}

/* Wrong elements of n floats at y against the sum over `ranks` ranks from
 * first_rank of cg_gpu_value(seed, r, i). */
static unsigned long long wrong_sums(const float *y, size_t n, uint64_t seed, int first_rank, int ranks) {
  unsigned long long bad = 0, *dev_bad = cg_gpu_alloc(sizeof bad);
  CUDA_OK(cudaMemsetAsync(dev_bad, 0, sizeof bad, cg_gpu_stream()));
  CUDA_OK(cg_gpu_check_sum(y, 1, n, n, seed, first_rank, ranks, dev_bad, cg_gpu_stream()));
  CUDA_OK(cudaMemcpyAsync(&bad, dev_bad, sizeof bad, cudaMemcpyDeviceToHost, cg_gpu_stream()));
  CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
  cg_gpu_free(dev_bad);
  return bad;
}

static size_t tensor_count(int t) { return (size_t)(1 + (cg_test_seed() >> (t % 48)) % 4099); }

START_TEST(nccl_symmetric__plans_over_an_arena_are_right_every_replay_and_fuse_without_copies) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  cg_comm_t *comm = cg_gpu_nccl_only_comm("nccl_symmetric");
  if (!comm) return;
  size_t total = 0;
  for (int t = 0; t < TENSORS; t++) total += tensor_count(t);
  size_t capacity = (total + GATHER + (size_t)GATHER * n) * sizeof(float);
  cg_arena_t *arena = NULL;
  cg_status_t st = cg_nccl_arena_create(&arena, comm, capacity, NULL);
  ck_assert_all_ranks(st == CG_SUCCESS, "cg_nccl_arena_create on an NCCL communicator");

  /* the same pieces in the same order on every rank: the same offsets */
  float *grads[TENSORS], *mine = NULL, *all = NULL;
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int t = 0; t < TENSORS; t++) {
    ck_assert_cg_ok(cg_arena_alloc((void **)&grads[t], arena, tensor_count(t), CG_FLOAT32));
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, grads[t], grads[t], tensor_count(t), CG_FLOAT32, CG_SUM));
  }
  ck_assert_cg_ok(cg_arena_alloc((void **)&mine, arena, GATHER, CG_FLOAT32));
  ck_assert_cg_ok(cg_arena_alloc((void **)&all, arena, (size_t)GATHER * n, CG_FLOAT32));
  ck_assert_cg_ok(cg_allgather(NULL, g, comm, mine, all, GATHER, CG_FLOAT32));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "allreduces and an allgather over a symmetric arena");
  cg_graph_destroy(g);
  cg_plan_stats_t stats;
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  char what[200];
  snprintf(what, sizeof what, "the %d allreduces fuse without copies (buckets %zu, copy bytes %zu)", TENSORS,
           stats.buckets, stats.copy_bytes);
  ck_assert_all_ranks(stats.buckets >= 1 && stats.copy_bytes == 0, what);
  /* the plan's DOT names the collectives in the window (NCCL 2.27 and later) */
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  char *dot = cg_gpu_plan_dot(plan);
  /* the bucket takes the symmetric kernels or, above the cut-over, the plain
   * ones; on one rank every collective is a copy */
  int copies = strstr(dot, "cudaMemcpyAsync (one rank)") != NULL;
  int windows = strstr(dot, "ncclAllReduce (symmetric") && strstr(dot, "ncclAllGather (symmetric window)");
  int named = cg_gpu_size() == 1 ? copies : windows;
  free(dot);
  ck_assert_all_ranks(version < 22700 || named, "the plan's DOT says which collectives lie in a symmetric window");

  cudaStream_t s = cg_gpu_stream();
  for (int k = 0; k < ROUNDS; k++) {
    for (int t = 0; t < TENSORS; t++) CUDA_OK(cg_gpu_fill(grads[t], 1, tensor_count(t), round_seed(k, t), me, 0, s));
    CUDA_OK(cg_gpu_fill(mine, 1, GATHER, round_seed(k, 99), me, 0, s));
    CUDA_OK(cudaMemsetAsync(all, CG_MPI_POISON, (size_t)GATHER * n * sizeof(float), s));
    if (k % 2)
      ck_assert_cg_ok(cg_plan_launch(plan, s));
    else {
      CUDA_OK(cudaStreamSynchronize(s));
      ck_assert_cg_ok(cg_plan_run(plan));
    }
    unsigned long long bad = 0;
    for (int t = 0; t < TENSORS; t++) bad += wrong_sums(grads[t], tensor_count(t), round_seed(k, t), 0, n);
    snprintf(what, sizeof what, "replay %d: the allreduces over the symmetric arena", k);
    ck_assert_all_ranks(bad == 0, what);
    bad = 0;
    for (int r = 0; r < n; r++) bad += wrong_sums(all + (size_t)r * GATHER, GATHER, round_seed(k, 99), r, 1);
    snprintf(what, sizeof what, "replay %d: the allgather over the symmetric arena", k);
    ck_assert_all_ranks(bad == 0, what);
  }
  cg_plan_destroy(plan);
  /* the communicator first: the arena keeps it until it goes */
  cg_comm_destroy(comm);
  cg_arena_destroy(arena);
}
END_TEST

START_TEST(nccl_symmetric__two_arenas_on_one_communicator_out_of_place) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  cg_comm_t *comm = cg_gpu_nccl_only_comm("nccl_symmetric");
  if (!comm) return;
  enum { COUNT = 70001 };
  cg_arena_t *from = NULL, *to = NULL;
  ck_assert_all_ranks(cg_nccl_arena_create(&from, comm, COUNT * sizeof(float), NULL) == CG_SUCCESS,
                      "the first arena");
  ck_assert_all_ranks(cg_nccl_arena_create(&to, comm, COUNT * sizeof(float), NULL) == CG_SUCCESS, "the second arena");
  float *x = NULL, *y = NULL;
  ck_assert_cg_ok(cg_arena_alloc((void **)&x, from, COUNT, CG_FLOAT32));
  ck_assert_cg_ok(cg_arena_alloc((void **)&y, to, COUNT, CG_FLOAT32));
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, x, y, COUNT, CG_FLOAT32, CG_SUM));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "an allreduce from one symmetric arena into another");
  cg_graph_destroy(g);
  cudaStream_t s = cg_gpu_stream();
  for (int k = 0; k < ROUNDS; k++) {
    CUDA_OK(cg_gpu_fill(x, 1, COUNT, round_seed(k, 7), me, 0, s));
    CUDA_OK(cudaMemsetAsync(y, CG_MPI_POISON, COUNT * sizeof(float), s));
    ck_assert_cg_ok(cg_plan_launch(plan, s));
    char what[120];
    snprintf(what, sizeof what, "replay %d: an allreduce between two symmetric arenas", k);
    ck_assert_all_ranks(wrong_sums(y, COUNT, round_seed(k, 7), 0, n) == 0, what);
  }
  cg_plan_destroy(plan);
  /* destroyed in the same order on every rank: deregistering is collective */
  cg_arena_destroy(from);
  cg_arena_destroy(to);
  cg_comm_destroy(comm);
}
END_TEST

START_TEST(nccl_symmetric__a_device_not_the_communicators_is_refused_on_every_rank) {
  cg_comm_t *comm = cg_gpu_nccl_only_comm("nccl_symmetric");
  if (!comm) return;
  cg_arena_opts_t o = CG_ARENA_OPTS_INIT;
  o.device = cg_gpu_device() + 1;
  cg_arena_t *sentinel = (cg_arena_t *)&o, *out = sentinel;
  cg_status_t st = cg_nccl_arena_create(&out, comm, 4096, &o);
  ck_assert_all_ranks(st == CG_ERR_INVALID_ARGUMENT && out == sentinel,
                      "cg_nccl_arena_create with another device than the communicator's");
  ck_assert_all_ranks(strstr(cg_error_last(), "not the communicator's") != NULL, "the refusal says why");
  o.alignment = 3;
  o.device = CG_DEVICE_HOST;
  st = cg_nccl_arena_create(&out, comm, 4096, &o);
  ck_assert_all_ranks(st == CG_ERR_INVALID_ARGUMENT && out == sentinel, "an alignment that is not a power of two");
  st = cg_nccl_arena_create(&out, comm, SIZE_MAX, NULL);
  ck_assert_all_ranks(st == CG_ERR_OVERFLOW && out == sentinel, "a capacity that overflows when padded");
  cg_comm_destroy(comm);
}
END_TEST

/* Every rank's value of `bytes` is rank 0's. */
static int same_on_every_rank(size_t bytes) {
  unsigned long long mine[2] = {bytes, ~(unsigned long long)bytes}, all[2];
  MPI_Allreduce(mine, all, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return all[0] == bytes && all[1] == ~(unsigned long long)bytes;
}

/* A plan of two in-place float32 allreduces (fusion off: one step each) of
 * `small` and `large` elements from `arena`, replayed ROUNDS times with
 * fresh inputs and checked; returns the plan's DOT (free it). */
static char *two_allreduces(cg_comm_t *comm, cg_arena_t *arena, size_t small, size_t large, const char *what) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  size_t counts[2] = {small, large};
  float *x[2];
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int t = 0; t < 2; t++) {
    ck_assert_cg_ok(cg_arena_alloc((void **)&x[t], arena, counts[t], CG_FLOAT32));
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, x[t], x[t], counts[t], CG_FLOAT32, CG_SUM));
  }
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.fusion = 0;
  cg_plan_t *plan = NULL;
  cg_status_t st = cg_compile(&plan, g, &opts);
  ck_assert_all_ranks(st == CG_SUCCESS, what);
  cg_graph_destroy(g);
  cg_plan_stats_t stats;
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  ck_assert_all_ranks(stats.copy_bytes == 0, "the plain path copies nothing");
  cudaStream_t s = cg_gpu_stream();
  for (int k = 0; k < ROUNDS; k++) {
    for (int t = 0; t < 2; t++) CUDA_OK(cg_gpu_fill(x[t], 1, counts[t], round_seed(k, 20 + t), me, 0, s));
    ck_assert_cg_ok(cg_plan_launch(plan, s));
    unsigned long long bad = 0;
    for (int t = 0; t < 2; t++) bad += wrong_sums(x[t], counts[t], round_seed(k, 20 + t), 0, n);
    char text[200];
    snprintf(text, sizeof text, "%s: replay %d is right", what, k);
    ck_assert_all_ranks(bad == 0, text);
  }
  char *dot = cg_gpu_plan_dot(plan);
  cg_plan_destroy(plan);
  return dot;
}

START_TEST(nccl_symmetric__allreduces_above_the_cut_over_take_the_plain_kernels_on_the_same_memory) {
  cg_comm_t *comm = cg_gpu_nccl_only_comm("nccl_symmetric");
  if (!comm) return;
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  enum { SMALL = 512, LARGE = 16384 }; /* 2 KB and 64 KB */
  /* given: up to 4 KB symmetric */
  setenv("CG_SYMMETRIC_MAX_BYTES", "4K", 1);
  cg_arena_t *arena = NULL;
  cg_status_t st = cg_nccl_arena_create(&arena, comm, (SMALL + LARGE) * sizeof(float), NULL);
  unsetenv("CG_SYMMETRIC_MAX_BYTES");
  ck_assert_all_ranks(st == CG_SUCCESS, "cg_nccl_arena_create with CG_SYMMETRIC_MAX_BYTES=4K");
  size_t max = 0;
  if (version >= 22700) {
    for (cg_dtype_t d = 0; d < CG_DTYPE_COUNT; d++) {
      ck_assert_cg_ok(cg_nccl_arena_symmetric_max(&max, arena, d));
      int floating = d == CG_FLOAT32 || d == CG_FLOAT16 || d == CG_BFLOAT16;
      ck_assert_msg(max == (floating ? 4096 : SIZE_MAX) || max == SIZE_MAX, "%s: cut-over %zu, not 4096",
                    cg_dtype_name(d), max);
    }
    ck_assert_cg_ok(cg_nccl_arena_symmetric_max(&max, arena, CG_FLOAT32));
  }
  char *dot = two_allreduces(comm, arena, SMALL, LARGE, "2 KB and 64 KB, cut-over 4 KB");
  int small_symmetric = strstr(dot, "ncclAllReduce (symmetric window)") != NULL;
  int large_plain = strstr(dot, "plain kernels: above the cut-over") != NULL;
  int copies = strstr(dot, "cudaMemcpyAsync (one rank)") != NULL;
  free(dot);
  /* SIZE_MAX: the driver could not map the memory twice (it says so on stderr);
   * one rank copies */
  ck_assert_all_ranks(version < 22700 || (cg_gpu_size() == 1 ? copies && !small_symmetric
                                                             : small_symmetric && large_plain == (max != SIZE_MAX)),
                      "DOT: 2 KB takes the symmetric window, 64 KB the plain kernels (one rank: copies)");
  cg_arena_destroy(arena);

  /* measured: the same cut-over on every rank, and right either way */
  enum { MEASURED_BYTES = 1 << 20 };
  st = cg_nccl_arena_create(&arena, comm, MEASURED_BYTES + 4096, NULL);
  ck_assert_all_ranks(st == CG_SUCCESS, "cg_nccl_arena_create, cut-over measured");
  if (version >= 22700) {
    static const cg_dtype_t floats[3] = {CG_FLOAT32, CG_FLOAT16, CG_BFLOAT16};
    for (int d = 0; d < 3; d++) {
      ck_assert_cg_ok(cg_nccl_arena_symmetric_max(&max, arena, floats[d]));
      char text[160];
      snprintf(text, sizeof text, "the measured %s cut-over (%zu bytes on this rank) is the same on every rank",
               cg_dtype_name(floats[d]), max);
      ck_assert_all_ranks(same_on_every_rank(max), text);
      if (cg_gpu_rank() == 0)
        printf("nccl_symmetric: %d ranks: %s allreduces up to %zu bytes take the symmetric kernels\n",
               cg_gpu_size(), cg_dtype_name(floats[d]), max);
    }
  }
  free(two_allreduces(comm, arena, 256, MEASURED_BYTES / sizeof(float), "1 KB and 1 MB, cut-over measured"));
  cg_arena_destroy(arena);
  cg_comm_destroy(comm);
}
END_TEST

START_TEST(nccl_symmetric__the_variable_set_on_one_rank_only_is_refused_on_every_rank) {
  cg_comm_t *comm = cg_gpu_nccl_only_comm("nccl_symmetric");
  if (!comm) return;
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  if (version < 22700 || cg_gpu_size() < 2) {
    cg_comm_destroy(comm);
    return;
  }
  if (cg_gpu_rank() == 0) setenv("CG_SYMMETRIC_MAX_BYTES", "8K", 1);
  cg_arena_t *sentinel = (cg_arena_t *)comm, *out = sentinel;
  cg_status_t st = cg_nccl_arena_create(&out, comm, 4096, NULL);
  unsetenv("CG_SYMMETRIC_MAX_BYTES");
  ck_assert_all_ranks(st == CG_ERR_INVALID_ARGUMENT && out == sentinel,
                      "CG_SYMMETRIC_MAX_BYTES on rank 0 only: refused on every rank");
  ck_assert_all_ranks(strstr(cg_error_last(), "CG_SYMMETRIC_MAX_BYTES differs") != NULL, "the refusal says why");
  /* the communicator still works: an arena and a plan after it */
  cg_arena_t *arena = NULL;
  ck_assert_all_ranks(cg_nccl_arena_create(&arena, comm, 4096 * sizeof(float), NULL) == CG_SUCCESS,
                      "an arena after the refusal");
  free(two_allreduces(comm, arena, 1024, 3072, "after a refusal"));
  cg_arena_destroy(arena);
  cg_comm_destroy(comm);
}
END_TEST

int main(void) {
  /* NCCL's symmetric and plain kernels, not commgraph's one-shot and two-shot
   * kernels (test_nccl_oneshot.c), which would take these allreduces */
  setenv("CG_ONESHOT_MAX_BYTES", "0", 1);
  setenv("CG_TWOSHOT_MAX_BYTES", "0", 1);
  Suite *s = suite_create("nccl_symmetric");
  TCase *t = cg_gpu_tcase("nccl_symmetric");
  tcase_add_test(t, nccl_symmetric__plans_over_an_arena_are_right_every_replay_and_fuse_without_copies);
  tcase_add_test(t, nccl_symmetric__two_arenas_on_one_communicator_out_of_place);
  tcase_add_test(t, nccl_symmetric__allreduces_above_the_cut_over_take_the_plain_kernels_on_the_same_memory);
  tcase_add_test(t, nccl_symmetric__the_variable_set_on_one_rank_only_is_refused_on_every_rank);
  tcase_add_test(t, nccl_symmetric__a_device_not_the_communicators_is_refused_on_every_rank);
  suite_add_tcase(s, t);
  return cg_gpu_test_main(s, "test_nccl_symmetric");
}
