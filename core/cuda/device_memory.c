#include "device_memory.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "cuda_check.h"
#include "memory_kind.h"

cg_status_t cg_device_alloc(void **out, size_t bytes, int device, const char *what, const char *where) {
  int previous = 0;
  *out = NULL;
  size_t padded = cg_pad16(bytes);
  if (padded == SIZE_MAX)
    return cg_fail(CG_ERR_OVERFLOW, "%s: %zu bytes of %s overflow size_t once padded", where, bytes, what);
  cudaGetDevice(&previous);
  const char *call = "cudaSetDevice";
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) {
    call = "cudaMalloc";
    err = cudaMalloc(out, padded);
  }
  if (err != cudaSuccess) *out = NULL;
  if (err == cudaSuccess && padded > bytes) {
    call = "cudaMemset (padding)";
    err = cudaMemset((char *)*out + bytes, 0, padded - bytes);
  }
  if (err != cudaSuccess && *out) {
    cudaFree(*out);
    *out = NULL;
  }
  cudaSetDevice(previous);
  if (err != cudaSuccess)
    return cg_fail_cuda(err, call, "%s: allocating %zu bytes of %s on device %d", where, padded, what, device);
  return CG_SUCCESS;
}

void cg_device_free(void *ptr, int device) {
  if (!ptr) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  cudaFree(ptr);
  cudaSetDevice(previous);
}
