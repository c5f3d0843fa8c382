/* Data-parallel training of a small MLP (mlp_model.h) on one GPU per MPI rank,
 * with the whole iteration (data, forward, backward, gradient allreduces, SGD)
 * replayed as one CUDA graph.
 *
 * The global batch of GLOBAL_BATCH samples is split evenly: rank r trains on
 * samples [r * B / n, (r + 1) * B / n) of every step. Each rank's gradients are
 * means over its own samples; averaging them over the ranks (CG_AVG) gives the
 * gradients of the mean loss over the global batch, so every rank takes the
 * same SGD step that one GPU training on the whole global batch would take.
 *
 * commgraph mode: the compute goes into the communication graph as child
 * graphs, each declaring the bytes it reads and writes:
 *
 *   [forward + loss] -> [backward, last layer]  -> allreduce dW2, db2
 *                    -> [backward, middle layer] -> allreduce dW1, db1
 *                    -> [backward, first layer]  -> allreduce dW0, db0
 *   allreduce loss;  [SGD] reads the reduced gradients, writes the parameters
 *
 * From the declared ranges commgraph finds that the allreduces of a layer's
 * gradients depend only on that layer's backward, so they may run while the
 * layers below are still going backward. The gradients (and the loss) are
 * allocated from one cg_arena in the order their allreduces are recorded, so
 * fused allreduces run directly on them, without copies. The graph is recorded
 * once and compiled three times: with one bucket (every gradient in one
 * allreduce once the backward pass is done), with a bucket per layer (the size
 * of the largest layer's gradients), whose allreduces overlap the backward of
 * the layers below, and with default options (the library's buckets: fusion
 * on, its bucket size and overlap caps; docs/tuning.md). The default plan is
 * then given to cg_plan_tune, which replays it a few times, measures when each
 * gradient is ready and what an allreduce costs, and compiles the graph again
 * with bucket boundaries chosen from those times (keeping the default buckets
 * when those are not slower): a fifth mode, "tuned". Each commgraph step is
 * then one user CUDA graph, captured once per plan:
 *
 *   cudaStreamBeginCapture; make batch; cg_plan_launch(plan); record the loss
 *   and advance the step counter; cudaStreamEndCapture -> cudaGraphInstantiate
 *
 * and replayed with one cudaGraphLaunch per step. The step counter lives in
 * device memory, so each replay trains on new data.
 *
 * eager mode: the same kernels launched one by one every step, then after the
 * whole backward pass one ncclAllReduce (ncclAvg) per gradient tensor and one
 * for the loss on the same stream, on an NCCL communicator of the program's own.
 *
 * Checks: rank 0 also trains a separate copy of the model alone on the whole
 * global batch. Every mode trains `steps` steps from the same initial
 * parameters; its loss curve must match the single-GPU one within
 * LOSS_TOLERANCE (relative) and its final parameters within PARAM_TOLERANCE
 * (see there for why those figures); the default and tuned plans must train
 * exactly like the others. Then each mode's time per step is measured, next to
 * the same kernels in one graph without communication ("compute only"). The
 * table's "exposed us" column is a mode's time per step minus compute only's:
 * the communication the mode leaves exposed. A last line compares it for the
 * default and the tuned plan.
 * Exit status: 0 when every rank's checks pass, 1 otherwise, 77 (skipped)
 * without a GPU for every rank (1 then if CG_REQUIRE_GPU=1), 2 for bad
 * arguments.
 *
 *   mpiexec -n 4 mlp_train [steps [timed_steps]]
 *
 * MLP_TRAIN_PLAN_DUMP=1 prints the four plans (cg_plan_dump) on rank 0. */
#include <commgraph.h>
#include <commgraph/cuda.h>
#include <commgraph/mpi.h>
#include <commgraph/nccl.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp_model.h"

#define GLOBAL_BATCH 512
#define LEARNING_RATE 0.05f
#define PARAM_SEED 20240601ull
#define DEFAULT_STEPS 200
#define DEFAULT_TIMED_STEPS 200
#define WARMUP_STEPS 20
#define TIMING_ROUNDS 3 /* each mode timed this often, interleaved; the median is reported */

