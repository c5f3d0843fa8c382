/* cg_plan_tune's cost model (sched/compile/cost_model.c) on plans compiled
 * over an offline communicator, with profiles made here: a backward pass of
 * host functions (one per gradient, chained, `gap` us each) and an in-place
 * allreduce per gradient; every collective of the profile takes exactly
 * alpha + bytes / bandwidth of a "true" cost, and starts when its
 * dependencies and the communicator's previous collective have ended. The
 * model must recover that cost where the profile can tell fixed cost from
 * bandwidth, and where it cannot (one size: one bucket after the whole
 * backward) it must still let the tuned boundaries send gradients during the
 * backward when bytes cost more than the gaps allow. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost_model.h"
#include "plan_internal.h"
#include "test_support.h"
#include "tuning.h"

enum { MAX_N = 24 };

typedef struct backward {
  cg_comm_t *comm;
  cg_graph_t *g;
  float *grads[MAX_N];
  size_t counts[MAX_N];
  float act[MAX_N + 1];
  int n;
} backward_t;

/* Records layers n-1 .. 0: a host function (reads act[k+1], writes act[k]
 * and gradient k), then the allreduce of gradient k. */
static void record(backward_t *b, int n, const size_t *counts) {
  memset(b, 0, sizeof *b);
  b->n = n;
  ck_assert_cg_ok(cg_comm_create_offline(&b->comm, 0, 2));
  ck_assert_cg_ok(cg_graph_create(&b->g, NULL));
  for (int k = n - 1; k >= 0; k--) {
    b->counts[k] = counts[k];
    b->grads[k] = malloc(counts[k] * sizeof(float));
    ck_assert_ptr_nonnull(b->grads[k]);
    cg_access_t access = CG_ACCESS_INIT;
    cg_range_t reads[] = {{&b->act[k + 1], sizeof(float)}};
    cg_range_t writes[] = {{&b->act[k], sizeof(float)}, {b->grads[k], counts[k] * sizeof(float)}};
    access.everything = 0, access.reads = reads, access.n_reads = 1, access.writes = writes, access.n_writes = 2;
    ck_assert_cg_ok(cg_host_func(NULL, b->g, cg_test_noop, NULL, &access));
    ck_assert_cg_ok(cg_allreduce(NULL, b->g, b->comm, b->grads[k], b->grads[k], counts[k], CG_FLOAT32, CG_SUM));
  }
}

static void backward_free(backward_t *b) {
  cg_graph_destroy(b->g);
  cg_comm_destroy(b->comm);
  for (int k = 0; k < b->n; k++) free(b->grads[k]);
}

static cg_plan_t *compile(const backward_t *b, int fusion, size_t bucket_bytes) {
  cg_plan_t *plan = NULL;
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.fusion = fusion;
  o.bucket_bytes = bucket_bytes;
  ck_assert_cg_ok(cg_compile(&plan, b->g, &o));
  return plan;
}

static size_t collective_bytes(const cg_step_t *s) { return s->count * cg_dtype_size(s->dtype); }

/* A profile of `plan` as the timeline described at the top would run it:
 * host functions `gap_us` each, pack and unpack copies 1 us, collectives
 * alpha + bytes / bytes_per_us, everything else no time. */
static cg_profile_t simulate(const cg_plan_t *plan, double gap_us, double alpha, double bytes_per_us) {
  cg_profile_t p = {calloc(plan->n_steps, sizeof(double)), calloc(plan->n_steps, sizeof(double)), plan->n_steps};
  ck_assert(p.start_us && p.end_us);
  double comm_free = 0;
  for (uint32_t i = 0; i < plan->n_steps; i++) { /* steps come after their dependencies */
    const cg_step_t *s = &plan->steps[i];
    double start = 0, took = 0;
    for (uint32_t e = 0; e < s->n_deps; e++) start = fmax(start, p.end_us[s->deps[e]]);
    if (s->kind == CG_STEP_COLLECTIVE) {
      start = fmax(start, comm_free);
      took = alpha + (double)collective_bytes(s) / bytes_per_us;
    } else if (s->op_kind == CG_NODE_HOST_FUNC) {
      took = gap_us;
    } else if (s->bucket != CG_NO_STEP) {
      took = 1;
    }
    p.start_us[i] = start;
    p.end_us[i] = start + took;
    if (s->kind == CG_STEP_COLLECTIVE) comm_free = p.end_us[i];
  }
  return p;
}

static uint32_t collectives(const cg_plan_t *plan) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < plan->n_steps; i++) n += plan->steps[i].kind == CG_STEP_COLLECTIVE;
  return n;
}

/* Distinct sizes, collectives far apart (each starts when its gradient is
 * ready): least squares recovers the true alpha and bandwidth, and
 * calibration has nothing to add. Random sizes and costs. */
