/* The host executor on real ranks: blocking and nonblocking runs, replays,
 * point-to-point rings, host functions in order, state errors, communicators. */
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "mpi_test.h"

static cg_comm_t *world(void) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  return c;
}

START_TEST(exec__allreduce_runs_and_replays) {
  cg_comm_t *c = world();
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  enum { N = 1000 };
  int32_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, a, b, N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  cg_graph_destroy(g); /* the plan does not need the graph */
  int ok = 1;
  for (int iter = 0; iter < 5; iter++) {
    for (int i = 0; i < N; i++) a[i] = rank * 1000 + i + iter;
    memset(b, CG_MPI_POISON, N * sizeof *b);
    ck_assert_cg_ok(cg_plan_run(plan));
    for (int i = 0; i < N; i++) ok &= b[i] == 1000 * size * (size - 1) / 2 + size * (i + iter);
  }
  ck_assert_all_ranks(ok, "allreduce replays");
  cg_plan_destroy(plan);
  cg_comm_destroy(c);
  free(a);
  free(b);
}
END_TEST

/* Every rank sends 1 MB (past any eager limit) to the next and then receives
 * from the previous: issued together, nothing waits. */
START_TEST(exec__ring_send_then_recv_does_not_deadlock) {
  cg_comm_t *c = world();
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  enum { N = 1 << 18 };
  int32_t *out = malloc(N * sizeof *out), *in = malloc(N * sizeof *in);
  for (int i = 0; i < N; i++) out[i] = rank * N + i;
  memset(in, CG_MPI_POISON, N * sizeof *in);
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_send(NULL, g, c, out, N, CG_INT32, (rank + 1) % size));
  ck_assert_cg_ok(cg_recv(NULL, g, c, in, N, CG_INT32, (rank + size - 1) % size));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_cg_ok(cg_plan_run(plan));
  int from = (rank + size - 1) % size, ok = 1;
  for (int i = 0; i < N; i++) ok &= in[i] == from * N + i;
  ck_assert_all_ranks(ok, "ring data");
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
  free(out);
  free(in);
}
END_TEST

/* Ranks pair up (0-1, 2-3, ...). The even rank receives on A before sending
 * on B; the odd rank receives on B before sending on A. Only an executor that
 * runs independent steps concurrently finishes this. Every rank uses both
 * communicators (an unpaired last rank exchanges with itself), because
 * compiling is collective over every communicator the graph uses. */
START_TEST(exec__independent_steps_run_concurrently) {
  cg_comm_t *a = world(), *b = world();
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  int partner = rank % 2 ? rank - 1 : rank + 1 < size ? rank + 1 : rank;
  enum { N = 1 << 18 };
  int32_t *out = malloc(N * sizeof *out), *in = malloc(N * sizeof *in);
  for (int i = 0; i < N; i++) out[i] = rank + 2 * i;
  memset(in, CG_MPI_POISON, N * sizeof *in);
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  if (partner != rank) {
    cg_comm_t *first = rank % 2 ? b : a, *second = rank % 2 ? a : b;
    ck_assert_cg_ok(cg_recv(NULL, g, first, in, N, CG_INT32, partner));
    ck_assert_cg_ok(cg_send(NULL, g, second, out, N, CG_INT32, partner));
  } else { /* alone: half through each communicator, to itself */
    ck_assert_cg_ok(cg_recv(NULL, g, a, in, N / 2, CG_INT32, rank));
    ck_assert_cg_ok(cg_send(NULL, g, a, out, N / 2, CG_INT32, rank));
    ck_assert_cg_ok(cg_recv(NULL, g, b, in + N / 2, N / 2, CG_INT32, rank));
    ck_assert_cg_ok(cg_send(NULL, g, b, out, N / 2, CG_INT32, rank));
  }
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_cg_ok(cg_plan_run(plan));
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= in[i] == partner + 2 * (partner == rank ? i % (N / 2) : i);
  ck_assert_all_ranks(ok, "crossed exchange");
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(a);
  cg_comm_destroy(b);
  free(out);
  free(in);
}
END_TEST