/* The data-parallel runs add the same numbers as the single GPU in another
 * order: each rank sums its B/n samples, then NCCL sums the ranks' means, where
 * one GPU sums all B samples at once. Float32 rounding then differs by about
 * 1e-7 relative per step, and training carries the difference on: now and then
 * a hidden unit's ReLU switches for a sample in one run and not in the other.
 * A float32 simulation of this model on the CPU with these summation orders
 * (4 ranks, 200 steps) stays below 5e-6 relative on the loss and 1e-3 on the
 * parameters (per tensor, as measured below). The tolerances leave room for
 * GPU and NCCL summation orders and are still far from what real mistakes do
 * in the same simulation: gradients summed instead of averaged, or every rank
 * training on the same samples, move the loss by 1e-2 within a few steps and
 * the parameters by more than 100%; one tensor left unreduced (a bias) hardly
 * moves the loss, but puts that tensor's parameters 100% off. Over thousands
 * of steps the rounding differences keep growing, and these tolerances are
 * meant for a few hundred. */
#define LOSS_TOLERANCE 1e-3
/* Final parameters, per tensor: the distance to the single-GPU parameters,
 * relative to how far training moved those from the initial ones
 * (|p - p_ref| / |p_ref - p_0|), so the check measures the training, not the
 * size of the initial weights, and a small tensor is not hidden by large ones. */
#define PARAM_TOLERANCE 1e-2

/* The ways to run a step. The first TRAINING_MODES train and are checked;
 * COMPUTE_ONLY, the step's kernels in one graph without any communication, is
 * only timed: the time a step would take if communication cost nothing. */
enum mode {
  EAGER,
  ONE_BUCKET,
  LAYER_BUCKETS,
  DEFAULT_BUCKETS, /* default compile options: the library's buckets */
  TUNED,           /* DEFAULT_BUCKETS's plan through cg_plan_tune */
  TRAINING_MODES,
  COMPUTE_ONLY = TRAINING_MODES,
  MODES
};
static const char *const mode_names[MODES] = {"eager NCCL",
                                              "commgraph, one bucket",
                                              "commgraph, layer buckets",
                                              "commgraph, default (untuned)",
                                              "commgraph, tuned",
                                              "compute only"};
#define NAME_WIDTH 28 /* the longest of mode_names */
static const char *const mode_details[MODES] = {
    "kernels one by one; an ncclAllReduce per tensor after backward",
    "one user graph per step; one allreduce after backward",
    "one user graph per step; allreduces overlap backward",
    "one user graph per step; the library's default buckets",
    "one user graph per step; the default plan after cg_plan_tune",
    "the same kernels in one graph, no communication (a bound)",
};

static int rank, ranks;

#define CHECK(call)                                                                                          \
  do {                                                                                                       \
    cg_status_t st_ = (call);                                                                                \
    if (st_ != CG_SUCCESS) {                                                                                 \
      fprintf(stderr, "rank %d: %s failed: %s\n  %s\n", rank, #call, cg_status_string(st_), cg_error_last()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                          \
    }                                                                                                        \
  } while (0)

#define CUDA_CHECK(call)                                                                                     \
  do {                                                                                                       \
    cudaError_t err_ = (call);                                                                               \
    if (err_ != cudaSuccess) {                                                                               \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, cudaGetErrorString(err_));                    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                          \
    }                                                                                                        \
  } while (0)

#define NCCL_CHECK(call)                                                                                     \
  do {                                                                                                       \
    ncclResult_t res_ = (call);                                                                              \
    if (res_ != ncclSuccess) {                                                                               \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, ncclGetErrorString(res_));                    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                          \
    }                                                                                                        \
  } while (0)

/* NCCL_COMM_BLOCKING=0 makes every NCCL communicator non-blocking, ours too:
 * a call may then return ncclInProgress, and NCCL asks the caller to poll
 * until it has finished. A blocking communicator never needs this. */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t result) {
  while (result == ncclInProgress) {
    ncclResult_t state = ncclSuccess, asked = ncclCommGetAsyncError(comm, &state);
    if (asked != ncclSuccess) return asked;
    result = state;
  }
  return result;
}

static void *host_alloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "rank %d: out of host memory for %zu bytes\n", rank, bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return p;
}

/* ---- one GPU per rank, or skip */

/* 1 if this rank has a GPU of its own: the ranks on its node need as many
 * GPUs as there are of them (commgraph gives each its node-local rank's
 * device). Otherwise 0, with the reason in `why`. */
static int have_gpu_of_own(char *why, size_t why_size) {
  MPI_Comm node;
  int local_ranks = 0, devices = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess) {
    snprintf(why, why_size, "rank %d has no usable GPU (cudaGetDeviceCount: %s)", rank, cudaGetErrorString(err));
    return 0;
  }
  if (devices < local_ranks) {
    snprintf(why, why_size, "rank %d sees %d GPU%s for the %d ranks on its node; each rank needs its own", rank,
             devices, devices == 1 ? "" : "s", local_ranks);
    return 0;
  }
  return 1;
}

/* ---- what a replica's phases touch, for the graph's access declarations */

