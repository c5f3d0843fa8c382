/* The symmetric windows registered on an NCCL communicator (nccl_arena.c),
 * so that the plan's DOT can say which collectives lie in one
 * (cg_nccl_step_call). One process-wide lock guards every communicator's
 * list: arenas come and go rarely. */
#ifndef CG_BACKENDS_NCCL_WINDOWS_H
#define CG_BACKENDS_NCCL_WINDOWS_H

#include <stddef.h>

typedef struct cg_nccl_window {
  const char *base;
  size_t bytes;
} cg_nccl_window_t;

typedef struct cg_nccl_windows {
  cg_nccl_window_t *list;
  size_t n, cap;
} cg_nccl_windows_t;

/* Adds [base, base + bytes); 0 when out of memory (the window then goes
 * unnamed in DOT, nothing else). */
int cg_nccl_windows_add(cg_nccl_windows_t *w, const void *base, size_t bytes);
/* Drops the window at `base`. */
void cg_nccl_windows_remove(cg_nccl_windows_t *w, const void *base);
/* Whether [ptr, ptr + bytes) lies inside one window. */
int cg_nccl_windows_hold(const cg_nccl_windows_t *w, const void *ptr, size_t bytes);
/* Frees the list (the communicator goes). */
void cg_nccl_windows_free(cg_nccl_windows_t *w);

#endif
