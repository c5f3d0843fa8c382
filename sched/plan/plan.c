/* A plan's lifetime: what cg_compile allocated, freed in one place, and
 * cg_plan_destroy. The executor's state goes first, through the plan's table
 * (executor.h), before the communicators it captured are released. */
#include <stdlib.h>

#include "backend.h"
#include "device_memory.h"
#include "error.h"
#include "executor.h"
#include "plan_internal.h"

void cg_plan_comms_by_id(uint32_t *order, const cg_plan_t *p) {
  for (uint32_t i = 0; i < p->n_comms; i++) {
    uint32_t k = i;
    for (; k > 0 && p->comms[order[k - 1]].comm->id > p->comms[i].comm->id; k--) order[k] = order[k - 1];
    order[k] = i;
  }
}

int cg_plan_lane_runs_cuda_nodes(const cg_plan_t *p, uint32_t lane) {
  for (uint32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].lane == lane && p->steps[i].kind == CG_STEP_CUDA_NODE) return 1;
  return 0;
}

void cg_plan_free_nodes(cg_plan_t *p) {
  for (uint32_t v = 0; p->nodes && v < p->n_names; v++) free(p->nodes[v].spans);
  free(p->nodes);
  p->nodes = NULL;
}

void cg_bucket_layouts_free(cg_bucket_t *buckets, uint32_t n, void *staging, int device) {
  for (uint32_t i = 0; i < n; i++) {
    cg_bucket_t *b = &buckets[i];
    free(b->pack);
    free(b->unpack);
    /* chunk tables exist on device plans only */
    if (b->device_pack) cg_device_free(b->device_pack, device);
    if (b->device_unpack) cg_device_free(b->device_unpack, device);
  }
  if (device == CG_DEVICE_HOST)
    free(staging);
  else
    cg_device_free(staging, device);
}

void cg_plan_free_buckets(cg_plan_t *p) {
  if (p->buckets) cg_bucket_layouts_free(p->buckets, p->n_buckets, p->staging, p->device);
  for (uint32_t i = 0; p->buckets && i < p->n_buckets; i++) free(p->buckets[i].members);
  free(p->buckets);
  p->buckets = NULL;
  p->n_buckets = 0;
  p->staging = NULL;
}

void cg_plan_free(cg_plan_t *p) {
  if (!p) return;
  if (p->exec && p->exec->release) p->exec->release(p); /* before the communicators it captured go */
  for (uint32_t i = 0; i < p->n_steps; i++) {
    cg_step_t *s = &p->steps[i];
    const cg_backend_t *b = s->comm ? s->comm->ops->backend : NULL;
    if (s->backend_state && b && b->host_step_release) b->host_step_release(s->comm->impl, s->backend_state);
  }
  cg_plan_free_buckets(p);
  cg_plan_free_nodes(p);
  for (uint32_t i = 0; p->node_names && i < p->n_names; i++) free(p->node_names[i]);
  /* in agreed-id order: releasing the last reference may destroy the
   * communicator, which is collective in practice (ncclCommFinalize,
   * MPI_Comm_free), so every rank does it in the same order */
  uint32_t *by_id = malloc((p->n_comms ? p->n_comms : 1) * sizeof *by_id);
  if (by_id) cg_plan_comms_by_id(by_id, p);
  for (uint32_t c = 0; c < p->n_comms; c++) cg_comm_release(p->comms[by_id ? by_id[c] : c].comm);
  free(by_id);
  if (p->tuning) cg_tuning_free(p->tuning);
  if (p->measured) cg_profile_free(p->measured);
  free(p->tuning);
  free(p->measured);
  free(p->tune_log);
  free(p->comm_step_storage);
  free(p->comms);
  free(p->node_names);
  free(p->fuse_why);
  free(p->lanes);
  free(p->dep_storage);
  free(p->issue_order);
  free(p->units);
  free(p->steps);
  free(p->name);
  free(p);
}


void cg_plan_destroy(cg_plan_t *plan) {
  if (!plan) return;
  if (plan->exec) plan->exec->wait(plan);
  cg_plan_free(plan);
}
