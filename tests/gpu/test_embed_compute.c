/* The compute-node tests of the embed suite (tcase embed_compute): child
 * graphs and CUDA event nodes compiled into device plans, which need the
 * kernel-capturing helpers below and nothing of the capture or rebinding
 * tests. test_embed.c says how every test checks its replays. */
#include "embed_support.h"

/* ---- compute nodes inside a device plan
 *
 * Child graphs captured from the test kernels, with declared accesses: W
 * fills x from the replay number, the allreduce x -> y (A), C writes
 * z = 3y + 1, K checks z, and B advances the replay number (after W and K,
 * which read it); an allreduce u -> v on B depends on none of them. */

enum { CN_N = 30011, CN_U = 7919, CN_REPLAYS = 200 };

/* A graph captured from what `enqueue` puts on a stream. */
typedef struct kernel_call {
  int kind; /* 0 fill_round, 1 affine, 2 check_round, 3 bump */
  void *buf;
  const void *in;
  size_t n;
  int32_t mul, add;
  uint64_t base;
  int first_rank, ranks;
  unsigned long long *round, *bad;
} kernel_call_t;

static cudaGraph_t capture_kernel(const kernel_call_t *k) {
  cudaStream_t s = embed_new_stream();
  cudaGraph_t g = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  switch (k->kind) {
    case 0: CUDA_OK(cg_gpu_fill_round(k->buf, 0, k->n, k->base, k->first_rank, k->round, s)); break;
    case 1: CUDA_OK(cg_gpu_affine(k->in, k->buf, k->n, k->mul, k->add, s)); break;
    case 2:
      CUDA_OK(cg_gpu_check_round(k->in, 0, k->n, k->n, k->mul, k->add, k->base, k->first_rank, k->ranks, k->round,
                                 k->bad, s));
      break;
    default: CUDA_OK(cg_gpu_bump(k->round, s)); break;
  }
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaStreamDestroy(s));
  return g;
}

/* Records the captured kernel as a child-graph node reading and writing the
 * given ranges. */
static cg_node_t child_node(cg_graph_t *g, const kernel_call_t *k, const cg_range_t *reads, size_t n_reads,
                            const cg_range_t *writes, size_t n_writes, const char *name) {
  cudaGraph_t cg = capture_kernel(k);
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = reads;
  access.n_reads = n_reads;
  access.writes = writes;
  access.n_writes = n_writes;
  cg_node_t node;
  ck_assert_cg_ok(cg_child_graph(&node, g, cg, &access));
  ck_assert_cg_ok(cg_node_name(g, node, name));
  CUDA_OK(cudaGraphDestroy(cg));
  return node;
}

