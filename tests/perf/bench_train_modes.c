/* bench_train's modes: where their tensors live, how each is captured or
 * compiled, launched and checked. bench_train.c says what they measure. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* getpid: a tuning file per process */

#include "bench_train.h"
#include "cgbench_workload.h"
#include "commgraph/cuda.h"
#include "gpu_bench.h"
#include "train_kernels.h"

/* ---- memory */

bt_ddp_t bt_make_ddp(const bt_ctx_t *c) {
  cgb_layout_t l = {.n = c->n, .count = (size_t *)c->count};
  return cgb_make_ddp_buckets(&l, BT_DDP_FIRST_CAP, BT_DDP_CAP);
}

bt_tensors_t bt_alloc_tensors(int n, const size_t *count, const size_t *off) {
  bt_tensors_t t = {.n = n, .count = count, .off = cgb_xcalloc((size_t)n, sizeof(size_t)), .owns = 1};
  if (off) {
    for (int i = 0; i < n; i++) {
      t.off[i] = off[i];
      if (off[i] + count[i] > t.span) t.span = off[i] + count[i];
    }
  } else {
    cgb_layout_t l = cgb_make_layout(n, count, CGB_GAPPED);
    memcpy(t.off, l.offset, (size_t)n * sizeof(size_t));
    t.span = l.span;
    cgb_free_layout(&l);
  }
  CUDA_CHECK(cudaMalloc((void **)&t.base, t.span * sizeof(float)));
  CUDA_CHECK(cudaMemset(t.base, 0, t.span * sizeof(float)));
  return t;
}

void bt_free_tensors(bt_tensors_t *t) {
  if (t->owns) CUDA_CHECK(cudaFree(t->base));
  free(t->off);
}

/* ---- CUDA graphs of the modes that are not commgraph's */

static void backward(const bt_ctx_t *c, const bt_tensors_t *g, int i, const unsigned long long *ns,
                     unsigned long long *stamps, cudaStream_t s) {
  CUDA_CHECK(train_backward_launch(g->base + g->off[i], g->count[i], i, (float)(c->rank + 1), ns ? ns[i] : 0, stamps,
                                   ns ? c->act : NULL, s));
}

/* in place, float32 sum, settled (NCCL_COMM_BLOCKING=0 may make the
 * communicator non-blocking); allowed on a capturing stream */
static void allreduce(const bt_ctx_t *c, float *buf, size_t count, cudaStream_t s) {
  NCCL_CHECK_ON(c->nccl, ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, c->nccl, s));
}

static void begin_capture(cudaStream_t s) { CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)); }

static cudaGraphExec_t end_capture(const bt_ctx_t *c, cudaStream_t s) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaGraphUpload(exec, c->s));
  return exec;
}

cudaGraphExec_t bt_capture_backward(const bt_ctx_t *c, const bt_tensors_t *g, const unsigned long long *ns,
                                    unsigned long long *stamps) {
  begin_capture(c->cs);
  for (int i = g->n - 1; i >= 0; i--) backward(c, g, i, ns, stamps, c->cs);
  return end_capture(c, c->cs);
}

cudaGraphExec_t bt_capture_allreduces(const bt_ctx_t *c, const bt_tensors_t *t) {
  begin_capture(c->cs);
  for (int k = 0; k < t->n; k++) allreduce(c, t->base + t->off[k], t->count[k], c->cs);
  return end_capture(c, c->cs);
}

/* Bucket k's tensors into its part of the flat buffer (in = 1) or back. */
static void copy_bucket(const bt_ctx_t *c, const bt_tensors_t *g, float *flat, const bt_ddp_t *d, int k, int in) {
  for (int p = d->first[k]; p < d->first[k + 1]; p++) {
    int i = c->n - 1 - p;
    float *tensor = g->base + g->off[i], *slot = flat + d->pos[i];
    CUDA_CHECK(cudaMemcpyAsync(in ? slot : tensor, in ? tensor : slot, g->count[i] * sizeof(float),
                               cudaMemcpyDeviceToDevice, c->ms));
  }
}

