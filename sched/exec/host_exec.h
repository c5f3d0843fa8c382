/* The host executor (host_exec.c): runs a host plan's steps on the calling
 * thread. */
#ifndef CG_SCHED_HOST_EXEC_H
#define CG_SCHED_HOST_EXEC_H

#include "executor.h"

extern const cg_executor_t cg_host_executor;

#endif
