/* Buffer placement (memory_kind.h). The runtime's cudaPointerGetAttributes
 * would create a context on the current GPU the first time it is called, and
 * a host-only MPI program must not get one per rank on GPU 0 for recording a
 * collective. The driver's cuPointerGetAttributes creates none, so it is
 * looked up in libcuda at run time, once the process has loaded libcuda:
 * before that (and on a machine without a driver) there is no device memory
 * to mistake. */
#define _POSIX_C_SOURCE 200809L
#include "memory_kind.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "commgraph/comm.h"

typedef CUresult (*init_fn)(unsigned int flags);
typedef CUresult (*pointer_attributes_fn)(unsigned int n, CUpointer_attribute *attributes, void **data,
                                          CUdeviceptr ptr);
typedef CUresult (*device_get_fn)(CUdevice *device, int ordinal);
typedef CUresult (*device_attribute_fn)(int *value, CUdevice_attribute attribute, CUdevice device);

static struct {
  pointer_attributes_fn pointer_attributes;
  device_get_fn device_get;
  device_attribute_fn device_attribute;
} driver;
static pthread_mutex_t driver_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int driver_loaded; /* 1 once `driver` is filled (release) */
static int driver_unusable;      /* loaded, but cuInit failed: no CUDA memory can exist; under driver_lock */

/* Whether the driver's functions are at hand. Memory CUDA knows of can only
 * exist once the process has loaded libcuda (the CUDA runtime does on its
 * first call), so it is never loaded here (RTLD_NOLOAD): a host-only program
 * pays neither the load nor cuInit. Until it is loaded every call looks
 * again. */
static int driver_ready(void) {
  if (atomic_load_explicit(&driver_loaded, memory_order_acquire)) return 1;
  pthread_mutex_lock(&driver_lock);
  void *lib = atomic_load_explicit(&driver_loaded, memory_order_relaxed) || driver_unusable
                  ? NULL
                  : dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib) {
    init_fn init = (init_fn)dlsym(lib, "cuInit");
    pointer_attributes_fn pointer_attributes = (pointer_attributes_fn)dlsym(lib, "cuPointerGetAttributes");
    if (init && pointer_attributes && init(0) == CUDA_SUCCESS) {
      /* the reference stays for the life of the process */
      driver.device_get = (device_get_fn)dlsym(lib, "cuDeviceGet");
      driver.device_attribute = (device_attribute_fn)dlsym(lib, "cuDeviceGetAttribute");
      driver.pointer_attributes = pointer_attributes;
      atomic_store_explicit(&driver_loaded, 1, memory_order_release);
    } else {
      driver_unusable = 1;
      dlclose(lib);
    }
  }
  pthread_mutex_unlock(&driver_lock);
  return atomic_load_explicit(&driver_loaded, memory_order_acquire);
}

void cg_memory_locate(cg_memory_kind_t *kind, int *device, const void *ptr) {
  *kind = CG_MEMORY_HOST;
  *device = -1;
  if (!ptr || !driver_ready()) return;
  /* cuPointerGetAttributes leaves zeros for memory CUDA does not know
   * instead of failing; bool attributes fill their first byte */
  unsigned int type = 0, managed = 0;
  int ordinal = -1;
  CUpointer_attribute attributes[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                       CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void *data[3] = {&type, &managed, &ordinal};
  if (driver.pointer_attributes(3, attributes, data, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS) {
    /* the ordinal needs a driver of CUDA 9.2 or later; the type does not */
    type = managed = 0;
    ordinal = -1;
    if (driver.pointer_attributes(2, attributes, data, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS) return;
  }
  if (managed)
    *kind = CG_MEMORY_MANAGED;
  else if (type == CU_MEMORYTYPE_DEVICE) {
    *kind = CG_MEMORY_DEVICE;
    *device = ordinal;
  } else if (type == CU_MEMORYTYPE_HOST)
    *kind = CG_MEMORY_PINNED;
}

int cg_memory_one_allocation(const void *ptr, size_t bytes) {
  if (!ptr || bytes == 0 || !driver_ready()) return 1;
  unsigned int type = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  CUpointer_attribute attributes[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                       CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *data[3] = {&type, &start, &size};
  if (driver.pointer_attributes(3, attributes, data, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS) {
    /* no range to be had: memory CUDA does not know is not split, anything
     * else is copied to be safe */
    type = 0;
    return driver.pointer_attributes(1, attributes, data, (CUdeviceptr)(uintptr_t)ptr) == CUDA_SUCCESS && type == 0;
  }
  if (type == 0) return 1; /* pageable host memory */
  uintptr_t first = (uintptr_t)ptr;
  return first >= (uintptr_t)start && bytes <= (uintptr_t)start + size - first;
}

/* Whether GPU `ordinal` reads pageable host memory directly (HMM, ATS). */
static int reads_pageable_memory(int ordinal) {
  CUdevice device = 0;
  if (!driver_ready()) return 0;
  int value = 0;
  if (!driver.device_get || !driver.device_attribute || driver.device_get(&device, ordinal) != CUDA_SUCCESS)
    return 0;
  return driver.device_attribute(&value, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, device) == CUDA_SUCCESS && value;
}

int cg_memory_fits(int device, const void *ptr, char *why, size_t why_size) {
  cg_memory_kind_t kind;
  int holder = -1;
  cg_memory_locate(&kind, &holder, ptr);
  if (device == CG_DEVICE_HOST) {
    if (kind != CG_MEMORY_DEVICE) return 0;
    snprintf(why, why_size, "is memory of device %d, but the communicator runs on the host and needs host memory "
             "(pageable, pinned or managed)", holder);
    return -1;
  }
  if (kind == CG_MEMORY_MANAGED || kind == CG_MEMORY_PINNED) return 0;
  if (kind == CG_MEMORY_DEVICE && holder == device) return 0;
  if (kind == CG_MEMORY_HOST && reads_pageable_memory(device)) return 0;
  if (kind == CG_MEMORY_DEVICE)
    snprintf(why, why_size, "is memory of device %d, but the communicator runs on device %d", holder, device);
  else
    snprintf(why, why_size, "is host memory CUDA does not know, but the communicator runs on device %d and needs its "
             "device memory, managed memory or pinned host memory", device);
  return -1;
}
