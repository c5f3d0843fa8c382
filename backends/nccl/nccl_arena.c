/* cg_nccl_arena_create: arenas in NCCL symmetric memory (commgraph/nccl.h).
 * The memory comes from ncclMemAlloc and is registered as a symmetric window
 * on the plan's NCCL communicator, so that NCCL's symmetric kernels take the
 * collectives whose buffers lie in it; allreduces above the measured cut-over
 * (nccl_cutover.c) go through a second, windowless mapping of the same
 * memory to NCCL's plain kernels (nccl_plain_view.c). The arena
 * (core/arena.c) hands out its pieces as any other and gives the memory back
 * here. */
#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena_internal.h"
#include "comm_abort.h"
#include "commgraph/nccl.h"
#include "cuda_check.h"
#include "error.h"
#include "graph_internal.h"
#include "memory_kind.h"
#include "nccl_backend.h"
#include "nccl_check.h"
#include "nccl_cutover.h"
#include "nccl_plain_view.h"
#include "param.h"

#if defined(NCCL_WIN_COLL_SYMMETRIC)
#define CG_NCCL_HAS_WINDOWS 1
#else
#define CG_NCCL_HAS_WINDOWS 0
#endif

typedef struct symmetric_arena {
  cg_comm_t *comm; /* retained: its NCCL communicator holds the window */
  void *window;    /* ncclWindow_t; NULL when NCCL registered none */
#if CG_NCCL_HAS_WINDOWS
  /* where NCCL's thread writes the window while it registers: a registration
   * given up at the timeout may still complete before the abort, so not on
   * the stack */
  ncclWindow_t registering;
#endif
  int device;
  cg_nccl_plain_view_t view;                      /* empty: every allreduce symmetric */
  size_t symmetric_max[CG_NCCL_SYMMETRIC_DTYPES]; /* as the window's (nccl_windows.h) */
  double symmetric_ratio[CG_NCCL_SYMMETRIC_DTYPES][CG_NCCL_MEASURED_SIZES]; /* likewise; 0: not measured */
} symmetric_arena_t;

/* Deregisters and frees, once the device is done with the memory (NCCL
 * unmaps the peers' mappings). After an abort the NCCL communicator, and its
 * windows with it, are gone: the memory is only freed. */
static void release_symmetric(void *ctx, void *base) {
  symmetric_arena_t *s = ctx;
  cg_nccl_comm_t *n = s->comm->impl;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(s->device);
  cudaDeviceSynchronize();
  /* out of the list first: no capture routes to the view once it is gone */
  if (s->window) cg_nccl_windows_remove(&n->windows, base);
  cg_nccl_plain_view_unmap(&s->view);
#if CG_NCCL_HAS_WINDOWS
  if (s->window && !atomic_load(&s->comm->aborted)) {
    ncclResult_t r = ncclCommWindowDeregister(n->nccl, (ncclWindow_t)s->window);
    if (r == ncclSuccess || r == ncclInProgress) cg_nccl_settle(n->nccl, ncclInProgress);
  }
#else
  (void)n;
#endif
  ncclMemFree(base);
  cudaSetDevice(previous);
  cg_comm_release(s->comm);
  free(s);
}

/* What the ranks agree on before the collective registration: whether every
 * rank is ready (ok), and that every rank asks for the same bytes (NCCL maps
 * its peers' memory with its own size). Over the control duplicate, under
 * `wait`. */
static cg_status_t agree(int *ok, int *same_bytes, const cg_comm_t *comm, cg_nccl_comm_t *n, size_t bytes,
                         const cg_wait_t *wait, const char *where) {
  long long mine[2] = {*ok, (long long)bytes}, *each = NULL;
  cg_status_t st = cg_nccl_gather_within((void **)&each, mine, sizeof mine, n, wait, where);
  if (st != CG_SUCCESS) return st;
  for (int r = 0; r < comm->size; r++) {
    *ok &= each[2 * r] != 0;
    *same_bytes &= each[2 * r + 1] == (long long)bytes;
  }
  free(each);
  return CG_SUCCESS;
}

