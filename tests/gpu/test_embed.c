/* Device plans inside the user's own CUDA graphs (issue 7): cg_plan_launch
 * into a stream being captured (a thousand replays of the captured iteration
 * with data that changes on every replay, made and checked on the device);
 * buckets and rings captured; one user graph instantiated twice, its
 * instances ordered on one stream or by events, or racing on unordered
 * streams (the plan's lock serializes them); cg_plan_cuda_graph as a child
 * node of a graph built by hand; cg_plan_rebind on device plans (new buffers
 * and back, bucket members between arenas and scattered buffers, an embedded
 * plan updated with cudaGraphExecChildGraphNodeSetParams, refusals); child
 * graphs and event nodes compiled into device plans, on compute lanes or, in
 * a chain between collectives, on the communicator's lane; a backward pass
 * in miniature whose captured graph must keep no edge a longer path implies.
 *
 * Values are integers from cg_gpu_value, so every sum is exact; outputs are
 * poisoned before every replay and checked by kernels that count wrong
 * elements in device memory; the replay number lives in device memory too,
 * advanced by a kernel in the same graph, so a captured graph sees fresh data
 * every time it is launched.
 *
 * This file holds the capture tests and the suite; the rebinding tests are in
 * test_embed_rebind.c, the compute nodes in test_embed_compute.c, and what
 * they share in embed_support.c and embed_support.h. */
#include "embed_support.h"

/* Ends a capture whatever happened inside it, then asserts on every rank that
 * the plan went into it and the capture gave a graph. */
static cudaGraph_t end_capture(cudaStream_t s, cg_status_t launched, const char *what) {
  char detail[400];
  snprintf(detail, sizeof detail, "%s", launched == CG_SUCCESS ? "" : cg_error_last());
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(s, &g);
  char text[700];
  snprintf(text, sizeof text, "%s: cg_plan_launch into the capture returned %s (%s); cudaStreamEndCapture: %s", what,
           cg_status_string(launched), detail, cudaGetErrorString(e));
  int ok = launched == CG_SUCCESS && e == cudaSuccess && g != NULL;
  if (!ok && g) cudaGraphDestroy(g);
  ck_assert_all_ranks(ok, text);
  return g;
}

/* How many nodes of `type` the graph has at its top level; *total gets all. */
static size_t count_nodes(cudaGraph_t g, enum cudaGraphNodeType type, size_t *total) {
  size_t n = 0, hits = 0;
  CUDA_OK(cudaGraphGetNodes(g, NULL, &n));
  cudaGraphNode_t *nodes = calloc(n ? n : 1, sizeof *nodes);
  ck_assert_ptr_nonnull(nodes);
  CUDA_OK(cudaGraphGetNodes(g, nodes, &n));
  for (size_t i = 0; i < n; i++) {
    enum cudaGraphNodeType t;
    CUDA_OK(cudaGraphNodeGetType(nodes[i], &t));
    hits += t == type;
  }
  free(nodes);
  if (total) *total = n;
  return hits;
}

/* ---- capture into the user's stream: a thousand replays
 *
 * Captured once on the user's stream: a kernel writes x from the replay
 * number, y is poisoned, the plan (allreduce x -> y), a kernel checks y, a
 * kernel advances the replay number. The captured graph holds the plan as one
 * child graph node after the kernels captured before it. */

#define THOUSAND 1000
enum { CAP_N = 65537 };

