/* The one-shot allreduce kernel (nccl_oneshot.h): every rank writes its input
 * straight into its slot of every peer's staging over NVLink, and each rank
 * reduces, in rank order (the same bits on every rank), its own input and the
 * peers' slots of its own staging, in local memory, as soon as they arrive.
 * No flag and no barrier: a slot holds the sentinel (all-ones bytes) until its
 * data has come, so the data are their own flag (a sentinel-initialized
 * buffer in the manner of Lamport), and the one crossing of NVLink per call
 * is the writes. An input lane that is all ones (a NaN) is sent as another
 * NaN. The reader puts the sentinel back once it has reduced a chunk: the
 * buffer is written again two calls later, which no peer can reach before
 * this rank has written its part of the call in between, after this kernel
 * ended. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "nccl_oneshot_kernel.h"

/* The grid: a small message spread thin over many SMs (each SM's stores to
 * peers go out one after another: on 4 H100s an 8 KB call took 5.7 us on 16
 * blocks of 32 threads, 8.2 on 2 of 256, 11.1 on 1 of 512), a large one in
 * blocks of up to MAX_THREADS, at most CG_ONESHOT_MAX_BLOCKS of them. */
#define MIN_THREADS 32
#define MAX_THREADS 256
/* polls between looks at the abort flag: a look reads host memory over PCIe */
#define POLLS_PER_ABORT_CHECK 1024

