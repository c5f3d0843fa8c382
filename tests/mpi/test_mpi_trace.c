/* cg_plan_trace on real ranks (sched/plan/plan_trace.c, the host executor's
 * profile): host functions that write gradients, their allreduces fused into
 * a bucket, a ring exchange on a second communicator. Each rank's trace
 * ("%r" in the path) is JSON with its rank as pid, one event per step on the
 * step's lane, lanes named after their communicator and rank, the bucket's
 * event listing its members with names and bytes; the sums stay right; the
 * dump and DOT show measured times (and a tuning's model and ready times)
 * only once there are some. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/trace_json.h"
#include "mpi_test.h"
#include "plan_internal.h"
#include "plan_trace.h"

enum { MAX_GRADS = 12 };

typedef struct layer {
  int32_t *grad;
  size_t count;
  int rank, index;
} layer_t;

static void backward(void *arg) {
  const layer_t *l = arg;
  for (size_t i = 0; i < l->count; i++) l->grad[i] = (l->rank + 1) * (l->index + 1) + (int32_t)(i % 7);
}

/* A folder every rank sees: rank 0's mkdtemp. */
static void shared_tmpdir(char dir[64]) {
  if (cg_mpi_rank() == 0) {
    snprintf(dir, 64, "/tmp/cg_mpi_trace_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
  }
  MPI_Bcast(dir, 64, MPI_CHAR, 0, MPI_COMM_WORLD);
}

static void remove_shared_tmpdir(const char *dir) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (cg_mpi_rank() == 0) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
  }
}