START_TEST(embed__child_graphs_between_collectives_on_compute_lanes) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  uint64_t base = embed_base_seed(11);
  int32_t *x = cg_gpu_alloc(CN_N * 4), *y = cg_gpu_alloc(CN_N * 4), *z = cg_gpu_alloc(CN_N * 4);
  int32_t *u = cg_gpu_alloc(CN_U * 4), *v = cg_gpu_alloc(CN_U * 4);
  counters_t c = embed_counters_new();
  cudaStream_t s = embed_new_stream();
  CUDA_OK(cg_gpu_fill(u, 0, CN_U, base ^ 0x55, me, 0, s));
  CUDA_OK(cudaStreamSynchronize(s));
  cg_range_t rx = {x, CN_N * 4}, ry = {y, CN_N * 4}, rz = {z, CN_N * 4}, rround = {c.round, 8}, rbad = {c.bad, 16};
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  kernel_call_t fill = {.kind = 0, .buf = x, .n = CN_N, .base = base, .first_rank = me, .round = c.round};
  child_node(g, &fill, &rround, 1, &rx, 1, "fill x");
  ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(0), x, y, CN_N, CG_INT32, CG_SUM));
  kernel_call_t affine = {.kind = 1, .buf = z, .in = y, .n = CN_N, .mul = 3, .add = 1};
  child_node(g, &affine, &ry, 1, &rz, 1, "z = 3y + 1");
  kernel_call_t check = {.kind = 2, .in = z, .n = CN_N, .mul = 3, .add = 1, .base = base, .first_rank = 0,
                         .ranks = n, .round = c.round, .bad = c.bad};
  cg_range_t check_reads[] = {rz, rround};
  child_node(g, &check, check_reads, 2, &rbad, 1, "check z");
  ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(1), u, v, CN_U, CG_INT32, CG_SUM));
  kernel_call_t bump = {.kind = 3, .round = c.round};
  child_node(g, &bump, &rround, 1, &rround, 1, "next replay");
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "child graphs around an allreduce, an independent allreduce");
  cg_graph_destroy(g);

  cg_plan_stats_t st;
  ck_assert_cg_ok(cg_plan_stats(&st, plan));
  assert_all_ranks_msg(st.device == cg_gpu_device() && st.communicators == 2 && st.lanes > st.communicators,
                       "rank %d: device %d, %zu communicators, %zu lanes: child graphs should run on a compute lane of "
                       "their own", me, st.device, st.communicators, st.lanes);
  char *dot = cg_gpu_plan_dot(plan);
  assert_all_ranks_msg(strstr(dot, "child_graph") && strstr(dot, "z = 3y + 1"),
                       "the plan's DOT does not show the child graphs:\n%s", dot);
  free(dot);

  for (int k = 0; k < CN_REPLAYS; k++) {
    embed_poison_async(y, CN_N * 4, s);
    embed_poison_async(z, CN_N * 4, s);
    embed_poison_async(v, CN_U * 4, s);
    ck_assert_cg_ok(cg_plan_launch(plan, s));
  }
  embed_expect_clean(&c, CN_REPLAYS, "child graphs in a device plan");
  int32_t *hv = malloc(CN_U * 4);
  ck_assert_ptr_nonnull(hv);
  CUDA_OK(cudaMemcpy(hv, v, CN_U * 4, cudaMemcpyDeviceToHost));
  int ok = 1;
  for (size_t i = 0; i < CN_U; i++) ok &= hv[i] == cg_gpu_value_sum(base ^ 0x55, 0, n, i);
  free(hv);
  ck_assert_all_ranks(ok, "the independent allreduce");
  ck_assert_all_ranks(cg_plan_run(plan) == CG_SUCCESS, "cg_plan_run of a plan with child graphs");
  embed_expect_clean(&c, CN_REPLAYS + 1, "cg_plan_run of a plan with child graphs");

  cg_plan_destroy(plan);
  CUDA_OK(cudaStreamDestroy(s));
  embed_counters_free(&c);
  int32_t *all[] = {x, y, z, u, v};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cg_gpu_free(all[i]);
}
END_TEST

/* ---- an event-record node: the user's stream waits for it
 *
 * The plan: W fills x, allreduce x -> y, C writes z = 2y - 5, then records
 * `ready` (declared to read z). Per replay the user poisons z before the
 * launch; a second stream waits for `ready`, checks z and records `checked`,
 * which the first stream waits for before advancing the replay number. */

START_TEST(embed__event_record_node_lets_the_user_wait_for_part_of_the_plan) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  uint64_t base = embed_base_seed(12);
  int32_t *x = cg_gpu_alloc(CN_N * 4), *y = cg_gpu_alloc(CN_N * 4), *z = cg_gpu_alloc(CN_N * 4);
  counters_t c = embed_counters_new();
  cudaEvent_t ready = embed_new_event(), checked = embed_new_event();
  cg_range_t rx = {x, CN_N * 4}, ry = {y, CN_N * 4}, rz = {z, CN_N * 4}, rround = {c.round, 8};
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  kernel_call_t fill = {.kind = 0, .buf = x, .n = CN_N, .base = base, .first_rank = me, .round = c.round};
  child_node(g, &fill, &rround, 1, &rx, 1, "fill x");
  ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(0), x, y, CN_N, CG_INT32, CG_SUM));
  kernel_call_t affine = {.kind = 1, .buf = z, .in = y, .n = CN_N, .mul = 2, .add = -5};
  child_node(g, &affine, &ry, 1, &rz, 1, "z = 2y - 5");
  cg_access_t reads_z = CG_ACCESS_INIT;
  reads_z.everything = 0;
  reads_z.reads = &rz;
  reads_z.n_reads = 1;
  ck_assert_cg_ok(cg_event_record(NULL, g, ready, &reads_z));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "fill, allreduce, z = 2y - 5, event record");
  cg_graph_destroy(g);
  char *dot = cg_gpu_plan_dot(plan);
  assert_all_ranks_msg(strstr(dot, "event_record") != NULL, "the plan's DOT does not show the event record:\n%s", dot);
  free(dot);

  cudaStream_t s = embed_new_stream(), s2 = embed_new_stream();
  for (int k = 0; k < CN_REPLAYS; k++) {
    embed_poison_async(z, CN_N * 4, s);
    ck_assert_cg_ok(cg_plan_launch(plan, s));
    CUDA_OK(cudaStreamWaitEvent(s2, ready, 0));
    CUDA_OK(cg_gpu_check_round(z, 0, CN_N, CN_N, 2, -5, base, 0, n, c.round, c.bad, s2));
    CUDA_OK(cudaEventRecord(checked, s2));
    CUDA_OK(cudaStreamWaitEvent(s, checked, 0));
    CUDA_OK(cg_gpu_bump(c.round, s));
  }
  embed_expect_clean(&c, CN_REPLAYS, "a stream waiting for the plan's event record");

  cg_plan_destroy(plan);
  CUDA_OK(cudaEventDestroy(ready));
  CUDA_OK(cudaEventDestroy(checked));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaStreamDestroy(s2));
  embed_counters_free(&c);
  cg_gpu_free(x);
  cg_gpu_free(y);
  cg_gpu_free(z);
}
END_TEST

