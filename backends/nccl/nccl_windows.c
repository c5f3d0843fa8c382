/* Symmetric windows per NCCL communicator: see nccl_windows.h. */
#include "nccl_windows.h"

#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

static mtx_t windows_lock;
static once_flag windows_once = ONCE_FLAG_INIT;
static void init_lock(void) { mtx_init(&windows_lock, mtx_plain); }

int cg_nccl_symmetric_dtype(cg_dtype_t dtype) {
  switch (dtype) {
    case CG_FLOAT32: return 0;
    case CG_FLOAT16: return 1;
    case CG_BFLOAT16: return 2;
    default: return -1;
  }
}

/* Room for one more; under the lock. */
static int make_room(cg_nccl_windows_t *w) {
  if (w->n < w->cap) return 1;
  size_t cap = w->cap ? 2 * w->cap : 4;
  cg_nccl_window_t *grown = realloc(w->list, cap * sizeof *grown);
  if (!grown) return 0;
  w->list = grown, w->cap = cap;
  return 1;
}

int cg_nccl_windows_reserve(cg_nccl_windows_t *w) {
  call_once(&windows_once, init_lock);
  mtx_lock(&windows_lock);
  int ok = make_room(w);
  mtx_unlock(&windows_lock);
  return ok;
}

int cg_nccl_windows_add(cg_nccl_windows_t *w, const cg_nccl_window_t *window) {
  call_once(&windows_once, init_lock);
  mtx_lock(&windows_lock);
  int ok = make_room(w);
  if (ok) w->list[w->n++] = *window;
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

/* The window [ptr, ptr + bytes) lies inside; NULL if none. Under the lock. */
static const cg_nccl_window_t *holder(const cg_nccl_windows_t *w, const void *ptr, size_t bytes) {
  uintptr_t p = (uintptr_t)ptr;
  for (size_t i = 0; i < w->n; i++) {
    uintptr_t b = (uintptr_t)w->list[i].base;
    if (p >= b && p - b <= w->list[i].bytes && bytes <= w->list[i].bytes - (p - b)) return &w->list[i];
  }
  return NULL;
}

cg_nccl_path_t cg_nccl_windows_route(const void **send, void **recv, const cg_nccl_windows_t *w, size_t send_bytes,
                                     size_t recv_bytes, cg_node_kind_t kind, cg_dtype_t dtype, size_t bytes) {
  cg_nccl_path_t path = CG_NCCL_PATH_ORDINARY;
  if (kind != CG_NODE_ALLREDUCE && kind != CG_NODE_ALLGATHER && kind != CG_NODE_REDUCE_SCATTER) return path;
  call_once(&windows_once, init_lock);
  mtx_lock(&windows_lock);
  const cg_nccl_window_t *in = holder(w, *send, send_bytes), *out = holder(w, *recv, recv_bytes);
  int d = cg_nccl_symmetric_dtype(dtype);
  if (in && out) {
    path = CG_NCCL_PATH_SYMMETRIC;
    if (kind == CG_NODE_ALLREDUCE && d >= 0 && in->plain && out->plain &&
        (bytes > in->symmetric_max[d] || bytes > out->symmetric_max[d])) {
      path = CG_NCCL_PATH_PLAIN;
      *send = in->plain + ((const char *)*send - in->base);
      *recv = out->plain + ((char *)*recv - out->base);
    }
  }
  mtx_unlock(&windows_lock);
  return path;
}

int cg_nccl_measured_index(size_t bytes) {
  int i = 0;
  while (i + 1 < CG_NCCL_MEASURED_SIZES && (CG_NCCL_MEASURED_MIN_BYTES << i) < bytes) i++;
  return i;
}

double cg_nccl_windows_symmetric_ratio(const cg_nccl_windows_t *w, const void *send, const void *recv,
                                       cg_dtype_t dtype, size_t bytes) {
  int d = cg_nccl_symmetric_dtype(dtype), i = cg_nccl_measured_index(bytes);
  double ratio = 0;
  if (d < 0) return 0;
  call_once(&windows_once, init_lock);
  mtx_lock(&windows_lock);
  const cg_nccl_window_t *in = holder(w, send, bytes), *out = holder(w, recv, bytes);
  if (in && out && in->symmetric_ratio[d][i] > 0 && out->symmetric_ratio[d][i] > 0)
    ratio = in->symmetric_ratio[d][i] > out->symmetric_ratio[d][i] ? in->symmetric_ratio[d][i]
                                                                    : out->symmetric_ratio[d][i];
  mtx_unlock(&windows_lock);
  return ratio;
}

void cg_nccl_windows_free(cg_nccl_windows_t *w) {
  free(w->list);
  *w = (cg_nccl_windows_t){0};
}
