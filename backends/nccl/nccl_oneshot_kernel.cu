/* The one-shot allreduce kernel (nccl_oneshot.h): every rank copies its input
 * into its staging buffer, tells every peer it has, waits until every peer
 * has told it, and sums every rank's staging straight from peer memory in rank
 * order, so all ranks get the same bits. One wait across ranks per call: a
 * call's staging half is written again two calls later, only once every
 * peer's every block has arrived at the call in between, so nobody still
 * reads it. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "nccl_oneshot_kernel.h"

#define THREADS 512
/* polls between looks at the abort flag: a look reads host memory over PCIe */
#define POLLS_PER_ABORT_CHECK 1024

__device__ static unsigned load_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ static void store_release(unsigned *p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Waits until *flag >= want, or the communicator was aborted (1). */
__device__ static int wait_flag(const unsigned *flag, unsigned want, const volatile unsigned *aborted) {
  for (unsigned polls = 1;; polls++) {
    if ((int)(load_acquire(flag) - want) >= 0) return 0;
    if (polls % POLLS_PER_ABORT_CHECK == 0 && *aborted) return 1;
  }
}

__device__ static unsigned *flag_at(char *staging, int block, int rank) {
  return (unsigned *)(staging + CG_ONESHOT_FLAGS_OFFSET) + (size_t)block * CG_ONESHOT_MAX_RANKS + rank;
}

__device__ static float combine(int op, float acc, float x) {
  switch (op) {
    case CG_ONESHOT_MIN: return fminf(acc, x);
    case CG_ONESHOT_MAX: return fmaxf(acc, x);
    case CG_ONESHOT_PROD: return acc * x;
    default: return acc + x;
  }
}

__device__ static float finish(const cg_oneshot_args_t &a, float acc) {
  return a.op == CG_ONESHOT_AVG ? acc / (float)a.ranks : acc;
}

/* Element i of every rank (own input, the peers' staging) in rank order. */
template <typename T> struct elem;
template <> struct elem<float> {
  __device__ static float load(const float *p) { return *p; }
  __device__ static void store(float *p, float v) { *p = v; }
};
template <> struct elem<__half> {
  __device__ static float load(const __half *p) { return __half2float(*p); }
  __device__ static void store(__half *p, float v) { *p = __float2half_rn(v); }
};
template <> struct elem<__nv_bfloat16> {
  __device__ static float load(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
  __device__ static void store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
};

/* Peer memory is read uncached (__ldcv): the staging changes between calls. */
template <typename T> __device__ static T load_uncached(const T *p) {
  if constexpr (sizeof(T) == 4) {
    float v = __ldcv((const float *)p);
    return *(T *)&v;
  } else {
    unsigned short v = __ldcv((const unsigned short *)p);
    return *(T *)&v;
  }
}

template <typename T>
__device__ static void sum_scalars(const cg_oneshot_args_t &a, const T *send, T *recv, size_t lo, size_t hi,
                                   size_t half) {
  for (size_t i = lo + threadIdx.x; i < hi; i += THREADS) {
    float acc = 0.f;
    for (int r = 0; r < a.ranks; r++) {
      const T *src = r == a.rank ? send : (const T *)(a.peers[r] + half);
      T x = load_uncached(src + i);
      float v = elem<T>::load(&x);
      acc = r ? combine(a.op, acc, v) : v;
    }
    elem<T>::store(recv + i, finish(a, acc));
  }
}

/* 16-byte vectors: VEC elements each; every rank's vector is loaded before
 * any is summed, so the peers' reads are in flight together. */
template <typename T>
__device__ static void sum_vectors(const cg_oneshot_args_t &a, const T *send, T *recv, size_t lo, size_t hi,
                                   size_t half) {
  constexpr int VEC = 16 / sizeof(T);
  for (size_t v = lo + threadIdx.x; v < hi; v += THREADS) {
    uint4 raw[CG_ONESHOT_MAX_RANKS];
#pragma unroll
    for (int r = 0; r < CG_ONESHOT_MAX_RANKS; r++)
      if (r < a.ranks) raw[r] = __ldcv((const uint4 *)(r == a.rank ? (const char *)send : a.peers[r] + half) + v);
    float acc[VEC];
#pragma unroll
    for (int r = 0; r < CG_ONESHOT_MAX_RANKS; r++) {
      if (r >= a.ranks) break;
      const T *x = (const T *)&raw[r];
#pragma unroll
      for (int k = 0; k < VEC; k++) acc[k] = r ? combine(a.op, acc[k], elem<T>::load(x + k)) : elem<T>::load(x + k);
    }
    uint4 out;
    T *y = (T *)&out;
#pragma unroll
    for (int k = 0; k < VEC; k++) elem<T>::store(y + k, finish(a, acc[k]));
    ((uint4 *)recv)[v] = out;
  }
}

template <typename T> __global__ void __launch_bounds__(THREADS) oneshot_kernel(cg_oneshot_args_t a) {
  __shared__ unsigned epoch;
  __shared__ int quit;
  const int block = blockIdx.x;
  if (threadIdx.x == 0) {
    epoch = a.epochs[block] + 1u;
    quit = 0;
  }
  __syncthreads();
  const unsigned e = epoch;
  const size_t half = (size_t)(e & 1u) * CG_ONESHOT_HALF_BYTES;
  char *mine = a.peers[a.rank];
  const T *send = (const T *)a.send;
  T *recv = (T *)a.recv;
  /* each block's elements: the same on every rank whatever its buffers'
   * alignment (a block reads from its peers what the same block staged),
   * whole 16-byte vectors but for the last block's tail; taken as vectors
   * where this rank's buffers are 16-byte aligned */
  constexpr int VEC = 16 / sizeof(T);
  size_t n_vec = a.count / VEC;
  size_t lo = n_vec * block / gridDim.x * VEC;
  size_t hi = block + 1 == (int)gridDim.x ? a.count : n_vec * (block + 1) / gridDim.x * VEC;
  int aligned = (uintptr_t)a.send % 16 == 0 && (uintptr_t)a.recv % 16 == 0;
  size_t vec_lo = lo / VEC, vec_hi = aligned ? (lo + (hi - lo) / VEC * VEC) / VEC : vec_lo;
  size_t sc_lo = vec_hi * VEC, sc_hi = hi;

  /* the half written now was read two calls ago: every peer's every block
   * must have arrived at the call since (flag >= e - 1) */
  for (int t = threadIdx.x; t < (int)gridDim.x * a.ranks; t += THREADS) {
    int b = t / a.ranks, r = t % a.ranks;
    if (r != a.rank && wait_flag(flag_at(mine, b, r), e - 1u, a.aborted)) quit = 1;
  }
  __syncthreads();
  if (quit) return;
  /* this block's part of the input into the staging half */
  T *stage = (T *)(mine + half);
  for (size_t v = vec_lo + threadIdx.x; v < vec_hi; v += THREADS) ((uint4 *)stage)[v] = ((const uint4 *)send)[v];
  for (size_t i = sc_lo + threadIdx.x; i < sc_hi; i += THREADS) stage[i] = send[i];
  __syncthreads();
  /* arrived: one release store into each peer's flags, which orders the
   * block's staging stores (bar.sync above) before it and also says: done
   * reading the previous call's staging */
  if (threadIdx.x < (unsigned)a.ranks && (int)threadIdx.x != a.rank)
    store_release(flag_at(a.peers[threadIdx.x], block, a.rank), e);
  if (threadIdx.x < (unsigned)a.ranks && (int)threadIdx.x != a.rank &&
      wait_flag(flag_at(mine, block, threadIdx.x), e, a.aborted))
    quit = 1;
  __syncthreads();
  if (quit) return;
  sum_vectors<T>(a, send, recv, vec_lo, vec_hi, half);
  sum_scalars<T>(a, send, recv, sc_lo, sc_hi, half);
  if (threadIdx.x == 0) a.epochs[block] = e;
}

extern "C" cudaError_t cg_oneshot_launch(const cg_oneshot_args_t *args, int dtype_index, cudaStream_t stream) {
  dim3 grid(CG_ONESHOT_BLOCKS), threads(THREADS);
  switch (dtype_index) {
    case CG_ONESHOT_FLOAT32: oneshot_kernel<float><<<grid, threads, 0, stream>>>(*args); break;
    case CG_ONESHOT_FLOAT16: oneshot_kernel<__half><<<grid, threads, 0, stream>>>(*args); break;
    case CG_ONESHOT_BFLOAT16: oneshot_kernel<__nv_bfloat16><<<grid, threads, 0, stream>>>(*args); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
