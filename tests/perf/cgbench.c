/* cgbench: a model's gradient all-reduces per training iteration, issued the
 * ways users issue them today, side by side in one run (issue 5's benchmark):
 *
 *   mpiexec -n N build/tests/perf/cgbench WORKLOAD.txt [--iters I] [--rounds R] [--bucket-mb MB]
 *
 * WORKLOAD.txt lists one tensor per line: its number of float32 elements
 * (tests/perf/workloads/, ../shared/workloads/; blank lines and lines starting
 * with '#' are skipped). Every iteration sums every tensor over all ranks, in
 * place, on one stream and one NCCL communicator (the one under the commgraph
 * communicator, cg_comm_nccl), as:
 *
 *   1. eager NCCL: one ncclAllReduce per tensor;
 *   2. NCCL group: the same calls between ncclGroupStart and ncclGroupEnd;
 *   3. DDP-style buckets: tensors taken in reverse order (the order backward
 *      produces them) into buckets closed once they reach --bucket-mb MiB
 *      (default 25, PyTorch DDP's rule, without its small first bucket); per
 *      bucket one cudaMemcpyAsync per tensor into a flat bucket buffer, one
 *      ncclAllReduce, one cudaMemcpyAsync per tensor back;
 *   4. commgraph replay: one plan holding one allreduce node per tensor,
 *      cg_plan_launch (fusion into buckets is not built yet);
 *   5. one fused allreduce of the total element count: the floor in practice.
 *
 * Each mode's tensors live in one device allocation of its own, at 256-byte
 * aligned offsets. Each is also given as a ratio to the floor
 * 2(n-1)/n x bytes / busbw, with busbw measured in the same run (in the same
 * rotation) for one allreduce of 1 GiB or the workload's total, whichever is
 * larger. A second case runs 128 allreduces of 1 KB per iteration: eager,
 * group and one replay of a plan of 128 nodes (µs per replay and per op).
 *
 * Timing: cudaEvents around a batch of I iterations (default 20; the large
 * busbw allreduce: 3). All modes are interleaved round by round, after two
 * warm-up iterations each; each figure is the median over R rounds (default 9)
 * of the slowest rank's time per iteration. Every mode's result is checked once
 * before timing (integer-valued floats against the ranks' sum); the tensors
 * are then zeroed so repeated sums stay finite. One GPU per rank, numbered by
 * the rank's place on its node. Only rank 0 prints. Without a GPU for every
 * rank it says why and exits 0: this is a benchmark, not a test. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph.h"
#include "commgraph/cuda.h"
#include "commgraph/mpi.h"
#include "commgraph/nccl.h"
#include "gpu_bench.h"

#define MAX_ROUNDS 101
#define ALIGN_FLOATS 64 /* 256 bytes */
#define TINY_OPS 128
#define TINY_COUNT 256 /* floats: 1 KB */
#define LARGE_ITERS 3

static int rank, ranks;


static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) cg_bench_fail("calloc", "out of memory");
  return p;
}

static size_t align_up(size_t floats) { return (floats + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }


/* ---- where tensors live and how DDP buckets them */

typedef struct layout {
  int n;          /* tensors */
  size_t *count;  /* elements of each */
  size_t *offset; /* elements from the allocation's start, multiples of 64 (256 bytes) */
  size_t total;   /* sum of counts */
  size_t span;    /* elements the allocation holds */
} layout_t;

static layout_t make_layout(int n, const size_t *count) {
  layout_t l = {.n = n, .count = xcalloc((size_t)n, sizeof(size_t)), .offset = xcalloc((size_t)n, sizeof(size_t))};
  for (int i = 0; i < n; i++) {
    l.count[i] = count[i];
    l.offset[i] = l.span;
    l.span = align_up(l.span + count[i]);
    l.total += count[i];
  }
  return l;
}

static void free_layout(layout_t *l) {
  free(l->count);
  free(l->offset);
}

/* Bucket k holds the tensors n-1-p for p in [first[k], first[k+1]), packed
 * back to back from element offset[k] of the flat buffer. */
typedef struct buckets {
  int n;
  int *first;
  size_t *count, *offset;
  size_t span;
} buckets_t;

static buckets_t make_buckets(const layout_t *l, size_t cap_bytes) {
  buckets_t b = {.first = xcalloc((size_t)l->n + 1, sizeof(int)),
                 .count = xcalloc((size_t)l->n, sizeof(size_t)),
                 .offset = xcalloc((size_t)l->n, sizeof(size_t))};
  size_t elements = 0;
  for (int p = 0; p < l->n; p++) {
    elements += l->count[l->n - 1 - p];
    if (elements * sizeof(float) >= cap_bytes || p == l->n - 1) { /* close the bucket */
      b.count[b.n] = elements;
      b.offset[b.n] = b.span;
      b.span = align_up(b.span + elements);
      b.first[++b.n] = p + 1;
      elements = 0;
    }
  }
  return b;
}

static void free_buckets(buckets_t *b) {
  free(b->first);
  free(b->count);
  free(b->offset);
}

/* ---- one timed thing: a way of all-reducing the tensors of a layout */

enum { EAGER, GROUP, DDP, PLAN };

typedef struct bench {
  char label[96];
  int kind;
  const layout_t *layout;
  int iters;
  float *data;               /* the tensors: one allocation */
  float *flat;               /* DDP: the bucket buffers, one allocation */
  const buckets_t *buckets;  /* DDP */
  cg_plan_t *plan;           /* PLAN */
  ncclComm_t nccl;
  double t[MAX_ROUNDS];      /* slowest rank's seconds per iteration, per round */
  double med;
} bench_t;

static void allreduce(const bench_t *b, float *buf, size_t count, cudaStream_t s) {
  NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, b->nccl, s));
}

