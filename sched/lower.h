/* Lowering a checked graph to a plan's steps (lower.c) and laying out its
 * buckets' buffers and copies (bucket.c). */
#ifndef CG_SCHED_LOWER_H
#define CG_SCHED_LOWER_H

#include "comm_order.h"
#include "fusion.h"
#include "plan_internal.h"

/* Fills the plan's steps, dependencies, communicators, lanes, buckets (their
 * members and steps), node names and fusion reasons. p->device must be set. */
cg_status_t cg_plan_lower(cg_plan_t *p, const cg_graph_t *g, const cg_comm_order_t *order, const cg_fusion_t *f,
                          const char *where);

/* Frees plan->nodes (cg_plan_lower fills them). */
void cg_plan_free_nodes(cg_plan_t *p);

/* Decides, per bucket, which side runs on the members' own buffers, allocates
 * the staging memory (device memory for a device plan), builds the copy
 * segments and points each bucket's collective step at its fused buffers. */
cg_status_t cg_plan_layout_buckets(cg_plan_t *p, const char *where);

/* Frees the buckets, their segments and the staging memory. */
void cg_plan_free_buckets(cg_plan_t *p);
/* Frees what cg_plan_layout_buckets made for `n` buckets (copy segments,
 * device chunk tables) and the staging memory, not the buckets themselves. */
void cg_bucket_layouts_free(cg_bucket_t *buckets, uint32_t n, void *staging, int device);

/* Runs a pack or unpack step's copies on the host. */
void cg_bucket_copy_host(const cg_plan_t *p, const cg_step_t *step);

#if CG_HAVE_CUDA
/* Device memory for staging and chunk tables (bucket_cuda.c). */
cg_status_t cg_cuda_staging_alloc(void **out, size_t bytes, int device, const char *where);
void cg_cuda_staging_free(void *ptr, int device);
/* Builds a device plan's chunk tables for every bucket's copies. */
cg_status_t cg_cuda_bucket_tables(cg_plan_t *p, const char *where);
/* Enqueues a pack or unpack step's copies on `stream` (one kernel; nothing when
 * it has no copies). */
cg_status_t cg_cuda_bucket_copy(const cg_plan_t *p, const cg_step_t *step, void *stream, const char *where);
#endif

#endif
