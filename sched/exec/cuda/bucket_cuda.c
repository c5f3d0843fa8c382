/* Device plans' buckets: staging memory, and each pack and unpack as one
 * launch of the batched copy kernel over a chunk table in device memory. */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "bucket_copy.h"
#include "bucket_cuda.h"
#include "cuda_check.h"
#include "device_memory.h"

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
  cg_status_t st = cg_device_alloc(table, count * sizeof *host, device, "a copy chunk table", where);
  if (st == CG_SUCCESS) {
    cudaError_t err = cudaMemcpy(*table, host, count * sizeof *host, cudaMemcpyHostToDevice);
    if (err != cudaSuccess) {
      cg_device_free(*table, device);
      *table = NULL;
      st = cg_fail_cuda(err, "cudaMemcpy", "%s: copying a chunk table to device %d", where, device);
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
  if (err != cudaSuccess) return cg_fail_cuda(err, "the copy kernel", "%s", where);
  return CG_SUCCESS;
}
