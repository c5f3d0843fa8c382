/* bench_decode: one tensor-parallel decode step, the inference case where
 * communication is many small messages (issue 25): L layers, each a compute
 * kernel of a few µs (its GEMM) that reads the previous layer's reduced
 * activations and writes its partial ones, then an in-place bfloat16 sum
 * allreduce of hidden × batch values that the next layer reads. Modes, all
 * interleaved round by round in one run:
 *
 *   compute only       the L kernels captured in one CUDA graph, no
 *                      communication: the bound
 *   eager NCCL         kernel, ncclAllReduce, kernel, ... on one stream
 *   NCCL captured      the same captured once in a CUDA graph and replayed
 *   NCCL symmetric     the same on buffers from ncclMemAlloc registered as a
 *                      symmetric window (ncclCommWindowRegister,
 *                      NCCL_WIN_COLL_SYMMETRIC): NCCL's symmetric kernels
 *                      (2.27+; "n/a" with an older NCCL)
 *   commgraph          a plan of L child graphs (one kernel each, declared
 *                      reads and writes) and L allreduces, cg_plan_launch
 *   commgraph watched  the same compiled with a 60 s timeout (the replay
 *                      watchdog's marks and fingerprint)
 *   commgraph symmetric arena
 *                      the unwatched plan over buffers from
 *                      cg_nccl_arena_create (a symmetric window on the
 *                      plan's own NCCL communicator)
 *
 * Printed per batch: µs per step (median over rounds of the slowest rank's
 * cudaEvent time per batch of steps), the communication per layer (step
 * minus compute only, divided by L) and its ratio to NCCL captured's. Every
 * mode's result is checked before and after timing (every layer, poisoned
 * first, against a host reference of small integers, exact in bfloat16); a
 * wrong value prints "WRONG" and exits non-zero. Without a GPU for every rank
 * it says why and exits 0 (under --smoke 77, or 1 where CG_REQUIRE_GPU is
 * set). The symmetric row cannot tell whether NCCL really took its symmetric
 * kernels: without peer access NCCL registers the window as ordinary memory
 * and runs its usual ones.
 *
 *   mpiexec -n 4 bench_decode [--layers 32] [--hidden 4096] [--batches 1,8,64]
 *                             [--layer-us 4] [--rounds 9] [--smoke]
 *
 * --smoke (tests/perf/CMakeLists.txt): 4 layers, hidden 512, batches 1 and 8,
 * 1 round of 2 steps. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph.h"
#include "commgraph/cuda.h"
#include "commgraph/mpi.h"
#include "commgraph/nccl.h"
#include "bench_smoke.h"
#include "decode_kernels.h"
#include "gpu_bench.h"

#define MAX_ROUNDS 101
#define MAX_BATCHES 8

enum { COMPUTE, EAGER, CAPTURED, SYMMETRIC, PLAN, PLAN_WATCHED, PLAN_SYMMETRIC, N_MODES };
static const char *const mode_names[] = {"compute only (bound)", "eager NCCL",        "NCCL captured",
                                         "NCCL symmetric captured", "commgraph",       "commgraph watched",
                                         "commgraph symmetric arena"};
_Static_assert(sizeof mode_names / sizeof *mode_names == N_MODES, "a name per mode");

static int rank, ranks;

typedef struct decode {
  int mode;
  int layers;
  size_t count; /* hidden × batch values per allreduce */
  unsigned long long layer_ns;
  uint16_t *x;     /* (layers + 1) × count bfloat16 (cudaMalloc): x[0] the input, x[l + 1] layer l's */
  uint16_t *x_sym; /* the same in a symmetric window; NULL where NCCL has none */
  uint16_t *x_arena; /* the same in an arena from cg_nccl_arena_create (the plan's own window) */
  ncclComm_t nccl;
  cudaGraphExec_t compute, captured, symmetric;
  cg_plan_t *plan, *watched, *in_arena;
} decode_t;

static uint16_t *layer_buf(const decode_t *d, uint16_t *base, int l) { return base + (size_t)l * d->count; }

/* Enqueues one step over `base` on `stream`: the layers, each followed by its
 * allreduce unless compute_only. Works inside a capture. */
