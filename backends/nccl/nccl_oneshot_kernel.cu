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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "nccl_oneshot_kernel.h"

/* The grid: a small message spread thin over many SMs (each SM's stores to
 * peers go out one after another: on 4 H100s the kernel before 40843c2 took
 * 5.7 us for 8 KB on 16 blocks of 32 threads, 8.2 on 2 of 256, 11.1 on 1 of
 * 512; this one 4.3), chunks / 32 threads per block rounded to a warp (16 to
 * 32 blocks from 16 to 256 KB; 16 blocks were 5% slower at 64 KB, 64 and 128
 * no faster), a large one in blocks of up to MAX_THREADS, at most
 * CG_ONESHOT_MAX_BLOCKS of them. */
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

/* A chunk as four 32-bit words, each lane of the dtype's size at a fixed
 * place: every index below is known at compile time once the loops unroll, so
 * chunks stay in registers (no local memory). */
__device__ static unsigned word(const uint4 &v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
__device__ static void set_word(uint4 &v, int i, unsigned w) {
  if (i == 0) v.x = w;
  else if (i == 1) v.y = w;
  else if (i == 2) v.z = w;
  else v.w = w;
}

/* Per dtype: a lane's bits as float and back, and the sentinel test by lanes
 * of the dtype's size (a float32 NaN may have 16 high bits set). */
template <typename T> struct lane;
template <> struct lane<float> {
  static constexpr int BITS = 32;
  __device__ static float to_float(unsigned b) { return __uint_as_float(b); }
  __device__ static unsigned from_float(float x) { return __float_as_uint(x); }
};
template <> struct lane<__half> {
  static constexpr int BITS = 16;
  __device__ static float to_float(unsigned b) { return __half2float(__ushort_as_half((unsigned short)b)); }
  __device__ static unsigned from_float(float x) { return __half_as_ushort(__float2half_rn(x)); }
};
template <> struct lane<__nv_bfloat16> {
  static constexpr int BITS = 16;
  __device__ static float to_float(unsigned b) { return __uint_as_float(b << 16); }
  __device__ static unsigned from_float(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};

/* Lane k of a chunk (VEC = 16 / sizeof(T) of them). */
template <typename T> __device__ static unsigned get_lane(const uint4 &v, int k) {
  constexpr int BITS = lane<T>::BITS, PER_WORD = 32 / BITS;
  unsigned w = word(v, k / PER_WORD);
  return BITS == 32 ? w : (w >> (BITS * (k % PER_WORD))) & 0xffffu;
}
template <typename T> __device__ static void put_lane(uint4 &v, int k, unsigned bits) {
  constexpr int BITS = lane<T>::BITS, PER_WORD = 32 / BITS;
  if (BITS == 32) {
    set_word(v, k, bits);
    return;
  }
  int shift = BITS * (k % PER_WORD);
  set_word(v, k / PER_WORD, (word(v, k / PER_WORD) & ~(0xffffu << shift)) | (bits << shift));
}

template <typename T> __device__ static bool arrived(const uint4 &v) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr unsigned ONES = lane<T>::BITS == 32 ? ~0u : 0xffffu;
  bool ok = true;
#pragma unroll
  for (int k = 0; k < VEC; k++) ok = ok && get_lane<T>(v, k) != ONES;
  return ok;
}
/* The chunk to send: a lane that is all ones (a NaN) becomes another NaN. */
template <typename T> __device__ static uint4 without_sentinel(uint4 v) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr unsigned ONES = lane<T>::BITS == 32 ? ~0u : 0xffffu;
#pragma unroll
  for (int k = 0; k < VEC; k++)
    if (get_lane<T>(v, k) == ONES) put_lane<T>(v, k, ONES >> 1);
  return v;
}

__device__ static float combine(int op, float acc, float x) {
  switch (op) {
    case CG_ONESHOT_MIN: return fminf(acc, x);
    case CG_ONESHOT_MAX: return fmaxf(acc, x);
    case CG_ONESHOT_PROD: return acc * x;
    default: return acc + x;
  }
}

/* Chunk c: elements c*VEC ... of a user buffer, as one vector where it is
 * 16-byte aligned and whole; the lanes past the end are zeros (not the
 * sentinel: the reader waits for every lane). */
template <typename T> __device__ static uint4 load_chunk(const T *src, size_t c, size_t count, bool aligned) {
  constexpr int VEC = 16 / sizeof(T);
  size_t first = c * VEC;
  if (aligned && first + VEC <= count) return ((const uint4 *)src)[c];
  uint4 v = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int k = 0; k < VEC; k++)
    if (first + k < count)
      put_lane<T>(v, k, sizeof(T) == 4 ? ((const unsigned *)src)[first + k] : ((const unsigned short *)src)[first + k]);
  return v;
}

template <typename T> __device__ static void store_chunk(T *dst, size_t c, size_t count, bool aligned, uint4 v) {
  constexpr int VEC = 16 / sizeof(T);
  size_t first = c * VEC;
  if (aligned && first + VEC <= count) {
    ((uint4 *)dst)[c] = v;
    return;
  }
#pragma unroll
  for (int k = 0; k < VEC; k++)
    if (first + k < count) {
      if (sizeof(T) == 4) ((unsigned *)dst)[first + k] = get_lane<T>(v, k);
      else ((unsigned short *)dst)[first + k] = (unsigned short)get_lane<T>(v, k);
    }
}

