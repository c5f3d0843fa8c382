/* A 2-D Jacobi stencil on MPI ranks: the halo exchange and the update of two
 * time steps recorded once as a commgraph graph, compiled once, and replayed
 * every other time step; the result is checked bit for bit against the same
 * computation in one process.
 *
 * The grid has nx columns and ny rows of floats. Its border is fixed (a hot
 * top edge, a cold bottom edge, a falling left edge, a warm right edge); each
 * time step replaces every inner point by the mean of its four neighbours.
 * The rows are cut into strips, one per rank, ny / ranks rows each. A rank
 * keeps its strip with one halo row above and one below, twice (A and B: a
 * step reads one and writes the other).
 *
 * The graph of two steps, on every rank:
 *
 *   send A's first row to the rank above, its last row to the rank below,
 *   receive A's halo rows from them             (send/recv nodes)
 *   update: A -> B                              (a compute node)
 *   the same exchange on B
 *   update: B -> A
 *
 * Nobody adds an edge by hand. Each update declares what it reads (the source
 * strip with both halo rows) and writes (the destination strip's rows it
 * updates), and commgraph infers the rest from the bytes: the update after
 * the receives of its halos, B's sends after the update that wrote B, the
 * second update after everything that still reads A. B's halo receives touch
 * nothing the first update does: on the host they are posted at once, while
 * it computes.
 *
 * Two paths, one program. On GPUs (a commgraph built with CUDA and NCCL, and a
 * GPU of its own for every rank) the strips are device memory, the
 * communicator an NCCL communicator on each rank's GPU (CG_DEVICE_LOCAL_RANK),
 * the update a child-graph node holding a captured launch of the stencil
 * kernel (stencil_kernels.cu), and a replay is one cg_plan_launch on a stream;
 * then the same plan is launched K times inside a stream capture of the
 * program's own, and the captured graph replayed. Otherwise the strips are
 * host memory, the update a host-function node, and a replay is cg_plan_run.
 * Rank 0 says which path and why. CG_DEMO_PATH=host takes the host path
 * anyway; CG_DEMO_PATH=gpu requires the GPU path: without it rank 0 says
 * SKIPPED and every rank exits 77 (1 under CG_REQUIRE_GPU=1).
 *
 * The check: the ranks gather their strips on rank 0, which runs every step
 * on the whole grid in one process with the same function for a point
 * (stencil_point in stencil_kernels.h, the kernel's too), compares the bytes
 * and names the first cell that differs. Every rank exits 1 on a mismatch.
 *
 *   mpiexec -n 4 stencil_halo [nx ny steps] [--dump-plan] [--dot dir]
 *
 * --dump-plan prints rank 1's plan as text, --dot writes its recorded graph
 * and its plan as DOT into dir (rank 1: the middle ranks have both
 * neighbours).
 *
 * Defaults: 1024 x 1024, 200 steps on GPUs; 256 x 256, 100 steps on the host.
 * ny must divide into strips of at least two rows; steps must be even.
 * docs/sample_stencil.md explains the sample. */
#include <commgraph.h>
#include <commgraph/mpi.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stencil_kernels.h"

/* The GPU path needs a commgraph built with CUDA and NCCL, and the kernel
 * (STENCIL_HAVE_KERNELS: CMake built stencil_kernels.cu). */
#if CG_HAVE_CUDA && CG_HAVE_NCCL && defined(STENCIL_HAVE_KERNELS)
#define CAN_USE_GPU 1
#include <commgraph/cuda.h>
#include <cuda_runtime_api.h>
#else
#define CAN_USE_GPU 0
#endif

#define CAPTURED_PAIRS 10 /* plan launches captured into the program's own graph (K) */

static int rank, ranks;
static int use_gpu; /* the path every rank takes, agreed at start-up */

