/* Plans: the compiled, immutable form of a graph, run many times.
 *
 * cg_compile checks the graph on every rank, puts each communicator's
 * operations in one total order that is the same on every rank, and lowers the
 * graph to a plan of steps (plain data: kind, lane, dependencies, buffers). A
 * plan over host memory runs with cg_plan_run, or with cg_plan_start followed by
 * cg_plan_test / cg_plan_wait, which progress it on the calling thread: steps
 * whose dependencies are met run concurrently (nonblocking MPI), each
 * communicator's collectives start in its total order, sends to (receives
 * from) one peer start in their order, and host functions run on the calling
 * thread when their inputs are ready.
 *
 * A plan refers to the buffers recorded in the graph (it does not copy them)
 * and keeps its communicators alive. The graph may be destroyed after
 * compiling. */
#ifndef COMMGRAPH_PLAN_H
#define COMMGRAPH_PLAN_H

#include <stdio.h>

#include "commgraph/graph.h"
#include "commgraph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_plan cg_plan_t;

typedef struct cg_compile_opts {
  size_t size;      /* sizeof(cg_compile_opts_t) */
  int check_ranks;  /* 1 (default): the cross-rank check below; 0: skip it */
  const char *name; /* plan name for DOT and error details (copied, at most 255 bytes); NULL: the graph's */
  int fusion;       /* 1 (default): fuse small collectives into buckets (see below); 0: one step per node.
                       The environment variable CG_FUSION=0 turns it off too */
  size_t bucket_bytes; /* largest bucket; 0 (default): CG_BUCKET_BYTES from the environment (bytes, or with
                          a K, M or G suffix), else the library's choice: what the communicator's backend
                          prefers for its topology, with PyTorch DDP's caps for buckets whose members wait
                          for compute (1 MiB, then 25 MiB, also above a smaller backend size), and up to
                          256 MiB for a tuned plan's (docs/fusion.md) */
  double timeout_s; /* replay watchdog: a replay that has not finished this many seconds after it started fails
                       with CG_ERR_TIMEOUT (see cg_plan_wait; a cg_plan_launch replay: one in which no step
                       completes for this long, see below); 0 (default): CG_TIMEOUT (seconds) from the
                       environment, else none; negative: none, whatever the environment says. It bounds
                       cg_compile's own waits for the other ranks too (each round: the cross-rank check,
                       the agreements): CG_ERR_TIMEOUT naming the ranks that did not come (docs/watchdog.md) */
  const char *tuning_file; /* NULL (default): none; else a file cg_plan_save_tuning wrote ("%r": this rank, its
                              rank in the graph's first communicator): buckets from its tuning, without
                              profiling (see cg_plan_save_tuning) */
  int fingerprint; /* 1 (default): every replay of a host plan also exchanges 16 bytes per communicator (the
                      number and a hash of its collectives), posted when the replay starts, before and in
                      order with its collectives; ranks that ran different sequences (a graph that differs with
                      check_ranks 0, plans started in different orders) fail the replay with CG_ERR_MISMATCH
                      instead of mixing their data silently (docs/watchdog.md#fingerprint). Device plans
                      with a timeout (NCCL, mpi-staged, hosttransfer) gather the same 16 bytes inside their
                      CUDA graph before their steps and fail with CG_ERR_MISMATCH (their communicators
                      aborted) where they differ. 0: none */
} cg_compile_opts_t;
#define CG_COMPILE_OPTS_INIT {sizeof(cg_compile_opts_t), 1, NULL, 1, 0, 0.0, NULL, 1}

