/* cg_compile: a recorded graph becomes a plan of steps. After the cross-rank
 * check, the fusion pass groups nodes into buckets (fusion.h) and the ranks
 * agree on them; lowering (lower.c) turns buckets and the other nodes into
 * steps, bucket.c lays out the buckets' buffers, and a device plan is then
 * captured into a CUDA graph (cuda_plan.c). */
#include <stdio.h>
#include <stdlib.h>

#include "agreement.h"
#include "backend.h"
#include "comm_order.h"
#include "fusion.h"
#include "lower.h"
#include "error.h"
#include "graph_view.h"
#include "plan_internal.h"
#include "rank_check.h"
#include "watchdog.h"

void cg_step_describe(char *buf, size_t size, const cg_plan_t *plan, uint32_t index) {
  const cg_step_t *s = &plan->steps[index];
  char plan_name[300] = "", node_name[300] = "", where[64] = "", bucket[700] = "";
  if (plan->name) snprintf(plan_name, sizeof plan_name, "plan '%s' ", plan->name);
  if (plan->node_names[s->node]) snprintf(node_name, sizeof node_name, " '%s'", plan->node_names[s->node]);
  if (s->comm) snprintf(where, sizeof where, " on rank %d of %d", s->comm->rank, s->comm->size);
  if (s->bucket != CG_NO_STEP) {
    const cg_bucket_t *b = &plan->buckets[s->bucket];
    uint32_t last = b->members[b->n_members - 1];
    const char *what = s->kind == CG_STEP_PACK ? "pack of " : s->kind == CG_STEP_UNPACK ? "unpack of " : "";
    snprintf(bucket, sizeof bucket, "%sbucket %u of %u nodes: #%u%s .. #%u%s%s%s, ", what, s->bucket, b->n_members,
             s->node, node_name, last, plan->node_names[last] ? " '" : "",
             plan->node_names[last] ? plan->node_names[last] : "", plan->node_names[last] ? "'" : "");
    snprintf(buf, size, "%sstep %u (%s%s%s)", plan_name, index, bucket, cg_node_kind_name(s->op_kind), where);
    return;
  }
  snprintf(buf, size, "%sstep %u (node #%u%s, %s%s)", plan_name, index, s->node, node_name,
           cg_node_kind_name(s->op_kind), where);
}

static int is_cuda_kind(cg_node_kind_t k) {
  return k == CG_NODE_CHILD_GRAPH || k == CG_NODE_EVENT_WAIT || k == CG_NODE_EVENT_RECORD;
}

