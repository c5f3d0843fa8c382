/* Profiles and tunings (plan_measure.h): building, copying, freeing. */
#include "plan_measure.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "plan_internal.h"

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

cg_status_t cg_profile_from_stamps(cg_profile_t *out, const uint64_t *stamps, uint32_t n_steps, int replays,
                                   const char *where) {
  size_t row = 2 * (size_t)n_steps + 1;
  uint64_t *column = malloc((size_t)replays * sizeof *column);
  *out = (cg_profile_t){calloc(n_steps ? n_steps : 1, sizeof(double)), calloc(n_steps ? n_steps : 1, sizeof(double)),
                        n_steps};
  if (!column || !out->start_us || !out->end_us) {
    free(column);
    cg_profile_free(out);
    return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the profile of %u steps", where, n_steps);
  }
  for (size_t slot = 0; slot + 1 < row; slot++) {
    for (int k = 0; k < replays; k++) {
      const uint64_t *r = stamps + (size_t)k * row;
      column[k] = r[slot] > r[row - 1] ? r[slot] - r[row - 1] : 0;
    }
    qsort(column, (size_t)replays, sizeof *column, compare_u64);
    (slot % 2 ? out->end_us : out->start_us)[slot / 2] = (double)column[replays / 2] / 1e3;
  }
  free(column);
  return CG_SUCCESS;
}

void cg_profile_free(cg_profile_t *profile) {
  free(profile->start_us);
  free(profile->end_us);
  *profile = (cg_profile_t){0};
}

cg_status_t cg_profile_copy(cg_profile_t *out, const cg_profile_t *from, const char *where) {
  size_t n = from->n_steps ? from->n_steps : 1;
  *out = (cg_profile_t){malloc(n * sizeof(double)), malloc(n * sizeof(double)), from->n_steps};
  if (!out->start_us || !out->end_us) {
    cg_profile_free(out);
    return cg_fail(CG_ERR_NO_MEMORY, "%s: copying the profile of %u steps", where, from->n_steps);
  }
  memcpy(out->start_us, from->start_us, from->n_steps * sizeof(double));
  memcpy(out->end_us, from->end_us, from->n_steps * sizeof(double));
  return CG_SUCCESS;
}

void cg_profile_remove_stamps(cg_profile_t *prof, const cg_plan_t *plan, double stamp_us) {
  uint32_t n = plan->n_steps;
  /* stamps before each step's start stamp and end stamp, and each lane's last */
  uint32_t *before_end = calloc(n ? n : 1, sizeof *before_end);
  uint32_t *lane_last = calloc(plan->n_lanes ? plan->n_lanes : 1, sizeof *lane_last);
  if (!before_end || !lane_last || stamp_us <= 0 || prof->n_steps != n) goto out;
  for (uint32_t u = 0; u < plan->n_units; u++) {
    const cg_issue_unit_t *unit = &plan->units[u];
    uint32_t base = lane_last[unit->lane] ? lane_last[unit->lane] : 1; /* the replay's own start stamp */
    for (uint32_t k = 0; k < unit->n; k++) {
      const cg_step_t *st = &plan->steps[plan->issue_order[unit->first + k]];
      for (uint32_t e = 0; e < st->n_deps; e++)
        if (before_end[st->deps[e]] + 1 > base) base = before_end[st->deps[e]] + 1;
    }
    /* a unit's start stamps, its steps, then its end stamps */
    for (uint32_t k = 0; k < unit->n; k++) {
      uint32_t i = plan->issue_order[unit->first + k];
      double start = prof->start_us[i] - (double)(base + k) * stamp_us;
      double end = prof->end_us[i] - (double)(base + unit->n + k) * stamp_us;
      prof->start_us[i] = start > 0 ? start : 0;
      prof->end_us[i] = end > prof->start_us[i] ? end : prof->start_us[i];
      /* a step on another lane waits for the unit's event, recorded after
       * all of its end stamps */
      before_end[i] = base + 2 * unit->n - 1;
    }
    lane_last[unit->lane] = base + 2 * unit->n;
  }
out:
  free(before_end);
  free(lane_last);
}

void cg_tuning_free(cg_tuning_t *t) {
  free(t->ready_us);
  free(t->costs);
  *t = (cg_tuning_t){0};
}

cg_status_t cg_tuning_copy(cg_tuning_t *out, const cg_tuning_t *from, const char *where) {
  *out = (cg_tuning_t){malloc((from->n_nodes ? from->n_nodes : 1) * sizeof(double)), from->n_nodes,
                       malloc((from->n_costs ? from->n_costs : 1) * sizeof(cg_comm_cost_t)), from->n_costs,
                       from->default_won};
  if (!out->ready_us || !out->costs) {
    cg_tuning_free(out);
    return cg_fail(CG_ERR_NO_MEMORY, "%s: copying the tuning of %u nodes", where, from->n_nodes);
  }
  memcpy(out->ready_us, from->ready_us, from->n_nodes * sizeof(double));
  memcpy(out->costs, from->costs, from->n_costs * sizeof(cg_comm_cost_t));
  out->default_won = from->default_won;
  return CG_SUCCESS;
}

const cg_comm_cost_t *cg_tuning_cost(const cg_tuning_t *t, const cg_comm_t *comm) {
  for (uint32_t i = 0; i < t->n_costs; i++)
    if (t->costs[i].comm == comm) return &t->costs[i];
  return NULL;
}
