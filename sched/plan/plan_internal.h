/* The lowered plan: plain data. Steps carry what to do, on which lane, after
 * which other steps, and which node they came from; realizers (the host executor
 * here, the CUDA graph builder later) read nothing else. */
#ifndef CG_SCHED_PLAN_INTERNAL_H
#define CG_SCHED_PLAN_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "commgraph/plan.h"
#include "graph_internal.h"
#include "plan_measure.h"

typedef enum cg_step_kind {
  CG_STEP_COLLECTIVE, /* one collective, send, receive or barrier on a communicator (a bucket's too) */
  CG_STEP_HOST_FUNC,  /* a user host function */
  CG_STEP_PACK,       /* a bucket's copies into its staging buffer (none when already contiguous) */
  CG_STEP_UNPACK,     /* a bucket's copies out of it */
  CG_STEP_CUDA_NODE,  /* device plans: a user child graph, event wait or event record (op_kind says which) */
} cg_step_kind_t;

#define CG_NO_LANE UINT32_MAX
#define CG_NO_STEP UINT32_MAX

typedef struct cg_step {
  cg_step_kind_t kind;
  cg_node_kind_t op_kind; /* the node kind it runs */
  uint32_t node;          /* source node, in record order */
  uint32_t lane;
  uint32_t comm_index;    /* index into plan->comms; CG_NO_LANE for host functions */
  uint32_t comm_position; /* position in its communicator's total order */
  uint32_t group;         /* collectives before it on its communicator (p2p matching) */
  uint32_t post_after;    /* send/recv: the previous one of the same kind and peer on its communicator,
                             which must be posted first (MPI matches in posting order); CG_NO_STEP if none */
  uint32_t post_next;     /* the inverse link; CG_NO_STEP if none */
  cg_comm_t *comm;
  const void *send;
  void *recv;
  size_t count;
  cg_dtype_t dtype;
  cg_redop_t op;
  int root; /* root or peer, -1 if none */
  int tag;  /* send/recv message tag: 0 for the plan's own; a backend that cuts a step into messages uses others */
  cg_host_fn_t fn;
  void *arg;
  void *object;   /* CUDA nodes: the recorded cudaGraph_t (the graph's clone; the CUDA plan keeps its own) or cudaEvent_t */
  uint32_t *deps; /* steps that must complete first, ascending */
  uint32_t n_deps;
  uint32_t *succs; /* steps that wait for this one, ascending */
  uint32_t n_succs;
  void *backend_state; /* from the backend's host_step_prepare */
  uint32_t unit;       /* its issue unit (see cg_issue_unit_t) */
  uint32_t bucket;     /* index into plan->buckets for a bucket's steps; CG_NO_STEP otherwise */
} cg_step_t;

/* One copy of a bucket's pack or unpack. */
typedef struct cg_copy_segment {
  const void *src;
  void *dst;
  size_t bytes;
} cg_copy_segment_t;

/* Several nodes fused into one collective (bucket.c). The collective step's
 * send, recv and count are the fused buffers: members' memory where it is
 * already laid out as the fused buffer needs, a part of the plan's staging
 * memory otherwise. */
typedef struct cg_bucket {
  uint32_t *members; /* node indices, in the communicator's order */
  uint32_t n_members;
  uint32_t pack_step, collective_step, unpack_step;
  size_t bytes;               /* what it counts against the bucket size */
  int send_direct, recv_direct; /* the collective reads (writes) the members' buffers themselves */
  cg_copy_segment_t *pack, *unpack;
  uint32_t n_pack, n_unpack;
  size_t staging_offset, staging_bytes; /* its part of plan->staging */
  void *device_pack, *device_unpack;    /* device plans: the copies as a kernel's chunk table */
  uint32_t n_pack_chunks, n_unpack_chunks;
} cg_bucket_t;

/* What a lane is: a communicator's collectives, its buckets' copies, host
 * functions, or user CUDA work (child graphs, events). */
typedef enum cg_lane_kind { CG_LANE_COMM, CG_LANE_HOST, CG_LANE_PACK, CG_LANE_UNPACK, CG_LANE_COMPUTE } cg_lane_kind_t;
/* Compute lanes at most: independent child graphs beyond this share lanes
 * (a lane is a stream during capture; more of them only removes false
 * ordering between user nodes, and CUDA runs a graph's branches as far as the
 * GPU allows anyway). */
#define CG_MAX_COMPUTE_LANES 8
typedef struct cg_lane {
  cg_lane_kind_t kind;
  uint32_t comm_index; /* CG_NO_LANE for host functions */
} cg_lane_t;

/* Issue units: the order in which a realizer enqueues steps. A unit is one
 * step, or several sends and receives of one communicator (between the same
 * two collectives) issued together as one group, so that exchanges which must
 * progress concurrently do (NCCL's ncclGroupStart/End). Units are in a
 * topological order; a unit's members do not depend on each other. */
