/* cg_cuda_stream_wait (core/cuda/stream_wait.c), the polled wait a compile's
 * warm-up uses so that work waiting for a rank that never comes cannot hold
 * it for ever: on one GPU, a stream held by a host function that waits for
 * the test's word (what NCCL's kernels do while a peer is missing), then a
 * memset of a random value behind it. Skips (exit 77, reason printed)
 * without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdlib.h>

#include "stream_wait.h"
#include "test_support.h"

static atomic_int released;

/* Holds the stream until the test releases it (bounded, so a failed test
 * cannot leave the process stuck). */
static void held(void *arg) {
  (void)arg;
  double until = cg_test_now_s() + 30;
  while (!atomic_load(&released) && cg_test_now_s() < until) cg_test_nap(0.0005);
}

typedef struct patience {
  double until; /* cg_test_now_s() at which it gives up; 0: never */
  int calls;
} patience_t;

static int go_on(void *ctx) {
  patience_t *p = ctx;
  p->calls++;
  return !p->until || cg_test_now_s() < p->until;
}

/* n words set to a random value behind the held host function; returns it. */
static unsigned queue_held_memset(cudaStream_t stream, unsigned *dev, size_t n) {
  unsigned byte = 1 + (unsigned)cg_test_below(255); /* cudaMemsetAsync sets bytes */
  atomic_store(&released, 0);
  CUDA_OK(cudaMemsetAsync(dev, 0, n * sizeof *dev, stream));
  CUDA_OK(cudaLaunchHostFunc(stream, held, NULL));
  CUDA_OK(cudaMemsetAsync(dev, (int)byte, n * sizeof *dev, stream));
  return byte * 0x01010101u;
}

static size_t words_not(const unsigned *dev, size_t n, unsigned value) {
  unsigned *host = malloc(n * sizeof *host);
  ck_assert_ptr_nonnull(host);
  for (size_t i = 0; i < n; i++) host[i] = ~value; /* poisoned */
  CUDA_OK(cudaMemcpy(host, dev, n * sizeof *host, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += host[i] != value;
  free(host);
  return wrong;
}

START_TEST(stream_wait__gives_up_when_told_and_leaves_the_work_queued) {
  const size_t n = 1 + cg_test_below(1 << 16);
  unsigned *dev;
  cudaStream_t stream;
  CUDA_OK(cudaMalloc((void **)&dev, n * sizeof *dev));
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  unsigned value = queue_held_memset(stream, dev, n);
  const double patience_s = 0.02 + 0.01 * (double)cg_test_below(5);
  double began = cg_test_now_s();
  patience_t p = {began + patience_s, 0};
  cg_wait_t wait = {go_on, &p};
  int gave_up = -1;
  cudaError_t err = cg_cuda_stream_wait(&gave_up, stream, &wait);
  double waited = cg_test_now_s() - began;
  ck_assert_int_eq(gave_up, 1);
  ck_assert_int_eq(err, cudaErrorNotReady);
  ck_assert_msg(waited >= patience_s && waited < patience_s + 5, "gave up after %g s (patience %g s)", waited,
                patience_s);
  ck_assert_msg(p.calls >= 2, "go_on asked %d times: the wait must poll", p.calls);
  ck_assert_int_eq(cudaStreamQuery(stream), cudaErrorNotReady); /* the work is still queued */
  atomic_store(&released, 1);
  patience_t forever = {0, 0};
  wait.ctx = &forever;
  gave_up = -1;
  ck_assert_int_eq(cg_cuda_stream_wait(&gave_up, stream, &wait), cudaSuccess);
  ck_assert_int_eq(gave_up, 0);
  ck_assert_uint_eq(words_not(dev, n, value), 0);
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(dev));
}
END_TEST

START_TEST(stream_wait__without_a_wait_synchronizes) {
  const size_t n = 1 + cg_test_below(1 << 16);
  unsigned *dev;
  cudaStream_t stream;
  CUDA_OK(cudaMalloc((void **)&dev, n * sizeof *dev));
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  unsigned value = queue_held_memset(stream, dev, n);
  atomic_store(&released, 1);
  int gave_up = -1;
  ck_assert_int_eq(cg_cuda_stream_wait(&gave_up, stream, NULL), cudaSuccess);
  ck_assert_int_eq(gave_up, 0);
  ck_assert_uint_eq(words_not(dev, n, value), 0);
  /* a wait that never gives up, on a stream already done: at once */
  patience_t forever = {0, 0};
  cg_wait_t wait = {go_on, &forever};
  ck_assert_int_eq(cg_cuda_stream_wait(&gave_up, stream, &wait), cudaSuccess);
  ck_assert_int_eq(gave_up, 0);
  ck_assert_int_eq(forever.calls, 0);
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(dev));
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("stream_wait");
  TCase *tc = tcase_create("stream_wait");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, stream_wait__gives_up_when_told_and_leaves_the_work_queued);
  tcase_add_test(tc, stream_wait__without_a_wait_synchronizes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_gpu_main(suite(), "stream_wait"); }
