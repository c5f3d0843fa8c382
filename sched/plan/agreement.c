#include "agreement.h"

#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "clock.h"
#include "error.h"
#include "plan_internal.h"

static int has_control(const cg_comm_t *c) { return c->ops->backend && c->ops->backend->control_allgather_start; }

/* "3 (world leader 0)": an MPI communicator's agreed id is its agreed
 * number and the world rank of its rank 0 (backends/mpi/mpi_comm.c). */
const char *cg_comm_id_label(char *buf, size_t size, uint64_t id) {
  if (id >> 24)
    snprintf(buf, size, "%llu (world leader %llu)", (unsigned long long)(id >> 24),
             (unsigned long long)(id & 0xFFFFFFu));
  else
    snprintf(buf, size, "%llu", (unsigned long long)id);
  return buf;
}

cg_status_t cg_participants_make(cg_participants_t *out, cg_comm_t *const *list, uint32_t n_list, const char *where) {
  *out = (cg_participants_t){0};
  cg_comm_t **comms = malloc(((size_t)n_list + 1) * sizeof *comms);
  if (!comms) return cg_fail(CG_ERR_NO_MEMORY, "%s: listing communicators", where);
  uint32_t n = 0;
  for (uint32_t i = 0; i < n_list; i++) {
    cg_comm_t *c = list[i];
    if (!has_control(c)) continue;
    uint32_t k = n++;
    for (; k > 0 && comms[k - 1]->id > c->id; k--) comms[k] = comms[k - 1];
    comms[k] = c;
  }
  *out = (cg_participants_t){comms, n, 0};
  return CG_SUCCESS;
}

cg_status_t cg_participants_of_plan(cg_participants_t *out, const cg_plan_t *plan, const char *where) {
  cg_comm_t **comms = malloc(((size_t)plan->n_comms + 1) * sizeof *comms);
  if (!comms) return cg_fail(CG_ERR_NO_MEMORY, "%s: listing communicators", where);
  for (uint32_t c = 0; c < plan->n_comms; c++) comms[c] = plan->comms[c].comm;
  cg_status_t st = cg_participants_make(out, comms, plan->n_comms, where);
  out->timeout_s = plan->timeout_s;
  free(comms);
  return st;
}

void cg_participants_free(cg_participants_t *pt) {
  free(pt->comms);
  *pt = (cg_participants_t){0};
}

static double monotonic_s(void) { return (double)cg_clock_ns() * 1e-9; }

static cg_status_t timed_out(cg_control_round_t *rounds, uint32_t n, double timeout_s, const char *waiting_in) {
  const cg_comm_t *late = NULL;
  for (uint32_t i = 0; i < n && !late; i++)
    if (rounds[i].request) late = rounds[i].comm;
  const cg_backend_t *b = late->ops->backend;
  char roll[768] = "no roll call (the backend has none)", label[64];
  if (b->control_roll_call) b->control_roll_call(roll, sizeof roll, late->impl, waiting_in, timeout_s);
  cg_status_t st = cg_fail(CG_ERR_TIMEOUT,
                           "%s: timed out after %g s waiting for the other ranks of communicator %s on rank %d of "
                           "%d: %s. The round stays posted in MPI, so this communicator can run nothing more: end "
                           "the job (MPI_Abort)",
                           waiting_in, timeout_s, cg_comm_id_label(label, sizeof label, late->id), late->rank,
                           late->size, roll);
  for (uint32_t i = 0; i < n; i++) {
    if (!rounds[i].request) continue;
    const cg_backend_t *rb = rounds[i].comm->ops->backend;
    if (rb->control_abandon) rb->control_abandon(rounds[i].comm->impl, rounds[i].request, cg_error_last());
    rounds[i].request = NULL;
  }
  fprintf(stderr, "commgraph: %s\n", cg_error_last());
  return st;
}