/* ---- an event-wait node: the plan waits for the user's work on another
 * stream
 *
 * Per replay a second stream runs a slow kernel (so a wait that does not
 * wait shows), fills x from the replay number and records `filled`; the plan
 * waits for it (declared to write x), allreduces x -> y and checks y in a
 * child graph; the first stream then advances the replay number and records
 * `consumed`, which the second stream waits for before the next fill. */

START_TEST(embed__event_wait_node_waits_for_the_user_stream) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  uint64_t base = embed_base_seed(13);
  int32_t *x = cg_gpu_alloc(CN_N * 4), *y = cg_gpu_alloc(CN_N * 4), *slow;
  CUDA_OK(cudaMalloc((void **)&slow, LOCK_N * 4));
  counters_t c = embed_counters_new();
  cudaEvent_t filled = embed_new_event(), consumed = embed_new_event();
  cg_range_t rx = {x, CN_N * 4}, ry = {y, CN_N * 4}, rround = {c.round, 8}, rbad = {c.bad, 16};
  cg_access_t writes_x = CG_ACCESS_INIT;
  writes_x.everything = 0;
  writes_x.writes = &rx;
  writes_x.n_writes = 1;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_event_wait(NULL, g, filled, &writes_x));
  ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(0), x, y, CN_N, CG_INT32, CG_SUM));
  kernel_call_t check = {.kind = 2, .in = y, .n = CN_N, .mul = 1, .add = 0, .base = base, .first_rank = 0,
                         .ranks = n, .round = c.round, .bad = c.bad};
  cg_range_t check_reads[] = {ry, rround};
  child_node(g, &check, check_reads, 2, &rbad, 1, "check y");
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "event wait, allreduce, check");
  cg_graph_destroy(g);
  cg_plan_stats_t st;
  ck_assert_cg_ok(cg_plan_stats(&st, plan));
  /* a chain (wait, allreduce, check): all of it on the communicator's lane, no event edge (lower.c) */
  assert_all_ranks_msg(st.lanes == st.communicators && st.events == 0,
                       "rank %d: %zu lanes for %zu communicators, %zu events: the event wait and the child graph "
                       "should be on the communicator's lane", me, st.lanes, st.communicators, st.events);

  cudaStream_t s = embed_new_stream(), s2 = embed_new_stream();
  for (int k = 0; k < CN_REPLAYS; k++) {
    if (k) CUDA_OK(cudaStreamWaitEvent(s2, consumed, 0));
    CUDA_OK(cg_gpu_slow_increment(slow, LOCK_N, 4, 2000, s2));
    CUDA_OK(cg_gpu_fill_round(x, 0, CN_N, base, me, c.round, s2));
    CUDA_OK(cudaEventRecord(filled, s2));
    embed_poison_async(y, CN_N * 4, s);
    ck_assert_cg_ok(cg_plan_launch(plan, s));
    CUDA_OK(cg_gpu_bump(c.round, s));
    CUDA_OK(cudaEventRecord(consumed, s));
  }
  embed_expect_clean(&c, CN_REPLAYS, "a plan waiting for the user's event");

  cg_plan_destroy(plan);
  CUDA_OK(cudaEventDestroy(filled));
  CUDA_OK(cudaEventDestroy(consumed));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaStreamDestroy(s2));
  embed_counters_free(&c);
  cg_gpu_free(x);
  cg_gpu_free(y);
  cg_gpu_free(slow);
}
END_TEST

