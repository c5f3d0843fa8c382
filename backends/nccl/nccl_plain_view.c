/* A second, windowless mapping of symmetric memory: see nccl_plain_view.h. */
#include "nccl_plain_view.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <threads.h>

/* The driver calls, looked up once (CUDA 12.0's versions of them). */
typedef struct driver_calls {
  CUresult (*retain)(CUmemGenericAllocationHandle *, void *);
  CUresult (*address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*address_free)(CUdeviceptr, size_t);
  int found; /* every one of them */
} driver_calls_t;

static driver_calls_t driver;
static once_flag driver_once = ONCE_FLAG_INIT;

static int look_up(void **fn, const char *symbol) {
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  *fn = NULL;
  return cudaGetDriverEntryPointByVersion(symbol, fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
         found == cudaDriverEntryPointSuccess && *fn;
}

static void find_driver_calls(void) {
  void *fns[8];
  static const char *const symbols[8] = {"cuMemRetainAllocationHandle", "cuMemGetAddressRange", "cuMemAddressReserve",
                                         "cuMemMap", "cuMemSetAccess", "cuMemRelease", "cuMemUnmap",
                                         "cuMemAddressFree"};
  int found = 1;
  for (int i = 0; i < 8; i++) found &= look_up(&fns[i], symbols[i]);
  if (!found) return;
  driver.retain = (CUresult(*)(CUmemGenericAllocationHandle *, void *))fns[0];
  driver.address_range = (CUresult(*)(CUdeviceptr *, size_t *, CUdeviceptr))fns[1];
  driver.reserve = (CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))fns[2];
  driver.map = (CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))fns[3];
  driver.set_access = (CUresult(*)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))fns[4];
  driver.release = (CUresult(*)(CUmemGenericAllocationHandle))fns[5];
  driver.unmap = (CUresult(*)(CUdeviceptr, size_t))fns[6];
  driver.address_free = (CUresult(*)(CUdeviceptr, size_t))fns[7];
  driver.found = 1;
}

void cg_nccl_plain_view_map(cg_nccl_plain_view_t *view, const char **why, void *memory, int device) {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr start = 0, alias = 0;
  size_t bytes = 0;
  int retained = 0, reserved = 0, mapped = 0;
  *view = (cg_nccl_plain_view_t){0};
  *why = NULL;
  call_once(&driver_once, find_driver_calls);
  if (!driver.found) {
    *why = "the CUDA driver has no virtual memory management calls";
    goto out;
  }
  /* the whole allocation: ncclMemAlloc rounds it up to the granularity, and
   * a mapping takes the handle's size */
  if (driver.address_range(&start, &bytes, (CUdeviceptr)(uintptr_t)memory) != CUDA_SUCCESS ||
      start != (CUdeviceptr)(uintptr_t)memory) {
    *why = "cuMemGetAddressRange does not see the arena as one allocation";
    goto out;
  }
  if (driver.retain(&handle, memory) != CUDA_SUCCESS) {
    *why = "cuMemRetainAllocationHandle failed (ncclMemAlloc did not use cuMem here)";
    goto out;
  }
  retained = 1;
  if (driver.reserve(&alias, bytes, 0, 0, 0) != CUDA_SUCCESS) {
    *why = "cuMemAddressReserve failed";
    goto out;
  }
  reserved = 1;
  if (driver.map(alias, bytes, 0, handle, 0) != CUDA_SUCCESS) {
    *why = "cuMemMap failed";
    goto out;
  }
  mapped = 1;
  CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (driver.set_access(alias, bytes, &access, 1) != CUDA_SUCCESS) {
    *why = "cuMemSetAccess failed";
    goto out;
  }
  *view = (cg_nccl_plain_view_t){(void *)(uintptr_t)alias, bytes};
out:
  if (!view->base && mapped) driver.unmap(alias, bytes);
  if (!view->base && reserved) driver.address_free(alias, bytes);
  /* the mapping holds the memory now; the allocation goes when both are unmapped */
  if (retained) driver.release(handle);
}

void cg_nccl_plain_view_unmap(cg_nccl_plain_view_t *view) {
  if (view->base && driver.found) {
    driver.unmap((CUdeviceptr)(uintptr_t)view->base, view->bytes);
    driver.address_free((CUdeviceptr)(uintptr_t)view->base, view->bytes);
  }
  *view = (cg_nccl_plain_view_t){0};
}