static cg_range_t floats(const float *p, size_t count) {
  cg_range_t r = {p, count * sizeof(float)};
  return r;
}

static size_t weight_count(int layer) { return (size_t)mlp_fan_in(layer) * (size_t)mlp_fan_out(layer); }
static size_t batch_floats(const mlp_net_t *net, int features) { return (size_t)net->batch * (size_t)features; }

/* The phases of a step that go into the graph as child graphs. */
enum phase { FORWARD, BACKWARD_FIRST, BACKWARD_MIDDLE, BACKWARD_LAST, SGD };
#define BACKWARD_OF(layer) ((enum phase)(BACKWARD_FIRST + (layer)))

static void enqueue_phase(const mlp_net_t *net, enum phase phase, cudaStream_t stream) {
  if (phase == FORWARD)
    CUDA_CHECK(mlp_forward(net, stream));
  else if (phase == SGD)
    CUDA_CHECK(mlp_sgd(net, LEARNING_RATE, stream));
  else
    CUDA_CHECK(mlp_backward(net, (int)(phase - BACKWARD_FIRST), stream));
}

/* Records `phase` as a child graph captured from the model's kernels, reading
 * and writing exactly the given ranges: commgraph orders it after the nodes
 * that write what it reads (and so on) and leaves everything else free to run
 * beside it. */
static cg_node_t record_phase(cg_graph_t *graph, const mlp_net_t *net, enum phase phase, const cg_range_t *reads,
                              size_t n_reads, const cg_range_t *writes, size_t n_writes, const char *name,
                              cudaStream_t capture_stream) {
  cudaGraph_t child = NULL;
  CUDA_CHECK(cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeThreadLocal));
  enqueue_phase(net, phase, capture_stream);
  CUDA_CHECK(cudaStreamEndCapture(capture_stream, &child));

  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = reads;
  access.n_reads = n_reads;
  access.writes = writes;
  access.n_writes = n_writes;
  cg_node_t node;
  CHECK(cg_child_graph(&node, graph, child, &access)); /* cloned: ours can go */
  CHECK(cg_node_name(graph, node, name));
  CUDA_CHECK(cudaGraphDestroy(child));
  return node;
}

static void record_allreduce(cg_graph_t *graph, cg_comm_t *comm, float *buf, size_t count, const char *name) {
  cg_node_t node;
  CHECK(cg_allreduce(&node, graph, comm, buf, buf, count, CG_FLOAT32, CG_AVG));
  CHECK(cg_node_name(graph, node, name));
}

/* One training step's graph, recorded once and compiled into every plan (and
 * compiled again by cg_plan_tune); the caller destroys it. */
static cg_graph_t *record_step_graph(const mlp_net_t *net, cg_comm_t *comm, cudaStream_t capture_stream) {
  const mlp_layout_t *lay = &net->layout;
  cg_graph_opts_t gopts = CG_GRAPH_OPTS_INIT;
  gopts.name = "mlp step";
  cg_graph_t *graph;
  CHECK(cg_graph_create(&graph, &gopts));

  {
    cg_range_t reads[] = {floats(net->inputs, batch_floats(net, MLP_INPUTS)),
                          {net->labels, (size_t)net->batch * sizeof(int)}, floats(net->params, lay->total)};
    cg_range_t writes[2 * MLP_LAYERS + 1];
    size_t n_writes = 0;
    for (int l = 0; l < MLP_LAYERS; l++) writes[n_writes++] = floats(net->act[l], batch_floats(net, mlp_fan_out(l)));
    writes[n_writes++] = floats(net->delta[MLP_LAYERS - 1], batch_floats(net, MLP_CLASSES));
    writes[n_writes++] = floats(net->loss, 1);
    record_phase(graph, net, FORWARD, reads, 3, writes, n_writes, "forward + loss", capture_stream);
  }

  /* backward, last layer first; each layer's gradients are all-reduced as soon
   * as its backward has written them */
  for (int l = MLP_LAYERS - 1; l >= 0; l--) {
    float *grad_w = net->grads + lay->weights[l], *grad_b = net->grads + lay->bias[l];
    cg_range_t reads[3], writes[3];
    size_t n_reads = 0, n_writes = 0;
    reads[n_reads++] = floats(net->delta[l], batch_floats(net, mlp_fan_out(l)));
    reads[n_reads++] = l == 0 ? floats(net->inputs, batch_floats(net, MLP_INPUTS))
                              : floats(net->act[l - 1], batch_floats(net, mlp_fan_in(l)));
    writes[n_writes++] = floats(grad_w, weight_count(l));
    writes[n_writes++] = floats(grad_b, (size_t)mlp_fan_out(l));
    if (l > 0) { /* the first layer passes no delta further down, so it needs no weights */
      reads[n_reads++] = floats(net->params + lay->weights[l], weight_count(l));
      writes[n_writes++] = floats(net->delta[l - 1], batch_floats(net, mlp_fan_in(l)));
    }
    char what[64];
    snprintf(what, sizeof what, "backward, layer %d", l);
    record_phase(graph, net, BACKWARD_OF(l), reads, n_reads, writes, n_writes, what, capture_stream);
    snprintf(what, sizeof what, "allreduce dW%d", l);
    record_allreduce(graph, comm, grad_w, weight_count(l), what);
    snprintf(what, sizeof what, "allreduce db%d", l);
    record_allreduce(graph, comm, grad_b, (size_t)mlp_fan_out(l), what);
  }
  /* the loss comes last in the arena, so it rides along in the last bucket */
  record_allreduce(graph, comm, net->loss, 1, "allreduce loss");

  {
    cg_range_t reads[] = {floats(net->grads, lay->total)};
    cg_range_t writes[] = {floats(net->params, lay->total)};
    record_phase(graph, net, SGD, reads, 1, writes, 1, "sgd", capture_stream);
  }
  return graph;
}

