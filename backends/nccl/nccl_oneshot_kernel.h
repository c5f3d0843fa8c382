/* The one-shot allreduce kernel's launch (nccl_oneshot_kernel.cu) and the
 * layout of each rank's staging buffer, which every peer maps
 * (nccl_oneshot.c): two buffers, used by alternate calls, each of one slot of
 * CG_ONESHOT_MAX_BYTES per rank, into which that rank writes its input. A
 * slot holds all-ones bytes where nothing has arrived (the sentinel): it is
 * filled with them when allocated and again by the kernel that read it. */
#ifndef CG_BACKENDS_NCCL_ONESHOT_KERNEL_H
#define CG_BACKENDS_NCCL_ONESHOT_KERNEL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CG_ONESHOT_MAX_RANKS 8
#define CG_ONESHOT_MAX_BLOCKS 128 /* the epoch counters: at least the grid's blocks (nccl_lamport.cuh) */
#define CG_ONESHOT_MAX_BYTES ((size_t)1 << 20)
#define CG_ONESHOT_SENTINEL_BYTE 0xff
/* bytes of staging per rank on a communicator of `ranks` */
#define CG_ONESHOT_STAGING_BYTES(ranks) (2 * (size_t)(ranks) * CG_ONESHOT_MAX_BYTES)

/* the kernel's dtypes and reductions (accumulated in float32, rank order) */
enum { CG_ONESHOT_FLOAT32, CG_ONESHOT_FLOAT16, CG_ONESHOT_BFLOAT16, CG_ONESHOT_DTYPES };
enum { CG_ONESHOT_SUM, CG_ONESHOT_AVG, CG_ONESHOT_MIN, CG_ONESHOT_MAX, CG_ONESHOT_PROD };

typedef struct cg_oneshot_args {
  char *peers[CG_ONESHOT_MAX_RANKS]; /* every rank's staging as this rank maps it (its own included) */
  unsigned *epochs;                  /* device memory, CG_ONESHOT_MAX_BLOCKS of them: the calls finished */
  const volatile unsigned *aborted;  /* mapped host memory: set before the communicator's abort */
  const void *send;
  void *recv;
  size_t count; /* elements, at most CG_ONESHOT_MAX_BYTES of them in bytes */
  int rank, ranks;
  int op; /* CG_ONESHOT_SUM ... */
} cg_oneshot_args_t;

/* An allreduce of args->count elements of the dtype, in place or not. */
cudaError_t cg_oneshot_launch(const cg_oneshot_args_t *args, int dtype_index, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
