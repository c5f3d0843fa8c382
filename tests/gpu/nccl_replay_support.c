/* The helpers the nccl_replay suite's two files share (nccl_replay_support.h
 * says what they are for): seeds per replay, copies and poison on the
 * suite's stream, and the check of one allreduce's output. */
#include <stdlib.h>

#include "gpu_kernels.h"
#include "gpu_test.h"
#include "nccl_replay_support.h"

uint64_t replay_seed(int k) { return cg_test_seed() ^ ((uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull); }

void replay_to_host(void *host, const void *dev, size_t bytes) {
  CUDA_OK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, cg_gpu_stream()));
}
void replay_poison(void *dev, size_t bytes) {
  CUDA_OK(cudaMemsetAsync(dev, CG_MPI_POISON, bytes, cg_gpu_stream()));
}

int replay_sum_right(const int32_t *y, uint64_t seed) {
  int32_t *h = malloc(SN * 4);
  ck_assert_ptr_nonnull(h);
  CUDA_OK(cudaMemcpy(h, y, SN * 4, cudaMemcpyDeviceToHost));
  int ok = 1;
  for (int i = 0; i < SN; i++) ok &= h[i] == cg_gpu_value_sum(seed, 0, cg_gpu_size(), (uint64_t)i);
  free(h);
  return ok;
}

void replay_poison_now(void *dev, size_t bytes) {
  CUDA_OK(cudaMemset(dev, CG_MPI_POISON, bytes));
  CUDA_OK(cudaDeviceSynchronize());
}
