#include "fingerprint.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreement.h"
#include "backend.h"
#include "error.h"

typedef cg_print_t print_t;

typedef struct print_round {
  const cg_comm_t *comm;
  print_t mine;
  print_t *all; /* comm->size: what each rank sent */
  void *request; /* NULL: complete (or not posted) */
} print_round_t;

struct cg_fingerprint {
  print_round_t *rounds;
  uint32_t n;
  char mismatch[900]; /* a difference found in this replay, or "" */
};

static uint64_t mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xFFu)) * 1099511628211ull; /* FNV-1a */
  return h;
}

/* The same on every rank that runs the same collectives of the same plan:
 * point-to-point steps are left out (their peers differ by rank). */
cg_print_t cg_print_of(const cg_plan_t *plan, uint32_t c, uint64_t compile_index) {
  const cg_plan_comm_t *pc = &plan->comms[c];
  print_t p = {0, mix(14695981039346656037ull, compile_index)};
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *s = &plan->steps[pc->steps[k]];
    if (s->kind != CG_STEP_COLLECTIVE || s->op_kind == CG_NODE_SEND || s->op_kind == CG_NODE_RECV) continue;
    p.collectives++;
    p.hash = mix(p.hash, (uint64_t)s->op_kind);
    p.hash = mix(p.hash, (uint64_t)s->count);
    p.hash = mix(p.hash, (uint64_t)s->dtype);
    p.hash = mix(p.hash, (uint64_t)s->op);
    p.hash = mix(p.hash, (uint64_t)(int64_t)s->root);
  }
  return p;
}

void cg_fingerprint_free(cg_fingerprint_t *fp) {
  if (!fp) return;
  for (uint32_t i = 0; i < fp->n; i++) free(fp->rounds[i].all);
  free(fp->rounds);
  free(fp);
}

static cg_status_t prepare(cg_fingerprint_t **out, const cg_plan_t *plan, const char *caller) {
  cg_fingerprint_t *fp = calloc(1, sizeof *fp);
  if (fp) fp->rounds = calloc(plan->n_comms ? plan->n_comms : 1, sizeof *fp->rounds);
  if (!fp || !fp->rounds) {
    cg_fingerprint_free(fp);
    return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the replay's fingerprint", caller);
  }
  for (uint32_t c = 0; c < plan->n_comms; c++) {
    const cg_comm_t *comm = plan->comms[c].comm;
    const cg_backend_t *b = comm->ops->backend;
    print_t mine = cg_print_of(plan, c, plan->comms[c].compile_index);
    if (!b || !b->replay_allgather_start || !mine.collectives) continue;
    print_round_t *r = &fp->rounds[fp->n++];
    r->comm = comm;
    r->mine = mine;
    if (!(r->all = calloc((size_t)comm->size, sizeof *r->all))) {
      cg_fingerprint_free(fp);
      return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the replay's fingerprint", caller);
    }
  }
  *out = fp;
  return CG_SUCCESS;
}

cg_status_t cg_fingerprint_start(cg_fingerprint_t **fp, const cg_plan_t *plan, const char *caller) {
  cg_status_t st = *fp ? CG_SUCCESS : prepare(fp, plan, caller);
  if (st != CG_SUCCESS) return st;
  (*fp)->mismatch[0] = '\0';
  for (uint32_t i = 0; i < (*fp)->n; i++) {
    print_round_t *r = &(*fp)->rounds[i];
    const cg_backend_t *b = r->comm->ops->backend;
    if ((st = b->replay_allgather_start(&r->request, r->comm->impl, &r->mine, r->all, sizeof r->mine)) !=
        CG_SUCCESS) {
      char detail[800];
      snprintf(detail, sizeof detail, "%s", cg_error_last());
      return cg_fail(st, "%s: the replay's fingerprint: %s", caller, detail);
    }
  }
  return CG_SUCCESS;
}

