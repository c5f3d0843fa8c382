/* Arenas over memory the library did not allocate in core/arena.c: a backend
 * (NCCL's symmetric memory, backends/nccl/nccl_arena.c) allocates, and the
 * arena hands out its pieces as any other and gives it back through
 * `release` when destroyed. */
#ifndef CG_CORE_ARENA_INTERNAL_H
#define CG_CORE_ARENA_INTERNAL_H

#include <stddef.h>

#include "commgraph/arena.h"

/* CG_SUCCESS when `alignment` is 0 or a power of two, as cg_arena_opts_t
 * asks; else CG_ERR_INVALID_ARGUMENT naming `where`. */
cg_status_t cg_arena_check_alignment(size_t alignment, const char *where);

/* Gives the memory back; called once, from cg_arena_destroy. */
typedef void (*cg_arena_release_fn)(void *ctx, void *base);

/* An arena over `capacity` bytes at `base` on `device` (a CUDA ordinal), laid
 * out with `alignment` (0 or a power of two, as cg_arena_opts_t's). Takes
 * over base and ctx only on success; the caller keeps them on failure.
 * `where` names the caller in the error detail. */
cg_status_t cg_arena_adopt(cg_arena_t **out, void *base, size_t capacity, int device, size_t alignment,
                           cg_arena_release_fn release, void *ctx, const char *where);

/* The ctx an arena was adopted with, if it was adopted with `release`; NULL
 * otherwise (another backend's arena, or one cg_arena_create made). */
void *cg_arena_adopted_ctx(const cg_arena_t *arena, cg_arena_release_fn release);

#endif
