/* cg_plan_tune on real ranks (sched/compile/tune.c, tuning.c, the host
 * executor's profile): a backward pass of host functions, each writing one
 * gradient, and an in-place allreduce per gradient. When the backward's steps
 * take long against a collective, the tuned plan may split the one 12 MiB
 * bucket the 64 MiB bucket size gives; when they take no time, it may merge
 * what was unfused. Either way the plan kept (tuned or not, whichever ran
 * faster on every rank) sums right and is the same on every rank. Every rank ends with
 * the same buckets (the ranks agree on the measurements, which differ), and
 * every plan's sums are right. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_test.h"
#include "fuse_why.h"
#include "plan_internal.h"
#include "tuning.h"

/* 1 MiB gradients and 5 ms layers: sizes that keep the sanitizer builds'
 * runs of this suite short (the 4 MiB and 20 ms this suite had took 200 s
 * under ASan on 4 ranks) while a layer still outlasts a collective */
enum { N = 12, G = 1 << 18 /* int32 per gradient: 1 MiB */ };

typedef struct layer {
  int32_t *grad;
  int index;
  long sleep_us; /* this rank's backward time for the layer */
  int rank;
} layer_t;

/* The layer's backward: some time, then its gradient. */
static void backward(void *arg) {
  const layer_t *l = arg;
  struct timespec t = {0, l->sleep_us * 1000};
  if (l->sleep_us) nanosleep(&t, NULL);
  for (int i = 0; i < G; i++) l->grad[i] = (l->rank + 1) * (l->index + 1) + i % 5;
}

static cg_graph_t *record(cg_comm_t *c, layer_t *layers, int32_t *grads, int32_t *chain) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int k = N - 1; k >= 0; k--) {
    layers[k].grad = grads + (size_t)k * G;
    cg_access_t access = CG_ACCESS_INIT;
    cg_range_t reads[] = {{&chain[k + 1], sizeof(int32_t)}};
    cg_range_t writes[] = {{&chain[k], sizeof(int32_t)}, {layers[k].grad, G * sizeof(int32_t)}};
    access.everything = 0, access.reads = reads, access.n_reads = 1, access.writes = writes, access.n_writes = 2;
    ck_assert_cg_ok(cg_host_func(NULL, g, backward, &layers[k], &access));
    ck_assert_cg_ok(cg_allreduce(NULL, g, c, layers[k].grad, layers[k].grad, G, CG_INT32, CG_SUM));
  }
  return g;
}

/* Collective steps of the plan: buckets count once. */
static uint32_t collectives(const cg_plan_t *plan) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < plan->n_steps; i++) n += plan->steps[i].kind == CG_STEP_COLLECTIVE;
  return n;
}

/* Runs the plan and checks every gradient's sum. */
static int sums_right(cg_plan_t *plan, int32_t *grads) {
  int size = cg_mpi_size(), ok = 1;
  memset(grads, CG_MPI_POISON, (size_t)N * G * sizeof *grads);
  ck_assert_cg_ok(cg_plan_run(plan));
  for (int k = 0; k < N; k++)
    for (int i = 0; i < G; i++) ok &= grads[(size_t)k * G + i] == (k + 1) * size * (size + 1) / 2 + size * (i % 5);
  return ok;
}

/* The same buckets (members) on every rank. */
static int same_buckets_everywhere(const cg_plan_t *plan) {
  uint32_t mine[N + 1] = {plan->n_buckets}, k = 1;
  for (uint32_t b = 0; b < plan->n_buckets && k < N + 1; b++) mine[k++] = plan->buckets[b].n_members;
  uint32_t *all = malloc((size_t)cg_mpi_size() * sizeof mine);
  MPI_Allgather(mine, N + 1, MPI_UINT32_T, all, N + 1, MPI_UINT32_T, MPI_COMM_WORLD);
  int same = 1;
  for (int r = 0; r < cg_mpi_size(); r++) same &= memcmp(all + (size_t)r * (N + 1), mine, sizeof mine) == 0;
  free(all);
  return same;
}

