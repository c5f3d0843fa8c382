/* Agreement among the ranks after the cross-rank check. Compiling a device
 * plan has collective steps after the check (settling send/receive levels,
 * warming up, agreeing that every rank built its graph). A rank whose local
 * work fails still takes part in every one of them, carrying its failure, so
 * the others fail too instead of waiting for it. The participants are the
 * communicators of the graph that have a control channel plus those this rank
 * joined in the check without using them, in order of agreed id: the same
 * order on every rank, so blocking steps done one communicator after another
 * cannot wait in a cycle. */
#ifndef CG_SCHED_AGREEMENT_H
#define CG_SCHED_AGREEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "comm_internal.h"

typedef struct cg_participants {
  cg_comm_t **comms; /* by agreed id; not retained (the graph and the caller hold them) */
  uint32_t n;
  double timeout_s; /* how long a round may wait for the other ranks (0: for ever); see cg_control_complete */
} cg_participants_t;

/* The communicators of `list` that have a control channel, by agreed id. */
cg_status_t cg_participants_make(cg_participants_t *out, cg_comm_t *const *list, uint32_t n_list, const char *where);
/* The same for a compiled plan's communicators. */
struct cg_plan;
cg_status_t cg_participants_of_plan(cg_participants_t *out, const struct cg_plan *plan, const char *where);
void cg_participants_free(cg_participants_t *pt);

/* One round over every participant: each learns whether all its ranks are at
 * CG_SUCCESS. all_ok (may be NULL) gets one flag per participant. Returns
 * `mine` (with its detail) if it failed, else a failure naming the first rank
 * and communicator that did not succeed, else CG_SUCCESS. `what` completes
 * "rank 2 of communicator 3 (world leader 0) could not <what>". */
cg_status_t cg_agree(uint8_t *all_ok, const cg_participants_t *pt, cg_status_t mine, const char *what,
                     const char *where);

/* What a round carries besides the flag, per participant i: `bytes` (the
 * same on every rank), filled by `fill` on a rank whose `mine` succeeded
 * (zeros otherwise), and handed to `use` once every rank succeeded: `all`
 * holds rank r's payload at all + r * stride. */
typedef struct cg_agree_payload {
  size_t (*bytes)(void *ctx, uint32_t i);
  void (*fill)(void *ctx, uint32_t i, uint8_t *mine);
  void (*use)(void *ctx, uint32_t i, const uint8_t *all, size_t stride, int size);
} cg_agree_payload_t;

/* cg_agree with a payload: the one routine every agreement after the
 * cross-rank check goes through, so a failure is handled the same way in
 * each. */
cg_status_t cg_agree_with(uint8_t *all_ok, const cg_participants_t *pt, cg_status_t mine,
                          const cg_agree_payload_t *payload, void *ctx, const char *what, const char *where);

/* "3 (world leader 0)": how messages name a communicator by its agreed id, the
 * same on every rank. */
const char *cg_comm_id_label(char *buf, size_t size, uint64_t id);

/* Control rounds in flight (control_allgather_start), polled together until
 * all complete. While it waits, this rank answers the roll calls of ranks
 * whose wait timed out, saying it waits in `waiting_in`. With timeout_s > 0,
 * once that long has passed: a roll call on the first communicator still
 * waited for names the ranks that did not answer, every unfinished round is
 * abandoned (MPI cannot cancel it; its communicator then refuses every later
 * round), and CG_ERR_TIMEOUT names this rank, the communicator, what it waited
 * in and the roll call, also on stderr. A failed round fails the call at
 * once. */
typedef struct cg_control_round {
  const cg_comm_t *comm;
  void *request; /* NULL once complete */
} cg_control_round_t;
cg_status_t cg_control_complete(cg_control_round_t *rounds, uint32_t n, double timeout_s, const char *waiting_in);

/* One round on one communicator, waited for as above. */
cg_status_t cg_control_allgather(const cg_comm_t *comm, const void *mine, void *all, size_t bytes, double timeout_s,
                                 const char *waiting_in);

#endif
