/* Every communicating node kind x every data type x every reduction x roots x
 * sizes 0, 1, primes and a few MB x in place and not, against bytes each rank
 * works out on its own.
 *
 * Each case is one node on buffers of its own. A rank's input comes from the
 * shared seed and a salt naming the case, the sending rank and the block, so
 * every rank can regenerate every other rank's input and compute the expected
 * result without communicating (and so without trusting the transport under
 * test). Values are small integers, so every reduction is exact and results
 * are compared byte for byte. Outputs start poisoned and every buffer carries
 * poisoned guards on both sides: bytes a node must leave alone (recv on
 * non-roots of reduce and gather, the other blocks of in-place reduce_scatter,
 * gather and scatter, anything past the count) show up as differences.
 *
 * The cases of one kind and type share one graph, so one compile and one run
 * check them all, and they go round-robin over a few communicators, so plans
 * run several collectives at once: with oversubscribed ranks each tiny
 * collective costs milliseconds, and one at a time they would take minutes. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kind_cases.h"
#include "mpi_test.h"

static const size_t sizes[] = {0, 1, 2, 3, 7, 13, 31, 127, 1021};
#define N_SIZES (sizeof sizes / sizeof sizes[0])
/* ops x roots x sizes x forms */
#define MAX_CASES (CG_REDOP_COUNT * 2 * N_SIZES * 2)

enum { N_COMMS = 4 };

static cg_comm_t *world(void) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  return c;
}

static void open_comms(cg_comm_t *comms[N_COMMS]) {
  for (int i = 0; i < N_COMMS; i++) comms[i] = world();
}

static void close_comms(cg_comm_t *comms[N_COMMS]) {
  for (int i = 0; i < N_COMMS; i++) cg_comm_destroy(comms[i]);
}

static cg_status_t record_case(cg_graph_t *g, cg_comm_t *comm, const kcase_t *c) {
  if (c->kind == CG_NODE_SEND) {
    cg_status_t st = cg_send(NULL, g, comm, c->send, c->count, c->dtype, c->root);
    return st != CG_SUCCESS ? st : cg_recv(NULL, g, comm, c->recv, c->count, c->dtype, c->from);
  }
  cg_test_call_t call = {c->kind, comm, c->send, c->recv, c->count, c->dtype, c->op, c->root};
  return cg_test_record(NULL, g, &call);
}

static int add_barrier(cg_graph_t *g, cg_comm_t *comm, char *what, size_t len, const char *label) {
  if (cg_barrier(NULL, g, comm) == CG_SUCCESS) return 1;
  snprintf(what, len, "%s: recording a barrier: %s", label, cg_error_last());
  return 0;
}

/* Records every case into one graph (case i on communicator i % N_COMMS,
 * between barriers, which also checks that barriers run among other nodes),
 * compiles, runs, compares, frees. */
static void run_cases(cg_comm_t *comms[N_COMMS], kcase_t *cases, size_t n, const char *label, int nonblocking) {
  char what[700];
  cg_graph_t *g = NULL;
  cg_plan_t *plan = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  int ok = add_barrier(g, comms[0], what, sizeof what, label);
  for (size_t i = 0; i < n && ok; i++) {
    cg_kc_setup(&cases[i], cg_mpi_rank(), cg_mpi_size());
    if (record_case(g, comms[i % N_COMMS], &cases[i]) != CG_SUCCESS) {
      char desc[200];
      cg_kc_describe(desc, sizeof desc, &cases[i]);
      snprintf(what, sizeof what, "%s: recording %s: %s", label, desc, cg_error_last());
      ok = 0;
    }
    if (ok && i == n / 2) ok = add_barrier(g, comms[N_COMMS - 1], what, sizeof what, label);
  }
  if (ok) ok = add_barrier(g, comms[0], what, sizeof what, label);
  ck_assert_all_ranks(ok, what);

  cg_status_t st = cg_compile(&plan, g, NULL);
  snprintf(what, sizeof what, "%s: cg_compile: %s", label, st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, what);
  cg_graph_destroy(g);

  if (nonblocking) {
    st = cg_plan_start(plan);
    if (st == CG_SUCCESS) st = cg_plan_wait(plan);
  } else {
    st = cg_plan_run(plan);
  }
  snprintf(what, sizeof what, "%s: running: %s", label, st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, what);

  size_t bad = 0;
  char first[600] = "", why[600];
  for (size_t i = 0; i < n; i++)
    if (!cg_kc_check(&cases[i], why, sizeof why) && bad++ == 0) memcpy(first, why, sizeof first);
  snprintf(what, sizeof what, "%s: %zu of %zu cases differ here; first: %s", label, bad, n,
           bad ? first : "(none)");
  ck_assert_all_ranks(bad == 0, what);
  cg_plan_destroy(plan);
  for (size_t i = 0; i < n; i++) cg_kc_free(&cases[i]);
  cg_kc_forget();
}