/* Compiles `graph`; opts may be NULL for defaults. Collective: every rank of
 * every communicator the graph uses must call it (in the same order relative to
 * other collective commgraph calls on those communicators).
 *
 * The cross-rank check compares, per communicator, every rank's sequence of
 * collectives (kind, count, dtype, reduction, root) and matches every send with
 * the receive on its peer (count, dtype, position between collectives). On any
 * difference every rank fails with CG_ERR_MISMATCH, and cg_error_last() names
 * the communicator, the first differing operation, the node index and name on
 * each rank, and which ranks hold which version. Communicators without a
 * transport (offline) are not checked. A rank whose graph does not use a
 * communicator that other ranks' graphs use joins its check with an empty
 * sequence (it learns of it from their summaries on a communicator they share),
 * so they fail instead of waiting; a rank that shares no communicator with them,
 * or no longer holds the communicator, cannot, and they wait, for ever unless the
 * compile has a timeout (timeout_s or CG_TIMEOUT: CG_ERR_TIMEOUT naming the ranks
 * that did not come). The check is one small allgather per communicator, a second where
 * the summaries differ or point-to-point operations must be paired, and a third
 * only to name the nodes of a mismatch: once per compile, nothing per run.
 *
 * Fusion: allreduce, reduce, broadcast, allgather and reduce_scatter nodes that
 * follow each other on a communicator and share kind, data type, reduction and
 * root, and that do not depend on each other, run as one collective (a
 * bucket) of at most bucket_bytes (a member's largest buffer counts: the
 * receive buffer of an allgather, the send buffer of a reduce_scatter). A
 * bucket copies its members' buffers into a staging buffer the plan owns and
 * back (device plans: one batched kernel each way), except where they are
 * already contiguous and in record order (cg_arena_alloc places them so):
 * then the collective runs on them directly. Results are those of the
 * unfused graph. With the cross-rank check on, the ranks agree on the
 * buckets (one small allgather per communicator): a node is fused only where
 * every rank can fuse it. With the check off, ranks must record the same
 * dependencies, or their buckets may differ. cg_plan_write_dot and
 * cg_plan_dump show the buckets and why a node was not fused. */
CG_API cg_status_t cg_compile(cg_plan_t **out, cg_graph_t *graph, const cg_compile_opts_t *opts);

/* Waits for a running plan, then frees it (a device plan that was ever
 * launched with cg_plan_launch, or embedded in a user's graph: synchronizes
 * the device first). NULL is fine. */
CG_API void cg_plan_destroy(cg_plan_t *plan);

/* ---- running a plan
 *
 * Host plans are progressed by the calling thread as described above. A device
 * plan (see commgraph/cuda.h) is normally launched on a stream with
 * cg_plan_launch; these calls work for it too: start launches one replay on a
 * stream the plan owns, test queries it, wait synchronizes with it, run does
 * both. */

/* Runs the plan once and returns when it is complete. */
CG_API cg_status_t cg_plan_run(cg_plan_t *plan);
/* Starts a run and returns; CG_ERR_IN_PROGRESS if a run has not finished.
 * Under a timeout, a device plan's started replay that nobody polls (with
 * test or wait) for a while is watched by the library's monitor thread,
 * which reports it at the timeout and aborts its communicators: a thread
 * that synchronizes the device before it waits is not held for ever
 * (docs/watchdog.md). */
CG_API cg_status_t cg_plan_start(cg_plan_t *plan);
/* Progresses the run; *done = 1 once it is complete (and for a plan that is
 * not running). */
CG_API cg_status_t cg_plan_test(int *done, cg_plan_t *plan);
/* Progresses the run until it is complete; CG_SUCCESS at once when not running. */
CG_API cg_status_t cg_plan_wait(cg_plan_t *plan);

/* A failed run (CG_ERR_BACKEND, say) reports the step, its node (index and
 * name) and the rank; the plan is then no longer running. If steps of the
 * failed run are still in flight in the backend, starting it again fails with
 * CG_ERR_BACKEND: destroy it and compile again. */