#define CHECK(call)                                                                                           \
  do {                                                                                                        \
    cg_status_t st_ = (call);                                                                                 \
    if (st_ != CG_SUCCESS) {                                                                                  \
      fprintf(stderr, "rank %d: %s failed: %s\n  %s\n", rank, #call, cg_status_string(st_), cg_error_last()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                           \
    }                                                                                                         \
  } while (0)

#if CAN_USE_GPU
#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    cudaError_t err_ = (call);                                                                    \
    if (err_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, cudaGetErrorString(err_));         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                               \
    }                                                                                             \
  } while (0)
#endif

/* This rank's part of the grid. Local row 0 is the halo above, rows 1 ..
 * rows are the strip (global rows first_row ..), row rows + 1 the halo below. */
typedef struct layout {
  size_t nx, ny;     /* the whole grid: columns, rows */
  size_t rows;       /* rows of the strip */
  size_t first_row;  /* global index of the strip's first row */
  size_t lo, n_upd;  /* local index of the first row a step updates, and how many it updates */
  int up, down;      /* the ranks holding the strips above and below; -1 at the grid's edge */
} layout_t;

/* ---- the computation, shared by every path and the reference */

/* The grid before the first step; every rank evaluates it for its own rows. */
static float initial_value(size_t y, size_t x, size_t nx, size_t ny) {
  if (y == 0) return 1.0f;                                   /* hot top edge */
  if (y == ny - 1) return 0.0f;                              /* cold bottom edge */
  if (x == 0) return (float)(ny - 1 - y) / (float)(ny - 1);  /* left edge falls from 1 to 0 */
  if (x == nx - 1) return 0.5f;                              /* warm right edge */
  return (float)((x * 7 + y * 13) % 16) / 16.0f;             /* a pattern inside, for the steps to smooth */
}

/* `rows` rows from `src` into `dst`, both pointing at the first updated row;
 * reads the row before and the row after too. */
static void jacobi_rows(const float *src, float *dst, size_t rows, size_t nx) {
  for (size_t y = 0; y < rows; y++) {
    const float *mid = src + y * nx, *up = mid - nx, *down = mid + nx;
    float *out = dst + y * nx;
    for (size_t x = 1; x + 1 < nx; x++) out[x] = stencil_point(up[x], down[x], mid[x - 1], mid[x + 1]);
  }
}

/* What the host path's update node runs. */
typedef struct host_update {
  const float *src;
  float *dst;
  size_t rows, nx;
} host_update_t;

static void host_update(void *arg) {
  const host_update_t *u = arg;
  jacobi_rows(u->src, u->dst, u->rows, u->nx);
}

/* ---- choosing the path */

/* The CUDA device this rank would get from CG_DEVICE_LOCAL_RANK is its rank
 * among the ranks on its node; 1 if every rank on the node has one of its
 * own, else 0 with the reason in `why`. */
static int has_own_gpu(int local_ranks, char *why, size_t why_size) {
#if CAN_USE_GPU
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess) {
    snprintf(why, why_size, "rank %d has no usable GPU: cudaGetDeviceCount says \"%s\"", rank,
             cudaGetErrorString(err));
    return 0;
  }
  if (devices < local_ranks) {
    snprintf(why, why_size, "rank %d sees %d CUDA device%s for the %d ranks on its node, and each needs its own",
             rank, devices, devices == 1 ? "" : "s", local_ranks);
    return 0;
  }
  return 1;
#else
  (void)local_ranks;
  snprintf(why, why_size, "this build has no GPU path (%s)",
           !CG_HAVE_CUDA   ? "commgraph was built without CUDA"
           : !CG_HAVE_NCCL ? "commgraph was built without NCCL"
                           : "the stencil kernel was not built");
  return 0;
#endif
}

/* Sets use_gpu the same on every rank; rank 0 prints the path and why.
 * Exits (77, or 1 under CG_REQUIRE_GPU=1) when CG_DEMO_PATH=gpu and there is
 * no GPU path. */
