/* The rebinding tests of the embed suite (tcase embed_rebind): cg_plan_rebind
 * on device plans, kept apart from the capture tests in test_embed.c because
 * they need their own buffer sets and helpers. test_embed.c says how every
 * test checks its replays. */
#include "embed_support.h"

static unsigned long long read_bad(const unsigned long long *bad) {
  unsigned long long v = 0;
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(&v, bad, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

/* 1 if `bytes` of device memory at p all hold the poison pattern. */
static int still_poisoned(const void *p, size_t bytes) {
  unsigned char *h = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(h);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(h, p, bytes, cudaMemcpyDeviceToHost));
  int ok = 1;
  for (size_t i = 0; i < bytes && ok; i++) ok = h[i] == CG_MPI_POISON;
  free(h);
  return ok;
}

/* ---- rebinding a device plan: to other buffers and back
 *
 * An allreduce, a broadcast from the last rank, an allgather (communicator A)
 * and a ring (B). Each phase runs REBIND_REPLAYS replays with fresh data
 * through the counters; the buffers the plan left must keep their bytes. */

enum { RB_N = 70001, RB_F = 5003, RB_M = 1031, RB_R = 3001, REBIND_REPLAYS = 20 };

typedef struct rb_set {
  int32_t *x, *y, *f, *fb, *ag, *agz, *out, *in;
} rb_set_t;

static rb_set_t rb_alloc(void) {
  int n = cg_gpu_size();
  rb_set_t b = {cg_gpu_alloc(RB_N * 4), cg_gpu_alloc(RB_N * 4), cg_gpu_alloc(RB_F * 4), cg_gpu_alloc(RB_F * 4),
                cg_gpu_alloc(RB_M * 4), cg_gpu_alloc((size_t)n * RB_M * 4), cg_gpu_alloc(RB_R * 4),
                cg_gpu_alloc(RB_R * 4)};
  return b;
}

static void rb_free(rb_set_t *b) {
  int32_t *all[] = {b->x, b->y, b->f, b->fb, b->ag, b->agz, b->out, b->in};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cg_gpu_free(all[i]);
}

/* Poisons the outputs of a set. */
static void rb_poison(const rb_set_t *b, cudaStream_t s) {
  embed_poison_async(b->y, RB_N * 4, s);
  embed_poison_async(b->fb, RB_F * 4, s);
  embed_poison_async(b->agz, (size_t)cg_gpu_size() * RB_M * 4, s);
  embed_poison_async(b->in, RB_R * 4, s);
}

static int rb_outputs_poisoned(const rb_set_t *b) {
  return still_poisoned(b->y, RB_N * 4) && still_poisoned(b->fb, RB_F * 4) &&
         still_poisoned(b->agz, (size_t)cg_gpu_size() * RB_M * 4) && still_poisoned(b->in, RB_R * 4);
}

/* `replays` launches of the plan on set b, each with fresh inputs, poisoned
 * outputs and device checks. */
static void rb_replays(cg_plan_t *plan, const rb_set_t *b, const counters_t *c, uint64_t base, int replays,
                       cudaStream_t s) {
  int me = cg_gpu_rank(), n = cg_gpu_size(), root = n - 1, from = (me + n - 1) % n;
  for (int k = 0; k < replays; k++) {
    CUDA_OK(cg_gpu_fill_round(b->x, 0, RB_N, base, me, c->round, s));
    CUDA_OK(cg_gpu_fill_round(b->f, 0, RB_F, base + 1, me, c->round, s));
    CUDA_OK(cg_gpu_fill_round(b->ag, 0, RB_M, base + 2, me, c->round, s));
    CUDA_OK(cg_gpu_fill_round(b->out, 0, RB_R, base + 3, me, c->round, s));
    rb_poison(b, s);
    ck_assert_cg_ok(cg_plan_launch(plan, s));
    CUDA_OK(cg_gpu_check_round(b->y, 0, RB_N, RB_N, 1, 0, base, 0, n, c->round, c->bad, s));
    CUDA_OK(cg_gpu_check_round(b->fb, 0, RB_F, RB_F, 1, 0, base + 1, root, 1, c->round, c->bad, s));
    for (int r = 0; r < n; r++)
      CUDA_OK(cg_gpu_check_round(b->agz + (size_t)r * RB_M, 0, RB_M, RB_M, 1, 0, base + 2, r, 1, c->round, c->bad, s));
    CUDA_OK(cg_gpu_check_round(b->in, 0, RB_R, RB_R, 1, 0, base + 3, from, 1, c->round, c->bad, s));
    CUDA_OK(cg_gpu_bump(c->round, s));
  }
}

typedef struct rb_nodes {
  cg_node_t ar, bc, ag, snd, rcv;
} rb_nodes_t;

static size_t rb_binds(cg_rebind_t *out, const rb_nodes_t *h, const rb_set_t *b) {
  int me = cg_gpu_rank(), root = cg_gpu_size() - 1;
  out[0] = (cg_rebind_t){h->ar, b->x, b->y};
  out[1] = (cg_rebind_t){h->bc, me == root ? b->f : NULL, b->fb};
  out[2] = (cg_rebind_t){h->ag, b->ag, b->agz};
  out[3] = (cg_rebind_t){h->snd, b->out, NULL};
  out[4] = (cg_rebind_t){h->rcv, NULL, b->in};
  return 5;
}

static void rebind_all_ranks(cg_plan_t *plan, const cg_rebind_t *binds, size_t n, const char *what) {
  cg_status_t st = cg_plan_rebind(plan, binds, n);
  char text[600];
  snprintf(text, sizeof text, "%s: cg_plan_rebind returned %s: %s", what, cg_status_string(st),
           st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, text);
}

/* Copies of a set's inputs, to show a later phase did not write them. */
static void *inputs_copy(const rb_set_t *b) {
  char *h = malloc((RB_N + RB_F + RB_M + RB_R) * 4);
  ck_assert_ptr_nonnull(h);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(h, b->x, RB_N * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(h + RB_N * 4, b->f, RB_F * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(h + (RB_N + RB_F) * 4, b->ag, RB_M * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(h + (RB_N + RB_F + RB_M) * 4, b->out, RB_R * 4, cudaMemcpyDeviceToHost));
  return h;
}

START_TEST(embed__rebind_a_device_plan_to_other_buffers_and_back) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  cg_comm_t *a = cg_gpu_shared_comm(0), *b = cg_gpu_shared_comm(1);
  rb_set_t A = rb_alloc(), B = rb_alloc();
  rb_nodes_t h;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(&h.ar, g, a, A.x, A.y, RB_N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_broadcast(&h.bc, g, a, me == n - 1 ? A.f : NULL, A.fb, RB_F, CG_INT32, n - 1));
  ck_assert_cg_ok(cg_allgather(&h.ag, g, a, A.ag, A.agz, RB_M, CG_INT32));
  ck_assert_cg_ok(cg_send(&h.snd, g, b, A.out, RB_R, CG_INT32, (me + 1) % n));
  ck_assert_cg_ok(cg_recv(&h.rcv, g, b, A.in, RB_R, CG_INT32, (me + n - 1) % n));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "allreduce, broadcast, allgather, ring");
  cg_graph_destroy(g);
  counters_t c = embed_counters_new();
  cudaStream_t s = embed_new_stream();
  uint64_t base = embed_base_seed(6);
  cg_rebind_t binds[5];

  rb_replays(plan, &A, &c, base, REBIND_REPLAYS, s);
  embed_expect_clean(&c, REBIND_REPLAYS, "set A as compiled");
  void *a_inputs = inputs_copy(&A);
  rb_poison(&A, s);
  CUDA_OK(cudaStreamSynchronize(s));

  rebind_all_ranks(plan, binds, rb_binds(binds, &h, &B), "every node to set B");
  rb_replays(plan, &B, &c, base, REBIND_REPLAYS, s);
  embed_expect_clean(&c, 2 * REBIND_REPLAYS, "set B after rebinding");
  void *a_after = inputs_copy(&A);
  ck_assert_all_ranks(rb_outputs_poisoned(&A) && memcmp(a_inputs, a_after, (RB_N + RB_F + RB_M + RB_R) * 4) == 0,
                      "set A untouched while the plan ran on set B");
  free(a_after);
  void *b_inputs = inputs_copy(&B);
  rb_poison(&B, s);

  rebind_all_ranks(plan, binds, rb_binds(binds, &h, &A), "every node back to set A");
  rb_replays(plan, &A, &c, base, REBIND_REPLAYS, s);
  embed_expect_clean(&c, 3 * REBIND_REPLAYS, "set A again");
  void *b_after = inputs_copy(&B);
  ck_assert_all_ranks(rb_outputs_poisoned(&B) && memcmp(b_inputs, b_after, (RB_N + RB_F + RB_M + RB_R) * 4) == 0,
                      "set B untouched after rebinding back");
  free(b_after);

  /* and cg_plan_run on the rebound plan */
  rebind_all_ranks(plan, binds, rb_binds(binds, &h, &B), "every node to set B once more");
  CUDA_OK(cg_gpu_fill_round(B.x, 0, RB_N, base, me, c.round, s));
  embed_poison_async(B.y, RB_N * 4, s);
  CUDA_OK(cudaStreamSynchronize(s));
  ck_assert_all_ranks(cg_plan_run(plan) == CG_SUCCESS, "cg_plan_run after rebinding");
  ck_assert_all_ranks(embed_holds_sum(B.y, RB_N, base, 3 * REBIND_REPLAYS), "cg_plan_run wrote set B");

  cg_plan_destroy(plan);
  CUDA_OK(cudaStreamDestroy(s));
  embed_counters_free(&c);
  free(a_inputs);
  free(b_inputs);
  rb_free(&A);
  rb_free(&B);
}
END_TEST

/* ---- bucket members between arenas (contiguous: no copies) and buffers of
 * their own (copies), and back */

#define BK 8
static const size_t bk_counts[BK] = {1, 17, 256, 1000, 3, 4099, 64, 12345};
enum { BK_REPLAYS = 20 };

static size_t bk_copy_bytes(const cg_plan_t *plan) {
  cg_plan_stats_t st;
  ck_assert_cg_ok(cg_plan_stats(&st, plan));
  return st.copy_bytes;
}

/* Two device arenas with the tensors in record order: sends in one, receives
 * in the other. */
static void bk_arenas(cg_arena_t *arenas[2], float *xs[BK], float *ys[BK]) {
  cg_arena_opts_t o = CG_ARENA_OPTS_INIT;
  o.device = cg_gpu_device();
  size_t total = 0;
  for (int k = 0; k < BK; k++) total += bk_counts[k] * 4;
  for (int i = 0; i < 2; i++) ck_assert_cg_ok(cg_arena_create(&arenas[i], total + 256, &o));
  for (int k = 0; k < BK; k++) {
    ck_assert_cg_ok(cg_arena_alloc((void **)&xs[k], arenas[0], bk_counts[k], CG_FLOAT32));
    ck_assert_cg_ok(cg_arena_alloc((void **)&ys[k], arenas[1], bk_counts[k], CG_FLOAT32));
  }
  CUDA_OK(cudaMemset(ys[0], CG_MPI_POISON, total));
  CUDA_OK(cudaDeviceSynchronize());
}

static void bk_replays(cg_plan_t *plan, float *const xs[BK], float *const ys[BK], const counters_t *c, uint64_t base,
                       cudaStream_t s) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  for (int r = 0; r < BK_REPLAYS; r++) {
    for (int k = 0; k < BK; k++) {
      CUDA_OK(cg_gpu_fill_round(xs[k], 1, bk_counts[k], base + (uint64_t)k, me, c->round, s));
      embed_poison_async(ys[k], bk_counts[k] * 4, s);
    }
    ck_assert_cg_ok(cg_plan_launch(plan, s));
    for (int k = 0; k < BK; k++)
      CUDA_OK(cg_gpu_check_round(ys[k], 1, bk_counts[k], bk_counts[k], 1, 0, base + (uint64_t)k, 0, n, c->round,
                                 c->bad, s));
    CUDA_OK(cg_gpu_bump(c->round, s));
  }
}

