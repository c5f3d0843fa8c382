#include <stdarg.h>
#include <stdio.h>

#include "error.h"

const char *cg_status_string(cg_status_t status) {
  switch (status) {
#define CG_STATUS_CASE(name, value, text) \
  case name:                              \
    return text;
    CG_STATUS_LIST(CG_STATUS_CASE)
#undef CG_STATUS_CASE
  }
  return "unknown status";
}

static _Thread_local char last_error[CG_ERROR_BYTES];

const char *cg_error_last(void) { return last_error; }

cg_status_t cg_fail(cg_status_t status, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, args);
  va_end(args);
  return status;
}

cg_status_t cg_check_opts_size(size_t given, size_t expected, const char *where, const char *what) {
  if (given == expected) return CG_SUCCESS;
  return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: %s.size is %zu, expected %zu: initialize it with its *_INIT macro",
                 where, what, given, expected);
}
