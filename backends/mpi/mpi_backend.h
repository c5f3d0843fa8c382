/* The MPI backend's private state: two duplicates of the user's MPI_Comm (one
 * for plan steps, one for control traffic such as the cross-rank check, so a
 * compile never interleaves with a running plan's collectives) and the MPI
 * datatype and reduction operations MPI lacks or gets wrong (float16,
 * bfloat16, unsigned min/max). */
#ifndef CG_BACKENDS_MPI_BACKEND_H
#define CG_BACKENDS_MPI_BACKEND_H

#include <stdatomic.h>
#include <stddef.h>
#include <threads.h>
#include <mpi.h>

#include "backend.h"
#include "mpi_check.h" /* cg_mpi_fail, cg_fail_mpi: MPI errors as CG_ERR_BACKEND */

/* The receives started on a communicator and not yet matched, one queue per
 * (peer, tag) in the order they started (mpi_steps.c). */
struct cg_mpi_step;
typedef struct cg_mpi_recv_queue {
  int peer, tag;
  struct cg_mpi_step *head, *tail;
} cg_mpi_recv_queue_t;

typedef struct cg_mpi_comm {
  MPI_Comm data;    /* plan steps */
  MPI_Comm control; /* cross-rank check and other library traffic */
  int thread_level; /* what MPI provides */
  MPI_Datatype half; /* two opaque bytes: float16 and bfloat16 elements */
  MPI_Op own_ops[CG_DTYPE_COUNT][4]; /* [dtype][sum, prod, min, max]; MPI_OP_NULL: MPI's own */
  int one_node; /* every rank shares one node (MPI_COMM_TYPE_SHARED); the same on every rank */
  /* a timed-out replay aborted it (device backends, ht_engine.h): its ops
   * finish without MPI from then on, and what MPI may still write is leaked */
  atomic_int aborted;
  /* receives match through MPI_Improbe in their queue's order, as posted
   * receives would (mpi_steps.c); the lock guards the queues and the match */
  mtx_t recv_lock;
  int recv_lock_ready;
  cg_mpi_recv_queue_t *recv_queues;
  size_t n_recv_queues, recv_queues_cap;
  /* not empty once a control round timed out (mpi_control.c): why; every
   * later round fails with it */
  char abandoned[768];
  /* agreed by the ranks when the duplicates are made, unique in the job:
   * roll calls carry it, so one meant for a freed communicator whose MPI
   * context was reused is dropped (mpi_control.c) */
  uint64_t roll_id;
} cg_mpi_comm_t;

extern const cg_backend_t cg_mpi_backend;

/* Every kind MPI runs. */
#define CG_ALL_COMM_KINDS                                                                                 \
  ((1u << CG_NODE_ALLREDUCE) | (1u << CG_NODE_BROADCAST) | (1u << CG_NODE_REDUCE) |                       \
   (1u << CG_NODE_ALLGATHER) | (1u << CG_NODE_REDUCE_SCATTER) | (1u << CG_NODE_ALLTOALL) |                \
   (1u << CG_NODE_GATHER) | (1u << CG_NODE_SCATTER) | (1u << CG_NODE_SEND) | (1u << CG_NODE_RECV) |       \
   (1u << CG_NODE_BARRIER))

/* Duplicates `mpi` twice (data, control) with MPI_ERRORS_RETURN and creates
 * the own types; cg_mpi_comm_close frees them (NULL is fine). Other MPI-based
 * backends keep one of these for their control traffic. The duplicates wait
 * for the other ranks at most timeout_s each (mpi_setup.c; 0: for ever): a
 * rank that comes after the others gave up reports there. */
cg_status_t cg_mpi_comm_open(cg_mpi_comm_t **out, MPI_Comm mpi, int thread_level, double timeout_s);
void cg_mpi_comm_close(void *impl);
/* The id all ranks of `comm` agree on (collective); see mpi_comm.c. */
cg_status_t cg_mpi_agree_on_id(uint64_t *out, MPI_Comm comm);
/* A communicator of the MPI backend; opts already checked. */
cg_status_t cg_mpi_comm_create(cg_comm_t **out, MPI_Comm mpi, const cg_comm_opts_t *opts, int thread_level,
                               double timeout_s);
/* The MPI part of an MPI-backend communicator; NULL for other backends. */
const cg_mpi_comm_t *cg_mpi_comm_of(const cg_comm_t *comm);
const char *cg_mpi_thread_level_name(int level);

/* The control channel on a cg_mpi_comm_t (backend table entries; see
 * backend.h and mpi_control.c). */
cg_status_t cg_mpi_control_allgather_start(void **request, void *comm_impl, const void *mine, void *all,
                                           size_t bytes);
cg_status_t cg_mpi_control_test(int *done, void *comm_impl, void *request);
cg_status_t cg_mpi_replay_allgather_start(void **request, void *comm_impl, const void *mine, void *all,
                                          size_t bytes);
void cg_mpi_control_answer(void *comm_impl, const char *waiting_in);
void cg_mpi_control_roll_call(char *report, size_t size, void *comm_impl, const char *waiting_in, double timeout_s);
/* 1 when the control channel may be used from a second thread of the
 * library's (the backend table's control_any_thread): MPI gives
 * MPI_THREAD_MULTIPLE and is not finalized. */
int cg_mpi_control_any_thread(void *comm_impl);
/* The gate of the library's MPI calls from a second thread against
 * MPI_Finalize (mpi_finalize_gate.c): enter gives 0 once
 * cg_mpi_before_finalize closed it (make no MPI call then), 1 otherwise, to
 * be paired with a leave after the calls. */
