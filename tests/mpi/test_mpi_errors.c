/* MPI errors come back as statuses (backends/mpi/mpi_check.h): the library's
 * own communicators return MPI's errors, the application's keep their
 * handler, and a receive shorter than its message (the cross-rank check off)
 * fails with CG_ERR_BACKEND naming the node, the rank and the truncation,
 * while the job goes on: MPICH would abort it from inside MPI_Test (it raises
 * completion errors on MPI_COMM_WORLD's handler), which is why the MPI
 * backend receives through matched probes. Also the translation helper.
 *
 * Ranks pair up (0-1, 2-3, ...); an unpaired last rank sends to itself. In
 * the truncation tests only pair 0-1 goes wrong: the other pairs' plans must
 * run as usual. Every plan has a timeout, so no rank can wait forever. */
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_check.h"
#include "mpi_test.h"

/* A plan timeout: a rank whose peer failed ends within it. */
#define PLAN_TIMEOUT_S 20.0

static cg_comm_t *world(void) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  return c;
}

static int partner_of(int rank, int size) { return rank % 2 ? rank - 1 : rank + 1 < size ? rank + 1 : rank; }

static size_t random_between(size_t lo, size_t hi) { return lo + (size_t)(cg_test_rand() % (hi - lo + 1)); }

static cg_status_t compile_unchecked(cg_plan_t **plan, cg_graph_t *g) {
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.check_ranks = 0;
  o.timeout_s = PLAN_TIMEOUT_S;
  o.name = "errors";
  return cg_compile(plan, g, &o);
}

/* The reported case: rank 0 sends 64 floats, rank 1 receives 16. */
START_TEST(errors__short_receive_fails_on_its_rank_and_the_job_goes_on) {
  int rank = cg_mpi_rank(), size = cg_mpi_size(), peer = partner_of(rank, size);
  /* the reported sizes first, then random ones (1 element .. 256 KiB past
   * any eager limit; the receive always shorter) */
  size_t sends[4] = {64, 0, 0, 0}, recvs[4] = {16, 0, 0, 0};
  for (int k = 1; k < 4; k++) {
    sends[k] = random_between(2, (size_t)1 << 16);
    recvs[k] = random_between(1, sends[k] - 1);
  }
  int ok = 1;
  for (int k = 0; k < 4; k++) {
    cg_comm_t *c = world(); /* a fresh communicator each round */
    int bad_pair = rank < 2 && peer != rank; /* pair 0-1 */
    size_t n_send = sends[k], n_recv = bad_pair ? recvs[k] : sends[k];
    float *out = malloc(n_send * sizeof *out), *in = malloc(n_send * sizeof *in);
    for (size_t i = 0; i < n_send; i++) out[i] = (float)(rank * 100000 + (int)i);
    memset(in, CG_MPI_POISON, n_send * sizeof *in);
    cg_graph_t *g;
    cg_plan_t *plan = NULL;
    cg_node_t node;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    /* rank 0 of the bad pair only sends, rank 1 only receives */
    if (!bad_pair || rank == 0) {
      ck_assert_cg_ok(cg_send(&node, g, c, out, n_send, CG_FLOAT32, peer));
      ck_assert_cg_ok(cg_node_name(g, node, "send_grads"));
    }
    if (!bad_pair || rank == 1) {
      ck_assert_cg_ok(cg_recv(&node, g, c, in, n_recv, CG_FLOAT32, peer));
      ck_assert_cg_ok(cg_node_name(g, node, "short_recv"));
    }
    ck_assert_cg_ok(compile_unchecked(&plan, g));
    cg_status_t st = cg_plan_run(plan);
    const char *detail = st == CG_SUCCESS ? "" : cg_error_last();
    if (bad_pair && rank == 1) {
      char want_rank[64];
      snprintf(want_rank, sizeof want_rank, "rank 1 of %d", size);
      int named = st == CG_ERR_BACKEND && strstr(detail, "'short_recv'") && strstr(detail, want_rank) &&
                  strstr(detail, "recv") && strstr(detail, "from rank 0") && strstr(detail, "truncat") &&
                  strstr(detail, "MPI_ERR_TRUNCATE") && strstr(detail, "plan 'errors'");
      if (!named)
        fprintf(stderr, "rank 1, round %d (%zu floats sent, %zu received): status %s: %s\n", k, n_send, n_recv,
                cg_status_string(st), detail);
      ok &= !!named;
      /* the receive buffer is left as it was */
      for (size_t i = 0; i < n_send; i++) ok &= ((unsigned char *)in)[i * sizeof *in] == CG_MPI_POISON;
    } else {
      /* rank 0 of the bad pair: its message was drained, so its send
       * completes (MPICH completes the sender of a truncated message too);
       * the other pairs: as usual */
      if (st != CG_SUCCESS) fprintf(stderr, "rank %d, round %d: %s: %s\n", rank, k, cg_status_string(st), detail);
      ok &= st == CG_SUCCESS;
      if (!bad_pair)
        for (size_t i = 0; i < n_send; i++) ok &= in[i] == (float)(peer * 100000 + (int)i);
    }
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
    cg_comm_destroy(c);
    free(out);
    free(in);
  }
  /* every rank is still here and can still talk */
  ck_assert_all_ranks(ok, "a short receive fails on its rank only, with the node, rank and truncation named");
}
END_TEST

