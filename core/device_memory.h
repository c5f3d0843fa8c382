/* Device memory the library allocates for itself (bucket staging, copy
 * chunk tables, arenas): padded for NCCL's 16-byte reads (cg_pad16) with the
 * padding zeroed, so compute-sanitizer's initcheck sees those reads as reads
 * of initialized memory. Built from core/cuda/ or core/nocuda/. */
#ifndef CG_CORE_DEVICE_MEMORY_H
#define CG_CORE_DEVICE_MEMORY_H

#include <stddef.h>

#include "commgraph/status.h"

/* `bytes` (padded) on CUDA device `device`, the calling thread's current
 * device left as it was. `what` names the memory in the error detail
 * ("bucket staging"), after `where`. CG_ERR_NO_MEMORY when CUDA is out of
 * memory, CG_ERR_BACKEND on another CUDA error, CG_ERR_UNSUPPORTED in a
 * build without CUDA. */
cg_status_t cg_device_alloc(void **out, size_t bytes, int device, const char *what, const char *where);
/* Frees what cg_device_alloc gave (NULL: nothing). */
void cg_device_free(void *ptr, int device);
#endif
