/* Records one data-parallel training iteration as a commgraph graph, the way a
 * framework would: one all-reduce per gradient tensor (sizes from a workload
 * file), a broadcast of the loss scale, a halo exchange with the two
 * neighbouring ranks, and the optimizer step as a host function that reads the
 * gradients and writes the parameters. Then it validates the graph, prints a
 * summary and writes it as DOT.
 *
 *   record_iteration <workload.txt> <out.dot> [rank] [ranks]
 *
 * The communicator is offline (rank and size only): recording, validation and
 * drawing need no transport. */
#include <commgraph.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSORS 4096
#define HALO 1024

typedef struct model {
  size_t n_tensors;
  size_t counts[MAX_TENSORS];
  size_t total;
  float *grads;  /* all gradients, one after another */
  float *params; /* same layout */
} model_t;

static int load_workload(model_t *m, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    perror(path);
    return -1;
  }
  unsigned long long count;
  while (m->n_tensors < MAX_TENSORS && fscanf(f, "%llu", &count) == 1) {
    m->counts[m->n_tensors++] = (size_t)count;
    m->total += (size_t)count;
  }
  fclose(f);
  return m->n_tensors ? 0 : -1;
}

typedef struct optimizer {
  const model_t *model;
  float learning_rate;
} optimizer_t;

static void sgd_step(void *arg) {
  const optimizer_t *o = arg;
  for (size_t i = 0; i < o->model->total; i++) o->model->params[i] -= o->learning_rate * o->model->grads[i];
}

#define CHECK(call)                                                                       \
  do {                                                                                    \
    cg_status_t st_ = (call);                                                             \
    if (st_ != CG_SUCCESS) {                                                              \
      fprintf(stderr, "%s failed: %s\n  %s\n", #call, cg_status_string(st_), cg_error_last()); \
      goto out;                                                                           \
    }                                                                                     \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <workload.txt> <out.dot> [rank] [ranks]\n", argv[0]);
    return 2;
  }
  int rank = argc > 3 ? atoi(argv[3]) : 0, ranks = argc > 4 ? atoi(argv[4]) : 4;
  int result = 1;
  static model_t model;
  cg_comm_t *world = NULL;
  cg_graph_t *graph = NULL;
  FILE *dot = NULL;
  float loss_scale = 1024.0f, halo_send[2][HALO], halo_recv[2][HALO];
  if (load_workload(&model, argv[1]) != 0) return 1;
  model.grads = calloc(model.total, sizeof(float));
  model.params = calloc(model.total, sizeof(float));
  optimizer_t sgd = {&model, 0.01f};
  if (!model.grads || !model.params) goto out;

  CHECK(cg_comm_create_offline(&world, rank, ranks));
  cg_graph_opts_t opts = CG_GRAPH_OPTS_INIT;
  opts.name = "training iteration";
  CHECK(cg_graph_create(&graph, &opts));

  cg_node_t node;
  CHECK(cg_broadcast(&node, graph, world, &loss_scale, &loss_scale, 1, CG_FLOAT32, 0));
  CHECK(cg_node_name(graph, node, "loss scale"));

  /* gradients, in the order backward produces them: last layer first */
  size_t offset = model.total;
  for (size_t t = model.n_tensors; t-- > 0;) {
    offset -= model.counts[t];
    float *grad = model.grads + offset;
    char name[32];
    CHECK(cg_allreduce(&node, graph, world, grad, grad, model.counts[t], CG_FLOAT32, CG_AVG));
    snprintf(name, sizeof name, "grad %zu", t);
    CHECK(cg_node_name(graph, node, name));
  }

  /* halo exchange with both neighbours; sends and receives are grouped, so the
   * ring cannot deadlock */
  int left = (rank + ranks - 1) % ranks, right = (rank + 1) % ranks;
  CHECK(cg_send(NULL, graph, world, halo_send[0], HALO, CG_FLOAT32, left));
  CHECK(cg_recv(NULL, graph, world, halo_recv[1], HALO, CG_FLOAT32, right));
  CHECK(cg_send(NULL, graph, world, halo_send[1], HALO, CG_FLOAT32, right));
  CHECK(cg_recv(NULL, graph, world, halo_recv[0], HALO, CG_FLOAT32, left));

  /* the optimizer step reads every gradient and writes every parameter: hazard
   * edges from each all-reduce are added automatically */
  cg_range_t reads[] = {{model.grads, model.total * sizeof(float)}};
  cg_range_t writes[] = {{model.params, model.total * sizeof(float)}};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = reads;
  access.n_reads = 1;
  access.writes = writes;
  access.n_writes = 1;
  CHECK(cg_host_func(&node, graph, sgd_step, &sgd, &access));
  CHECK(cg_node_name(graph, node, "sgd step"));

  /* a mistake a user might make is refused, names the node, and changes nothing */
  cg_status_t bad = cg_allreduce(NULL, graph, world, model.grads, model.grads + 1, 16, CG_FLOAT32, CG_SUM);
  printf("rejected on purpose: %s\n  %s\n\n", cg_status_string(bad), cg_error_last());
  if (bad != CG_ERR_ALIAS) goto out;

  cg_graph_stats_t s;
  CHECK(cg_graph_stats(&s, graph));
  printf("graph '%s' as rank %d of %d\n", opts.name, rank, ranks);
  printf("  %zu nodes:", s.nodes);
  for (int k = 0; k < CG_NODE_KIND_COUNT; k++)
    if (s.nodes_by_kind[k]) printf(" %zu %s", s.nodes_by_kind[k], cg_node_kind_name((cg_node_kind_t)k));
  printf("\n  %zu edges: %zu read-after-write, %zu write-after-read, %zu write-after-write, %zu fence, "
         "%zu communicator order, %zu explicit\n",
         s.edges, s.raw_edges, s.war_edges, s.waw_edges, s.fence_edges, s.comm_order_edges, s.explicit_edges);
  printf("  %zu tensors, %.1f MB of gradients all-reduced per iteration\n", model.n_tensors,
         (double)model.total * sizeof(float) / 1e6);

  dot = fopen(argv[2], "w");
  if (!dot) {
    perror(argv[2]);
    goto out;
  }
  CHECK(cg_graph_write_dot(graph, dot));
  printf("  DOT written to %s\n", argv[2]);
  result = 0;
out:
  if (dot) fclose(dot);
  cg_graph_destroy(graph);
  cg_comm_destroy(world);
  free(model.grads);
  free(model.params);
  return result;
}