static void tune_case(long sleep_us) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  int rank = cg_mpi_rank();
  int32_t *grads = malloc((size_t)N * G * sizeof *grads);
  static int32_t chain[N + 1];
  layer_t layers[N];
  for (int k = 0; k < N; k++)
    layers[k] = (layer_t){NULL, k, sleep_us ? sleep_us + 100 * rank : 0, rank}; /* ranks differ */
  cg_graph_t *g = record(c, layers, grads, chain);
  cg_plan_t *plan = NULL, *tuned = NULL;
  /* 64 MiB buckets (the MPI backend's own size on one node is 4 MiB): the slow case starts from one bucket after the whole
   * backward; the instant case starts unfused, so that tuning must merge */
  cg_compile_opts_t first = CG_COMPILE_OPTS_INIT;
  first.bucket_bytes = (size_t)64 << 20;
  first.fusion = sleep_us != 0;
  ck_assert_cg_ok(cg_compile(&plan, g, &first));
  cg_tune_opts_t o = CG_TUNE_OPTS_INIT;
  o.replays = 3;
  o.compile.bucket_bytes = (size_t)64 << 20;
  ck_assert_cg_ok(cg_plan_tune(&tuned, plan, g, &o));
  ck_assert_all_ranks(sums_right(plan, grads), "the default plan's sums");
  ck_assert_all_ranks(sums_right(tuned, grads), "the tuned plan's sums");
  ck_assert_all_ranks(same_buckets_everywhere(tuned), "the tuned buckets agree");
  /* the host executor progresses MPI only between host functions (MPICH has
   * no progress thread), so sending early may gain nothing here: what is kept
   * is whichever plan ran faster, and the GPU suite checks the gain */
  uint32_t before = collectives(plan), after = collectives(tuned);
  ck_assert_all_ranks(before == (sleep_us ? 1u : (uint32_t)N) && after >= 1 && after <= N,
                      "the plans' collectives");
  int tuned_reason = 0;
  for (uint32_t v = 0; v < tuned->n_names; v++) tuned_reason |= tuned->fuse_why[v] == CG_FUSE_TUNED;
  /* a kept tuned plan with buckets split says why */
  ck_assert_all_ranks(!(sleep_us && after > 1) || tuned_reason, "CG_FUSE_TUNED where the tuned plan split");
  /* the dump says what was timed: round 1 the default and the model's 8
   * candidates, one of them kept, each with its collectives; a round 2 only
   * where the default lost, led by round 1's winner */
  char *dump = cg_test_plan_text(tuned, 0);
  const char *r1 = strstr(dump, "\ntune round 1: default "), *r2 = strstr(dump, "\ntune round 2: round 1's ");
  int entries = 0, kept = 0, lines_ok = r1 != NULL;
  for (const char *p = r1 ? r1 + 1 : NULL; p && *p && *p != '\n'; p++) {
    entries += !strncmp(p, " us (", 5);
    kept += !strncmp(p, " kept", 5);
  }
  lines_ok &= entries == 9 && kept == 1 && strstr(r1, "alpha x0.5 ") && strstr(r1, "overlap x0.125 ");
  lines_ok &= cg_plan_default_won(tuned) ? r2 == NULL : r2 != NULL;
  if (!lines_ok) fprintf(stderr, "%s", dump);
  ck_assert_all_ranks(lines_ok, "the tuned plan's dump lists the timed candidates");
  free(dump);
  cg_plan_destroy(tuned);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
  free(grads);
}

START_TEST(tune__slow_backward) { tune_case(5000); }
END_TEST

START_TEST(tune__instant_backward) { tune_case(0); }
END_TEST

/* Communicators over different ranks: A holds every rank but the last, B
 * every rank but the first, so that with 3 ranks or more some are in both
 * and the first and last in one only. Every rank must go through the same
 * rounds of cg_plan_tune (profiling, agreement, the round before each timed
 * replay) on the communicators it has, and the plan kept sums right. */
enum { N2 = 6, G2 = 1 << 16 };

