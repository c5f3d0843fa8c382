/* Tuning files on real ranks (sched/compile/tuning_file.c, tuning.c,
 * compile.c, tune.c): a backward pass of host functions, each writing one
 * gradient, and an in-place allreduce per gradient, with random sizes and
 * backward times. cg_plan_tune's plan saves its tuning; compiling with that
 * file gives the same buckets (member lists), identical on every rank, and
 * right sums, without profiling and, with check_ranks off, without the
 * cross-rank check. A file for another graph fails every rank with the
 * reason; a file that is malformed on one rank only fails every rank, naming
 * that rank and why; a profile that fails on one rank fails cg_plan_tune on
 * every rank. Nothing hangs: every test has the suite's time limit.
 *
 * The program is linked with --wrap=cg_rank_check (tests/mpi/CMakeLists.txt),
 * so it counts the cross-rank checks each call runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "executor.h"
#include "mpi_test.h"
#include "plan_internal.h"
#include "rank_check.h"
#include "tuning.h"

/* ---- counting cross-rank checks */

static int rank_checks;
cg_status_t __real_cg_rank_check(const cg_graph_t *g, const cg_comm_order_t *order, const char *where,
                                 cg_status_t local_status, cg_comm_t ***joined, uint32_t *n_joined);
cg_status_t __wrap_cg_rank_check(const cg_graph_t *g, const cg_comm_order_t *order, const char *where,
                                 cg_status_t local_status, cg_comm_t ***joined, uint32_t *n_joined);
cg_status_t __wrap_cg_rank_check(const cg_graph_t *g, const cg_comm_order_t *order, const char *where,
                                 cg_status_t local_status, cg_comm_t ***joined, uint32_t *n_joined) {
  rank_checks++;
  return __real_cg_rank_check(g, order, where, local_status, joined, n_joined);
}

/* ---- the program */

enum { MAX_LAYERS = 10 };

typedef struct layer {
  int32_t *grad;
  int index, rank;
  size_t count;
  long sleep_us;
} layer_t;

typedef struct program {
  cg_comm_t *comm;
  cg_graph_t *g;
  int n;
  layer_t layers[MAX_LAYERS];
  int32_t *grads;
  int32_t chain[MAX_LAYERS + 1];
} program_t;

static void backward(void *arg) {
  const layer_t *l = arg;
  struct timespec t = {0, l->sleep_us * 1000};
  if (l->sleep_us) nanosleep(&t, NULL);
  for (size_t i = 0; i < l->count; i++) l->grad[i] = (l->rank + 1) * (l->index + 1) + (int32_t)(i % 7);
}

/* Random layers (the same on every rank: one seed), names on the
 * allreduces; `rename` renames the last one. */