/* Every reduction, root, size and form of one kind and type, in record order
 * identical on every rank (the cross-rank check would say otherwise). */
static size_t build_cases(kcase_t *out, cg_node_kind_t kind, cg_dtype_t dtype) {
  int n = cg_mpi_size(), roots[2] = {0, n - 1};
  int n_ops = cg_test_kind_has_op(kind) ? CG_REDOP_COUNT : 1;
  int n_roots = cg_test_kind_is_rooted(kind) ? 2 : 1, n_forms = cg_kc_has_inplace_form(kind) ? 2 : 1;
  size_t k = 0;
  for (int op = 0; op < n_ops; op++)
    for (int r = 0; r < n_roots; r++)
      for (size_t s = 0; s < N_SIZES; s++)
        for (int form = 0; form < n_forms; form++, k++)
          out[k] = (kcase_t){.kind = kind,
                             .dtype = dtype,
                             .op = (cg_redop_t)op,
                             .root = roots[r],
                             .count = sizes[s],
                             .inplace = form,
                             .id = ((uint64_t)kind * CG_DTYPE_COUNT + (uint64_t)dtype) << 16 | k / (size_t)n_forms};
  return k;
}

static void check_kind(cg_node_kind_t kind) {
  cg_comm_t *comms[N_COMMS];
  open_comms(comms);
  kcase_t *cases = calloc(MAX_CASES, sizeof *cases);
  ck_assert_ptr_nonnull(cases);
  for (int d = 0; d < CG_DTYPE_COUNT; d++) {
    memset(cases, 0, MAX_CASES * sizeof *cases);
    size_t n = build_cases(cases, kind, (cg_dtype_t)d);
    char label[64];
    snprintf(label, sizeof label, "%s %s", cg_node_kind_name(kind), cg_dtype_name((cg_dtype_t)d));
    run_cases(comms, cases, n, label, d % 2); /* both ways of running a plan */
  }
  free(cases);
  close_comms(comms);
}

START_TEST(kinds__allreduce_every_dtype_op_size_and_form) { check_kind(CG_NODE_ALLREDUCE); }
END_TEST

START_TEST(kinds__broadcast_every_dtype_root_size_and_form) { check_kind(CG_NODE_BROADCAST); }
END_TEST

START_TEST(kinds__reduce_every_dtype_op_root_size_and_form_nonroots_untouched) { check_kind(CG_NODE_REDUCE); }
END_TEST

START_TEST(kinds__allgather_every_dtype_size_and_form) { check_kind(CG_NODE_ALLGATHER); }
END_TEST

START_TEST(kinds__reduce_scatter_every_dtype_op_size_in_place_keeps_other_blocks) {
  check_kind(CG_NODE_REDUCE_SCATTER);
}
END_TEST

START_TEST(kinds__alltoall_every_dtype_and_size) { check_kind(CG_NODE_ALLTOALL); }
END_TEST

START_TEST(kinds__gather_every_dtype_root_size_and_form_nonroots_untouched) { check_kind(CG_NODE_GATHER); }
END_TEST

START_TEST(kinds__scatter_every_dtype_root_size_and_form_in_place_keeps_send) { check_kind(CG_NODE_SCATTER); }
END_TEST

/* A ring (to rank+1, from rank-1) and a send to self, per type and size. Each
 * case records its send, then its receive, and every rank records the cases in
 * the same order on the same communicators, so a send and the receive meant
 * for it are the n-th between that pair on their communicator: MPI matches
 * them by posting order. */
START_TEST(kinds__send_recv_ring_and_self_every_dtype_and_size) {
  cg_comm_t *comms[N_COMMS];
  open_comms(comms);
  int me = cg_mpi_rank(), n = cg_mpi_size();
  kcase_t cases[2 * N_SIZES];
  for (int d = 0; d < CG_DTYPE_COUNT; d++) {
    size_t k = 0;
    for (size_t s = 0; s < N_SIZES; s++)
      for (int self = 0; self < 2; self++, k++)
        cases[k] = (kcase_t){.kind = CG_NODE_SEND,
                             .dtype = (cg_dtype_t)d,
                             .op = CG_SUM,
                             .root = self ? me : (me + 1) % n,
                             .from = self ? me : (me + n - 1) % n,
                             .count = sizes[s],
                             .id = ((uint64_t)CG_NODE_SEND * CG_DTYPE_COUNT + (uint64_t)d) << 16 | k};
    char label[64];
    snprintf(label, sizeof label, "send/recv %s", cg_dtype_name((cg_dtype_t)d));
    run_cases(comms, cases, k, label, d % 2);
  }
  close_comms(comms);
}
END_TEST

/* Barriers alone, and barriers around an allreduce and a ring, driven with
 * cg_plan_test. (Every graph above also starts, is cut in half and ends with a
 * barrier.) */
