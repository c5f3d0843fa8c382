/* The symmetric windows registered on an NCCL communicator (nccl_arena.c):
 * which collectives lie in one, and whether each takes NCCL's symmetric
 * kernels or, above the window's measured cut-over (nccl_cutover.c), the
 * plain ones through the window's plain view (nccl_plain_view.h). The step
 * enqueue (nccl_steps.c) and the plan's DOT ask here. One process-wide lock
 * guards every communicator's list: arenas come and go rarely. */
#ifndef CG_BACKENDS_NCCL_WINDOWS_H
#define CG_BACKENDS_NCCL_WINDOWS_H

#include <stddef.h>

#include "commgraph/types.h"

/* The dtypes whose allreduce has a measured cut-over: float32, float16,
 * bfloat16 (NCCL's symmetric kernels reduce floating point only). */
#define CG_NCCL_SYMMETRIC_DTYPES 3
/* The allreduce sizes whose times are measured (nccl_cutover.h,
 * nccl_oneshot.h): 1 KB << i for i below this. */
#define CG_NCCL_MEASURED_SIZES 14
#define CG_NCCL_MEASURED_MIN_BYTES ((size_t)1 << 10)

typedef struct cg_nccl_window {
  const char *base;
  size_t bytes;
  char *plain; /* the same memory through a mapping NCCL has no window for; NULL: none */
  /* per CG_NCCL_SYMMETRIC_DTYPES: the largest allreduce (bytes per rank)
   * that takes the symmetric kernels; larger ones go through `plain` */
  size_t symmetric_max[CG_NCCL_SYMMETRIC_DTYPES];
  /* [dtype][i]: the symmetric kernels' time over the plain ones' for an
   * allreduce of the measured size i (the slowest rank's); 0: not measured */
  double symmetric_ratio[CG_NCCL_SYMMETRIC_DTYPES][CG_NCCL_MEASURED_SIZES];
} cg_nccl_window_t;

typedef struct cg_nccl_windows {
  cg_nccl_window_t *list;
  size_t n, cap;
} cg_nccl_windows_t;

/* What a collective's buffers take. */
typedef enum cg_nccl_path {
  CG_NCCL_PATH_ORDINARY,  /* not both in symmetric windows: as on any memory */
  CG_NCCL_PATH_SYMMETRIC, /* both in windows: NCCL's symmetric kernels where it has them */
  CG_NCCL_PATH_PLAIN,     /* both in windows, above the cut-over: through the plain views */
} cg_nccl_path_t;

/* The index of `dtype` in symmetric_max; -1 for the others. */
int cg_nccl_symmetric_dtype(cg_dtype_t dtype);

/* Makes room for one more window; 0 when out of memory. */
int cg_nccl_windows_reserve(cg_nccl_windows_t *w);
/* Adds `window` (copied); 0 when out of memory, which cannot happen after
 * cg_nccl_windows_reserve. A window missing on one rank would route its
 * collectives alone: cg_nccl_arena_create reserves before the ranks agree. */
int cg_nccl_windows_add(cg_nccl_windows_t *w, const cg_nccl_window_t *window);
/* Drops the window at `base`. */
void cg_nccl_windows_remove(cg_nccl_windows_t *w, const void *base);
/* The path of a collective of `kind` reading send_bytes
 * at *send and writing recv_bytes at *recv, `bytes` per rank of `dtype`; for
 * CG_NCCL_PATH_PLAIN *send and *recv are moved to the plain views. Only
 * allreduces have a cut-over: allgather and reduce_scatter in windows always
 * take the symmetric path. */
cg_nccl_path_t cg_nccl_windows_route(const void **send, void **recv, const cg_nccl_windows_t *w, size_t send_bytes,
                                     size_t recv_bytes, cg_node_kind_t kind, cg_dtype_t dtype, size_t bytes);
/* For an allreduce of `bytes` per rank of `dtype` from send to recv, both in
 * windows and below their cut-over: the windows' measured symmetric_ratio
 * at the measured size that holds it (the larger of the two windows'); 0
 * where either was not measured. */
double cg_nccl_windows_symmetric_ratio(const cg_nccl_windows_t *w, const void *send, const void *recv,
                                       cg_dtype_t dtype, size_t bytes);
/* The measured size that holds an allreduce of `bytes` (the last for larger). */
int cg_nccl_measured_index(size_t bytes);
/* Frees the list (the communicator goes). */
void cg_nccl_windows_free(cg_nccl_windows_t *w);

#endif
