/* cg_arena_*: a bump allocator over one host or device allocation, so that
 * tensors allocated one after another are contiguous and their fused
 * collectives need no copies. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena_internal.h"
#include "commgraph/arena.h"
#include "device_memory.h"
#include "error.h"
#include "memory_kind.h"

#define ARENA_BASE_ALIGN 256

struct cg_arena {
  char *base;
  size_t capacity;
  size_t used;
  int device;
  size_t alignment;
  cg_arena_release_fn release; /* NULL: the arena allocated base itself */
  void *release_ctx;
};

cg_status_t cg_arena_check_alignment(size_t alignment, const char *where) {
  if (alignment & (alignment - 1))
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: alignment %zu is not a power of two", where, alignment);
  return CG_SUCCESS;
}

cg_status_t cg_arena_create(cg_arena_t **out, size_t capacity, const cg_arena_opts_t *opts) {
  static const cg_arena_opts_t defaults = CG_ARENA_OPTS_INIT;
  if (!out) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_arena_create: NULL out");
  if (!opts) opts = &defaults;
  cg_status_t st = cg_check_opts_size(opts->size, sizeof(cg_arena_opts_t), "cg_arena_create", "opts");
  if (st != CG_SUCCESS) return st;
  if ((st = cg_arena_check_alignment(opts->alignment, "cg_arena_create")) != CG_SUCCESS) return st;
  if (opts->device < CG_DEVICE_HOST)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_arena_create: device %d is neither CG_DEVICE_HOST nor a device",
                   opts->device);
  /* padded at the end only (cg_pad16): NCCL's 16-byte reads of the last
   * tensor stay inside the allocation, and tensors stay back to back */
  size_t padded = cg_pad16(capacity);
  if (padded > SIZE_MAX - ARENA_BASE_ALIGN)
    return cg_fail(CG_ERR_OVERFLOW, "cg_arena_create: capacity %zu is too large", capacity);
  cg_arena_t *a = calloc(1, sizeof *a);
  if (!a) return cg_fail(CG_ERR_NO_MEMORY, "cg_arena_create: out of memory");
  *a = (cg_arena_t){NULL, capacity, 0, opts->device, opts->alignment, NULL, NULL};
  size_t bytes = (padded + ARENA_BASE_ALIGN - 1) / ARENA_BASE_ALIGN * ARENA_BASE_ALIGN;
  if (!bytes) bytes = ARENA_BASE_ALIGN;
  if (opts->device == CG_DEVICE_HOST) {
    a->base = aligned_alloc(ARENA_BASE_ALIGN, bytes);
    if (!a->base) st = cg_fail(CG_ERR_NO_MEMORY, "cg_arena_create: allocating %zu bytes of host memory", bytes);
    else memset(a->base + capacity, 0, bytes - capacity);
  } else {
    /* cg_device_alloc pads and zeroes past `capacity` like the host side;
     * one byte at least, so that even an empty arena has a base */
    st = cg_device_alloc((void **)&a->base, capacity ? capacity : 1, opts->device, "arena memory",
                         "cg_arena_create");
  }
  if (st != CG_SUCCESS) {
    free(a);
    return st;
  }
  *out = a;
  return CG_SUCCESS;
}

cg_status_t cg_arena_adopt(cg_arena_t **out, void *base, size_t capacity, int device, size_t alignment,
                           cg_arena_release_fn release, void *ctx, const char *where) {
  if (!out || !base || !release) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: NULL arena memory", where);
  cg_status_t st = cg_arena_check_alignment(alignment, where);
  if (st != CG_SUCCESS) return st;
  if (device < 0) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: device %d is not a CUDA device", where, device);
  cg_arena_t *a = calloc(1, sizeof *a);
  if (!a) return cg_fail(CG_ERR_NO_MEMORY, "%s: out of memory", where);
  *a = (cg_arena_t){base, capacity, 0, device, alignment, release, ctx};
  *out = a;
  return CG_SUCCESS;
}

void *cg_arena_adopted_ctx(const cg_arena_t *arena, cg_arena_release_fn release) {
  return arena && release && arena->release == release ? arena->release_ctx : NULL;
}

cg_status_t cg_arena_alloc(void **out, cg_arena_t *arena, size_t count, cg_dtype_t dtype) {
  if (!out || !arena) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_arena_alloc: NULL %s", out ? "arena" : "out");
  if ((unsigned)dtype >= CG_DTYPE_COUNT)
    return cg_fail(CG_ERR_INVALID_ENUM, "cg_arena_alloc: unknown data type %d", (int)dtype);
  size_t elem = cg_dtype_size(dtype), align = arena->alignment > elem ? arena->alignment : elem;
  size_t start = (arena->used + align - 1) / align * align;
  if (count > SIZE_MAX / elem)
    return cg_fail(CG_ERR_OVERFLOW, "cg_arena_alloc: %zu elements of %s overflow size_t", count, cg_dtype_name(dtype));
  size_t bytes = count * elem;
  if (start < arena->used || start > arena->capacity || bytes > arena->capacity - start)
    return cg_fail(CG_ERR_NO_MEMORY, "cg_arena_alloc: %zu bytes at offset %zu do not fit in an arena of %zu bytes",
                   bytes, start, arena->capacity);
  *out = arena->base + start;
  arena->used = start + bytes;
  return CG_SUCCESS;
}

cg_status_t cg_arena_usage(size_t *used, size_t *capacity, const cg_arena_t *arena) {
  if (!arena) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_arena_usage: NULL arena");
  if (used) *used = arena->used;
  if (capacity) *capacity = arena->capacity;
  return CG_SUCCESS;
}

cg_status_t cg_arena_reset(cg_arena_t *arena) {
  if (!arena) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_arena_reset: NULL arena");
  arena->used = 0;
  return CG_SUCCESS;
}

void cg_arena_destroy(cg_arena_t *arena) {
  if (!arena) return;
  if (arena->release) {
    arena->release(arena->release_ctx, arena->base);
  } else if (arena->device == CG_DEVICE_HOST) {
    free(arena->base);
  } else {
    cg_device_free(arena->base, arena->device);
  }
  free(arena);
}