START_TEST(embed__captured_iteration_replays_a_thousand_times_with_fresh_data) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  uint64_t base = embed_base_seed(1);
  int32_t *x = cg_gpu_alloc(CAP_N * 4), *y = cg_gpu_alloc(CAP_N * 4);
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(0), x, y, CAP_N, CG_INT32, CG_SUM));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "one allreduce");
  cg_graph_destroy(g);
  counters_t c = embed_counters_new();
  cudaStream_t s = embed_new_stream();

  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CUDA_OK(cg_gpu_fill_round(x, 0, CAP_N, base, me, c.round, s));
  embed_poison_async(y, CAP_N * 4, s);
  cg_status_t launched = cg_plan_launch(plan, s);
  CUDA_OK(cg_gpu_check_round(y, 0, CAP_N, CAP_N, 1, 0, base, 0, n, c.round, c.bad, s));
  CUDA_OK(cg_gpu_bump(c.round, s));
  cudaGraph_t user = end_capture(s, launched, "thread-local capture");

  /* what was captured: fill, memset, the plan as one child graph, check, bump,
   * one after another (only the first kernel is a root) */
  size_t total = 0, roots = 0;
  size_t children = count_nodes(user, cudaGraphNodeTypeGraph, &total);
  CUDA_OK(cudaGraphGetRootNodes(user, NULL, &roots));
  assert_all_ranks_msg(children == 1 && total == 5 && roots == 1,
                       "rank %d: the captured graph has %zu nodes (%zu child graphs, %zu roots); expected 5 nodes in "
                       "a chain, the plan one child graph node", me, total, children, roots);

  cudaGraphExec_t exec = embed_instantiate(user);
  for (int k = 0; k < THOUSAND; k++) CUDA_OK(cudaGraphLaunch(exec, s));
  embed_expect_clean(&c, THOUSAND, "a thousand launches of the captured graph");
  ck_assert_all_ranks(embed_holds_sum(y, CAP_N, base, THOUSAND - 1), "y after the last launch, checked on the host");

  /* the plan still launches on its own (x still holds the last replay's data),
   * and the user's graph after it */
  embed_poison_async(y, CAP_N * 4, s);
  ck_assert_cg_ok(cg_plan_launch(plan, s));
  ck_assert_all_ranks(embed_holds_sum(y, CAP_N, base, THOUSAND - 1), "a plain cg_plan_launch after the captured ones");
  CUDA_OK(cudaGraphLaunch(exec, s));
  embed_expect_clean(&c, THOUSAND + 1, "the captured graph after a plain launch");

  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(user));
  cg_plan_destroy(plan);
  CUDA_OK(cudaStreamDestroy(s));
  embed_counters_free(&c);
  cg_gpu_free(x);
  cg_gpu_free(y);
}
END_TEST

/* ---- a bucket and a ring, captured in global mode on a stream joined to
 * the capture through an event */

#define BUCKET_K 6
static const size_t bucket_counts[BUCKET_K] = {1, 17, 256, 1000, 3, 4099};
enum { RING_N = 3001, BUCKET_REPLAYS = 300 };