static size_t count_of(const char *text, const char *what) {
  size_t n = 0;
  for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

START_TEST(trace__buckets_and_ranks) {
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  char dir[64];
  shared_tmpdir(dir);
  for (int round = 0; round < 4; round++) {
    cg_test_reseed(2210 + (uint64_t)round); /* the same program on every rank */
    cg_comm_t *world = NULL, *ring = NULL;
    ck_assert_cg_ok(cg_comm_create(&world, MPI_COMM_WORLD, NULL));
    ck_assert_cg_ok(cg_comm_create(&ring, MPI_COMM_WORLD, NULL));
    const char *backend = NULL;
    ck_assert_cg_ok(cg_comm_backend_name(&backend, world));
    int n = 2 + (int)cg_test_below(MAX_GRADS - 1);
    size_t counts[MAX_GRADS], total = 0;
    for (int k = 0; k < n; k++) total += counts[k] = 1 + (size_t)cg_test_below(2000);
    int32_t *grads = malloc(total * sizeof *grads), *p = grads;
    int32_t out = rank, in = -1;
    layer_t layers[MAX_GRADS];
    char names[MAX_GRADS][32];
    cg_graph_t *g;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    for (int k = 0; k < n; k++) {
      layers[k] = (layer_t){p, counts[k], rank, k};
      p += counts[k];
      cg_range_t w = {layers[k].grad, counts[k] * sizeof(int32_t)};
      cg_access_t a = CG_ACCESS_INIT;
      a.everything = 0, a.writes = &w, a.n_writes = 1;
      cg_node_t h, r;
      ck_assert_cg_ok(cg_host_func(&h, g, backward, &layers[k], &a));
      ck_assert_cg_ok(cg_allreduce(&r, g, world, layers[k].grad, layers[k].grad, counts[k], CG_INT32, CG_SUM));
      snprintf(names[k], sizeof names[k], "grad \"%d\"", k);
      ck_assert_cg_ok(cg_node_name(g, r, names[k]));
    }
    ck_assert_cg_ok(cg_send(NULL, g, ring, &out, 1, CG_INT32, (rank + 1) % size));
    ck_assert_cg_ok(cg_recv(NULL, g, ring, &in, 1, CG_INT32, (rank + size - 1) % size));
    cg_plan_t *plan;
    ck_assert_cg_ok(cg_compile(&plan, g, NULL));
    ck_assert_all_ranks(plan->n_buckets >= 1, "the gradients' allreduces fused");

    char *dump0 = cg_test_plan_text(plan, 0), *dot0 = cg_test_plan_text(plan, 1);
    ck_assert_all_ranks(!strstr(dump0, "measured") && !strstr(dot0, "measured"), "no times before tracing");

    char path[128], mine[128];
    snprintf(path, sizeof path, "%s/trace.%d.%%r.json", dir, round);
    snprintf(mine, sizeof mine, "%s/trace.%d.%d.json", dir, round, rank);
    cg_trace_opts_t o = CG_TRACE_OPTS_INIT;
    o.replays = 1 + (int)cg_test_below(6);
    ck_assert_cg_ok(cg_plan_trace(plan, path, &o));

    /* each rank's own file, its rank as pid */
    trace_t t;
    read_trace(&t, mine, plan, rank);
    int lanes_ok = 1, bucket_ok = 1, cats_ok = 1;
    const jv_t *events = get(&t.doc, "traceEvents");
    for (size_t e = 0; e < events->n; e++) {
      const jv_t *ev = &events->items[e];
      if (strcmp(str(ev, "name"), "thread_name") != 0) continue;
      const cg_lane_t *ln = &plan->lanes[(uint32_t)num(ev, "tid")];
      char want[128];
      if (ln->kind == CG_LANE_COMM)
        snprintf(want, sizeof want, "comm %u (%s, rank %d of %d)", ln->comm_index, backend, rank, size);
      else
        snprintf(want, sizeof want, "%s", ln->kind == CG_LANE_HOST ? "host" : "?");
      if (ln->kind == CG_LANE_COMM || ln->kind == CG_LANE_HOST)
        lanes_ok &= strcmp(str(get(ev, "args"), "name"), want) == 0;
    }
    for (uint32_t i = 0; i < plan->n_steps; i++) {
      const cg_step_t *s = &plan->steps[i];
      const char *cat = s->kind == CG_STEP_COLLECTIVE ? "communication"
                        : s->kind == CG_STEP_HOST_FUNC ? "host"
                        : s->kind == CG_STEP_PACK || s->kind == CG_STEP_UNPACK ? "copy"
                                                                                : "compute";
      cats_ok &= strcmp(t.cat[i], cat) == 0;
      if (s->kind != CG_STEP_COLLECTIVE || s->bucket == CG_NO_STEP) continue;
      const cg_bucket_t *b = &plan->buckets[s->bucket];
      const jv_t *members = get(t.args[i], "members");
      bucket_ok &= members && members->type == J_ARR && members->n == b->n_members;
      bucket_ok &= num(t.args[i], "bucket") == s->bucket && num(t.args[i], "bytes") == (double)b->bytes;
      size_t sum = 0;
      for (uint32_t m = 0; bucket_ok && m < b->n_members; m++) {
        const jv_t *mem = &members->items[m];
        uint32_t v = b->members[m];
        bucket_ok &= num(mem, "node") == v && num(mem, "bytes") == (double)plan->nodes[v].count * 4;
        bucket_ok &= strcmp(str(mem, "name"), plan->node_names[v]) == 0;
        sum += (size_t)num(mem, "bytes");
      }
      bucket_ok &= sum == b->bytes;
      bucket_ok &= strncmp(t.name[i], "bucket ", 7) == 0;
    }
    trace_free(&t);
    ck_assert_all_ranks(lanes_ok, "lanes named 'comm C (backend, rank R of N)' and 'host'");
    ck_assert_all_ranks(cats_ok, "categories");
    ck_assert_all_ranks(bucket_ok, "a bucket's event lists its members, their names and bytes");
    /* every rank wrote its own file */
    MPI_Barrier(MPI_COMM_WORLD);
    int all_there = 1;
    for (int r = 0; r < size; r++) {
      char other[128];
      snprintf(other, sizeof other, "%s/trace.%d.%d.json", dir, round, r);
      all_there &= access(other, R_OK) == 0;
    }
    ck_assert_all_ranks(all_there, "one file per rank");

    /* measured times in the dump (with the bucket's bytes) and the DOT */
    char *dump1 = cg_test_plan_text(plan, 0), *dot1 = cg_test_plan_text(plan, 1);
    int shown = count_of(dump1, "; measured ") == plan->n_steps && count_of(dot1, "\\nmeasured ") == plan->n_steps;
    char bytes[64];
    snprintf(bytes, sizeof bytes, "; %zu bytes; measured ", plan->buckets[0].bytes);
    shown &= strstr(dump1, bytes) != NULL;
    ck_assert_all_ranks(shown, "the dump and DOT show every step's measured time");

    /* a tuning (set by hand here; cg_plan_tune's plans carry theirs): the
     * model per communicator and each collective's ready time */
    cg_tuning_t *tuning = calloc(1, sizeof *tuning);
    tuning->n_nodes = plan->n_names;
    tuning->ready_us = calloc(plan->n_names, sizeof(double));
    for (uint32_t v = 0; v < plan->n_names; v++) tuning->ready_us[v] = 10.0 * v;
    tuning->n_costs = 1;
    tuning->costs = calloc(1, sizeof *tuning->costs);
    tuning->costs[0] = (cg_comm_cost_t){world, 6.5, 301000.0, 0, {0}};
    tuning->costs[0].path.dtypes = 1u << CG_FLOAT32, tuning->costs[0].path.ops = 1u << CG_SUM;
    for (int k = 0; k < 4; k++) tuning->costs[0].path.path_us[k] = 4, tuning->costs[0].path.library_us[k] = 10;
    tuning->costs[0].path.path_us[5] = 12, tuning->costs[0].path.library_us[5] = 11; /* slower: no saving there */
    plan->tuning = tuning;
    char *dump2 = cg_test_plan_text(plan, 0), *dot2 = cg_test_plan_text(plan, 1);
    uint32_t world_index = plan->comms[0].comm == world ? 0 : 1;
    char model[96];
    snprintf(model, sizeof model, "comm %u model: alpha 6.5 \xc2\xb5s, 301 GB/s, own path up to 8 KB", world_index);
    uint32_t collectives = 0;
    for (uint32_t i = 0; i < plan->n_steps; i++) collectives += plan->steps[i].kind == CG_STEP_COLLECTIVE;
    int modelled = strstr(dump2, model) && strstr(dot2, "model: alpha 6.5 \xc2\xb5s, 301 GB/s, own path up to 8 KB") &&
                   count_of(dump2, "; ready at ") == collectives && count_of(dot2, "\\nready at ") == collectives;
    /* a bucket is ready when its last member is */
    double ready = 0;
    const cg_bucket_t *b0 = &plan->buckets[0];
    modelled &= cg_plan_ready_us(&ready, plan, b0->collective_step) &&
                ready == 10.0 * b0->members[b0->n_members - 1];
    ck_assert_all_ranks(modelled, "the dump and DOT show the model and ready times");

    /* another trace replaces the measurement; the sums are right */
    ck_assert_cg_ok(cg_plan_trace(plan, NULL, &o));
    ck_assert_ptr_nonnull(plan->measured);
    memset(grads, CG_MPI_POISON, total * sizeof *grads);
    ck_assert_cg_ok(cg_plan_run(plan));
    int sums = in == (rank + size - 1) % size;
    for (int k = 0; k < n; k++)
      for (size_t i = 0; i < counts[k]; i++)
        sums &= layers[k].grad[i] == (k + 1) * size * (size + 1) / 2 + size * (int32_t)(i % 7);
    ck_assert_all_ranks(sums, "the traced plan's sums");

    free(dump0), free(dot0), free(dump1), free(dot1), free(dump2), free(dot2);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
    cg_comm_destroy(ring);
    cg_comm_destroy(world);
    free(grads);
  }
  remove_shared_tmpdir(dir);
}
END_TEST

/* A path that cannot be written fails with CG_ERR_IO on every rank after the
 * (collective) replays, and leaves the plan's measurement as it was. */
START_TEST(trace__unwritable_path) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  int32_t x[4] = {1, 2, 3, 4};
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, x, x, 4, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  cg_status_t st = cg_plan_trace(plan, "/nonexistent-cg-folder/t.%r.json", NULL);
  ck_assert_all_ranks(st == CG_ERR_IO && strstr(cg_error_last(), "cg_plan_trace") && !plan->measured,
                      "CG_ERR_IO, nothing kept");
  ck_assert_cg_ok(cg_plan_trace(plan, NULL, NULL));
  ck_assert_all_ranks(plan->measured && plan->measured->n_steps == plan->n_steps, "measured without a file");
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_trace");
  TCase *tc = cg_mpi_tcase("trace");
  tcase_add_test(tc, trace__buckets_and_ranks);
  tcase_add_test(tc, trace__unwritable_path);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
