/* Draws what commgraph does with a small training-like iteration: the
 * recorded graph and the compiled plan, as Graphviz DOT and SVG. Runs on MPI
 * ranks with host buffers, so it needs no GPU; it also runs the plan once and
 * checks every value, so the drawing is of a plan that works.
 *
 * The iteration touches most of what the drawings can show:
 *
 *   three small gradient all-reduces        fused into one bucket (packed
 *                                           into a staging buffer and back)
 *   "grad norm", a host function            reads the three reduced
 *                                           gradients: raw edges
 *   an all-reduce of that norm              not fused: it waits for the
 *                                           bucket's results
 *                                           (through "grad norm")
 *   one large gradient all-reduce           not fused: larger than a bucket
 *   a broadcast of the config from rank 0   not fused: another kind
 *   a ring exchange (send right, receive    on a second communicator, so a
 *   from left)                              lane of its own
 *   an explicit edge (cg_depend)            the optimizer waits for the ring
 *   "optimizer", a host function            declared reads and writes: raw
 *                                           edges from everything it reads
 *   "report", a host function with no       a fence: after everything
 *   declared access
 *
 * Rank 0 writes <dir>/visualize_graph.dot (the graph as rank 0 recorded it)
 * and <dir>/visualize_plan.dot (rank 0's plan), checks that they name the
 * nodes and the bucket, prints the plan as text, and runs `dot -Tsvg` on both
 * (if Graphviz is not installed it says so and keeps the DOT files). Exits 1
 * if any rank computed a wrong value or a drawing lacks what it should show.
 *
 *   mpiexec -n 2 visualize [dir]        (dir must exist; default .)
 *
 * docs/sample_visualize.md shows the drawings and how to read them. */
#include <commgraph.h>
#include <commgraph/mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  N_W1 = 1024,    /* small gradients: 4 KiB, */
  N_B1 = 64,      /* 256 bytes */
  N_W2 = 2048,    /* and 8 KiB fit one bucket */
  N_BIG = 16384,  /* 64 KiB: more than a bucket */
  N_CONFIG = 16,  /* config[0] is the learning rate */
  N_HALO = 256,
  BUCKET_BYTES = 16 * 1024,
  MAX_REPORTS = 5
};

static int rank, ranks;