START_TEST(embed__bucket_and_ring_captured_on_a_joined_stream_in_global_mode) {
  int me = cg_gpu_rank(), n = cg_gpu_size(), from = (me + n - 1) % n;
  cg_comm_t *a = cg_gpu_shared_comm(0), *b = cg_gpu_shared_comm(1);
  float *xs[BUCKET_K], *ys[BUCKET_K];
  int32_t *out = cg_gpu_alloc(RING_N * 4), *in = cg_gpu_alloc(RING_N * 4);
  uint64_t base = embed_base_seed(2), ring_base = embed_base_seed(3);
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int k = 0; k < BUCKET_K; k++) {
    xs[k] = cg_gpu_alloc(bucket_counts[k] * 4);
    ys[k] = cg_gpu_alloc(bucket_counts[k] * 4);
    ck_assert_cg_ok(cg_allreduce(NULL, g, a, xs[k], ys[k], bucket_counts[k], CG_FLOAT32, CG_SUM));
  }
  ck_assert_cg_ok(cg_send(NULL, g, b, out, RING_N, CG_INT32, (me + 1) % n));
  ck_assert_cg_ok(cg_recv(NULL, g, b, in, RING_N, CG_INT32, from));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "six small allreduces and a ring");
  cg_graph_destroy(g);
  cg_plan_stats_t st;
  ck_assert_cg_ok(cg_plan_stats(&st, plan));
  if (!embed_fusion_disabled())
    assert_all_ranks_msg(st.buckets >= 1 && st.fused_nodes >= 2,
                         "rank %d: %zu buckets, %zu fused nodes: the six small allreduces should fuse", me, st.buckets,
                         st.fused_nodes);

  counters_t c = embed_counters_new();
  cudaStream_t s = embed_new_stream(), joined = embed_new_stream();
  cudaEvent_t fork = embed_new_event(), join = embed_new_event();
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < BUCKET_K; k++) {
    CUDA_OK(cg_gpu_fill_round(xs[k], 1, bucket_counts[k], base + (uint64_t)k, me, c.round, s));
    embed_poison_async(ys[k], bucket_counts[k] * 4, s);
  }
  CUDA_OK(cg_gpu_fill_round(out, 0, RING_N, ring_base, me, c.round, s));
  embed_poison_async(in, RING_N * 4, s);
  CUDA_OK(cudaEventRecord(fork, s));
  CUDA_OK(cudaStreamWaitEvent(joined, fork, 0));
  cg_status_t launched = cg_plan_launch(plan, joined);
  CUDA_OK(cudaEventRecord(join, joined));
  CUDA_OK(cudaStreamWaitEvent(s, join, 0));
  for (int k = 0; k < BUCKET_K; k++)
    CUDA_OK(cg_gpu_check_round(ys[k], 1, bucket_counts[k], bucket_counts[k], 1, 0, base + (uint64_t)k, 0, n, c.round,
                               c.bad, s));
  CUDA_OK(cg_gpu_check_round(in, 0, RING_N, RING_N, 1, 0, ring_base, from, 1, c.round, c.bad, s));
  CUDA_OK(cg_gpu_bump(c.round, s));
  cudaGraph_t user = end_capture(s, launched, "global capture, plan on a joined stream");
  size_t children = count_nodes(user, cudaGraphNodeTypeGraph, NULL);
  assert_all_ranks_msg(children == 1, "rank %d: %zu child graph nodes in the capture, expected 1 (the plan)", me,
                       children);

  cudaGraphExec_t exec = embed_instantiate(user);
  for (int k = 0; k < BUCKET_REPLAYS; k++) CUDA_OK(cudaGraphLaunch(exec, s));
  embed_expect_clean(&c, BUCKET_REPLAYS, "the bucket and the ring, captured");

  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(user));
  cg_plan_destroy(plan);
  CUDA_OK(cudaEventDestroy(fork));
  CUDA_OK(cudaEventDestroy(join));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaStreamDestroy(joined));
  embed_counters_free(&c);
  for (int k = 0; k < BUCKET_K; k++) {
    cg_gpu_free(xs[k]);
    cg_gpu_free(ys[k]);
  }
  cg_gpu_free(out);
  cg_gpu_free(in);
}
END_TEST

/* ---- one user graph, two instances, in order: alternately on one stream,
 * then on two streams that wait for each other's events */

enum { TWO_N = 40961, TWO_M = 1031, TWO_REPLAYS = 200 };