/* ---- rebinding
 *
 * Points nodes of a compiled plan at other buffers without running the
 * scheduler again (no cross-rank check, fusion or ordering; nothing
 * collective): each entry gives a node of the graph the plan was compiled from
 * and its new buffers, with the meaning they had when it was recorded (send
 * and recv of a collective; a send node's buffer in `send`, a receive node's in
 * `recv`; a broadcast's or scatter's send only matters on its root, a reduce's
 * or gather's recv only on its root). A field a node does not use must be
 * NULL. The new buffers must keep the node's in-place form (send == recv
 * exactly where it was, for the in-place layouts of cg_allreduce etc.), live in
 * the same kind of memory (host, or the plan's device), and must not overlap a
 * buffer of another node unless the two overlapped when the plan was compiled
 * (the plan orders only those). Buckets are laid out again: members that are
 * no longer contiguous are copied, members that now are run in place.
 *
 * A device plan captures its steps again with the new pointers and updates
 * its instantiated graph in place (cudaGraphExecUpdate; instantiated anew
 * where CUDA cannot update it). Graphs handed out earlier by
 * cg_plan_cuda_graph, or captured into the user's graphs, keep the old
 * buffers: fetch the new graph and update the user's instances with
 * cudaGraphExecChildGraphNodeSetParams. The plan must not be running. On any
 * error nothing changes. Not thread-safe with other calls on the plan. */
typedef struct cg_rebind {
  cg_node_t node;
  const void *send;
  void *recv;
} cg_rebind_t;
CG_API cg_status_t cg_plan_rebind(cg_plan_t *plan, const cg_rebind_t *binds, size_t n);

/* ---- tuning: buckets from measured times (docs/tuning.md)
 *
 * cg_plan_tune replays `plan` a few times (one warm-up, then `replays`
 * profiled ones, on the calling thread like cg_plan_run) and measures when
 * each collective's inputs become ready (the end of the compute nodes it
 * depends on: host functions, child graphs, events) and what a collective
 * costs on each communicator (alpha + bytes / bandwidth, fitted to its
 * steps). The ranks agree on the measurements (latest ready times; the
 * cost measured by the rank that waited least for the others), and `graph`, the graph `plan` was compiled from and unchanged since,
 * is compiled again into *out with opts->compile: bucket boundaries now
 * minimize the predicted finish of each communicator's last collective, so
 * buckets whose inputs come late start without waiting for the rest, and
 * buckets that would only add fixed costs are merged. The model's boundaries
 * at five scales of its fixed cost and the default boundaries are compiled
 * and timed (`replays` runs each, interleaved; a device plan's run is three
 * replays back to back, timed over the last two, under one timeout of
 * opts->compile's), and the fastest on the slowest rank is kept; where the model's won, that plan is profiled and
 * modelled once more and the new boundaries are timed against it. The cross-rank check
 * does not run again (opts->compile.check_ranks is not used: the graph is
 * the plan's); the ranks' agreement on the measurements carries any rank's
 * failure, profiling included, to the others. opts->compile.tuning_file must
 * be NULL. `plan` stays valid; *out is a new plan, also when the plan with
 * the default boundaries won the timing (it then keeps the measurements, so
 * cg_plan_save_tuning saves them with "boundaries default"). Collective over the plan's
 * communicators, like cg_compile. A device plan's profiling replays are its
 * steps captured once more with a GPU time stamp before and after each,
 * launched on opts->stream (NULL: the plan's own stream): the warm-up waited
 * for, then one unrecorded replay and the profiled ones back to back, as a
 * training loop runs them; the plan must not be running (a cg_plan_start
 * replay: CG_ERR_IN_PROGRESS; its replays launched on streams or embedded in
 * graphs are waited for first, the device synchronized as cg_plan_rebind
 * does, and graphs that embed it must not be replayed during the call). With a timeout
 * (the plan's), every wait for the other ranks is bounded by it, the
 * profiling replays' too: a rank that never comes makes the others return
 * CG_ERR_TIMEOUT naming the step and the ranks that did not answer
 * (docs/watchdog.md#tune), the communicators aborted. */
typedef struct cg_tune_opts {
  size_t size;               /* sizeof(cg_tune_opts_t) */
  int replays;               /* profiled replays, 1 to 1000 (default 5) */
  void *stream;              /* device plans: the cudaStream_t to replay on; NULL: the plan's own */
  cg_compile_opts_t compile; /* options of the new plan */
} cg_tune_opts_t;
#define CG_TUNE_OPTS_INIT {sizeof(cg_tune_opts_t), 5, NULL, CG_COMPILE_OPTS_INIT}
CG_API cg_status_t cg_plan_tune(cg_plan_t **out, cg_plan_t *plan, cg_graph_t *graph, const cg_tune_opts_t *opts);

