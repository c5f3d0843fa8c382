/* The batched copy kernel (bucket_copy.cu): a table of chunks, one thread
 * block each. */
#ifndef CG_SCHED_BUCKET_COPY_H
#define CG_SCHED_BUCKET_COPY_H

#include <cuda_runtime_api.h>
#include <stdint.h>

/* Segments are cut into chunks of at most this many bytes, at multiples of it,
 * so a chunk keeps its segment's alignment. */
#define CG_COPY_CHUNK_BYTES (64u << 10)
#define CG_COPY_THREADS 256

typedef struct cg_copy_chunk {
  const void *src;
  void *dst;
  uint64_t bytes;
} cg_copy_chunk_t;

#ifdef __cplusplus
extern "C" {
#endif
cudaError_t cg_copy_chunks_launch(const cg_copy_chunk_t *table, unsigned n_chunks, cudaStream_t stream);
#ifdef __cplusplus
}
#endif

#endif
