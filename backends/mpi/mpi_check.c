#include "mpi_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *cg_mpi_error_class_name(int error_class, char *buf, size_t size) {
  switch (error_class) {
#define CG_MPI_CLASS(name) \
  case name:               \
    return #name;
    CG_MPI_CLASS(MPI_SUCCESS)
    CG_MPI_CLASS(MPI_ERR_BUFFER)
    CG_MPI_CLASS(MPI_ERR_COUNT)
    CG_MPI_CLASS(MPI_ERR_TYPE)
    CG_MPI_CLASS(MPI_ERR_TAG)
    CG_MPI_CLASS(MPI_ERR_COMM)
    CG_MPI_CLASS(MPI_ERR_RANK)
    CG_MPI_CLASS(MPI_ERR_REQUEST)
    CG_MPI_CLASS(MPI_ERR_ROOT)
    CG_MPI_CLASS(MPI_ERR_GROUP)
    CG_MPI_CLASS(MPI_ERR_OP)
    CG_MPI_CLASS(MPI_ERR_TOPOLOGY)
    CG_MPI_CLASS(MPI_ERR_DIMS)
    CG_MPI_CLASS(MPI_ERR_ARG)
    CG_MPI_CLASS(MPI_ERR_UNKNOWN)
    CG_MPI_CLASS(MPI_ERR_TRUNCATE)
    CG_MPI_CLASS(MPI_ERR_OTHER)
    CG_MPI_CLASS(MPI_ERR_INTERN)
    CG_MPI_CLASS(MPI_ERR_IN_STATUS)
    CG_MPI_CLASS(MPI_ERR_PENDING)
    CG_MPI_CLASS(MPI_ERR_NO_MEM)
    CG_MPI_CLASS(MPI_ERR_INFO)
    CG_MPI_CLASS(MPI_ERR_INFO_KEY)
    CG_MPI_CLASS(MPI_ERR_INFO_VALUE)
    CG_MPI_CLASS(MPI_ERR_INFO_NOKEY)
    CG_MPI_CLASS(MPI_ERR_KEYVAL)
    CG_MPI_CLASS(MPI_ERR_SPAWN)
    CG_MPI_CLASS(MPI_ERR_PORT)
    CG_MPI_CLASS(MPI_ERR_SERVICE)
    CG_MPI_CLASS(MPI_ERR_NAME)
    CG_MPI_CLASS(MPI_ERR_WIN)
    CG_MPI_CLASS(MPI_ERR_BASE)
    CG_MPI_CLASS(MPI_ERR_SIZE)
    CG_MPI_CLASS(MPI_ERR_DISP)
    CG_MPI_CLASS(MPI_ERR_LOCKTYPE)
    CG_MPI_CLASS(MPI_ERR_ASSERT)
    CG_MPI_CLASS(MPI_ERR_RMA_CONFLICT)
    CG_MPI_CLASS(MPI_ERR_RMA_SYNC)
    CG_MPI_CLASS(MPI_ERR_RMA_RANGE)
    CG_MPI_CLASS(MPI_ERR_RMA_ATTACH)
    CG_MPI_CLASS(MPI_ERR_RMA_SHARED)
    CG_MPI_CLASS(MPI_ERR_RMA_FLAVOR)
    CG_MPI_CLASS(MPI_ERR_FILE)
    CG_MPI_CLASS(MPI_ERR_NOT_SAME)
    CG_MPI_CLASS(MPI_ERR_AMODE)
    CG_MPI_CLASS(MPI_ERR_UNSUPPORTED_DATAREP)
    CG_MPI_CLASS(MPI_ERR_UNSUPPORTED_OPERATION)
    CG_MPI_CLASS(MPI_ERR_NO_SUCH_FILE)
    CG_MPI_CLASS(MPI_ERR_FILE_EXISTS)
    CG_MPI_CLASS(MPI_ERR_BAD_FILE)
    CG_MPI_CLASS(MPI_ERR_ACCESS)
    CG_MPI_CLASS(MPI_ERR_NO_SPACE)
    CG_MPI_CLASS(MPI_ERR_QUOTA)
    CG_MPI_CLASS(MPI_ERR_READ_ONLY)
    CG_MPI_CLASS(MPI_ERR_FILE_IN_USE)
    CG_MPI_CLASS(MPI_ERR_DUP_DATAREP)
    CG_MPI_CLASS(MPI_ERR_CONVERSION)
    CG_MPI_CLASS(MPI_ERR_IO)
#ifdef MPI_ERR_PROC_ABORTED
    CG_MPI_CLASS(MPI_ERR_PROC_ABORTED)
#endif
#ifdef MPI_ERR_SESSION
    CG_MPI_CLASS(MPI_ERR_SESSION)
#endif
#ifdef MPI_ERR_VALUE_TOO_LARGE
    CG_MPI_CLASS(MPI_ERR_VALUE_TOO_LARGE)
#endif
#ifdef MPIX_ERR_PROC_FAILED
    CG_MPI_CLASS(MPIX_ERR_PROC_FAILED)
#endif
#ifdef MPIX_ERR_PROC_FAILED_PENDING
    CG_MPI_CLASS(MPIX_ERR_PROC_FAILED_PENDING)
#endif
#ifdef MPIX_ERR_REVOKED
    CG_MPI_CLASS(MPIX_ERR_REVOKED)
#endif
#undef CG_MPI_CLASS
    default: break;
  }
  snprintf(buf, size, "MPI error class %d", error_class);
  return buf;
}