/* Several messages from one peer, all in flight at once: the probes match
 * them in the order the receives started (as posted MPI_Irecvs would), and a
 * short one (the last) fails naming its own node while the ones before it
 * land. Random counts and sizes. */
START_TEST(errors__receives_match_in_order_and_the_short_one_is_named) {
  int rank = cg_mpi_rank(), size = cg_mpi_size(), peer = partner_of(rank, size);
  for (int round = 0; round < 6; round++) {
    int n = (int)random_between(2, 9), short_round = round % 2; /* odd rounds: the last receive on rank 1 is short */
    size_t counts[9];
    for (int j = 0; j < n; j++) counts[j] = random_between(0, j % 3 == 0 ? (size_t)1 << 15 : 64);
    if (short_round) counts[n - 1] = random_between(2, 4096);
    MPI_Bcast(counts, n, MPI_UINT64_T, 0, MPI_COMM_WORLD); /* the same messages on every pair */
    int bad = short_round && rank == 1 && peer == 0;
    cg_comm_t *c = world();
    int32_t *out[9], *in[9];
    cg_graph_t *g;
    cg_plan_t *plan = NULL;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    for (int j = 0; j < n; j++) {
      out[j] = malloc((counts[j] + 1) * sizeof(int32_t));
      in[j] = malloc((counts[j] + 1) * sizeof(int32_t));
      for (size_t i = 0; i < counts[j]; i++) out[j][i] = rank * 1000000 + j * 10000 + (int32_t)i;
      memset(in[j], CG_MPI_POISON, (counts[j] + 1) * sizeof(int32_t));
      ck_assert_cg_ok(cg_send(NULL, g, c, out[j], counts[j], CG_INT32, peer));
    }
    for (int j = 0; j < n; j++) {
      cg_node_t node;
      size_t count = bad && j == n - 1 ? counts[j] / 2 : counts[j];
      ck_assert_cg_ok(cg_recv(&node, g, c, in[j], count, CG_INT32, peer));
      char name[32];
      snprintf(name, sizeof name, "recv_%d", j);
      ck_assert_cg_ok(cg_node_name(g, node, name));
    }
    ck_assert_cg_ok(compile_unchecked(&plan, g));
    cg_status_t st = cg_plan_run(plan);
    int ok = 1;
    if (bad) {
      char want[32];
      snprintf(want, sizeof want, "'recv_%d'", n - 1);
      ok = st == CG_ERR_BACKEND && strstr(cg_error_last(), want) && strstr(cg_error_last(), "truncat");
      if (!ok) fprintf(stderr, "rank %d, round %d: %s: %s\n", rank, round, cg_status_string(st), cg_error_last());
    } else {
      if (st != CG_SUCCESS) fprintf(stderr, "rank %d, round %d: %s: %s\n", rank, round, cg_status_string(st),
                                    cg_error_last());
      ok = st == CG_SUCCESS;
      /* in order: the j-th receive holds the j-th message */
      for (int j = 0; ok && j < n; j++)
        for (size_t i = 0; i < counts[j]; i++) ok &= in[j][i] == peer * 1000000 + j * 10000 + (int32_t)i;
    }
    /* a rank's own failure must not stop the others: each asserts its own */
    ck_assert_all_ranks(ok, "messages in order; the short receive named");
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
    cg_comm_destroy(c);
    for (int j = 0; j < n; j++) {
      free(out[j]);
      free(in[j]);
    }
  }
}
END_TEST

/* The library's duplicates return errors; the application's communicator
 * keeps its handler. */
