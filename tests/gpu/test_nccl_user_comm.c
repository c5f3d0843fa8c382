/* The NCCL communicator a program gets from commgraph (cg_comm_nccl) and the
 * one it hands to commgraph (cg_comm_from_nccl), used by the program's own
 * NCCL calls next to plans on the same commgraph communicator.
 *
 * cg_comm_create's user communicator must behave like one from
 * ncclCommInitRank: eager and captured calls return ncclSuccess. Only where
 * NCCL_COMM_BLOCKING=0 overrides every communicator may a call return
 * ncclInProgress, which NCCL then asks the caller to settle. A wrapped
 * communicator is used as the user made it, blocking or not. Every result is
 * checked against integer sums over the ranks, outputs poisoned first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_kernels.h"
#include "gpu_test.h"

enum { UN = 50021, ROUNDS = 5, RING = 64 };

static uint64_t round_seed(int k, int salt) {
  return cg_test_seed() ^ ((uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)salt << 40);
}

/* What NCCL_COMM_BLOCKING says, as NCCL reads it: -1 unset (the config
 * decides), else 0 or 1. */
static int env_blocking(void) {
  const char *v = getenv("NCCL_COMM_BLOCKING");
  if (!v || !*v) return -1;
  return atoi(v) ? 1 : 0;
}

/* A user call on the communicator from cg_comm_create: ncclSuccess right away
 * unless NCCL_COMM_BLOCKING=0 made it non-blocking. */
static void user_call_ok(ncclComm_t comm, ncclResult_t r, const char *what) {
  if (env_blocking() != 0)
    ck_assert_msg(r == ncclSuccess, "rank %d: %s on cg_comm_nccl's communicator returned %s (NCCL_COMM_BLOCKING %s)",
                  cg_gpu_rank(), what, ncclGetErrorString(r), getenv("NCCL_COMM_BLOCKING") ? "set" : "unset");
  r = cg_test_nccl_settle(comm, r);
  ck_assert_msg(r == ncclSuccess, "rank %d: %s: %s", cg_gpu_rank(), what, ncclGetErrorString(r));
}

static unsigned long long count_wrong(const int32_t *y, uint64_t seed) {
  unsigned long long bad = 0, *dev_bad = cg_gpu_alloc(sizeof bad);
  CUDA_OK(cudaMemsetAsync(dev_bad, 0, sizeof bad, cg_gpu_stream()));
  CUDA_OK(cg_gpu_check_sum(y, 0, UN, UN, seed, 0, cg_gpu_size(), dev_bad, cg_gpu_stream()));
  CUDA_OK(cudaMemcpyAsync(&bad, dev_bad, sizeof bad, cudaMemcpyDeviceToHost, cg_gpu_stream()));
  CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
  cg_gpu_free(dev_bad);
  return bad;
}


/* Fills the ring's send buffer under `seed` (every replay after this sends
 * it) and poisons its receive buffer. */
static void ring_prepare(int32_t *in, int32_t *out, uint64_t seed) {
  CUDA_OK(cg_gpu_fill(in, 0, RING, seed, cg_gpu_rank(), 0, cg_gpu_stream()));
  CUDA_OK(cudaMemsetAsync(out, CG_MPI_POISON, RING * 4, cg_gpu_stream()));
  CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
}

/* The ring's receive buffer holds what the previous rank sent under `seed`. */
static int ring_right(const int32_t *out, uint64_t seed) {
  int32_t h[RING];
  int from = (cg_gpu_rank() + cg_gpu_size() - 1) % cg_gpu_size(), ok = 1;
  CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
  CUDA_OK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < RING; i++) ok &= h[i] == cg_gpu_value(seed, from, (uint64_t)i);
  return ok;
}

/* One ncclAllReduce of `in` into `out` captured on its own stream and
 * instantiated: the program's own CUDA graph on the user communicator. */
static cudaGraphExec_t capture_user_allreduce(ncclComm_t comm, const int32_t *in, int32_t *out, cudaStream_t s) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  ncclResult_t r = ncclAllReduce(in, out, UN, ncclInt32, ncclSum, comm, s);
  /* settled before the capture ends, as NCCL asks of non-blocking calls */
  if (env_blocking() != 0 && r != ncclSuccess) {
    cudaStreamEndCapture(s, &graph);
    ck_abort_msg("rank %d: a captured ncclAllReduce on cg_comm_nccl's communicator returned %s", cg_gpu_rank(),
                 ncclGetErrorString(r));
  }
  r = cg_test_nccl_settle(comm, r);
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  NCCL_OK(r);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphDestroy(graph));
  return exec;
}

/* Rounds of: the program's eager allreduce (grouped in odd rounds, as a
 * program's bucketed allreduces are), a plan replay, the program's captured
 * allreduce, all on one stream and one commgraph communicator; each output
 * checked. The plan reduces plan_x into plan_y. */