/* "ranks 0 and 2 ran 4 collectives (fingerprint 1a2b...); rank 1 ran 3 ..." */
static void describe(char *buf, size_t size, const print_t *all, int n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int first = 0; first < n && used + 1 < size; first++) {
    int seen = 0, alike = 0;
    for (int s = 0; s < first && !seen; s++)
      seen = all[s].collectives == all[first].collectives && all[s].hash == all[first].hash;
    if (seen) continue;
    for (int s = first; s < n; s++)
      alike += all[s].collectives == all[first].collectives && all[s].hash == all[first].hash;
    int w = snprintf(buf + used, size - used, "%s%s", used ? "; " : "", alike == 1 ? "rank" : "ranks");
    if (w > 0) used = used + (size_t)w < size ? used + (size_t)w : size - 1;
    int count = 0;
    for (int s = first; s < n && used + 1 < size; s++) {
      if (all[s].collectives != all[first].collectives || all[s].hash != all[first].hash) continue;
      count++;
      w = snprintf(buf + used, size - used, "%s%d", count == 1 ? " " : count == alike ? " and " : ", ", s);
      if (w > 0) used = used + (size_t)w < size ? used + (size_t)w : size - 1;
    }
    if (used + 1 < size) {
      unsigned long long c = (unsigned long long)all[first].collectives;
      w = snprintf(buf + used, size - used, " ran %llu collective%s (fingerprint %016llx)", c, c == 1 ? "" : "s",
                       (unsigned long long)all[first].hash);
      if (w > 0) used = used + (size_t)w < size ? used + (size_t)w : size - 1;
    }
  }
}

int cg_prints_mismatch(char *buf, size_t size, const cg_comm_t *comm, const cg_print_t *all, int n) {
  int differ = 0;
  for (int s = 1; s < n; s++) differ |= all[s].collectives != all[0].collectives || all[s].hash != all[0].hash;
  if (!differ) return 0;
  char ranks[600], label[64];
  describe(ranks, sizeof ranks, all, n);
  snprintf(buf, size,
           "the ranks ran different sequences on communicator %s in this replay: %s (another plan at the same "
           "time, plans started in different orders, or a graph that differs, compiled without the cross-rank "
           "check); its results may be wrong",
           cg_comm_id_label(label, sizeof label, comm->id), ranks);
  return 1;
}

cg_status_t cg_fingerprint_test(int *done, cg_fingerprint_t *fp, const cg_plan_t *plan, const char *caller) {
  *done = 1;
  for (uint32_t i = 0; fp && i < fp->n; i++) {
    print_round_t *r = &fp->rounds[i];
    if (!r->request) continue;
    const cg_backend_t *b = r->comm->ops->backend;
    int complete = 0;
    cg_status_t st = b->control_test(&complete, r->comm->impl, r->request);
    if (st != CG_SUCCESS) {
      r->request = NULL;
      char detail[800];
      snprintf(detail, sizeof detail, "%s", cg_error_last());
      return cg_fail(st, "%s: the replay's fingerprint: %s", caller, detail);
    }
    if (!complete) {
      *done = 0;
      continue;
    }
    r->request = NULL;
    if (!fp->mismatch[0]) cg_prints_mismatch(fp->mismatch, sizeof fp->mismatch, r->comm, r->all, r->comm->size);
  }
  if (*done && fp && fp->mismatch[0])
    return cg_fail(CG_ERR_MISMATCH, "%s: %s%s%s, replay %llu: %s", caller, plan->name ? "plan '" : "an unnamed plan",
                   plan->name ? plan->name : "", plan->name ? "'" : "", (unsigned long long)plan->replays,
                   fp->mismatch);
  return CG_SUCCESS;
}

void cg_fingerprint_time_out(cg_fingerprint_t *fp, char *text, size_t size) {
  if (!fp) return;
  size_t used = strlen(text);
  if (fp->mismatch[0] && used + 1 < size) snprintf(text + used, size - used, "%s%s", used ? "; " : "", fp->mismatch);
  for (uint32_t i = 0; i < fp->n; i++) {
    print_round_t *r = &fp->rounds[i];
    if (!r->request) continue;
    const cg_backend_t *b = r->comm->ops->backend;
    if (b->control_abandon) b->control_abandon(r->comm->impl, r->request, NULL); /* kept; the channel stays */
    r->request = NULL;
  }
}