static program_t *record(int rename) {
  program_t *p = calloc(1, sizeof *p);
  ck_assert_cg_ok(cg_comm_create(&p->comm, MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_graph_create(&p->g, NULL));
  p->n = 3 + (int)cg_test_below(MAX_LAYERS - 2);
  size_t total = 0, offset = 0;
  for (int k = 0; k < p->n; k++) {
    p->layers[k] = (layer_t){NULL, k, cg_mpi_rank(), 1024 * (1 + cg_test_below(64)),
                             (long)cg_test_below(3000) + 200 * cg_mpi_rank()};
    total += p->layers[k].count;
  }
  p->grads = malloc(total * sizeof *p->grads);
  for (int k = p->n - 1; k >= 0; k--) {
    layer_t *l = &p->layers[k];
    l->grad = p->grads + offset;
    offset += l->count;
    cg_access_t access = CG_ACCESS_INIT;
    cg_range_t reads[] = {{&p->chain[k + 1], sizeof(int32_t)}};
    cg_range_t writes[] = {{&p->chain[k], sizeof(int32_t)}, {l->grad, l->count * sizeof(int32_t)}};
    access.everything = 0, access.reads = reads, access.n_reads = 1, access.writes = writes, access.n_writes = 2;
    ck_assert_cg_ok(cg_host_func(NULL, p->g, backward, l, &access));
    cg_node_t a;
    char name[32];
    ck_assert_cg_ok(cg_allreduce(&a, p->g, p->comm, l->grad, l->grad, l->count, CG_INT32, CG_SUM));
    snprintf(name, sizeof name, "%s.%d", rename && k == 0 ? "renamed" : "grad", k);
    ck_assert_cg_ok(cg_node_name(p->g, a, name));
  }
  return p;
}

static void program_free(program_t *p) {
  cg_graph_destroy(p->g);
  cg_comm_destroy(p->comm);
  free(p->grads);
  free(p);
}

static int sums_right(cg_plan_t *plan, program_t *p) {
  int size = cg_mpi_size(), ok = 1;
  for (int k = 0; k < p->n; k++) memset(p->layers[k].grad, CG_MPI_POISON, p->layers[k].count * sizeof(int32_t));
  ck_assert_cg_ok(cg_plan_run(plan));
  for (int k = 0; k < p->n; k++)
    for (size_t i = 0; i < p->layers[k].count; i++)
      ok &= p->layers[k].grad[i] == (k + 1) * size * (size + 1) / 2 + size * (int32_t)(i % 7);
  return ok;
}

/* The plan's buckets: each one's members. */
static void buckets_text(char *buf, size_t size, const cg_plan_t *p) {
  size_t n = (size_t)snprintf(buf, size, "%u buckets:", p->n_buckets);
  for (uint32_t b = 0; b < p->n_buckets && n < size; b++) {
    n += (size_t)snprintf(buf + n, size - n, " [");
    for (uint32_t m = 0; m < p->buckets[b].n_members && n < size; m++)
      n += (size_t)snprintf(buf + n, size - n, "%s%u", m ? " " : "", p->buckets[b].members[m]);
    if (n < size) n += (size_t)snprintf(buf + n, size - n, "]");
  }
}

/* The same text on every rank. */
static int same_everywhere(const char *text) {
  enum { B = 512 };
  char mine[B] = "";
  snprintf(mine, sizeof mine, "%s", text);
  char *all = malloc((size_t)cg_mpi_size() * B);
  MPI_Allgather(mine, B, MPI_CHAR, all, B, MPI_CHAR, MPI_COMM_WORLD);
  int same = 1;
  for (int r = 0; r < cg_mpi_size(); r++) same &= memcmp(all + (size_t)r * B, mine, B) == 0;
  free(all);
  return same;
}

/* A directory every rank sees (rank 0 makes it). */
static void shared_dir(char *dir, size_t size) {
  char name[64] = "/tmp/cg_tuning_file_XXXXXX";
  if (cg_mpi_rank() == 0) ck_assert_ptr_nonnull(mkdtemp(name));
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
  snprintf(dir, size, "%s", name);
}

static void remove_dir(const char *dir) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (cg_mpi_rank() == 0) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
  }
}

/* A plan cg_plan_tune returned for p (64 KiB to 4 MiB buckets). */
static cg_plan_t *tuned_plan(program_t *p, size_t *bucket_bytes, int *checks) {
  cg_plan_t *plan = NULL, *tuned = NULL;
  cg_compile_opts_t first = CG_COMPILE_OPTS_INIT;
  *bucket_bytes = (size_t)1 << (16 + cg_test_below(7));
  first.bucket_bytes = *bucket_bytes;
  ck_assert_cg_ok(cg_compile(&plan, p->g, &first));
  cg_tune_opts_t o = CG_TUNE_OPTS_INIT;
  o.replays = 2;
  o.compile.bucket_bytes = *bucket_bytes;
  o.compile.check_ranks = 1; /* not used: the graph is the plan's */
  rank_checks = 0;
  ck_assert_cg_ok(cg_plan_tune(&tuned, plan, p->g, &o));
  *checks = rank_checks;
  ck_assert_all_ranks(sums_right(plan, p), "the input plan still runs");
  cg_plan_destroy(plan);
  return tuned;
}

static int file_says_default(const char *path) {
  FILE *f = fopen(path, "r");
  char line[256];
  int dflt = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "boundaries ", 11)) dflt = !strcmp(line, "boundaries default\n");
  if (f) fclose(f);
  return dflt;
}

