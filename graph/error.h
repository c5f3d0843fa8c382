/* Setting the per-thread error detail behind cg_error_last(). */
#ifndef CG_GRAPH_ERROR_H
#define CG_GRAPH_ERROR_H

#include "commgraph/status.h"

#if defined(__GNUC__)
#define CG_PRINTF_LIKE(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define CG_PRINTF_LIKE(fmt_index, first_arg)
#endif

/* Records the detail for cg_error_last() and returns `status`, so callers can
 * write `return cg_fail(CG_ERR_..., "...", ...)`. */
cg_status_t cg_fail(cg_status_t status, const char *fmt, ...) CG_PRINTF_LIKE(2, 3);

#endif
