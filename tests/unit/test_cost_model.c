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

#include "backend.h"
#include "comm_internal.h"
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

/* ---- a backend with a path of its own: float32 sum allreduces up to
 * max_bytes take path_us[k] where the library takes library_us[k] (k: the
 * smallest 1 KB << k that holds them) */
typedef struct own_path {
  size_t max_bytes;
  double path_us[CG_COST_PATH_SIZES], library_us[CG_COST_PATH_SIZES];
  int odd_on_library; /* steps of an odd count ran on the library's path (a window's kernels, say) */
} own_path_t;

static uint32_t size_index(size_t bytes) {
  uint32_t k = 0;
  while (k < CG_COST_PATH_SIZES && ((size_t)1024 << k) < bytes) k++;
  return k;
}

static int own_path_us(double *path_us, double *library_us, void *impl, cg_node_kind_t kind, cg_dtype_t dtype,
                       cg_redop_t op, size_t bytes) {
  const own_path_t *o = impl;
  uint32_t k = size_index(bytes);
  if (kind != CG_NODE_ALLREDUCE || dtype != CG_FLOAT32 || op != CG_SUM || !bytes || bytes > o->max_bytes ||
      k == CG_COST_PATH_SIZES)
    return 0;
  *path_us = o->path_us[k], *library_us = o->library_us[k];
  return 1;
}

static int runs_on(const own_path_t *o, const cg_step_t *s) { return !(o->odd_on_library && s->count % 2); }

static int on_own_path(const cg_step_t *s) { return runs_on(s->comm->impl, s); }

static const cg_backend_t own_path_backend = {.interface_version = CG_BACKEND_INTERFACE_VERSION,
                                              .name = "own-path",
                                              .collective_path_us = own_path_us,
                                              .step_on_own_path = on_own_path};
static const cg_comm_ops_t own_path_ops = {.backend_name = "own-path", .backend = &own_path_backend};

