/* Device plans' bucket copies (bucket_cuda.c): each pack and unpack is one
 * launch of the batched copy kernel (bucket_copy.cu) over a chunk table in
 * device memory. */
#ifndef CG_SCHED_BUCKET_CUDA_H
#define CG_SCHED_BUCKET_CUDA_H

#include "plan_internal.h"

/* Builds a device plan's chunk tables for every bucket's copies (the
 * executor's prepare_buckets). */
cg_status_t cg_cuda_bucket_tables(cg_plan_t *p, const char *where);
/* Enqueues a pack or unpack step's copies on `stream` (one kernel; nothing when
 * it has no copies). */
cg_status_t cg_cuda_bucket_copy(const cg_plan_t *p, const cg_step_t *step, void *stream, const char *where);

#endif
