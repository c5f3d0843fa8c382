/* Where a buffer lives, asked of the CUDA driver without creating a context,
 * and whether a communicator on a given device can use it. Backends point
 * their communicators' `memory_fits` at cg_memory_fits, so recording and
 * rebinding refuse a buffer the communicator's steps could not touch. */
#ifndef CG_SCHED_MEMORY_KIND_H
#define CG_SCHED_MEMORY_KIND_H

#include <stddef.h>

typedef enum cg_memory_kind {
  CG_MEMORY_HOST,    /* not known to CUDA (or CUDA absent): pageable host memory */
  CG_MEMORY_PINNED,  /* host memory registered with or allocated by CUDA */
  CG_MEMORY_DEVICE,  /* memory of one GPU (`device`) */
  CG_MEMORY_MANAGED, /* unified memory, usable from the host and every GPU */
} cg_memory_kind_t;

/* *kind for `ptr`; *device is the GPU that holds CG_MEMORY_DEVICE memory,
 * -1 otherwise. Pageable host memory when no CUDA driver is present. */
void cg_memory_locate(cg_memory_kind_t *kind, int *device, const void *ptr);

/* 0 when a communicator on `device` (CG_DEVICE_HOST or a CUDA ordinal) can
 * read and write memory at `ptr`; -1 with the reason in `why` otherwise.
 * Host communicators refuse device memory; device communicators refuse
 * another GPU's memory and pageable host memory (unless the GPU reads
 * pageable memory itself). */
int cg_memory_fits(int device, const void *ptr, char *why, size_t why_size);

/* 1 when [ptr, ptr + bytes) lies inside one CUDA allocation, or in memory
 * CUDA does not know (nothing to split there); 0 when it crosses from one
 * allocation into another. Kernels read across neighbouring allocations, but
 * cudaMemcpy, IPC registration and CUDA-aware MPI take one allocation at a
 * time, so fusion runs a bucket in its members' own memory only inside one. */
int cg_memory_one_allocation(const void *ptr, size_t bytes);

#endif
