/* The embed suite's helpers that more than one of its files calls: making
 * streams, events and device counters, poisoning and checking buffers,
 * instantiating the user's graphs. Declared in embed_support.h. */
#include "embed_support.h"

/* The base seed of one stream of test data. */
uint64_t embed_base_seed(uint64_t salt) { return cg_test_seed() ^ (salt + 1) * 0xD6E8FEB86659FD93ull; }

cudaStream_t embed_new_stream(void) {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

cudaEvent_t embed_new_event(void) {
  cudaEvent_t e;
  CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

counters_t embed_counters_new(void) {
  counters_t c;
  CUDA_OK(cudaMalloc((void **)&c.round, sizeof *c.round));
  CUDA_OK(cudaMalloc((void **)&c.bad, 2 * sizeof *c.bad));
  CUDA_OK(cudaMemset(c.round, 0, sizeof *c.round));
  CUDA_OK(cudaMemset(c.bad, 0, sizeof *c.bad));
  CUDA_OK(cudaMemset(c.bad + 1, 0xFF, sizeof *c.bad));
  CUDA_OK(cudaDeviceSynchronize());
  return c;
}

void embed_counters_free(counters_t *c) {
  cg_gpu_free(c->round);
  cg_gpu_free(c->bad);
}

/* Synchronizes the device, then asserts on every rank that `replays` replays
 * ran and no checking kernel found a wrong element. */
void embed_expect_clean(const counters_t *c, unsigned long long replays, const char *what) {
  unsigned long long round = 0, bad[2] = {0, 0};
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(&round, c->round, sizeof round, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(bad, c->bad, sizeof bad, cudaMemcpyDeviceToHost));
  char text[600];
  snprintf(text, sizeof text,
           "%s: rank %d: %llu replays ran (%llu expected); %llu wrong elements, first in replay %lld", what,
           cg_gpu_rank(), round, replays, bad[0], bad[0] ? (long long)bad[1] : -1ll);
  ck_assert_all_ranks(round == replays && bad[0] == 0, text);
}

/* 1 if the n int32 at p are the sum over ranks of replay k's values under base. */
int embed_holds_sum(const int32_t *p, size_t n, uint64_t base, unsigned long long k) {
  int32_t *h = malloc(n * sizeof *h);
  ck_assert_ptr_nonnull(h);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(h, p, n * sizeof *h, cudaMemcpyDeviceToHost));
  uint64_t seed = cg_gpu_round_seed(base, k);
  int ok = 1;
  for (size_t i = 0; i < n && ok; i++) ok = h[i] == cg_gpu_value_sum(seed, 0, cg_gpu_size(), i);
  free(h);
  return ok;
}

void embed_poison_async(void *p, size_t bytes, cudaStream_t s) {
  CUDA_OK(cudaMemsetAsync(p, CG_MPI_POISON, bytes, s));
}

cudaGraphExec_t embed_instantiate(cudaGraph_t g) {
  cudaGraphExec_t exec = NULL;
  cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  char text[300];
  snprintf(text, sizeof text, "cudaGraphInstantiate of the user's graph: %s", cudaGetErrorString(e));
  ck_assert_all_ranks(e == cudaSuccess, text);
  return exec;
}

/* A memset node writing the poison pattern, after deps[0 .. n_deps). */
cudaGraphNode_t embed_add_poison_node(cudaGraph_t g, void *p, size_t bytes, const cudaGraphNode_t *deps,
                                       size_t n_deps) {
  struct cudaMemsetParams m = {.dst = p, .pitch = 0, .value = CG_MPI_POISON, .elementSize = 1, .width = bytes,
                               .height = 1};
  cudaGraphNode_t node;
  CUDA_OK(cudaGraphAddMemsetNode(&node, g, deps, n_deps, &m));
  return node;
}

/* 1 if CG_FUSION=0 turned bucket fusion off, so that no bucket is expected. */
int embed_fusion_disabled(void) {
  const char *v = getenv("CG_FUSION");
  return v && strcmp(v, "0") == 0;
}