/* The step's graph compiled with buckets of at most bucket_bytes; 0: the
 * default options (the library's bucket size and caps). */
static cg_plan_t *compile_step_plan(cg_graph_t *graph, size_t bucket_bytes, const char *name) {
  cg_compile_opts_t copts = CG_COMPILE_OPTS_INIT;
  copts.name = name;
  copts.bucket_bytes = bucket_bytes;
  cg_plan_t *plan;
  CHECK(cg_compile(&plan, graph, &copts)); /* collective: checks every rank recorded the same allreduces */
  return plan;
}

/* The user's graph of one whole step: the batch, the plan, the bookkeeping. */
static cudaGraphExec_t capture_step_graph(const mlp_net_t *net, cg_plan_t *plan, cudaStream_t stream) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CUDA_CHECK(mlp_make_batch(net, stream));
  CHECK(cg_plan_launch(plan, stream)); /* captured: the plan becomes a child graph node */
  CUDA_CHECK(mlp_finish_step(net, stream));
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

/* The same step without communication: every rank trains alone on its own
 * samples (for timing only). */
static cudaGraphExec_t capture_compute_graph(const mlp_net_t *net, cudaStream_t stream) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CUDA_CHECK(mlp_make_batch(net, stream));
  CUDA_CHECK(mlp_forward(net, stream));
  for (int l = MLP_LAYERS - 1; l >= 0; l--) CUDA_CHECK(mlp_backward(net, l, stream));
  CUDA_CHECK(mlp_sgd(net, LEARNING_RATE, stream));
  CUDA_CHECK(mlp_finish_step(net, stream));
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

/* ---- the ways to run a step */

typedef struct trainer {
  mlp_net_t net; /* this rank's replica; its gradients and loss live in the arena */
  cudaStream_t stream;
  ncclComm_t nccl;                   /* eager mode's communicator */
  cudaGraphExec_t step_graph[MODES]; /* all but eager: one step */
} trainer_t;

static void eager_step(trainer_t *t) {
  const mlp_net_t *net = &t->net;
  const mlp_layout_t *lay = &net->layout;
  CUDA_CHECK(mlp_make_batch(net, t->stream));
  CUDA_CHECK(mlp_forward(net, t->stream));
  for (int l = MLP_LAYERS - 1; l >= 0; l--) CUDA_CHECK(mlp_backward(net, l, t->stream));
  for (int l = MLP_LAYERS - 1; l >= 0; l--) {
    float *grad_w = net->grads + lay->weights[l], *grad_b = net->grads + lay->bias[l];
    NCCL_CHECK(settle(t->nccl, ncclAllReduce(grad_w, grad_w, weight_count(l), ncclFloat, ncclAvg, t->nccl, t->stream)));
    NCCL_CHECK(settle(t->nccl, ncclAllReduce(grad_b, grad_b, (size_t)mlp_fan_out(l), ncclFloat, ncclAvg, t->nccl, t->stream)));
  }
  NCCL_CHECK(settle(t->nccl, ncclAllReduce(net->loss, net->loss, 1, ncclFloat, ncclAvg, t->nccl, t->stream)));
  CUDA_CHECK(mlp_sgd(net, LEARNING_RATE, t->stream));
  CUDA_CHECK(mlp_finish_step(net, t->stream));
}

static void step(trainer_t *t, enum mode mode) {
  if (mode == EAGER)
    eager_step(t);
  else
    CUDA_CHECK(cudaGraphLaunch(t->step_graph[mode], t->stream));
}