/* Saves the tuning `plan` was compiled with (a plan cg_plan_tune returned, or
 * one compiled with a tuning_file) to `path` as text (docs/tuning.md: a
 * versioned header, the graph's node count, each communication node's index,
 * name and ready time, each communicator's size, this rank and cost, by agreed
 * id, and whether the tuned or the default boundaries won cg_plan_tune's
 * timing), so the next run compiles with cg_compile_opts_t.tuning_file instead
 * of tuning again. Every "%r" in `path` is replaced by this rank (its rank in
 * the plan's first communicator, as for cg_plan_trace). The ranks' files hold
 * the same (agreed) tuning, so any rank's file loads on any rank: ranks that
 * share a file system may all save to one path (each writes a file beside it
 * and renames it over the path, so the file is always whole) and all load it.
 * Not collective. CG_ERR_INVALID_ARGUMENT for a plan without a tuning,
 * CG_ERR_IO when the file cannot be written (nothing is left at `path`
 * then but what was there).
 *
 * Compiling with tuning_file set loads that file instead of profiling: a file
 * that is malformed or does not match the graph (node count, a communication
 * node's index or name, the communicators' count or sizes) fails the compile
 * on every rank with CG_ERR_INVALID_ARGUMENT, naming the file, the line and
 * what differs (another rank's failure names that rank and its reason). The
 * ranks agree on the loaded tuning as cg_plan_tune's compile does, so their
 * buckets are identical even where their files differ. */
CG_API cg_status_t cg_plan_save_tuning(const cg_plan_t *plan, const char *path);

/* ---- the timeline: a profiled replay as a Chrome trace (docs/tuning.md)
 *
 * cg_plan_trace replays `plan` like cg_plan_tune does (one warm-up, then
 * `replays` profiled replays on the calling thread; a device plan's on
 * opts->stream, NULL: its own, back to back after one more), keeps every step's median start and end in
 * the plan (replacing what an earlier call measured; cg_plan_dump and
 * cg_plan_write_dot then show them) and, unless `path` is NULL, writes them
 * as a Chrome trace (JSON, {"traceEvents": [...]}; open it in
 * ui.perfetto.dev or chrome://tracing): one event per step, ts and dur in
 * µs from the replay's start, the process this rank (its rank in the plan's
 * first communicator), a thread per lane ("comm 0 (mpi, rank 1 of 4)",
 * "host", "compute 0", ...), and in each event's args its node, kind, bytes
 * and, for a bucket, its members with their bytes. Every "%r" in `path` is
 * replaced by the rank ("trace.%r.json"); a path without one is used as
 * given, so ranks that share a file system must then pass different paths.
 * Collective over the plan's communicators like any replay; the plan must not
 * be running. On failure (CG_ERR_IO when the file cannot be written) the
 * plan keeps what it measured before. */
typedef struct cg_trace_opts {
  size_t size;  /* sizeof(cg_trace_opts_t) */
  int replays;  /* profiled replays, 1 to 1000 (default 5) */
  void *stream; /* device plans: the cudaStream_t to replay on; NULL: the plan's own */
} cg_trace_opts_t;
#define CG_TRACE_OPTS_INIT {sizeof(cg_trace_opts_t), 5, NULL}
CG_API cg_status_t cg_plan_trace(cg_plan_t *plan, const char *path, const cg_trace_opts_t *opts);

/* ---- inspection */