/* A wait of the arena's that gave up (CG_ERR_TIMEOUT, cg_error_last() says
 * in what): the ranks that did not answer a roll call named, and the
 * communicator aborted, so that nothing of NCCL's waits on for a peer that
 * is not coming and later plans refuse it. Before the registration began
 * nothing of NCCL's touches the arena's memory, and the abort (a second or
 * more over NCCL's sockets) goes on a thread of its own; after, it ends
 * here, before the memory is freed under a window or a timed call. */
static cg_status_t timed_out(cg_comm_t *comm, cg_nccl_comm_t *n, const cg_deadline_t *d, int registering,
                             const char *where) {
  char what[CG_ERROR_BYTES], roll[768];
  snprintf(what, sizeof what, "%s", cg_error_last());
  cg_mpi_control_roll_call(roll, sizeof roll, n->control, d->waiting_in, d->timeout_s);
  cg_status_t st = cg_fail(CG_ERR_TIMEOUT, "%s: timed out after %g s (the communicator's timeout) waiting for the "
                           "other ranks of communicator %016llx (nccl) on rank %d of %d: %s; %s. The communicator is "
                           "aborted: create a new one, or end the job", where, d->timeout_s,
                           (unsigned long long)comm->id, comm->rank, comm->size, what, roll);
  fprintf(stderr, "commgraph: %s\n", cg_error_last());
  if (!registering)
    cg_comm_abort_list(&comm, 1, n->device, st, cg_error_last());
  else if (cg_comm_mark_aborted(comm, st, cg_error_last()))
    cg_nccl_backend.abort(n);
  return st;
}

/* The local checks that need the communicator (the same outcome on every
 * rank only if every rank passed the same arguments: agreed after). */
static cg_status_t check_local(const cg_comm_t *comm, const cg_nccl_comm_t *n, size_t capacity,
                               const cg_arena_opts_t *opts, const char *where) {
  if (opts->device != CG_DEVICE_HOST && opts->device != n->device)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: device %d is not the communicator's (%d)", where, opts->device,
                   n->device);
  if (cg_pad16(capacity) == SIZE_MAX)
    return cg_fail(CG_ERR_OVERFLOW, "%s: capacity %zu is too large", where, capacity);
  cg_status_t st = cg_arena_check_alignment(opts->alignment, where);
  return st != CG_SUCCESS ? st : cg_comm_refuse_if_aborted(comm, where);
}

/* The registration, waited for: on a non-blocking communicator NCCL returns
 * ncclSuccess at once and registers on a thread of its own, which writes
 * *window later; ncclCommGetAsyncError (cg_nccl_settle) joins it. */
static cg_status_t register_window(symmetric_arena_t *state, cg_comm_t *comm, cg_nccl_comm_t *n, void *memory,
                                   size_t bytes, const cg_wait_t *wait, const char *where) {
#if CG_NCCL_HAS_WINDOWS
  state->registering = NULL;
  ncclResult_t r = ncclCommWindowRegister(n->nccl, memory, bytes, &state->registering, NCCL_WIN_COLL_SYMMETRIC);
  if (r == ncclSuccess || r == ncclInProgress) r = cg_nccl_settle_within(n->nccl, ncclInProgress, wait);
  if (r == ncclInProgress)
    return cg_fail(CG_ERR_TIMEOUT, "%s: ncclCommWindowRegister of %zu bytes did not finish: not every rank of the "
                   "communicator took part", where, bytes);
  if (r != ncclSuccess)
    return cg_fail_nccl(r, n->nccl, "ncclCommWindowRegister", "%s: %zu bytes, rank %d of %d", where, bytes,
                        comm->rank, comm->size);
  state->window = (void *)state->registering; /* deregistered when the arena goes */
  return CG_SUCCESS;
#else
  (void)state, (void)comm, (void)n, (void)memory, (void)bytes, (void)wait, (void)where;
  return CG_SUCCESS;
#endif
}