static void bk_rebind(cg_plan_t *plan, const cg_node_t *h, float *const xs[BK], float *const ys[BK], const int *which,
                      const char *what) {
  cg_rebind_t binds[BK];
  size_t nb = 0;
  for (int k = 0; k < BK; k++)
    if (!which || which[k]) binds[nb++] = (cg_rebind_t){h[k], xs[k], ys[k]};
  CUDA_OK(cudaDeviceSynchronize()); /* the plan must not be running */
  rebind_all_ranks(plan, binds, nb, what);
}

START_TEST(embed__rebind_bucket_members_between_arenas_and_scattered_buffers) {
  int me = cg_gpu_rank();
  int fused = !embed_fusion_disabled();
  cg_arena_t *first[2], *second[2];
  float *xa[BK], *ya[BK], *xb[BK], *yb[BK], *xs[BK], *ys[BK];
  bk_arenas(first, xa, ya);
  bk_arenas(second, xb, yb);
  for (int k = 0; k < BK; k++) {
    xs[k] = cg_gpu_alloc(bk_counts[k] * 4);
    ys[k] = cg_gpu_alloc(bk_counts[k] * 4);
  }
  cg_node_t h[BK];
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int k = 0; k < BK; k++)
    ck_assert_cg_ok(cg_allreduce(&h[k], g, cg_gpu_shared_comm(0), xa[k], ya[k], bk_counts[k], CG_FLOAT32, CG_SUM));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "eight allreduces over arenas");
  cg_graph_destroy(g);
  cg_plan_stats_t st;
  ck_assert_cg_ok(cg_plan_stats(&st, plan));
  if (fused)
    assert_all_ranks_msg(st.buckets >= 1 && st.copy_bytes == 0,
                         "rank %d: over arenas: %zu buckets, copy_bytes %zu; expected a bucket that copies nothing", me,
                         st.buckets, st.copy_bytes);
  counters_t c = embed_counters_new();
  cudaStream_t s = embed_new_stream();
  uint64_t base = embed_base_seed(7);
  int replays = 0;

  bk_replays(plan, xa, ya, &c, base, s);
  embed_expect_clean(&c, (unsigned long long)(replays += BK_REPLAYS), "over the first arenas");
  size_t ybytes = 0;
  for (int k = 0; k < BK; k++) ybytes += bk_counts[k] * 4;
  CUDA_OK(cudaMemset(ya[0], CG_MPI_POISON, ybytes));
  CUDA_OK(cudaDeviceSynchronize());

  bk_rebind(plan, h, xs, ys, NULL, "every member to buffers of its own");
  if (fused)
    assert_all_ranks_msg(bk_copy_bytes(plan) > 0, "rank %d: members apart from each other, yet copy_bytes is 0", me);
  bk_replays(plan, xs, ys, &c, base, s);
  embed_expect_clean(&c, (unsigned long long)(replays += BK_REPLAYS), "members in buffers of their own");
  ck_assert_all_ranks(still_poisoned(ya[0], ybytes), "the first arena's outputs untouched");

  bk_rebind(plan, h, xb, yb, NULL, "every member to the second arenas");
  if (fused)
    assert_all_ranks_msg(bk_copy_bytes(plan) == 0, "rank %d: members in the second arenas, yet copy_bytes is %zu", me,
                         bk_copy_bytes(plan));
  bk_replays(plan, xb, yb, &c, base, s);
  embed_expect_clean(&c, (unsigned long long)(replays += BK_REPLAYS), "over the second arenas");

  int one[BK] = {0, 0, 0, 1, 0, 0, 0, 0};
  float *mixed_x[BK], *mixed_y[BK];
  for (int k = 0; k < BK; k++) {
    mixed_x[k] = one[k] ? xs[k] : xb[k];
    mixed_y[k] = one[k] ? ys[k] : yb[k];
  }
  bk_rebind(plan, h, mixed_x, mixed_y, one, "member 3 out of the arenas");
  if (fused) assert_all_ranks_msg(bk_copy_bytes(plan) > 0, "rank %d: member 3 moved out, yet copy_bytes is 0", me);
  bk_replays(plan, mixed_x, mixed_y, &c, base, s);
  embed_expect_clean(&c, (unsigned long long)(replays += BK_REPLAYS), "member 3 out of the arenas");

  bk_rebind(plan, h, xa, ya, NULL, "every member back to the first arenas");
  if (fused)
    assert_all_ranks_msg(bk_copy_bytes(plan) == 0, "rank %d: members back in the first arenas, yet copy_bytes is %zu",
                         me, bk_copy_bytes(plan));
  bk_replays(plan, xa, ya, &c, base, s);
  embed_expect_clean(&c, (unsigned long long)(replays += BK_REPLAYS), "back over the first arenas");

  cg_plan_destroy(plan);
  CUDA_OK(cudaStreamDestroy(s));
  embed_counters_free(&c);
  for (int k = 0; k < BK; k++) {
    cg_gpu_free(xs[k]);
    cg_gpu_free(ys[k]);
  }
  for (int i = 0; i < 2; i++) {
    cg_arena_destroy(first[i]);
    cg_arena_destroy(second[i]);
  }
}
END_TEST

