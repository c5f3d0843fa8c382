/* Records one data-parallel training iteration, compiles it and runs it on every
 * rank of MPI_COMM_WORLD, then checks what it computed.
 *
 * Two paths, one program. On GPUs (when commgraph was built with CUDA and NCCL
 * and every rank has a CUDA device of its own on its node) the communication
 * buffers are cudaMalloc'd, the communicators use the NCCL backend, and each
 * iteration is one cg_plan_launch of the plan's CUDA graph on a stream.
 * Otherwise the buffers are host memory and the plan runs over MPI with
 * cg_plan_run. Rank 0 says first which path it took and why. CG_DEMO_PATH=host
 * takes the host path anyway; CG_DEMO_PATH=gpu fails if there are no GPUs.
 *
 * The iteration: a broadcast of a small block of hyperparameters from rank 0,
 * one in-place all-reduce (average) per gradient tensor (sizes from a workload
 * file), a halo exchange with both neighbouring ranks on a communicator of its
 * own, and the optimizer step as a host function that reads the reduced
 * gradients and the hyperparameters and writes the parameters. On GPUs the
 * optimizer stays on the host, as a CPU-offloaded optimizer does, but outside
 * the plan (a host function cannot read device memory): the program enqueues it
 * on the same stream after cg_plan_launch, behind copies of the reduced
 * gradients and the hyperparameters to pinned host memory. The stream orders
 * all three after the plan's communication.
 *
 * Before each run every rank fills its gradients, halos and (rank 0) the
 * hyperparameters with integer-valued floats that depend on the rank and the
 * iteration, so every sum is exact; after the run (on GPUs, after copying the
 * buffers back) every rank compares every gradient element, the broadcast
 * block, both halos and what the optimizer saw with values it computes on its
 * own. Rank 0 prints a summary and writes the recorded graph and the compiled
 * plan as DOT. Exits 1 if any rank found a wrong value.
 *
 *   mpiexec -n 4 train_iteration <workload.txt> <graph.dot> <plan.dot> [iterations]
 */
#include <commgraph.h>
#include <commgraph/mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The GPU path needs a commgraph built with CUDA and NCCL. */
#define CAN_USE_GPU (CG_HAVE_CUDA && CG_HAVE_NCCL)
#if CAN_USE_GPU
#include <commgraph/cuda.h>
#include <cuda_runtime_api.h>
#endif

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
  float *grads;  /* all gradients, one after another, in host memory */
  float *params; /* same layout */
  float *hyper;  /* HYPER floats */
} model_t;

/* The buffers the communication reads and writes: on the host path the host
 * arrays themselves, on the GPU path device memory of the same sizes. */
typedef struct comm_buffers {
  float *grads;
  float *hyper;
  float *halo_send[2], *halo_recv[2]; /* [0]: left neighbour, [1]: right */
} comm_buffers_t;

/* What the optimizer step reads and writes besides the model. */
typedef struct optimizer {
  model_t *model;
  double grad_sum; /* sum of the gradients the step saw, exact for these values */
} optimizer_t;

static int rank, ranks;
static int use_gpu; /* the path every rank takes, agreed at start-up */

#define CHECK(call)                                                                                    \
  do {                                                                                                 \
    cg_status_t st_ = (call);                                                                          \
    if (st_ != CG_SUCCESS) {                                                                           \
      fprintf(stderr, "rank %d: %s failed: %s\n  %s\n", rank, #call, cg_status_string(st_), cg_error_last()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                    \
    }                                                                                                  \
  } while (0)

#if CAN_USE_GPU
#define CUDA_CHECK(call)                                                                               \
  do {                                                                                                 \
    cudaError_t err_ = (call);                                                                         \
    if (err_ != cudaSuccess) {                                                                         \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, cudaGetErrorString(err_));              \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                    \
    }                                                                                                  \
  } while (0)
static cudaStream_t stream; /* the stream the GPU path launches the plan on */
#endif

/* ---- choosing the path */

