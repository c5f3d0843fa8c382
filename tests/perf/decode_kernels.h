/* bench_decode's kernels (decode_kernels.cu): a tensor-parallel decode step's
 * per-layer compute, which reads the previous layer's reduced activations
 * and writes this layer's partial ones, and the values it writes, which the
 * host reference recomputes. Callable from C. */
#ifndef DECODE_KERNELS_H
#define DECODE_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DECODE_HD __host__ __device__
#else
#define DECODE_HD
#endif

/* The layer kernel's grid: few blocks, so NCCL keeps its SMs. */
#define DECODE_BLOCKS 8
#define DECODE_THREADS 256

/* The largest rank count whose sums stay exact: a layer writes values 0..3,
 * and bfloat16 holds every integer up to 256. */
#define DECODE_MAX_RANKS 85

/* bfloat16 bits of a small integer (exact: the float's low half is zero),
 * and back. */
static inline DECODE_HD uint16_t decode_bf16_of(int v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}
static inline DECODE_HD int decode_int_of(uint16_t bits) {
  uint32_t u = (uint32_t)bits << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return (int)f;
}

/* Element j of the step's input on `rank`. */
static inline DECODE_HD int decode_input(int rank, size_t j) { return (int)((j + (size_t)rank) % 3); }

/* What layer `layer` on `rank` writes at j, from the reduced value `in` the
 * layer before left there (or the input). */
static inline DECODE_HD int decode_layer_value(int in, int rank, int layer, size_t j) {
  return (in + rank + layer + (int)(j % 8)) % 4;
}

#ifdef __cplusplus
extern "C" {
#endif

/* One layer on `stream` (DECODE_BLOCKS blocks of DECODE_THREADS): out[j] =
 * decode_layer_value(in[j], rank, layer, j) in bfloat16 for j < count, then
 * each block spins on %globaltimer until `ns` nanoseconds after its start
 * (the layer's GEMM time). Works inside a stream capture. Returns the launch
 * error. */
cudaError_t decode_layer_launch(const uint16_t *in, uint16_t *out, size_t count, int rank, int layer,
                                unsigned long long ns, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