/* Compute stream cs (the capture's origin) runs the kernels; once a bucket's
 * last kernel is enqueued, cs records an event that the communication stream
 * ms waits for (the first wait joins ms to the capture); ms copies in, reduces
 * the bucket, copies out; at the end cs waits for ms (the join the capture
 * needs). The CUDA graph has the same shape as DDP's streams. */
cudaGraphExec_t bt_capture_ddp(const bt_ctx_t *c, const bt_tensors_t *g, float *flat, const bt_ddp_t *d,
                               const unsigned long long *ns, unsigned long long *stamps) {
  float *buckets = flat ? flat : g->base;
  begin_capture(c->cs);
  for (int k = 0; k < d->n; k++) {
    for (int p = d->first[k]; p < d->first[k + 1]; p++) backward(c, g, c->n - 1 - p, ns, stamps, c->cs);
    CUDA_CHECK(cudaEventRecord(c->events[k], c->cs));
    CUDA_CHECK(cudaStreamWaitEvent(c->ms, c->events[k], 0));
    if (flat) copy_bucket(c, g, flat, d, k, 1);
    allreduce(c, buckets + d->offset[k], d->count[k], c->ms);
    if (flat) copy_bucket(c, g, flat, d, k, 0);
  }
  CUDA_CHECK(cudaEventRecord(c->events[d->n], c->ms));
  CUDA_CHECK(cudaStreamWaitEvent(c->cs, c->events[d->n], 0));
  return end_capture(c, c->cs);
}

/* ---- DDP-style through host memory (--backend mpi-staged) */

typedef struct staged_bucket {
  float *host;
  int count;
  MPI_Comm comm;
} staged_bucket_t;

typedef struct staged_ddp {
  float *host; /* pinned, the bucket buffers' size */
  staged_bucket_t *bucket;
} staged_ddp_t;

/* A host node of the graph: the bucket's sum, in place, on the host. MPI's
 * default handler on the duplicate ends the job on an error. */
static void CUDART_CB host_allreduce(void *arg) {
  const staged_bucket_t *b = arg;
  MPI_Allreduce(MPI_IN_PLACE, b->host, b->count, MPI_FLOAT, MPI_SUM, b->comm);
}

cudaGraphExec_t bt_capture_ddp_staged(const bt_ctx_t *c, const bt_tensors_t *g, const bt_ddp_t *d,
                                      const unsigned long long *ns, unsigned long long *stamps, void **staging) {
  staged_ddp_t *h = cgb_xcalloc(1, sizeof *h);
  h->bucket = cgb_xcalloc((size_t)d->n, sizeof *h->bucket);
  CUDA_CHECK(cudaMallocHost((void **)&h->host, g->span * sizeof(float)));
  begin_capture(c->cs);
  for (int k = 0; k < d->n; k++) {
    for (int p = d->first[k]; p < d->first[k + 1]; p++) backward(c, g, c->n - 1 - p, ns, stamps, c->cs);
    CUDA_CHECK(cudaEventRecord(c->events[k], c->cs));
    CUDA_CHECK(cudaStreamWaitEvent(c->ms, c->events[k], 0));
    if (d->count[k] > (size_t)INT_MAX) cg_bench_fail("bt_capture_ddp_staged", "a bucket of more than INT_MAX floats");
    float *dev = g->base + d->offset[k], *host = h->host + d->offset[k];
    size_t bytes = d->count[k] * sizeof(float);
    h->bucket[k] = (staged_bucket_t){host, (int)d->count[k], c->ddp_mpi};
    CUDA_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, c->ms));
    CUDA_CHECK(cudaLaunchHostFunc(c->ms, host_allreduce, &h->bucket[k]));
    CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, c->ms));
  }
  CUDA_CHECK(cudaEventRecord(c->events[d->n], c->ms));
  CUDA_CHECK(cudaStreamWaitEvent(c->cs, c->events[d->n], 0));
  *staging = h;
  return end_capture(c, c->cs);
}

void bt_free_staging(void *staging) {
  staged_ddp_t *h = staging;
  if (!h) return;
  CUDA_CHECK(cudaFreeHost(h->host));
  free(h->bucket);
  free(h);
}

/* ---- commgraph */