int cg_mpi_request_error(int returned, const MPI_Status *status) {
  if (returned == MPI_ERR_IN_STATUS && status && status != MPI_STATUS_IGNORE) return status->MPI_ERROR;
  return returned;
}

/* MPI's text for `mpi_error`, its first line only, without MPICH's
 * ", error stack:" tail. */
static void error_text(char *text, size_t size, int mpi_error) {
  char raw[MPI_MAX_ERROR_STRING + 1] = "";
  int len = 0;
  if (MPI_Error_string(mpi_error, raw, &len) != MPI_SUCCESS || !raw[0])
    snprintf(raw, sizeof raw, "MPI error code %d", mpi_error);
  raw[sizeof raw - 1] = '\0';
  raw[strcspn(raw, "\n")] = '\0';
  char *stack = strstr(raw, ", error stack:");
  if (stack) *stack = '\0';
  size_t n = strlen(raw);
  while (n && (raw[n - 1] == ' ' || raw[n - 1] == ',')) raw[--n] = '\0';
  snprintf(text, size, "%s", raw);
}

static cg_status_t vfail_mpi(int mpi_error, const char *call, const char *fmt, va_list args) {
  char context[1024] = "", text[MPI_MAX_ERROR_STRING + 1], class_buf[48];
  if (fmt) vsnprintf(context, sizeof context, fmt, args);
  error_text(text, sizeof text, mpi_error);
  int error_class = MPI_ERR_UNKNOWN;
  if (MPI_Error_class(mpi_error, &error_class) != MPI_SUCCESS) error_class = MPI_ERR_UNKNOWN;
  const char *class_name = cg_mpi_error_class_name(error_class, class_buf, sizeof class_buf);
  return cg_fail(CG_ERR_BACKEND, "%s%s%s: %s (%s)", context, context[0] ? ": " : "", call, text, class_name);
}

cg_status_t cg_fail_mpi(int mpi_error, const char *call, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  cg_status_t st = vfail_mpi(mpi_error, call, fmt, args);
  va_end(args);
  return st;
}

cg_status_t cg_mpi_fail(int mpi_error, const char *call) { return cg_fail_mpi(mpi_error, call, "%s", ""); }

cg_status_t cg_mpi_errors_return(MPI_Comm comm, const char *where) {
  if (comm == MPI_COMM_NULL) return CG_SUCCESS;
  int err = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return err == MPI_SUCCESS ? CG_SUCCESS : cg_fail_mpi(err, "MPI_Comm_set_errhandler", "%s", where);
}