START_TEST(cost_model__distinct_sizes_recover_the_true_cost) {
  cg_test_reseed(0xc057u + (uint64_t)_i);
  int n = 4 + (int)cg_test_below(MAX_N - 4);
  size_t counts[MAX_N] = {0};
  for (int k = 0; k < n; k++) counts[k] = 256 * (1 + (size_t)k) + 4 * cg_test_below(50000);
  double alpha = 5 + (double)cg_test_below(60), bw = 1000 + (double)cg_test_below(400000);
  backward_t b;
  record(&b, n, counts);
  cg_plan_t *plan = compile(&b, 0, 0);
  ck_assert_uint_eq(collectives(plan), (uint32_t)n);
  /* each layer outlasts the largest collective: no queueing on the communicator */
  size_t largest = 0;
  for (int k = 0; k < n; k++) largest = counts[k] > largest ? counts[k] : largest;
  cg_profile_t prof = simulate(plan, alpha + (double)(largest * sizeof(float)) / bw + 100, alpha, bw);
  cg_tuning_t t = {0};
  ck_assert_cg_ok(cg_cost_model_make(&t, plan, b.g, &prof, "test"));
  ck_assert_uint_eq(t.n_costs, 1);
  ck_assert_msg(fabs(t.costs[0].alpha_us - alpha) < 1e-3 && fabs(t.costs[0].bytes_per_us / bw - 1) < 1e-6,
                "fitted alpha %.6f us, %.3f bytes/us; true %.0f us, %.0f bytes/us (%d sizes)", t.costs[0].alpha_us,
                t.costs[0].bytes_per_us, alpha, bw, n);
  cg_tuning_free(&t);
  cg_profile_free(&prof);
  cg_plan_destroy(plan);
  backward_free(&b);
}
END_TEST

/* One bucket after the whole backward, on a slow network: 8 gradients of
 * 4 MiB, 2 ms apart, the 32 MiB bucket takes 15 ms. The profile holds one
 * collective size, so the split between fixed cost and bandwidth is a guess;
 * taking all 15 ms as fixed cost (bytes free) made one bucket always look
 * best, and tuning over NCCL's sockets transport never split. With a small
 * fixed cost and the bucket's bandwidth, a 4 MiB gradient costs less than
 * the 2 ms until the next one is ready, so the tuned boundaries send
 * gradients during the backward, and the model still finishes the profiled
 * plan no earlier than measured. */
START_TEST(cost_model__one_size_still_splits_a_slow_bucket) {
  enum { N = 8, G = 1 << 20 };
  size_t counts[N];
  for (int k = 0; k < N; k++) counts[k] = G;
  const double gap = 2000, bw = 2237, true_alpha = 20; /* 32 MiB in 15 ms */
  backward_t b;
  record(&b, N, counts);
  cg_plan_t *plan = compile(&b, 1, (size_t)64 << 20);
  ck_assert_uint_eq(collectives(plan), 1);
  ck_assert_uint_eq(plan->n_buckets, 1);
  cg_profile_t prof = simulate(plan, gap, true_alpha, bw);
  double measured = prof.end_us[plan->buckets[0].collective_step];
  cg_tuning_t t = {0};
  ck_assert_cg_ok(cg_cost_model_make(&t, plan, b.g, &prof, "test"));
  const cg_comm_cost_t *c = &t.costs[0];
  double bytes = (double)N * G * sizeof(float);
  ck_assert_msg(c->alpha_us < 100 && bytes / c->bytes_per_us > 14000, "alpha %.1f us, bucket's bytes in %.1f us",
                c->alpha_us, bytes / c->bytes_per_us);
  double ready = 0;
  for (uint32_t v = 0; v < t.n_nodes; v++) ready = fmax(ready, t.ready_us[v]);
  ck_assert_msg(ready + c->alpha_us + bytes / c->bytes_per_us >= measured - 1e-6,
                "the model finishes the bucket at %.1f us, measured %.1f", ready + c->alpha_us + bytes / c->bytes_per_us,
                measured);
  cg_plan_t *tuned = NULL;
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.bucket_bytes = (size_t)64 << 20;
  ck_assert_cg_ok(cg_compile_tuned(&tuned, b.g, &o, &t, CG_SUCCESS));
  ck_assert_msg(collectives(tuned) > 1, "the tuned plan runs %u collectives", collectives(tuned));
  /* the last gradient ready goes alone: nothing is left to wait for */
  cg_profile_t again = simulate(tuned, gap, true_alpha, bw);
  double finish = 0;
  for (uint32_t i = 0; i < tuned->n_steps; i++) finish = fmax(finish, again.end_us[i]);
  ck_assert_msg(finish < measured - 10000, "the tuned plan ends at %.0f us, the bucket at %.0f", finish, measured);
  cg_profile_free(&again);
  cg_plan_destroy(tuned);
  cg_tuning_free(&t);
  cg_profile_free(&prof);
  cg_plan_destroy(plan);
  backward_free(&b);
}
END_TEST

/* Tiny collectives of one size faster than the assumed fixed cost: the
 * fixed cost is the fastest one's time, and bytes play no part. */
START_TEST(cost_model__tiny_collectives_are_all_fixed_cost) {
  enum { N = 6 };
  size_t counts[N];
  for (int k = 0; k < N; k++) counts[k] = 1;
  backward_t b;
  record(&b, N, counts);
  cg_plan_t *plan = compile(&b, 0, 0);
  cg_profile_t prof = simulate(plan, 100, 6, 1e12);
  cg_tuning_t t = {0};
  ck_assert_cg_ok(cg_cost_model_make(&t, plan, b.g, &prof, "test"));
  ck_assert_msg(fabs(t.costs[0].alpha_us - 6) < 1e-6 && t.costs[0].bytes_per_us >= 1e6, "alpha %.3f, %.3g bytes/us",
                t.costs[0].alpha_us, t.costs[0].bytes_per_us);
  cg_tuning_free(&t);
  cg_profile_free(&prof);
  cg_plan_destroy(plan);
  backward_free(&b);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cost_model");
  TCase *c = tcase_create("fit");
  tcase_set_timeout(c, 60);
  tcase_add_loop_test(c, cost_model__distinct_sizes_recover_the_true_cost, 0, 20);
  tcase_add_test(c, cost_model__one_size_still_splits_a_slow_bucket);
  tcase_add_test(c, cost_model__tiny_collectives_are_all_fixed_cost);
  suite_add_tcase(s, c);
  return s;
}

int main(void) { return cg_test_main(suite()); }