cg_graph_t *bt_record_graph(const bt_ctx_t *c, const bt_tensors_t *g, const unsigned long long *ns,
                            unsigned long long *stamps) {
  cg_graph_t *graph = NULL;
  CG_CHECK(cg_graph_create(&graph, NULL));
  cg_range_t act = {c->act, sizeof *c->act};
  for (int i = c->n - 1; i >= 0; i--) {
    float *grad = g->base + g->off[i];
    cudaGraph_t child = NULL;
    CUDA_CHECK(cudaStreamBeginCapture(c->cap, cudaStreamCaptureModeThreadLocal));
    backward(c, g, i, ns, stamps, c->cap);
    CUDA_CHECK(cudaStreamEndCapture(c->cap, &child));
    /* writes its gradient, its stamps and the activation; reads the
     * activation, so it runs after the kernel before it */
    cg_range_t writes[] = {{grad, g->count[i] * sizeof(float)},
                           {stamps + 2 * (size_t)i * TRAIN_BLOCKS, 2 * TRAIN_BLOCKS * sizeof *stamps},
                           act};
    cg_access_t access = CG_ACCESS_INIT;
    access.everything = 0;
    access.reads = &act;
    access.n_reads = 1;
    access.writes = writes;
    access.n_writes = sizeof writes / sizeof *writes;
    cg_node_t node;
    char name[48];
    CG_CHECK(cg_child_graph(&node, graph, child, &access)); /* cloned */
    CUDA_CHECK(cudaGraphDestroy(child));
    snprintf(name, sizeof name, "backward %d", i);
    CG_CHECK(cg_node_name(graph, node, name));
    CG_CHECK(cg_allreduce(&node, graph, c->comm, grad, grad, g->count[i], CG_FLOAT32, CG_SUM));
    snprintf(name, sizeof name, "allreduce %d", i);
    CG_CHECK(cg_node_name(graph, node, name));
  }
  return graph;
}

cg_plan_t *bt_compile(cg_graph_t *graph, size_t bucket_bytes, cg_plan_stats_t *stats) {
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT; /* fusion on */
  opts.bucket_bytes = bucket_bytes;              /* 0: the library's choice */
  cg_plan_t *plan = NULL;
  CG_CHECK(cg_compile(&plan, graph, &opts));
  CG_CHECK(cg_plan_stats(stats, plan));
  return plan;
}

cg_plan_t *bt_compile_allreduces(const bt_ctx_t *c, const bt_tensors_t *t) {
  cg_graph_t *graph = NULL;
  CG_CHECK(cg_graph_create(&graph, NULL));
  for (int k = 0; k < t->n; k++)
    CG_CHECK(cg_allreduce(NULL, graph, c->comm, t->base + t->off[k], t->base + t->off[k], t->count[k], CG_FLOAT32,
                          CG_SUM));
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.fusion = 0; /* one collective each: alpha is a collective's cost */
  cg_plan_t *plan = NULL;
  CG_CHECK(cg_compile(&plan, graph, &opts));
  cg_graph_destroy(graph);
  return plan;
}

cg_plan_t *bt_compile_watched(cg_graph_t *graph, const cg_plan_t *tuned, double timeout_s, int fingerprint,
                              cg_plan_stats_t *stats) {
  /* a file per process (its pid), so no "%r" is needed; concurrent runs
   * on one host do not meet */
  char path[256];
  snprintf(path, sizeof path, "/tmp/bench_train.%ld.tuning", (long)getpid());
  CG_CHECK(cg_plan_save_tuning(tuned, path));
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.tuning_file = path;
  opts.timeout_s = timeout_s;
  opts.fingerprint = fingerprint;
  cg_plan_t *plan = NULL;
  CG_CHECK(cg_compile(&plan, graph, &opts));
  CG_CHECK(cg_plan_stats(stats, plan));
  remove(path);
  return plan;
}

cg_plan_t *bt_compile_on_nccl_kernels(const bt_ctx_t *c, const bt_tensors_t *g, const unsigned long long *ns,
                                      unsigned long long *stamps, const cg_plan_t *tuned, cg_plan_stats_t *stats) {
  /* the variables are read on a communicator's first plan with an
   * allreduce: this one's (later ones find the kernels off already) */
  cg_bench_saved_env_t saved;
  cg_bench_own_kernels_off(&saved);
  cg_graph_t *graph = bt_record_graph(c, g, ns, stamps);
  cg_plan_t *plan = bt_compile_watched(graph, tuned, -1, 1, stats);
  cg_graph_destroy(graph);
  cg_bench_restore_env(&saved);
  return plan;
}