/* Two receives into the same buffer (the second waits for the first) recorded
 * before two sends: the sends must not queue behind the waiting receive, or
 * every rank waits for a message nobody sent. The second message wins. */
START_TEST(exec__waiting_receive_does_not_hold_back_sends) {
  cg_comm_t *c = world();
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  int to = (rank + 1) % size, from = (rank + size - 1) % size;
  enum { N = 1 << 16 };
  int32_t *first = malloc(N * sizeof *first), *second = malloc(N * sizeof *second), *in = malloc(N * sizeof *in);
  for (int i = 0; i < N; i++) {
    first[i] = -rank;
    second[i] = rank * N + i;
  }
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_recv(NULL, g, c, in, N, CG_INT32, from));
  ck_assert_cg_ok(cg_recv(NULL, g, c, in, N, CG_INT32, from));
  ck_assert_cg_ok(cg_send(NULL, g, c, first, N, CG_INT32, to));
  ck_assert_cg_ok(cg_send(NULL, g, c, second, N, CG_INT32, to));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_cg_ok(cg_plan_run(plan));
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= in[i] == from * N + i;
  ck_assert_all_ranks(ok, "second message in the buffer");
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
  free(first);
  free(second);
  free(in);
}
END_TEST

typedef struct log {
  int entries[8];
  int n;
  const int32_t *watch; /* value seen by the logging function */
  int32_t seen[8];
} log_t;

typedef struct log_call {
  log_t *log;
  int id;
} log_call_t;

static void log_entry(void *arg) {
  log_call_t *c = arg;
  c->log->seen[c->log->n] = c->log->watch[0];
  c->log->entries[c->log->n++] = c->id;
}

/* A host function that writes the input runs before the allreduce; one that
 * reads the result runs after it, and sees it. */
START_TEST(exec__host_functions_order_around_collectives) {
  cg_comm_t *c = world();
  int size = cg_mpi_size();
  int32_t in[4] = {0}, out[4] = {0};
  log_t log = {.watch = out};
  log_call_t before = {&log, 1}, after = {&log, 2};
  cg_range_t in_range = {in, sizeof in}, out_range = {out, sizeof out};
  cg_access_t writes_in = CG_ACCESS_INIT, reads_out = CG_ACCESS_INIT;
  writes_in.everything = reads_out.everything = 0;
  writes_in.writes = &in_range;
  writes_in.n_writes = 1;
  reads_out.reads = &out_range;
  reads_out.n_reads = 1;
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_host_func(NULL, g, log_entry, &before, &writes_in));
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, in, out, 4, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_host_func(NULL, g, log_entry, &after, &reads_out));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  for (int i = 0; i < 4; i++) in[i] = 5;
  ck_assert_cg_ok(cg_plan_run(plan));
  ck_assert_int_eq(log.n, 2);
  ck_assert_int_eq(log.entries[0], 1);
  ck_assert_int_eq(log.entries[1], 2);
  ck_assert_int_eq(log.seen[1], 5 * size);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
}
END_TEST