/* The CUDA device this rank would use: its rank among the ranks on its node.
 * -1, with the reason in `why`, when it has none. */
static int device_of_this_rank(int local_rank, int local_ranks, char *why, size_t why_size) {
#if CAN_USE_GPU
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess) {
    snprintf(why, why_size, "rank %d has no usable GPU: cudaGetDeviceCount says \"%s\"%s", rank,
             cudaGetErrorString(err),
             err == cudaErrorInsufficientDriver ? " (no CUDA driver, or one older than the runtime)" : "");
    return -1;
  }
  if (devices < local_ranks) {
    snprintf(why, why_size, "rank %d sees %d CUDA device%s for the %d ranks on its node, and each needs its own",
             rank, devices, devices == 1 ? "" : "s", local_ranks);
    return -1;
  }
  return local_rank;
#else
  (void)local_rank;
  (void)local_ranks;
  snprintf(why, why_size, "commgraph was built without %s", CG_HAVE_CUDA ? "NCCL" : "CUDA");
  return -1;
#endif
}

/* Sets use_gpu the same on every rank and returns this rank's device (or
 * CG_DEVICE_HOST). Rank 0 prints the path and why. */
static int choose_path(void) {
  MPI_Comm node_comm; /* the ranks on this rank's node */
  int local_rank, local_ranks;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_comm);
  MPI_Comm_rank(node_comm, &local_rank);
  MPI_Comm_size(node_comm, &local_ranks);
  MPI_Comm_free(&node_comm);

  char why[256] = "";
  const char *forced = getenv("CG_DEMO_PATH");
  int device = CG_DEVICE_HOST;
  if (forced && strcmp(forced, "host") == 0)
    snprintf(why, sizeof why, "CG_DEMO_PATH=host");
  else
    device = device_of_this_rank(local_rank, local_ranks, why, sizeof why);

  /* GPUs only if every rank has one; the lowest rank without says why */
  int without = device == CG_DEVICE_HOST ? rank : ranks, first_without;
  MPI_Allreduce(&without, &first_without, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  use_gpu = first_without == ranks;
  if (!use_gpu) {
    MPI_Bcast(why, sizeof why, MPI_CHAR, first_without, MPI_COMM_WORLD);
    if (rank == 0) printf("path: host buffers over MPI, because %s\n", why);
    if (forced && strcmp(forced, "gpu") == 0) {
      if (rank == 0) fprintf(stderr, "CG_DEMO_PATH=gpu, but the GPU path is not available\n");
      MPI_Finalize();
      exit(1);
    }
    return CG_DEVICE_HOST;
  }
#if CAN_USE_GPU
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreate(&stream));
  if (rank == 0) {
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    printf("path: GPUs with the NCCL backend, because every rank has a CUDA device of its own "
           "(rank 0: device %d, %s)\n",
           device, prop.name);
  }
#endif
  return device;
}

/* ---- memory for either path */

/* A communication buffer for `host`: `host` itself on the host path, device
 * memory of the same size on the GPU path. */
static void *comm_buffer(void *host, size_t bytes) {
#if CAN_USE_GPU
  if (use_gpu) {
    void *dev;
    CUDA_CHECK(cudaMalloc(&dev, bytes));
    return dev;
  }
#endif
  (void)bytes;
  return host;
}

static void comm_buffer_free(void *buf) {
#if CAN_USE_GPU
  if (use_gpu) CUDA_CHECK(cudaFree(buf));
#endif
  (void)buf;
}

