/* bench_train's parts: where the tensors live, PyTorch DDP's buckets, the
 * timed things (benches) and how each is built, launched and checked
 * (bench_train_modes.c). bench_train.c says what the benchmark measures. */
#ifndef BENCH_TRAIN_H
#define BENCH_TRAIN_H

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stddef.h>

#include "cgbench_workload.h"
#include "commgraph.h"

#define BT_MAX_ROUNDS 101
#define BT_MAX_LIST 8                      /* --backward-ms and --bucket-mb values */
#define BT_ALPHA_OPS 16                    /* allreduces per iteration of the alpha measurement */
#define BT_ALPHA_COUNT 1024                /* floats: 4 KB each */
#define BT_DDP_FIRST_CAP ((size_t)1 << 20) /* PyTorch DDP: the first bucket closes at >= 1 MiB */
#define BT_DDP_CAP ((size_t)25 << 20)      /* later ones at >= 25 MiB (bucket_cap_mb) */

/* Where each of n float32 tensors lives: tensor i at base + off[i]. */
typedef struct bt_tensors {
  int n;
  const size_t *count;
  float *base;  /* start of the memory to poison: base[0 .. span) */
  size_t span;
  size_t *off;
  int owns; /* base is a cudaMalloc of bt_alloc_tensors (else an arena's) */
} bt_tensors_t;

/* PyTorch DDP's buckets (cgbench_workload.h), first at 1 MiB, then 25 MiB. */
typedef cgb_buckets_t bt_ddp_t;

typedef enum bt_kind {
  BT_BACKWARD, /* mode 1: the backward kernels alone */
  BT_ALLREDUCES, /* mode 2 and the alpha and busbw measurements: allreduces of a bt_tensors_t, one stream */
  BT_DDP_COPY, /* mode 3 */
  BT_DDP_ZERO, /* mode 4 */
  BT_DDP_STAGED, /* mode 3s (--backend mpi-staged) */
  BT_PLAN      /* modes 5 and 6 */
} bt_kind_t;

typedef struct bt_bench {
  char label[96];
  bt_kind_t kind;
  int b;                      /* index of its backward time; -1: none */
  cudaGraphExec_t exec;       /* all but BT_PLAN */
  cg_plan_t *plan;            /* BT_PLAN */
  cg_plan_stats_t stats;      /* BT_PLAN */
  const bt_tensors_t *grads;  /* what is checked */
  float *flat;                /* DDP with copies: its bucket buffer, poisoned too */
  void *staging;              /* BT_DDP_STAGED: its host nodes' arguments and pinned memory (bt_free_staging) */
  size_t flat_span;
  int filled;                 /* no backward kernels: filled before a check, zeroed after it */
  float expect;               /* the scale of train_value the check expects */
  unsigned long long *stamps; /* device: the kernels' stamps; NULL without kernels */
  int iters;
  double t[BT_MAX_ROUNDS];    /* slowest rank's seconds per iteration */
  double span[BT_MAX_ROUNDS]; /* slowest rank's backward span (last end - first start), seconds */
  double med, span_med;
} bt_bench_t;

/* What every part shares. */
typedef struct bt_ctx {
  int rank, ranks;
  int n;               /* tensors */
  const size_t *count; /* their float32 element counts */
  ncclComm_t nccl;     /* the DDP modes' and the measurements' communicator */
  cg_comm_t *comm;     /* the commgraph modes' */
  cudaStream_t s;      /* every launch, timed or not */
  cudaStream_t cs, ms; /* DDP captures: compute and communication streams */
  cudaStream_t cap;    /* captures of the child graphs */
  cudaEvent_t *events; /* for the DDP captures: n + 2 */
  MPI_Comm ddp_mpi;    /* BT_DDP_STAGED's MPI_Allreduce (a duplicate of MPI_COMM_WORLD); MPI_COMM_NULL: none */
  unsigned int *act;   /* the activation word */
  unsigned long long *wrong; /* the check's counters (device, 3 words) */
} bt_ctx_t;

/* bench_train_modes.c */
bt_ddp_t bt_make_ddp(const bt_ctx_t *c);
/* count[0 .. n) in one cudaMalloc: at off (NULL: gapped, tensor 0 first, 256-byte
 * aligned with 256 bytes between tensors) */