static void choose_path(void) {
  MPI_Comm node_comm;
  int local_ranks;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_comm);
  MPI_Comm_size(node_comm, &local_ranks);
  MPI_Comm_free(&node_comm);

  char why[256] = "";
  const char *forced = getenv("CG_DEMO_PATH");
  int mine;
  if (forced && strcmp(forced, "host") == 0) {
    snprintf(why, sizeof why, "CG_DEMO_PATH=host");
    mine = 0;
  } else {
    mine = has_own_gpu(local_ranks, why, sizeof why);
  }
  /* GPUs only if every rank has one; the lowest rank without says why */
  int without = mine ? ranks : rank, first_without;
  MPI_Allreduce(&without, &first_without, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  use_gpu = first_without == ranks;
  if (use_gpu) return; /* rank 0 names its device once the communicator has chosen it */
  MPI_Bcast(why, sizeof why, MPI_CHAR, first_without, MPI_COMM_WORLD);
  if (forced && strcmp(forced, "gpu") == 0) {
    const char *require = getenv("CG_REQUIRE_GPU");
    int required = require && *require && strcmp(require, "0") != 0;
    if (rank == 0) {
      printf("%s: CG_DEMO_PATH=gpu, but there is no GPU path: %s\n", required ? "FAILED (CG_REQUIRE_GPU=1)" : "SKIPPED",
             why);
      fflush(stdout);
    }
    MPI_Finalize();
    exit(required ? 1 : 77);
  }
  if (rank == 0) printf("path: host buffers over MPI, because %s\n", why);
}

/* ---- recording */

static void name_node(cg_graph_t *graph, cg_node_t node, const char *fmt, const char *buf, size_t row, int peer) {
  char name[96];
  snprintf(name, sizeof name, fmt, buf, row, peer);
  CHECK(cg_node_name(graph, node, name));
}

/* Sends the strip's first and last rows of `strip` to the neighbours and
 * receives its halo rows from them. */
static void record_exchange(cg_graph_t *graph, cg_comm_t *comm, float *strip, const char *which, const layout_t *l) {
  cg_node_t node;
  size_t nx = l->nx;
  if (l->up >= 0) {
    CHECK(cg_send(&node, graph, comm, strip + 1 * nx, nx, CG_FLOAT32, l->up));
    name_node(graph, node, "%s row %zu up to %d", which, 1, l->up);
  }
  if (l->down >= 0) {
    CHECK(cg_send(&node, graph, comm, strip + l->rows * nx, nx, CG_FLOAT32, l->down));
    name_node(graph, node, "%s row %zu down to %d", which, l->rows, l->down);
  }
  if (l->up >= 0) {
    CHECK(cg_recv(&node, graph, comm, strip, nx, CG_FLOAT32, l->up));
    name_node(graph, node, "%s halo %zu from %d", which, 0, l->up);
  }
  if (l->down >= 0) {
    CHECK(cg_recv(&node, graph, comm, strip + (l->rows + 1) * nx, nx, CG_FLOAT32, l->down));
    name_node(graph, node, "%s halo %zu from %d", which, l->rows + 1, l->down);
  }
}

#if CAN_USE_GPU
/* A CUDA graph holding one launch of the stencil kernel, captured on a
 * stream of its own. */
static cudaGraph_t capture_update(const float *src, float *dst, size_t rows, size_t nx) {
  cudaStream_t s;
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CUDA_CHECK(stencil_update_launch(src, dst, rows, nx, s));
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaStreamDestroy(s));
  return graph;
}
#endif

/* The update src -> dst: a host function on the host path (running `hu`), a
 * child graph of the kernel on the GPU path. Either way it declares what it
 * reads and writes, so commgraph orders it against the exchanges. */