typedef struct small_layer {
  int32_t *grad;
  int index, rank;
} small_layer_t;

static void small_backward(void *arg) {
  const small_layer_t *l = arg;
  struct timespec t = {0, 2000 * 1000};
  nanosleep(&t, NULL);
  for (int i = 0; i < G2; i++) l->grad[i] = (l->rank + 1) * (l->index + 1) + i % 5;
}

/* Every gradient of communicator j holds the sum over ranks first .. last. */
static int small_sums_right(int32_t *const grads[2], const cg_comm_t *const c[2], int size) {
  int ok = 1;
  for (int j = 0; j < 2; j++) {
    if (!c[j]) continue;
    int first = j == 0 ? 0 : 1, last = j == 0 ? size - 2 : size - 1, ranks = last - first + 1;
    int weight = (last + 1) * (last + 2) / 2 - first * (first + 1) / 2; /* sum of rank + 1 */
    for (int k = 0; k < N2; k++)
      for (int i = 0; i < G2; i++) ok &= grads[j][(size_t)k * G2 + i] == (k + 1) * weight + ranks * (i % 5);
  }
  return ok;
}

START_TEST(tune__communicators_over_different_ranks) {
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  MPI_Comm sub[2];
  MPI_Comm_split(MPI_COMM_WORLD, rank < size - 1 ? 0 : MPI_UNDEFINED, rank, &sub[0]);
  MPI_Comm_split(MPI_COMM_WORLD, rank >= 1 ? 0 : MPI_UNDEFINED, rank, &sub[1]);
  cg_comm_t *c[2] = {NULL, NULL};
  int32_t *grads[2] = {NULL, NULL};
  small_layer_t layers[2][N2];
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int j = 0; j < 2; j++) {
    if (sub[j] == MPI_COMM_NULL) continue;
    ck_assert_cg_ok(cg_comm_create(&c[j], sub[j], NULL));
    grads[j] = malloc((size_t)N2 * G2 * sizeof *grads[j]);
    ck_assert_ptr_nonnull(grads[j]);
  }
  for (int k = N2 - 1; k >= 0; k--)
    for (int j = 0; j < 2; j++) {
      if (!c[j]) continue;
      layers[j][k] = (small_layer_t){grads[j] + (size_t)k * G2, k, rank};
      cg_access_t access = CG_ACCESS_INIT;
      cg_range_t writes[] = {{layers[j][k].grad, G2 * sizeof(int32_t)}};
      access.everything = 0, access.writes = writes, access.n_writes = 1;
      ck_assert_cg_ok(cg_host_func(NULL, g, small_backward, &layers[j][k], &access));
      ck_assert_cg_ok(cg_allreduce(NULL, g, c[j], layers[j][k].grad, layers[j][k].grad, G2, CG_INT32, CG_SUM));
    }
  cg_compile_opts_t first = CG_COMPILE_OPTS_INIT;
  first.bucket_bytes = (size_t)64 << 20;
  cg_plan_t *plan = NULL, *tuned = NULL;
  ck_assert_cg_ok(cg_compile(&plan, g, &first));
  cg_tune_opts_t o = CG_TUNE_OPTS_INIT;
  o.replays = 2;
  o.compile.bucket_bytes = (size_t)64 << 20;
  cg_status_t st = cg_plan_tune(&tuned, plan, g, &o);
  char what[600];
  snprintf(what, sizeof what, "cg_plan_tune over A and B: %s", st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, what);
  for (int j = 0; j < 2; j++)
    if (grads[j]) memset(grads[j], CG_MPI_POISON, (size_t)N2 * G2 * sizeof *grads[j]);
  ck_assert_cg_ok(cg_plan_run(tuned));
  ck_assert_all_ranks(small_sums_right(grads, (const cg_comm_t *const *)c, size), "the tuned plan's sums");
  cg_plan_destroy(tuned);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  for (int j = 0; j < 2; j++) {
    cg_comm_destroy(c[j]);
    free(grads[j]);
    if (sub[j] != MPI_COMM_NULL) MPI_Comm_free(&sub[j]);
  }
}
END_TEST

