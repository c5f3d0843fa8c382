#include "stream_wait.h"

#include "clock.h"

cudaError_t cg_cuda_stream_wait(int *gave_up, cudaStream_t stream, const cg_wait_t *wait) {
  *gave_up = 0;
  if (!wait || !wait->go_on) return cudaStreamSynchronize(stream);
  uint64_t began = cg_clock_ns();
  for (;;) {
    cudaError_t err = cudaStreamQuery(stream);
    if (err != cudaErrorNotReady) return err;
    if (!cg_wait_go_on(wait)) {
      *gave_up = 1;
      return cudaErrorNotReady;
    }
    cg_poll_pause(began);
  }
}

cudaError_t cg_cuda_stream_wait_for(cudaStream_t stream, double timeout_s) {
  cg_deadline_t deadline;
  cg_deadline_start(&deadline, timeout_s, NULL, NULL, "");
  const cg_wait_t wait = {cg_deadline_go_on, &deadline};
  int gave_up = 0;
  return cg_cuda_stream_wait(&gave_up, stream, &wait);
}
