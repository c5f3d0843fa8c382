/* The lock that keeps replays of one plan from overlapping once the plan has
 * been embedded in a user's graph (cuda_plan.c): every copy of the plan shares
 * its communicators and internal buffers, and CUDA orders launches of one
 * executable graph but not of different instances. One thread takes the word
 * before the plan's work starts and another releases it after the work ends;
 * kernel boundaries order the plan's work between them. */
#include "plan_lock.h"

/* `count` (mapped host memory, may be NULL): a count of the watchdog's that
 * only the lock's holder writes, so a plain increment. No system fence: the
 * monitor reads it once a millisecond, and the replay's path must not wait
 * for the write to cross the bus. */
__device__ static void count_one(unsigned *count) {
  if (!count) return;
  volatile unsigned *v = count;
  *v = *v + 1u;
}

__global__ void cg_plan_lock_kernel(unsigned *word, unsigned *entered) {
  while (atomicCAS(word, 0u, 1u) != 0u) __nanosleep(256);
  __threadfence();
  count_one(entered);
}

__global__ void cg_plan_unlock_kernel(unsigned *word, unsigned *left) {
  count_one(left);
  __threadfence();
  atomicExch(word, 0u);
}

extern "C" cudaError_t cg_plan_lock_launch(unsigned *word, unsigned *entered, cudaStream_t stream) {
  cg_plan_lock_kernel<<<1, 1, 0, stream>>>(word, entered);
  return cudaGetLastError();
}

extern "C" cudaError_t cg_plan_unlock_launch(unsigned *word, unsigned *left, cudaStream_t stream) {
  cg_plan_unlock_kernel<<<1, 1, 0, stream>>>(word, left);
  return cudaGetLastError();
}

/* A step's progress mark for the watchdog (cuda_plan.c): the host reads the
 * count to learn which steps of the current replay are done. */
__global__ void cg_progress_mark_kernel(unsigned *slot) {
  /* one writer at a time (replays of a plan run one after the other), so a
   * plain increment; atomics on host memory over PCIe may not be supported */
  volatile unsigned *v = slot;
  *v = *v + 1u;
  __threadfence_system();
}

extern "C" cudaError_t cg_progress_mark_launch(unsigned *slot, cudaStream_t stream) {
  cg_progress_mark_kernel<<<1, 1, 0, stream>>>(slot);
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
