/* A build without CUDA has no device executor: every communicator and node
 * is on the host, so cg_compile never asks for one. */
#include "device_exec.h"
#include "error.h"

const cg_executor_t *cg_device_executor(void) { return NULL; }

cg_status_t cg_executor_current_device(int *device, const char *where) {
  *device = CG_DEVICE_HOST;
  return cg_fail(CG_ERR_UNSUPPORTED, "%s: this build has no CUDA", where);
}
