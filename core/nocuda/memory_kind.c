/* Buffer placement (memory_kind.h) in a build without CUDA: no device
 * memory can exist, so every buffer is pageable host memory. */
#include "memory_kind.h"

#include <stdio.h>

#include "commgraph/comm.h"

void cg_memory_locate(cg_memory_kind_t *kind, int *device, const void *ptr) {
  (void)ptr;
  *kind = CG_MEMORY_HOST;
  *device = -1;
}

int cg_memory_fits(int device, const void *ptr, char *why, size_t why_size) {
  (void)device;
  (void)ptr;
  (void)why;
  (void)why_size;
  return 0;
}

int cg_memory_one_allocation(const void *ptr, size_t bytes) {
  (void)ptr;
  (void)bytes;
  return 1;
}
