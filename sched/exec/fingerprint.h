/* The per-replay fingerprint of a host plan (cg_compile_opts_t.fingerprint,
 * docs/watchdog.md#fingerprint): when a replay starts, every communicator of
 * the plan with collectives gets a 16-byte allgather, posted before the
 * steps on the MPI communicator they use (so it is ordered with them):
 * how many collectives this replay runs on it and a hash of them (kind,
 * count, type, operation, root) and of which plan compiled on it this is.
 * Ranks that start different sequences on a communicator (a graph that
 * differs with the cross-rank check off, two plans started in different
 * orders) pair different fingerprints, and the replay fails with
 * CG_ERR_MISMATCH naming them. */
#ifndef CG_SCHED_FINGERPRINT_H
#define CG_SCHED_FINGERPRINT_H

#include <stddef.h>

#include "plan_internal.h"

typedef struct cg_fingerprint cg_fingerprint_t;

/* One rank's fingerprint of a replay on one communicator: how many
 * collectives it runs there and a hash of them. Device plans exchange the
 * same 16 bytes inside their CUDA graph (sched/exec/cuda/device_fingerprint.c). */
typedef struct cg_print {
  uint64_t collectives, hash;
} cg_print_t;
/* The plan's fingerprint on its communicator c (the same on every rank that
 * runs the same collectives of the same plan), as the compile_index-th plan
 * compiled on it. */
cg_print_t cg_print_of(const cg_plan_t *plan, uint32_t c, uint64_t compile_index);
/* Whether the ranks' fingerprints (all, in rank order, n of them) differ,
 * and if so the sentence that says so on `comm`, into buf. */
int cg_prints_mismatch(char *buf, size_t size, const cg_comm_t *comm, const cg_print_t *all, int n);

/* Posts this replay's rounds (allocating *fp on first use). */
cg_status_t cg_fingerprint_start(cg_fingerprint_t **fp, const cg_plan_t *plan, const char *caller);
/* Polls them: *done once every round completed; CG_ERR_MISMATCH (detail:
 * caller, plan, replay, communicator, which ranks ran what) when the ranks'
 * fingerprints differ. */
cg_status_t cg_fingerprint_test(int *done, cg_fingerprint_t *fp, const cg_plan_t *plan, const char *caller);
/* After a timeout: appends to `text` (at its end, within `size`) a
 * difference already found, and keeps the rounds still posted for good
 * (control_abandon; the control channel stays usable). */
void cg_fingerprint_time_out(cg_fingerprint_t *fp, char *text, size_t size);
void cg_fingerprint_free(cg_fingerprint_t *fp);

#endif