static void interleave(ncclComm_t user, cg_plan_t *plan, int32_t *plan_x, int32_t *plan_y, int salt) {
  int me = cg_gpu_rank();
  cudaStream_t s = cg_gpu_stream();
  int32_t *a = cg_gpu_alloc(UN * 4), *b = cg_gpu_alloc(UN * 4), *c = cg_gpu_alloc(UN * 4), *d = cg_gpu_alloc(UN * 4);
  cudaGraphExec_t captured = capture_user_allreduce(user, c, d, s);
  for (int k = 0; k < ROUNDS; k++) {
    uint64_t eager_seed = round_seed(k, salt), plan_seed = round_seed(k, salt + 1), graph_seed = round_seed(k, salt + 2);
    CUDA_OK(cg_gpu_fill(a, 0, UN, eager_seed, me, 0, s));
    CUDA_OK(cg_gpu_fill(plan_x, 0, UN, plan_seed, me, 0, s));
    CUDA_OK(cg_gpu_fill(c, 0, UN, graph_seed, me, 0, s));
    CUDA_OK(cudaMemsetAsync(b, CG_MPI_POISON, UN * 4, s));
    CUDA_OK(cudaMemsetAsync(plan_y, CG_MPI_POISON, UN * 4, s));
    CUDA_OK(cudaMemsetAsync(d, CG_MPI_POISON, UN * 4, s));
    if (k % 2) {
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclAllReduce(a, b, UN, ncclInt32, ncclSum, user, s));
      user_call_ok(user, ncclGroupEnd(), "ncclGroupEnd of a grouped eager ncclAllReduce");
    } else {
      user_call_ok(user, ncclAllReduce(a, b, UN, ncclInt32, ncclSum, user, s), "an eager ncclAllReduce");
    }
    ck_assert_cg_ok(cg_plan_launch(plan, s));
    CUDA_OK(cudaGraphLaunch(captured, s));
    char what[200];
    snprintf(what, sizeof what, "round %d: the program's eager ncclAllReduce next to a plan", k);
    ck_assert_all_ranks(count_wrong(b, eager_seed) == 0, what);
    snprintf(what, sizeof what, "round %d: the plan's allreduce next to the program's NCCL calls", k);
    ck_assert_all_ranks(count_wrong(plan_y, plan_seed) == 0, what);
    snprintf(what, sizeof what, "round %d: the program's captured ncclAllReduce next to a plan", k);
    ck_assert_all_ranks(count_wrong(d, graph_seed) == 0, what);
  }
  CUDA_OK(cudaGraphExecDestroy(captured));
  cg_gpu_free(a); cg_gpu_free(b); cg_gpu_free(c); cg_gpu_free(d);
}

START_TEST(nccl_user_comm__eager_and_captured_calls_next_to_a_plan_return_success) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  cg_comm_t *comm = cg_gpu_nccl_comm(MPI_COMM_WORLD);
  const char *backend = NULL;
  ck_assert_cg_ok(cg_comm_backend_name(&backend, comm));
  if (strcmp(backend, "nccl") != 0) { /* CG_GPU_TEST_BACKEND chose an MPI backend: no NCCL inside */
    cg_comm_destroy(comm);
    return;
  }
  ncclComm_t user = NULL;
  ck_assert_cg_ok(cg_comm_nccl(&user, comm));
  int count = 0, user_rank = -1;
  NCCL_OK(ncclCommCount(user, &count));
  NCCL_OK(ncclCommUserRank(user, &user_rank));
  ck_assert_int_eq(count, n);
  ck_assert_int_eq(user_rank, me);

  /* the program's call before any plan exists, and between compiles */
  int32_t *x = cg_gpu_alloc(UN * 4), *y = cg_gpu_alloc(UN * 4);
  uint64_t seed = round_seed(99, 7);
  CUDA_OK(cg_gpu_fill(x, 0, UN, seed, me, 0, cg_gpu_stream()));
  user_call_ok(user, ncclAllReduce(x, y, UN, ncclInt32, ncclSum, user, cg_gpu_stream()), "a first ncclAllReduce");
  ck_assert_all_ranks(count_wrong(y, seed) == 0, "the program's first allreduce on cg_comm_nccl's communicator");

  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, x, y, UN, CG_INT32, CG_SUM));
  /* a barrier and a ring of sends: the plan's grouped calls during capture */
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  int32_t *ring_in = cg_gpu_alloc(RING * 4), *ring_out = cg_gpu_alloc(RING * 4);
  ck_assert_cg_ok(cg_send(NULL, g, comm, ring_in, RING, CG_INT32, (me + 1) % n));
  ck_assert_cg_ok(cg_recv(NULL, g, comm, ring_out, RING, CG_INT32, (me + n - 1) % n));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "a plan beside the program's communicator");
  cg_graph_destroy(g);
  uint64_t ring_seed = round_seed(77, 3);
  ring_prepare(ring_in, ring_out, ring_seed);
  interleave(user, plan, x, y, 1);
  ck_assert_all_ranks(ring_right(ring_out, ring_seed), "the plan's ring of sends next to the program's NCCL calls");
  cg_plan_destroy(plan);
  cg_comm_destroy(comm);
  cg_gpu_free(x); cg_gpu_free(y); cg_gpu_free(ring_in); cg_gpu_free(ring_out);
}
END_TEST

