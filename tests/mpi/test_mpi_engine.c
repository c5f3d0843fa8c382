/* The progress engine of the MPI backends on device buffers
 * (backends/progress/progress_engine.h), driven on real ranks without a GPU:
 * this test plays the GPU's part, raising ready flags and waiting for done
 * flags in ordinary host memory, over host buffers of an MPI communicator.
 * It checks what the GPU suites cannot isolate: posting by ready flag in
 * sequence order across replays (the cursor wraps), the one-at-a-time window
 * (later chunks deferred, none lost), posting from another thread (as a host
 * node does), and a chain broadcast's sequential parts with a tag per chunk,
 * for every root; and the abort after a timeout (cg_ht_engine_abort) with a
 * rank that never joins. Values are random integers, outputs poisoned before
 * each replay. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commgraph/mpi.h"
#include "progress/progress_engine.h"
#include "mpi_test.h"
#include "plan_internal.h"

enum { CHUNKS = 5, CHUNK = 1000, REPLAYS = 20 };

typedef struct rig {
  cg_comm_t *comm;
  cg_mpi_comm_t *mpi;
  cg_ht_part_t parts[CHUNKS][2];
  cg_ht_part_t *lists[CHUNKS][2];
  uint8_t part_done[CHUNKS][2];
  cg_ht_op_t ops[CHUNKS];
  cg_ht_op_t *seq_ops[CHUNKS];
  cg_ht_sequence_t seq;
  uint32_t flags[CHUNKS][2]; /* ready, done */
  int32_t *send, *recv;
} rig_t;

static cg_step_t step_of(cg_comm_t *comm, cg_node_kind_t kind, const void *send, void *recv, int peer, int tag) {
  cg_step_t s;
  memset(&s, 0, sizeof s);
  s.kind = CG_STEP_COLLECTIVE;
  s.op_kind = kind;
  s.comm = comm;
  s.send = send;
  s.recv = recv;
  s.count = CHUNK;
  s.dtype = CG_INT32;
  s.op = CG_SUM;
  s.root = peer;
  s.tag = tag;
  return s;
}

/* One op per chunk: an allreduce of the chunk, or (chain) a broadcast link:
 * receive from the rank before, then send on. */
static void rig_setup(rig_t *r, int chain, int root, uint32_t window) {
  memset(r, 0, sizeof *r);
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  ck_assert_cg_ok(cg_comm_create(&r->comm, MPI_COMM_WORLD, &o));
  r->mpi = (cg_mpi_comm_t *)cg_mpi_comm_of(r->comm);
  ck_assert_ptr_nonnull(r->mpi);
  r->send = malloc(sizeof(int32_t) * CHUNKS * CHUNK);
  r->recv = malloc(sizeof(int32_t) * CHUNKS * CHUNK);
  ck_assert_ptr_nonnull(r->send);
  ck_assert_ptr_nonnull(r->recv);
  int n = cg_mpi_size(), me = cg_mpi_rank(), from_root = (me - root + n) % n;
  for (int k = 0; k < CHUNKS; k++) {
    int32_t *send = r->send + k * CHUNK, *recv = r->recv + k * CHUNK;
    cg_ht_op_t *op = &r->ops[k];
    op->n_parts = 1;
    if (!chain) {
      r->parts[k][0].step = step_of(r->comm, CG_NODE_ALLREDUCE, send, recv, -1, 0);
    } else {
      op->sequential = 1;
      if (from_root == 0) {
        r->parts[k][0].step = step_of(r->comm, CG_NODE_SEND, recv, NULL, (me + 1) % n, 1 + k);
      } else {
        r->parts[k][0].step = step_of(r->comm, CG_NODE_RECV, NULL, recv, (me - 1 + n) % n, 1 + k);
        r->parts[k][1].step = step_of(r->comm, CG_NODE_SEND, recv, NULL, (me + 1) % n, 1 + k);
        op->n_parts = from_root == n - 1 ? 1 : 2;
      }
    }
    for (uint32_t p = 0; p < op->n_parts; p++) {
      r->parts[k][p].mpi = r->mpi;
      ck_assert_cg_ok(cg_mpi_step_prepare(&r->parts[k][p].mpi_state, r->mpi, &r->parts[k][p].step));
      r->lists[k][p] = &r->parts[k][p];
    }
    op->parts = r->lists[k];
    op->part_done = r->part_done[k];
    op->ready = &r->flags[k][0];
    op->done = &r->flags[k][1];
    op->seq = &r->seq;
    r->seq_ops[k] = op;
  }
  r->seq.ops = r->seq_ops;
  r->seq.n_ops = CHUNKS;
  r->seq.window = window;
  ck_assert_cg_ok(cg_ht_engine_acquire(-1));
}

