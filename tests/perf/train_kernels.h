/* bench_train's kernels (train_kernels.cu): the simulated backward pass, one
 * kernel per gradient, and the device-side result check. Callable from C. */
#ifndef TRAIN_KERNELS_H
#define TRAIN_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __CUDACC__
#define TRAIN_HD __host__ __device__
#else
#define TRAIN_HD
#endif

/* The backward kernel's grid: few blocks, so NCCL keeps its SMs. */
#define TRAIN_BLOCKS 4
#define TRAIN_THREADS 256

/* Element j of gradient `tensor` holds scale * train_value(tensor, j): scale is
 * rank + 1 after the backward kernel, ranks (ranks + 1) / 2 after the sum.
 * Small integers, so every sum is exact in float32. */
static inline TRAIN_HD float train_value(int tensor, size_t j) { return (float)(1 + tensor % 7 + (int)(j % 8)); }

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor's backward kernel on `stream` (TRAIN_BLOCKS blocks of
 * TRAIN_THREADS): each block takes its start from %globaltimer, writes its
 * share of grad[0 .. count) = scale * train_value(tensor, j), then spins until
 * `ns` nanoseconds after its start, and stores its start and end
 * (%globaltimer, ns) in stamps[2 * (tensor * TRAIN_BLOCKS + block)] and the word
 * after, when stamps is not NULL. Block 0 increments *act when act is not
 * NULL (the "activation" that chains one tensor's kernel to the next). The
 * kernel takes max(ns, its writes' time). Works inside a stream capture.
 * Returns the launch error. */
cudaError_t train_backward_launch(float *grad, size_t count, int tensor, float scale, unsigned long long ns,
                                  unsigned long long *stamps, unsigned int *act, cudaStream_t stream);

/* Adds to wrong[0] the number of elements of grad[0 .. count) that differ from
 * scale * train_value(tensor, j); the first wrong element found sets wrong[1]
 * to tensor << 40 | j (j < 2^40) and wrong[2] to the bits of its value. */
cudaError_t train_check_launch(const float *grad, size_t count, int tensor, float scale, unsigned long long *wrong,
                               cudaStream_t stream);

/* The smallest step of %globaltimer seen by one thread over a few thousand
 * reads, in ns (0 if it never moved); synchronizes the device. */
cudaError_t train_timer_resolution(unsigned long long *ns);

#ifdef __cplusplus
}
#endif

#endif
