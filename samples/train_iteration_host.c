/* Records one data-parallel training iteration on host buffers, compiles it and
 * runs it on every rank of MPI_COMM_WORLD, then checks what it computed.
 *
 * The iteration: a broadcast of a small block of hyperparameters from rank 0,
 * one in-place all-reduce (average) per gradient tensor (sizes from a workload
 * file), a halo exchange with both neighbouring ranks on a communicator of its
 * own, and the optimizer step as a host function that reads the reduced
 * gradients and the hyperparameters and writes the parameters.
 *
 * Before each run every rank fills its gradients, halos and (rank 0) the
 * hyperparameters with integer-valued floats that depend on the rank and the
 * iteration, so every sum is exact; after the run every rank compares every
 * gradient element, the broadcast block, both halos and what the optimizer saw
 * with values it computes on its own. Rank 0 prints a summary and writes the
 * recorded graph and the compiled plan as DOT. Exits 1 if any rank found a
 * wrong value.
 *
 *   mpiexec -n 4 train_iteration_host <workload.txt> <graph.dot> <plan.dot> [iterations]
 */
#include <commgraph.h>
#include <commgraph/mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSORS 4096
#define HALO 1024      /* floats exchanged with each neighbour */
#define HYPER 256      /* floats in the broadcast block; [0] is the learning rate */
#define MAX_ITERS 100
#define MAX_REPORTS 5  /* wrong values printed per rank */

typedef struct model {
  size_t n_tensors;
  size_t counts[MAX_TENSORS];
  size_t offsets[MAX_TENSORS];
  size_t total;
  float *grads;  /* all gradients, one after another */
  float *params; /* same layout */
  float hyper[HYPER];
} model_t;

/* What the optimizer step reads and writes besides the model. */
typedef struct optimizer {
  model_t *model;
  double grad_sum; /* sum of the gradients the step saw, exact for these values */
} optimizer_t;

static int rank, ranks;

#define CHECK(call)                                                                                    \
  do {                                                                                                 \
    cg_status_t st_ = (call);                                                                          \
    if (st_ != CG_SUCCESS) {                                                                           \
      fprintf(stderr, "rank %d: %s failed: %s\n  %s\n", rank, #call, cg_status_string(st_), cg_error_last()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                    \
    }                                                                                                  \
  } while (0)

static int load_workload(model_t *m, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    perror(path);
    return -1;
  }
  unsigned long long count;
  while (m->n_tensors < MAX_TENSORS && fscanf(f, "%llu", &count) == 1) {
    m->offsets[m->n_tensors] = m->total;
    m->counts[m->n_tensors++] = (size_t)count;
    m->total += (size_t)count;
  }
  fclose(f);
  return m->n_tensors ? 0 : -1;
}

/* ---- the values: closed forms every rank evaluates on its own */

/* Gradient element i of tensor t on rank r in iteration k: c * (r + 1) with c in
 * 1..16. The ranks' sum is c * n(n+1)/2 and the average c * (n+1)/2, both exact
 * in float. */
static float grad_base(size_t t, size_t i, int k) { return (float)(1 + ((i + 3 * t + (size_t)k) & 15)); }
static float grad_avg(size_t t, size_t i, int k) { return grad_base(t, i, k) * (float)(ranks + 1) / 2.0f; }
/* Learning rate and the rest of the block, as rank 0 sets them. */
static float learning_rate(int k) { return k % 2 ? 0.5f : 0.25f; }
static float hyper_value(int j, int k) { return j == 0 ? learning_rate(k) : (float)(k * HYPER + j); }
/* Halo element j that rank r sends in direction d (0: to its left, 1: to its right). */
static float halo_value(int r, int d, int j, int k) { return (float)(((r * 2 + d) * MAX_ITERS + k) * HALO + j); }

/* The optimizer step, run by the plan once the gradients are reduced and the
 * hyperparameters have arrived. */
static void sgd_step(void *arg) {
  optimizer_t *o = arg;
  model_t *m = o->model;
  float lr = m->hyper[0];
  double sum = 0;
  for (size_t i = 0; i < m->total; i++) {
    sum += m->grads[i];
    m->params[i] -= lr * m->grads[i];
  }
  o->grad_sum = sum;
}

/* ---- checking */

static long long wrong;

static void expect(float got, float want, const char *what, size_t a, size_t b, int k) {
  if (got == want) return;
  if (wrong++ < MAX_REPORTS)
    fprintf(stderr, "rank %d, iteration %d: %s [%zu][%zu] is %g, expected %g\n", rank, k, what, a, b, (double)got,
            (double)want);
}