/* Which allreduces take the symmetric kernels: up to CG_SYMMETRIC_MAX_BYTES
 * when every rank sets the same, else up to the measured cut-over; every
 * size when not every rank could map a plain view (or the ranks lack peer
 * links: NCCL has no symmetric kernels for them, nothing to choose).
 * Collective; the same outcome on every rank. */
static cg_status_t choose_paths(symmetric_arena_t *s, cg_comm_t *comm, cg_nccl_comm_t *n, void *memory,
                                size_t bytes, size_t env_max, int env_set, const cg_wait_t *wait, const char *where) {
  const char *why = NULL;
  for (int d = 0; d < CG_NCCL_SYMMETRIC_DTYPES; d++) s->symmetric_max[d] = SIZE_MAX;
  if (n->peer_links && !(env_set && env_max == SIZE_MAX)) cg_nccl_plain_view_map(&s->view, &why, memory, n->device);
  long long given = env_set ? (env_max > LLONG_MAX ? LLONG_MAX : (long long)env_max) : -1;
  long long mine[3] = {s->view.base != NULL, env_set, given}, *each = NULL;
  cg_status_t st = cg_nccl_gather_within((void **)&each, mine, sizeof mine, n, wait, where);
  if (st != CG_SUCCESS) return st;
  int every_view = 1, every_set = 1, some_set = 0, alike = 1;
  for (int r = 0; r < comm->size; r++) {
    const long long *theirs = each + 3 * r;
    every_view &= theirs[0] != 0;
    every_set &= theirs[1] != 0;
    some_set |= theirs[1] != 0;
    alike &= theirs[2] == given;
  }
  free(each);
  if (some_set && (!every_set || !alike))
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: environment variable CG_SYMMETRIC_MAX_BYTES differs between the "
                   "ranks of communicator %016llx (this rank: %s); set it alike everywhere or nowhere", where,
                   (unsigned long long)comm->id, env_set ? "set" : "unset");
  if (!every_view) {
    /* every rank takes the symmetric kernels at every size, as NCCL alone would */
    if (why)
      fprintf(stderr, "commgraph: %s: rank %d: no plain view of the symmetric arena (%s): every allreduce in it "
              "takes NCCL's symmetric kernels\n", where, comm->rank, why);
    cg_nccl_plain_view_unmap(&s->view);
    return CG_SUCCESS;
  }
  if (every_set) {
    for (int d = 0; d < CG_NCCL_SYMMETRIC_DTYPES; d++) s->symmetric_max[d] = env_max;
    return CG_SUCCESS;
  }
  int abort_comm = 0;
  st = cg_nccl_cutover_measure(s->symmetric_max, s->symmetric_ratio, &abort_comm, n, memory, s->view.base, bytes,
                               wait, where);
  /* every rank alike: NCCL work may wait for a peer that stopped (a timeout's abort follows its roll call) */
  if (abort_comm && st != CG_ERR_TIMEOUT && cg_comm_mark_aborted(comm, st, cg_error_last())) cg_nccl_backend.abort(n);
  return st;
}

cg_status_t cg_nccl_arena_symmetric_max(size_t *out_bytes, const cg_arena_t *arena, cg_dtype_t dtype) {
  static const char where[] = "cg_nccl_arena_symmetric_max";
  if (!out_bytes || !arena)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: NULL %s", where, out_bytes ? "arena" : "out_bytes");
  if ((unsigned)dtype >= CG_DTYPE_COUNT)
    return cg_fail(CG_ERR_INVALID_ENUM, "%s: unknown data type %d", where, (int)dtype);
  const symmetric_arena_t *s = cg_arena_adopted_ctx(arena, release_symmetric);
  if (!s || !s->window)
    return cg_fail(CG_ERR_UNSUPPORTED, "%s: the arena is not in NCCL symmetric memory (not made by "
                   "cg_nccl_arena_create, or this NCCL has no symmetric windows)", where);
  int d = cg_nccl_symmetric_dtype(dtype);
  *out_bytes = d < 0 ? SIZE_MAX : s->symmetric_max[d];
  return CG_SUCCESS;
}