bt_tensors_t bt_alloc_tensors(int n, const size_t *count, const size_t *off);
void bt_free_tensors(bt_tensors_t *t);

cudaGraphExec_t bt_capture_backward(const bt_ctx_t *c, const bt_tensors_t *g, const unsigned long long *ns,
                                    unsigned long long *stamps);
cudaGraphExec_t bt_capture_allreduces(const bt_ctx_t *c, const bt_tensors_t *t);
/* flat NULL: zero-copy (g's tensors lie in the bucket buffers, g->base is the flat buffer) */
cudaGraphExec_t bt_capture_ddp(const bt_ctx_t *c, const bt_tensors_t *g, float *flat, const bt_ddp_t *d,
                               const unsigned long long *ns, unsigned long long *stamps);
/* Mode 3s: DDP's buckets over MPI through host memory, as DDP on a host
 * transport stages them: g's tensors in the bucket buffers (as zero-copy);
 * once a bucket's last kernel ran, the communication stream copies the
 * bucket into pinned host memory, a host node sums it in place with a
 * blocking MPI_Allreduce over c->ddp_mpi, and the stream copies it back;
 * captured in one CUDA graph. (commgraph's mpi-staged backend only posts
 * nonblocking calls from its host nodes.) A host node may make no CUDA
 * call, so an MPI that queries CUDA about host buffers is not for it. *staging: what the
 * graph's host nodes use, for bt_free_staging after the graph is gone. */
cudaGraphExec_t bt_capture_ddp_staged(const bt_ctx_t *c, const bt_tensors_t *g, const bt_ddp_t *d,
                                      const unsigned long long *ns, unsigned long long *stamps, void **staging);
void bt_free_staging(void *staging);
/* One commgraph graph per iteration: per tensor (n-1 first) a child graph of its
 * backward kernel, then an in-place allreduce of its gradient. */
cg_graph_t *bt_record_graph(const bt_ctx_t *c, const bt_tensors_t *g, const unsigned long long *ns,
                            unsigned long long *stamps);
cg_plan_t *bt_compile(cg_graph_t *graph, size_t bucket_bytes, cg_plan_stats_t *stats);
/* t's tensors as in-place float32 sum allreduces on c->comm, fusion off: the
 * measurements' (alpha and busbw) on the commgraph communicator's transport
 * (--backend mpi-staged) */
cg_plan_t *bt_compile_allreduces(const bt_ctx_t *c, const bt_tensors_t *t);
/* `graph` compiled with `tuned`'s tuning (through a tuning file) and a
 * replay timeout of `timeout_s` (negative: none, whatever CG_TIMEOUT says). */
cg_plan_t *bt_compile_watched(cg_graph_t *graph, const cg_plan_t *tuned, double timeout_s, int fingerprint,
                              cg_plan_stats_t *stats);
/* mode 5n: the graph recorded again on c's communicator (one whose first plan
 * this is) and compiled with `tuned`'s buckets, with commgraph's own
 * allreduce kernels off on it (CG_ONESHOT_MAX_BYTES and CG_TWOSHOT_MAX_BYTES
 * 0 while it compiles) */
cg_plan_t *bt_compile_on_nccl_kernels(const bt_ctx_t *c, const bt_tensors_t *g, const unsigned long long *ns,
                                      unsigned long long *stamps, const cg_plan_t *tuned, cg_plan_stats_t *stats);
#define BT_WATCH_TIMEOUT_S 60.0

void bt_launch(const bt_ctx_t *c, const bt_bench_t *b);
/* One iteration on known values, every gradient compared on the device, on
 * every rank; prints WRONG and aborts the job on a difference. */
void bt_check(const bt_ctx_t *c, const bt_bench_t *b, const char *when);
/* The backward span of the iteration that ran last and, when ready is not NULL,
 * each gradient's end relative to the first kernel's start, in backward order
 * (ready[p] for tensor n-1-p), seconds, on this rank. */
double bt_read_stamps(const bt_ctx_t *c, const bt_bench_t *b, double *ready);

#endif