START_TEST(tuning_file__round_trip) {
  program_t *p = record(0);
  size_t bucket_bytes;
  int tune_checks;
  cg_plan_t *tuned = tuned_plan(p, &bucket_bytes, &tune_checks);
  ck_assert_all_ranks(tune_checks == 0, "cg_plan_tune ran no cross-rank check");
  ck_assert_all_ranks(sums_right(tuned, p), "the tuned plan's sums");
  char dir[96], path[160], one[160], text[512], loaded_text[512];
  shared_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/tune.%%r.txt", dir);
  ck_assert_cg_ok(cg_plan_save_tuning(tuned, path));
  /* every rank also saves to one path: the renames leave one whole file */
  snprintf(one, sizeof one, "%s/tune.txt", dir);
  ck_assert_cg_ok(cg_plan_save_tuning(tuned, one));
  MPI_Barrier(MPI_COMM_WORLD);
  char mine[160];
  snprintf(mine, sizeof mine, "%s/tune.%d.txt", dir, cg_mpi_rank());
  ck_assert_all_ranks(file_says_default(mine) == cg_plan_default_won(tuned), "the file says which boundaries won");
  buckets_text(text, sizeof text, tuned);
  ck_assert_all_ranks(same_everywhere(text), "the tuned buckets agree");
  for (int variant = 0; variant < 3; variant++) {
    /* 0: each rank's own file, no check; 1: the same with the check; 2: the
     * one shared file */
    cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
    o.bucket_bytes = bucket_bytes;
    o.check_ranks = variant == 1;
    o.tuning_file = variant == 2 ? one : path;
    cg_plan_t *loaded = NULL;
    rank_checks = 0;
    ck_assert_cg_ok(cg_compile(&loaded, p->g, &o));
    ck_assert_all_ranks(rank_checks == (variant == 1), "a cross-rank check only where check_ranks asks for it");
    buckets_text(loaded_text, sizeof loaded_text, loaded);
    char what[1200];
    snprintf(what, sizeof what, "the loaded buckets are the tuned ones (tuned %s; loaded %s)", text, loaded_text);
    ck_assert_all_ranks(!strcmp(text, loaded_text), what);
    ck_assert_all_ranks(same_everywhere(loaded_text), "the loaded buckets agree");
    ck_assert_all_ranks(cg_plan_default_won(loaded) == cg_plan_default_won(tuned), "the winner is kept");
    ck_assert_all_ranks(loaded->tuning && !memcmp(loaded->tuning->costs, tuned->tuning->costs,
                                                  sizeof(cg_comm_cost_t)),
                        "the loaded cost is the tuned one");
    ck_assert_all_ranks(sums_right(loaded, p), "the loaded plan's sums");
    cg_plan_destroy(loaded);
  }
  cg_plan_destroy(tuned);
  remove_dir(dir);
  program_free(p);
}
END_TEST

/* A tuning saved for one graph, loaded for another (a renamed node, a node
 * more): every rank fails with the file, the line and what differs. */
START_TEST(tuning_file__another_graph_fails_everywhere) {
  uint64_t seed = cg_test_rand();
  cg_test_reseed(seed);
  program_t *p = record(0);
  size_t bucket_bytes;
  int checks;
  cg_plan_t *tuned = tuned_plan(p, &bucket_bytes, &checks);
  char dir[96], path[160];
  shared_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/tune.%%r.txt", dir);
  ck_assert_cg_ok(cg_plan_save_tuning(tuned, path));
  for (int variant = 0; variant < 4; variant++) {
    cg_test_reseed(seed); /* the same layers */
    program_t *q = record(variant % 2 == 0);
    if (variant % 2 == 1) ck_assert_cg_ok(cg_barrier(NULL, q->g, q->comm));
    cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
    o.tuning_file = path;
    o.check_ranks = variant >= 2;
    cg_plan_t *plan = (cg_plan_t *)&plan;
    cg_status_t st = cg_compile(&plan, q->g, &o);
    const char *why = variant % 2 == 0 ? "is 'grad.0' in the file and 'renamed.0' in the graph"
                                       : "nodes, this graph has";
    char what[1400];
    snprintf(what, sizeof what, "variant %d: %s: %s", variant, cg_status_string(st), cg_error_last());
    ck_assert_all_ranks(st == CG_ERR_INVALID_ARGUMENT && plan == (cg_plan_t *)&plan &&
                            strstr(cg_error_last(), dir) && strstr(cg_error_last(), ".txt:") &&
                            strstr(cg_error_last(), why),
                        what);
    program_free(q);
  }
  cg_plan_destroy(tuned);
  remove_dir(dir);
  program_free(p);
}
END_TEST

/* One rank's file is broken (cut short, or garbage): every rank fails with
 * CG_ERR_INVALID_ARGUMENT; the others name that rank and its reason. */
