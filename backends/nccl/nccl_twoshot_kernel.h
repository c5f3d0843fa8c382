/* The two-shot allreduce kernel's launch (nccl_twoshot_kernel.cu) and the
 * layout of its area in each rank's staging, which every peer maps
 * (nccl_oneshot.c puts it after the one-shot kernel's buffers): two buffers,
 * used by alternate calls (the same epochs as the one-shot kernel's), each of
 * a scatter part and a gather part of one slot per rank. A slot holds a
 * rank's share of a message of CG_TWOSHOT_MAX_BYTES at most (1/ranks of it,
 * rounded up to 16 bytes), all-ones bytes (the sentinel) where nothing has
 * arrived. Rank r's scatter slot `from` receives rank from's input for r's
 * share; its gather slot `from` receives the reduced share of rank from. */
#ifndef CG_BACKENDS_NCCL_TWOSHOT_KERNEL_H
#define CG_BACKENDS_NCCL_TWOSHOT_KERNEL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "nccl_oneshot_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CG_TWOSHOT_MAX_BYTES ((size_t)8 << 20)
/* bytes of one slot, of the area, on a communicator of `ranks` */
#define CG_TWOSHOT_SLOT_BYTES(ranks) (((CG_TWOSHOT_MAX_BYTES + (size_t)(ranks) - 1) / (size_t)(ranks) + 15) / 16 * 16)
#define CG_TWOSHOT_STAGING_BYTES(ranks) (4 * (size_t)(ranks) * CG_TWOSHOT_SLOT_BYTES(ranks))

/* An allreduce of args->count elements of the dtype (CG_ONESHOT_FLOAT32 ...),
 * in place or not, at most CG_TWOSHOT_MAX_BYTES; args->peers[r] is rank r's
 * two-shot area as this rank maps it, args->epochs the one-shot kernel's. */
cudaError_t cg_twoshot_launch(const cg_oneshot_args_t *args, int dtype_index, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
