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
/* With the watchdog (else NULL): the holder adds 1 to the count of replays
 * that took the lock once it has it, and to the count that let it go before
 * it does; a replay of an embedded plan is in flight while they differ. Each
 * count lives in device memory (*_tally) and is shown in mapped host memory
 * (entered, left), where the monitor reads it. */
cudaError_t cg_plan_lock_launch(unsigned *word, unsigned *entered_tally, unsigned *entered, cudaStream_t stream);
/* The watchdog's progress marks: once the stream's earlier work is done, one
 * thread adds 1 to the count of each step in the list (tally: device memory,
 * shown: mapped host memory, indexed by step). */
#define CG_MARKS_PER_KERNEL 32
typedef struct cg_mark_list {
  unsigned n;
  unsigned slot[CG_MARKS_PER_KERNEL];
} cg_mark_list_t;
/* The unlock also counts the replay's end marks (`ends`, indexed into the
 * marks' tally and shown; n = 0 for none) before the replay's count out. */
cudaError_t cg_plan_unlock_launch(unsigned *word, unsigned *left_tally, unsigned *left, unsigned *tally,
                                  unsigned *shown, const cg_mark_list_t *ends, cudaStream_t stream);
cudaError_t cg_progress_marks_launch(unsigned *tally, unsigned *shown, const cg_mark_list_t *list,
                                     cudaStream_t stream);
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