START_TEST(tuning_file__malformed_on_one_rank_fails_everywhere) {
  program_t *p = record(0);
  size_t bucket_bytes;
  int checks;
  cg_plan_t *tuned = tuned_plan(p, &bucket_bytes, &checks);
  char dir[96], path[160], mine[160];
  shared_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/tune.%%r.txt", dir);
  snprintf(mine, sizeof mine, "%s/tune.%d.txt", dir, cg_mpi_rank());
  int bad_rank = (int)cg_test_below((uint64_t)cg_mpi_size());
  for (int variant = 0; variant < 4; variant++) {
    ck_assert_cg_ok(cg_plan_save_tuning(tuned, path));
    if (cg_mpi_rank() == bad_rank) {
      FILE *f = fopen(mine, variant % 2 ? "w" : "a");
      ck_assert_ptr_nonnull(f);
      fputs(variant % 2 ? "commgraph-tuning 1\nnodes lots\n" : "one more line\n", f);
      fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
    o.bucket_bytes = bucket_bytes;
    o.tuning_file = path;
    o.check_ranks = variant >= 2;
    cg_plan_t *plan = (cg_plan_t *)&plan;
    cg_status_t st = cg_compile(&plan, p->g, &o);
    const char *why = variant % 2 ? "expected 'nodes <count>'" : "text after 'end'";
    char other[64], what[1400];
    snprintf(other, sizeof other, "rank %d of communicator", bad_rank);
    snprintf(what, sizeof what, "variant %d, rank %d broken: %s: %s", variant, bad_rank, cg_status_string(st),
             cg_error_last());
    ck_assert_all_ranks(st == CG_ERR_INVALID_ARGUMENT && plan == (cg_plan_t *)&plan &&
                            strstr(cg_error_last(), why) && strstr(cg_error_last(), ".txt:") &&
                            (cg_mpi_rank() == bad_rank || strstr(cg_error_last(), other)),
                        what);
  }
  /* all ranks well again: it compiles */
  ck_assert_cg_ok(cg_plan_save_tuning(tuned, path));
  MPI_Barrier(MPI_COMM_WORLD);
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.bucket_bytes = bucket_bytes;
  o.tuning_file = path;
  cg_plan_t *plan = NULL;
  ck_assert_cg_ok(cg_compile(&plan, p->g, &o));
  ck_assert_all_ranks(sums_right(plan, p), "the loaded plan's sums");
  cg_plan_destroy(plan);
  cg_plan_destroy(tuned);
  remove_dir(dir);
  program_free(p);
}
END_TEST

/* ---- a profile that fails on one rank (after its replays, which are
 * collective) */

static const cg_executor_t *real_exec;
static int failing_rank;

static cg_status_t failing_profile(cg_profile_t *out, cg_plan_t *plan, int replays, void *stream, const char *where) {
  cg_status_t st = real_exec->profile(out, plan, replays, stream, where);
  if (st != CG_SUCCESS || cg_mpi_rank() != failing_rank) return st;
  cg_profile_free(out);
  return cg_fail(CG_ERR_BACKEND, "%s: the test's profile failed on rank %d", where, failing_rank);
}

START_TEST(tuning_file__profile_failure_on_one_rank_fails_everywhere) {
  program_t *p = record(0);
  cg_plan_t *plan = NULL, *tuned = (cg_plan_t *)&tuned;
  ck_assert_cg_ok(cg_compile(&plan, p->g, NULL));
  failing_rank = (int)cg_test_below((uint64_t)cg_mpi_size());
  real_exec = plan->exec;
  cg_executor_t fake = *plan->exec;
  fake.profile = failing_profile;
  plan->exec = &fake;
  cg_tune_opts_t o = CG_TUNE_OPTS_INIT;
  o.replays = 2;
  rank_checks = 0;
  cg_status_t st = cg_plan_tune(&tuned, plan, p->g, &o);
  plan->exec = real_exec;
  char other[64], what[1400];
  snprintf(other, sizeof other, "rank %d of communicator", failing_rank);
  snprintf(what, sizeof what, "rank %d's profile failed: %s: %s", failing_rank, cg_status_string(st),
           cg_error_last());
  ck_assert_all_ranks(st == CG_ERR_BACKEND && tuned == NULL && rank_checks == 0 &&
                          strstr(cg_error_last(), "the test's profile failed") &&
                          (cg_mpi_rank() == failing_rank || strstr(cg_error_last(), other)),
                      what);
  ck_assert_all_ranks(sums_right(plan, p), "the plan still runs");
  cg_plan_destroy(plan);
  program_free(p);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("mpi_tuning_file");
  TCase *tc = cg_mpi_tcase("tuning_file");
  tcase_add_loop_test(tc, tuning_file__round_trip, 0, 3);
  tcase_add_test(tc, tuning_file__another_graph_fails_everywhere);
  tcase_add_test(tc, tuning_file__malformed_on_one_rank_fails_everywhere);
  tcase_add_loop_test(tc, tuning_file__profile_failure_on_one_rank_fails_everywhere, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_mpi_test_main(suite()); }