/* The single-GPU reference: all GLOBAL_BATCH samples on one replica, no
 * communication. */
static void single_gpu_step(const mlp_net_t *net, cudaStream_t stream) {
  CUDA_CHECK(mlp_make_batch(net, stream));
  CUDA_CHECK(mlp_forward(net, stream));
  for (int l = MLP_LAYERS - 1; l >= 0; l--) CUDA_CHECK(mlp_backward(net, l, stream));
  CUDA_CHECK(mlp_sgd(net, LEARNING_RATE, stream));
  CUDA_CHECK(mlp_finish_step(net, stream));
}

/* A finished training run, in host memory. */
typedef struct run {
  float *losses; /* per step */
  float *params; /* final */
} run_t;

static void collect(run_t *out, const mlp_net_t *net, int steps, cudaStream_t stream) {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(out->losses, net->loss_history, (size_t)steps * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(out->params, net->params, net->layout.total * sizeof(float), cudaMemcpyDeviceToHost));
}

static void train(run_t *out, trainer_t *t, enum mode mode, int steps) {
  CUDA_CHECK(mlp_reset(&t->net, PARAM_SEED, t->stream));
  for (int k = 0; k < steps; k++) step(t, mode);
  collect(out, &t->net, steps, t->stream);
}

/* Microseconds per step over `steps` steps after a warm-up, on the slowest
 * rank. The steps keep training; that changes no cost. */