START_TEST(embed__two_instances_ordered_by_one_stream_or_by_events) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  uint64_t base = embed_base_seed(4);
  int32_t *x = cg_gpu_alloc(TWO_N * 4), *y = cg_gpu_alloc(TWO_N * 4), *z = cg_gpu_alloc((size_t)n * TWO_M * 4);
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(0), x, y, TWO_N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_allgather(NULL, g, cg_gpu_shared_comm(1), y, z, TWO_M, CG_INT32));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "allreduce then allgather of its start");
  cg_graph_destroy(g);
  counters_t c = embed_counters_new();
  cudaStream_t s = embed_new_stream();
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CUDA_OK(cg_gpu_fill_round(x, 0, TWO_N, base, me, c.round, s));
  embed_poison_async(y, TWO_N * 4, s);
  embed_poison_async(z, (size_t)n * TWO_M * 4, s);
  cg_status_t launched = cg_plan_launch(plan, s);
  CUDA_OK(cg_gpu_check_round(y, 0, TWO_N, TWO_N, 1, 0, base, 0, n, c.round, c.bad, s));
  CUDA_OK(cg_gpu_check_round(z, 0, (size_t)n * TWO_M, TWO_M, 1, 0, base, 0, n, c.round, c.bad, s));
  CUDA_OK(cg_gpu_bump(c.round, s));
  cudaGraph_t user = end_capture(s, launched, "capture");
  cudaGraphExec_t one = embed_instantiate(user), two = embed_instantiate(user);

  for (int k = 0; k < TWO_REPLAYS; k++) CUDA_OK(cudaGraphLaunch(k % 2 ? two : one, s));
  embed_expect_clean(&c, TWO_REPLAYS, "two instances alternating on one stream");

  cudaStream_t s1 = embed_new_stream(), s2 = embed_new_stream();
  cudaEvent_t e1 = embed_new_event(), e2 = embed_new_event();
  for (int k = 0; k < TWO_REPLAYS; k++) {
    if (k % 2 == 0) {
      if (k) CUDA_OK(cudaStreamWaitEvent(s1, e2, 0));
      CUDA_OK(cudaGraphLaunch(one, s1));
      CUDA_OK(cudaEventRecord(e1, s1));
    } else {
      CUDA_OK(cudaStreamWaitEvent(s2, e1, 0));
      CUDA_OK(cudaGraphLaunch(two, s2));
      CUDA_OK(cudaEventRecord(e2, s2));
    }
  }
  embed_expect_clean(&c, 2 * TWO_REPLAYS, "two instances on two streams ordered by events");

  CUDA_OK(cudaGraphExecDestroy(one));
  CUDA_OK(cudaGraphExecDestroy(two));
  CUDA_OK(cudaGraphDestroy(user));
  cg_plan_destroy(plan);
  CUDA_OK(cudaEventDestroy(e1));
  CUDA_OK(cudaEventDestroy(e2));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaStreamDestroy(s1));
  CUDA_OK(cudaStreamDestroy(s2));
  embed_counters_free(&c);
  cg_gpu_free(x);
  cg_gpu_free(y);
  cg_gpu_free(z);
}
END_TEST

/* ---- instances racing on unordered streams serialize on the plan's lock
 *
 * A plan without a communicator (two child-graph nodes, each a kernel that
 * adds one to every element `times` times by reading, sleeping and writing
 * back: not atomic), embedded in a user graph instantiated twice; both
 * instances and plain cg_plan_launch calls go to three streams that do not
 * wait for each other. Replays that overlapped would lose increments; the
 * lock makes them run one at a time, so every increment lands. (No
 * communicator: with NCCL, replays the GPU orders differently on each rank
 * could hang.) */


static cudaGraph_t captured_slow_increment(int32_t *buf) {
  cudaStream_t s = embed_new_stream();
  cudaGraph_t g = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CUDA_OK(cg_gpu_slow_increment(buf, LOCK_N, LOCK_TIMES, LOCK_DELAY_NS, s));
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaStreamDestroy(s));
  return g;
}

/* The smallest element of the buffer; *wrong: how many differ from `want`. */
static long long min_of(const int32_t *buf, long long want, int *wrong) {
  int32_t *h = malloc(LOCK_N * sizeof *h);
  ck_assert_ptr_nonnull(h);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(h, buf, LOCK_N * sizeof *h, cudaMemcpyDeviceToHost));
  long long least = h[0];
  *wrong = 0;
  for (int i = 0; i < LOCK_N; i++) {
    least = h[i] < least ? h[i] : least;
    *wrong += h[i] != want;
  }
  free(h);
  return least;
}