/* Every gradient element; returns the sum of the expected values. */
static double check_grads(const model_t *m, int k) {
  double sum = 0;
  for (size_t t = 0; t < m->n_tensors; t++) {
    const float *g = m->grads + m->offsets[t];
    for (size_t i = 0; i < m->counts[t]; i++) {
      float want = grad_avg(t, i, k);
      sum += want;
      if (g[i] != want) expect(g[i], want, "gradient", t, i, k);
    }
  }
  return sum;
}

/* After iteration `last`: every parameter is minus the sum of lr(k) * avg(k). */
static void check_params(const model_t *m, int last) {
  for (size_t t = 0; t < m->n_tensors; t++) {
    const float *p = m->params + m->offsets[t];
    for (size_t i = 0; i < m->counts[t]; i++) {
      float want = 0;
      for (int k = 0; k <= last; k++) want -= learning_rate(k) * grad_avg(t, i, k);
      if (p[i] != want) expect(p[i], want, "parameter", t, i, last);
    }
  }
}

static void write_dot(const char *path, const cg_graph_t *graph, const cg_plan_t *plan) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (graph) CHECK(cg_graph_write_dot(graph, f));
  if (plan) CHECK(cg_plan_write_dot(plan, f));
  if (fclose(f) != 0) {
    perror(path);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int iterations = argc > 4 ? atoi(argv[4]) : 3;
  if (argc < 4 || iterations < 1 || iterations > MAX_ITERS) {
    if (rank == 0)
      fprintf(stderr, "usage: mpiexec -n N %s <workload.txt> <graph.dot> <plan.dot> [iterations 1..%d]\n", argv[0],
              MAX_ITERS);
    MPI_Finalize();
    return 2;
  }

  static model_t model;
  static float halo_send[2][HALO], halo_recv[2][HALO];
  if (load_workload(&model, argv[1]) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
  model.grads = malloc(model.total * sizeof(float));
  model.params = calloc(model.total, sizeof(float));
  if (!model.grads || !model.params) {
    fprintf(stderr, "rank %d: out of memory for %zu floats\n", rank, 2 * model.total);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  optimizer_t sgd = {&model, 0};

  /* Two communicators over the same ranks: the data-parallel one, and one for
   * the halo exchange, so the halo does not wait in line behind the
   * all-reduces. */
  cg_comm_t *world, *halo;
  CHECK(cg_comm_create(&world, MPI_COMM_WORLD, NULL));
  CHECK(cg_comm_create(&halo, MPI_COMM_WORLD, NULL));

  cg_graph_t *graph;
  cg_graph_opts_t gopts = CG_GRAPH_OPTS_INIT;
  gopts.name = "training iteration";
  CHECK(cg_graph_create(&graph, &gopts));

  cg_node_t node;
  CHECK(cg_broadcast(&node, graph, world, model.hyper, model.hyper, HYPER, CG_FLOAT32, 0));
  CHECK(cg_node_name(graph, node, "hyperparameters"));

  /* gradients, in the order backward produces them: last layer first */
  for (size_t t = model.n_tensors; t-- > 0;) {
    float *grad = model.grads + model.offsets[t];
    char name[32];
    CHECK(cg_allreduce(&node, graph, world, grad, grad, model.counts[t], CG_FLOAT32, CG_AVG));
    snprintf(name, sizeof name, "grad %zu", t);
    CHECK(cg_node_name(graph, node, name));
  }

  /* halo exchange with both neighbours of the ring; sends and receives are
   * issued together, so it cannot deadlock */
  int left = (rank + ranks - 1) % ranks, right = (rank + 1) % ranks;
  CHECK(cg_send(&node, graph, halo, halo_send[0], HALO, CG_FLOAT32, left));
  CHECK(cg_node_name(graph, node, "halo to left"));
  CHECK(cg_recv(&node, graph, halo, halo_recv[1], HALO, CG_FLOAT32, right));
  CHECK(cg_node_name(graph, node, "halo from right"));
  CHECK(cg_send(&node, graph, halo, halo_send[1], HALO, CG_FLOAT32, right));
  CHECK(cg_node_name(graph, node, "halo to right"));
  CHECK(cg_recv(&node, graph, halo, halo_recv[0], HALO, CG_FLOAT32, left));
  CHECK(cg_node_name(graph, node, "halo from left"));

  /* the optimizer step reads every gradient and the learning rate and writes
   * every parameter (and its checksum): read-after-write edges from each
   * all-reduce and the broadcast are added automatically */
  cg_range_t reads[] = {{model.grads, model.total * sizeof(float)}, {model.hyper, sizeof model.hyper}};
  cg_range_t writes[] = {{model.params, model.total * sizeof(float)}, {&sgd.grad_sum, sizeof sgd.grad_sum}};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = reads;
  access.n_reads = 2;
  access.writes = writes;
  access.n_writes = 2;
  CHECK(cg_host_func(&node, graph, sgd_step, &sgd, &access));
  CHECK(cg_node_name(graph, node, "sgd step"));

  cg_graph_stats_t gs;
  CHECK(cg_graph_stats(&gs, graph));
  if (rank == 0) write_dot(argv[2], graph, NULL);

  /* compile: collective, checks that every rank recorded the same program */
  cg_plan_t *plan;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  CHECK(cg_compile(&plan, graph, NULL));
  double compile_s = MPI_Wtime() - t0;
  cg_graph_destroy(graph); /* the plan does not need it */
  cg_plan_stats_t ps;
  CHECK(cg_plan_stats(&ps, plan));
  if (rank == 0) write_dot(argv[3], NULL, plan);

  double times[MAX_ITERS];
  for (int k = 0; k < iterations; k++) {
    /* this iteration's inputs; what the others will send is overwritten */
    for (size_t t = 0; t < model.n_tensors; t++) {
      float *g = model.grads + model.offsets[t];
      for (size_t i = 0; i < model.counts[t]; i++) g[i] = grad_base(t, i, k) * (float)(rank + 1);
    }
    for (int j = 0; j < HYPER; j++) model.hyper[j] = rank == 0 ? hyper_value(j, k) : -1.0f;
    for (int d = 0; d < 2; d++)
      for (int j = 0; j < HALO; j++) {
        halo_send[d][j] = halo_value(rank, d, j, k);
        halo_recv[d][j] = -1.0f;
      }
    sgd.grad_sum = -1;

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    CHECK(cg_plan_run(plan));
    double mine = MPI_Wtime() - t0;
    MPI_Allreduce(&mine, &times[k], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* the slowest rank */

    double want_sum = check_grads(&model, k);
    for (int j = 0; j < HYPER; j++) expect(model.hyper[j], hyper_value(j, k), "hyperparameter", 0, (size_t)j, k);
    for (int j = 0; j < HALO; j++) {
      expect(halo_recv[0][j], halo_value(left, 1, j, k), "halo from left", 0, (size_t)j, k);
      expect(halo_recv[1][j], halo_value(right, 0, j, k), "halo from right", 1, (size_t)j, k);
    }
    if (sgd.grad_sum != want_sum && wrong++ < MAX_REPORTS)
      fprintf(stderr, "rank %d, iteration %d: the optimizer saw gradients summing to %.1f, expected %.1f\n", rank, k,
              sgd.grad_sum, want_sum);
  }
  check_params(&model, iterations - 1);

  long long wrong_all, wrong_ranks, mine_wrong = wrong > 0;
  MPI_Allreduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&mine_wrong, &wrong_ranks, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);

  if (rank == 0) {
    double sorted[MAX_ITERS];
    memcpy(sorted, times, (size_t)iterations * sizeof *times);
    qsort(sorted, (size_t)iterations, sizeof *sorted, compare_doubles);
    printf("training iteration on %d MPI rank%s, host buffers: %zu gradient tensors, %.1f MB per rank\n", ranks,
           ranks == 1 ? "" : "s", model.n_tensors, (double)model.total * sizeof(float) / 1e6);
    printf("  recorded: %zu nodes (", gs.nodes);
    const char *sep = "";
    for (int k = 0; k < CG_NODE_KIND_COUNT; k++)
      if (gs.nodes_by_kind[k]) {
        printf("%s%zu %s", sep, gs.nodes_by_kind[k], cg_node_kind_name((cg_node_kind_t)k));
        sep = ", ";
      }
    printf("), %zu edges\n", gs.edges);
    printf("  compiled: %zu steps on %zu lanes, %zu communicators, %zu dependencies, in %.1f ms with the "
           "cross-rank check\n",
           ps.steps, ps.lanes, ps.communicators, ps.dependencies, compile_s * 1e3);
    printf("  ran %d iteration%s: %.1f ms per iteration (median, slowest rank; min %.1f, max %.1f)\n", iterations,
           iterations == 1 ? "" : "s", sorted[iterations / 2] * 1e3, sorted[0] * 1e3, sorted[iterations - 1] * 1e3);
    printf("  checked on every rank after every iteration: all %zu gradient elements, the broadcast block,\n"
           "    both halos and the gradients the optimizer step saw; after the last, every parameter\n",
           model.total);
    if (wrong_all == 0)
      printf("  result checked: OK\n");
    else
      printf("  result checked: FAILED (%lld wrong values on %lld of %d ranks)\n", wrong_all, wrong_ranks, ranks);
    printf("  DOT written to %s (recorded graph) and %s (plan)\n", argv[2], argv[3]);
    fflush(stdout);
  }

  cg_plan_destroy(plan);
  cg_comm_destroy(halo);
  cg_comm_destroy(world);
  free(model.grads);
  free(model.params);
  MPI_Finalize();
  return wrong_all == 0 ? 0 : 1;
}