static void plan_free(cg_plan_t *p) {
  if (!p) return;
#if CG_HAVE_CUDA
  cg_cuda_plan_free(p); /* before the communicators it captured go */
#endif
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

/* Checks that the node can run on its communicator's backend. */
static cg_status_t check_supported(const cg_graph_t *g, uint32_t node, const char *where) {
  const cg_node_rec_t *n = cg_graph_node(g, node);
  const char *name = n->name ? n->name : "";
  if (!n->comm) return CG_SUCCESS;
  const cg_backend_t *b = n->comm->ops->backend;
  if (!b) return CG_SUCCESS; /* offline: compiles and draws, cannot run */
  if (b->interface_version != CG_BACKEND_INTERFACE_VERSION)
    return cg_fail(CG_ERR_UNSUPPORTED, "%s: node #%u '%s': the %s backend implements backend interface %u, this "
                   "scheduler needs %u", where, node, name, b->name, b->interface_version,
                   CG_BACKEND_INTERFACE_VERSION);
  if (!(b->node_kinds & (1u << n->kind)))
    return cg_fail(CG_ERR_UNSUPPORTED, "%s: node #%u '%s': the %s backend does not run %s", where, node, name, b->name,
                   cg_node_kind_name(n->kind));
  if (n->kind != CG_NODE_BARRIER && !(b->dtypes & (1u << n->dtype)))
    return cg_fail(CG_ERR_UNSUPPORTED, "%s: node #%u '%s': the %s backend has no %s", where, node, name, b->name,
                   cg_dtype_name(n->dtype));
  return CG_SUCCESS;
}

/* Where the plan runs: all communicators on the host (host executor), or all
 * on one CUDA device (one CUDA graph). *device is CG_DEVICE_HOST for a plan
 * without communicators. */
static cg_status_t check_placement(int *device, const cg_graph_t *g, const char *where) {
  *device = CG_DEVICE_HOST;
  const cg_comm_t *host = NULL, *dev = NULL;
  for (uint32_t i = 0; i < g->n_comms; i++) {
    const cg_comm_t *c = g->comms[i].comm;
    if (atomic_load(&c->aborted))
      return cg_fail(CG_ERR_TIMEOUT, "%s: %s communicator %016llx (rank %d of %d) was aborted after a replay on it "
                     "timed out; create a new communicator", where, c->ops->backend_name, (unsigned long long)c->id,
                     c->rank, c->size);
    if (c->device == CG_DEVICE_HOST) {
      if (!host) host = c;
      continue;
    }
    if (dev && dev->device != c->device)
      return cg_fail(CG_ERR_UNSUPPORTED, "%s: communicators on devices %d and %d: a plan runs on one GPU (one GPU "
                     "per process)", where, dev->device, c->device);
    if (!dev) dev = c;
    const cg_backend_t *b = c->ops->backend;
    if (b && (!b->device_step_enqueue || !b->device_warmup))
      return cg_fail(CG_ERR_UNSUPPORTED, "%s: the %s backend cannot run device buffers", where, b->name);
  }
  if (host && dev)
    return cg_fail(CG_ERR_UNSUPPORTED, "%s: the graph mixes host communicators (%s) with device communicators "
                   "(%s on device %d); mixed plans are not supported yet: use one graph per kind", where,
                   host->ops->backend_name, dev->ops->backend_name, dev->device);
  if (dev) *device = dev->device;
  for (uint32_t i = 0; i < g->n_nodes; i++) {
    const cg_node_rec_t *n = cg_graph_node(g, i);
    if (!is_cuda_kind(n->kind)) continue;
    const char *name = n->name ? n->name : "";
    if (host)
      return cg_fail(CG_ERR_UNSUPPORTED, "%s: node #%u '%s' (%s) runs on a GPU, but the graph's communicators hold "
                     "host buffers (%s): CUDA nodes need a device plan", where, i, name, cg_node_kind_name(n->kind),
                     host->ops->backend_name);
#if CG_HAVE_CUDA
    /* user GPU work alone: a device plan on the device the caller uses */
    if (!dev) return cg_cuda_current_device(device, where);
#endif
    break;
  }
  return CG_SUCCESS;
}

static cg_status_t prepare_backends(cg_plan_t *p, const char *where) {
  for (uint32_t i = 0; i < p->n_steps; i++) {
    cg_step_t *s = &p->steps[i];
    const cg_backend_t *b = s->comm ? s->comm->ops->backend : NULL;
    if (!b || !b->host_step_prepare || s->kind != CG_STEP_COLLECTIVE) continue;
    cg_status_t st = b->host_step_prepare(&s->backend_state, s->comm->impl, s);
    if (st != CG_SUCCESS) {
      char step[700], detail[512];
      snprintf(detail, sizeof detail, "%s", cg_error_last());
      cg_step_describe(step, sizeof step, p, i);
      return cg_fail(st, "%s: %s: %s", where, step, detail);
    }
  }
  return CG_SUCCESS;
}

cg_status_t cg_compile(cg_plan_t **out, cg_graph_t *graph, const cg_compile_opts_t *opts) {
  static const cg_compile_opts_t defaults = CG_COMPILE_OPTS_INIT;
  cg_status_t st = CG_SUCCESS;
  cg_comm_order_t order = {0};
  cg_plan_t *p = NULL;
  uint32_t *levels = NULL;
  cg_comm_t **joined = NULL;
  uint32_t n_joined = 0;
  cg_participants_t pt = {0};
  cg_fusion_t fusion = {0};
  char where[320];
  if (!out || !graph) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_compile: NULL %s", out ? "graph" : "out");
  if (!opts) opts = &defaults;
  if ((st = cg_check_opts_size(opts->size, sizeof(cg_compile_opts_t), "cg_compile", "opts")) != CG_SUCCESS)
    return st;
  if (graph->name)
    snprintf(where, sizeof where, "cg_compile: graph '%s'", graph->name);
  else
    snprintf(where, sizeof where, "cg_compile");
  cg_status_t local = CG_SUCCESS;
  int device = CG_DEVICE_HOST;
  local = check_placement(&device, graph, where);
  for (uint32_t i = 0; i < cg_graph_node_count(graph) && local == CG_SUCCESS; i++) local = check_supported(graph, i, where);
  if ((st = cg_comm_order_build(&order, graph)) != CG_SUCCESS) goto out;
  /* even a rank that cannot compile takes part in the check, so the others do
   * not wait for it */
  if (opts->check_ranks && (st = cg_rank_check(graph, &order, where, local, &joined, &n_joined)) != CG_SUCCESS)
    goto out;
  if ((st = local) != CG_SUCCESS) goto out;
  /* From here a device plan's compile has collective steps (send/receive
   * levels, warm-up, agreeing on the build): a rank whose local work fails
   * goes through them with its failure, so the others fail too. */
  int is_device = device != CG_DEVICE_HOST;
  /* the participants agree on buckets (any plan) and on the CUDA graph */
  if ((is_device || opts->check_ranks) &&
      (st = cg_participants_make(&pt, &order, joined, n_joined, where)) != CG_SUCCESS)
    goto out;
  st = cg_fusion_plan(&fusion, graph, &order, opts->fusion, opts->bucket_bytes, where);
  if (opts->check_ranks) st = cg_fusion_agree(&fusion, graph, &order, &pt, st, where);
  p = st == CG_SUCCESS ? calloc(1, sizeof *p) : NULL;
  const char *name = opts->name ? opts->name : graph->name;
  if (st == CG_SUCCESS && (!p || (name && !(p->name = cg_copy_text(name, 255)))))
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the plan", where);
  if (st == CG_SUCCESS) {
    p->graph_serial = graph->serial;
    p->device = device;
    p->timeout_s = cg_watchdog_timeout(opts->timeout_s);
    st = cg_plan_lower(p, graph, &order, &fusion, where);
  }
  if (st == CG_SUCCESS) st = cg_plan_layout_buckets(p, where);
#if CG_HAVE_CUDA
  if (st == CG_SUCCESS && is_device) st = cg_cuda_bucket_tables(p, where);
#endif
  if (st == CG_SUCCESS && !(levels = malloc((p->n_steps ? p->n_steps : 1) * sizeof *levels)))
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating send/receive levels", where);
  /* device plans issue sends and receives in groups, which must match across
   * ranks; the host executor posts each on its own */
  st = cg_p2p_levels(levels, st == CG_SUCCESS ? p : NULL, is_device ? &pt : NULL, st, where);
  if (st == CG_SUCCESS) st = cg_plan_issue_order(p, levels, where);
  if (st == CG_SUCCESS) st = prepare_backends(p, where);
#if CG_HAVE_CUDA
  if (is_device) st = cg_cuda_plan_build(st == CG_SUCCESS ? p : NULL, &pt, st, where);
#endif
  if (st != CG_SUCCESS) goto out;
  *out = p;
  p = NULL;
out:
  free(levels);
  cg_fusion_free(&fusion);
  plan_free(p);
  cg_participants_free(&pt);
  for (uint32_t i = 0; i < n_joined; i++) cg_comm_release(joined[i]);
  free(joined);
  cg_comm_order_free(&order);
  return st;
}

void cg_plan_destroy(cg_plan_t *plan) {
  if (!plan) return;
  cg_plan_wait(plan);
  cg_host_run_free(plan);
  plan_free(plan);
}

cg_status_t cg_plan_stats(cg_plan_stats_t *out, const cg_plan_t *plan) {
  if (!out || !plan) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_plan_stats: NULL %s", out ? "plan" : "out");
  *out = (cg_plan_stats_t){.steps = plan->n_steps,
                           .lanes = plan->n_lanes,
                           .dependencies = plan->n_deps,
                           .communicators = plan->n_comms,
                           .device = plan->device,
                           .buckets = plan->n_buckets,
                           .bucket_bytes = plan->bucket_bytes};
  for (uint32_t b = 0; b < plan->n_buckets; b++) {
    const cg_bucket_t *bucket = &plan->buckets[b];
    out->fused_nodes += bucket->n_members;
    for (uint32_t k = 0; k < bucket->n_pack; k++) out->copy_bytes += bucket->pack[k].bytes;
    for (uint32_t k = 0; k < bucket->n_unpack; k++) out->copy_bytes += bucket->unpack[k].bytes;
  }
  if (plan->device == CG_DEVICE_HOST) return CG_SUCCESS;
  for (uint32_t i = 0; i < plan->n_steps; i++)
    for (uint32_t e = 0; e < plan->steps[i].n_deps; e++)
      out->events += plan->steps[plan->steps[i].deps[e]].lane != plan->steps[i].lane;
  for (uint32_t u = 0; u < plan->n_units; u++) out->groups += plan->units[u].n > 1;
  return CG_SUCCESS;
}