START_TEST(embed__instances_on_unordered_streams_serialize_on_the_plan_lock) {
  int me = cg_gpu_rank();
  int32_t *buf, *control;
  CUDA_OK(cudaMalloc((void **)&buf, LOCK_N * sizeof *buf));
  CUDA_OK(cudaMalloc((void **)&control, LOCK_N * sizeof *control));
  CUDA_OK(cudaMemset(buf, 0, LOCK_N * sizeof *buf));
  CUDA_OK(cudaMemset(control, 0, LOCK_N * sizeof *control));
  cudaGraph_t child = captured_slow_increment(buf);
  cg_range_t r = {buf, LOCK_N * sizeof *buf};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = access.writes = &r;
  access.n_reads = access.n_writes = 1;
  cg_graph_t *g;
  cg_node_t first, second;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_child_graph(&first, g, child, &access));
  ck_assert_cg_ok(cg_child_graph(&second, g, child, &access));
  ck_assert_cg_ok(cg_node_name(g, first, "slow increment 1"));
  CUDA_OK(cudaGraphDestroy(child)); /* cloned when recorded */
  cg_plan_t *plan = NULL;
  cg_status_t st = cg_compile(&plan, g, NULL); /* no communicator: nothing collective */
  char text[500];
  snprintf(text, sizeof text, "cg_compile of a graph of child graphs only: %s: %s", cg_status_string(st),
           st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, text);
  cg_graph_destroy(g);
  cg_plan_stats_t stats;
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  assert_all_ranks_msg(stats.device == cg_gpu_device() && stats.communicators == 0,
                       "rank %d: a plan of child graphs only runs on device %d (the current one: %d) with %zu "
                       "communicators", me, stats.device, cg_gpu_device(), stats.communicators);

  cudaStream_t s = embed_new_stream(), s1 = embed_new_stream(), s2 = embed_new_stream(), s3 = embed_new_stream();
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cg_status_t launched = cg_plan_launch(plan, s);
  cudaGraph_t user = end_capture(s, launched, "capturing a plan of child graphs");
  cudaGraphExec_t one = embed_instantiate(user), two = embed_instantiate(user);
  for (int k = 0; k < LOCK_LAUNCHES; k++) {
    CUDA_OK(cudaGraphLaunch(one, s1));
    CUDA_OK(cudaGraphLaunch(two, s2));
    ck_assert_cg_ok(cg_plan_launch(plan, s3));
  }
  int wrong = 0;
  long long want = 3ll * LOCK_LAUNCHES * 2 * LOCK_TIMES, got = min_of(buf, want, &wrong);
  snprintf(text, sizeof text, "rank %d: replays on three unordered streams: %d of %d elements are not %lld (the "
           "smallest is %lld: increments were lost, replays overlapped)", me, wrong, LOCK_N, want, got);
  ck_assert_all_ranks(wrong == 0, text);

  /* the same kernels without commgraph on two of those streams, to show the
   * race is real on this GPU (reported, not asserted: it depends on timing) */
  cudaStream_t cs = embed_new_stream();
  cudaGraph_t bare = NULL;
  CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
  CUDA_OK(cg_gpu_slow_increment(control, LOCK_N, LOCK_TIMES, LOCK_DELAY_NS, cs));
  CUDA_OK(cudaStreamEndCapture(cs, &bare));
  cudaGraphExec_t b1 = embed_instantiate(bare), b2 = embed_instantiate(bare);
  for (int k = 0; k < LOCK_LAUNCHES; k++) {
    CUDA_OK(cudaGraphLaunch(b1, s1));
    CUDA_OK(cudaGraphLaunch(b2, s2));
  }
  long long bare_want = 2ll * LOCK_LAUNCHES * LOCK_TIMES, bare_got = min_of(control, bare_want, &wrong);
  if (me == 0)
    printf("plan lock: %lld of %lld increments in every element; the same kernels without the lock: at least %lld of "
           "%lld\n", got, want, bare_got, bare_want);

  CUDA_OK(cudaGraphExecDestroy(b1));
  CUDA_OK(cudaGraphExecDestroy(b2));
  CUDA_OK(cudaGraphDestroy(bare));
  CUDA_OK(cudaGraphExecDestroy(one));
  CUDA_OK(cudaGraphExecDestroy(two));
  CUDA_OK(cudaGraphDestroy(user));
  cg_plan_destroy(plan);
  cudaStream_t streams[] = {s, s1, s2, s3, cs};
  for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) CUDA_OK(cudaStreamDestroy(streams[i]));
  cg_gpu_free(buf);
  cg_gpu_free(control);
}
END_TEST

