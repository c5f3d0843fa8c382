/* A device plan's replay fingerprint (cg_compile_opts_t.fingerprint, with a
 * timeout; docs/watchdog.md#fingerprint): inside the plan's CUDA graph,
 * each communicator gathers every rank's 16 bytes (fingerprint.h: NCCL on a
 * communicator of the fingerprint's own, beside the steps; the staged
 * backends with an allgather step prepared like a plan's, before the
 * steps and ordered with them), and a one-thread kernel compares them;
 * where they differ it leaves the gathered bytes and a flag in mapped host
 * memory, which the thread that waits for the replay or the watchdog's
 * monitor reads. Ranks that run different sequences (graphs that differ,
 * compiled without the cross-rank check; plans or embedded graphs replayed
 * in different orders) then fail with CG_ERR_MISMATCH naming them instead of
 * mixing their data silently or hanging until the timeout. */
#ifndef CG_SCHED_DEVICE_FINGERPRINT_H
#define CG_SCHED_DEVICE_FINGERPRINT_H

#include <stddef.h>

#include "plan_internal.h"
#include "wait.h"

typedef struct cg_device_prints cg_device_prints_t;

/* The plan's rounds (*out NULL when no communicator of the plan has
 * collectives and a backend that can gather on the device): device and
 * mapped memory, this rank's fingerprints copied in, the gathers' steps
 * prepared where the backend has no gather of its own. Local. */
cg_status_t cg_device_prints_prepare(cg_device_prints_t **out, const cg_plan_t *plan, const char *where);
/* Enqueues the gathers of the rounds that are `apart` (the backend's own
 * gather on a channel of its own: nothing need wait for it but the
 * comparison) or not (a step ordered with the plan's: the lanes with
 * collectives wait for it) on `stream` in the capture, one communicator
 * after another by agreed id (the same order on every rank, so they cannot
 * wait in a cycle); then the comparisons on `check_stream`, after both
 * kinds, which nothing but the replay's end need wait for (the flag is read
 * from the host). */
cg_status_t cg_device_prints_gather(const cg_device_prints_t *prints, int apart, void *stream, const char *where);
cg_status_t cg_device_prints_check(const cg_device_prints_t *prints, void *check_stream, const char *where);
/* Whether the plan has a round on `comm` (ranks must agree on it), and that
 * round's gather alone, outside the capture, as its warm-up, after making
 * its channel where the backend has one to make (collective over `comm`,
 * waiting under `wait`: backend.h's device_allgather_setup). */
int cg_device_prints_has(const cg_device_prints_t *prints, const cg_comm_t *comm);
cg_status_t cg_device_prints_warm_up(const cg_device_prints_t *prints, const cg_comm_t *comm, void *stream,
                                     const cg_wait_t *wait, const char *where);
/* 1 when a replay found the ranks' fingerprints differ: `text` gets the
 * sentence naming the communicator and which ranks ran what; the flag is
 * cleared. 0 otherwise (prints may be NULL). */
int cg_device_prints_mismatch(cg_device_prints_t *prints, char *text, size_t size);
/* Whether a flag is up, without clearing it (the monitor's look). */
int cg_device_prints_pending(const cg_device_prints_t *prints);
void cg_device_prints_free(cg_device_prints_t *prints);

#endif