/* ---- an embedded plan rebound: the user's instance keeps the old buffers
 * until it is updated with the plan's new graph
 *
 * The user's graph fills xA and xB, poisons yA and yB, runs the plan's graph,
 * and checks yA and yB against the sums, each into counters of its own: the
 * set the plan does not use stays poisoned, so its check counts exactly
 * EMB_N wrong elements per launch. */

enum { EMB_N = 50001, EMB_PHASE = 30, EMB_STALE = 5 };

START_TEST(embed__rebound_plan_updates_the_user_instance_through_set_params) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  uint64_t ba = embed_base_seed(8), bb = embed_base_seed(9);
  int32_t *xa = cg_gpu_alloc(EMB_N * 4), *ya = cg_gpu_alloc(EMB_N * 4);
  int32_t *xb = cg_gpu_alloc(EMB_N * 4), *yb = cg_gpu_alloc(EMB_N * 4);
  cg_node_t ar;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(&ar, g, cg_gpu_shared_comm(0), xa, ya, EMB_N, CG_INT32, CG_SUM));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "one allreduce");
  cg_graph_destroy(g);
  cudaGraph_t pg = NULL;
  ck_assert_cg_ok(cg_plan_cuda_graph(&pg, plan));

  counters_t c = embed_counters_new(), cb = embed_counters_new(); /* cb: only its bad counters are used */
  cudaGraph_t user;
  cudaGraphNode_t fa, fb, pa, pb, child, ca, cbn, bump;
  CUDA_OK(cudaGraphCreate(&user, 0));
  CUDA_OK(cg_gpu_graph_fill_round(&fa, user, NULL, 0, xa, 0, EMB_N, ba, me, c.round));
  CUDA_OK(cg_gpu_graph_fill_round(&fb, user, NULL, 0, xb, 0, EMB_N, bb, me, c.round));
  pa = embed_add_poison_node(user, ya, EMB_N * 4, NULL, 0);
  pb = embed_add_poison_node(user, yb, EMB_N * 4, NULL, 0);
  cudaGraphNode_t before[] = {fa, fb, pa, pb};
  CUDA_OK(cudaGraphAddChildGraphNode(&child, user, before, 4, pg));
  CUDA_OK(cg_gpu_graph_check_round(&ca, user, &child, 1, ya, 0, EMB_N, EMB_N, 1, 0, ba, 0, n, c.round, c.bad));
  CUDA_OK(cg_gpu_graph_check_round(&cbn, user, &child, 1, yb, 0, EMB_N, EMB_N, 1, 0, bb, 0, n, c.round, cb.bad));
  cudaGraphNode_t checks[] = {ca, cbn};
  CUDA_OK(cg_gpu_graph_bump(&bump, user, checks, 2, c.round));
  cudaGraphExec_t exec = embed_instantiate(user);
  cudaStream_t s = embed_new_stream();

  for (int k = 0; k < EMB_PHASE; k++) CUDA_OK(cudaGraphLaunch(exec, s));
  unsigned long long wrong_a = read_bad(c.bad), wrong_b = read_bad(cb.bad);
  char text[500];
  snprintf(text, sizeof text, "rank %d: before rebinding: %llu wrong in y_A (0 expected), %llu in y_B (%llu "
           "expected: never written)", me, wrong_a, wrong_b, (unsigned long long)EMB_N * EMB_PHASE);
  ck_assert_all_ranks(wrong_a == 0 && wrong_b == (unsigned long long)EMB_N * EMB_PHASE, text);

  cg_rebind_t to_b[] = {{ar, xb, yb}};
  rebind_all_ranks(plan, to_b, 1, "the embedded allreduce to set B");

  /* the user's instance holds the graph it was built with: still set A */
  for (int k = 0; k < EMB_STALE; k++) CUDA_OK(cudaGraphLaunch(exec, s));
  wrong_a = read_bad(c.bad);
  wrong_b = read_bad(cb.bad);
  snprintf(text, sizeof text, "rank %d: the instance not yet updated: %llu wrong in y_A (0 expected), %llu in y_B "
           "(%llu expected)", me, wrong_a, wrong_b, (unsigned long long)EMB_N * (EMB_PHASE + EMB_STALE));
  ck_assert_all_ranks(wrong_a == 0 && wrong_b == (unsigned long long)EMB_N * (EMB_PHASE + EMB_STALE), text);
  /* cg_plan_launch uses the rebound plan: set B (x_B holds the last launch's data) */
  embed_poison_async(yb, EMB_N * 4, s);
  ck_assert_cg_ok(cg_plan_launch(plan, s));
  ck_assert_all_ranks(embed_holds_sum(yb, EMB_N, bb, EMB_PHASE + EMB_STALE - 1), "cg_plan_launch after rebinding: y_B");

  /* the new graph into the instance */
  cudaGraph_t pg2 = NULL;
  ck_assert_cg_ok(cg_plan_cuda_graph(&pg2, plan));
  ck_assert_ptr_nonnull(pg2);
  cudaError_t e = cudaGraphExecChildGraphNodeSetParams(exec, child, pg2);
  snprintf(text, sizeof text, "cudaGraphExecChildGraphNodeSetParams with the rebound plan's graph: %s",
           cudaGetErrorString(e));
  ck_assert_all_ranks(e == cudaSuccess, text);
  for (int k = 0; k < EMB_PHASE; k++) CUDA_OK(cudaGraphLaunch(exec, s));
  wrong_a = read_bad(c.bad);
  wrong_b = read_bad(cb.bad);
  snprintf(text, sizeof text, "rank %d: after updating the instance: %llu wrong in y_A (%llu expected: no longer "
           "written), %llu in y_B (%llu expected: no new ones)", me, wrong_a, (unsigned long long)EMB_N * EMB_PHASE,
           wrong_b, (unsigned long long)EMB_N * (EMB_PHASE + EMB_STALE));
  ck_assert_all_ranks(wrong_a == (unsigned long long)EMB_N * EMB_PHASE &&
                      wrong_b == (unsigned long long)EMB_N * (EMB_PHASE + EMB_STALE), text);
  unsigned long long round = 0;
  CUDA_OK(cudaMemcpy(&round, c.round, sizeof round, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(round, 2 * EMB_PHASE + EMB_STALE);

  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(user));
  cg_plan_destroy(plan);
  CUDA_OK(cudaStreamDestroy(s));
  embed_counters_free(&c);
  embed_counters_free(&cb);
  cg_gpu_free(xa);
  cg_gpu_free(ya);
  cg_gpu_free(xb);
  cg_gpu_free(yb);
}
END_TEST