#define CHECK(call)                                                                                           \
  do {                                                                                                        \
    cg_status_t st_ = (call);                                                                                 \
    if (st_ != CG_SUCCESS) {                                                                                  \
      fprintf(stderr, "rank %d: %s failed: %s\n  %s\n", rank, #call, cg_status_string(st_), cg_error_last()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                           \
    }                                                                                                         \
  } while (0)

/* Everything the iteration reads and writes on one rank. */
typedef struct state {
  float *w1, *b1, *w2, *big; /* gradients, reduced in place (sum) */
  float norm;                /* sum of the reduced w1, then summed over the ranks */
  float config[N_CONFIG];    /* broadcast from rank 0 */
  float halo_out[N_HALO], halo_in[N_HALO];
  float *params;             /* w1, b1, w2, big one after another */
  int reports;               /* how often "report" ran */
} state_t;

static const size_t n_params = N_W1 + N_B1 + N_W2 + N_BIG;

/* ---- the values: integers, so every sum is exact */

/* Gradient element i of tensor t on rank r: (r + 1) * (1 + (i + t) % 7); the
 * sum over ranks is (1 + (i + t) % 7) * n(n+1)/2. */
static float grad_in(int t, size_t i, int r) { return (float)(r + 1) * (float)(1 + (i + (size_t)t) % 7); }
static float grad_sum(int t, size_t i) { return (float)(1 + (i + (size_t)t) % 7) * (float)(ranks * (ranks + 1) / 2); }
static float config_value(int j) { return j == 0 ? 0.5f : (float)(100 + j); }
static float halo_value(int r, int j) { return (float)(r * 1000 + j); }

/* ---- the host functions */

static void grad_norm(void *arg) {
  state_t *s = arg;
  float sum = 0;
  for (size_t i = 0; i < N_W1; i++) sum += s->w1[i];
  for (size_t i = 0; i < N_B1; i++) sum += s->b1[i];
  for (size_t i = 0; i < N_W2; i++) sum += s->w2[i];
  s->norm = sum;
}

static void optimizer(void *arg) {
  state_t *s = arg;
  float lr = s->config[0];
  const float *grads[] = {s->w1, s->b1, s->w2, s->big};
  const size_t counts[] = {N_W1, N_B1, N_W2, N_BIG};
  float *p = s->params;
  for (int t = 0; t < 4; t++)
    for (size_t i = 0; i < counts[t]; i++) *p++ -= lr * grads[t][i];
}

static void report(void *arg) {
  state_t *s = arg;
  s->reports++;
}

/* ---- recording */

static cg_access_t declare(const cg_range_t *reads, size_t n_reads, const cg_range_t *writes, size_t n_writes) {
  cg_access_t a = CG_ACCESS_INIT;
  a.everything = 0;
  a.reads = reads;
  a.n_reads = n_reads;
  a.writes = writes;
  a.n_writes = n_writes;
  return a;
}

static cg_node_t named(cg_graph_t *graph, cg_node_t node, const char *name) {
  CHECK(cg_node_name(graph, node, name));
  return node;
}

static void record(cg_graph_t *graph, cg_comm_t *world, cg_comm_t *ring, state_t *s) {
  cg_node_t n;
  /* three small all-reduces in a row: one bucket */
  CHECK(cg_allreduce(&n, graph, world, s->w1, s->w1, N_W1, CG_FLOAT32, CG_SUM));
  named(graph, n, "grad w1");
  CHECK(cg_allreduce(&n, graph, world, s->b1, s->b1, N_B1, CG_FLOAT32, CG_SUM));
  named(graph, n, "grad b1");
  CHECK(cg_allreduce(&n, graph, world, s->w2, s->w2, N_W2, CG_FLOAT32, CG_SUM));
  named(graph, n, "grad w2");

  /* a host function on the bucket's results, and an all-reduce of what it
   * computed: that one cannot join the bucket it waits for */
  cg_range_t norm_reads[] = {
      {s->w1, N_W1 * sizeof(float)}, {s->b1, N_B1 * sizeof(float)}, {s->w2, N_W2 * sizeof(float)}};
  cg_range_t norm_writes[] = {{&s->norm, sizeof s->norm}};
  cg_access_t norm_access = declare(norm_reads, 3, norm_writes, 1);
  CHECK(cg_host_func(&n, graph, grad_norm, s, &norm_access));
  named(graph, n, "grad norm");
  CHECK(cg_allreduce(&n, graph, world, &s->norm, &s->norm, 1, CG_FLOAT32, CG_SUM));
  named(graph, n, "norm");

  /* too large for a bucket */
  CHECK(cg_allreduce(&n, graph, world, s->big, s->big, N_BIG, CG_FLOAT32, CG_SUM));
  named(graph, n, "grad big");

  /* another kind: never in an all-reduce bucket */
  CHECK(cg_broadcast(&n, graph, world, s->config, s->config, N_CONFIG, CG_FLOAT32, 0));
  named(graph, n, "config");

  /* a ring on a communicator of its own; sends and receives are issued
   * together, so send-then-receive on every rank cannot deadlock */
  cg_node_t halo_in;
  CHECK(cg_send(&n, graph, ring, s->halo_out, N_HALO, CG_FLOAT32, (rank + 1) % ranks));
  named(graph, n, "halo to right");
  CHECK(cg_recv(&halo_in, graph, ring, s->halo_in, N_HALO, CG_FLOAT32, (rank + ranks - 1) % ranks));
  named(graph, halo_in, "halo from left");

  /* the optimizer declares what it reads and writes: raw edges from each
   * all-reduce and the broadcast, and nothing else */
  cg_range_t opt_reads[] = {{s->w1, N_W1 * sizeof(float)},
                            {s->b1, N_B1 * sizeof(float)},
                            {s->w2, N_W2 * sizeof(float)},
                            {s->big, N_BIG * sizeof(float)},
                            {s->config, sizeof s->config}};
  cg_range_t opt_writes[] = {{s->params, n_params * sizeof(float)}};
  cg_access_t opt_access = declare(opt_reads, 5, opt_writes, 1);
  cg_node_t opt;
  CHECK(cg_host_func(&opt, graph, optimizer, s, &opt_access));
  named(graph, opt, "optimizer");
  /* an edge commgraph cannot infer, since the two share no bytes: the
   * optimizer step starts only once the ring exchange is done (a choice, say
   * to keep the host thread on MPI progress first, not a data dependency) */
  CHECK(cg_depend(graph, halo_in, opt));

  /* no declared access: a fence after everything recorded before it */
  CHECK(cg_host_func(&n, graph, report, s, NULL));
  named(graph, n, "report");
}

/* ---- checking the run */

static long long wrong;

static void expect(float got, float want, const char *what, size_t i) {
  if (got == want) return;
  if (wrong++ < MAX_REPORTS)
    fprintf(stderr, "rank %d: %s[%zu] is %g, expected %g\n", rank, what, i, (double)got, (double)want);
}

static void check_results(const state_t *s) {
  const float *grads[] = {s->w1, s->b1, s->w2, s->big};
  const size_t counts[] = {N_W1, N_B1, N_W2, N_BIG};
  const char *names[] = {"w1", "b1", "w2", "big"};
  const float *p = s->params;
  float lr = config_value(0), norm = 0;
  for (int t = 0; t < 4; t++)
    for (size_t i = 0; i < counts[t]; i++, p++) {
      expect(grads[t][i], grad_sum(t, i), names[t], i);
      expect(*p, -lr * grad_sum(t, i), "params", (size_t)(p - s->params));
      if (t < 3) norm += grad_sum(t, i);
    }
  expect(s->norm, norm * (float)ranks, "norm", 0);
  for (int j = 0; j < N_CONFIG; j++) expect(s->config[j], config_value(j), "config", (size_t)j);
  int left = (rank + ranks - 1) % ranks;
  for (int j = 0; j < N_HALO; j++) expect(s->halo_in[j], halo_value(left, j), "halo_in", (size_t)j);
  if (s->reports != 1 && wrong++ < MAX_REPORTS)
    fprintf(stderr, "rank %d: report ran %d times, expected once\n", rank, s->reports);
}

/* ---- the drawings (rank 0) */

/* The whole file; NULL if it cannot be read. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0, got;
  char *text = malloc(cap + 1);
  while (text && (got = fread(text + len, 1, cap - len, f)) > 0) {
    len += got;
    if (len == cap) {
      char *bigger = realloc(text, 2 * cap + 1);
      if (!bigger) {
        free(text);
        text = NULL;
        break;
      }
      text = bigger;
      cap *= 2;
    }
  }
  fclose(f);
  if (text) text[len] = '\0';
  return text;
}

/* Writes graph or plan as DOT to path; returns the number of problems found
 * when reading it back: every string in `must` has to appear in it. */
static int write_and_check(const char *path, const cg_graph_t *graph, const cg_plan_t *plan, const char *const *must,
                           size_t n_must) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return 1;
  }
  if (graph) CHECK(cg_graph_write_dot(graph, f));
  if (plan) CHECK(cg_plan_write_dot(plan, f));
  if (fclose(f) != 0) {
    perror(path);
    return 1;
  }
  char *text = slurp(path);
  if (!text || strncmp(text, "digraph", 7) != 0) {
    fprintf(stderr, "%s: %s\n", path, text ? "does not start with \"digraph\"" : "cannot be read back");
    free(text);
    return 1;
  }
  int problems = 0;
  for (size_t k = 0; k < n_must; k++)
    if (!strstr(text, must[k])) {
      fprintf(stderr, "%s: lacks \"%s\"\n", path, must[k]);
      problems++;
    }
  free(text);
  return problems;
}