/* A random path: faster than the library by 1..20 us at sizes up to 1 KB << (3..13). */
static own_path_t random_path(void) {
  own_path_t o = {(size_t)1024 << (3 + cg_test_below(11)), {0}, {0}, 0};
  for (uint32_t k = 0; k < CG_COST_PATH_SIZES; k++) {
    o.path_us[k] = 2 + (double)cg_test_below(8) + 0.5 * k;
    o.library_us[k] = o.path_us[k] + 1 + (double)cg_test_below(20);
  }
  return o;
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

/* The price of a collective against the documented rule: the line, less the
 * path's saving where the path takes it (bytes up to 1 KB << 13, an
 * allreduce of a dtype and op in the path's bits, both times set and the
 * library's the larger), never under the path's own time. Random costs,
 * paths and collectives. */
START_TEST(cost_model__a_collective_costs_the_line_less_the_paths_saving) {
  cg_test_reseed(0x9a7e0u + (uint64_t)_i);
  for (int round = 0; round < 2000; round++) {
    cg_comm_cost_t c = {NULL, (double)cg_test_below(50), 1.0 + (double)cg_test_below(500000), 0, {0}};
    c.path.dtypes = (uint32_t)cg_test_rand(), c.path.ops = (uint32_t)cg_test_rand();
    for (uint32_t k = 0; k < CG_COST_PATH_SIZES; k++)
      if (cg_test_below(4))
        c.path.path_us[k] = (double)cg_test_below(30), c.path.library_us[k] = (double)cg_test_below(60);
    cg_node_kind_t kind = cg_test_below(2) ? CG_NODE_ALLREDUCE : (cg_node_kind_t)cg_test_below(CG_NODE_KIND_COUNT);
    cg_dtype_t dtype = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
    cg_redop_t op = (cg_redop_t)cg_test_below(CG_REDOP_COUNT);
    size_t bytes = cg_test_below(3) ? cg_test_below((size_t)9 << 20) : (size_t)1024 << cg_test_below(15);
    double line = c.alpha_us + (double)bytes / c.bytes_per_us, want = line;
    uint32_t k = size_index(bytes);
    if (kind == CG_NODE_ALLREDUCE && bytes && k < CG_COST_PATH_SIZES && (c.path.dtypes >> dtype & 1u) &&
        (c.path.ops >> op & 1u) && c.path.path_us[k] > 0 && c.path.library_us[k] > c.path.path_us[k]) {
      want = line - (c.path.library_us[k] - c.path.path_us[k]);
      if (want < c.path.path_us[k]) want = c.path.path_us[k];
    }
    double got = cg_cost_model_collective_us(&c, kind, dtype, op, bytes);
    ck_assert_msg(got == want, "%s of %zu bytes (%s, %s): %.6f us, want %.6f (line %.6f)", cg_node_kind_name(kind),
                  bytes, cg_dtype_name(dtype), cg_redop_name(op), got, want, line);
  }
}
END_TEST

/* A profile where the small collectives ran on the backend's own path (each
 * the true line less the path's saving) and the large ones on the library:
 * the model takes the path from the backend and the small ones back to the
 * library's cost, so it recovers the true line; without that the small
 * ones' lower times pull the fit off it. Random sizes, costs and paths. */
START_TEST(cost_model__collectives_on_the_own_path_fit_the_librarys_line) {
  cg_test_reseed(0x9a7e1u + (uint64_t)_i);
  enum { N = 16 };
  size_t counts[N];
  own_path_t o = random_path();
  o.odd_on_library = _i % 2; /* every other case: the backend says some small ones ran on the library */
  for (int k = 0; k < N; k++) /* half under the path's size, half above (float32) */
    counts[k] = k % 2 ? (1 + cg_test_below(o.max_bytes / 4)) : o.max_bytes / 4 + 1 + cg_test_below(1u << 22);
  double alpha = 15 + (double)cg_test_below(20), bw = 1e5 + (double)cg_test_below(400000);
  backward_t b;
  record(&b, N, counts);
  cg_plan_t *plan = compile(&b, 0, 0);
  /* the true cost as the model prices it: the line with the backend's path */
  cg_comm_cost_t truth = {b.comm, alpha, bw, 0, {0}};
  const cg_comm_ops_t *offline = b.comm->ops;
  b.comm->ops = &own_path_ops, b.comm->impl = &o;
  cg_cost_model_query_path(&truth.path, b.comm);
  ck_assert_uint_eq(truth.path.dtypes, 1u << CG_FLOAT32);
  ck_assert_uint_eq(truth.path.ops, 1u << CG_SUM);
  /* each collective far from the others; its time: the true price */
  cg_profile_t prof = simulate(plan, 1e5, alpha, bw);
  for (uint32_t i = 0; i < plan->n_steps; i++) {
    const cg_step_t *s = &plan->steps[i];
    if (s->kind != CG_STEP_COLLECTIVE) continue;
    double took = runs_on(&o, s) ? cg_cost_model_collective_us(&truth, s->op_kind, s->dtype, s->op, collective_bytes(s))
                                 : alpha + (double)collective_bytes(s) / bw;
    ck_assert(took <= prof.end_us[i] - prof.start_us[i] + 1e-9);
    prof.end_us[i] = prof.start_us[i] + took;
  }
  cg_tuning_t t = {0};
  ck_assert_cg_ok(cg_cost_model_make(&t, plan, b.g, &prof, "test"));
  b.comm->ops = offline, b.comm->impl = NULL;
  const cg_comm_cost_t *c = &t.costs[0];
  ck_assert_msg(!memcmp(&c->path, &truth.path, sizeof c->path), "the model keeps the backend's path");
  /* a path at the floor (its own time) hides part of the saving: then the
   * line's time comes back only up to that */
  int floored = 0;
  for (uint32_t i = 0; i < plan->n_steps; i++) {
    const cg_step_t *s = &plan->steps[i];
    size_t bytes = collective_bytes(s);
    if (s->kind != CG_STEP_COLLECTIVE || !runs_on(&o, s) || !bytes || bytes > o.max_bytes) continue;
    uint32_t k = size_index(bytes); /* within the table: max_bytes is at most 8 MB */
    double line = alpha + (double)bytes / bw;
    floored |= cg_cost_model_collective_us(&truth, s->op_kind, s->dtype, s->op, bytes) !=
               line - (o.library_us[k] - o.path_us[k]);
  }
  if (!floored)
    ck_assert_msg(fabs(c->alpha_us - alpha) < 1e-3 && fabs(c->bytes_per_us / bw - 1) < 1e-6,
                  "fitted alpha %.6f us, %.3f bytes/us; true %.0f us, %.0f bytes/us", c->alpha_us, c->bytes_per_us,
                  alpha, bw);
  cg_tuning_free(&t);
  cg_profile_free(&prof);
  cg_plan_destroy(plan);
  backward_free(&b);
}
END_TEST

/* Small gradients 10 us apart on a line whose fixed cost (15 us) outlasts
 * that gap, with a path that takes them in 4-7 us: the boundaries chosen
 * knowing the path send each one alone and finish earlier (as the path
 * prices them) than those chosen from the line alone, which fuse them. */
START_TEST(cost_model__a_cheaper_path_makes_more_buckets) {
  enum { N = 24 };
  size_t counts[N];
  for (int k = 0; k < N; k++) counts[k] = 16384; /* 64 KB */
  own_path_t o = {(size_t)1 << 20, {0}, {0}, 0};
  for (uint32_t k = 0; k < CG_COST_PATH_SIZES; k++) o.path_us[k] = 4 + 0.25 * k, o.library_us[k] = 12 + k;
  backward_t b;
  record(&b, N, counts);
  cg_plan_t *plan = compile(&b, 0, 0);
  cg_profile_t prof = simulate(plan, 10, 15, 1e5);
  cg_tuning_t line_only = {0}, with_path = {0};
  ck_assert_cg_ok(cg_cost_model_make(&line_only, plan, b.g, &prof, "test"));
  const cg_comm_ops_t *offline = b.comm->ops;
  b.comm->ops = &own_path_ops, b.comm->impl = &o;
  ck_assert_cg_ok(cg_cost_model_make(&with_path, plan, b.g, &prof, "test"));
  b.comm->ops = offline, b.comm->impl = NULL; /* the compiles below take the path from the tuning */
  ck_assert_uint_eq(line_only.costs[0].path.dtypes, 0);
  cg_comm_cost_t truth = with_path.costs[0];
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.bucket_bytes = (size_t)64 << 20;
  cg_plan_t *a = NULL, *p = NULL;
  ck_assert_cg_ok(cg_compile_tuned(&a, b.g, &opts, &line_only, CG_SUCCESS));
  ck_assert_cg_ok(cg_compile_tuned(&p, b.g, &opts, &with_path, CG_SUCCESS));
  ck_assert_msg(collectives(p) > collectives(a), "%u collectives knowing the path, %u from the line alone",
                collectives(p), collectives(a));
  /* each plan's finish as the path prices its collectives */
  double finish[2] = {0, 0};
  const cg_plan_t *plans[2] = {a, p};
  for (int w = 0; w < 2; w++) {
    cg_profile_t run = simulate(plans[w], 10, 15, 1e5);
    double comm_free = 0;
    for (uint32_t i = 0; i < plans[w]->n_steps; i++) {
      const cg_step_t *s = &plans[w]->steps[i];
      if (s->kind != CG_STEP_COLLECTIVE) continue;
      double start = fmax(run.start_us[i], comm_free);
      comm_free = start + cg_cost_model_collective_us(&truth, s->op_kind, s->dtype, s->op, collective_bytes(s));
      finish[w] = fmax(finish[w], comm_free);
    }
    cg_profile_free(&run);
  }
  ck_assert_msg(finish[1] < finish[0] - 0.5, "finish %.2f us knowing the path, %.2f from the line alone", finish[1],
                finish[0]);
  cg_plan_destroy(a);
  cg_plan_destroy(p);
  cg_tuning_free(&line_only);
  cg_tuning_free(&with_path);
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
  tcase_add_loop_test(c, cost_model__a_collective_costs_the_line_less_the_paths_saving, 0, 4);
  tcase_add_loop_test(c, cost_model__collectives_on_the_own_path_fit_the_librarys_line, 0, 20);
  tcase_add_test(c, cost_model__a_cheaper_path_makes_more_buckets);
  suite_add_tcase(s, c);
  return s;
}

int main(void) { return cg_test_main(suite()); }
