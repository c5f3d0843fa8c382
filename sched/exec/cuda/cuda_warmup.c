/* The compile's warm-up of a device plan's communicators, outside any
 * capture: each backend's lazy set-up (NCCL's connections and algorithms),
 * then the fingerprint's gather once. It is collective, and the ranks agreed
 * to it beforehand, but a rank can still drop out after that agreement (its
 * scratch memory or NCCL's connection buffers not allocated, a crash): the
 * others would then wait in NCCL for ever. So every wait polls under the
 * plan's timeout, answers the roll calls of other ranks meanwhile, and a
 * communicator that times out is aborted, which ends what is queued on its
 * lane, and named in the report with the ranks its roll call found
 * missing. */
#include <stdio.h>
#include <string.h>

#include "agreement.h"
#include "backend.h"
#include "comm_abort.h"
#include "cuda_check.h"
#include "cuda_plan_state.h"
#include "device_fingerprint.h"
#include "error.h"
#include "stream_wait.h"

/* The communicator's own warm-up, then its fingerprint's, each under `wait`. */
static cg_status_t warm_comm(cg_plan_t *p, uint32_t ci, cg_comm_t *comm, const cg_wait_t *wait, const char *where) {
  cudaStream_t lane = p->cuda->lanes[ci];
  cg_status_t st = comm->ops->backend->device_warmup(comm->impl, p, ci, lane, wait);
  /* the fingerprint's gather once outside the capture, on this communicator
   * alone: its peers agreed to warm it up too */
  if (st != CG_SUCCESS || !cg_device_prints_has(p->cuda->prints, comm)) return st;
  st = cg_device_prints_warm_up(p->cuda->prints, comm, lane, wait, where);
  int gave_up = 0;
  cudaError_t err = st == CG_SUCCESS ? cg_cuda_stream_wait(&gave_up, lane, wait) : cudaSuccess;
  if (gave_up)
    return cg_fail(CG_ERR_TIMEOUT, "the replay's fingerprint: its gather did not finish: not every rank of the "
                   "communicator took part");
  if (err != cudaSuccess) st = cg_fail_cuda(err, "cudaStreamSynchronize (the fingerprint's warm-up)", "%s", where);
  return st;
}

/* The warm-up of `comm` timed out (cg_error_last() says in what): names the
 * ranks that did not answer a roll call and aborts the communicator, so its
 * lane drains and later plans refuse it. */
static cg_status_t timed_out(cg_plan_t *p, cg_comm_t *comm, const cg_deadline_t *w, double timeout_s) {
  char what[768], roll[768] = "no roll call (the backend has none)", label[64];
  snprintf(what, sizeof what, "%s", cg_error_last());
  const cg_backend_t *b = comm->ops->backend;
  if (b->control_roll_call) b->control_roll_call(roll, sizeof roll, comm->impl, w->waiting_in, timeout_s);
  cg_status_t st = cg_fail(CG_ERR_TIMEOUT,
                           "%s: timed out after %g s waiting for the other ranks of communicator %s (%s) on rank %d "
                           "of %d: %s; %s. The communicator is aborted: create a new one, or end the job",
                           w->waiting_in, timeout_s, cg_comm_id_label(label, sizeof label, comm->id),
                           comm->ops->backend_name, comm->rank, comm->size, what, roll);
  fprintf(stderr, "commgraph: %s\n", cg_error_last());
  cg_comm_abort_list(&comm, 1, p->device, st, cg_error_last());
  return st;
}

cg_status_t cg_cuda_warm_up(cg_plan_t *p, const cg_participants_t *pt, const uint8_t *go, const uint8_t *differ,
                            const char *where) {
  cg_status_t first = CG_SUCCESS;
  char first_detail[2048] = "";
  for (uint32_t i = 0; i < pt->n; i++) {
    uint32_t ci = UINT32_MAX;
    for (uint32_t k = 0; k < p->n_comms && ci == UINT32_MAX; k++)
      if (p->comms[k].comm == pt->comms[i]) ci = k;
    if (!go[i] || differ[i] || ci == UINT32_MAX) continue; /* joined only: no steps, no peers of this rank's */
    /* every communicator is warmed up, whatever failed on another: its
     * peers are warming it up too */
    cg_comm_t *comm = pt->comms[i];
    char label[64];
    char waiting_in[512];
    snprintf(waiting_in, sizeof waiting_in, "%s (the warm-up of communicator %s)", where,
             cg_comm_id_label(label, sizeof label, comm->id));
    /* the other ranks' roll calls answered meanwhile, through the backend's control channel */
    cg_deadline_t w;
    cg_deadline_start(&w, pt->timeout_s, comm->ops->backend->control_answer, comm->impl, waiting_in);
    cg_wait_t wait = {cg_deadline_go_on, &w};
    cg_status_t st = warm_comm(p, ci, comm, &wait, where);
    /* a wait that ran out (not a channel that refuses at once: it reported) */
    if (st == CG_ERR_TIMEOUT && w.expired) st = timed_out(p, comm, &w, pt->timeout_s);
    if (st != CG_SUCCESS && first == CG_SUCCESS) {
      first = st;
      if (st == CG_ERR_TIMEOUT)
        snprintf(first_detail, sizeof first_detail, "%s", cg_error_last());
      else
        snprintf(first_detail, sizeof first_detail, "%s: warming up communicator %s (%s, rank %d of %d): %s", where,
                 label, comm->ops->backend_name, comm->rank, comm->size, cg_error_last());
    }
  }
  /* the first failure's detail, which later communicators' failures replaced */
  return first == CG_SUCCESS ? CG_SUCCESS : cg_fail(first, "%s", first_detail);
}