int cg_mpi_gate_enter(void);
void cg_mpi_gate_leave(void);
int cg_mpi_gate_closed(void);
void cg_mpi_control_abandon(void *comm_impl, void *request, const char *why);
/* A whole allgather on m's control channel, `bytes` from each rank into
 * `all` (size * bytes), that polls and gives up when `wait` says so (wait.h;
 * NULL: never): then the round is abandoned as above and CG_ERR_TIMEOUT
 * returned, naming `what`. For a backend's collective set-up (a warm-up)
 * whose peers may have stopped. */
cg_status_t cg_mpi_control_allgather_within(cg_mpi_comm_t *m, const void *mine, void *all, size_t bytes,
                                            const cg_wait_t *wait, const char *what);


/* Keeps `block` (malloc'd) for good: the buffers of a collective that stays
 * posted, which MPI may still write (mpi_control.c). */
void cg_mpi_keep_posted(void *block);

/* The roll call on any MPI communicator (mpi_control.c): answering the
 * roll calls of ranks whose wait timed out, saying what this rank waits in;
 * calling one after a wait of timeout_s (a sentence naming the ranks that did
 * not answer within a short grace time, and what the others wait in). */
void cg_mpi_answer_roll_calls(MPI_Comm comm, const char *waiting_in);
/* what an answer carries of waiting_in (longer is cut) */
#define CG_WAITING_IN_BYTES 192
void cg_mpi_roll_call(char *report, size_t size, MPI_Comm comm, const char *waiting_in, double timeout_s);

/* A communicator's creation waiting for the other ranks (mpi_setup.c), on
 * the application's communicator, `where` the caller ("cg_comm_create") and
 * `stage` what the ranks agree on. With timeout_s > 0 each wait is a
 * nonblocking collective polled until it completes or timeout_s passed, the
 * others' roll calls answered meanwhile; then CG_ERR_TIMEOUT naming the
 * ranks that did not come (a roll call), also on stderr, and the collective
 * stays posted (its buffers the library's, kept). Otherwise MPI's blocking
 * collective (the arrival: nothing).
 *
 * The arrival: a barrier; cg_mpi_setup_barrier, one at another stage. */
cg_status_t cg_mpi_arrive(MPI_Comm comm, double timeout_s, const char *where);
cg_status_t cg_mpi_setup_barrier(MPI_Comm comm, double timeout_s, const char *where, const char *stage);
/* The element-wise minimum of `mine` (count of type) over the ranks. */
cg_status_t cg_mpi_setup_min(void *least, const void *mine, int count, MPI_Datatype type, MPI_Comm comm,
                             double timeout_s, const char *where, const char *stage);
/* Whether every rank's ok is nonzero: *all_ok 0 on any failure. */
cg_status_t cg_mpi_setup_all_ok(int *all_ok, int ok, MPI_Comm comm, double timeout_s, const char *where,
                                const char *stage);
/* A duplicate of `comm` into *out (MPI_COMM_NULL on failure). */
cg_status_t cg_mpi_setup_dup(MPI_Comm *out, MPI_Comm comm, double timeout_s, const char *where, const char *stage);
/* root's `bytes` bytes into every rank's buffer. */
cg_status_t cg_mpi_setup_bcast(void *buffer, int bytes, int root, MPI_Comm comm, double timeout_s,
                               const char *where, const char *stage);
/* The report of a set-up wait on `comm` (waiting_in: "where (stage)") that
 * lasted timeout_s with other ranks missing: a roll call, and `left`, what
 * stays behind ("The MPI_Ibarrier stays posted ..."). Also on stderr. For a
 * wait that is not an MPI collective (NCCL's init). */
cg_status_t cg_mpi_setup_timeout(MPI_Comm comm, double timeout_s, const char *waiting_in, const char *left);

/* The bucket size the MPI backend prefers (fusion): small on one node, where
 * MPI moves data through shared memory at copy speed and a bucket mostly
 * saves call overhead; DDP's 25 MB across nodes. */
#define CG_MPI_BUCKET_BYTES_NODE ((size_t)4 << 20)
#define CG_MPI_BUCKET_BYTES_NETWORK ((size_t)25 << 20)

/* Creates the datatype and operations; frees them. */
cg_status_t cg_mpi_types_create(cg_mpi_comm_t *m);
void cg_mpi_types_free(cg_mpi_comm_t *m);

/* The MPI datatype of a commgraph element type. */
MPI_Datatype cg_mpi_datatype(const cg_mpi_comm_t *m, cg_dtype_t dtype);
/* The MPI operation reducing `dtype` with `op` (CG_AVG reduces as a sum; the
 * division is the caller's). */
MPI_Op cg_mpi_op(const cg_mpi_comm_t *m, cg_dtype_t dtype, cg_redop_t op);

/* Whether cg_mpi_op gives one of commgraph's own operations, which MPI runs
 * as a host function (it cannot read device memory). */
int cg_mpi_op_is_own(const cg_mpi_comm_t *m, cg_dtype_t dtype, cg_redop_t op);
/* An average's result, which is divided after MPI sums it: where this rank
 * receives one, else NULL. */
void *cg_mpi_average_target(const cg_step_t *s);

/* Step execution (mpi_steps.c), referenced by the backend table. */
cg_status_t cg_mpi_step_prepare(void **state, void *comm_impl, const cg_step_t *step);
void cg_mpi_step_release(void *comm_impl, void *state);
/* The backend's step_rebind. */
cg_status_t cg_mpi_step_rebind(void *comm_impl, void *state, const cg_step_t *step);
cg_status_t cg_mpi_step_start(void *comm_impl, const cg_step_t *step, void *state);
cg_status_t cg_mpi_step_test(int *done, void *comm_impl, const cg_step_t *step, void *state);
const char *cg_mpi_step_call(const cg_step_t *step);

#endif
