/* Arenas: place tensors back to back, so fused collectives need no copies.
 *
 * A bucket (see cg_compile) runs its collective directly on its members'
 * buffers when they are contiguous and in the order the nodes were recorded.
 * An arena hands out consecutive pieces of one allocation, each aligned only
 * to its element size (or to the arena's alignment), so tensors allocated in
 * the order their collectives are recorded need no packing. Arena memory is
 * host memory or device memory of one CUDA device. Not thread-safe: one
 * thread allocates from an arena at a time. */
#ifndef COMMGRAPH_ARENA_H
#define COMMGRAPH_ARENA_H

#include <stddef.h>

#include "commgraph/comm.h"
#include "commgraph/status.h"
#include "commgraph/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cg_arena cg_arena_t;

typedef struct cg_arena_opts {
  size_t size;      /* sizeof(cg_arena_opts_t) */
  int device;       /* CG_DEVICE_HOST (default): host memory; else the CUDA device whose memory it holds */
  size_t alignment; /* 0 (default): each piece aligned to its element size, so pieces touch; else a power of
                       two (pieces whose size is not a multiple of it leave gaps and are not contiguous) */
} cg_arena_opts_t;
#define CG_ARENA_OPTS_INIT {sizeof(cg_arena_opts_t), CG_DEVICE_HOST, 0}

/* Allocates `capacity` bytes (aligned to 256); opts may be NULL. */
CG_API cg_status_t cg_arena_create(cg_arena_t **out, size_t capacity, const cg_arena_opts_t *opts);
/* The next `count` elements of `dtype`, right after the previous piece;
 * CG_ERR_NO_MEMORY when they do not fit, CG_ERR_OVERFLOW when count times the
 * element size overflows, CG_ERR_INVALID_ENUM for an unknown dtype; a failed
 * call changes nothing. count 0 gives a non-NULL pointer to zero bytes. */
CG_API cg_status_t cg_arena_alloc(void **out, cg_arena_t *arena, size_t count, cg_dtype_t dtype);
/* Bytes handed out so far (gaps included) and the capacity; either may be NULL. */
CG_API cg_status_t cg_arena_usage(size_t *used, size_t *capacity, const cg_arena_t *arena);
/* Forgets every piece: the next allocation starts at the beginning again.
 * Plans compiled over old pieces still point at that memory. */
CG_API cg_status_t cg_arena_reset(cg_arena_t *arena);
/* Frees the memory; NULL is fine. Plans using it must be destroyed first. */
CG_API void cg_arena_destroy(cg_arena_t *arena);

#ifdef __cplusplus
}
#endif
#endif