/* A graph that is not the plan's is refused before anything runs. */
START_TEST(tune__refuses_another_graph) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  int32_t x[4] = {0};
  cg_graph_t *g, *other;
  cg_plan_t *plan, *tuned = (cg_plan_t *)&tuned;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_graph_create(&other, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, x, x, 4, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_allreduce(NULL, other, c, x, x, 4, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_int_eq(cg_plan_tune(&tuned, plan, other, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(cg_error_last(), "not the one the plan was compiled from"), "%s", cg_error_last());
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, x + 2, x + 2, 2, CG_INT32, CG_SUM)); /* changed since */
  ck_assert_int_eq(cg_plan_tune(&tuned, plan, g, NULL), CG_ERR_INVALID_ARGUMENT);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_graph_destroy(other);
  cg_comm_destroy(c);
}
END_TEST

/* Tunings whose backend's own path differs between the ranks (a file edited
 * on one rank; the backend's own measurements are agreed already) end the
 * same on every rank: the dtypes and ops every rank has, at each size the
 * slowest path and the fastest library. Random per rank; poisoned plan. */
START_TEST(tune__ranks_agree_on_the_backends_path) {
  int rank = cg_mpi_rank();
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  layer_t layers[N];
  int32_t *grads = calloc((size_t)N * G, sizeof *grads), chain[N + 1] = {0};
  for (int k = 0; k < N; k++) layers[k] = (layer_t){NULL, k, 0, rank};
  cg_graph_t *g = record(c, layers, grads, chain);
  uint32_t n = cg_graph_node_count(g);
  cg_test_reseed(0x9a7du + 7919u * (uint64_t)rank); /* the one seed, differing per rank */
  cg_comm_cost_t cost = {c, 5, 1e4, 0, {0}};
  cost.path.dtypes = (uint32_t)cg_test_rand() | 1u << CG_INT32, cost.path.ops = (uint32_t)cg_test_rand();
  for (uint32_t k = 0; k < CG_COST_PATH_SIZES; k++) {
    cost.path.path_us[k] = (double)cg_test_below(100);
    cost.path.library_us[k] = (double)cg_test_below(100);
  }
  /* what every rank must end with */
  cg_cost_path_t want = cost.path;
  MPI_Allreduce(MPI_IN_PLACE, &want.dtypes, 1, MPI_UINT32_T, MPI_BAND, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &want.ops, 1, MPI_UINT32_T, MPI_BAND, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, want.path_us, CG_COST_PATH_SIZES, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, want.library_us, CG_COST_PATH_SIZES, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  cg_tuning_t t = {calloc(n, sizeof(double)), n, &cost, 1, 0};
  for (uint32_t v = 0; v < n; v++) t.ready_us[v] = 10.0 * v;
  cg_plan_t *plan = (cg_plan_t *)&plan; /* poisoned */
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  ck_assert_cg_ok(cg_compile_tuned(&plan, g, &o, &t, CG_SUCCESS));
  const cg_comm_cost_t *agreed = cg_tuning_cost(plan->tuning, c);
  int same = agreed && agreed->path.dtypes == want.dtypes && agreed->path.ops == want.ops &&
             !memcmp(agreed->path.path_us, want.path_us, sizeof want.path_us) &&
             !memcmp(agreed->path.library_us, want.library_us, sizeof want.library_us);
  ck_assert_all_ranks(same, "every rank holds the agreed path: common bits, slowest path, fastest library");
  ck_assert_all_ranks(same_buckets_everywhere(plan), "the buckets agree");
  free(t.ready_us);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
  free(grads);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("mpi_tune");
  TCase *tc = cg_mpi_tcase("tune");
  tcase_add_test(tc, tune__slow_backward);
  tcase_add_test(tc, tune__instant_backward);
  tcase_add_test(tc, tune__communicators_over_different_ranks);
  tcase_add_test(tc, tune__refuses_another_graph);
  tcase_add_test(tc, tune__ranks_agree_on_the_backends_path);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_mpi_test_main(suite()); }
