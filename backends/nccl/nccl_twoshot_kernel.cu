/* The two-shot allreduce kernel (nccl_oneshot.h): a reduce-scatter and an
 * allgather in one kernel, each one crossing of NVLink. The message is cut
 * into one share per rank; every rank writes each peer's share of its input
 * into that peer's scatter slot, reduces its own share from its input and
 * what its peers wrote (in rank order, in float32), and writes the result
 * into its own output and into every peer's gather slot, from which each
 * rank copies the other shares out. Each rank sends 2 (n - 1) / n of the
 * message, as NCCL's ring does, where the one-shot kernel sends (n - 1) of
 * it; the price is a second crossing. Slots hold the sentinel (all-ones
 * bytes) until their data came, so no flag or barrier is needed (as in the
 * one-shot kernel), and the reader puts the sentinel back. Both parts of a
 * buffer are written again two calls later. No rank finishes a call without
 * rank 0, whose share is never empty: rank 0 waits for every rank's scatter
 * of its share, and every other rank for rank 0's gather. So no peer starts
 * the call after next before this rank has written its part of the next
 * call, after this kernel ended (a call of no elements would break that
 * chain: the launch refuses it).
 *
 * A thread handles the same offsets within every share in all three steps,
 * so in place no thread overwrites an input chunk another thread has still
 * to read. */
#include <stdint.h>

#include "nccl_lamport.cuh"
#include "nccl_twoshot_kernel.h"

enum { SCATTER, GATHER };

/* Where rank `from` writes in part `part` of a buffer (nccl_twoshot_kernel.h). */
__device__ static uint4 *twoshot_slot(char *area, int buf, int part, int ranks, int from) {
  return (uint4 *)(area + (((size_t)buf * 2 + part) * ranks + from) * CG_TWOSHOT_SLOT_BYTES(ranks));
}

