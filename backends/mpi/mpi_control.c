/* The control channel of an MPI-based communicator: the nonblocking
 * allgathers the scheduler's rounds go through (the cross-rank check, the
 * agreements of a compile), and what happens when a rank waits too long.
 *
 * A round that times out cannot be taken back: MPI cannot cancel a
 * collective. So every round owns copies of what it sends and receives (never
 * the caller's memory, which the caller frees), a timed-out round is kept for
 * good, and its communicator is marked abandoned: every later round on it
 * fails at once, naming the first timeout. The job should then end
 * (MPI_Abort).
 *
 * Before it gives up, a rank finds out who is missing with a roll call: a
 * zero-byte message with CG_ROLL_CALL_TAG to every other rank. A rank that
 * waits in a round on the same MPI communicator answers while it polls
 * (cg_mpi_answer_roll_calls), with what it waits in; the ranks that do not
 * answer within the grace time are the ones the report names. Nothing of this
 * runs unless a wait times out, except one MPI_Iprobe per poll. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "mpi_backend.h"

/* Tags of the roll call, on the library's control duplicates and, for
 * cg_comm_create's arrival round, on the application's communicator (only
 * after a timeout there: see cg_mpi_arrive). */
#define CG_ROLL_CALL_TAG 32701
/* answers go to one of CG_ROLL_ANSWER_TAGS tags from here, the one the call
 * names: two threads of a rank that call the roll at once (the program's and
 * the device watchdog's monitor) each take their own answers */
#define CG_ROLL_ANSWER_TAG 32702
#define CG_ROLL_ANSWER_TAGS 32

typedef struct control_round {
  MPI_Request request;
  void *all; /* the caller's: filled when the round completes */
  size_t bytes;
  int size;
  unsigned char buf[]; /* what this rank sends, then size * bytes received */
} control_round_t;

/* Memory MPI may still write (the buffers of collectives that stay
 * posted): never freed, listed here so that it stays reachable. */
static void **kept_blocks;
static size_t n_kept_blocks, kept_blocks_cap;
static mtx_t kept_lock;
static once_flag kept_lock_once = ONCE_FLAG_INIT;
static void init_kept_lock(void) { mtx_init(&kept_lock, mtx_plain); }

void cg_mpi_keep_posted(void *block) {
  call_once(&kept_lock_once, init_kept_lock);
  mtx_lock(&kept_lock);
  if (n_kept_blocks == kept_blocks_cap) {
    size_t cap = kept_blocks_cap ? 2 * kept_blocks_cap : 8;
    void **grown = realloc(kept_blocks, cap * sizeof *grown);
    if (grown) kept_blocks = grown, kept_blocks_cap = cap;
  }
  /* without room it is simply never freed, which is what keeping means */
  if (n_kept_blocks < kept_blocks_cap) kept_blocks[n_kept_blocks++] = block;
  mtx_unlock(&kept_lock);
}

/* A round on `comm` that owns copies of what it sends and receives. */
static cg_status_t allgather_start(void **request, MPI_Comm comm, const void *mine, void *all, size_t bytes) {
  if (bytes > (size_t)INT_MAX) return cg_fail(CG_ERR_UNSUPPORTED, "control message of %zu bytes", bytes);
  int size = 0, err = MPI_Comm_size(comm, &size);
  if (err != MPI_SUCCESS) return cg_mpi_fail(err, "MPI_Comm_size (control)");
  control_round_t *r = malloc(sizeof *r + bytes * ((size_t)size + 1));
  if (!r) return cg_fail(CG_ERR_NO_MEMORY, "allocating a control round of %zu bytes per rank", bytes);
  r->all = all, r->bytes = bytes, r->size = size;
  if (bytes) memcpy(r->buf, mine, bytes);
  err = MPI_Iallgather(r->buf, (int)bytes, MPI_BYTE, r->buf + bytes, (int)bytes, MPI_BYTE, comm, &r->request);
  if (err != MPI_SUCCESS) {
    free(r);
    return cg_mpi_fail(err, "MPI_Iallgather");
  }
  *request = r;
  return CG_SUCCESS;
}

cg_status_t cg_mpi_control_allgather_start(void **request, void *comm_impl, const void *mine, void *all,
                                           size_t bytes) {
  cg_mpi_comm_t *m = comm_impl;
  if (m->abandoned[0]) return cg_fail(CG_ERR_TIMEOUT, "%s", m->abandoned);
  return allgather_start(request, m->control, mine, all, bytes);
}

