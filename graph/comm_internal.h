/* The communicator as the graph layer sees it: an identity, a rank in a size,
 * and a backend behind a table of operations. Backends fill `ops` and `impl`.
 * `backend` is the scheduler's interface to the backend (sched/plan/backend.h);
 * opaque here. */
#ifndef CG_GRAPH_COMM_INTERNAL_H
#define CG_GRAPH_COMM_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "commgraph/comm.h"

struct cg_backend;

typedef struct cg_comm_ops {
  const char *backend_name;
  void (*destroy_impl)(void *impl); /* may be NULL */
  /* Frees what must be freed on the thread that lets go of the communicator
   * (MPI duplicates), so that destroy_impl may then run on any thread. NULL:
   * destroy_impl must run on the releasing thread. See cg_comm_abort_begin. */
  void (*detach_host)(void *impl);
  const struct cg_backend *backend; /* NULL: the communicator runs nothing */
  /* 0 when the communicator's steps can read and write memory at `ptr` on
   * `device` (the communicator's); -1 with the reason in `why`. NULL: any
   * memory goes (offline communicators run nothing). */
  int (*memory_fits)(int device, const void *ptr, char *why, size_t why_size);
} cg_comm_ops_t;

struct cg_comm {
  uint64_t serial; /* process-wide creation number, for DOT labels */
  uint64_t id;     /* the same on every rank of the communicator (agreed at creation); serial if offline */
  int rank;
  int size;
  int device; /* CG_DEVICE_HOST or a CUDA device ordinal */
  int registered; /* listed for cg_comm_lookup */
  /* how long a collective set-up on it outside any plan (an NCCL arena)
   * waits for the other ranks: cg_comm_create's timeout; 0: for ever */
  double setup_timeout_s;
  atomic_int refs; /* the creator's, one per graph and plan that uses it, and lookups in flight */
  /* collectives issued over it by every plan, in order: the flight
   * recorder's sequence numbers, equal across ranks while they agree */
  atomic_uint_least64_t issued;
  /* plans compiled on it, in order (cg_plan_comm_t.compile_index) */
  atomic_uint_least64_t compiled;
  /* 0, or the status of the failure that aborted it (CG_ERR_TIMEOUT or
   * CG_ERR_MISMATCH: a replay, a warm-up, an arena's set-up;
   * sched/plan/comm_abort.h): its backend ran its abort once, and no plan
   * starts on it any more. See cg_comm_mark_aborted. */
  atomic_int aborted;
  _Atomic(char *) abort_report; /* that replay's report: set before `aborted`, by the one marker */
  /* CG_COMM_ABORT_*: whether an abort thread (sched/plan/cuda/comm_abort.c) still
   * works on it; see cg_comm_abort_begin */
  atomic_int aborting;
  const cg_comm_ops_t *ops;
  void *impl;
};

/* Allocates a communicator with one reference; NULL when out of memory. */
cg_comm_t *cg_comm_alloc(int rank, int size, const cg_comm_ops_t *ops, void *impl);
void cg_comm_retain(cg_comm_t *comm);
/* Lists a communicator whose `id` is agreed by its ranks, for cg_comm_lookup;
 * 0 when out of memory. The listing ends when the communicator is freed. */
int cg_comm_register(cg_comm_t *comm);
/* The live registered communicator with this id, retained; NULL if none. */
cg_comm_t *cg_comm_lookup(uint64_t id);
/* Drops a reference; the last one frees the communicator, after any abort
 * in flight on it has ended (see cg_comm_abort_begin). */
void cg_comm_release(cg_comm_t *comm);

/* Marks the communicator aborted by a replay that failed with `status`,
 * keeping a copy of its report for later callers; 1 for the first marker
 * (which runs the backend's abort), 0 if it was marked already. */
int cg_comm_mark_aborted(cg_comm_t *comm, cg_status_t status, const char *report);
/* CG_SUCCESS, or the status that aborted the communicator, with a message
 * for `caller` that names the communicator and repeats the first report:
 * a plan on a communicator another plan's replay aborted fails as that
 * replay did, not with a bare timeout. */
cg_status_t cg_comm_refuse_if_aborted(const cg_comm_t *comm, const char *caller);

enum { CG_COMM_ABORT_NONE, CG_COMM_ABORT_RUNNING, CG_COMM_ABORT_ORPHANED };
/* An abort thread holds no reference to the communicators it aborts, so that
 * the communicator, and the MPI calls that free it, go on the thread that
 * lets go of it last, never on the abort thread. Call begin while a
 * reference keeps the communicator alive; call end when the abort has
 * ended, and touch the communicator no more.
 *
 * When the last release comes while the abort runs:
 *  - with ops->detach_host, it detaches the host side at once (MPI, on the
 *    releasing thread) and leaves the rest to the abort's end, which runs
 *    destroy_impl and frees the struct. The release never waits: a backend's
 *    teardown after an abort (NCCL's takes a good part of a second) stays off
 *    the program's path.
 *  - without, it waits for end, for about cg_comm_abort_wait_s seconds; after
 *    that it leaves the communicator to end, which frees the struct but leaks
 *    the backend's resources, whose destroy would call MPI on the abort
 *    thread (a hung abort must not hang the destroy, and nothing may be freed
 *    under the abort). */
void cg_comm_abort_begin(cg_comm_t *comm);
void cg_comm_abort_end(cg_comm_t *comm);
/* 10 s; tests shorten it */
extern double cg_comm_abort_wait_s;

#endif
