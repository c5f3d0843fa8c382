/* Symmetric windows per NCCL communicator: see nccl_windows.h. */
#include "nccl_windows.h"

#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

static mtx_t windows_lock;
static once_flag windows_once = ONCE_FLAG_INIT;
static void init_lock(void) { mtx_init(&windows_lock, mtx_plain); }

int cg_nccl_windows_add(cg_nccl_windows_t *w, const void *base, size_t bytes) {
  int ok = 1;
  call_once(&windows_once, init_lock);
  mtx_lock(&windows_lock);
  if (w->n == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 4;
    cg_nccl_window_t *grown = realloc(w->list, cap * sizeof *grown);
    if (grown) w->list = grown, w->cap = cap;
    else ok = 0;
  }
  if (ok) w->list[w->n++] = (cg_nccl_window_t){base, bytes};
  mtx_unlock(&windows_lock);
  return ok;
}

void cg_nccl_windows_remove(cg_nccl_windows_t *w, const void *base) {
  call_once(&windows_once, init_lock);
  mtx_lock(&windows_lock);
  for (size_t i = 0; i < w->n; i++)
    if (w->list[i].base == base) {
      w->list[i] = w->list[--w->n];
      break;
    }
  mtx_unlock(&windows_lock);
}

int cg_nccl_windows_hold(const cg_nccl_windows_t *w, const void *ptr, size_t bytes) {
  int held = 0;
  uintptr_t p = (uintptr_t)ptr;
  call_once(&windows_once, init_lock);
  mtx_lock(&windows_lock);
  for (size_t i = 0; i < w->n && !held; i++) {
    uintptr_t b = (uintptr_t)w->list[i].base;
    held = p >= b && p - b <= w->list[i].bytes && bytes <= w->list[i].bytes - (p - b);
  }
  mtx_unlock(&windows_lock);
  return held;
}

void cg_nccl_windows_free(cg_nccl_windows_t *w) {
  free(w->list);
  *w = (cg_nccl_windows_t){0};
}