START_TEST(exec__start_test_wait_and_state_errors) {
  cg_comm_t *c = world();
  enum { N = 1 << 16 };
  float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
  for (int i = 0; i < N; i++) a[i] = (float)(i % 13);
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int k = 0; k < 4; k++)
    ck_assert_cg_ok(cg_allreduce(NULL, g, c, a + k * (N / 4), b + k * (N / 4), N / 4, CG_FLOAT32, CG_MAX));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  int done = 0;
  ck_assert_cg_ok(cg_plan_test(&done, plan)); /* never started: complete */
  ck_assert_int_eq(done, 1);
  ck_assert_cg_ok(cg_plan_wait(plan));
  for (int round = 0; round < 3; round++) {
    memset(b, CG_MPI_POISON, N * sizeof *b);
    ck_assert_cg_ok(cg_plan_start(plan));
    cg_status_t again = cg_plan_start(plan);
    if (again != CG_SUCCESS) {
      ck_assert_int_eq(again, CG_ERR_IN_PROGRESS);
      ck_assert_ptr_nonnull(strstr(cg_error_last(), "still running"));
    } else { /* it may already have finished: the second start is a new run */
      ck_assert_cg_ok(cg_plan_wait(plan));
    }
    done = 0;
    while (!done) ck_assert_cg_ok(cg_plan_test(&done, plan));
    ck_assert_cg_ok(cg_plan_test(&done, plan));
    ck_assert_int_eq(done, 1);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= b[i] == a[i];
    ck_assert_all_ranks(ok, "max of equal inputs");
  }
  ck_assert_cg_status(cg_plan_start(NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_test(NULL, plan), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_run(NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_wait(NULL), CG_ERR_INVALID_ARGUMENT);
  /* destroying a running plan waits for it */
  ck_assert_cg_ok(cg_plan_start(plan));
  cg_plan_destroy(plan);
  cg_plan_destroy(NULL);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
  free(a);
  free(b);
}
END_TEST

START_TEST(exec__empty_and_zero_count_plans) {
  cg_comm_t *c = world();
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_cg_ok(cg_plan_run(plan));
  cg_plan_destroy(plan);
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, NULL, NULL, 0, CG_FLOAT32, CG_SUM));
  ck_assert_cg_ok(cg_barrier(NULL, g, c));
  ck_assert_cg_ok(cg_alltoall(NULL, g, c, NULL, NULL, 0, CG_INT8));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_cg_ok(cg_plan_run(plan));
  ck_assert_cg_ok(cg_plan_run(plan));
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
}
END_TEST

START_TEST(exec__communicator_creation) {
  cg_comm_t *c = NULL;
  int rank = -1, size = -1, device = 0;
  const char *name = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_rank(&rank, c));
  ck_assert_cg_ok(cg_comm_size(&size, c));
  ck_assert_cg_ok(cg_comm_backend_name(&name, c));
  ck_assert_cg_ok(cg_comm_device(&device, c));
  ck_assert_int_eq(rank, cg_mpi_rank());
  ck_assert_int_eq(size, cg_mpi_size());
  ck_assert_str_eq(name, "mpi");
  ck_assert_int_eq(device, CG_DEVICE_HOST);
  MPI_Comm dup = MPI_COMM_NULL;
  ck_assert_cg_ok(cg_comm_mpi(&dup, c));
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(dup, MPI_COMM_WORLD, &cmp);
  ck_assert_int_eq(cmp, MPI_CONGRUENT); /* a duplicate: same ranks, its own traffic */
  cg_comm_destroy(c);

  cg_comm_t *untouched = (cg_comm_t *)&untouched;
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  ck_assert_cg_status(cg_comm_create(NULL, MPI_COMM_WORLD, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_comm_create(&untouched, MPI_COMM_NULL, NULL), CG_ERR_INVALID_ARGUMENT);
  o.size = 3;
  ck_assert_cg_status(cg_comm_create(&untouched, MPI_COMM_WORLD, &o), CG_ERR_INVALID_ARGUMENT);
  o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
  o.backend = (cg_backend_kind_t)99;
  ck_assert_cg_status(cg_comm_create(&untouched, MPI_COMM_WORLD, &o), CG_ERR_INVALID_ENUM);
  o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
  o.device = -7;
  ck_assert_cg_status(cg_comm_create(&untouched, MPI_COMM_WORLD, &o), CG_ERR_INVALID_ARGUMENT);
  o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
  o.backend = CG_BACKEND_HOSTTRANSFER; /* host buffers: the mpi backend's job */
  ck_assert_cg_status(cg_comm_create(&untouched, MPI_COMM_WORLD, &o), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "hosttransfer"));
  ck_assert_ptr_eq(untouched, (cg_comm_t *)&untouched);
  o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
  o.staging = (cg_staging_t)7;
  ck_assert_cg_status(cg_comm_create(&untouched, MPI_COMM_WORLD, &o), CG_ERR_INVALID_ENUM);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "staging"));
  /* MPI on a device (mpi-staged, hosttransfer): staged through host memory
   * where this process has a GPU (and the build has CUDA); refused with the
   * reason otherwise; alike with device pointers handed to MPI (staging
   * DIRECT, which this MPI need not support: steps it cannot read are
   * staged). */
  static const struct {
    cg_backend_kind_t kind;
    cg_staging_t staging;
    const char *name;
  } on_device[] = {{CG_BACKEND_MPI, CG_STAGING_AUTO, "mpi-staged"},
                   {CG_BACKEND_HOSTTRANSFER, CG_STAGING_AUTO, "hosttransfer"},
                   {CG_BACKEND_MPI, CG_STAGING_DIRECT, "mpi-staged"}};
  for (int b = 0; b < 3; b++) {
    o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
    o.backend = on_device[b].kind;
    o.staging = on_device[b].staging;
    o.device = 0;
    cg_comm_t *staged = NULL;
    cg_status_t st = cg_comm_create(&staged, MPI_COMM_WORLD, &o);
    ck_assert_msg(st == CG_SUCCESS || st == CG_ERR_UNSUPPORTED, "%s on device 0: %s", on_device[b].name,
                  cg_status_string(st));
    if (st == CG_SUCCESS) {
      const char *backend = NULL;
      ck_assert_cg_ok(cg_comm_backend_name(&backend, staged));
      ck_assert_str_eq(backend, on_device[b].name);
      cg_comm_destroy(staged);
    } else {
      ck_assert_ptr_nonnull(strstr(cg_error_last(), "device 0"));
    }
  }

  cg_comm_t *offline;
  ck_assert_cg_ok(cg_comm_create_offline(&offline, 0, 2));
  ck_assert_cg_status(cg_comm_mpi(&dup, offline), CG_ERR_UNSUPPORTED);
  cg_comm_destroy(offline);
  ck_assert_str_eq(cg_backend_kind_name(CG_BACKEND_NCCL), "nccl");
  ck_assert_str_eq(cg_backend_kind_name((cg_backend_kind_t)42), "unknown");
}
END_TEST

