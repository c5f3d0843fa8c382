/* Device plans' buckets: staging memory, and each pack and unpack as one
 * launch of the batched copy kernel over a chunk table in device memory. */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "bucket_copy.h"
#include "error.h"
#include "lower.h"
#include "memory_kind.h"

/* Padded (cg_pad16): NCCL reads a bucket's fused buffer in 16-byte units,
 * past its last element; the padding is zeroed, so initcheck sees those
 * reads as reads of initialized memory. */
cg_status_t cg_cuda_staging_alloc(void **out, size_t bytes, int device, const char *where) {
  int previous = 0;
  *out = NULL;
  size_t padded = cg_pad16(bytes);
  if (padded == SIZE_MAX)
    return cg_fail(CG_ERR_OVERFLOW, "%s: %zu bytes of bucket staging overflow size_t once padded", where, bytes);
  cudaGetDevice(&previous);
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMalloc(out, padded);
  if (err != cudaSuccess) *out = NULL;
  if (err == cudaSuccess && padded > bytes) err = cudaMemset((char *)*out + bytes, 0, padded - bytes);
  if (err != cudaSuccess && *out) {
    cudaFree(*out);
    *out = NULL;
  }
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    return cg_fail(err == cudaErrorMemoryAllocation ? CG_ERR_NO_MEMORY : CG_ERR_BACKEND,
                   "%s: allocating %zu bytes of bucket staging on device %d: %s", where, padded, device,
                   cudaGetErrorString(err));
  }
  return CG_SUCCESS;
}

void cg_cuda_staging_free(void *ptr, int device) {
  if (!ptr) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  cudaFree(ptr);
  cudaSetDevice(previous);
}

static cg_status_t make_table(void **table, uint32_t *n_chunks, const cg_copy_segment_t *segs, uint32_t n, int device,
                              const char *where) {
  size_t count = 0;
  *table = NULL;
  *n_chunks = 0;
  for (uint32_t k = 0; k < n; k++) count += (segs[k].bytes + CG_COPY_CHUNK_BYTES - 1) / CG_COPY_CHUNK_BYTES;
  if (!count) return CG_SUCCESS;
  if (count > 0x7fffffffu) return cg_fail(CG_ERR_UNSUPPORTED, "%s: a bucket copies %zu chunks, more than one launch takes", where, count);
  cg_copy_chunk_t *host = malloc(count * sizeof *host);
  if (!host) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating a chunk table of %zu entries", where, count);
  size_t used = 0;
  for (uint32_t k = 0; k < n; k++)
    for (size_t off = 0; off < segs[k].bytes; off += CG_COPY_CHUNK_BYTES) {
      size_t left = segs[k].bytes - off;
      host[used++] = (cg_copy_chunk_t){(const char *)segs[k].src + off, (char *)segs[k].dst + off,
                                       left < CG_COPY_CHUNK_BYTES ? left : CG_COPY_CHUNK_BYTES};
    }
  cg_status_t st = cg_cuda_staging_alloc(table, count * sizeof *host, device, where);
  if (st == CG_SUCCESS) {
    cudaError_t err = cudaMemcpy(*table, host, count * sizeof *host, cudaMemcpyHostToDevice);
    if (err != cudaSuccess) {
      cg_cuda_staging_free(*table, device);
      *table = NULL;
      st = cg_fail(CG_ERR_BACKEND, "%s: copying a chunk table to device %d: %s", where, device, cudaGetErrorString(err));
    }
  }
  free(host);
  if (st == CG_SUCCESS) *n_chunks = (uint32_t)count;
  return st;
}

cg_status_t cg_cuda_bucket_tables(cg_plan_t *p, const char *where) {
  cg_status_t st = CG_SUCCESS;
  for (uint32_t i = 0; i < p->n_buckets && st == CG_SUCCESS; i++) {
    cg_bucket_t *b = &p->buckets[i];
    st = make_table(&b->device_pack, &b->n_pack_chunks, b->pack, b->n_pack, p->device, where);
    if (st == CG_SUCCESS) st = make_table(&b->device_unpack, &b->n_unpack_chunks, b->unpack, b->n_unpack, p->device, where);
  }
  return st;
}

cg_status_t cg_cuda_bucket_copy(const cg_plan_t *p, const cg_step_t *step, void *stream, const char *where) {
  const cg_bucket_t *b = &p->buckets[step->bucket];
  int pack = step->kind == CG_STEP_PACK;
  cudaError_t err = cg_copy_chunks_launch(pack ? b->device_pack : b->device_unpack,
                                          pack ? b->n_pack_chunks : b->n_unpack_chunks, (cudaStream_t)stream);
  if (err != cudaSuccess) return cg_fail(CG_ERR_BACKEND, "%s: the copy kernel: %s", where, cudaGetErrorString(err));
  return CG_SUCCESS;
}