/* DDP: copies bucket k's tensors into its flat buffer (in = 1) or back out of
 * it (in = 0), one cudaMemcpyAsync per tensor. */
static void copy_bucket(const bench_t *b, int k, int in, cudaStream_t s) {
  const layout_t *l = b->layout;
  const buckets_t *bk = b->buckets;
  float *flat = b->flat + bk->offset[k];
  for (int p = bk->first[k]; p < bk->first[k + 1]; p++) {
    int i = l->n - 1 - p;
    float *tensor = b->data + l->offset[i];
    CUDA_CHECK(cudaMemcpyAsync(in ? flat : tensor, in ? tensor : flat, l->count[i] * sizeof(float),
                               cudaMemcpyDeviceToDevice, s));
    flat += l->count[i];
  }
}

static void one_iteration(const bench_t *b, cudaStream_t s) {
  const layout_t *l = b->layout;
  if (b->kind == PLAN) {
    CG_CHECK(cg_plan_launch(b->plan, s));
  } else if (b->kind == DDP) {
    for (int k = 0; k < b->buckets->n; k++) {
      copy_bucket(b, k, 1, s);
      allreduce(b, b->flat + b->buckets->offset[k], b->buckets->count[k], s);
      copy_bucket(b, k, 0, s);
    }
  } else {
    if (b->kind == GROUP) NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < l->n; i++) allreduce(b, b->data + l->offset[i], l->count[i], s);
    if (b->kind == GROUP) NCCL_CHECK(ncclGroupEnd());
  }
}

/* Enqueues `iters` iterations between two events and returns the slowest
 * rank's seconds per iteration. The MPI allreduce lines the ranks up for the
 * next batch. */
static double time_batch(const bench_t *b, int iters, cudaStream_t s, cudaEvent_t start, cudaEvent_t stop) {
  CUDA_CHECK(cudaEventRecord(start, s));
  for (int i = 0; i < iters; i++) one_iteration(b, s);
  CUDA_CHECK(cudaEventRecord(stop, s));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  double mine = ms * 1e-3 / iters, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

/* Runs every bench for `rounds` rounds, interleaved, after two warm-up
 * iterations of each, and sets each one's median. */
static void time_all(bench_t *b, int nb, int rounds, cudaStream_t s, cudaEvent_t start, cudaEvent_t stop) {
  for (int k = 0; k < nb; k++) time_batch(&b[k], 2, s, start, stop);
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < nb; k++) b[k].t[r] = time_batch(&b[k], b[k].iters, s, start, stop);
  for (int k = 0; k < nb; k++) b[k].med = cg_bench_median(b[k].t, rounds);
}

/* ---- setting a bench up and checking it once */

/* Element j of tensor i holds (rank + 1) * v(i, j) before the sum and
 * ranks (ranks + 1) / 2 * v(i, j) after it; padding holds 0 throughout. */
static float v(int i, size_t j) { return (float)(1 + (size_t)i % 8 + j % 8); }

static void fill(const layout_t *l, float *host, float times) {
  memset(host, 0, l->span * sizeof *host);
  for (int i = 0; i < l->n; i++)
    for (size_t j = 0; j < l->count[i]; j++) host[l->offset[i] + j] = times * v(i, j);
}

