/* Setting the per-thread error detail behind cg_error_last(). */
#ifndef CG_CORE_ERROR_H
#define CG_CORE_ERROR_H

#include <stddef.h>

#include "commgraph/status.h"

#if defined(__GNUC__)
#define CG_PRINTF_LIKE(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define CG_PRINTF_LIKE(fmt_index, first_arg)
/* Accepts an options struct whose size field matches this library's; the
 * error detail starts with `where` and names the struct as `what`. */
cg_status_t cg_check_opts_size(size_t given, size_t expected, const char *where, const char *what);

#endif

/* Bytes of the detail cg_error_last() holds, its end included: a copy of
 * one in a buffer this large is never cut. */
#define CG_ERROR_BYTES 2560

/* Records the detail for cg_error_last() and returns `status`, so callers can
 * write `return cg_fail(CG_ERR_..., "...", ...)`. */
cg_status_t cg_fail(cg_status_t status, const char *fmt, ...) CG_PRINTF_LIKE(2, 3);

/* Accepts an options struct whose size field matches this library's; the
 * error detail starts with `where` and names the struct as `what`. */
cg_status_t cg_check_opts_size(size_t given, size_t expected, const char *where, const char *what);

#endif
