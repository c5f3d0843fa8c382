/* The embedded plan's lock (plan_lock.cu): enqueue taking and releasing a
 * word of device memory (0: free) on `stream`; and the watchdog's progress
 * marks, the other one-thread kernel of a plan. */
#ifndef CG_SCHED_PLAN_LOCK_H
#define CG_SCHED_PLAN_LOCK_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif
cudaError_t cg_plan_lock_launch(unsigned *word, cudaStream_t stream);
cudaError_t cg_plan_unlock_launch(unsigned *word, cudaStream_t stream);
/* The watchdog's progress mark: one thread adds 1 to `slot` (mapped host
 * memory) once the stream's earlier work is done. */
cudaError_t cg_progress_mark_launch(unsigned *slot, cudaStream_t stream);
#ifdef __cplusplus
}
#endif

#endif