START_TEST(errors__own_duplicates_return_errors_the_applications_keep_theirs) {
  MPI_Comm mine;
  MPI_Comm_dup(MPI_COMM_WORLD, &mine); /* ERRORS_ARE_FATAL, inherited */
  MPI_Errhandler before, after, ours;
  MPI_Comm_get_errhandler(mine, &before);
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, mine, NULL));
  MPI_Comm data;
  ck_assert_cg_ok(cg_comm_mpi(&data, c));
  MPI_Comm_get_errhandler(mine, &after);
  MPI_Comm_get_errhandler(data, &ours);
  int ok = before == after && after == MPI_ERRORS_ARE_FATAL && ours == MPI_ERRORS_RETURN;
  /* a bad call on the duplicate returns (a negative count) */
  int err = MPI_Send(NULL, -1, MPI_INT, 0, 0, data);
  ok &= err != MPI_SUCCESS;
  /* ... and translates: one line, MPICH's error stack left out */
  cg_status_t st = cg_fail_mpi(err, "MPI_Send", "send of %d to rank %d", -1, 0);
  const char *detail = cg_error_last();
  ok &= st == CG_ERR_BACKEND && strncmp(detail, "send of -1 to rank 0: MPI_Send: ", 32) == 0 &&
        !strchr(detail, '\n') && !strstr(detail, "error stack") && strstr(detail, "(MPI_ERR_COUNT)");
  if (!ok) fprintf(stderr, "rank %d: %s\n", cg_mpi_rank(), detail);
  cg_comm_destroy(c);
  MPI_Comm_free(&mine);
  ck_assert_all_ranks(ok, "ERRORS_RETURN on the duplicates only");
}
END_TEST

/* The translation helper, rank by rank (no communication). */
START_TEST(errors__translation_names_call_text_and_class) {
  static const struct {
    int error_class;
    const char *name;
  } classes[] = {
      {MPI_ERR_TRUNCATE, "MPI_ERR_TRUNCATE"}, {MPI_ERR_COUNT, "MPI_ERR_COUNT"},
      {MPI_ERR_RANK, "MPI_ERR_RANK"},         {MPI_ERR_TAG, "MPI_ERR_TAG"},
      {MPI_ERR_COMM, "MPI_ERR_COMM"},         {MPI_ERR_OTHER, "MPI_ERR_OTHER"},
      {MPI_ERR_INTERN, "MPI_ERR_INTERN"},     {MPI_ERR_REQUEST, "MPI_ERR_REQUEST"},
      {MPI_ERR_TYPE, "MPI_ERR_TYPE"},         {MPI_ERR_PENDING, "MPI_ERR_PENDING"},
  };
  enum { N = sizeof classes / sizeof classes[0] };
  for (int round = 0; round < 50; round++) {
    int k = (int)(cg_test_rand() % N), x = (int)(cg_test_rand() % 1000);
    char text[MPI_MAX_ERROR_STRING + 1], want[1400];
    int len = 0;
    MPI_Error_string(classes[k].error_class, text, &len);
    text[strcspn(text, "\n")] = '\0';
    if (round % 2)
      snprintf(want, sizeof want, "node %d: MPI_Call: %s (%s)", x, text, classes[k].name);
    else
      snprintf(want, sizeof want, "MPI_Call: %s (%s)", text, classes[k].name);
    cg_status_t st = round % 2 ? cg_fail_mpi(classes[k].error_class, "MPI_Call", "node %d", x)
                               : cg_mpi_fail(classes[k].error_class, "MPI_Call");
    ck_assert_int_eq(st, CG_ERR_BACKEND);
    ck_assert_str_eq(cg_error_last(), want);
  }
  char buf[48];
  ck_assert_str_eq(cg_mpi_error_class_name(MPI_ERR_TRUNCATE, buf, sizeof buf), "MPI_ERR_TRUNCATE");
  ck_assert_str_eq(cg_mpi_error_class_name(123456, buf, sizeof buf), "MPI error class 123456");
  /* the *all / *some variants: the request's own error is in its status */
  MPI_Status status;
  memset(&status, 0, sizeof status);
  status.MPI_ERROR = MPI_ERR_TRUNCATE;
  ck_assert_int_eq(cg_mpi_request_error(MPI_ERR_IN_STATUS, &status), MPI_ERR_TRUNCATE);
  ck_assert_int_eq(cg_mpi_request_error(MPI_ERR_OTHER, &status), MPI_ERR_OTHER);
  ck_assert_int_eq(cg_mpi_request_error(MPI_SUCCESS, &status), MPI_SUCCESS);
  ck_assert_int_eq(cg_mpi_request_error(MPI_ERR_IN_STATUS, MPI_STATUS_IGNORE), MPI_ERR_IN_STATUS);
  /* the library's own communicator gets ERRORS_RETURN; NULL is fine */
  ck_assert_cg_ok(cg_mpi_errors_return(MPI_COMM_NULL, "nothing"));
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_errors");
  TCase *tc = cg_mpi_tcase_limit("errors", 90);
  tcase_add_test(tc, errors__translation_names_call_text_and_class);
  tcase_add_test(tc, errors__own_duplicates_return_errors_the_applications_keep_theirs);
  tcase_add_test(tc, errors__short_receive_fails_on_its_rank_and_the_job_goes_on);
  tcase_add_test(tc, errors__receives_match_in_order_and_the_short_one_is_named);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
