/* The executor of device plans, when the build has one: exec/cuda/ defines
 * it (the CUDA graph realizer), exec/nocuda/ says there is none. CMake
 * builds one of the two. */
#ifndef CG_SCHED_DEVICE_EXEC_H
#define CG_SCHED_DEVICE_EXEC_H

#include "executor.h"

/* NULL in a build without CUDA. */
const cg_executor_t *cg_device_executor(void);

#endif