static void rig_teardown(rig_t *r) {
  cg_ht_engine_forget(r->seq_ops, CHUNKS);
  cg_ht_engine_release();
  for (int k = 0; k < CHUNKS; k++)
    for (int p = 0; p < 2; p++)
      if (r->parts[k][p].mpi_state) cg_mpi_step_release(r->mpi, r->parts[k][p].mpi_state);
  free(r->send);
  free(r->recv);
  cg_comm_destroy(r->comm);
}

static void raise_flag(volatile uint32_t *flag) { atomic_store((_Atomic uint32_t *)flag, 1); }

/* The GPU's wait-then-clear on every chunk's done flag, bounded. */
static int wait_all_done(rig_t *r) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (int k = 0; k < CHUNKS; k++) {
    while (atomic_load((_Atomic uint32_t *)&r->flags[k][1]) != 1) {
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (now.tv_sec - start.tv_sec > 30) return 0;
    }
    r->flags[k][1] = 0;
  }
  return 1;
}

/* Fresh inputs and poisoned outputs for a replay; what each rank expects. */
static void fill_replay(rig_t *r, int chain, int root, uint64_t seed, int32_t *expect) {
  int n = cg_mpi_size(), me = cg_mpi_rank();
  memset(r->recv, CG_MPI_POISON, sizeof(int32_t) * CHUNKS * CHUNK);
  for (int i = 0; i < CHUNKS * CHUNK; i++) {
    int64_t sum = 0;
    for (int q = 0; q < n; q++) {
      int32_t v = (int32_t)((seed * 2654435761u + (uint64_t)q * 40503u + (uint64_t)i * 97u) % 2001) - 1000;
      if (q == me) r->send[i] = v;
      sum += v;
      if (chain && q == root) expect[i] = v;
    }
    if (!chain) expect[i] = (int32_t)sum;
  }
  if (chain && me == root) memcpy(r->recv, r->send, sizeof(int32_t) * CHUNKS * CHUNK);
}

static void *post_all(void *arg) {
  rig_t *r = arg;
  for (int k = 0; k < CHUNKS; k++) cg_ht_engine_post(&r->ops[k]);
  return NULL;
}

/* by: 0 ready flags (hosttransfer), 1 posts from another thread (a host node) */
static void run_replays(int chain, int root, uint32_t window, int by) {
  rig_t r;
  rig_setup(&r, chain, root, window);
  if (by == 0) ck_assert_cg_ok(cg_ht_engine_watch(&r.seq));
  int32_t *expect = malloc(sizeof(int32_t) * CHUNKS * CHUNK);
  ck_assert_ptr_nonnull(expect);
  int ok = 1;
  for (int rep = 0; rep < REPLAYS && ok; rep++) {
    uint64_t seed = cg_test_seed() + (uint64_t)rep * 7919u;
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    fill_replay(&r, chain, root, seed, expect);
    if (by == 0) {
      /* chunks become ready one by one, like copies landing in order */
      for (int k = 0; k < CHUNKS; k++) raise_flag(r.ops[k].ready);
    } else {
      pthread_t t;
      ck_assert_int_eq(pthread_create(&t, NULL, post_all, &r), 0);
      pthread_join(t, NULL);
    }
    ok = wait_all_done(&r);
    for (int i = 0; ok && i < CHUNKS * CHUNK; i++) ok = r.recv[i] == expect[i];
    for (int k = 0; ok && k < CHUNKS; k++) ok = r.flags[k][0] == 0; /* the engine took every ready flag */
  }
  if (by == 0) cg_ht_engine_unwatch(&r.seq);
  ck_assert_all_ranks(ok, chain ? "chain broadcast through the engine" : "allreduce chunks through the engine");
  ck_assert_uint_eq(r.seq.in_mpi, 0);
  ck_assert_ptr_null(r.seq.deferred);
  free(expect);
  rig_teardown(&r);
}

static double seconds_since(const struct timespec *start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec);
}

static int all_poisoned(const int32_t *p, size_t n) {
  int32_t poison;
  memset(&poison, CG_MPI_POISON, sizeof poison);
  for (size_t i = 0; i < n; i++)
    if (p[i] != poison) return 0;
  return 1;
}

/* The last rank never joins the replay: the others' first chunk stays in
 * MPI and the rest wait behind the window. The abort raises every done flag
 * (the GPU's waits end), takes no result from MPI, and later replays of the
 * communicator finish without MPI, by ready flag and by post alike. At the
 * end the last rank joins the one collective left posted, so MPI ends
 * clean. */
