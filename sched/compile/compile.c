/* cg_compile: a recorded graph becomes a plan of steps. After the cross-rank
 * check, the fusion pass groups nodes into buckets (fusion.h) and the ranks
 * agree on them; lowering (lower.c) turns buckets and the other nodes into
 * steps, bucket_layout.c lays out the buckets' buffers, and the plan's
 * executor (executor.h: the host executor, or the CUDA realizer that captures
 * a device plan into a CUDA graph) builds what it needs, last. */
#include <stdio.h>
#include <stdlib.h>

#include "agreement.h"
#include "backend.h"
#include "comm_order.h"
#include "error.h"
#include "executor.h"
#include "fusion.h"
#include "graph_view.h"
#include "lower.h"
#include "plan_internal.h"
#include "rank_check.h"
#include "tuning.h"
#include "tuning_file.h"
#include "param.h"

static int is_cuda_kind(cg_node_kind_t k) {
  return k == CG_NODE_CHILD_GRAPH || k == CG_NODE_EVENT_WAIT || k == CG_NODE_EVENT_RECORD;
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
    cg_status_t st = cg_comm_refuse_if_aborted(c, where);
    if (st != CG_SUCCESS) return st;
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
    /* user GPU work alone: a device plan on the device the caller uses */
    if (!dev) return cg_executor_current_device(device, where);
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

/* The participants of later agreements: the graph's communicators and those
 * this rank joined in the check without using them. */
static cg_status_t participants_of_order(cg_participants_t *pt, const cg_comm_order_t *order,
                                         cg_comm_t *const *joined, uint32_t n_joined, const char *where) {
  uint32_t n = order->n_sequences + n_joined;
  cg_comm_t **comms = malloc(((size_t)n + 1) * sizeof *comms);
  if (!comms) return cg_fail(CG_ERR_NO_MEMORY, "%s: listing communicators", where);
  for (uint32_t i = 0; i < n; i++)
    comms[i] = i < order->n_sequences ? order->sequences[i].comm : joined[i - order->n_sequences];
  cg_status_t st = cg_participants_make(pt, comms, n, where);
  free(comms);
  return st;
}

/* The environment cg_compile reads (core/param.h), read once and up front:
 * a bad value is this rank's failure, which travels to the other ranks like
 * any other below. */
typedef struct compile_env {
  double timeout_s;    /* CG_TIMEOUT; 0: unset */
  int fusion;          /* CG_FUSION; 1: unset */
  size_t bucket_bytes; /* CG_BUCKET_BYTES; 0: unset */
} compile_env_t;

static cg_status_t read_env(compile_env_t *env, const char *where) {
  cg_status_t st = cg_param_seconds(&env->timeout_s, NULL, CG_PARAM_TIMEOUT, where);
  if (st == CG_SUCCESS) st = cg_param_switch(&env->fusion, NULL, CG_PARAM_FUSION, where);
  if (st == CG_SUCCESS) st = cg_param_bytes(&env->bucket_bytes, NULL, CG_PARAM_BUCKET_BYTES, where);
  return st;
}

cg_status_t cg_compile(cg_plan_t **out, cg_graph_t *graph, const cg_compile_opts_t *opts) {
  return cg_compile_tuning(out, graph, opts, NULL, 0, CG_SUCCESS);
}

cg_status_t cg_compile_tuned(cg_plan_t **out, cg_graph_t *graph, const cg_compile_opts_t *opts,
                             cg_tuning_t *tuning, cg_status_t mine) {
  return cg_compile_tuning(out, graph, opts, tuning, 0, mine);
}

cg_status_t cg_compile_tuning(cg_plan_t **out, cg_graph_t *graph, const cg_compile_opts_t *opts,
                              cg_tuning_t *tuning, int default_won, cg_status_t mine) {
  static const cg_compile_opts_t defaults = CG_COMPILE_OPTS_INIT;
  cg_status_t st = CG_SUCCESS;
  cg_comm_order_t order = {0};
  cg_plan_t *p = NULL;
  uint32_t *levels = NULL;
  cg_comm_t **joined = NULL;
  uint32_t n_joined = 0;
  cg_participants_t pt = {0};
  cg_fusion_t fusion = {0};
  cg_tuning_t loaded = {0}, none = {0};
  char where[320];
  if (!out || !graph) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_compile: NULL %s", out ? "graph" : "out");
  if (!opts) opts = &defaults;
  if ((st = cg_check_opts_size(opts->size, sizeof(cg_compile_opts_t), "cg_compile", "opts")) != CG_SUCCESS)
    return st;
  if (graph->name)
    snprintf(where, sizeof where, "cg_compile: graph '%s'", graph->name);
  else
    snprintf(where, sizeof where, "cg_compile");
  if (opts->tuning_file && !*opts->tuning_file)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: tuning_file is empty (NULL: no tuning file)", where);
  /* Compiling with a tuning (given, or loaded from opts->tuning_file) makes
   * the ranks agree on it, and that round carries every rank's status: a
   * caller's failure (cg_plan_tune's profile), a file that does not load,
   * anything below. So does the cross-rank check when it is on; without
   * either, a failure here is this rank's alone (ranks without the check
   * promised the same graph). */
  const char *file = tuning ? NULL : opts->tuning_file;
  int agreeing = tuning || file || mine != CG_SUCCESS;
  cg_status_t local = mine;
  compile_env_t env = {0, 1, 0};
  if (local == CG_SUCCESS) local = read_env(&env, where);
  int device = CG_DEVICE_HOST;
  if (local == CG_SUCCESS) local = check_placement(&device, graph, where);
  const cg_executor_t *exec = cg_executor_for(device);
  if (local == CG_SUCCESS && !exec)
    local = cg_fail(CG_ERR_UNSUPPORTED, "%s: a plan on device %d, and this build has no device executor", where,
                    device);
  for (uint32_t i = 0; i < cg_graph_node_count(graph) && local == CG_SUCCESS; i++) local = check_supported(graph, i, where);
  if ((st = cg_comm_order_build(&order, graph)) != CG_SUCCESS) goto out;
  /* even a rank that cannot compile takes part in the check, so the others do
   * not wait for it */
  /* the option, else CG_TIMEOUT (0: unset); negative turns the watchdog off.
   * It bounds the plan's replays and, here, every wait for the other ranks */
  double timeout_s = opts->timeout_s > 0 ? opts->timeout_s : opts->timeout_s < 0 ? 0 : env.timeout_s;
  if (opts->check_ranks &&
      (st = cg_rank_check(graph, &order, where, local, timeout_s, &joined, &n_joined)) != CG_SUCCESS)
    goto out;
  if (!agreeing && (st = local) != CG_SUCCESS) goto out;
  /* the file is read once the graph is known to match the other ranks' (with
   * the check on): what differs then is the file */
  if (file && local == CG_SUCCESS) {
    local = cg_tuning_load(&loaded, &default_won, graph, &order, file, where);
    if (local == CG_SUCCESS) tuning = &loaded;
  }
  int is_device = device != CG_DEVICE_HOST;
  /* the participants agree on buckets (any plan), on tuning and on the CUDA
   * graph */
  if ((is_device || opts->check_ranks || agreeing) &&
      (st = participants_of_order(&pt, &order, joined, n_joined, where)) != CG_SUCCESS && !agreeing)
    goto out;
  pt.timeout_s = timeout_s;
  /* measurements differ between ranks; the buckets must not. A rank that
   * failed takes part with its failure, which every rank then returns. */
  if (agreeing) {
    st = cg_tuning_agree(tuning ? tuning : &none, &default_won, graph, &order, &pt, st != CG_SUCCESS ? st : local,
                         where);
    /* the status is agreed: every rank leaves here together. Going on would
     * not be safe: a rank that failed early never learned it was a device
     * plan, so it would skip the device plan's later rounds. */
    if (st != CG_SUCCESS) goto out;
  }
  /* the options, then CG_FUSION (which only turns fusion off) and CG_BUCKET_BYTES */
  int fuse = opts->fusion && env.fusion;
  size_t bucket_bytes = opts->bucket_bytes ? opts->bucket_bytes : fuse ? env.bucket_bytes : 0;
  if (st == CG_SUCCESS)
    st = cg_fusion_plan(&fusion, graph, &order, fuse, bucket_bytes, default_won ? NULL : tuning, where);
  if (opts->check_ranks || agreeing) st = cg_fusion_agree(&fusion, graph, &order, &pt, st, where);
  p = st == CG_SUCCESS ? calloc(1, sizeof *p) : NULL;
  const char *name = opts->name ? opts->name : graph->name;
  if (st == CG_SUCCESS && (!p || (name && !(p->name = cg_copy_text(name, 255)))))
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the plan", where);
  if (st == CG_SUCCESS) {
    p->graph_serial = graph->serial;
    p->device = device;
    p->timeout_s = timeout_s;
    p->fingerprint = opts->fingerprint != 0;
    p->exec = exec;
    /* the agreed tuning stays with the plan: its dump, DOT and saved tuning
     * show it, and say which boundaries it has */
    if (tuning && !(p->tuning = calloc(1, sizeof *p->tuning)))
      st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the plan's tuning", where);
    if (st == CG_SUCCESS && tuning) st = cg_tuning_copy(p->tuning, tuning, where);
    if (st == CG_SUCCESS && tuning) p->tuning->default_won = default_won;
    if (st == CG_SUCCESS) st = cg_plan_lower(p, graph, &order, &fusion, where);
  }
  if (st == CG_SUCCESS) st = cg_plan_layout_buckets(p, where);
  if (st == CG_SUCCESS && p->exec->prepare_buckets) st = p->exec->prepare_buckets(p, where);
  if (st == CG_SUCCESS && !(levels = malloc((p->n_steps ? p->n_steps : 1) * sizeof *levels)))
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating send/receive levels", where);
  /* device plans issue sends and receives in groups, which must match across
   * ranks; the host executor posts each on its own */
  st = cg_p2p_levels(levels, st == CG_SUCCESS ? p : NULL, is_device ? &pt : NULL, st, where);
  if (st == CG_SUCCESS) st = cg_plan_issue_order(p, levels, where);
  if (st == CG_SUCCESS) st = prepare_backends(p, where);
  /* collective for device plans: every rank takes part, failed or not */
  if (exec && exec->build) st = exec->build(st == CG_SUCCESS ? p : NULL, &pt, st, where);
  if (st != CG_SUCCESS) goto out;
  for (uint32_t c = 0; c < p->n_comms; c++) p->comms[c].compile_index = atomic_fetch_add(&p->comms[c].comm->compiled, 1);
  *out = p;
  p = NULL;
out:
  free(levels);
  cg_fusion_free(&fusion);
  cg_plan_free(p);
  cg_participants_free(&pt);
  for (uint32_t i = 0; i < n_joined; i++) cg_comm_release(joined[i]);
  free(joined);
  cg_comm_order_free(&order);
  cg_tuning_free(&loaded);
  return st;
}
