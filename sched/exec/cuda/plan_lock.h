/* The embedded plan's lock (plan_lock.cu): enqueue taking and releasing a
 * word of device memory (0: free) on `stream`; the watchdog's progress
 * marks and the profiling time stamps, the other one-thread kernels of a
 * plan. */
#ifndef CG_SCHED_PLAN_LOCK_H
#define CG_SCHED_PLAN_LOCK_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif
/* With the watchdog (entered, left: mapped host memory, else NULL), the
 * holder adds 1 to *entered once it has the lock and to *left before it lets
 * it go: a replay of an embedded plan is in flight while they differ. */
cudaError_t cg_plan_lock_launch(unsigned *word, unsigned *entered, cudaStream_t stream);
cudaError_t cg_plan_unlock_launch(unsigned *word, unsigned *left, cudaStream_t stream);
/* The watchdog's progress mark: one thread adds 1 to `slot` (mapped host
 * memory) once the stream's earlier work is done. */
cudaError_t cg_progress_mark_launch(unsigned *slot, cudaStream_t stream);
/* The replay's fingerprint: where the 16-byte entries of `all` (ranks of
 * them, device memory) differ, one thread copies them to `seen` and sets
 * *flag to 1 (both mapped host memory). */
cudaError_t cg_fingerprint_check_launch(const void *all, int ranks, unsigned *flag, void *seen, cudaStream_t stream);
/* Profiling: one thread writes the GPU's nanosecond clock (%globaltimer)
 * into `slot` once the stream's earlier work is done. */
cudaError_t cg_time_stamp_launch(unsigned long long *slot, cudaStream_t stream);
#ifdef __cplusplus
}
#endif

#endif