START_TEST(engine__abort_raises_the_done_flags_and_later_ops_skip_mpi) {
  rig_t r;
  rig_setup(&r, 0, 0, 1);
  int n = cg_mpi_size(), me = cg_mpi_rank(), stuck = me != n - 1;
  ck_assert_cg_ok(cg_ht_engine_watch(&r.seq));
  int32_t *expect = malloc(sizeof(int32_t) * CHUNKS * CHUNK);
  ck_assert_ptr_nonnull(expect);
  fill_replay(&r, 0, 0, cg_test_seed(), expect);
  int ok = 1;
  if (stuck) {
    for (int k = 0; k < CHUNKS; k++) raise_flag(r.ops[k].ready);
    struct timespec nap = {0, 100 * 1000 * 1000}, start;
    nanosleep(&nap, NULL);
    for (int k = 0; k < CHUNKS; k++) ok &= atomic_load((_Atomic uint32_t *)&r.flags[k][1]) == 0;
    ck_assert_msg(ok, "rank %d: a done flag rose while a rank was missing", me);
    clock_gettime(CLOCK_MONOTONIC, &start);
    cg_ht_engine_abort(r.mpi);
    ck_assert_msg(wait_all_done(&r), "rank %d: the abort left a done flag down", me);
    ck_assert_msg(seconds_since(&start) < 5.0, "rank %d: the abort took %.3f s", me, seconds_since(&start));
    ck_assert_msg(all_poisoned(r.recv + CHUNK, (size_t)(CHUNKS - 1) * CHUNK),
                  "rank %d: chunks that never reached MPI were written", me);
    /* only the chunk MPI still holds is marked: its memory must not be freed */
    ck_assert_int_eq(atomic_load(&r.ops[0].abandoned), 1);
    for (int k = 1; k < CHUNKS; k++) ck_assert_int_eq(atomic_load(&r.ops[k].abandoned), 0);
    ck_assert_uint_eq(r.seq.in_mpi, 0);
    ck_assert_ptr_null(r.seq.deferred);
    /* a later replay by ready flag, then by post: done at once, no MPI */
    for (int k = 0; k < CHUNKS; k++) raise_flag(r.ops[k].ready);
    ck_assert_msg(wait_all_done(&r), "rank %d: a replay after the abort did not finish", me);
    for (int k = 0; k < CHUNKS; k++) ck_assert_uint_eq(r.flags[k][0], 0);
    cg_ht_engine_unwatch(&r.seq);
    post_all(&r);
    ck_assert_msg(wait_all_done(&r), "rank %d: a post after the abort did not finish", me);
    ck_assert_msg(all_poisoned(r.recv + CHUNK, (size_t)(CHUNKS - 1) * CHUNK),
                  "rank %d: a replay after the abort reached MPI", me);
  } else {
    cg_ht_engine_unwatch(&r.seq);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  /* the late rank joins the first chunk's allreduce, the only one posted
   * (nonblocking: MPI never matches a blocking collective with one) */
  if (!stuck) {
    MPI_Request late;
    MPI_Iallreduce(r.send, r.recv, CHUNK, MPI_INT32_T, MPI_SUM, r.mpi->data, &late);
    MPI_Wait(&late, MPI_STATUS_IGNORE);
  }
  ck_assert_all_ranks(1, "the late rank joined");
  free(expect);
  rig_teardown(&r);
}
END_TEST

START_TEST(engine__ready_flags_post_in_order_across_replays_one_at_a_time) { run_replays(0, 0, 1, 0); }
END_TEST

START_TEST(engine__ready_flags_post_with_no_window) { run_replays(0, 0, 0, 0); }
END_TEST

START_TEST(engine__posts_from_another_thread_like_a_host_node) { run_replays(0, 0, 1, 1); }
END_TEST

START_TEST(engine__chain_broadcast_from_every_root) {
  for (int root = 0; root < cg_mpi_size(); root++) run_replays(1, root, 0, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_engine");
  TCase *t = cg_mpi_tcase("engine");
  tcase_add_test(t, engine__ready_flags_post_in_order_across_replays_one_at_a_time);
  tcase_add_test(t, engine__ready_flags_post_with_no_window);
  tcase_add_test(t, engine__posts_from_another_thread_like_a_host_node);
  tcase_add_test(t, engine__chain_broadcast_from_every_root);
  tcase_add_test(t, engine__abort_raises_the_done_flags_and_later_ops_skip_mpi);
  suite_add_tcase(s, t);
  return cg_mpi_test_main(s);
}
