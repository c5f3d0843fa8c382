#include "cuda_thread.h"

#include <pthread.h>

int cg_cuda_thread_start_detached(void *(*fn)(void *), void *arg) {
  pthread_t thread;
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return 0;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int started = pthread_create(&thread, &attr, fn, arg) == 0;
  pthread_attr_destroy(&attr);
  return started;
}

enum cudaStreamCaptureMode cg_cuda_thread_relax_capture(void) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  return mode;
}
