/* The one-shot allreduce kernel's launch (nccl_oneshot_kernel.cu) and the
 * layout of each rank's staging buffer, which every peer maps
 * (nccl_oneshot.c): two halves of CG_ONESHOT_HALF_BYTES, used by alternate
 * calls, then the flags, one per (block, rank) that the rank's block raises
 * to the call it has arrived at. */
#ifndef CG_BACKENDS_NCCL_ONESHOT_KERNEL_H
#define CG_BACKENDS_NCCL_ONESHOT_KERNEL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CG_ONESHOT_MAX_RANKS 8
#define CG_ONESHOT_BLOCKS 32
#define CG_ONESHOT_HALF_BYTES ((size_t)1 << 20)
#define CG_ONESHOT_FLAGS_OFFSET (2 * CG_ONESHOT_HALF_BYTES)
#define CG_ONESHOT_STAGING_BYTES (CG_ONESHOT_FLAGS_OFFSET + CG_ONESHOT_BLOCKS * CG_ONESHOT_MAX_RANKS * sizeof(unsigned))

/* the kernel's dtypes and reductions (accumulated in float32, rank order) */
enum { CG_ONESHOT_FLOAT32, CG_ONESHOT_FLOAT16, CG_ONESHOT_BFLOAT16, CG_ONESHOT_DTYPES };
enum { CG_ONESHOT_SUM, CG_ONESHOT_AVG, CG_ONESHOT_MIN, CG_ONESHOT_MAX, CG_ONESHOT_PROD };

typedef struct cg_oneshot_args {
  char *peers[CG_ONESHOT_MAX_RANKS]; /* every rank's staging as this rank maps it (its own included) */
  unsigned *epochs;                  /* device memory, one per block: the last call it finished */
  const volatile unsigned *aborted;  /* mapped host memory: set before the communicator's abort */
  const void *send;
  void *recv;
  size_t count; /* elements, at most CG_ONESHOT_HALF_BYTES of them in bytes */
  int rank, ranks;
  int op; /* CG_ONESHOT_SUM ... */
} cg_oneshot_args_t;

/* An allreduce of args->count elements of the dtype, in place or not. */
cudaError_t cg_oneshot_launch(const cg_oneshot_args_t *args, int dtype_index, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