/* Host memory; pinned on the GPU path, where copies from the device write it. */
static void *host_alloc(size_t bytes) {
#if CAN_USE_GPU
  if (use_gpu) {
    void *p;
    CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
#endif
  return malloc(bytes);
}

static void host_free(void *p) {
#if CAN_USE_GPU
  if (use_gpu) {
    CUDA_CHECK(cudaFreeHost(p));
    return;
  }
#endif
  free(p);
}

/* Copies between host and communication buffers; nothing to do on the host
 * path, where they are the same memory. */
static void copy(void *dst, const void *src, size_t bytes) {
  if (dst == src) return;
#if CAN_USE_GPU
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
#else
  (void)bytes;
#endif
}

/* ---- loading the workload */

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

/* The optimizer step, run once the gradients are reduced and the
 * hyperparameters have arrived in host memory: by the plan on the host path,
 * after it on the stream on the GPU path. */
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

/* ---- running */

/* One iteration: the plan and the optimizer step after it. On the host path
 * the step is part of the plan. */
static void run_iteration(cg_plan_t *plan, optimizer_t *sgd, const comm_buffers_t *b) {
#if CAN_USE_GPU
  if (use_gpu) {
    model_t *m = sgd->model;
    CHECK(cg_plan_launch(plan, stream)); /* one cudaGraphLaunch; returns at once */
    /* work enqueued on the stream after the plan waits for it */
    CUDA_CHECK(cudaMemcpyAsync(m->grads, b->grads, m->total * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(m->hyper, b->hyper, HYPER * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaLaunchHostFunc(stream, sgd_step, sgd));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
#endif
  (void)sgd; /* on the host path the plan runs the optimizer step itself */
  (void)b;
  CHECK(cg_plan_run(plan));
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
  int device = choose_path();

  static model_t model;
  static float halo_send[2][HALO], halo_recv[2][HALO];
  if (load_workload(&model, argv[1]) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
  size_t grad_bytes = model.total * sizeof(float);
  model.grads = host_alloc(grad_bytes);
  model.params = calloc(model.total, sizeof(float));
  model.hyper = host_alloc(HYPER * sizeof(float));
  if (!model.grads || !model.params || !model.hyper) {
    fprintf(stderr, "rank %d: out of memory for %zu floats\n", rank, 2 * model.total);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  comm_buffers_t bufs;
  bufs.grads = comm_buffer(model.grads, grad_bytes);
  bufs.hyper = comm_buffer(model.hyper, HYPER * sizeof(float));
  for (int d = 0; d < 2; d++) {
    bufs.halo_send[d] = comm_buffer(halo_send[d], sizeof halo_send[d]);
    bufs.halo_recv[d] = comm_buffer(halo_recv[d], sizeof halo_recv[d]);
  }
  optimizer_t sgd = {&model, 0};

  /* Two communicators over the same ranks: the data-parallel one, and one for
   * the halo exchange, so the halo does not wait in line behind the
   * all-reduces. On the GPU path both are NCCL communicators on this rank's
   * device. */
  cg_comm_opts_t copts = CG_COMM_OPTS_INIT;
  copts.backend = use_gpu ? CG_BACKEND_NCCL : CG_BACKEND_MPI;
  copts.device = device;
  cg_comm_t *world, *halo;
  CHECK(cg_comm_create(&world, MPI_COMM_WORLD, &copts));
  CHECK(cg_comm_create(&halo, MPI_COMM_WORLD, &copts));

  cg_graph_t *graph;
  cg_graph_opts_t gopts = CG_GRAPH_OPTS_INIT;
  gopts.name = "training iteration";
  CHECK(cg_graph_create(&graph, &gopts));

  cg_node_t node;
  CHECK(cg_broadcast(&node, graph, world, bufs.hyper, bufs.hyper, HYPER, CG_FLOAT32, 0));
  CHECK(cg_node_name(graph, node, "hyperparameters"));

  /* gradients, in the order backward produces them: last layer first */
  for (size_t t = model.n_tensors; t-- > 0;) {
    float *grad = bufs.grads + model.offsets[t];
    char name[32];
    CHECK(cg_allreduce(&node, graph, world, grad, grad, model.counts[t], CG_FLOAT32, CG_AVG));
    snprintf(name, sizeof name, "grad %zu", t);
    CHECK(cg_node_name(graph, node, name));
  }

  /* halo exchange with both neighbours of the ring; sends and receives are
   * issued together, so it cannot deadlock */
  int left = (rank + ranks - 1) % ranks, right = (rank + 1) % ranks;
  CHECK(cg_send(&node, graph, halo, bufs.halo_send[0], HALO, CG_FLOAT32, left));
  CHECK(cg_node_name(graph, node, "halo to left"));
  CHECK(cg_recv(&node, graph, halo, bufs.halo_recv[1], HALO, CG_FLOAT32, right));
  CHECK(cg_node_name(graph, node, "halo from right"));
  CHECK(cg_send(&node, graph, halo, bufs.halo_send[1], HALO, CG_FLOAT32, right));
  CHECK(cg_node_name(graph, node, "halo to right"));
  CHECK(cg_recv(&node, graph, halo, bufs.halo_recv[0], HALO, CG_FLOAT32, left));
  CHECK(cg_node_name(graph, node, "halo from left"));

  /* the optimizer step reads every gradient and the learning rate and writes
   * every parameter (and its checksum): read-after-write edges from each
   * all-reduce and the broadcast are added automatically. On the GPU path it
   * follows the plan on the stream instead (run_iteration). */
  if (!use_gpu) {
    cg_range_t reads[] = {{model.grads, grad_bytes}, {model.hyper, HYPER * sizeof(float)}};
    cg_range_t writes[] = {{model.params, grad_bytes}, {&sgd.grad_sum, sizeof sgd.grad_sum}};
    cg_access_t access = CG_ACCESS_INIT;
    access.everything = 0;
    access.reads = reads;
    access.n_reads = 2;
    access.writes = writes;
    access.n_writes = 2;
    CHECK(cg_host_func(&node, graph, sgd_step, &sgd, &access));
    CHECK(cg_node_name(graph, node, "sgd step"));
  }

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

    /* on the GPU path: to the device, and poison (NaN) the host copies the
     * optimizer reads, so it can only see what comes back after the plan */
    copy(bufs.grads, model.grads, grad_bytes);
    copy(bufs.hyper, model.hyper, HYPER * sizeof(float));
    for (int d = 0; d < 2; d++) {
      copy(bufs.halo_send[d], halo_send[d], sizeof halo_send[d]);
      copy(bufs.halo_recv[d], halo_recv[d], sizeof halo_recv[d]);
    }
    if (use_gpu) {
      memset(model.grads, 0xff, grad_bytes);
      memset(model.hyper, 0xff, HYPER * sizeof(float));
    }

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    run_iteration(plan, &sgd, &bufs);
    double mine = MPI_Wtime() - t0;
    MPI_Allreduce(&mine, &times[k], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* the slowest rank */

    /* on the GPU path the halos come back from the device here (the gradients
     * and hyperparameters came back for the optimizer step); then the same
     * checks */
    for (int d = 0; d < 2; d++) copy(halo_recv[d], bufs.halo_recv[d], sizeof halo_recv[d]);

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
    printf("training iteration on %d MPI rank%s, %s: %zu gradient tensors, %.1f MB per rank\n", ranks,
           ranks == 1 ? "" : "s", use_gpu ? "device buffers, NCCL" : "host buffers", model.n_tensors,
           (double)model.total * sizeof(float) / 1e6);
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
    if (use_gpu)
      printf("    one CUDA graph on device %d: %zu event edge%s between lanes, %zu group call%s; the sgd step\n"
             "    follows it on the stream\n",
             ps.device, ps.events, ps.events == 1 ? "" : "s", ps.groups, ps.groups == 1 ? "" : "s");
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
  comm_buffer_free(bufs.grads);
  comm_buffer_free(bufs.hyper);
  for (int d = 0; d < 2; d++) {
    comm_buffer_free(bufs.halo_send[d]);
    comm_buffer_free(bufs.halo_recv[d]);
  }
  host_free(model.grads);
  host_free(model.hyper);
  free(model.params);
#if CAN_USE_GPU
  if (use_gpu) CUDA_CHECK(cudaStreamDestroy(stream));
#endif
  MPI_Finalize();
  return wrong_all == 0 ? 0 : 1;
}