cg_status_t cg_nccl_arena_create(cg_arena_t **out, cg_comm_t *comm, size_t capacity, const cg_arena_opts_t *opts) {
  static const char where[] = "cg_nccl_arena_create";
  static const cg_arena_opts_t defaults = CG_ARENA_OPTS_INIT;
  symmetric_arena_t *s = NULL, *state = NULL; /* state: s once the arena holds it */
  cg_arena_t *arena = NULL;
  void *base = NULL, *memory = NULL; /* memory: base once the arena holds it */
  int previous = 0;
  cg_status_t st = CG_SUCCESS;
  if (!out || !comm) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: NULL %s", where, out ? "comm" : "out");
  if (!opts) opts = &defaults;
  if ((st = cg_check_opts_size(opts->size, sizeof(cg_arena_opts_t), where, "opts")) != CG_SUCCESS) return st;
  cg_nccl_comm_t *n = cg_nccl_comm_of(comm);
  if (!n)
    return cg_fail(CG_ERR_UNSUPPORTED, "%s: the communicator's backend (%s) is not nccl", where,
                   comm->ops ? comm->ops->backend_name : "none");

  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) version = 0;
  size_t env_max = SIZE_MAX;
  int env_set = 0;
  if (!CG_NCCL_HAS_WINDOWS || version < 22700) {
    /* no symmetric windows in this NCCL: plain device memory, as the header promises */
    if ((st = check_local(comm, n, capacity, opts, where)) != CG_SUCCESS) return st;
    cg_arena_opts_t plain = *opts;
    plain.size = sizeof plain;
    plain.device = n->device;
    return cg_arena_create(out, capacity, &plain);
  }

  /* Everything that can fail on one rank alone comes first, then the ranks
   * agree, then the collective registration: a rank never leaves the others
   * waiting in it. Padded for NCCL's 16-byte reads, one byte at least, as
   * cg_arena_create's memory. */
  size_t bytes = cg_pad16(capacity ? capacity : 1);
  cudaGetDevice(&previous);
  st = check_local(comm, n, capacity, opts, where);
  if (st == CG_SUCCESS) st = cg_param_bytes(&env_max, &env_set, CG_PARAM_SYMMETRIC_MAX_BYTES, where);
  /* room in the window list now: a rank whose entry went missing would route alone */
  if (st == CG_SUCCESS && !cg_nccl_windows_reserve(&n->windows))
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: out of memory", where);
  cudaError_t cerr = cudaSuccess;
  if (st == CG_SUCCESS && (cerr = cudaSetDevice(n->device)) != cudaSuccess)
    st = cg_fail_cuda(cerr, "cudaSetDevice", "%s: device %d", where, n->device);
  if (st == CG_SUCCESS) {
    ncclResult_t r = ncclMemAlloc(&base, bytes);
    if (r != ncclSuccess) {
      base = NULL;
      st = cg_fail(CG_ERR_NO_MEMORY, "%s: ncclMemAlloc of %zu bytes on device %d: %s", where, bytes, n->device,
                   ncclGetErrorString(r));
    }
  }
  if (st == CG_SUCCESS &&
      ((cerr = cudaMemset(base, 0, bytes)) != cudaSuccess || (cerr = cudaDeviceSynchronize()) != cudaSuccess))
    st = cg_fail_cuda(cerr, "cudaMemset", "%s: zeroing the arena", where);
  if (st == CG_SUCCESS && !(s = calloc(1, sizeof *s))) st = cg_fail(CG_ERR_NO_MEMORY, "%s: out of memory", where);
  if (st == CG_SUCCESS) {
    *s = (symmetric_arena_t){.comm = comm, .device = n->device};
    cg_comm_retain(comm);
    if ((st = cg_arena_adopt(&arena, base, capacity, n->device, opts->alignment, release_symmetric, s, where)) ==
        CG_SUCCESS) {
      /* the arena's now: destroying it releases them */
      memory = base, state = s;
      base = NULL, s = NULL;
    } else {
      cg_comm_release(comm);
    }
  }
  /* every wait from here on gives up at the communicator's timeout */
  cg_deadline_t deadline;
  char waiting_in[160];
  snprintf(waiting_in, sizeof waiting_in, "%s (communicator %016llx)", where, (unsigned long long)comm->id);
  cg_deadline_start(&deadline, comm->setup_timeout_s, cg_mpi_control_answer, n->control, waiting_in);
  cg_wait_t wait = {cg_deadline_go_on, &deadline};
  int ok = st == CG_SUCCESS, same_bytes = 1, registering = 0;
  char local[CG_ERROR_BYTES] = ""; /* a refusal repeats the first report */
  if (st != CG_SUCCESS) snprintf(local, sizeof local, "%s", cg_error_last());
  cg_status_t agreed = agree(&ok, &same_bytes, comm, n, bytes, &wait, where);
  if (agreed != CG_SUCCESS) {
    /* a local failure (a refusal) says more, unless the agreement ran out of
     * time: then some rank did not come, which the timeout's report names */
    if (st == CG_SUCCESS || (agreed == CG_ERR_TIMEOUT && deadline.expired && local[0])) {
      char detail[768];
      snprintf(detail, sizeof detail, "%s", cg_error_last());
      st = local[0] ? cg_fail(agreed, "%s (and this rank's own set-up had failed: %s)", detail, local) : agreed;
    } else if (local[0]) {
      st = cg_fail(st, "%s", local); /* the agreement's failure took the detail's place */
    }
    goto out;
  }
  if (st == CG_SUCCESS && !same_bytes)
    st = cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: the ranks of communicator %016llx asked for different capacities "
                 "(this rank %zu bytes); symmetric memory needs the same on every rank", where,
                 (unsigned long long)comm->id, capacity);
  else if (st == CG_SUCCESS && !ok)
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: another rank of communicator %016llx failed to set up its %zu bytes",
                 where, (unsigned long long)comm->id, bytes);
  if (st != CG_SUCCESS) goto out;

  registering = 1;
  st = register_window(state, comm, n, memory, bytes, &wait, where);
  if (st == CG_ERR_TIMEOUT) goto out;
  if (st != CG_SUCCESS && cg_comm_mark_aborted(comm, st, cg_error_last()))
    cg_nccl_backend.abort(n); /* NCCL keeps the failure: only an abort ends the communicator now */
  ok = st == CG_SUCCESS;
  /* every rank hears of a failed registration; the others' windows go with their arenas */
  if ((agreed = agree(&ok, &same_bytes, comm, n, bytes, &wait, where)) != CG_SUCCESS && st == CG_SUCCESS) st = agreed;
  if (st == CG_SUCCESS && !ok)
    st = cg_fail(CG_ERR_BACKEND, "%s: another rank of communicator %016llx failed to register its window", where,
                 (unsigned long long)comm->id);
  if (st != CG_SUCCESS) goto out;
  if ((st = choose_paths(state, comm, n, memory, bytes, env_max, env_set, &wait, where)) != CG_SUCCESS) goto out;
  cg_nccl_window_t entry = {memory, bytes, state->view.base, {0}, {{0}}};
  for (int d = 0; d < CG_NCCL_SYMMETRIC_DTYPES; d++) entry.symmetric_max[d] = state->symmetric_max[d];
  memcpy(entry.symmetric_ratio, state->symmetric_ratio, sizeof entry.symmetric_ratio);
  cg_nccl_windows_add(&n->windows, &entry); /* cannot fail: the room was reserved */
  *out = arena;
  arena = NULL;
out:
  /* only a wait that ran out: an abandoned control channel refuses at once with its own report */
  if (st == CG_ERR_TIMEOUT && deadline.expired) st = timed_out(comm, n, &deadline, registering, where);
  cg_arena_destroy(arena);
  if (base) ncclMemFree(base);
  free(s);
  cudaSetDevice(previous);
  return st;
}