static void enqueue_step(const decode_t *d, uint16_t *base, int compute_only, cudaStream_t stream) {
  for (int l = 0; l < d->layers; l++) {
    uint16_t *out = layer_buf(d, base, l + 1);
    CUDA_CHECK(decode_layer_launch(layer_buf(d, base, l), out, d->count, rank, l, d->layer_ns, stream));
    if (!compute_only)
      NCCL_CHECK_ON(d->nccl, ncclAllReduce(out, out, d->count, ncclBfloat16, ncclSum, d->nccl, stream));
  }
}

static cudaGraphExec_t capture_step(const decode_t *d, uint16_t *base, int compute_only, cudaStream_t stream) {
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue_step(d, base, compute_only, stream);
  return cg_bench_end_capture(stream);
}

/* The same step as a commgraph plan: a child graph per layer (it reads the
 * layer before and writes its own), an allreduce of what it wrote. */
static cg_plan_t *compile_step(const decode_t *d, uint16_t *base, cg_comm_t *comm, double timeout_s,
                               cudaStream_t stream) {
  cg_graph_t *graph;
  CG_CHECK(cg_graph_create(&graph, NULL));
  size_t bytes = d->count * sizeof(uint16_t);
  for (int l = 0; l < d->layers; l++) {
    uint16_t *in = layer_buf(d, base, l), *out = layer_buf(d, base, l + 1);
    cudaGraph_t child;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CUDA_CHECK(decode_layer_launch(in, out, d->count, rank, l, d->layer_ns, stream));
    CUDA_CHECK(cudaStreamEndCapture(stream, &child));
    cg_range_t reads = {in, bytes}, writes = {out, bytes};
    cg_access_t access = CG_ACCESS_INIT;
    access.everything = 0;
    access.reads = &reads;
    access.n_reads = 1;
    access.writes = &writes;
    access.n_writes = 1;
    cg_node_t node;
    char name[32];
    CG_CHECK(cg_child_graph(&node, graph, child, &access)); /* cloned */
    CUDA_CHECK(cudaGraphDestroy(child));
    snprintf(name, sizeof name, "layer %d", l);
    CG_CHECK(cg_node_name(graph, node, name));
    CG_CHECK(cg_allreduce(&node, graph, comm, out, out, d->count, CG_BFLOAT16, CG_SUM));
    snprintf(name, sizeof name, "allreduce %d", l);
    CG_CHECK(cg_node_name(graph, node, name));
  }
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.timeout_s = timeout_s;
  cg_plan_t *plan;
  CG_CHECK(cg_compile(&plan, graph, &opts));
  cg_graph_destroy(graph);
  return plan;
}

static void one_step(const decode_t *d, cudaStream_t stream) {
  switch (d->mode) {
    case COMPUTE: CUDA_CHECK(cudaGraphLaunch(d->compute, stream)); break;
    case EAGER: enqueue_step(d, d->x, 0, stream); break;
    case CAPTURED: CUDA_CHECK(cudaGraphLaunch(d->captured, stream)); break;
    case SYMMETRIC: CUDA_CHECK(cudaGraphLaunch(d->symmetric, stream)); break;
    case PLAN: CG_CHECK(cg_plan_launch(d->plan, stream)); break;
    case PLAN_WATCHED: CG_CHECK(cg_plan_launch(d->watched, stream)); break;
    default: CG_CHECK(cg_plan_launch(d->in_arena, stream)); break;
  }
}

/* `iters` steps between two events: the slowest rank's seconds per step. The
 * allreduce of the result lines the ranks up for the next batch. */
static double time_batch(const decode_t *d, int iters, cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop) {
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; i++) one_step(d, stream);
  CUDA_CHECK(cudaEventRecord(stop, stream));
  return cg_bench_slowest_per_iter(start, stop, iters);
}

/* ---- checking */

/* ref[(l - 1) × count + j], l = 1..layers: what x[l] holds after a step, with
 * the allreduces (reduced) or without (this rank's values only). */
static void reference(const decode_t *d, int reduced, int *ref) {
  for (int l = 0; l < d->layers; l++)
    for (size_t j = 0; j < d->count; j++) {
      int *out = &ref[(size_t)l * d->count + j];
      if (!reduced) {
        int in = l ? ref[(size_t)(l - 1) * d->count + j] : decode_input(rank, j);
        *out = decode_layer_value(in, rank, l, j);
        continue;
      }
      int sum = 0;
      for (int r = 0; r < ranks; r++)
        sum += decode_layer_value(l ? ref[(size_t)(l - 1) * d->count + j] : decode_input(r, j), r, l, j);
      *out = sum;
    }
}