static void record_update(cg_graph_t *graph, const float *src, float *dst, host_update_t *hu, const char *name,
                          const layout_t *l) {
  size_t nx = l->nx;
  cg_range_t reads = {src + (l->lo - 1) * nx, (l->n_upd + 2) * nx * sizeof(float)};
  cg_range_t writes = {dst + l->lo * nx, l->n_upd * nx * sizeof(float)};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = &reads;
  access.n_reads = 1;
  access.writes = &writes;
  access.n_writes = 1;
  cg_node_t node;
#if CAN_USE_GPU
  if (use_gpu) {
    cudaGraph_t kernel = capture_update(src + l->lo * nx, dst + l->lo * nx, l->n_upd, nx);
    CHECK(cg_child_graph(&node, graph, kernel, &access));
    CUDA_CHECK(cudaGraphDestroy(kernel)); /* the node holds a clone */
    CHECK(cg_node_name(graph, node, name));
    return;
  }
#endif
  hu->src = src + l->lo * nx;
  hu->dst = dst + l->lo * nx;
  hu->rows = l->n_upd;
  hu->nx = nx;
  CHECK(cg_host_func(&node, graph, host_update, hu, &access));
  CHECK(cg_node_name(graph, node, name));
}

/* ---- the reference and the comparison */

/* The whole grid in one process: `steps` steps, the same function for a
 * point. Returns the final grid; *seconds is the time the steps took. */
static float *reference_run(size_t nx, size_t ny, int steps, double *seconds) {
  float *grid[2];
  for (int b = 0; b < 2; b++) {
    grid[b] = malloc(nx * ny * sizeof(float));
    if (!grid[b]) {
      fprintf(stderr, "rank %d: out of memory for the reference grid\n", rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t y = 0; y < ny; y++)
      for (size_t x = 0; x < nx; x++) grid[b][y * nx + x] = initial_value(y, x, nx, ny);
  }
  double t0 = MPI_Wtime();
  for (int s = 0; s < steps; s++) jacobi_rows(grid[s % 2] + nx, grid[(s + 1) % 2] + nx, ny - 2, nx);
  *seconds = MPI_Wtime() - t0;
  free(grid[(steps + 1) % 2]);
  return grid[steps % 2];
}

/* 1 if the gathered grid has the reference's bytes; else prints the first
 * cell that differs and returns 0. */
static int compare(const float *got, const float *want, size_t nx, size_t ny, size_t rows) {
  if (memcmp(got, want, nx * ny * sizeof(float)) == 0) return 1;
  size_t i = 0;
  while (memcmp(&got[i], &want[i], sizeof(float)) == 0) i++;
  size_t differ = 0;
  for (size_t j = i; j < nx * ny; j++) differ += memcmp(&got[j], &want[j], sizeof(float)) != 0;
  uint32_t gb, wb;
  memcpy(&gb, &got[i], sizeof gb);
  memcpy(&wb, &want[i], sizeof wb);
  fprintf(stderr,
          "MISMATCH: %zu of %zu cells differ from the single-process run; the first is row %zu, column %zu "
          "(rank %zu's strip): %.9g (0x%08x), expected %.9g (0x%08x)\n",
          differ, nx * ny, i / nx, i % nx, (i / nx) / rows, (double)got[i], (unsigned)gb, (double)want[i],
          (unsigned)wb);
  return 0;
}

/* ---- main */

/* The slowest rank's time, on rank 0. */
static double slowest(double mine) {
  double all;
  MPI_Reduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  return all;
}

/* dir/file as DOT: the recorded graph or the plan. */
static void write_dot(const char *dir, const char *file, const cg_graph_t *graph, const cg_plan_t *plan) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
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
  printf("rank %d wrote %s\n", rank, path);
}

