/* The lock that keeps replays of one plan from overlapping once the plan has
 * been embedded in a user's graph (cuda_plan.c): every copy of the plan shares
 * its communicators and internal buffers, and CUDA orders launches of one
 * executable graph but not of different instances. One thread takes the word
 * before the plan's work starts and another releases it after the work ends;
 * kernel boundaries order the plan's work between them. */
#include "plan_lock.h"

/* The watchdog's counts: `tally` (device memory) holds them and `shown`
 * (mapped host memory) shows them to the monitor. Only one thread writes a
 * count at a time (the lock's holder, or the one replay of the plan running),
 * so plain increments of device memory, and a plain store to the host: no
 * read across the bus, no system fence, so the kernel ends without waiting
 * for PCIe. The monitor reads once a millisecond; a count that shows a few
 * microseconds late only makes the report later, never wrong. */
__device__ static void count_one(unsigned *tally, unsigned *shown) {
  if (!tally) return;
  unsigned now = tally[0] + 1u;
  tally[0] = now;
  *(volatile unsigned *)shown = now;
}

__global__ void cg_plan_lock_kernel(unsigned *word, unsigned *entered_tally, unsigned *entered) {
  while (atomicCAS(word, 0u, 1u) != 0u) __nanosleep(256);
  __threadfence();
  count_one(entered_tally, entered);
}

__global__ void cg_plan_unlock_kernel(unsigned *word, unsigned *left_tally, unsigned *left, unsigned *tally,
                                      unsigned *shown, cg_mark_list_t ends) {
  for (unsigned i = 0; i < ends.n; i++) count_one(&tally[ends.slot[i]], &shown[ends.slot[i]]);
  count_one(left_tally, left);
  __threadfence();
  atomicExch(word, 0u);
}

extern "C" cudaError_t cg_plan_lock_launch(unsigned *word, unsigned *entered_tally, unsigned *entered,
                                           cudaStream_t stream) {
  cg_plan_lock_kernel<<<1, 1, 0, stream>>>(word, entered_tally, entered);
  return cudaGetLastError();
}

extern "C" cudaError_t cg_plan_unlock_launch(unsigned *word, unsigned *left_tally, unsigned *left, unsigned *tally,
                                             unsigned *shown, const cg_mark_list_t *ends, cudaStream_t stream) {
  cg_plan_unlock_kernel<<<1, 1, 0, stream>>>(word, left_tally, left, tally, shown, *ends);
  return cudaGetLastError();
}

/* A unit's progress marks for the watchdog (cuda_capture.c): one kernel counts
 * every step of the list, so a unit of many steps is one node of the graph. */
__global__ void cg_progress_marks_kernel(unsigned *tally, unsigned *shown, cg_mark_list_t list) {
  for (unsigned i = 0; i < list.n; i++) count_one(&tally[list.slot[i]], &shown[list.slot[i]]);
}

extern "C" cudaError_t cg_progress_marks_launch(unsigned *tally, unsigned *shown, const cg_mark_list_t *list,
                                                cudaStream_t stream) {
  cg_progress_marks_kernel<<<1, 1, 0, stream>>>(tally, shown, *list);
  return cudaGetLastError();
}

/* The replay's fingerprint (device_fingerprint.c): `all` holds every rank's
 * 16 bytes, gathered on the communicator before the replay's collectives.
 * Where they differ, the ranks run different sequences: the gathered bytes
 * go to `seen` and *flag to 1 (mapped host memory), which the waiter or the
 * monitor reads. Written only then, so a later healthy replay keeps it. */
__global__ void cg_fingerprint_check_kernel(const unsigned long long *all, int ranks, unsigned *flag,
                                            unsigned long long *seen) {
  int differ = 0;
  for (int r = 1; r < ranks; r++) differ |= all[2 * r] != all[0] || all[2 * r + 1] != all[1];
  if (!differ) return;
  for (int i = 0; i < 2 * ranks; i++) ((volatile unsigned long long *)seen)[i] = all[i];
  __threadfence_system();
  *(volatile unsigned *)flag = 1u;
  __threadfence_system();
}

extern "C" cudaError_t cg_fingerprint_check_launch(const void *all, int ranks, unsigned *flag, void *seen,
                                                   cudaStream_t stream) {
  cg_fingerprint_check_kernel<<<1, 1, 0, stream>>>((const unsigned long long *)all, ranks, flag,
                                                   (unsigned long long *)seen);
  return cudaGetLastError();
}

/* Profiling replays (cg_plan_tune): one thread writes the GPU's global
 * nanosecond clock into `slot` once the stream's earlier work is done. */
__global__ void cg_time_stamp_kernel(unsigned long long *slot) {
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  *slot = now;
}

extern "C" cudaError_t cg_time_stamp_launch(unsigned long long *slot, cudaStream_t stream) {
  cg_time_stamp_kernel<<<1, 1, 0, stream>>>(slot);
  return cudaGetLastError();
}