/* Volatile: the slots are written by peers and polled. */
__device__ static uint4 load_volatile(const uint4 *p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ static void store_volatile(uint4 *p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

/* Whether no lane of a chunk is the sentinel, and a chunk to send with none:
 * by lanes of the dtype's size (a float32 NaN may have 16 high bits set). */
template <int LANE> struct sentinel;
template <> struct sentinel<4> {
  __device__ static bool arrived(uint4 v) { return v.x != ~0u && v.y != ~0u && v.z != ~0u && v.w != ~0u; }
  __device__ static unsigned word(unsigned w) { return w == ~0u ? 0x7fffffffu : w; }
};
template <> struct sentinel<2> {
  __device__ static bool lanes_ok(unsigned w) { return (w & 0xffffu) != 0xffffu && (w >> 16) != 0xffffu; }
  __device__ static bool arrived(uint4 v) { return lanes_ok(v.x) && lanes_ok(v.y) && lanes_ok(v.z) && lanes_ok(v.w); }
  __device__ static unsigned word(unsigned w) {
    if ((w & 0xffffu) == 0xffffu) w = (w & 0xffff0000u) | 0x7fffu;
    if ((w >> 16) == 0xffffu) w = (w & 0xffffu) | 0x7fff0000u;
    return w;
  }
};
template <typename T> __device__ static uint4 without_sentinel(uint4 v) {
  using S = sentinel<sizeof(T)>;
  return make_uint4(S::word(v.x), S::word(v.y), S::word(v.z), S::word(v.w));
}

__device__ static float combine(int op, float acc, float x) {
  switch (op) {
    case CG_ONESHOT_MIN: return fminf(acc, x);
    case CG_ONESHOT_MAX: return fmaxf(acc, x);
    case CG_ONESHOT_PROD: return acc * x;
    default: return acc + x;
  }
}

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

/* Chunk c: elements c*VEC ... of a user buffer, as one vector where it is
 * 16-byte aligned and whole; the lanes past the end are zeros (not the
 * sentinel: the reader waits for every lane). */
template <typename T> __device__ static uint4 load_chunk(const T *src, size_t c, size_t count, bool aligned) {
  constexpr int VEC = 16 / sizeof(T);
  size_t first = c * VEC;
  if (aligned && first + VEC <= count) return ((const uint4 *)src)[c];
  uint4 v = make_uint4(0, 0, 0, 0);
  T *x = (T *)&v;
  for (int k = 0; k < VEC && first + k < count; k++) x[k] = src[first + k];
  return v;
}

template <typename T> __device__ static void store_chunk(T *dst, size_t c, size_t count, bool aligned, uint4 v) {
  constexpr int VEC = 16 / sizeof(T);
  size_t first = c * VEC;
  if (aligned && first + VEC <= count) {
    ((uint4 *)dst)[c] = v;
    return;
  }
  const T *x = (const T *)&v;
  for (int k = 0; k < VEC && first + k < count; k++) dst[first + k] = x[k];
}

/* Where rank `from` writes in a staging buffer (nccl_oneshot_kernel.h). */
__device__ static uint4 *slot(char *staging, int buf, int ranks, int from) {
  return (uint4 *)(staging + ((size_t)buf * ranks + from) * CG_ONESHOT_MAX_BYTES);
}

template <typename T>
__device__ static uint4 reduce(const cg_oneshot_args_t &a, const uint4 (&raw)[CG_ONESHOT_MAX_RANKS]) {
  constexpr int VEC = 16 / sizeof(T);
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
  for (int k = 0; k < VEC; k++) elem<T>::store(y + k, a.op == CG_ONESHOT_AVG ? acc[k] / (float)a.ranks : acc[k]);
  return out;
}

template <typename T> __global__ void __launch_bounds__(MAX_THREADS) oneshot_kernel(cg_oneshot_args_t a) {
  constexpr int VEC = 16 / sizeof(T);
  /* every block's counter holds the calls finished; a block reads its own */
  const unsigned e = a.epochs[blockIdx.x] + 1u;
  const int buf = (int)(e & 1u);
  const size_t chunks = (a.count + VEC - 1) / VEC, stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const T *send = (const T *)a.send;
  T *recv = (T *)a.recv;
  const bool send_aligned = (uintptr_t)send % 16 == 0, recv_aligned = (uintptr_t)recv % 16 == 0;
  char *mine = a.peers[a.rank];

  /* out: this rank's input into its slot of every peer's buffer */
  uint4 own_first = make_uint4(0, 0, 0, 0);
  for (size_t c = first; c < chunks; c += stride) {
    uint4 v = without_sentinel<T>(load_chunk(send, c, a.count, send_aligned));
    if (c == first) own_first = v;
#pragma unroll
    for (int r = 0; r < CG_ONESHOT_MAX_RANKS; r++)
      if (r < a.ranks && r != a.rank) store_volatile(slot(a.peers[r], buf, a.ranks, a.rank) + c, v);
  }
  /* in: every peer's chunk once it has arrived, then the sentinel back */
  bool quit = false;
  unsigned polls = 0;
  for (size_t c = first; c < chunks && !quit; c += stride) {
    uint4 raw[CG_ONESHOT_MAX_RANKS];
#pragma unroll
    for (int r = 0; r < CG_ONESHOT_MAX_RANKS; r++) {
      if (r >= a.ranks) break;
      if (r == a.rank)
        raw[r] = c == first ? own_first : without_sentinel<T>(load_chunk(send, c, a.count, send_aligned));
      else
        raw[r] = load_volatile(slot(mine, buf, a.ranks, r) + c);
    }
#pragma unroll
    for (int r = 0; r < CG_ONESHOT_MAX_RANKS; r++) {
      if (r >= a.ranks || quit) break;
      if (r == a.rank) continue;
      while (!sentinel<sizeof(T)>::arrived(raw[r])) {
        if (++polls % POLLS_PER_ABORT_CHECK == 0 && *a.aborted) {
          quit = true;
          break;
        }
        raw[r] = load_volatile(slot(mine, buf, a.ranks, r) + c);
      }
    }
    if (quit) break;
    store_chunk(recv, c, a.count, recv_aligned, reduce<T>(a, raw));
#pragma unroll
    for (int r = 0; r < CG_ONESHOT_MAX_RANKS; r++)
      if (r < a.ranks && r != a.rank) slot(mine, buf, a.ranks, r)[c] = make_uint4(~0u, ~0u, ~0u, ~0u);
  }
  /* the next call reads any block's counter: this block sets those that no
   * other block of this grid reads, once all its threads have read its own
   * (the barrier). The refill above needs no fence: a peer writes this
   * buffer again only after this rank's next kernel wrote to it, and kernel
   * boundaries order this kernel's stores before that (as in other
   * sentinel-based one-shot kernels) */
  __syncthreads();
  if (threadIdx.x == 0)
    for (int j = blockIdx.x; j < CG_ONESHOT_MAX_BLOCKS; j += gridDim.x) a.epochs[j] = e;
}

extern "C" cudaError_t cg_oneshot_launch(const cg_oneshot_args_t *args, int dtype_index, cudaStream_t stream) {
  static const size_t lane[CG_ONESHOT_DTYPES] = {4, 2, 2};
  if (dtype_index < 0 || dtype_index >= CG_ONESHOT_DTYPES) return cudaErrorInvalidValue;
  size_t chunks = (args->count * lane[dtype_index] + 15) / 16;
  /* threads per block: chunks / 32 rounded up to a warp, within the bounds */
  size_t per_block = (chunks / 32 + MIN_THREADS - 1) / MIN_THREADS * MIN_THREADS;
  per_block = per_block < MIN_THREADS ? MIN_THREADS : per_block > MAX_THREADS ? MAX_THREADS : per_block;
  size_t blocks = (chunks + per_block - 1) / per_block;
  if (blocks > CG_ONESHOT_MAX_BLOCKS) blocks = CG_ONESHOT_MAX_BLOCKS;
  dim3 grid((unsigned)(blocks < 1 ? 1 : blocks)), threads((unsigned)per_block);
  switch (dtype_index) {
    case CG_ONESHOT_FLOAT32: oneshot_kernel<float><<<grid, threads, 0, stream>>>(*args); break;
    case CG_ONESHOT_FLOAT16: oneshot_kernel<__half><<<grid, threads, 0, stream>>>(*args); break;
    default: oneshot_kernel<__nv_bfloat16><<<grid, threads, 0, stream>>>(*args); break;
  }
  return cudaGetLastError();
}