static void usage(const char *prog, const char *problem) {
  if (rank == 0)
    fprintf(stderr,
            "%s: %s\nusage: mpiexec -n N %s [nx ny steps] [--dump-plan] [--dot dir]\n"
            "  nx >= 3, ny a multiple of N with at least 2 rows per rank and ny >= 3, steps even >= 2\n"
            "  --dump-plan: rank 1 prints its plan; --dot: rank 1 writes stencil_graph.dot and stencil_plan.dot\n",
            prog, problem, prog);
  MPI_Finalize();
  exit(2);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  choose_path();

  /* arguments: three sizes or none, and a flag */
  long long sizes[3] = {use_gpu ? 1024 : 256, use_gpu ? 1024 : 256, use_gpu ? 200 : 100};
  int n_sizes = 0, dump_plan = 0;
  const char *dot_dir = NULL;
  for (int a = 1; a < argc; a++) {
    if (strcmp(argv[a], "--dump-plan") == 0) {
      dump_plan = 1;
      continue;
    }
    if (strcmp(argv[a], "--dot") == 0 && a + 1 < argc) {
      dot_dir = argv[++a];
      continue;
    }
    char *end;
    long long v = strtoll(argv[a], &end, 10);
    if (n_sizes == 3 || !*argv[a] || *end) usage(argv[0], "unexpected argument");
    sizes[n_sizes++] = v;
  }
  if (n_sizes != 0 && n_sizes != 3) usage(argv[0], "give nx, ny and steps, or none of them");
  long long nx_ll = sizes[0], ny_ll = sizes[1], steps_ll = sizes[2];
  if (nx_ll < 3 || ny_ll < 3 || ny_ll % ranks != 0 || ny_ll / ranks < 2 || nx_ll > INT_MAX / ny_ll)
    usage(argv[0], "bad grid size");
  if (steps_ll < 2 || steps_ll % 2 != 0 || steps_ll > 1000000) usage(argv[0], "bad step count");

  layout_t l;
  l.nx = (size_t)nx_ll;
  l.ny = (size_t)ny_ll;
  l.rows = l.ny / (size_t)ranks;
  l.first_row = (size_t)rank * l.rows;
  l.up = rank > 0 ? rank - 1 : -1;
  l.down = rank + 1 < ranks ? rank + 1 : -1;
  /* global rows 0 and ny-1 are fixed: the first and last strips update one row less */
  l.lo = l.first_row == 0 ? 2 : 1;
  size_t hi = l.first_row + l.rows == l.ny ? l.rows - 1 : l.rows;
  l.n_upd = hi + 1 - l.lo;
  int steps = (int)steps_ll, pairs = steps / 2;
  size_t nx = l.nx, strip_floats = (l.rows + 2) * nx, strip_bytes = strip_floats * sizeof(float);

  /* the strips as the first step sees them: A and B alike (B's fixed values
   * are read from the second step on), halo rows poisoned with NaN so a halo
   * that never arrived shows in the result */
  float *host[2];
  for (int b = 0; b < 2; b++) {
    host[b] = malloc(strip_bytes);
    if (!host[b]) {
      fprintf(stderr, "rank %d: out of memory for its strip\n", rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t r = 0; r < l.rows + 2; r++)
      for (size_t x = 0; x < nx; x++)
        host[b][r * nx + x] = r == 0 || r == l.rows + 1 ? NAN : initial_value(l.first_row + r - 1, x, nx, l.ny);
  }

  /* The communicator: MPI on host memory, or NCCL on this rank's GPU, which
   * cg_comm_create picks (CG_DEVICE_LOCAL_RANK); the strips go there. */
  cg_comm_opts_t copts = CG_COMM_OPTS_INIT;
  copts.backend = CG_BACKEND_AUTO;
  copts.device = use_gpu ? CG_DEVICE_LOCAL_RANK : CG_DEVICE_HOST;
  cg_comm_t *comm;
  CHECK(cg_comm_create(&comm, MPI_COMM_WORLD, &copts));
  float *strip[2] = {host[0], host[1]}; /* what the graph works on */
#if CAN_USE_GPU
  cudaStream_t stream = NULL;
  if (use_gpu) {
    int device;
    const char *backend;
    CHECK(cg_comm_device(&device, comm));
    CHECK(cg_comm_backend_name(&backend, comm));
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int b = 0; b < 2; b++) {
      CUDA_CHECK(cudaMalloc((void **)&strip[b], strip_bytes));
      CUDA_CHECK(cudaMemcpy(strip[b], host[b], strip_bytes, cudaMemcpyHostToDevice));
    }
    if (rank == 0) {
      struct cudaDeviceProp prop;
      CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
      printf("path: GPUs, backend %s, because every rank has a CUDA device of its own (rank 0: device %d, %s)\n",
             backend, device, prop.name);
    }
  }
#endif

  /* ---- record two steps: exchange A's halos, A -> B, exchange B's, B -> A */
  cg_graph_t *graph;
  cg_graph_opts_t gopts = CG_GRAPH_OPTS_INIT;
  gopts.name = "two Jacobi steps";
  CHECK(cg_graph_create(&graph, &gopts));
  static host_update_t updates[2]; /* the host functions' arguments; the plan keeps pointers to them */
  record_exchange(graph, comm, strip[0], "A", &l);
  record_update(graph, strip[0], strip[1], &updates[0], "update A -> B", &l);
  record_exchange(graph, comm, strip[1], "B", &l);
  record_update(graph, strip[1], strip[0], &updates[1], "update B -> A", &l);
  cg_graph_stats_t gs;
  CHECK(cg_graph_stats(&gs, graph));

  /* ---- compile once (collective; checks that every send meets its receive) */
  cg_plan_t *plan;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  CHECK(cg_compile(&plan, graph, NULL));
  double compile_s = slowest(MPI_Wtime() - t0);
  cg_plan_stats_t ps;
  CHECK(cg_plan_stats(&ps, plan));
  /* rank 1, where there is one: a middle rank has both neighbours */
  int shown = ranks > 1 ? 1 : 0;
  if (dump_plan || dot_dir) {
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == shown && dump_plan) {
      printf("rank %d's plan:\n", rank);
      CHECK(cg_plan_dump(plan, stdout));
      fflush(stdout);
    }
    if (rank == shown && dot_dir) {
      write_dot(dot_dir, "stencil_graph.dot", graph, NULL);
      write_dot(dot_dir, "stencil_plan.dot", NULL, plan);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  cg_graph_destroy(graph); /* the plan does not need it */

  /* ---- replay: one plan run per two steps */
  double direct_s = 0, captured_s = 0;
  int direct_timed = 0, captured_timed = 0, captured_pairs = 0;
  if (!use_gpu) {
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int p = 0; p < pairs; p++) CHECK(cg_plan_run(plan));
    direct_s = slowest(MPI_Wtime() - t0);
    direct_timed = pairs;
  }
#if CAN_USE_GPU
  cudaGraph_t user_graph = NULL;
  cudaGraphExec_t user_exec = NULL;
  if (use_gpu) {
    /* half the pairs as cg_plan_launch calls, the rest K at a time in a graph
     * of the program's own that holds K launches of the plan */
    int reps = pairs / 2 / CAPTURED_PAIRS;
    captured_pairs = reps * CAPTURED_PAIRS;
    int direct = pairs - captured_pairs;

    /* the first launch of each kind uploads its graph: not timed */
    CHECK(cg_plan_launch(plan, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int p = 1; p < direct; p++) CHECK(cg_plan_launch(plan, stream)); /* returns at once */
    CUDA_CHECK(cudaStreamSynchronize(stream));
    direct_s = slowest(MPI_Wtime() - t0);
    direct_timed = direct - 1;

    if (reps > 0) {
      /* inside a capture, cg_plan_launch adds the plan to it as a child
       * graph node after what was captured before */
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int k = 0; k < CAPTURED_PAIRS; k++) CHECK(cg_plan_launch(plan, stream));
      CUDA_CHECK(cudaStreamEndCapture(stream, &user_graph));
      CUDA_CHECK(cudaGraphInstantiate(&user_exec, user_graph, 0));
      CUDA_CHECK(cudaGraphLaunch(user_exec, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      for (int r = 1; r < reps; r++) CUDA_CHECK(cudaGraphLaunch(user_exec, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      captured_s = slowest(MPI_Wtime() - t0);
      captured_timed = (reps - 1) * CAPTURED_PAIRS;
    }
    CUDA_CHECK(cudaMemcpy(host[0], strip[0], strip_bytes, cudaMemcpyDeviceToHost));
  }
#endif

  /* ---- gather the strips (two steps per pair: the result is in A) and check */
  float *gathered = NULL;
  if (rank == 0) {
    gathered = malloc(l.nx * l.ny * sizeof(float));
    if (!gathered) {
      fprintf(stderr, "rank 0: out of memory for the gathered grid\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  int strip_count = (int)(l.rows * nx);
  MPI_Gather(host[0] + nx, strip_count, MPI_FLOAT, gathered, strip_count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  int ok = 1;
  if (rank == 0) {
    double ref_s;
    float *want = reference_run(l.nx, l.ny, steps, &ref_s);
    ok = compare(gathered, want, l.nx, l.ny, l.rows);
    free(want);
    free(gathered);

    printf("stencil_halo: %zu x %zu grid on %d rank%s (%zu rows each), %d Jacobi steps, %s\n", l.nx, l.ny, ranks,
           ranks == 1 ? "" : "s", l.rows, steps, use_gpu ? "device buffers" : "host buffers over MPI");
    printf("  rank 0 recorded (two steps): %zu nodes (", gs.nodes);
    const char *sep = "";
    for (int k = 0; k < CG_NODE_KIND_COUNT; k++)
      if (gs.nodes_by_kind[k]) {
        printf("%s%zu %s", sep, gs.nodes_by_kind[k], cg_node_kind_name((cg_node_kind_t)k));
        sep = ", ";
      }
    printf("), %zu edges (%zu raw, %zu war, %zu waw), none by hand\n", gs.edges, gs.raw_edges, gs.war_edges,
           gs.waw_edges);
    printf("  compiled once: rank 0 has %zu steps on %zu lanes, %zu dependencies, %.1f ms with the cross-rank check\n",
           ps.steps, ps.lanes, ps.dependencies, compile_s * 1e3);
    if (use_gpu)
      printf("    one CUDA graph on device %d: %zu event edge%s between lanes, %zu group call%s\n", ps.device,
             ps.events, ps.events == 1 ? "" : "s", ps.groups, ps.groups == 1 ? "" : "s");
    if (direct_timed > 0)
      printf("  replay, %s once per two steps: %.2f us per step (%d steps timed, slowest rank)\n",
             use_gpu ? "cg_plan_launch" : "cg_plan_run", direct_s / (2.0 * direct_timed) * 1e6, 2 * direct_timed);
    if (use_gpu && captured_pairs == 0)
      printf("  (too few steps to capture %d launches into a graph of the program's own)\n", CAPTURED_PAIRS);
    if (captured_timed > 0)
      printf("  replay, %d cg_plan_launch calls captured in one user graph, launched with cudaGraphLaunch: "
             "%.2f us per step (%d steps timed)\n",
             CAPTURED_PAIRS, captured_s / (2.0 * captured_timed) * 1e6, 2 * captured_timed);
    printf("  reference, the whole grid in one process on rank 0's CPU: %.2f us per step\n",
           ref_s / steps * 1e6);
    if (ok)
      printf("  result: all %zu cells bit-identical to the single-process run: OK\n", l.nx * l.ny);
    else
      printf("  result: FAILED, differs from the single-process run (first cell above)\n");
    fflush(stdout);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);

#if CAN_USE_GPU
  if (use_gpu) {
    if (user_exec) CUDA_CHECK(cudaGraphExecDestroy(user_exec));
    if (user_graph) CUDA_CHECK(cudaGraphDestroy(user_graph));
  }
#endif
  cg_plan_destroy(plan);
  cg_comm_destroy(comm);
#if CAN_USE_GPU
  if (use_gpu) {
    for (int b = 0; b < 2; b++) CUDA_CHECK(cudaFree(strip[b]));
    CUDA_CHECK(cudaStreamDestroy(stream));
  }
#endif
  for (int b = 0; b < 2; b++) free(host[b]);
  MPI_Finalize();
  return ok ? 0 : 1;
}
