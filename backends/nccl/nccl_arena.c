/* cg_nccl_arena_create: arenas in NCCL symmetric memory (commgraph/nccl.h).
 * The memory comes from ncclMemAlloc and is registered as a symmetric window
 * on the plan's NCCL communicator, so that NCCL's symmetric kernels take the
 * collectives whose buffers lie in it; the arena (core/arena.c) hands out
 * its pieces as any other and gives the memory back here. */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "arena_internal.h"
#include "commgraph/nccl.h"
#include "cuda_check.h"
#include "error.h"
#include "graph_internal.h"
#include "memory_kind.h"
#include "nccl_backend.h"
#include "nccl_check.h"

#if defined(NCCL_WIN_COLL_SYMMETRIC)
#define CG_NCCL_HAS_WINDOWS 1
#else
#define CG_NCCL_HAS_WINDOWS 0
#endif

typedef struct symmetric_arena {
  cg_comm_t *comm; /* retained: its NCCL communicator holds the window */
  void *window;    /* ncclWindow_t; NULL when NCCL registered none */
  int device;
} symmetric_arena_t;

/* Deregisters (collective) and frees. After an abort the NCCL communicator,
 * and its windows with it, are gone: the memory is only freed. */
static void release_symmetric(void *ctx, void *base) {
  symmetric_arena_t *s = ctx;
  cg_nccl_comm_t *n = s->comm->impl;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(s->device);
#if CG_NCCL_HAS_WINDOWS
  if (s->window) cg_nccl_windows_remove(&n->windows, base);
  if (s->window && !atomic_load(&s->comm->aborted))
    cg_nccl_settle(n->nccl, ncclCommWindowDeregister(n->nccl, (ncclWindow_t)s->window));
#else
  (void)n;
#endif
  ncclMemFree(base);
  cudaSetDevice(previous);
  cg_comm_release(s->comm);
  free(s);
}

/* Whether every rank of the communicator is fine (*ok on every rank: 1 when
 * all are), over its control duplicate, so that one rank's failure fails
 * them all before the collective registration. */
static cg_status_t agree(int *ok, cg_nccl_comm_t *n, const char *where) {
  int mine = *ok;
  if (!n->control) return cg_fail(CG_ERR_INTERNAL, "%s: the communicator has no control channel", where);
  if (MPI_Allreduce(&mine, ok, 1, MPI_INT, MPI_MIN, n->control->control) != MPI_SUCCESS)
    return cg_fail(CG_ERR_BACKEND, "%s: MPI_Allreduce on the control communicator failed", where);
  return CG_SUCCESS;
}

cg_status_t cg_nccl_arena_create(cg_arena_t **out, cg_comm_t *comm, size_t capacity, const cg_arena_opts_t *opts) {
  static const char where[] = "cg_nccl_arena_create";
  static const cg_arena_opts_t defaults = CG_ARENA_OPTS_INIT;
  symmetric_arena_t *s = NULL, *state = NULL; /* state: s once the arena holds it */
  cg_arena_t *arena = NULL;
  void *base = NULL, *memory = NULL;           /* memory: base once the arena holds it */
  int previous = 0;
  cg_status_t st = CG_SUCCESS;
  if (!out || !comm) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: NULL %s", where, out ? "comm" : "out");
  if (!opts) opts = &defaults;
  if ((st = cg_check_opts_size(opts->size, sizeof(cg_arena_opts_t), where, "opts")) != CG_SUCCESS) return st;
  cg_nccl_comm_t *n = cg_nccl_comm_of(comm);
  if (!n)
    return cg_fail(CG_ERR_UNSUPPORTED, "%s: the communicator's backend (%s) is not nccl", where,
                   comm->ops ? comm->ops->backend_name : "none");
  if (opts->device != CG_DEVICE_HOST && opts->device != n->device)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: device %d is not the communicator's (%d)", where, opts->device,
                   n->device);
  if (opts->alignment & (opts->alignment - 1))
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: alignment %zu is not a power of two", where, opts->alignment);
  if ((st = cg_comm_refuse_if_aborted(comm, where)) != CG_SUCCESS) return st;

  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) version = 0;
  if (!CG_NCCL_HAS_WINDOWS || version < 22700) {
    /* no symmetric windows in this NCCL: plain device memory, as the header promises */
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
  cudaError_t cerr = cudaSetDevice(n->device);
  if (cerr != cudaSuccess) st = cg_fail_cuda(cerr, "cudaSetDevice", "%s: device %d", where, n->device);
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
    *s = (symmetric_arena_t){comm, NULL, n->device};
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
  int ok = st == CG_SUCCESS;
  cg_status_t agreed = agree(&ok, n, where);
  if (agreed != CG_SUCCESS) {
    st = agreed;
    goto out;
  }
  if (!ok) {
    if (st == CG_SUCCESS)
      st = cg_fail(CG_ERR_NO_MEMORY, "%s: another rank of communicator %016llx failed to set up its %zu bytes",
                   where, (unsigned long long)comm->id, bytes);
    goto out;
  }
#if CG_NCCL_HAS_WINDOWS
  {
    ncclWindow_t window = NULL;
    ncclResult_t r =
        cg_nccl_settle(n->nccl, ncclCommWindowRegister(n->nccl, memory, bytes, &window, NCCL_WIN_COLL_SYMMETRIC));
    if (r != ncclSuccess) {
      /* no window to deregister: destroying the arena only frees */
      st = cg_fail_nccl(r, n->nccl, "ncclCommWindowRegister", "%s: %zu bytes, rank %d of %d", where, bytes,
                        comm->rank, comm->size);
      goto out;
    }
    state->window = (void *)window; /* NULL: NCCL registered nothing (registration off); plain memory then */
    if (window) cg_nccl_windows_add(&n->windows, memory, bytes); /* for DOT only: out of memory leaves it out */
  }
#endif
  *out = arena;
  arena = NULL;
out:
  cg_arena_destroy(arena);
  if (base) ncclMemFree(base);
  free(s);
  cudaSetDevice(previous);
  return st;
}
