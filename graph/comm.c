#include <stdio.h>
#include <stdlib.h>
#include <threads.h>
#include <time.h>

#include "comm_internal.h"
#include "error.h"
#include "text.h"

static atomic_uint_fast64_t next_comm_serial = 1;

cg_comm_t *cg_comm_alloc(int rank, int size, const cg_comm_ops_t *ops, void *impl) {
  cg_comm_t *comm = calloc(1, sizeof *comm);
  if (!comm) return NULL;
  comm->serial = atomic_fetch_add(&next_comm_serial, 1);
  comm->id = comm->serial;
  comm->rank = rank;
  comm->size = size;
  comm->device = CG_DEVICE_HOST;
  atomic_init(&comm->refs, 1);
  comm->ops = ops;
  comm->impl = impl;
  return comm;
}

void cg_comm_retain(cg_comm_t *comm) { atomic_fetch_add(&comm->refs, 1); }

/* Live communicators with an agreed id, so the cross-rank check can find one a
 * rank's graph does not use when other ranks' graphs do. A spin lock guards it:
 * it is touched only when communicators are created, destroyed or looked up. */
static atomic_flag registry_lock = ATOMIC_FLAG_INIT;
static cg_comm_t **registry;
static size_t registry_len, registry_cap;

static void lock_registry(void) {
  while (atomic_flag_test_and_set_explicit(&registry_lock, memory_order_acquire)) {
  }
}
static void unlock_registry(void) { atomic_flag_clear_explicit(&registry_lock, memory_order_release); }

int cg_comm_register(cg_comm_t *comm) {
  int ok = 1;
  lock_registry();
  if (registry_len == registry_cap) {
    size_t cap = registry_cap ? 2 * registry_cap : 16;
    cg_comm_t **grown = realloc(registry, cap * sizeof *grown);
    if (grown) {
      registry = grown;
      registry_cap = cap;
    } else {
      ok = 0;
    }
  }
  if (ok) {
    registry[registry_len++] = comm;
    comm->registered = 1;
  }
  unlock_registry();
  return ok;
}

cg_comm_t *cg_comm_lookup(uint64_t id) {
  cg_comm_t *found = NULL;
  lock_registry();
  for (size_t i = 0; i < registry_len && !found; i++)
    if (registry[i]->id == id) {
      found = registry[i];
      cg_comm_retain(found);
    }
  unlock_registry();
  return found;
}

double cg_comm_abort_wait_s = 10.0;

/* The abort report of a communicator marked when no copy could be made. */
static char no_report[] = "";

/* The struct and what it owns, the backend's side aside. */
static void free_struct(cg_comm_t *comm) {
  char *report = atomic_load(&comm->abort_report);
  if (report != no_report) free(report);
  free(comm);
}

static void free_comm(cg_comm_t *comm) {
  if (comm->ops && comm->ops->destroy_impl) comm->ops->destroy_impl(comm->impl);
  free_struct(comm);
}

/* Hands a communicator whose abort is running to the abort's end. 1 when
 * the abort ended meanwhile and the caller frees the communicator. */
static int orphan(cg_comm_t *comm) {
  int running = CG_COMM_ABORT_RUNNING;
  return !atomic_compare_exchange_strong(&comm->aborting, &running, CG_COMM_ABORT_ORPHANED);
}

/* 1 when the abort ended and the caller frees the communicator; 0 when the
 * communicator is left to the abort's end: at once when its host side can be
 * detached here, else once the wait ran out. */
static int wait_for_abort(cg_comm_t *comm) {
  if (comm->ops && comm->ops->detach_host) {
    comm->ops->detach_host(comm->impl);
    return orphan(comm);
  }
  const struct timespec nap = {.tv_nsec = 1000000};
  /* counted in naps: oversleeping only makes the wait longer */
  for (double waited = 0; waited < cg_comm_abort_wait_s; waited += 1e-3) {
    if (atomic_load(&comm->aborting) == CG_COMM_ABORT_NONE) return 1;
    thrd_sleep(&nap, NULL);
  }
  /* once orphaned the communicator is the abort thread's: read it before */
  unsigned long long id = (unsigned long long)comm->id;
  int rank = comm->rank, size = comm->size;
  if (orphan(comm)) return 1; /* just ended */
  fprintf(stderr,
          "commgraph: destroying communicator %016llx (rank %d of %d): its abort has not ended after %g s; "
          "its backend resources are left behind\n",
          id, rank, size, cg_comm_abort_wait_s);
  return 0;
}

