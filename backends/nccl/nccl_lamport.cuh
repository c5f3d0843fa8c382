/* Device helpers of commgraph's own allreduce kernels (the one-shot and the
 * two-shot, nccl_oneshot_kernel.cu and nccl_twoshot_kernel.cu): 16-byte
 * chunks of float32, float16 or bfloat16 lanes, the all-ones sentinel that
 * marks a staging chunk as not yet arrived (the data are their own flag), and
 * the reduction in float32, in rank order, so that every rank gets the same
 * bits. Included by .cu files only. */
#ifndef CG_BACKENDS_NCCL_LAMPORT_CUH
#define CG_BACKENDS_NCCL_LAMPORT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "nccl_oneshot_kernel.h"

/* polls between looks at the abort flag: a look reads host memory over PCIe */
#define CG_LAMPORT_POLLS_PER_ABORT_CHECK 1024

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

/* The all-ones chunk that marks a slot as not yet arrived: put back once read. */
__device__ static void refill(const uint4 *slot) { *(uint4 *)slot = make_uint4(~0u, ~0u, ~0u, ~0u); }

/* Every rank's part of one chunk: this rank's (self's bit) chunk c of its
 * input `send`, every peer's from its slot, in[r] + at, polled (all missing
 * ones at once) until it has arrived. False when the communicator was
 * aborted meanwhile (the abort flag, read every
 * CG_LAMPORT_POLLS_PER_ABORT_CHECK polls, counted across calls in `polls`). */
template <typename T, int RANKS>
__device__ static bool gather_chunk(uint4 (&raw)[RANKS], unsigned self, const T *send, size_t c, size_t count,
                                    bool send_aligned, const uint4 *const (&in)[RANKS], size_t at, unsigned &polls,
                                    const volatile unsigned *aborted) {
  unsigned pending = 0;
#pragma unroll
  for (int r = 0; r < RANKS; r++) {
    if (self >> r & 1u) {
      raw[r] = without_sentinel<T>(load_chunk(send, c, count, send_aligned));
      continue;
    }
    raw[r] = load_volatile(in[r] + at);
    if (!arrived<T>(raw[r])) pending |= 1u << r;
  }
  while (pending) {
    if (++polls % CG_LAMPORT_POLLS_PER_ABORT_CHECK == 0 && *aborted) return false;
#pragma unroll
    for (int r = 0; r < RANKS; r++)
      if (pending >> r & 1u) {
        raw[r] = load_volatile(in[r] + at);
        if (arrived<T>(raw[r])) pending &= ~(1u << r);
      }
  }
  return true;
}

/* Every block's counter holds the calls finished on the communicator, and a
 * block reads its own at its start; the next call, whatever its grid, reads
 * any block's: this block sets those that no other block of this grid reads,
 * once all its threads have read its own (the barrier). */
__device__ static void lamport_finish_epoch(unsigned *epochs, unsigned e) {
  __syncthreads();
  if (threadIdx.x == 0)
    for (int j = blockIdx.x; j < CG_ONESHOT_MAX_BLOCKS; j += gridDim.x) epochs[j] = e;
}

/* The grid: a small message spread thin over many SMs (each SM's stores to
 * peers go out one after another: on 4 H100s the one-shot kernel before
 * 40843c2 took 5.7 us for 8 KB on 16 blocks of 32 threads, 8.2 on 2 of 256,
 * 11.1 on 1 of 512; the present one 4.3), chunks / 32 threads per block
 * rounded to a warp (16 to 32 blocks from 16 to 256 KB; 16 blocks were 5%
 * slower at 64 KB, 64 and 128 no faster), a large one in blocks of up to
 * CG_LAMPORT_MAX_THREADS, at most CG_LAMPORT_MAX_BLOCKS of them. Not more:
 * beside compute the kernels' waiting blocks take SMs from it. On 2 H200 in
 * a training iteration (bench_train, ResNet-50, B = 1 ms, session 24) with
 * up to 128 blocks the tuned plan's buckets exposed 37-46 us on these
 * kernels against 28-30 on NCCL's, the backward pass 15-19 us longer; with
 * 32, 20-21 us against 22-29 (alone a 4 MB two-shot call takes 27 us on 32
 * blocks and 17 on 128, NCCL 36); with 16 the two-shot kernel lost to NCCL
 * at every size. */
#define CG_LAMPORT_MIN_THREADS 32
#define CG_LAMPORT_MAX_THREADS 256
#define CG_LAMPORT_MAX_BLOCKS 32
static void lamport_grid(dim3 *grid, dim3 *threads, size_t chunks) {
  size_t per_block = (chunks / 32 + CG_LAMPORT_MIN_THREADS - 1) / CG_LAMPORT_MIN_THREADS * CG_LAMPORT_MIN_THREADS;
  per_block = per_block < CG_LAMPORT_MIN_THREADS   ? CG_LAMPORT_MIN_THREADS
              : per_block > CG_LAMPORT_MAX_THREADS ? CG_LAMPORT_MAX_THREADS
                                                   : per_block;
  size_t blocks = (chunks + per_block - 1) / per_block;
  if (blocks > CG_LAMPORT_MAX_BLOCKS) blocks = CG_LAMPORT_MAX_BLOCKS;
  *grid = dim3((unsigned)(blocks < 1 ? 1 : blocks));
  *threads = dim3((unsigned)per_block);
}

/* kernel<T, RANKS> for the args' rank count: every per-rank loop unrolls and
 * every chunk and pointer indexed by a rank sits in a register. */
#define CG_LAMPORT_LAUNCH(kernel, T, args, grid, threads, stream)                \
  do {                                                                           \
    switch ((args).ranks) {                                                      \
      case 2: kernel<T, 2><<<grid, threads, 0, stream>>>(args); break;           \
      case 3: kernel<T, 3><<<grid, threads, 0, stream>>>(args); break;           \
      case 4: kernel<T, 4><<<grid, threads, 0, stream>>>(args); break;           \
      case 5: kernel<T, 5><<<grid, threads, 0, stream>>>(args); break;           \
      case 6: kernel<T, 6><<<grid, threads, 0, stream>>>(args); break;           \
      case 7: kernel<T, 7><<<grid, threads, 0, stream>>>(args); break;           \
      default: kernel<T, CG_ONESHOT_MAX_RANKS><<<grid, threads, 0, stream>>>(args); break; \
    }                                                                            \
  } while (0)

#endif