/* The number of elements of `host` (padding included) that differ from
 * fill(l, times); reports the first few. */
static long long count_wrong(const layout_t *l, const float *host, float times, const char *what) {
  long long wrong = 0;
  for (int i = 0; i <= l->n; i++) {
    size_t from = i ? l->offset[i - 1] + l->count[i - 1] : 0, to = i < l->n ? l->offset[i] : l->span;
    for (size_t e = from; e < to; e++) /* padding before tensor i (after the last one) */
      if (host[e] != 0 && wrong++ < 3)
        fprintf(stderr, "rank %d: %s: padding at %zu is %g\n", rank, what, e, (double)host[e]);
    for (size_t j = 0; i < l->n && j < l->count[i]; j++)
      if (host[l->offset[i] + j] != times * v(i, j) && wrong++ < 3)
        fprintf(stderr, "rank %d: %s: element %zu of tensor %d is %g, expected %g\n", rank, what, j, i,
                (double)host[l->offset[i] + j], (double)(times * v(i, j)));
  }
  return wrong;
}

static void set_up(bench_t *b, int kind, const char *label, const layout_t *l, const buckets_t *bk, int iters,
                   cg_comm_t *comm, ncclComm_t nccl) {
  memset(b, 0, sizeof *b);
  snprintf(b->label, sizeof b->label, "%s", label);
  b->kind = kind;
  b->layout = l;
  b->iters = iters;
  b->nccl = nccl;
  CUDA_CHECK(cudaMalloc((void **)&b->data, l->span * sizeof(float)));
  if (kind == DDP) {
    b->buckets = bk;
    CUDA_CHECK(cudaMalloc((void **)&b->flat, bk->span * sizeof(float)));
  }
  if (kind == PLAN) { /* compiling warms the communicator up on a scratch buffer, not on the tensors */
    cg_graph_t *g;
    CG_CHECK(cg_graph_create(&g, NULL));
    for (int i = 0; i < l->n; i++)
      CG_CHECK(cg_allreduce(NULL, g, comm, b->data + l->offset[i], b->data + l->offset[i], l->count[i],
                            CG_FLOAT32, CG_SUM));
    CG_CHECK(cg_compile(&b->plan, g, NULL));
    cg_graph_destroy(g);
  }
}

/* Runs one iteration on known values and compares every element (padding
 * included) on every rank; aborts if any is wrong. Then zeroes the tensors. */