template <typename T, int RANKS>
__global__ void __launch_bounds__(CG_LAMPORT_MAX_THREADS) twoshot_kernel(cg_oneshot_args_t a) {
  constexpr int VEC = 16 / sizeof(T);
  const unsigned e = a.epochs[blockIdx.x] + 1u;
  const int buf = (int)(e & 1u);
  const size_t chunks = (a.count + VEC - 1) / VEC, share = (chunks + RANKS - 1) / RANKS;
  const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const T *send = (const T *)a.send;
  T *recv = (T *)a.recv;
  const bool send_aligned = (uintptr_t)send % 16 == 0, recv_aligned = (uintptr_t)recv % 16 == 0;
  /* this rank's bit, opaque to the compiler (as in the one-shot kernel: with
   * r == a.rank tests the unrolled loops would index arrays by the rank, in
   * local memory) */
  unsigned self;
  asm("mov.b32 %0, %1;" : "=r"(self) : "r"(1u << a.rank));
  char *mine = NULL;
  size_t my_first = 0, my_len = 0;
#pragma unroll
  for (int r = 0; r < RANKS; r++)
    if (self >> r & 1u) mine = a.peers[r];
  /* rank r's share: chunks [r * share, r * share + len[r]) */
  size_t len[RANKS];
  uint4 *scatter_to[RANKS], *gather_to[RANKS];
  const uint4 *scatter_in[RANKS], *gather_in[RANKS];
#pragma unroll
  for (int r = 0; r < RANKS; r++) {
    size_t begin = (size_t)r * share;
    len[r] = begin >= chunks ? 0 : chunks - begin < share ? chunks - begin : share;
    if (self >> r & 1u) my_first = begin, my_len = len[r];
    scatter_to[r] = twoshot_slot(a.peers[r], buf, SCATTER, RANKS, a.rank);
    gather_to[r] = twoshot_slot(a.peers[r], buf, GATHER, RANKS, a.rank);
    scatter_in[r] = twoshot_slot(mine, buf, SCATTER, RANKS, r);
    gather_in[r] = twoshot_slot(mine, buf, GATHER, RANKS, r);
  }

  /* 1: each peer's share of this rank's input into that peer's scatter slot */
#pragma unroll
  for (int r = 0; r < RANKS; r++) {
    if (self >> r & 1u) continue;
    for (size_t o = first; o < len[r]; o += stride)
      store_volatile(scatter_to[r] + o,
                     without_sentinel<T>(load_chunk(send, (size_t)r * share + o, a.count, send_aligned)));
  }
  /* 2: this rank's share, reduced once every peer's part has arrived, into
   * the output and every peer's gather slot, then the sentinel back */
  unsigned polls = 0;
  bool quit = false; /* aborted: every thread still reaches the barrier at the end */
  for (size_t o = first; o < my_len && !quit; o += stride) {
    uint4 raw[RANKS];
    if (!gather_chunk<T, RANKS>(raw, self, send, my_first + o, a.count, send_aligned, scatter_in, o, polls,
                                a.aborted)) {
      quit = true;
      break;
    }
    /* the peers copy these bits: every rank ends with the same */
    uint4 v = without_sentinel<T>(reduce<T, RANKS>(a.op, raw));
    store_chunk(recv, my_first + o, a.count, recv_aligned, v);
#pragma unroll
    for (int r = 0; r < RANKS; r++)
      if (!(self >> r & 1u)) {
        store_volatile(gather_to[r] + o, v);
        refill(scatter_in[r] + o);
      }
  }
  /* 3: the other shares, as their ranks reduced them */
#pragma unroll
  for (int r = 0; r < RANKS; r++) {
    if (self >> r & 1u) continue;
    for (size_t o = first; o < len[r] && !quit; o += stride) {
      uint4 v = load_volatile(gather_in[r] + o);
      while (!arrived<T>(v)) {
        if (++polls % CG_LAMPORT_POLLS_PER_ABORT_CHECK == 0 && *a.aborted) {
          quit = true;
          break;
        }
        v = load_volatile(gather_in[r] + o);
      }
      if (quit) break;
      store_chunk(recv, (size_t)r * share + o, a.count, recv_aligned, v);
      refill(gather_in[r] + o);
    }
  }
  /* the refills need no fence: a peer writes these slots again only after
   * this rank's next kernel ran (through rank 0, above), and kernel
   * boundaries order this kernel's stores before that */
  lamport_finish_epoch(a.epochs, e);
}

extern "C" cudaError_t cg_twoshot_launch(const cg_oneshot_args_t *args, int dtype_index, cudaStream_t stream) {
  static const size_t lane_bytes[CG_ONESHOT_DTYPES] = {4, 2, 2};
  /* what the kernel trusts: a slot per rank, this rank's among them, a share
   * within the slot's size, and one of its operations */
  if (dtype_index < 0 || dtype_index >= CG_ONESHOT_DTYPES || args->ranks < 2 || args->ranks > CG_ONESHOT_MAX_RANKS ||
      args->rank < 0 || args->rank >= args->ranks || args->count == 0 ||
      args->count > CG_TWOSHOT_MAX_BYTES / lane_bytes[dtype_index] ||
      args->op < CG_ONESHOT_SUM || args->op > CG_ONESHOT_PROD)
    return cudaErrorInvalidValue;
  size_t chunks = (args->count * lane_bytes[dtype_index] + 15) / 16;
  dim3 grid, threads;
  /* a thread per chunk of a share, as the one-shot kernel has per chunk */
  lamport_grid(&grid, &threads, (chunks + (size_t)args->ranks - 1) / (size_t)args->ranks);
  switch (dtype_index) {
    case CG_ONESHOT_FLOAT32: CG_LAMPORT_LAUNCH(twoshot_kernel, float, *args, grid, threads, stream); break;
    case CG_ONESHOT_FLOAT16: CG_LAMPORT_LAUNCH(twoshot_kernel, __half, *args, grid, threads, stream); break;
    default: CG_LAMPORT_LAUNCH(twoshot_kernel, __nv_bfloat16, *args, grid, threads, stream); break;
  }
  return cudaGetLastError();
}