typedef struct cg_plan_stats {
  size_t steps;
  size_t lanes;        /* one per communicator, plus one for host functions if any; device plans also count
                          the pack and unpack lanes of communicators with several buckets and the compute
                          lanes of child graphs and events */
  size_t dependencies; /* distinct (before, after) pairs between steps */
  size_t communicators;
  int device;          /* CG_DEVICE_HOST for a host plan, else the CUDA device of a device plan */
  size_t events;       /* device plans: dependencies between lanes, each an event edge in the CUDA graph */
  size_t groups;       /* device plans: group calls that issue several sends and receives together */
  size_t buckets;      /* collectives that run several fused nodes */
  size_t fused_nodes;  /* nodes in those buckets */
  size_t bucket_bytes; /* the largest bucket allowed, or the largest formed where buckets that wait for compute
                          went past a smaller backend size (0 with fusion off) */
  size_t copy_bytes;   /* bytes this rank's buckets copy per run, packing and unpacking together */
} cg_plan_stats_t;
CG_API cg_status_t cg_plan_stats(cg_plan_stats_t *out, const cg_plan_t *plan);

/* ---- the replay watchdog and the flight recorder (docs/watchdog.md)
 *
 * A plan compiled with a timeout (cg_compile_opts_t.timeout_s, or CG_TIMEOUT)
 * bounds every replay: cg_plan_wait, cg_plan_test and cg_plan_run return
 * CG_ERR_TIMEOUT once a replay has run that long; replays launched with
 * cg_plan_launch, and replays of users' CUDA graphs that embed the plan
 * (commgraph/cuda.h), are followed by a monitor thread, which reports one
 * that makes no progress for that long (the next cg_plan_launch then fails
 * with CG_ERR_TIMEOUT). cg_error_last() names
 * the plan, this rank, the replay number, the step and node it was waiting
 * for (kind, name, communicator and rank) and the last step that completed.
 * The same report goes to stderr and to the handler below, and the flight
 * recorder is dumped (CG_FLIGHT_DIR). A timed-out plan is dead: its
 * communication is still posted, so it refuses to run again; its device
 * communicators are aborted (for NCCL, ncclCommAbort of the NCCL communicator
 * the plans use; see commgraph/nccl.h) so nothing waits on them.
 * What MPI still holds cannot be taken back: after a timeout, end the job
 * (MPI_Abort) as after any failed collective. */

/* Called once per timeout with the report (valid during the call); it may
 * log, signal or end the job (MPI_Abort). For a replay the monitor
 * reports (launched, or of a graph that embeds the plan) it runs on a
 * thread of its own, started by the watchdog's monitor, and may
 * also destroy plans and communicators, the timed-out one included (then no
 * other thread may use that plan any more). Inside cg_plan_wait,
 * cg_plan_test or cg_plan_run it runs on the caller's thread, which still
 * uses that plan: destroy it after the call returns. */
typedef void (*cg_timeout_handler_t)(cg_status_t status, const char *report, void *arg);
/* Sets the process's timeout handler (NULL: none). */
CG_API cg_status_t cg_set_timeout_handler(cg_timeout_handler_t handler, void *arg);
/* The plan's replay timeout in seconds (0: none). */
CG_API cg_status_t cg_plan_timeout(double *seconds, const cg_plan_t *plan);

/* Writes this process's flight recorder: the most recent plan events (replay
 * started and finished, each collective step started and completed, with its
 * communicator's id and sequence number, node and rank), oldest first, as
 * text that `cgflight` merges across ranks to name where they diverged. */
CG_API cg_status_t cg_flight_dump(FILE *file);

/* The plan in Graphviz DOT: one cluster per lane, steps in their order, labelled
 * with what they do and the node they came from; solid edges are
 * dependencies. */
CG_API cg_status_t cg_plan_write_dot(const cg_plan_t *plan, FILE *file);
/* The plan as text, one line per step (kind, lane, position on its
 * communicator, shape, dependencies, source node; for a device plan also the
 * unit it is captured in, in capture order, several steps in one unit being
 * one group). Contains no addresses, so
 * the same plan prints the same text in every run; ranks differ only where
 * their programs do (peers, and hazard edges that depend on the rank, such as a
 * broadcast root reading its send buffer). */
CG_API cg_status_t cg_plan_dump(const cg_plan_t *plan, FILE *file);

#ifdef __cplusplus
}
#endif
#endif