static void check(const bench_t *b, float *host, cudaStream_t s) {
  const layout_t *l = b->layout;
  fill(l, host, (float)(rank + 1));
  CUDA_CHECK(cudaMemcpy(b->data, host, l->span * sizeof(float), cudaMemcpyHostToDevice));
  if (b->flat) CUDA_CHECK(cudaMemset(b->flat, 0xff, b->buckets->span * sizeof(float))); /* NaN */
  one_iteration(b, s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaMemcpy(host, b->data, l->span * sizeof(float), cudaMemcpyDeviceToHost));
  long long wrong = count_wrong(l, host, (float)ranks * (float)(ranks + 1) / 2, b->label), all = 0;
  MPI_Allreduce(&wrong, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (all) {
    if (rank == 0) fprintf(stderr, "cgbench: %s computed %lld wrong values\n", b->label, all);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  CUDA_CHECK(cudaMemset(b->data, 0, l->span * sizeof(float)));
  CUDA_CHECK(cudaDeviceSynchronize());
}

static void tear_down(bench_t *b) {
  cg_plan_destroy(b->plan);
  CUDA_CHECK(cudaFree(b->data));
  if (b->flat) CUDA_CHECK(cudaFree(b->flat));
}

/* ---- the workload file */

/* Reads the element counts on rank 0 and broadcasts them; returns the number
 * of tensors, or 0 (on every rank) when the file is missing or malformed. */
static int read_workload(const char *path, size_t **out) {
  unsigned long long *counts = NULL;
  long long n = 0;
  if (rank == 0) {
    FILE *f = fopen(path, "r");
    size_t capacity = 0;
    char line[256];
    int lineno = 0;
    if (!f) {
      fprintf(stderr, "cgbench: cannot open %s\n", path);
      n = -1;
    }
    while (f && n >= 0 && fgets(line, sizeof line, f)) {
      lineno++;
      char *p = line + strspn(line, " \t\r\n"), *end;
      if (!*p || *p == '#') continue;
      unsigned long long c = strtoull(p, &end, 10);
      if (end == p || c == 0 || end[strspn(end, " \t\r\n")]) {
        fprintf(stderr, "cgbench: %s:%d: expected a positive element count\n", path, lineno);
        n = -1;
        break;
      }
      if ((size_t)n == capacity) {
        capacity = capacity ? 2 * capacity : 256;
        counts = realloc(counts, capacity * sizeof *counts);
        if (!counts) cg_bench_fail("realloc", "out of memory");
      }
      counts[n++] = c;
    }
    if (f) fclose(f);
    if (n == 0) fprintf(stderr, "cgbench: %s lists no tensors\n", path);
  }
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  if (n <= 0) {
    free(counts);
    return 0;
  }
  if (rank != 0) counts = xcalloc((size_t)n, sizeof *counts);
  MPI_Bcast(counts, (int)n, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  *out = xcalloc((size_t)n, sizeof **out);
  for (long long i = 0; i < n; i++) (*out)[i] = (size_t)counts[i];
  free(counts);
  return (int)n;
}

/* "gpt2" for ".../workloads/gpt2.txt" */
static void workload_name(const char *path, char *name, size_t size) {
  const char *base = strrchr(path, '/');
  snprintf(name, size, "%s", base ? base + 1 : path);
  char *dot = strrchr(name, '.');
  if (dot && dot != name) *dot = '\0';
}

/* ---- set-up */


static void usage(const char *argv0) {
  if (rank == 0)
    fprintf(stderr, "usage: mpiexec -n N %s WORKLOAD.txt [--iters I] [--rounds 1..%d] [--bucket-mb MB]\n", argv0,
            MAX_ROUNDS);
  MPI_Finalize();
  exit(2);
}

static void print_header(int argc, char **argv, int device, int nodes, const char *name, const layout_t *l,
                         int iters, int rounds) {
  struct cudaDeviceProp prop;
  int version = 0;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  NCCL_CHECK(ncclGetVersion(&version));
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  printf("cgbench: gradient allreduces per training iteration\n");
  printf("  GPU: %s (rank 0 on device %d); %d rank%s on %d node%s, one GPU per rank\n", prop.name, device, ranks,
         ranks == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s");
  printf("  NCCL %d.%d.%d, NCCL_NVLS_ENABLE=%s; commgraph %s\n", version / 10000, version % 10000 / 100,
         version % 100, nvls ? nvls : "(unset)", CG_VERSION_STRING);
  printf("  workload: %s, %d tensors, %.1f MB float32 (%zu elements)\n", name, l->n,
         (double)l->total * sizeof(float) / 1e6, l->total);
  printf("  command: mpiexec -n %d", ranks);
  for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
  printf("\n  each figure: median over %d rounds of the slowest rank's cudaEvent time per iteration, %d iterations "
         "per round, all modes interleaved round by round\n",
         rounds, iters);
  fflush(stdout);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const char *path = NULL;
  int iters = 20, rounds = 9;
  double bucket_mb = 25;
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = (int)strtol(argv[++i], &end, 10);
      if (*end || iters < 1 || iters > 100000) usage(argv[0]);
    } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = (int)strtol(argv[++i], &end, 10);
      if (*end || rounds < 1 || rounds > MAX_ROUNDS) usage(argv[0]);
    } else if (!strcmp(argv[i], "--bucket-mb") && i + 1 < argc) {
      bucket_mb = strtod(argv[++i], &end);
      if (*end || !(bucket_mb > 0) || bucket_mb > 1e6) usage(argv[0]);
    } else if (argv[i][0] != '-' && !path) {
      path = argv[i];
    } else {
      usage(argv[0]);
    }
  }
  if (!path) usage(argv[0]);
  size_t *counts = NULL;
  int n = read_workload(path, &counts);
  if (!n) {
    MPI_Finalize();
    return 2;
  }
  char name[128];
  workload_name(path, name, sizeof name);

  int nodes = 0, device = cg_bench_pick_gpu("cgbench", &nodes);
  if (device < 0) {
    free(counts);
    MPI_Finalize();
    return 0;
  }

  cg_comm_t *comm;
  cg_comm_opts_t copts = CG_COMM_OPTS_INIT;
  copts.backend = CG_BACKEND_NCCL;
  copts.device = device;
  CG_CHECK(cg_comm_create(&comm, MPI_COMM_WORLD, &copts));
  ncclComm_t nccl;
  CG_CHECK(cg_comm_nccl(&nccl, comm));

  /* the workload, its total as one tensor, the busbw allreduce, the tiny ops */
  layout_t work = make_layout(n, counts);
  size_t large_count = align_up(work.total > ((size_t)1 << 28) ? work.total : (size_t)1 << 28); /* >= 1 GiB */
  size_t tiny_counts[TINY_OPS];
  for (int i = 0; i < TINY_OPS; i++) tiny_counts[i] = TINY_COUNT;
  layout_t fused = make_layout(1, &work.total), large = make_layout(1, &large_count),
           tiny = make_layout(TINY_OPS, tiny_counts);
  buckets_t buckets = make_buckets(&work, (size_t)(bucket_mb * 1024 * 1024));
  if (rank == 0) print_header(argc, argv, device, nodes, name, &work, iters, rounds);

  char ddp_label[96];
  snprintf(ddp_label, sizeof ddp_label, "DDP-style buckets (%g MB: %d buckets, copies)", bucket_mb, buckets.n);
  enum { W_EAGER, W_GROUP, W_DDP, W_PLAN, W_FUSED, LARGE, T_EAGER, T_GROUP, T_PLAN, BENCHES };
  static bench_t b[BENCHES];
  set_up(&b[W_EAGER], EAGER, "eager NCCL (one ncclAllReduce per tensor)", &work, NULL, iters, comm, nccl);
  set_up(&b[W_GROUP], GROUP, "NCCL group (all of them in one group)", &work, NULL, iters, comm, nccl);
  set_up(&b[W_DDP], DDP, ddp_label, &work, &buckets, iters, comm, nccl);
  set_up(&b[W_PLAN], PLAN, "commgraph replay (no fusion yet)", &work, NULL, iters, comm, nccl);
  set_up(&b[W_FUSED], EAGER, "one fused allreduce of the total", &fused, NULL, iters, comm, nccl);
  set_up(&b[LARGE], EAGER, "one large allreduce (busbw)", &large, NULL, LARGE_ITERS, comm, nccl);
  set_up(&b[T_EAGER], EAGER, "eager NCCL", &tiny, NULL, iters, comm, nccl);
  set_up(&b[T_GROUP], GROUP, "NCCL group", &tiny, NULL, iters, comm, nccl);
  set_up(&b[T_PLAN], PLAN, "commgraph replay (no fusion yet)", &tiny, NULL, iters, comm, nccl);

  cudaStream_t stream;
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));

  float *host = xcalloc(large.span, sizeof(float)); /* the largest layout */
  for (int k = 0; k < BENCHES; k++) check(&b[k], host, stream);
  free(host);
  if (rank == 0) {
    printf("  results checked: every mode sums every element correctly\n");
    fflush(stdout);
  }

  time_all(b, BENCHES, rounds, stream, start, stop);

  if (rank == 0) {
    /* floor = 2(n-1)/n x bytes / busbw = bytes / large bytes x large time */
    double large_bytes = (double)large.total * sizeof(float), bytes = (double)work.total * sizeof(float);
    double floor_s = b[LARGE].med * bytes / large_bytes;
    double factor = 2.0 * (ranks - 1) / ranks;
    printf("\nbusbw: one in-place float32 sum allreduce of %.1f MB (%.0f MiB): %.1f us, busbw = 2(n-1)/n x bytes "
           "/ time = %.1f GB/s\n",
           large_bytes / 1e6, large_bytes / (1 << 20), b[LARGE].med * 1e6, factor * large_bytes / b[LARGE].med / 1e9);
    printf("floor for %s: 2(n-1)/n x %.1f MB / busbw = %.1f us\n\n", name, bytes / 1e6, floor_s * 1e6);
    printf("%-48s %12s %10s\n", "mode", "us/iter", "x floor");
    for (int k = W_EAGER; k <= W_FUSED; k++)
      printf("%-48s %12.1f %10.2f\n", b[k].label, b[k].med * 1e6, b[k].med / floor_s);
    printf("\nmany tiny ops: %d in-place float32 sum allreduces of %d bytes per iteration\n", TINY_OPS,
           TINY_COUNT * (int)sizeof(float));
    printf("%-48s %12s %10s\n", "mode", "us/iter", "us/op");
    for (int k = T_EAGER; k <= T_PLAN; k++)
      printf("%-48s %12.1f %10.2f\n", b[k].label, b[k].med * 1e6, b[k].med * 1e6 / TINY_OPS);
    fflush(stdout);
  }

  for (int k = 0; k < BENCHES; k++) tear_down(&b[k]);
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaStreamDestroy(stream));
  free_buckets(&buckets);
  free_layout(&work);
  free_layout(&fused);
  free_layout(&large);
  free_layout(&tiny);
  free(counts);
  cg_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
