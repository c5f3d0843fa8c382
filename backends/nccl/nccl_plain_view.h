/* A second mapping of a symmetric arena's memory (nccl_arena.c) at another
 * address, registered as no window: NCCL finds no symmetric window for a
 * buffer given through it and runs its plain kernels on the same bytes, with
 * no copy. The plan sends the collectives for which NCCL's symmetric kernels
 * are slower (nccl_cutover.c) through it. The driver's virtual memory calls
 * come through cudaGetDriverEntryPointByVersion, so the library does not link
 * libcuda. */
#ifndef CG_BACKENDS_NCCL_PLAIN_VIEW_H
#define CG_BACKENDS_NCCL_PLAIN_VIEW_H

#include <stddef.h>

typedef struct cg_nccl_plain_view {
  void *base;   /* NULL: none (the driver has no virtual memory management, or a call failed) */
  size_t bytes; /* the whole mapping: the allocation's size, at least the arena's */
} cg_nccl_plain_view_t;

/* Maps the allocation `memory` (from ncclMemAlloc, on the current device
 * `device`) a second time, read-write for `device`. On failure *view stays
 * empty and the reason goes to *why (static text): the arena then takes
 * NCCL's symmetric kernels at every size, as without a view. */
void cg_nccl_plain_view_map(cg_nccl_plain_view_t *view, const char **why, void *memory, int device);

/* Unmaps it and frees its addresses; an empty view is fine. */
void cg_nccl_plain_view_unmap(cg_nccl_plain_view_t *view);

#endif
