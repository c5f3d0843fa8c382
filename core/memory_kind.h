/* Where a buffer lives, asked of the CUDA driver without creating a context,
 * and whether a communicator on a given device can use it. Backends point
 * their communicators' `memory_fits` at cg_memory_fits, so recording and
 * rebinding refuse a buffer the communicator's steps could not touch. */
#ifndef CG_SCHED_MEMORY_KIND_H
#define CG_SCHED_MEMORY_KIND_H

#include <stddef.h>
#include <stdint.h>

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

/* NCCL reads user data in 16-byte units (NVIDIA/nccl#265): the last unit of
 * a buffer whose size is not a multiple of 16 is read whole, up to 15 bytes
 * past the buffer's end. The extra bytes are never used and lie in the same
 * aligned 16 bytes, so the results are right, but compute-sanitizer's
 * memcheck reports the read as out of bounds when the buffer ends its CUDA
 * allocation. Memory the library allocates for collectives and copies is
 * therefore padded (docs/safety.md). */
#define CG_READ_PAD 16

/* The size to allocate for a buffer of `bytes`: a multiple of CG_READ_PAD
 * with room for a CG_READ_PAD-byte read that starts at the buffer's last
 * byte (aligned or not), so no such read leaves the allocation. 0 stays 0.
 * SIZE_MAX when that does not fit in size_t (SIZE_MAX is no multiple of 16,
 * so callers can tell). The one place that pads: use it at every site. */
static inline size_t cg_pad16(size_t bytes) {
  if (!bytes) return 0;
  if (bytes > SIZE_MAX - 2 * (CG_READ_PAD - 1)) return SIZE_MAX;
  return (bytes + 2 * (CG_READ_PAD - 1)) & ~(size_t)(CG_READ_PAD - 1);
}

#endif
