/* The library's own threads that make CUDA calls (the watchdog's monitor and
 * handler, communicator aborts): started detached, and in relaxed capture
 * mode so that their calls never invalidate a capture the program runs in
 * global mode on another thread. */
#ifndef CG_CORE_CUDA_THREAD_H
#define CG_CORE_CUDA_THREAD_H

#include <cuda_runtime_api.h>

/* Runs fn(arg) on a detached thread of its own; 0 if none could be started. */
int cg_cuda_thread_start_detached(void *(*fn)(void *), void *arg);
/* Puts the calling thread in relaxed capture mode: its CUDA calls
 * (cudaEventQuery, cudaSetDevice, aborts) are not the "potentially unsafe"
 * calls from another thread that would invalidate a capture in global mode,
 * PyTorch's torch.cuda.graph default (pytorch/pytorch#104555). Returns the
 * mode before, for cudaThreadExchangeStreamCaptureMode to restore. */
enum cudaStreamCaptureMode cg_cuda_thread_relax_capture(void);

#endif