/* The program's own communicator, blocking or not, wrapped: plans (compiled,
 * so warmed up and captured on it) and the program's calls share it. */
static void wrapped_communicator(int blocking) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  ncclUniqueId id;
  if (me == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking;
  ncclComm_t nc = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&nc, n, id, me, &config);
  NCCL_OK(cg_test_nccl_settle(nc, r));

  cg_comm_t *w = NULL;
  cg_status_t st = cg_comm_from_nccl(&w, nc, MPI_COMM_WORLD);
  char what[300];
  snprintf(what, sizeof what, "cg_comm_from_nccl of a %sblocking communicator: %s", blocking ? "" : "non-",
           st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, what);
  ncclComm_t back = NULL;
  ck_assert_cg_ok(cg_comm_nccl(&back, w));
  ck_assert_ptr_eq(back, nc);

  int32_t *x = cg_gpu_alloc(UN * 4), *y = cg_gpu_alloc(UN * 4);
  int32_t *ring_in = cg_gpu_alloc(RING * 4), *ring_out = cg_gpu_alloc(RING * 4);
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, w, x, y, UN, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_barrier(NULL, g, w));
  ck_assert_cg_ok(cg_send(NULL, g, w, ring_in, RING, CG_INT32, (me + 1) % n));
  ck_assert_cg_ok(cg_recv(NULL, g, w, ring_out, RING, CG_INT32, (me + n - 1) % n));
  snprintf(what, sizeof what, "a plan on a wrapped %sblocking communicator", blocking ? "" : "non-");
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, what);
  cg_graph_destroy(g);
  /* the program's calls: any result a communicator of its blocking mode may
   * give is fine here, as long as it settles to success */
  cudaStream_t s = cg_gpu_stream();
  for (int k = 0; k < ROUNDS; k++) {
    uint64_t seed = round_seed(k, 40 + blocking), user_seed = round_seed(k, 50 + blocking);
    int32_t *a = cg_gpu_alloc(UN * 4), *b = cg_gpu_alloc(UN * 4);
    ring_prepare(ring_in, ring_out, seed ^ 0x51);
    CUDA_OK(cg_gpu_fill(x, 0, UN, seed, me, 0, s));
    CUDA_OK(cg_gpu_fill(a, 0, UN, user_seed, me, 0, s));
    CUDA_OK(cudaMemsetAsync(y, CG_MPI_POISON, UN * 4, s));
    ck_assert_cg_ok(cg_plan_launch(plan, s));
    NCCL_OK(cg_test_nccl_settle(nc, ncclAllReduce(a, b, UN, ncclInt32, ncclSum, nc, s)));
    snprintf(what, sizeof what, "round %d: a plan on a wrapped %sblocking communicator", k, blocking ? "" : "non-");
    ck_assert_all_ranks(count_wrong(y, seed) == 0, what);
    snprintf(what, sizeof what, "round %d: the program's call on its wrapped %sblocking communicator", k,
             blocking ? "" : "non-");
    ck_assert_all_ranks(count_wrong(b, user_seed) == 0, what);
    snprintf(what, sizeof what, "round %d: the plan's ring of sends on a wrapped %sblocking communicator", k,
             blocking ? "" : "non-");
    ck_assert_all_ranks(ring_right(ring_out, seed ^ 0x51), what);
    cg_gpu_free(a); cg_gpu_free(b);
  }
  cg_plan_destroy(plan);
  cg_comm_destroy(w);
  NCCL_OK(cg_test_nccl_settle(nc, ncclCommFinalize(nc)));
  NCCL_OK(ncclCommDestroy(nc));
  cg_gpu_free(x); cg_gpu_free(y); cg_gpu_free(ring_in); cg_gpu_free(ring_out);
}

START_TEST(nccl_user_comm__wrapped_blocking_communicator_runs_plans_and_the_programs_calls) {
  wrapped_communicator(1);
}
END_TEST

START_TEST(nccl_user_comm__wrapped_non_blocking_communicator_runs_plans_and_the_programs_calls) {
  wrapped_communicator(0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nccl_user_comm");
  TCase *t = cg_gpu_tcase("nccl_user_comm");
  tcase_add_test(t, nccl_user_comm__eager_and_captured_calls_next_to_a_plan_return_success);
  tcase_add_test(t, nccl_user_comm__wrapped_blocking_communicator_runs_plans_and_the_programs_calls);
  tcase_add_test(t, nccl_user_comm__wrapped_non_blocking_communicator_runs_plans_and_the_programs_calls);
  suite_add_tcase(s, t);
  return cg_gpu_test_main(s, "test_nccl_user_comm");
}