/* `dot -Tsvg`; 0 when done or when Graphviz is not installed (said once). */
static int to_svg(const char *dot_path, const char *svg_path) {
  static int have_dot = -1;
  if (have_dot < 0) {
    have_dot = system("command -v dot >/dev/null 2>&1") == 0;
    if (!have_dot) printf("Graphviz's dot is not installed: no SVG, the DOT files are there to render elsewhere\n");
  }
  if (!have_dot) return 0;
  if (strchr(dot_path, '\'') || strchr(svg_path, '\'')) {
    fprintf(stderr, "%s: a path with a single quote is not passed to the shell\n", dot_path);
    return 1;
  }
  char command[3 * 4096];
  snprintf(command, sizeof command, "dot -Tsvg '%s' -o '%s'", dot_path, svg_path);
  int status = system(command);
  if (status != 0) {
    fprintf(stderr, "%s failed (status %d)\n", command, status);
    return 1;
  }
  char *svg = slurp(svg_path);
  int ok = svg && strstr(svg, "<svg") != NULL;
  if (!ok) fprintf(stderr, "%s: not an SVG\n", svg_path);
  free(svg);
  if (ok) printf("  %s\n", svg_path);
  return !ok;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const char *dir = argc > 1 ? argv[1] : ".";
  if (argc > 2 || strlen(dir) > 4000) {
    if (rank == 0) fprintf(stderr, "usage: mpiexec -n N %s [output directory]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }

  static state_t s;
  s.w1 = malloc(N_W1 * sizeof(float));
  s.b1 = malloc(N_B1 * sizeof(float));
  s.w2 = malloc(N_W2 * sizeof(float));
  s.big = malloc(N_BIG * sizeof(float));
  s.params = calloc(n_params, sizeof(float));
  if (!s.w1 || !s.b1 || !s.w2 || !s.big || !s.params) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  /* two communicators over the same ranks (MPI backend, host memory): one
   * for the collectives, one for the ring */
  cg_comm_t *world, *ring;
  CHECK(cg_comm_create(&world, MPI_COMM_WORLD, NULL));
  CHECK(cg_comm_create(&ring, MPI_COMM_WORLD, NULL));

  cg_graph_t *graph;
  cg_graph_opts_t gopts = CG_GRAPH_OPTS_INIT;
  gopts.name = "visualize";
  CHECK(cg_graph_create(&graph, &gopts));
  record(graph, world, ring, &s);

  /* a small bucket size, so the 64 KiB gradient does not fit whatever the
   * machine (the default comes from the topology) */
  cg_compile_opts_t copts = CG_COMPILE_OPTS_INIT;
  copts.bucket_bytes = BUCKET_BYTES;
  cg_plan_t *plan;
  CHECK(cg_compile(&plan, graph, &copts));
  cg_plan_stats_t ps;
  CHECK(cg_plan_stats(&ps, plan));

  /* run once, on values every rank can predict */
  const size_t counts[] = {N_W1, N_B1, N_W2, N_BIG};
  float *grads[] = {s.w1, s.b1, s.w2, s.big};
  for (int t = 0; t < 4; t++)
    for (size_t i = 0; i < counts[t]; i++) grads[t][i] = grad_in(t, i, rank);
  for (int j = 0; j < N_CONFIG; j++) s.config[j] = rank == 0 ? config_value(j) : -1.0f;
  for (int j = 0; j < N_HALO; j++) {
    s.halo_out[j] = halo_value(rank, j);
    s.halo_in[j] = -1.0f;
  }
  s.norm = -1.0f;
  CHECK(cg_plan_run(plan));
  check_results(&s);

  int problems = 0;
  if (rank == 0) {
    char graph_dot[4200], plan_dot[4200], graph_svg[4200], plan_svg[4200];
    snprintf(graph_dot, sizeof graph_dot, "%s/visualize_graph.dot", dir);
    snprintf(plan_dot, sizeof plan_dot, "%s/visualize_plan.dot", dir);
    snprintf(graph_svg, sizeof graph_svg, "%s/visualize_graph.svg", dir);
    snprintf(plan_svg, sizeof plan_svg, "%s/visualize_plan.svg", dir);

    static const char *const graph_must[] = {"grad w1", "grad b1", "grad w2", "grad norm", "grad big", "config",
                                             "halo to right", "halo from left", "optimizer", "report",
                                             "label=\"raw",    "fence"};
    static const char *const plan_must[] = {"cluster_lane", "bucket 0: 3 nodes", "grad w1", "grad big",
                                            "not fused", "optimizer", "halo to right"};
    problems += write_and_check(graph_dot, graph, NULL, graph_must, sizeof graph_must / sizeof *graph_must);
    problems += write_and_check(plan_dot, NULL, plan, plan_must, sizeof plan_must / sizeof *plan_must);
    if (ps.buckets != 1 || ps.fused_nodes != 3) {
      fprintf(stderr, "expected one bucket of 3 nodes, the plan has %zu bucket%s of %zu nodes in all\n", ps.buckets,
              ps.buckets == 1 ? "" : "s", ps.fused_nodes);
      problems++;
    }

    printf("visualize on %d rank%s: rank 0's plan\n", ranks, ranks == 1 ? "" : "s");
    CHECK(cg_plan_dump(plan, stdout));
    printf("wrote %s and %s\n", graph_dot, plan_dot);
    problems += to_svg(graph_dot, graph_svg);
    problems += to_svg(plan_dot, plan_svg);
    fflush(stdout);
  }
  cg_graph_destroy(graph);

  long long bad[2] = {wrong, problems}, all[2];
  MPI_Allreduce(bad, all, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (all[0] == 0 && all[1] == 0)
      printf("result checked on every rank: OK\n");
    else
      printf("FAILED: %lld wrong values, %lld problems with the drawings\n", all[0], all[1]);
    fflush(stdout);
  }

  cg_plan_destroy(plan);
  cg_comm_destroy(ring);
  cg_comm_destroy(world);
  free(s.w1);
  free(s.b1);
  free(s.w2);
  free(s.big);
  free(s.params);
  MPI_Finalize();
  return all[0] == 0 && all[1] == 0 ? 0 : 1;
}