/* Poisons x[1..layers] of the mode's buffers (NaN), runs one step, and
 * returns how many values differ from ref on this rank (the first few
 * printed). */
static uint16_t *mode_base(const decode_t *d, int mode) {
  return mode == SYMMETRIC ? d->x_sym : mode == PLAN_SYMMETRIC ? d->x_arena : d->x;
}

static long long check_mode(decode_t *d, int mode, const int *ref, uint16_t *host, cudaStream_t stream) {
  uint16_t *base = mode_base(d, mode);
  size_t n = (size_t)d->layers * d->count;
  CUDA_CHECK(cudaMemset(layer_buf(d, base, 1), 0xff, n * sizeof *base));
  CUDA_CHECK(cudaDeviceSynchronize()); /* the memset (legacy stream) before the step on `stream` */
  d->mode = mode;
  one_step(d, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(host, layer_buf(d, base, 1), n * sizeof *host, cudaMemcpyDeviceToHost));
  long long wrong = 0;
  for (size_t i = 0; i < n; i++)
    if (host[i] != decode_bf16_of(ref[i]) && wrong++ < 5)
      fprintf(stderr, "rank %d: %s: layer %zu, element %zu holds bfloat16 bits %04x, expected %d\n", rank,
              mode_names[mode], i / d->count, i % d->count, host[i], ref[i]);
  return wrong;
}

