/* The device executor: what run.c calls for a device plan, from the CUDA
 * realizer (cuda_plan.c), its bucket tables (bucket_cuda.c) and its
 * profiling (cuda_profile.c). */
#include "bucket_cuda.h"
#include "cuda_plan_state.h"
#include "device_exec.h"

static const cg_executor_t cuda_executor = {
    .name = "cuda",
    .build = cg_cuda_build,
    .prepare_buckets = cg_cuda_bucket_tables,
    .release = cg_cuda_release,
    .start = cg_cuda_start,
    .test = cg_cuda_test,
    .wait = cg_cuda_wait,
    .quiesce = cg_cuda_quiesce,
    .rebuild = cg_cuda_rebuild,
    .profile = cg_cuda_profile,
    .timed_replay = cg_cuda_timed_replay,
};

const cg_executor_t *cg_device_executor(void) { return &cuda_executor; }