/* ---- the captured graph keeps no edge that a longer path implies
 *
 * A backward pass in miniature: BW_TENSORS child graphs in a chain (each a
 * memset of its gradient to rank + 1; a declared write of one "activation"
 * word chains them), an in-place allreduce per gradient, the gradients in a
 * device arena in record order, buckets of a few gradients: every bucket's
 * pack copies nothing, and its lane, enqueueing nothing, used to make each
 * collective depend on every backward kernel before it. The plan's graph
 * (inside cg_plan_cuda_graph's) is read back and its edges checked against
 * its own closure, computed here; then the plan runs and the sums are
 * checked. */

enum { BW_TENSORS = 12, BW_UNIT = 256 };

/* The graph's full-dependency edges as indices into its nodes (programmatic
 * edges, which order less, left out); returns the count. */
enum { BW_MAX_EDGES = 512 };
static size_t full_edges(uint32_t *from, uint32_t *to, cudaGraph_t graph, cudaGraphNode_t *nodes, size_t n_nodes) {
  size_t n = 0;
#if CUDART_VERSION >= 12030
  cudaGraphEdgeData data[BW_MAX_EDGES];
#if CUDART_VERSION >= 13000
  CUDA_OK(cudaGraphGetEdges(graph, NULL, NULL, NULL, &n));
#else
  CUDA_OK(cudaGraphGetEdges_v2(graph, NULL, NULL, NULL, &n));
#endif
#endif
#if CUDART_VERSION < 12030
  CUDA_OK(cudaGraphGetEdges(graph, NULL, NULL, &n));
#endif
  ck_assert_msg(n <= BW_MAX_EDGES, "%zu edges: more than the test reads", n);
  cudaGraphNode_t f[BW_MAX_EDGES], t[BW_MAX_EDGES];
#if CUDART_VERSION >= 13000
  CUDA_OK(cudaGraphGetEdges(graph, f, t, data, &n));
#elif CUDART_VERSION >= 12030
  CUDA_OK(cudaGraphGetEdges_v2(graph, f, t, data, &n));
#else
  CUDA_OK(cudaGraphGetEdges(graph, f, t, &n));
#endif
  size_t kept = 0;
  for (size_t e = 0; e < n; e++) {
#if CUDART_VERSION >= 12030
    static const cudaGraphEdgeData plain;
    if (memcmp(&data[e], &plain, sizeof plain) != 0) continue;
#endif
    from[kept] = to[kept] = UINT32_MAX;
    for (size_t i = 0; i < n_nodes; i++) {
      if (nodes[i] == f[e]) from[kept] = (uint32_t)i;
      if (nodes[i] == t[e]) to[kept] = (uint32_t)i;
    }
    ck_assert(from[kept] != UINT32_MAX && to[kept] != UINT32_MAX);
    kept++;
  }
  return kept;
}