/* Aborts the job, after "WRONG" on rank 0, if any rank found a wrong value. */
static void all_checked(long long wrong, int mode, const char *when) {
  long long all = 0;
  MPI_Allreduce(&wrong, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (!all) return;
  if (rank == 0)
    fprintf(stderr, "bench_decode: WRONG results %s: %s computed %lld wrong values\n", when, mode_names[mode], all);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ---- one batch size */

static void bench_batch(cg_comm_t *comm, ncclComm_t nccl, int layers, int hidden, int batch,
                        unsigned long long layer_ns, int rounds, int iters, cudaStream_t stream, cudaEvent_t start,
                        cudaEvent_t stop) {
  decode_t d = {.layers = layers, .count = (size_t)hidden * batch, .layer_ns = layer_ns, .nccl = nccl};
  size_t values = (size_t)(layers + 1) * d.count, bytes = values * sizeof(uint16_t);
  uint16_t *host = malloc(bytes);
  int *ref = malloc((size_t)layers * d.count * sizeof *ref), *ref_local = malloc((size_t)layers * d.count * sizeof *ref);
  if (!host || !ref || !ref_local) cg_bench_fail("malloc", "out of memory");
  for (size_t j = 0; j < d.count; j++) host[j] = decode_bf16_of(decode_input(rank, j));
  CUDA_CHECK(cudaMalloc((void **)&d.x, bytes));
  CUDA_CHECK(cudaMemcpy(d.x, host, d.count * sizeof *host, cudaMemcpyHostToDevice));
  void *window = NULL;
  d.x_sym = cg_bench_window_alloc(nccl, bytes, &window);
  if (d.x_sym) CUDA_CHECK(cudaMemcpy(d.x_sym, host, d.count * sizeof *host, cudaMemcpyHostToDevice));
  cg_arena_t *arena = NULL;
  CG_CHECK(cg_nccl_arena_create(&arena, comm, bytes, NULL));
  CG_CHECK(cg_arena_alloc((void **)&d.x_arena, arena, values, CG_BFLOAT16));
  size_t cut_over = 0;
  if (cg_nccl_arena_symmetric_max(&cut_over, arena, CG_BFLOAT16) != CG_SUCCESS) cut_over = 0;
  CUDA_CHECK(cudaMemcpy(d.x_arena, host, d.count * sizeof *host, cudaMemcpyHostToDevice));

  d.compute = capture_step(&d, d.x, 1, stream);
  d.captured = capture_step(&d, d.x, 0, stream);
  if (d.x_sym) d.symmetric = capture_step(&d, d.x_sym, 0, stream);
  d.plan = compile_step(&d, d.x, comm, -1, stream); /* never watched, whatever CG_TIMEOUT says */
  d.watched = compile_step(&d, d.x, comm, 60, stream);
  d.in_arena = compile_step(&d, d.x_arena, comm, -1, stream);

  int modes[N_MODES], n_modes = 0;
  for (int m = 0; m < N_MODES; m++)
    if (m != SYMMETRIC || d.x_sym) modes[n_modes++] = m;
  reference(&d, 1, ref);
  reference(&d, 0, ref_local);
  for (int k = 0; k < n_modes; k++)
    all_checked(check_mode(&d, modes[k], modes[k] == COMPUTE ? ref_local : ref, host, stream), modes[k],
                "before timing");

  static double t[N_MODES][MAX_ROUNDS];
  double med[N_MODES] = {0};
  for (int k = 0; k < n_modes; k++) { /* warm-up */
    d.mode = modes[k];
    time_batch(&d, 2, stream, start, stop);
  }
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < n_modes; k++) {
      d.mode = modes[k];
      t[k][r] = time_batch(&d, iters, stream, start, stop);
    }
  for (int k = 0; k < n_modes; k++) med[modes[k]] = cg_bench_median(t[k], rounds);
  /* after the timed replays, every mode once more from poisoned buffers */
  for (int k = 0; k < n_modes; k++)
    all_checked(check_mode(&d, modes[k], modes[k] == COMPUTE ? ref_local : ref, host, stream), modes[k],
                "after timing");

  int oneshot_plain = cg_bench_dot_count(d.plan, "one-shot allreduce"),
      oneshot_arena = cg_bench_dot_count(d.in_arena, "one-shot allreduce");
  if (rank == 0) {
    double captured_comm = (med[CAPTURED] - med[COMPUTE]) / layers;
    printf("\nbatch %d: %d allreduces of %zu bfloat16 (%.1f KB) per step, %d steps per batch\n", batch, layers,
           d.count, (double)d.count * 2 / 1024, iters);
    printf("  the arena's bfloat16 cut-over (measured when it was made): %s up to %zu bytes, so these allreduces "
           "take the %s kernels\n", "symmetric", cut_over, d.count * 2 <= cut_over ? "symmetric" : "plain");
    /* the path the NCCL backend chose for the plans' allreduces */
    printf("  commgraph's allreduces take commgraph's one-shot kernel: %d of %d (plain buffers), %d of %d (symmetric "
           "arena); NCCL the rest\n", oneshot_plain, layers, oneshot_arena, layers);
    printf("  %-26s %12s %16s %16s\n", "mode", "us per step", "comm us/layer", "/ NCCL captured");
    for (int m = 0; m < N_MODES; m++) {
      if (m == SYMMETRIC && !d.x_sym) {
        printf("  %-26s %12s %16s %16s   (NCCL without symmetric windows: 2.27 or later)\n", mode_names[m], "n/a",
               "n/a", "n/a");
        continue;
      }
      if (m == COMPUTE) {
        printf("  %-26s %12.2f %16s %16s\n", mode_names[m], med[m] * 1e6, "-", "-");
        continue;
      }
      double comm_layer = (med[m] - med[COMPUTE]) / layers;
      printf("  %-26s %12.2f %16.2f %16.3f\n", mode_names[m], med[m] * 1e6, comm_layer * 1e6,
             captured_comm > 0 ? comm_layer / captured_comm : 0.0);
    }
    fflush(stdout);
  }

  cg_plan_destroy(d.plan);
  cg_plan_destroy(d.watched);
  cg_plan_destroy(d.in_arena);
  cg_arena_destroy(arena);
  CUDA_CHECK(cudaGraphExecDestroy(d.compute));
  CUDA_CHECK(cudaGraphExecDestroy(d.captured));
  if (d.symmetric) CUDA_CHECK(cudaGraphExecDestroy(d.symmetric));
  cg_bench_window_free(nccl, d.x_sym, window);
  CUDA_CHECK(cudaFree(d.x));
  free(host);
  free(ref);
  free(ref_local);
}

/* ---- set-up */

static void usage(const char *argv0) {
  if (rank == 0)
    fprintf(stderr,
            "usage: mpiexec -n N %s [--layers L] [--hidden H] [--batches B1,B2,...] [--layer-us U]\n"
            "                       [--rounds 1..%d] [--smoke]\n"
            "  defaults: 32 layers, hidden 4096, batches 1,8,64, 4 us per layer kernel, 9 rounds;\n"
            "  --smoke: 4 layers, hidden 512, batches 1,8, 1 round of 2 steps; exits 77 without a GPU per rank\n",
            argv0, MAX_ROUNDS);
  MPI_Finalize();
  exit(2);
}

/* "1,8,64" into batches[]; the count, or -1 when malformed. */
static int parse_batches(const char *text, int *batches) {
  int n = 0;
  const char *p = text;
  while (*p) {
    char *end = NULL;
    long b = strtol(p, &end, 10);
    if (end == p || b < 1 || b > 65536 || n == MAX_BATCHES) return -1;
    batches[n++] = (int)b;
    p = end;
    if (*p == ',') p++;
    else if (*p) return -1;
  }
  return n ? n : -1;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int layers = 0, hidden = 0, rounds = 0, smoke = 0, n_batches = 0, batches[MAX_BATCHES];
  double layer_us = -1;
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--layers") && i + 1 < argc) {
      layers = (int)strtol(argv[++i], &end, 10);
      if (*end || layers < 1 || layers > 4096) usage(argv[0]);
    } else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) {
      hidden = (int)strtol(argv[++i], &end, 10);
      if (*end || hidden < 1 || hidden > (1 << 20)) usage(argv[0]);
    } else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
      if ((n_batches = parse_batches(argv[++i], batches)) < 0) usage(argv[0]);
    } else if (!strcmp(argv[i], "--layer-us") && i + 1 < argc) {
      layer_us = strtod(argv[++i], &end);
      if (*end || layer_us < 0 || layer_us > 1e6) usage(argv[0]);
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = (int)strtol(argv[++i], &end, 10);
      if (*end || rounds < 1 || rounds > MAX_ROUNDS) usage(argv[0]);
    } else if (!strcmp(argv[i], "--smoke")) {
      smoke = 1;
    } else {
      usage(argv[0]);
    }
  }
  if (!layers) layers = smoke ? 4 : 32;
  if (!hidden) hidden = smoke ? 512 : 4096;
  if (!n_batches) {
    int defaults[] = {1, 8, 64};
    n_batches = smoke ? 2 : 3;
    memcpy(batches, defaults, sizeof defaults);
  }
  if (layer_us < 0) layer_us = 4;
  if (!rounds) rounds = smoke ? 1 : 9;

  int nodes = 0, device = cg_bench_pick_gpu("bench_decode", &nodes);
  if (device < 0) {
    int status = cg_bench_no_gpu_status("bench_decode", "not every rank has a GPU of its own", rank, smoke);
    MPI_Finalize();
    return status;
  }
  if (ranks > DECODE_MAX_RANKS) {
    if (rank == 0) fprintf(stderr, "bench_decode: FAILED: at most %d ranks (exact bfloat16 sums)\n", DECODE_MAX_RANKS);
    MPI_Finalize();
    return 1;
  }

  ncclComm_t nccl;
  cg_comm_t *comm = cg_bench_nccl_comm(device, &nccl);

  char title[200];
  snprintf(title, sizeof title, "a tensor-parallel decode step: %d layers, each a kernel of %.1f us and an in-place "
           "bfloat16 sum allreduce of hidden %d x batch", layers, layer_us, hidden);
  cg_bench_print_setup(title, device, nodes, argc, argv);
  if (rank == 0) {
    printf("  each figure: median over %d rounds of the slowest rank's cudaEvent time per batch of steps, modes "
           "interleaved; comm us/layer: (step - compute only) / layers\n",
           rounds);
    fflush(stdout);
  }

  cudaStream_t stream;
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int b = 0; b < n_batches; b++) {
    /* about 10 ms per batch of steps at 10 us per layer */
    int iters = smoke ? 2 : (int)(1000 / layers) + 1;
    if (iters < 10 && !smoke) iters = 10;
    bench_batch(comm, nccl, layers, hidden, batches[b], (unsigned long long)(layer_us * 1e3), rounds, iters, stream,
                start, stop);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaStreamDestroy(stream));
  cg_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
