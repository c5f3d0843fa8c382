/* The one-shot allreduce kernel (nccl_oneshot.h): every rank writes its input
 * straight into its slot of every peer's staging over NVLink, and each rank
 * reduces, in rank order (the same bits on every rank), its own input and the
 * peers' slots of its own staging, in registers, as soon as they arrive.
 * No flag and no barrier: a slot holds the sentinel (all-ones bytes) until its
 * data has come, so the data are their own flag (a sentinel-initialized
 * buffer in the manner of Lamport), and the one crossing of NVLink per call
 * is the writes. An input lane that is all ones (a NaN) is sent as another
 * NaN. The reader puts the sentinel back once it has reduced a chunk: the
 * buffer is written again two calls later, which no peer can reach before
 * this rank has written its part of the call in between, after this kernel
 * ended. */
#include <stdint.h>

#include "nccl_lamport.cuh"
#include "nccl_oneshot_kernel.h"

/* Where rank `from` writes in a staging buffer (nccl_oneshot_kernel.h). */
__device__ static uint4 *slot(char *staging, int buf, int ranks, int from) {
  return (uint4 *)(staging + ((size_t)buf * ranks + from) * CG_ONESHOT_MAX_BYTES);
}

/* RANKS at compile time: the per-rank loops unroll and every chunk and
 * pointer indexed by a rank sits in a register. */
template <typename T, int RANKS>
__global__ void __launch_bounds__(CG_LAMPORT_MAX_THREADS) oneshot_kernel(cg_oneshot_args_t a) {
  constexpr int VEC = 16 / sizeof(T);
  /* every block's counter holds the calls finished; a block reads its own */
  const unsigned e = a.epochs[blockIdx.x] + 1u;
  const int buf = (int)(e & 1u);
  const size_t chunks = (a.count + VEC - 1) / VEC, stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const T *send = (const T *)a.send;
  T *recv = (T *)a.recv;
  const bool send_aligned = (uintptr_t)send % 16 == 0, recv_aligned = (uintptr_t)recv % 16 == 0;
  /* this rank's bit, opaque to the compiler: with r == a.rank tests in the
   * unrolled loops it indexes arrays by the rank instead, in local memory */
  unsigned self;
  asm("mov.b32 %0, %1;" : "=r"(self) : "r"(1u << a.rank));
  char *mine = NULL;
#pragma unroll
  for (int r = 0; r < RANKS; r++)
    if (self >> r & 1u) mine = a.peers[r];
  uint4 *to[RANKS];
  const uint4 *from[RANKS];
#pragma unroll
  for (int r = 0; r < RANKS; r++) {
    to[r] = slot(a.peers[r], buf, RANKS, a.rank);
    from[r] = slot(mine, buf, RANKS, r);
  }

  /* out: this rank's input into its slot of every peer's buffer */
  for (size_t c = first; c < chunks; c += stride) {
    uint4 v = without_sentinel<T>(load_chunk(send, c, a.count, send_aligned));
#pragma unroll
    for (int r = 0; r < RANKS; r++)
      if (!(self >> r & 1u)) store_volatile(to[r] + c, v);
  }
  /* in: every peer's chunk once it has arrived (all of them polled at once),
   * then the sentinel back */
  unsigned polls = 0;
  bool quit = false; /* aborted: every thread still reaches the barrier below */
  for (size_t c = first; c < chunks && !quit; c += stride) {
    uint4 raw[RANKS];
    if (!gather_chunk<T, RANKS>(raw, self, send, c, a.count, send_aligned, from, c, polls, a.aborted)) {
      quit = true;
      break;
    }
    store_chunk(recv, c, a.count, recv_aligned, reduce<T, RANKS>(a.op, raw));
#pragma unroll
    for (int r = 0; r < RANKS; r++)
      if (!(self >> r & 1u)) refill(from[r] + c);
  }
  /* the refill above needs no fence: a peer writes this buffer again only
   * after this rank's next kernel wrote to it, and kernel boundaries order
   * this kernel's stores before that (as in other sentinel-based one-shot
   * kernels) */
  lamport_finish_epoch(a.epochs, e);
}

extern "C" cudaError_t cg_oneshot_launch(const cg_oneshot_args_t *args, int dtype_index, cudaStream_t stream) {
  static const size_t lane_bytes[CG_ONESHOT_DTYPES] = {4, 2, 2};
  /* what the kernel trusts: a slot per rank, this rank's among them, the
   * staging's slot size, and one of its operations; and something to send (a
   * call that sends nothing would end before its peers wrote to it) */
  if (dtype_index < 0 || dtype_index >= CG_ONESHOT_DTYPES || args->ranks < 2 || args->ranks > CG_ONESHOT_MAX_RANKS ||
      args->rank < 0 || args->rank >= args->ranks || args->count == 0 ||
      args->count > CG_ONESHOT_MAX_BYTES / lane_bytes[dtype_index] ||
      args->op < CG_ONESHOT_SUM || args->op > CG_ONESHOT_PROD)
    return cudaErrorInvalidValue;
  size_t chunks = (args->count * lane_bytes[dtype_index] + 15) / 16;
  dim3 grid, threads;
  lamport_grid(&grid, &threads, chunks);
  switch (dtype_index) {
    case CG_ONESHOT_FLOAT32: CG_LAMPORT_LAUNCH(oneshot_kernel, float, *args, grid, threads, stream); break;
    case CG_ONESHOT_FLOAT16: CG_LAMPORT_LAUNCH(oneshot_kernel, __half, *args, grid, threads, stream); break;
    default: CG_LAMPORT_LAUNCH(oneshot_kernel, __nv_bfloat16, *args, grid, threads, stream); break;
  }
  return cudaGetLastError();
}