/* ---- cg_plan_cuda_graph as a child node of a graph built by hand:
 * fill x -> the plan (allreduce x -> y, broadcast x -> z from the last rank)
 * -> checks of y and z -> bump, with y and z poisoned by memset nodes */

enum { HAND_N = 100003, HAND_REPLAYS = 300 };

START_TEST(embed__plan_graph_added_as_a_child_node_between_kernel_nodes) {
  int me = cg_gpu_rank(), n = cg_gpu_size(), root = n - 1;
  uint64_t base = embed_base_seed(5);
  int32_t *x = cg_gpu_alloc(HAND_N * 4), *y = cg_gpu_alloc(HAND_N * 4), *z = cg_gpu_alloc(HAND_N * 4);
  cg_comm_t *a = cg_gpu_shared_comm(0);
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, a, x, y, HAND_N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_broadcast(NULL, g, a, x, z, HAND_N, CG_INT32, root));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "allreduce and broadcast");
  cg_graph_destroy(g);

  cudaGraph_t pg = NULL;
  ck_assert_cg_ok(cg_plan_cuda_graph(&pg, plan));
  ck_assert_ptr_nonnull(pg);
  cudaGraph_t untouched = (cudaGraph_t)&untouched;
  ck_assert_cg_status(cg_plan_cuda_graph(NULL, plan), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_cuda_graph(&untouched, NULL), CG_ERR_INVALID_ARGUMENT);

  counters_t c = embed_counters_new();
  cudaGraph_t user;
  cudaGraphNode_t fill, poison_y, poison_z, child, check_y, check_z, bump;
  CUDA_OK(cudaGraphCreate(&user, 0));
  CUDA_OK(cg_gpu_graph_fill_round(&fill, user, NULL, 0, x, 0, HAND_N, base, me, c.round));
  poison_y = embed_add_poison_node(user, y, HAND_N * 4, NULL, 0);
  poison_z = embed_add_poison_node(user, z, HAND_N * 4, NULL, 0);
  cudaGraphNode_t before[] = {fill, poison_y, poison_z};
  CUDA_OK(cudaGraphAddChildGraphNode(&child, user, before, 3, pg));
  CUDA_OK(cg_gpu_graph_check_round(&check_y, user, &child, 1, y, 0, HAND_N, HAND_N, 1, 0, base, 0, n, c.round, c.bad));
  CUDA_OK(cg_gpu_graph_check_round(&check_z, user, &child, 1, z, 0, HAND_N, HAND_N, 1, 0, base, root, 1, c.round,
                                   c.bad));
  cudaGraphNode_t checks[] = {check_y, check_z};
  CUDA_OK(cg_gpu_graph_bump(&bump, user, checks, 2, c.round));
  cudaGraphExec_t exec = embed_instantiate(user);
  cudaStream_t s = embed_new_stream();
  for (int k = 0; k < HAND_REPLAYS; k++) CUDA_OK(cudaGraphLaunch(exec, s));
  embed_expect_clean(&c, HAND_REPLAYS, "the plan's graph between kernel nodes");

  /* a second copy of the plan in the same user graph, after the first, with
   * its own fill, poison, checks and bump: each launch replays the plan twice
   * on two replays' data */
  cudaGraphNode_t fill2, poison2[2], child2, check2[2], bump2;
  CUDA_OK(cg_gpu_graph_fill_round(&fill2, user, &bump, 1, x, 0, HAND_N, base, me, c.round));
  poison2[0] = embed_add_poison_node(user, y, HAND_N * 4, checks, 2);
  poison2[1] = embed_add_poison_node(user, z, HAND_N * 4, checks, 2);
  cudaGraphNode_t before2[] = {fill2, poison2[0], poison2[1]};
  CUDA_OK(cudaGraphAddChildGraphNode(&child2, user, before2, 3, pg));
  CUDA_OK(cg_gpu_graph_check_round(&check2[0], user, &child2, 1, y, 0, HAND_N, HAND_N, 1, 0, base, 0, n, c.round,
                                   c.bad));
  CUDA_OK(cg_gpu_graph_check_round(&check2[1], user, &child2, 1, z, 0, HAND_N, HAND_N, 1, 0, base, root, 1, c.round,
                                   c.bad));
  CUDA_OK(cg_gpu_graph_bump(&bump2, user, check2, 2, c.round));
  cudaGraphExec_t exec2 = embed_instantiate(user);
  for (int k = 0; k < HAND_REPLAYS / 10; k++) CUDA_OK(cudaGraphLaunch(exec2, s));
  embed_expect_clean(&c, HAND_REPLAYS + 2 * (HAND_REPLAYS / 10), "two copies of the plan in one user graph");
  ck_assert_all_ranks(embed_holds_sum(y, HAND_N, base, HAND_REPLAYS + 2 * (HAND_REPLAYS / 10) - 1),
                      "y after two copies of the plan in one graph, checked on the host");
  CUDA_OK(cudaGraphExecDestroy(exec2));

  /* a host plan has no CUDA graph */
  cg_comm_t *host;
  ck_assert_cg_ok(cg_comm_create(&host, MPI_COMM_WORLD, NULL));
  int32_t hin = me, hout = 0;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, host, &hin, &hout, 1, CG_INT32, CG_SUM));
  cg_plan_t *hp = cg_gpu_compile_all_ranks(g, "a host plan");
  cg_graph_destroy(g);
  ck_assert_cg_status(cg_plan_cuda_graph(&untouched, hp), CG_ERR_UNSUPPORTED);
  ck_assert_ptr_eq(untouched, (cudaGraph_t)&untouched);
  cg_plan_destroy(hp);
  cg_comm_destroy(host);

  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(user)); /* the plan's own graph is the plan's */
  cg_plan_destroy(plan);
  CUDA_OK(cudaStreamDestroy(s));
  embed_counters_free(&c);
  cg_gpu_free(x);
  cg_gpu_free(y);
  cg_gpu_free(z);
}
END_TEST

int main(void) {
  Suite *s = suite_create("embed");
  TCase *capture = cg_gpu_tcase("embed_capture");
  tcase_add_test(capture, embed__captured_iteration_replays_a_thousand_times_with_fresh_data);
  tcase_add_test(capture, embed__bucket_and_ring_captured_on_a_joined_stream_in_global_mode);
  tcase_add_test(capture, embed__two_instances_ordered_by_one_stream_or_by_events);
  tcase_add_test(capture, embed__instances_on_unordered_streams_serialize_on_the_plan_lock);
  tcase_add_test(capture, embed__plan_graph_added_as_a_child_node_between_kernel_nodes);
  suite_add_tcase(s, capture);
  TCase *rebind = cg_gpu_tcase("embed_rebind");
  embed_add_rebind_tests(rebind);
  suite_add_tcase(s, rebind);
  TCase *compute = cg_gpu_tcase("embed_compute");
  embed_add_compute_tests(compute);
  suite_add_tcase(s, compute);
  return cg_gpu_test_main(s, "test_embed");
}