cg_status_t cg_mpi_replay_allgather_start(void **request, void *comm_impl, const void *mine, void *all,
                                          size_t bytes) {
  return allgather_start(request, ((cg_mpi_comm_t *)comm_impl)->data, mine, all, bytes);
}

cg_status_t cg_mpi_control_test(int *done, void *comm_impl, void *request) {
  (void)comm_impl;
  control_round_t *r = request;
  MPI_Status status;
  int err = cg_mpi_request_error(MPI_Test(&r->request, done, &status), &status);
  if (err != MPI_SUCCESS) {
    /* a failed request is complete and freed (MPI_REQUEST_NULL); one that
     * MPI still holds may still write its buffers: kept, as an abandoned
     * round is, since the callers take the round as released */
    if (r->request == MPI_REQUEST_NULL)
      free(r);
    else
      cg_mpi_keep_posted(r);
    return cg_mpi_fail(err, "MPI_Test (control MPI_Iallgather)");
  }
  if (*done) {
    memcpy(r->all, r->buf + r->bytes, r->bytes * (size_t)r->size);
    free(r);
  }
  return CG_SUCCESS;
}

void cg_mpi_control_abandon(void *comm_impl, void *request, const char *why) {
  cg_mpi_comm_t *m = comm_impl;
  if (request) cg_mpi_keep_posted(request);
  if (why && !m->abandoned[0]) snprintf(m->abandoned, sizeof m->abandoned, "%s", why);
}

cg_status_t cg_mpi_control_allgather_within(cg_mpi_comm_t *m, const void *mine, void *all, size_t bytes,
                                            const cg_wait_t *wait, const char *what) {
  void *request = NULL;
  char cause[1024];
  cg_status_t st = cg_mpi_control_allgather_start(&request, m, mine, all, bytes);
  for (int done = 0; st == CG_SUCCESS;) {
    st = cg_mpi_control_test(&done, m, request);
    if (st != CG_SUCCESS) break;
    if (done) return CG_SUCCESS;
    if (!cg_wait_go_on(wait)) break;
    struct timespec nap = {0, 20000}; /* a core left to the others' progress */
    nanosleep(&nap, NULL);
  }
  if (st != CG_SUCCESS) { /* MPI's failure, or a channel abandoned before */
    snprintf(cause, sizeof cause, "%s", cg_error_last());
    return cg_fail(st, "%s: %s", what, cause);
  }
  st = cg_fail(CG_ERR_TIMEOUT, "%s: the control round (an allgather of %zu bytes per rank) did not finish: not every "
               "rank of the communicator took part", what, bytes);
  cg_mpi_control_abandon(m, request, cg_error_last());
  return st;
}

/* What a roll call carries: the id of the communicator it is meant for
 * (MPI reuses a freed communicator's context, so a message that outlived its
 * communicator could match on a new one: such a stale call is dropped), a
 * nonce the answer echoes (stale answers are dropped) and the tag to answer
 * with. */
typedef struct roll_query {
  uint64_t comm_id, nonce;
  int32_t answer_tag, unused;
} roll_query_t;
typedef struct roll_answer {
  uint64_t nonce;
  char text[CG_WAITING_IN_BYTES];
} roll_answer_t;

/* Answers go out without waiting for the asker to take them; their buffers
 * come from this ring, reused round-robin (an answer is small and taken at
 * once by a rank that polls for it; a run of 64 unanswered roll calls would
 * have to precede a reuse). */
static roll_answer_t answer_ring[64];
static atomic_uint answer_next;

/* The next message with `tag` into buf (at most `bytes`), if one is there:
 * 1 with its source in *from. A matched probe, so that two threads polling
 * one communicator (the program's and the device watchdog's monitor) never
 * both see a message that only one of them then receives. */
static int take_message(void *buf, int bytes, int *from, MPI_Comm comm, int tag) {
  int flag = 0;
  MPI_Message message;
  MPI_Status status;
  if (MPI_Improbe(MPI_ANY_SOURCE, tag, comm, &flag, &message, &status) != MPI_SUCCESS || !flag) return 0;
  *from = status.MPI_SOURCE;
  return MPI_Mrecv(buf, bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE) == MPI_SUCCESS;
}