cg_status_t cg_control_complete(cg_control_round_t *rounds, uint32_t n, double timeout_s, const char *waiting_in) {
  double end = timeout_s > 0 ? monotonic_s() + timeout_s : 0;
  for (;;) {
    uint32_t pending = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (!rounds[i].request) continue;
      const cg_comm_t *c = rounds[i].comm;
      const cg_backend_t *b = c->ops->backend;
      int done = 0;
      cg_status_t st = b->control_test(&done, c->impl, rounds[i].request);
      if (st != CG_SUCCESS) {
        rounds[i].request = NULL; /* the backend released it */
        return st;
      }
      if (done) {
        rounds[i].request = NULL;
        continue;
      }
      pending++;
      if (b->control_answer) b->control_answer(c->impl, waiting_in);
    }
    if (!pending) return CG_SUCCESS;
    if (end > 0 && monotonic_s() > end) return timed_out(rounds, n, timeout_s, waiting_in);
  }
}

cg_status_t cg_control_allgather(const cg_comm_t *comm, const void *mine, void *all, size_t bytes, double timeout_s,
                                 const char *waiting_in) {
  const cg_backend_t *b = comm->ops->backend;
  cg_control_round_t round = {comm, NULL};
  cg_status_t st = b->control_allgather_start(&round.request, comm->impl, mine, all, bytes);
  if (st == CG_SUCCESS) st = cg_control_complete(&round, 1, timeout_s, waiting_in);
  return st;
}

cg_status_t cg_agree_with(uint8_t *all_ok, const cg_participants_t *pt, cg_status_t mine,
                          const cg_agree_payload_t *payload, void *ctx, const char *what, const char *where) {
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", mine != CG_SUCCESS ? cg_error_last() : "");
  cg_status_t first = CG_SUCCESS;
  char first_detail[1536] = "";
  int timed_out_here = 0;
  for (uint32_t i = 0; i < pt->n; i++) {
    const cg_comm_t *comm = pt->comms[i];
    if (timed_out_here) { /* no more waiting: the job is to end */
      if (all_ok) all_ok[i] = 0;
      continue;
    }
    /* every rank sends the same size: a flag, then the payload */
    size_t bytes = 1 + (payload ? payload->bytes(ctx, i) : 0);
    uint8_t *msg = calloc(bytes, 1), *all = calloc(bytes, (size_t)comm->size);
    cg_status_t st = msg && all ? CG_SUCCESS : cg_fail(CG_ERR_NO_MEMORY, "%s: allocating an agreement", where);
    if (st == CG_SUCCESS) {
      msg[0] = mine == CG_SUCCESS;
      if (mine == CG_SUCCESS && payload) payload->fill(ctx, i, msg + 1);
      char waiting_in[512];
      snprintf(waiting_in, sizeof waiting_in, "%s (the round to %s)", where, what);
      st = cg_control_allgather(comm, msg, all, bytes, pt->timeout_s, waiting_in);
    }
    int failed = st == CG_SUCCESS ? -1 : comm->rank;
    for (int r = 0; st == CG_SUCCESS && r < comm->size && failed < 0; r++)
      if (!all[(size_t)r * bytes]) failed = r;
    if (failed < 0 && mine == CG_SUCCESS && payload) payload->use(ctx, i, all + 1, bytes, comm->size);
    free(msg);
    free(all);
    if (all_ok) all_ok[i] = failed < 0;
    if (st != CG_SUCCESS && first == CG_SUCCESS) {
      /* this rank's own round failed: its detail says why */
      first = st;
      snprintf(first_detail, sizeof first_detail, "%s", cg_error_last());
    } else if (failed >= 0 && first == CG_SUCCESS) {
      char label[64];
      first = CG_ERR_BACKEND;
      snprintf(first_detail, sizeof first_detail, "%s: rank %d of communicator %s could not %s (its own cg_compile "
               "says why)", where, failed, cg_comm_id_label(label, sizeof label, comm->id), what);
    }
    timed_out_here = st == CG_ERR_TIMEOUT;
  }
  if (mine != CG_SUCCESS && !timed_out_here) return cg_fail(mine, "%s", detail);
  if (first != CG_SUCCESS) return cg_fail(first, "%s", first_detail);
  return CG_SUCCESS;
}

cg_status_t cg_agree(uint8_t *all_ok, const cg_participants_t *pt, cg_status_t mine, const char *what,
                     const char *where) {
  return cg_agree_with(all_ok, pt, mine, NULL, NULL, what, where);
}