/* Where rank `from` writes in a staging buffer (nccl_oneshot_kernel.h). */
__device__ static uint4 *slot(char *staging, int buf, int ranks, int from) {
  return (uint4 *)(staging + ((size_t)buf * ranks + from) * CG_ONESHOT_MAX_BYTES);
}

template <typename T, int RANKS> __device__ static uint4 reduce(int op, const uint4 (&raw)[RANKS]) {
  constexpr int VEC = 16 / sizeof(T);
  uint4 out = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int k = 0; k < VEC; k++) {
    float acc = lane<T>::to_float(get_lane<T>(raw[0], k));
#pragma unroll
    for (int r = 1; r < RANKS; r++) acc = combine(op, acc, lane<T>::to_float(get_lane<T>(raw[r], k)));
    put_lane<T>(out, k, lane<T>::from_float(op == CG_ONESHOT_AVG ? acc / (float)RANKS : acc));
  }
  return out;
}

/* RANKS at compile time: the per-rank loops unroll and every chunk and
 * pointer indexed by a rank sits in a register. */
template <typename T, int RANKS> __global__ void __launch_bounds__(MAX_THREADS) oneshot_kernel(cg_oneshot_args_t a) {
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
    unsigned pending = 0;
#pragma unroll
    for (int r = 0; r < RANKS; r++) {
      if (self >> r & 1u) {
        raw[r] = without_sentinel<T>(load_chunk(send, c, a.count, send_aligned));
        continue;
      }
      raw[r] = load_volatile(from[r] + c);
      if (!arrived<T>(raw[r])) pending |= 1u << r;
    }
    while (pending) {
      if (++polls % POLLS_PER_ABORT_CHECK == 0 && *a.aborted) {
        quit = true;
        break;
      }
#pragma unroll
      for (int r = 0; r < RANKS; r++)
        if (pending >> r & 1u) {
          raw[r] = load_volatile(from[r] + c);
          if (arrived<T>(raw[r])) pending &= ~(1u << r);
        }
    }
    if (quit) break;
    store_chunk(recv, c, a.count, recv_aligned, reduce<T, RANKS>(a.op, raw));
#pragma unroll
    for (int r = 0; r < RANKS; r++)
      if (!(self >> r & 1u)) ((uint4 *)from[r])[c] = make_uint4(~0u, ~0u, ~0u, ~0u);
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

template <typename T> static void launch(const cg_oneshot_args_t &a, dim3 grid, dim3 threads, cudaStream_t stream) {
  switch (a.ranks) {
    case 2: oneshot_kernel<T, 2><<<grid, threads, 0, stream>>>(a); break;
    case 3: oneshot_kernel<T, 3><<<grid, threads, 0, stream>>>(a); break;
    case 4: oneshot_kernel<T, 4><<<grid, threads, 0, stream>>>(a); break;
    case 5: oneshot_kernel<T, 5><<<grid, threads, 0, stream>>>(a); break;
    case 6: oneshot_kernel<T, 6><<<grid, threads, 0, stream>>>(a); break;
    case 7: oneshot_kernel<T, 7><<<grid, threads, 0, stream>>>(a); break;
    default: oneshot_kernel<T, CG_ONESHOT_MAX_RANKS><<<grid, threads, 0, stream>>>(a); break;
  }
}

extern "C" cudaError_t cg_oneshot_launch(const cg_oneshot_args_t *args, int dtype_index, cudaStream_t stream) {
  static const size_t lane_bytes[CG_ONESHOT_DTYPES] = {4, 2, 2};
  /* what the kernel trusts: a slot per rank, this rank's among them, the
   * staging's slot size, and one of its operations */
  if (dtype_index < 0 || dtype_index >= CG_ONESHOT_DTYPES || args->ranks < 2 || args->ranks > CG_ONESHOT_MAX_RANKS ||
      args->rank < 0 || args->rank >= args->ranks || args->count > CG_ONESHOT_MAX_BYTES / lane_bytes[dtype_index] ||
      args->op < CG_ONESHOT_SUM || args->op > CG_ONESHOT_PROD)
    return cudaErrorInvalidValue;
  size_t chunks = (args->count * lane_bytes[dtype_index] + 15) / 16;
  /* threads per block: chunks / 32 rounded up to a warp, within the bounds */
  size_t per_block = (chunks / 32 + MIN_THREADS - 1) / MIN_THREADS * MIN_THREADS;
  per_block = per_block < MIN_THREADS ? MIN_THREADS : per_block > MAX_THREADS ? MAX_THREADS : per_block;
  size_t blocks = (chunks + per_block - 1) / per_block;
  if (blocks > CG_ONESHOT_MAX_BLOCKS) blocks = CG_ONESHOT_MAX_BLOCKS;
  dim3 grid((unsigned)(blocks < 1 ? 1 : blocks)), threads((unsigned)per_block);
  switch (dtype_index) {
    case CG_ONESHOT_FLOAT32: launch<float>(*args, grid, threads, stream); break;
    case CG_ONESHOT_FLOAT16: launch<__half>(*args, grid, threads, stream); break;
    default: launch<__nv_bfloat16>(*args, grid, threads, stream); break;
  }
  return cudaGetLastError();
}