static void answer_roll_calls(MPI_Comm comm, uint64_t comm_id, const char *waiting_in) {
  for (;;) {
    roll_query_t q = {0, 0, CG_ROLL_ANSWER_TAG, 0};
    int from = MPI_PROC_NULL;
    if (!take_message(&q, (int)sizeof q, &from, comm, CG_ROLL_CALL_TAG)) return;
    if (q.comm_id != comm_id) continue; /* meant for a communicator freed before this one */
    roll_answer_t *a = &answer_ring[atomic_fetch_add(&answer_next, 1) % 64];
    a->nonce = q.nonce;
    snprintf(a->text, sizeof a->text, "%s", waiting_in);
    MPI_Request request;
    int tag = q.answer_tag >= CG_ROLL_ANSWER_TAG && q.answer_tag < CG_ROLL_ANSWER_TAG + CG_ROLL_ANSWER_TAGS
                  ? q.answer_tag
                  : CG_ROLL_ANSWER_TAG;
    if (MPI_Isend(a, (int)sizeof *a, MPI_BYTE, from, tag, comm, &request) == MPI_SUCCESS)
      MPI_Request_free(&request);
  }
}

void cg_mpi_answer_roll_calls(MPI_Comm comm, const char *waiting_in) { answer_roll_calls(comm, 0, waiting_in); }

void cg_mpi_control_answer(void *comm_impl, const char *waiting_in) {
  const cg_mpi_comm_t *m = comm_impl;
  if (!cg_mpi_gate_enter()) return; /* MPI is about to be finalized */
  answer_roll_calls(m->control, m->roll_id, waiting_in);
  cg_mpi_gate_leave();
}

/* How long a roll call after a timeout of timeout_s waits for answers:
 * short against the timeout (a job that aborts then should end within it +
 * 10%, and the ranks that wait answer within microseconds), long against a
 * poll. */
static double roll_call_grace(double timeout_s) {
  double grace = 0.005 * timeout_s;
  return grace < 0.005 ? 0.005 : grace > 0.25 ? 0.25 : grace;
}