void cg_comm_release(cg_comm_t *comm) {
  if (!comm) return;
  int last;
  if (comm->registered) { /* a lookup must not retain a communicator that is going away */
    lock_registry();
    last = atomic_fetch_sub(&comm->refs, 1) == 1;
    if (last)
      for (size_t i = 0; i < registry_len; i++)
        if (registry[i] == comm) {
          registry[i] = registry[--registry_len];
          break;
        }
    if (last && registry_len == 0) {
      free(registry);
      registry = NULL;
      registry_cap = 0;
    }
    unlock_registry();
  } else {
    last = atomic_fetch_sub(&comm->refs, 1) == 1;
  }
  if (!last) return;
  if (atomic_load(&comm->aborting) != CG_COMM_ABORT_NONE && !wait_for_abort(comm)) return;
  free_comm(comm);
}

void cg_comm_abort_begin(cg_comm_t *comm) { atomic_store(&comm->aborting, CG_COMM_ABORT_RUNNING); }

void cg_comm_abort_end(cg_comm_t *comm) {
  int seen = CG_COMM_ABORT_RUNNING;
  if (atomic_compare_exchange_strong(&comm->aborting, &seen, CG_COMM_ABORT_NONE)) return;
  if (seen != CG_COMM_ABORT_ORPHANED) return;
  /* orphaned by its last release: with the host side detached the rest goes
   * here; otherwise only the struct (the backend's destroy would call MPI on
   * this thread) */
  if (comm->ops && comm->ops->detach_host)
    free_comm(comm);
  else
    free_struct(comm);
}

int cg_comm_mark_aborted(cg_comm_t *comm, cg_status_t status, const char *report) {
  /* the report goes first and decides who marks: a reader that sees
   * `aborted` finds the report already there */
  char *copy = report ? cg_copy_text(report, 4096) : NULL, *expected = NULL;
  if (!copy) copy = no_report;
  if (!atomic_compare_exchange_strong(&comm->abort_report, &expected, copy)) {
    if (copy != no_report) free(copy);
    return 0;
  }
  atomic_store(&comm->aborted, status != CG_SUCCESS ? (int)status : CG_ERR_TIMEOUT);
  return 1;
}

cg_status_t cg_comm_refuse_if_aborted(const cg_comm_t *comm, const char *caller) {
  cg_status_t why = (cg_status_t)atomic_load(&comm->aborted);
  if (why == CG_SUCCESS) return CG_SUCCESS;
  const char *report = atomic_load(&comm->abort_report);
  if (report && !*report) report = NULL; /* marked without a copy */
  return cg_fail(why, "%s: %s communicator %016llx (rank %d of %d) was aborted after %s (in this plan or another); "
                 "create a new communicator and compile again%s%s", caller,
                 comm->ops ? comm->ops->backend_name : "a", (unsigned long long)comm->id, comm->rank, comm->size,
                 why == CG_ERR_MISMATCH ? "its ranks ran different sequences" : "a replay on it timed out",
                 report ? "; the replay that aborted it: " : "", report ? report : "");
}

void cg_comm_destroy(cg_comm_t *comm) { cg_comm_release(comm); }

cg_status_t cg_comm_rank(int *out, const cg_comm_t *comm) {
  if (!out || !comm) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_rank: NULL %s", out ? "comm" : "out");
  *out = comm->rank;
  return CG_SUCCESS;
}

cg_status_t cg_comm_size(int *out, const cg_comm_t *comm) {
  if (!out || !comm) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_size: NULL %s", out ? "comm" : "out");
  *out = comm->size;
  return CG_SUCCESS;
}

cg_status_t cg_comm_backend_name(const char **out, const cg_comm_t *comm) {
  if (!out || !comm)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_backend_name: NULL %s", out ? "comm" : "out");
  *out = comm->ops && comm->ops->backend_name ? comm->ops->backend_name : "none";
  return CG_SUCCESS;
}

cg_status_t cg_comm_device(int *out, const cg_comm_t *comm) {
  if (!out || !comm) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_device: NULL %s", out ? "comm" : "out");
  *out = comm->device;
  return CG_SUCCESS;
}