static double time_steps(trainer_t *t, enum mode mode, int steps, cudaEvent_t start, cudaEvent_t stop) {
  for (int k = 0; k < WARMUP_STEPS; k++) step(t, mode);
  CUDA_CHECK(cudaStreamSynchronize(t->stream));
  MPI_Barrier(MPI_COMM_WORLD);
  CUDA_CHECK(cudaEventRecord(start, t->stream));
  for (int k = 0; k < steps; k++) step(t, mode);
  CUDA_CHECK(cudaEventRecord(stop, t->stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  double mine = ms * 1e3 / steps, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

/* ---- comparing with the single GPU */

/* The largest |loss - reference| / |reference| over the steps; infinite where
 * either is not a number. */
static double loss_difference(const float *losses, const float *reference, int steps) {
  double worst = 0;
  for (int k = 0; k < steps; k++) {
    double d = fabs((double)losses[k] - reference[k]) / fabs((double)reference[k]);
    if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
  }
  return worst;
}

/* One tensor's |p - p_ref| / |p_ref - p_0| (Euclidean norms). */
static double tensor_difference(const float *params, const float *reference, const float *initial, size_t n) {
  double off = 0, moved = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)params[i] - reference[i], m = (double)reference[i] - initial[i];
    off += d * d;
    moved += m * m;
  }
  if (off == 0) return 0; /* also where training did not move the tensor */
  double r = sqrt(off) / sqrt(moved);
  return isnan(r) ? INFINITY : r;
}

/* The largest tensor_difference over the model's tensors: measured per tensor,
 * so a small tensor (a bias) that went wrong is not hidden by the large ones. */
static double param_difference(const float *params, const float *reference, const float *initial,
                               const mlp_layout_t *lay) {
  double worst = 0;
  for (int l = 0; l < MLP_LAYERS; l++) {
    size_t w = lay->weights[l], b = lay->bias[l];
    double dw = tensor_difference(params + w, reference + w, initial + w, weight_count(l));
    double db = tensor_difference(params + b, reference + b, initial + b, (size_t)mlp_fan_out(l));
    if (!(dw <= worst)) worst = dw;
    if (!(db <= worst)) worst = db;
  }
  return worst;
}

static void print_plan(const char *what, cg_plan_t *plan) {
  cg_plan_stats_t ps;
  CHECK(cg_plan_stats(&ps, plan));
  printf("  plan, %s: %zu steps on %zu lanes, %zu bucket%s holding %zu allreduces, %zu bytes copied per step\n", what,
         ps.steps, ps.lanes, ps.buckets, ps.buckets == 1 ? "" : "s", ps.fused_nodes, ps.copy_bytes);
  const char *dump = getenv("MLP_TRAIN_PLAN_DUMP");
  if (dump && *dump && strcmp(dump, "0") != 0) CHECK(cg_plan_dump(plan, stdout));
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
  int steps = argc > 1 ? atoi(argv[1]) : DEFAULT_STEPS;
  int timed_steps = argc > 2 ? atoi(argv[2]) : DEFAULT_TIMED_STEPS;
  if (argc > 3 || steps < 1 || timed_steps < 1 || GLOBAL_BATCH % ranks != 0) {
    if (rank == 0)
      fprintf(stderr, "usage: mpiexec -n N %s [steps [timed_steps]]  (N must divide the global batch, %d)\n", argv[0],
              GLOBAL_BATCH);
    MPI_Finalize();
    return 2;
  }

  /* GPUs only if every rank has one; the lowest rank without says why */
  char why[256] = "";
  int without = have_gpu_of_own(why, sizeof why) ? ranks : rank, first_without = ranks;
  MPI_Allreduce(&without, &first_without, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_without < ranks) {
    /* under scripts/gpu-test (CG_REQUIRE_GPU=1) a skip would hide a broken
     * GPU set-up: fail instead, as the GPU suites do */
    const char *required = getenv("CG_REQUIRE_GPU");
    int must_run = required && *required && strcmp(required, "0") != 0;
    MPI_Bcast(why, sizeof why, MPI_CHAR, first_without, MPI_COMM_WORLD);
    if (rank == 0) printf("mlp_train: %s: %s\n", must_run ? "FAILED (CG_REQUIRE_GPU is set)" : "skipped", why);
    MPI_Finalize();
    return must_run ? 1 : 77;
  }

  /* the communicator, on this rank's GPU: its node-local rank's device */
  cg_comm_opts_t comm_opts = CG_COMM_OPTS_INIT;
  comm_opts.backend = CG_BACKEND_NCCL;
  comm_opts.device = CG_DEVICE_LOCAL_RANK;
  cg_comm_t *comm;
  CHECK(cg_comm_create(&comm, MPI_COMM_WORLD, &comm_opts));
  int device;
  CHECK(cg_comm_device(&device, comm));
  CUDA_CHECK(cudaSetDevice(device));

  trainer_t t;
  memset(&t, 0, sizeof t);
  CUDA_CHECK(cudaStreamCreateWithFlags(&t.stream, cudaStreamNonBlocking));
  cudaStream_t capture_stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking));

  /* gradients and loss from one arena, in the order their allreduces are
   * recorded: each layer's weights and bias, last layer first, then the loss.
   * That is the model's layout, so the pieces must land on it. */
  mlp_net_t *net = &t.net;
  mlp_layout_init(&net->layout);
  const mlp_layout_t *lay = &net->layout;
  cg_arena_opts_t arena_opts = CG_ARENA_OPTS_INIT;
  arena_opts.device = device;
  cg_arena_t *arena;
  CHECK(cg_arena_create(&arena, (lay->total + 1) * sizeof(float), &arena_opts));
  float *base = NULL;
  for (int l = MLP_LAYERS - 1; l >= 0; l--) {
    void *grad_w, *grad_b;
    CHECK(cg_arena_alloc(&grad_w, arena, weight_count(l), CG_FLOAT32));
    CHECK(cg_arena_alloc(&grad_b, arena, (size_t)mlp_fan_out(l), CG_FLOAT32));
    if (!base) base = (float *)grad_w;
    if ((float *)grad_w != base + lay->weights[l] || (float *)grad_b != base + lay->bias[l]) {
      fprintf(stderr, "rank %d: the arena did not place layer %d's gradients after the ones before\n", rank, l);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  void *loss;
  CHECK(cg_arena_alloc(&loss, arena, 1, CG_FLOAT32));
  net->grads = base;
  net->loss = (float *)loss;
  net->batch = GLOBAL_BATCH / ranks;
  net->first_sample = rank * net->batch;
  net->global_batch = GLOBAL_BATCH;
  net->history_len = steps;
  CUDA_CHECK(mlp_net_alloc(net));

  /* eager mode's own NCCL communicator: rank 0's id, broadcast over MPI */
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclResult_t init = ncclCommInitRank(&t.nccl, ranks, id, rank); /* sets t.nccl, also when in progress */
  NCCL_CHECK(settle(t.nccl, init));

  /* plans of the same graph: one bucket for every gradient; buckets the size
   * of the largest layer's gradients, which cut the allreduces at layer
   * boundaries (no two neighbouring layers fit together); the default options */
  size_t grad_bytes = lay->total * sizeof(float), largest_layer = 0;
  for (int l = 0; l < MLP_LAYERS; l++) {
    size_t bytes = (weight_count(l) + (size_t)mlp_fan_out(l)) * sizeof(float);
    if (bytes > largest_layer) largest_layer = bytes;
  }
  cg_plan_t *plan[MODES] = {NULL};
  cg_graph_t *graph = record_step_graph(net, comm, capture_stream);
  plan[ONE_BUCKET] = compile_step_plan(graph, grad_bytes + sizeof(float), "mlp step, one bucket");
  plan[LAYER_BUCKETS] = compile_step_plan(graph, largest_layer, "mlp step, layer buckets");
  plan[DEFAULT_BUCKETS] = compile_step_plan(graph, 0, "mlp step, default");

  /* and the default plan tuned: cg_plan_tune replays it (it trains: real
   * parameters and a real batch, whose labels index the logits; the modes
   * start again from mlp_reset below), then compiles the graph again with
   * default options and buckets from what it measured. Collective. */
  CUDA_CHECK(mlp_reset(net, PARAM_SEED, t.stream));
  CUDA_CHECK(mlp_make_batch(net, t.stream));
  CUDA_CHECK(cudaStreamSynchronize(t.stream));
  cg_tune_opts_t tune = CG_TUNE_OPTS_INIT;
  tune.stream = t.stream;
  tune.compile.name = "mlp step, tuned";
  CHECK(cg_plan_tune(&plan[TUNED], plan[DEFAULT_BUCKETS], graph, &tune));
  cg_graph_destroy(graph); /* the plans keep what they need */
  for (int m = ONE_BUCKET; m < TRAINING_MODES; m++) t.step_graph[m] = capture_step_graph(net, plan[m], t.stream);
  t.step_graph[COMPUTE_ONLY] = capture_compute_graph(net, t.stream);

  if (rank == 0) {
    printf("mlp_train: %d ranks, one GPU each; global batch %d (%d per rank), %d steps, SGD with learning rate %g\n",
           ranks, GLOBAL_BATCH, net->batch, steps, (double)LEARNING_RATE);
    printf("  model: %d-%d-%d-%d MLP, %zu parameters; gradients %.2f MB in %d tensors\n", MLP_INPUTS, MLP_HIDDEN,
           MLP_HIDDEN, MLP_CLASSES, lay->total, (double)grad_bytes / 1e6, 2 * MLP_LAYERS);
    print_plan("one bucket", plan[ONE_BUCKET]);
    print_plan("layer buckets", plan[LAYER_BUCKETS]);
    print_plan("default", plan[DEFAULT_BUCKETS]);
    char tuned_what[64];
    snprintf(tuned_what, sizeof tuned_what, "tuned (cg_plan_tune, %d replays)", tune.replays);
    print_plan(tuned_what, plan[TUNED]);
    fflush(stdout);
  }

  /* ---- training: the single GPU on rank 0, then every mode on every rank */
  size_t param_bytes = lay->total * sizeof(float);
  run_t reference = {(float *)host_alloc((size_t)steps * sizeof(float)), (float *)host_alloc(param_bytes)};
  float *initial = (float *)host_alloc(param_bytes);
  CUDA_CHECK(mlp_reset(net, PARAM_SEED, t.stream));
  CUDA_CHECK(cudaStreamSynchronize(t.stream));
  CUDA_CHECK(cudaMemcpy(initial, net->params, param_bytes, cudaMemcpyDeviceToHost));
  if (rank == 0) {
    mlp_net_t single;
    memset(&single, 0, sizeof single);
    single.batch = GLOBAL_BATCH;
    single.first_sample = 0;
    single.global_batch = GLOBAL_BATCH;
    single.history_len = steps;
    CUDA_CHECK(mlp_net_alloc(&single));
    CUDA_CHECK(mlp_reset(&single, PARAM_SEED, t.stream));
    for (int k = 0; k < steps; k++) single_gpu_step(&single, t.stream);
    collect(&reference, &single, steps, t.stream);
    mlp_net_free(&single);
  }
  MPI_Bcast(reference.losses, steps, MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_Bcast(reference.params, (int)lay->total, MPI_FLOAT, 0, MPI_COMM_WORLD);

  run_t runs[TRAINING_MODES];
  double loss_diff[TRAINING_MODES], param_diff[TRAINING_MODES];
  for (int m = 0; m < TRAINING_MODES; m++) {
    runs[m].losses = (float *)host_alloc((size_t)steps * sizeof(float));
    runs[m].params = (float *)host_alloc(param_bytes);
    train(&runs[m], &t, (enum mode)m, steps);
    double mine[2] = {loss_difference(runs[m].losses, reference.losses, steps),
                      param_difference(runs[m].params, reference.params, initial, lay)},
           worst[2];
    MPI_Allreduce(mine, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    loss_diff[m] = worst[0];
    param_diff[m] = worst[1];
  }

  /* the model must learn, or matching curves would prove little (the
   * simulation's loss falls 8% in 50 steps, 34% in 200) */
  int learned = steps < 50 || reference.losses[steps - 1] < 0.95f * reference.losses[0];
  int ok = learned;
  for (int m = 0; m < TRAINING_MODES; m++)
    ok = ok && loss_diff[m] <= LOSS_TOLERANCE && param_diff[m] <= PARAM_TOLERANCE;

  if (rank == 0) {
    printf("  loss      step   single GPU");
    for (int m = 0; m < TRAINING_MODES; m++) printf("  %*s", (int)strlen(mode_names[m]), mode_names[m]);
    printf("\n");
    for (int i = 0; i <= 4; i++) {
      int k = i == 4 ? steps - 1 : i * (steps - 1) / 4;
      if (i > 0 && k == (i - 1) * (steps - 1) / 4) continue;
      printf("          %4d   %10.6f", k, (double)reference.losses[k]);
      for (int m = 0; m < TRAINING_MODES; m++) printf("  %*.6f", (int)strlen(mode_names[m]), (double)runs[m].losses[k]);
      printf("\n");
    }
    printf("  largest relative loss difference to the single GPU (tolerance %.0e), and largest over the tensors\n"
           "  of the final |p - p_single| / |p_single - p_initial| (tolerance %.0e), over all ranks:\n",
           LOSS_TOLERANCE, PARAM_TOLERANCE);
    for (int m = 0; m < TRAINING_MODES; m++)
      printf("    %-*s loss %.2e   parameters %.2e%s\n", NAME_WIDTH, mode_names[m], loss_diff[m], param_diff[m],
             loss_diff[m] <= LOSS_TOLERANCE && param_diff[m] <= PARAM_TOLERANCE ? "" : "   MISMATCH");
    if (!learned)
      printf("  the single-GPU loss went from %.4f to only %.4f: the model did not learn\n",
             (double)reference.losses[0], (double)reference.losses[steps - 1]);
    fflush(stdout);
  }

  /* ---- timing: the modes take turns, so drift of the machine hits all */
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  double us[MODES][TIMING_ROUNDS];
  for (int round = 0; round < TIMING_ROUNDS; round++)
    for (int m = 0; m < MODES; m++) us[m][round] = time_steps(&t, (enum mode)m, timed_steps, start, stop);
  if (rank == 0) {
    printf("  time per step, median of %d rounds of %d steps after %d warm-up steps, slowest rank:\n",
           TIMING_ROUNDS, timed_steps, WARMUP_STEPS);
    /* exposed: a mode's time per step beyond compute only's, the
     * communication it does not hide */
    double median[MODES], exposed[MODES];
    for (int m = 0; m < MODES; m++) {
      qsort(us[m], TIMING_ROUNDS, sizeof us[m][0], compare_doubles);
      median[m] = us[m][TIMING_ROUNDS / 2];
    }
    for (int m = 0; m < MODES; m++) exposed[m] = median[m] - median[COMPUTE_ONLY];
    printf("    %-*s %10s %10s %8s   %s\n", NAME_WIDTH, "mode", "us/step", "exposed us", "vs eager", "how");
    for (int m = 0; m < MODES; m++)
      printf("    %-*s %10.1f %10.1f %8.2f   %s\n", NAME_WIDTH, mode_names[m], median[m], exposed[m],
             median[m] / median[EAGER], mode_details[m]);
    printf("  exposed communication: default %.1f us, tuned %.1f us", exposed[DEFAULT_BUCKETS], exposed[TUNED]);
    if (exposed[DEFAULT_BUCKETS] > 0)
      printf(" (%.2fx)\n", exposed[TUNED] / exposed[DEFAULT_BUCKETS]);
    else
      printf(" (no ratio: the default leaves none exposed)\n");
    printf("  result: %s\n", ok ? "OK" : "FAILED");
    fflush(stdout);
  }

  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  for (int m = 0; m < MODES; m++) {
    if (t.step_graph[m]) CUDA_CHECK(cudaGraphExecDestroy(t.step_graph[m])); /* before the plans they embed */
    cg_plan_destroy(plan[m]);
  }
  for (int m = 0; m < TRAINING_MODES; m++) {
    free(runs[m].losses);
    free(runs[m].params);
  }
  free(reference.losses);
  free(reference.params);
  free(initial);
  NCCL_CHECK(settle(t.nccl, ncclCommFinalize(t.nccl)));
  NCCL_CHECK(ncclCommDestroy(t.nccl));
  mlp_net_free(net);
  cg_arena_destroy(arena);
  cg_comm_destroy(comm);
  CUDA_CHECK(cudaStreamDestroy(capture_stream));
  CUDA_CHECK(cudaStreamDestroy(t.stream));
  MPI_Finalize();
  return ok ? 0 : 1;
}