/* Appends to report at *used, never past size. */
static void append(char *report, size_t size, size_t *used, const char *fmt, ...) CG_PRINTF_LIKE(4, 5);
static void append(char *report, size_t size, size_t *used, const char *fmt, ...) {
  if (*used + 1 >= size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(report + *used, size - *used, fmt, ap);
  va_end(ap);
  if (n > 0) *used = *used + (size_t)n < size ? *used + (size_t)n : size - 1;
}

/* "rank 3" or "ranks 1, 2 and 5" of the ranks r with pick(r) */
static void append_ranks(char *report, size_t size, size_t *used, const uint8_t *flags, uint8_t want, int n,
                         const int *same_text_as, int text_of) {
  int count = 0, total = 0;
  for (int r = 0; r < n; r++) total += flags[r] == want && (!same_text_as || same_text_as[r] == text_of);
  append(report, size, used, total == 1 ? "rank" : "ranks");
  for (int r = 0; r < n; r++) {
    if (flags[r] != want || (same_text_as && same_text_as[r] != text_of)) continue;
    count++;
    append(report, size, used, "%s%d", count == 1 ? " " : count == total ? " and " : ", ", r);
  }
}

static void roll_call(char *report, size_t size, MPI_Comm comm, uint64_t comm_id, const char *waiting_in,
                      double timeout_s) {
  double grace_s = roll_call_grace(timeout_s);
  /* the query outlives this call in MPI (its sends are not waited for), so
   * it lives in a ring like the answers */
  static roll_query_t query_ring[64];
  static atomic_uint_fast64_t nonces;
  uint64_t k = atomic_fetch_add(&nonces, 1);
  roll_query_t *q = &query_ring[k % 64];
  *q = (roll_query_t){comm_id, ((uint64_t)(unsigned)getpid() << 32) ^ k ^ (uint64_t)(MPI_Wtime() * 1e6),
                      CG_ROLL_ANSWER_TAG + (int32_t)(k % CG_ROLL_ANSWER_TAGS), 0};
  const roll_query_t query = *q;
  int me = 0, n = 0;
  size_t used = 0;
  report[0] = '\0';
  if (MPI_Comm_rank(comm, &me) != MPI_SUCCESS || MPI_Comm_size(comm, &n) != MPI_SUCCESS || n < 1) {
    append(report, size, &used, "no roll call (MPI_Comm_size failed)");
    return;
  }
  uint8_t *answered = calloc((size_t)n, 1);
  int *text_of = calloc((size_t)n, sizeof *text_of); /* the first rank that gave the same answer */
  char(*texts)[CG_WAITING_IN_BYTES] = calloc((size_t)n, sizeof *texts);
  if (!answered || !text_of || !texts) {
    append(report, size, &used, "no roll call (out of memory)");
    goto out;
  }
  for (int r = 0; r < n; r++) {
    if (r == me) continue;
    MPI_Request request;
    if (MPI_Isend(q, (int)sizeof *q, MPI_BYTE, r, CG_ROLL_CALL_TAG, comm, &request) == MPI_SUCCESS)
      MPI_Request_free(&request);
  }
  answered[me] = 1;
  int missing = n - 1;
  double end = MPI_Wtime() + grace_s;
  while (missing > 0 && MPI_Wtime() < end) {
    answer_roll_calls(comm, comm_id, waiting_in); /* the others may be calling the roll too */
    roll_answer_t a;
    memset(&a, 0, sizeof a);
    int from = MPI_PROC_NULL;
    if (!take_message(&a, (int)sizeof a, &from, comm, query.answer_tag)) continue;
    a.text[sizeof a.text - 1] = '\0';
    /* an answer to an earlier roll call, or a second one */
    if (a.nonce != query.nonce || from < 0 || from >= n || answered[from]) continue;
    answered[from] = 1;
    missing--;
    memcpy(texts[from], a.text, sizeof a.text);
  }
  for (int r = 0; r < n; r++) {
    text_of[r] = r;
    if (r == me || !answered[r]) continue;
    if (!strcmp(texts[r], waiting_in)) text_of[r] = -1; /* waits where this rank does */
    for (int s = 0; s < r && text_of[r] == r; s++)
      if (s != me && answered[s] && !strcmp(texts[s], texts[r])) text_of[r] = text_of[s];
  }
  if (missing) {
    append_ranks(report, size, &used, answered, 0, n, NULL, 0);
    append(report, size, &used, " of %d did not answer within %.2g s (%s in no commgraph wait on this communicator: "
           "not come yet or busy elsewhere, finalized MPI or exited, or waiting on another communicator)", n, grace_s,
           missing == 1 ? "it is" : "they are");
  } else {
    append(report, size, &used, "every rank answered");
  }
  int same = 0;
  for (int r = 0; r < n; r++) same += r != me && answered[r] && text_of[r] == -1;
  if (same) {
    append(report, size, &used, "; ");
    append_ranks(report, size, &used, answered, 1, n, text_of, -1);
    append(report, size, &used, " %s there too", same == 1 ? "waits" : "wait");
  }
  for (int r = 0; r < n; r++) {
    if (r == me || !answered[r] || text_of[r] != r) continue;
    int alike = 0;
    for (int s = r; s < n; s++) alike += s != me && answered[s] && text_of[s] == r;
    append(report, size, &used, "; ");
    append_ranks(report, size, &used, answered, 1, n, text_of, r);
    append(report, size, &used, " %s in %s", alike == 1 ? "waits" : "wait", texts[r]);
  }
out:
  free(answered);
  free(text_of);
  free(texts);
}

void cg_mpi_roll_call(char *report, size_t size, MPI_Comm comm, const char *waiting_in, double timeout_s) {
  roll_call(report, size, comm, 0, waiting_in, timeout_s);
}

void cg_mpi_control_roll_call(char *report, size_t size, void *comm_impl, const char *waiting_in, double timeout_s) {
  const cg_mpi_comm_t *m = comm_impl;
  if (!cg_mpi_gate_enter()) {
    snprintf(report, size, "no roll call: MPI is being finalized");
    return;
  }
  roll_call(report, size, m->control, m->roll_id, waiting_in, timeout_s);
  cg_mpi_gate_leave();
}

int cg_mpi_control_any_thread(void *comm_impl) {
  const cg_mpi_comm_t *m = comm_impl;
  if (!m || m->thread_level < MPI_THREAD_MULTIPLE) return 0; /* no MPI call from this thread at all */
  if (cg_mpi_gate_closed()) return 0;
  int finalized = 1;
  MPI_Finalized(&finalized); /* callable from any thread, at any time */
  return !finalized;
}