typedef struct cg_issue_unit {
  uint32_t first; /* index into plan->issue_order */
  uint32_t n;
  uint32_t lane;
} cg_issue_unit_t;

typedef struct cg_plan_comm {
  cg_comm_t *comm; /* retained */
  uint32_t *steps; /* its steps in total order */
  uint32_t n_steps;
  uint64_t compile_index; /* plans compiled on the communicator before this one: the same on every rank, since
                             compiles on a communicator come in the same order (the replay's fingerprint) */
} cg_plan_comm_t;

/* What the plan remembers of each recorded node, for cg_plan_rebind: its
 * buffers now, and the bytes it reads and writes (a collective's from its
 * layout; a user node's as declared; none for a fence, which is ordered
 * against everything). */
typedef struct cg_plan_node {
  cg_node_kind_t kind;
  cg_comm_t *comm; /* not retained: the plan's communicators are */
  const void *send;
  void *recv;
  size_t count;
  cg_dtype_t dtype;
  int root;
  int is_fence;
  uint32_t step;   /* its step, or its bucket's collective step */
  cg_span_t *spans; /* reads, then writes (user nodes; collectives compute theirs) */
  uint32_t n_reads, n_writes;
} cg_plan_node_t;

typedef struct cg_host_run cg_host_run_t;

struct cg_plan {
  char *name;
  uint64_t graph_serial;
  cg_step_t *steps; /* in execution-compatible order: every dependency comes first */
  uint32_t n_steps;
  uint32_t n_lanes;
  size_t n_deps;
  cg_plan_comm_t *comms; /* by first use in record order */
  uint32_t n_comms;
  char **node_names; /* per node, copied from the graph (NULL when unnamed) */
  cg_plan_node_t *nodes; /* per node */
  uint32_t n_names;   /* nodes */
  uint8_t *fuse_why;  /* per node: cg_fuse_why_t (fusion.h) */
  cg_bucket_t *buckets;
  uint32_t n_buckets;
  size_t bucket_bytes; /* the largest bucket allowed on any communicator; 0: fusion off */
  void *staging;       /* every bucket's staging memory: host memory, or device memory of a device plan */
  size_t staging_bytes;
  cg_lane_t *lanes;    /* n_lanes */
  uint32_t *dep_storage;       /* every step's deps and succs */
  uint32_t *comm_step_storage; /* every communicator's steps */
  uint32_t *issue_order; /* every step once, unit by unit */
  cg_issue_unit_t *units;
  uint32_t n_units;
  int device; /* CG_DEVICE_HOST, or the CUDA device of a device plan */
  const struct cg_executor *exec; /* how it runs (executor.h): chosen by cg_compile */
  cg_host_run_t *run; /* the host executor's state, NULL until first started */
  double timeout_s;   /* replay watchdog (watchdog.h); 0: none */
  int fingerprint;    /* host plans: each replay checks the ranks' collective sequences (host_exec.c) */
  uint64_t replays;   /* replays started (run, start, launch), for reports and the flight recorder */
  atomic_int timed_out; /* a replay timed out (set by the watchdog's monitor thread too): its communication
                           may still be posted, so no more replays */
  struct cg_cuda_plan *cuda; /* device plans: the CUDA graph and its streams */
  cg_tuning_t *tuning;    /* the agreed tuning it was compiled with (cg_plan_tune); NULL: none */
  cg_profile_t *measured; /* its own latest profiling replays (cg_plan_tune, cg_plan_trace); NULL: none */
  /* what cg_plan_tune timed before it kept this plan: per round, each
   * candidate and its slowest rank's median replay (cg_plan_dump shows it,
   * so a run can tell why it got these buckets); NULL: none */
  char *tune_log;
};

/* The plan's communicators by agreed id, the same order on every rank. */
void cg_plan_comms_by_id(uint32_t *order, const cg_plan_t *plan);

/* Whether CUDA nodes run on `lane`: a compute lane's, or a communicator's
 * lane that carries those chained between its collectives (lower.c). DOT and
 * the trace name such a communicator lane so. */
int cg_plan_lane_runs_cuda_nodes(const cg_plan_t *plan, uint32_t lane);

/* Frees everything cg_compile allocated for the plan (plan.c): the
 * executor's state first, through plan->exec; NULL-safe. */
void cg_plan_free(cg_plan_t *p);
/* Frees plan->nodes (cg_plan_lower fills them). */
void cg_plan_free_nodes(cg_plan_t *p);
/* Frees the buckets, their segments and the staging memory. */
void cg_plan_free_buckets(cg_plan_t *p);
/* Frees what cg_plan_layout_buckets made for `n` buckets (copy segments,
 * device chunk tables) and the staging memory, not the buckets themselves. */
void cg_bucket_layouts_free(cg_bucket_t *buckets, uint32_t n, void *staging, int device);

/* Error detail prefix for a step: "plan 'p' step 4 (node #3 'grad.1', allreduce
 * on rank 1 of 4)". */
void cg_step_describe(char *buf, size_t size, const cg_plan_t *plan, uint32_t step);

#endif