/* ---- running and checking */

void bt_launch(const bt_ctx_t *c, const bt_bench_t *b) {
  if (b->plan)
    CG_CHECK(cg_plan_launch(b->plan, c->s));
  else
    CUDA_CHECK(cudaGraphLaunch(b->exec, c->s));
}

void bt_check(const bt_ctx_t *c, const bt_bench_t *b, const char *when) {
  const bt_tensors_t *g = b->grads;
  cudaStream_t s = c->s;
  if (b->filled) /* what a backward pass would have left, without stamps */
    for (int i = 0; i < g->n; i++)
      CUDA_CHECK(train_backward_launch(g->base + g->off[i], g->count[i], i, (float)(c->rank + 1), 0, NULL, NULL, s));
  else
    CUDA_CHECK(cudaMemsetAsync(g->base, 0xff, g->span * sizeof(float), s)); /* NaN */
  if (b->flat) CUDA_CHECK(cudaMemsetAsync(b->flat, 0xff, b->flat_span * sizeof(float), s));
  bt_launch(c, b);
  CUDA_CHECK(cudaMemsetAsync(c->wrong, 0, 3 * sizeof *c->wrong, s));
  for (int i = 0; i < g->n; i++)
    CUDA_CHECK(train_check_launch(g->base + g->off[i], g->count[i], i, b->expect, c->wrong, s));
  unsigned long long wrong[3];
  CUDA_CHECK(cudaMemcpyAsync(wrong, c->wrong, sizeof wrong, cudaMemcpyDeviceToHost, s));
  if (b->filled) CUDA_CHECK(cudaMemsetAsync(g->base, 0, g->span * sizeof(float), s)); /* timed on zeros */
  CUDA_CHECK(cudaStreamSynchronize(s));
  if (wrong[0]) {
    int tensor = (int)(wrong[1] >> 40);
    unsigned long long j = wrong[1] & ((1ULL << 40) - 1);
    unsigned int bits = (unsigned int)wrong[2];
    float got;
    memcpy(&got, &bits, sizeof got);
    fprintf(stderr, "rank %d: %s: %llu wrong values %s; one: element %llu of tensor %d is %g, expected %g\n", c->rank,
            b->label, wrong[0], when, j, tensor, (double)got, (double)(b->expect * train_value(tensor, (size_t)j)));
    fflush(stderr);
  }
  long long mine = (long long)wrong[0], all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (all) {
    if (c->rank == 0) {
      fprintf(stderr, "bench_train: WRONG results %s: %s computed %lld wrong values\n", when, b->label, all);
      printf("WRONG results %s: %s\n", when, b->label);
      fflush(stdout);
      fflush(stderr);
    }
    MPI_Barrier(MPI_COMM_WORLD); /* every rank's detail out first */
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

double bt_read_stamps(const bt_ctx_t *c, const bt_bench_t *b, double *ready) {
  size_t words = 2 * (size_t)c->n * TRAIN_BLOCKS;
  unsigned long long *h = cgb_xcalloc(words, sizeof *h), first = ~0ULL, last = 0;
  /* the caller synchronized with the stream's last launch */
  CUDA_CHECK(cudaMemcpy(h, b->stamps, words * sizeof *h, cudaMemcpyDeviceToHost));
  for (size_t w = 0; w < words; w += 2) {
    if (h[w] < first && w / (2 * TRAIN_BLOCKS) == (size_t)c->n - 1) first = h[w]; /* tensor n-1 starts */
    if (h[w + 1] > last) last = h[w + 1];
  }
  for (int p = 0; ready && p < c->n; p++) {
    unsigned long long end = 0;
    for (int k = 0; k < TRAIN_BLOCKS; k++) {
      unsigned long long e = h[2 * ((size_t)(c->n - 1 - p) * TRAIN_BLOCKS + (size_t)k) + 1];
      if (e > end) end = e;
    }
    ready[p] = (double)(long long)(end - first) * 1e-9;
  }
  free(h);
  return (double)(long long)(last - first) * 1e-9;
}
