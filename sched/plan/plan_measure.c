/* Profiles and tunings (plan_measure.h): building, copying, freeing. */
#include "plan_measure.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

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

void cg_tuning_free(cg_tuning_t *t) {
  free(t->ready_us);
  free(t->costs);
  *t = (cg_tuning_t){0};
}

cg_status_t cg_tuning_copy(cg_tuning_t *out, const cg_tuning_t *from, const char *where) {
  *out = (cg_tuning_t){malloc((from->n_nodes ? from->n_nodes : 1) * sizeof(double)), from->n_nodes,
                       malloc((from->n_costs ? from->n_costs : 1) * sizeof(cg_comm_cost_t)), from->n_costs};
  if (!out->ready_us || !out->costs) {
    cg_tuning_free(out);
    return cg_fail(CG_ERR_NO_MEMORY, "%s: copying the tuning of %u nodes", where, from->n_nodes);
  }
  memcpy(out->ready_us, from->ready_us, from->n_nodes * sizeof(double));
  memcpy(out->costs, from->costs, from->n_costs * sizeof(cg_comm_cost_t));
  return CG_SUCCESS;
}

const cg_comm_cost_t *cg_tuning_cost(const cg_tuning_t *t, const cg_comm_t *comm) {
  for (uint32_t i = 0; i < t->n_costs; i++)
    if (t->costs[i].comm == comm) return &t->costs[i];
  return NULL;
}