/* ---- refusals on device plans, which keep working on their buffers */

enum { RF_N = 4099 };

START_TEST(embed__rebind_refusals_leave_the_device_plan_working) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  cg_comm_t *a = cg_gpu_shared_comm(0);
  int32_t *x = cg_gpu_alloc(RF_N * 4), *u = cg_gpu_alloc(RF_N * 4), *v = cg_gpu_alloc(RF_N * 4);
  int32_t *x2 = cg_gpu_alloc(RF_N * 4), *y2 = cg_gpu_alloc(RF_N * 4), *w = cg_gpu_alloc(2 * RF_N * 4);
  int32_t *host_buf = malloc(RF_N * 4);
  ck_assert_ptr_nonnull(host_buf);
  cg_node_t ip, oop, bar, other;
  cg_graph_t *g, *g2;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(&ip, g, a, x, x, RF_N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_allreduce(&oop, g, a, u, v, RF_N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_barrier(&bar, g, a));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "in-place and out-of-place allreduces, a barrier");
  ck_assert_cg_ok(cg_graph_create(&g2, NULL));
  ck_assert_cg_ok(cg_allreduce(&other, g2, a, x2, y2, RF_N, CG_INT32, CG_SUM));

  static const struct {
    const char *what;
    cg_status_t allowed[2];
  } expect[] = {
      {"an in-place allreduce given separate send and recv", {CG_ERR_INVALID_ARGUMENT, CG_ERR_INVALID_ARGUMENT}},
      {"an out-of-place allreduce given send == recv", {CG_ERR_ALIAS, CG_ERR_INVALID_ARGUMENT}},
      {"an allreduce writing into another node's buffer", {CG_ERR_ALIAS, CG_ERR_INVALID_ARGUMENT}},
      {"a barrier given a buffer", {CG_ERR_INVALID_ARGUMENT, CG_ERR_INVALID_ARGUMENT}},
      {"a node of another graph", {CG_ERR_INVALID_NODE, CG_ERR_INVALID_NODE}},
      {"host memory for a device plan", {CG_ERR_INVALID_ARGUMENT, CG_ERR_UNSUPPORTED}},
      {"a good entry, then one writing into another node's buffer", {CG_ERR_ALIAS, CG_ERR_INVALID_ARGUMENT}},
  };
  const cg_rebind_t cases[][2] = {
      {{ip, x2, y2}},
      {{oop, w, w}},
      {{oop, u, x}},
      {{bar, x2, NULL}},
      {{other, x2, y2}},
      {{oop, host_buf, v}},
      {{ip, x2, x2}, {oop, u, x2 + 1}},
  };
  const size_t sizes[] = {1, 1, 1, 1, 1, 1, 2};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    cg_status_t st = cg_plan_rebind(plan, cases[i], sizes[i]);
    char text[600];
    snprintf(text, sizeof text, "%s: cg_plan_rebind returned %s (%s), expected %s", expect[i].what,
             cg_status_string(st), st == CG_SUCCESS ? "" : cg_error_last(), cg_status_string(expect[i].allowed[0]));
    ck_assert_all_ranks(st == expect[i].allowed[0] || st == expect[i].allowed[1], text);
  }
  ck_assert_cg_status(cg_plan_rebind(NULL, cases[0], 1), CG_ERR_INVALID_ARGUMENT);

  /* still on x and u -> v */
  uint64_t base = embed_base_seed(10);
  cudaStream_t s = embed_new_stream();
  counters_t c = embed_counters_new();
  for (int k = 0; k < 3; k++) {
    CUDA_OK(cg_gpu_fill_round(x, 0, RF_N, base, me, c.round, s));
    CUDA_OK(cg_gpu_fill_round(u, 0, RF_N, base + 1, me, c.round, s));
    embed_poison_async(v, RF_N * 4, s);
    ck_assert_cg_ok(cg_plan_launch(plan, s));
    CUDA_OK(cg_gpu_check_round(x, 0, RF_N, RF_N, 1, 0, base, 0, n, c.round, c.bad, s));
    CUDA_OK(cg_gpu_check_round(v, 0, RF_N, RF_N, 1, 0, base + 1, 0, n, c.round, c.bad, s));
    CUDA_OK(cg_gpu_bump(c.round, s));
  }
  embed_expect_clean(&c, 3, "the plan after the refusals");
  ck_assert_all_ranks(still_poisoned(x2, RF_N * 4) && still_poisoned(y2, RF_N * 4) && still_poisoned(w, 2 * RF_N * 4),
                      "buffers of refused rebindings untouched");

  /* a host plan given device memory */
  cg_comm_t *host;
  ck_assert_cg_ok(cg_comm_create(&host, MPI_COMM_WORLD, NULL));
  int32_t hin[4] = {me, me, me, me}, hout[4] = {0, 0, 0, 0};
  cg_node_t hn;
  cg_graph_t *hg;
  ck_assert_cg_ok(cg_graph_create(&hg, NULL));
  ck_assert_cg_ok(cg_allreduce(&hn, hg, host, hin, hout, 4, CG_INT32, CG_SUM));
  cg_plan_t *hp = cg_gpu_compile_all_ranks(hg, "a host plan");
  cg_graph_destroy(hg);
  cg_rebind_t to_device[] = {{hn, x2, hout}};
  cg_status_t st = cg_plan_rebind(hp, to_device, 1);
  char text[500];
  snprintf(text, sizeof text, "a host plan given device memory: cg_plan_rebind returned %s (%s)", cg_status_string(st),
           st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_ERR_INVALID_ARGUMENT || st == CG_ERR_UNSUPPORTED, text);
  ck_assert_all_ranks(cg_plan_run(hp) == CG_SUCCESS && hout[3] == n * (n - 1) / 2, "the host plan still runs");
  cg_plan_destroy(hp);
  cg_comm_destroy(host);

  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_graph_destroy(g2);
  CUDA_OK(cudaStreamDestroy(s));
  embed_counters_free(&c);
  free(host_buf);
  int32_t *all[] = {x, u, v, x2, y2, w};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cg_gpu_free(all[i]);
}
END_TEST

void embed_add_rebind_tests(TCase *rebind) {
  tcase_add_test(rebind, embed__rebind_a_device_plan_to_other_buffers_and_back);
  tcase_add_test(rebind, embed__rebind_bucket_members_between_arenas_and_scattered_buffers);
  tcase_add_test(rebind, embed__rebound_plan_updates_the_user_instance_through_set_params);
  tcase_add_test(rebind, embed__rebind_refusals_leave_the_device_plan_working);
}