/* Under MPI_THREAD_MULTIPLE (what the suite asks for) another thread may run a
 * plan. */
typedef struct thread_run {
  cg_plan_t *plan;
  cg_status_t status;
} thread_run_t;

static int run_on_thread(void *arg) {
  thread_run_t *t = arg;
  t->status = cg_plan_run(t->plan);
  return 0;
}

START_TEST(exec__plan_runs_on_another_thread) {
  int provided = 0;
  MPI_Query_thread(&provided);
  ck_assert_msg(provided >= MPI_THREAD_SERIALIZED, "the suite asks for MPI_THREAD_MULTIPLE; MPI provides level %d",
                provided);
  cg_comm_t *c = world();
  int32_t a = cg_mpi_rank() + 1, b = 0;
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, &a, &b, 1, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  thread_run_t t = {plan, CG_ERR_INTERNAL};
  thrd_t thread;
  ck_assert_int_eq(thrd_create(&thread, run_on_thread, &t), thrd_success);
  ck_assert_int_eq(thrd_join(thread, NULL), thrd_success);
  ck_assert_cg_ok(t.status);
  int size = cg_mpi_size();
  ck_assert_all_ranks(b == size * (size + 1) / 2, "sum from a thread");
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_exec");
  TCase *tc = cg_mpi_tcase("exec");
  tcase_add_test(tc, exec__allreduce_runs_and_replays);
  tcase_add_test(tc, exec__ring_send_then_recv_does_not_deadlock);
  tcase_add_test(tc, exec__independent_steps_run_concurrently);
  tcase_add_test(tc, exec__waiting_receive_does_not_hold_back_sends);
  tcase_add_test(tc, exec__host_functions_order_around_collectives);
  tcase_add_test(tc, exec__start_test_wait_and_state_errors);
  tcase_add_test(tc, exec__empty_and_zero_count_plans);
  tcase_add_test(tc, exec__communicator_creation);
  tcase_add_test(tc, exec__plan_runs_on_another_thread);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