START_TEST(kinds__barrier_completes_alone_and_between_other_nodes) {
  cg_comm_t *comm = world();
  int me = cg_mpi_rank(), n = cg_mpi_size();
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  cg_graph_destroy(g);
  ck_assert_all_ranks(cg_plan_run(plan) == CG_SUCCESS, "a graph of one barrier runs");
  cg_plan_destroy(plan);

  enum { N = 7 };
  int32_t in[N], sum[N], ring[N];
  for (int i = 0; i < N; i++) in[i] = me * 10 + i;
  memset(sum, CG_MPI_POISON, sizeof sum);
  memset(ring, CG_MPI_POISON, sizeof ring);
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, in, sum, N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  ck_assert_cg_ok(cg_send(NULL, g, comm, in, N, CG_INT32, (me + 1) % n));
  ck_assert_cg_ok(cg_recv(NULL, g, comm, ring, N, CG_INT32, (me + n - 1) % n));
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  cg_graph_destroy(g);
  int done = 0;
  cg_status_t st = cg_plan_start(plan);
  while (st == CG_SUCCESS && !done) st = cg_plan_test(&done, plan);
  ck_assert_all_ranks(st == CG_SUCCESS, "barriers around an allreduce and a ring run");
  int ok = 1;
  for (int i = 0; i < N; i++)
    ok &= sum[i] == 10 * n * (n - 1) / 2 + n * i && ring[i] == ((me + n - 1) % n) * 10 + i;
  ck_assert_all_ranks(ok, "the nodes between barriers give the right values");
  cg_plan_destroy(plan);
  cg_comm_destroy(comm);
}
END_TEST

/* A few MB per buffer for every kind, in place and not, for three types of
 * different widths (not every type x reduction: the small sizes cover those).
 * For kinds whose count is per block, the count is divided by the ranks so the
 * largest buffer stays a few MB. */
START_TEST(kinds__few_megabytes_every_kind_and_form) {
  static const struct {
    cg_dtype_t dtype;
    size_t elems;
    cg_redop_t op;
  } big[] = {{CG_FLOAT32, (size_t)1 << 20, CG_SUM}, /* 4 MB */
             {CG_BFLOAT16, (size_t)3 << 19, CG_AVG}, /* 3 MB */
             {CG_INT64, (size_t)3 << 17, CG_MAX}};  /* 3 MB */
  cg_comm_t *comms[N_COMMS];
  open_comms(comms);
  int me = cg_mpi_rank(), n = cg_mpi_size();
  kcase_t cases[3 * 2];
  for (int t = 0; t < CG_TEST_N_COMM_KINDS; t++) {
    cg_node_kind_t kind = cg_test_comm_kinds[t];
    if (kind == CG_NODE_RECV) continue; /* a send case includes its receive */
    size_t k = 0;
    for (int b = 0; b < 3; b++)
      for (int form = 0; form < (cg_kc_has_inplace_form(kind) ? 2 : 1); form++, k++)
        cases[k] = (kcase_t){.kind = kind,
                             .dtype = big[b].dtype,
                             .op = big[b].op,
                             .root = kind == CG_NODE_SEND ? (me + 1) % n : n - 1,
                             .from = (me + n - 1) % n,
                             .count = cg_kc_scales_with_ranks(kind) ? big[b].elems / (size_t)n : big[b].elems,
                             .inplace = form,
                             .id = (((uint64_t)1 << 20) + (uint64_t)kind) << 8 | (uint64_t)b};
    char label[64];
    snprintf(label, sizeof label, "%s, a few MB", kind == CG_NODE_SEND ? "send/recv" : cg_node_kind_name(kind));
    run_cases(comms, cases, k, label, t % 2);
  }
  close_comms(comms);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_kinds");
  TCase *tc = cg_mpi_tcase("kinds");
  tcase_add_test(tc, kinds__allreduce_every_dtype_op_size_and_form);
  tcase_add_test(tc, kinds__broadcast_every_dtype_root_size_and_form);
  tcase_add_test(tc, kinds__reduce_every_dtype_op_root_size_and_form_nonroots_untouched);
  tcase_add_test(tc, kinds__allgather_every_dtype_size_and_form);
  tcase_add_test(tc, kinds__reduce_scatter_every_dtype_op_size_in_place_keeps_other_blocks);
  tcase_add_test(tc, kinds__alltoall_every_dtype_and_size);
  tcase_add_test(tc, kinds__gather_every_dtype_root_size_and_form_nonroots_untouched);
  tcase_add_test(tc, kinds__scatter_every_dtype_root_size_and_form_in_place_keeps_send);
  tcase_add_test(tc, kinds__send_recv_ring_and_self_every_dtype_and_size);
  tcase_add_test(tc, kinds__barrier_completes_alone_and_between_other_nodes);
  tcase_add_test(tc, kinds__few_megabytes_every_kind_and_form);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