START_TEST(embed__backward_shaped_plan_graph_keeps_no_implied_edge) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  size_t total = 0;
  for (int k = 0; k < BW_TENSORS; k++) total += (size_t)BW_UNIT * (k + 1);
  cg_arena_t *arena;
  cg_arena_opts_t ao = CG_ARENA_OPTS_INIT;
  ao.device = cg_gpu_device();
  ck_assert_cg_ok(cg_arena_create(&arena, total * 4, &ao));
  int32_t *grad[BW_TENSORS], *activation = cg_gpu_alloc(4);
  cg_range_t act = {activation, 4};
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int k = BW_TENSORS; k-- > 0;) { /* backward order: the last tensor's gradient first */
    size_t count = (size_t)BW_UNIT * (k + 1);
    ck_assert_cg_ok(cg_arena_alloc((void **)&grad[k], arena, count, CG_INT32));
    cg_range_t writes[] = {{grad[k], count * 4}, act};
    cg_access_t access = CG_ACCESS_INIT;
    access.everything = 0;
    access.reads = &act;
    access.n_reads = 1;
    access.writes = writes;
    access.n_writes = 2;
    cudaGraph_t child = cg_test_memset_graph(grad[k], count, (unsigned)me + 1u);
    cg_node_t node;
    ck_assert_cg_ok(cg_child_graph(&node, g, child, &access));
    CUDA_OK(cudaGraphDestroy(child));
    ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(0), grad[k], grad[k], count, CG_INT32, CG_SUM));
  }
  cg_compile_opts_t co = CG_COMPILE_OPTS_INIT;
  co.bucket_bytes = (size_t)BW_UNIT * 4 * 20; /* a few gradients per bucket */
  cg_plan_t *plan = NULL;
  cg_status_t st = cg_compile(&plan, g, &co);
  assert_all_ranks_msg(st == CG_SUCCESS, "rank %d: cg_compile: %s", me, cg_error_last());
  cg_graph_destroy(g);
  cg_plan_stats_t stats;
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  assert_all_ranks_msg(stats.buckets >= 3 && stats.copy_bytes == 0,
                       "rank %d: %zu buckets copying %zu bytes: not the shape under test", me, stats.buckets,
                       stats.copy_bytes);

  cudaGraph_t embed = NULL, inner = NULL;
  ck_assert_cg_ok(cg_plan_cuda_graph(&embed, plan));
  cudaGraphNode_t outer[8];
  size_t n_outer = 0;
  CUDA_OK(cudaGraphGetNodes(embed, NULL, &n_outer));
  ck_assert_msg(n_outer <= 8, "the embeddable graph has %zu nodes", n_outer);
  CUDA_OK(cudaGraphGetNodes(embed, outer, &n_outer));
  for (size_t i = 0; i < n_outer; i++) {
    enum cudaGraphNodeType type;
    CUDA_OK(cudaGraphNodeGetType(outer[i], &type));
    if (type == cudaGraphNodeTypeGraph) CUDA_OK(cudaGraphChildGraphNodeGetGraph(outer[i], &inner));
  }
  ck_assert_ptr_nonnull(inner);
  enum { MAX_NODES = 128 };
  cudaGraphNode_t nodes[MAX_NODES];
  size_t n_nodes = 0;
  CUDA_OK(cudaGraphGetNodes(inner, NULL, &n_nodes));
  ck_assert_msg(n_nodes <= MAX_NODES, "%zu nodes: more than the test reads", n_nodes);
  CUDA_OK(cudaGraphGetNodes(inner, nodes, &n_nodes));
  static uint32_t from[BW_MAX_EDGES], to[BW_MAX_EDGES];
  static uint8_t reach[MAX_NODES][MAX_NODES];
  size_t m = full_edges(from, to, inner, nodes, n_nodes);
  memset(reach, 0, sizeof reach);
  for (size_t e = 0; e < m; e++) reach[from[e]][to[e]] = 1;
  for (size_t k = 0; k < n_nodes; k++)
    for (size_t i = 0; i < n_nodes; i++)
      if (reach[i][k])
        for (size_t j = 0; j < n_nodes; j++) reach[i][j] |= reach[k][j];
  size_t implied = 0;
  for (size_t e = 0; e < m; e++) { /* implied: another edge out of its source reaches its target */
    int longer = 0;
    for (size_t f = 0; f < m && !longer; f++) longer = f != e && from[f] == from[e] && reach[to[f]][to[e]];
    implied += (size_t)longer;
  }
  assert_all_ranks_msg(implied == 0, "rank %d: %zu of the plan graph's %zu edges (%zu nodes) are implied by longer "
                       "paths", me, implied, m, n_nodes);

  /* poison; the arena holds the gradients back to back, the last tensor's first */
  CUDA_OK(cudaMemset(grad[BW_TENSORS - 1], 0xff, total * 4));
  st = cg_plan_run(plan);
  assert_all_ranks_msg(st == CG_SUCCESS, "rank %d: cg_plan_run: %s", me, cg_error_last());
  int32_t *host = malloc(total * 4);
  ck_assert_ptr_nonnull(host);
  CUDA_OK(cudaMemcpy(host, grad[BW_TENSORS - 1], total * 4, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < total; i++) wrong += host[i] != n * (n + 1) / 2;
  free(host);
  assert_all_ranks_msg(wrong == 0, "rank %d: %zu of %zu summed gradient elements wrong", me, wrong, total);
  cg_plan_destroy(plan);
  cg_arena_destroy(arena);
  cg_gpu_free(activation);
}
END_TEST

void embed_add_compute_tests(TCase *compute) {
  tcase_add_test(compute, embed__child_graphs_between_collectives_on_compute_lanes);
  tcase_add_test(compute, embed__event_record_node_lets_the_user_wait_for_part_of_the_plan);
  tcase_add_test(compute, embed__event_wait_node_waits_for_the_user_stream);
  tcase_add_test(compute, embed__backward_shaped_plan_graph_keeps_no_implied_edge);
}
