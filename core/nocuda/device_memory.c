/* Device memory in a build without CUDA: there is none to allocate. */
#include "device_memory.h"

#include "error.h"

cg_status_t cg_device_alloc(void **out, size_t bytes, int device, const char *what, const char *where) {
  *out = NULL;
  return cg_fail(CG_ERR_UNSUPPORTED, "%s: %zu bytes of %s on device %d: this build has no CUDA", where, bytes, what,
                 device);
}

void cg_device_free(void *ptr, int device) {
  (void)ptr;
  (void)device;
}
