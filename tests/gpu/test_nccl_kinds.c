/* NCCL plans on device buffers: every communicating node kind x every data
 * type x every reduction x roots x sizes 0, 1, 2, 7 and an odd size of about a
 * million elements x in place and not, against bytes each rank works out on
 * its own; then allreduce and reduce_scatter of more than 256 MB per rank.
 *
 * As in tests/mpi/test_mpi_kinds.c: a rank's input comes from the shared seed
 * and a salt naming the case, the sending rank and the block, so every rank can
 * regenerate every other rank's input and compute the expected result without
 * communicating. Values are small integers, so every reduction is exact and
 * results are compared byte for byte. Every device buffer is set to the poison
 * byte with cudaMemset, then the inputs are copied in; every buffer carries
 * poisoned guards on both sides; after the run the whole allocation, guards
 * included, comes back and is compared with what it must hold: bytes a node
 * must leave alone (recv on non-roots of reduce and gather, the other blocks of
 * in-place reduce_scatter, gather and scatter, anything past the count) show
 * up as differences.
 *
 * The cases of one kind and type share one graph, compiled once and run once,
 * and go round-robin over two NCCL communicators, so a plan has two lanes. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_kernels.h"
#include "gpu_test.h"
#include "kind_cases.h"

enum { GUARD = CG_KC_GUARD };

#define ODD_COUNT ((size_t)1000003)      /* odd and prime */
#define ODD_COUNT_PER_BLOCK ((size_t)250007) /* for kinds whose buffers hold count x ranks */
static const size_t sizes[] = {0, 1, 2, 7, ODD_COUNT};
#define N_SIZES (sizeof sizes / sizeof sizes[0])
/* ops x roots x sizes x forms */
#define MAX_CASES (CG_REDOP_COUNT * 2 * N_SIZES * 2)
#define N_COMMS CG_GPU_SHARED_COMMS

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  return p;
}

static size_t case_count(cg_node_kind_t kind, size_t s) {
  return sizes[s] == ODD_COUNT && cg_kc_scales_with_ranks(kind) ? ODD_COUNT_PER_BLOCK : sizes[s];
}

/* Device buffers: poisoned with cudaMemset, then the inputs (the body of a,
 * where the host image holds inputs and poison) copied in. b holds no input. */
static void setup_device(kcase_t *c) {
  c->da = cg_gpu_alloc(c->a_bytes + 2 * GUARD);
  c->db = cg_gpu_alloc(c->b_bytes + 2 * GUARD);
  if (c->a_bytes) CUDA_OK(cudaMemcpy(c->da + GUARD, c->a + GUARD, c->a_bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize()); /* landed before a plan's stream reads it (pageable copies return early) */
}

/* The device address of a pointer into a host image. */
static void *on_device(const kcase_t *c, const void *host) {
  const char *p = host;
  if (!p) return NULL;
  if (p >= c->a && p < c->a + c->a_bytes + 2 * GUARD) return c->da + (p - c->a);
  ck_assert(p >= c->b && p < c->b + c->b_bytes + 2 * GUARD);
  return c->db + (p - c->b);
}

static void download(kcase_t *c) {
  CUDA_OK(cudaMemcpy(c->a, c->da, c->a_bytes + 2 * GUARD, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(c->b, c->db, c->b_bytes + 2 * GUARD, cudaMemcpyDeviceToHost));
}

static void free_case(kcase_t *c) {
  cg_kc_free(c);
  cg_gpu_free(c->da);
  cg_gpu_free(c->db);
}

static cg_status_t record_case(cg_graph_t *g, cg_comm_t *comm, const kcase_t *c) {
  void *send = on_device(c, c->send), *recv = on_device(c, c->recv);
  if (c->kind == CG_NODE_SEND) {
    cg_status_t st = cg_send(NULL, g, comm, send, c->count, c->dtype, c->root);
    return st != CG_SUCCESS ? st : cg_recv(NULL, g, comm, recv, c->count, c->dtype, c->from);
  }
  cg_test_call_t call = {c->kind, comm, send, recv, c->count, c->dtype, c->op, c->root};
  return cg_test_record(NULL, g, &call);
}

static int add_barrier(cg_graph_t *g, cg_comm_t *comm, char *what, size_t len, const char *label) {
  if (cg_barrier(NULL, g, comm) == CG_SUCCESS) return 1;
  snprintf(what, len, "%s: recording a barrier: %s", label, cg_error_last());
  return 0;
}

/* Records every case into one graph (case i on communicator i % N_COMMS,
 * between barriers, which also checks that barriers run among other nodes),
 * compiles, runs (cg_plan_launch on a stream, or cg_plan_run), compares,
 * frees. */
static void run_cases(kcase_t *cases, size_t n, const char *label, int use_run) {
  char what[700];
  cg_graph_t *g = NULL;
  cg_plan_t *plan = NULL;
  cg_comm_t *comms[N_COMMS];
  for (int i = 0; i < N_COMMS; i++) comms[i] = cg_gpu_shared_comm(i);
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  int ok = add_barrier(g, comms[0], what, sizeof what, label);
  for (size_t i = 0; i < n && ok; i++) {
    cg_kc_setup(&cases[i], cg_gpu_rank(), cg_gpu_size());
    setup_device(&cases[i]);
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

  /* direct: one step per node, so every step is on the test's managed
   * buffers (a bucket's plan-owned device memory is staged: this MPI cannot
   * read it) */
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.fusion = !cg_gpu_direct();
  cg_status_t st = cg_compile(&plan, g, &opts);
  snprintf(what, sizeof what, "%s: cg_compile: %s", label, st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, what);
  cg_graph_destroy(g);
  if (cg_gpu_direct()) {
    /* MPI reduces float16 and bfloat16 with host functions: those steps
     * stay staged; every other kind and type has direct steps */
    cg_node_kind_t k = cases[0].kind;
    int reduces = k == CG_NODE_ALLREDUCE || k == CG_NODE_REDUCE || k == CG_NODE_REDUCE_SCATTER;
    int half = cases[0].dtype == CG_FLOAT16 || cases[0].dtype == CG_BFLOAT16;
    char *dot = cg_gpu_plan_dot(plan);
    int direct = strstr(dot, "direct MPI_") != NULL, staged = strstr(dot, "staged MPI_") != NULL;
    snprintf(what, sizeof what, "%s: direct steps %s, staged steps %s", label, direct ? "present" : "absent",
             staged ? "present" : "absent");
    free(dot);
    ck_assert_all_ranks(reduces && half ? !direct && staged : direct, what);
  }

  CUDA_OK(cudaDeviceSynchronize()); /* the inputs are on the device before any stream reads them */
  if (use_run) {
    st = cg_plan_run(plan);
  } else {
    st = cg_plan_launch(plan, cg_gpu_stream());
    if (st == CG_SUCCESS) CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
  }
  snprintf(what, sizeof what, "%s: running: %s", label, st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, what);

  size_t bad = 0;
  char first[600] = "", why[600];
  for (size_t i = 0; i < n; i++) {
    download(&cases[i]);
    if (!cg_kc_check(&cases[i], why, sizeof why) && bad++ == 0) memcpy(first, why, sizeof first);
  }
  snprintf(what, sizeof what, "%s: %zu of %zu cases differ here; first: %s", label, bad, n, bad ? first : "(none)");
  ck_assert_all_ranks(bad == 0, what);
  cg_plan_destroy(plan);
  for (size_t i = 0; i < n; i++) free_case(&cases[i]);
  cg_kc_forget();
}

/* Every reduction, root, size and form of one kind and type, in record order
 * identical on every rank. */
static size_t build_cases(kcase_t *out, cg_node_kind_t kind, cg_dtype_t dtype) {
  int n = cg_gpu_size(), roots[2] = {0, n - 1};
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
                             .count = case_count(kind, s),
                             .inplace = form,
                             .id = ((uint64_t)kind * CG_DTYPE_COUNT + (uint64_t)dtype) << 16 | k / (size_t)n_forms};
  return k;
}

static void check_kind(cg_node_kind_t kind) {
  kcase_t *cases = calloc(MAX_CASES, sizeof *cases);
  ck_assert_ptr_nonnull(cases);
  for (int d = 0; d < CG_DTYPE_COUNT; d++) {
    memset(cases, 0, MAX_CASES * sizeof *cases);
    size_t n = build_cases(cases, kind, (cg_dtype_t)d);
    char label[64];
    snprintf(label, sizeof label, "%s %s", cg_node_kind_name(kind), cg_dtype_name((cg_dtype_t)d));
    run_cases(cases, n, label, d % 2); /* both ways of running a plan */
  }
  free(cases);
}

START_TEST(nccl_kinds__allreduce_every_dtype_op_size_and_form) { check_kind(CG_NODE_ALLREDUCE); }
END_TEST

START_TEST(nccl_kinds__broadcast_every_dtype_root_size_and_form) { check_kind(CG_NODE_BROADCAST); }
END_TEST

START_TEST(nccl_kinds__reduce_every_dtype_op_root_size_and_form_nonroots_untouched) { check_kind(CG_NODE_REDUCE); }
END_TEST

START_TEST(nccl_kinds__allgather_every_dtype_size_and_form) { check_kind(CG_NODE_ALLGATHER); }
END_TEST

START_TEST(nccl_kinds__reduce_scatter_every_dtype_op_size_in_place_keeps_other_blocks) {
  check_kind(CG_NODE_REDUCE_SCATTER);
}
END_TEST

START_TEST(nccl_kinds__alltoall_every_dtype_and_size) { check_kind(CG_NODE_ALLTOALL); }
END_TEST

START_TEST(nccl_kinds__gather_every_dtype_root_size_and_form_nonroots_untouched) { check_kind(CG_NODE_GATHER); }
END_TEST

START_TEST(nccl_kinds__scatter_every_dtype_root_size_and_form_in_place_keeps_send) { check_kind(CG_NODE_SCATTER); }
END_TEST

/* A ring (to rank+1, from rank-1) and a send to self, per type and size. */
START_TEST(nccl_kinds__send_recv_ring_and_self_every_dtype_and_size) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
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
    run_cases(cases, k, label, d % 2);
  }
}
END_TEST

/* A graph of one barrier; barriers around an allreduce and a ring. (Every
 * graph above also starts, is cut in half and ends with a barrier.) */
START_TEST(nccl_kinds__barrier_alone_and_between_other_nodes) {
  cg_comm_t *comm = cg_gpu_shared_comm(0);
  int me = cg_gpu_rank(), n = cg_gpu_size();
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  cg_graph_destroy(g);
  ck_assert_all_ranks(cg_plan_run(plan) == CG_SUCCESS, "a graph of one barrier runs");
  ck_assert_all_ranks(cg_plan_launch(plan, cg_gpu_stream()) == CG_SUCCESS, "and launches");
  CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
  cg_plan_destroy(plan);

  enum { N = 7 };
  int32_t in[N], sum[N], ring[N];
  for (int i = 0; i < N; i++) in[i] = me * 10 + i;
  int32_t *d_in = cg_gpu_alloc(sizeof in), *d_sum = cg_gpu_alloc(sizeof sum), *d_ring = cg_gpu_alloc(sizeof ring);
  CUDA_OK(cudaMemcpy(d_in, in, sizeof in, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize());
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, d_in, d_sum, N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  ck_assert_cg_ok(cg_send(NULL, g, comm, d_in, N, CG_INT32, (me + 1) % n));
  ck_assert_cg_ok(cg_recv(NULL, g, comm, d_ring, N, CG_INT32, (me + n - 1) % n));
  ck_assert_cg_ok(cg_barrier(NULL, g, comm));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  cg_graph_destroy(g);
  CUDA_OK(cudaDeviceSynchronize());
  ck_assert_all_ranks(cg_plan_launch(plan, cg_gpu_stream()) == CG_SUCCESS, "barriers around an allreduce and a ring");
  CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
  CUDA_OK(cudaMemcpy(sum, d_sum, sizeof sum, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(ring, d_ring, sizeof ring, cudaMemcpyDeviceToHost));
  int ok = 1;
  for (int i = 0; i < N; i++)
    ok &= sum[i] == 10 * n * (n - 1) / 2 + n * i && ring[i] == ((me + n - 1) % n) * 10 + i;
  ck_assert_all_ranks(ok, "the nodes between barriers give the right values");
  cg_plan_destroy(plan);
  cg_gpu_free(d_in);
  cg_gpu_free(d_sum);
  cg_gpu_free(d_ring);
}
END_TEST

/* ---- more than 256 MB per rank: inputs written on the device by a kernel
 * (cg_gpu_value), outputs and guards copied back and compared on the host with
 * sums each rank computes itself; the out-of-place send buffer is checked
 * unchanged on the device. */

#define BIG_COUNT (((size_t)64 << 20) + 1) /* 4-byte elements: 256 MB + 4 bytes, odd */

/* Number of wrong elements of dev[GUARD..] (BIG_COUNT int32 or float32 that
 * must be cg_gpu_value_sum(seed, 0, ranks, first + i)) plus wrong guard bytes. */
static size_t count_wrong(const char *dev, int as_float, uint64_t seed, int ranks, uint64_t first) {
  size_t bytes = BIG_COUNT * 4 + 2 * GUARD, wrong = 0;
  char *host = xmalloc(bytes);
  CUDA_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < GUARD; i++)
    wrong += (unsigned char)host[i] != CG_MPI_POISON || (unsigned char)host[bytes - 1 - i] != CG_MPI_POISON;
  const char *body = host + GUARD;
  for (size_t i = 0; i < BIG_COUNT; i++) {
    int32_t want = cg_gpu_value_sum(seed, 0, ranks, first + i);
    if (as_float) {
      float got;
      memcpy(&got, body + 4 * i, 4);
      wrong += got != (float)want;
    } else {
      int32_t got;
      memcpy(&got, body + 4 * i, 4);
      wrong += got != want;
    }
  }
  free(host);
  return wrong;
}

START_TEST(nccl_kinds__allreduce_in_place_and_reduce_scatter_over_256_mb_per_rank) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  uint64_t seed_ar = cg_test_seed() ^ 0xA11ull, seed_rs = cg_test_seed() ^ 0x55ull;
  cudaStream_t s = cg_gpu_stream();
  size_t body = BIG_COUNT * 4;
  /* allreduce, float32 sum, in place, on communicator 0 */
  char *ar = cg_gpu_alloc(body + 2 * GUARD);
  CUDA_OK(cg_gpu_fill(ar + GUARD, 1, BIG_COUNT, seed_ar, me, 0, s));
  /* reduce_scatter, int32 sum, out of place, on communicator 1: block j of
   * this rank's send holds elements j * BIG_COUNT ... of its value stream */
  char *rs_send = cg_gpu_alloc(body * (size_t)n + 2 * GUARD), *rs_recv = cg_gpu_alloc(body + 2 * GUARD);
  CUDA_OK(cg_gpu_fill(rs_send + GUARD, 0, BIG_COUNT * (size_t)n, seed_rs, me, 0, s));
  CUDA_OK(cudaStreamSynchronize(s));

  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(0), ar + GUARD, ar + GUARD, BIG_COUNT, CG_FLOAT32, CG_SUM));
  ck_assert_cg_ok(cg_reduce_scatter(NULL, g, cg_gpu_shared_comm(1), rs_send + GUARD, rs_recv + GUARD, BIG_COUNT,
                                    CG_INT32, CG_SUM));
  cg_status_t st = cg_compile(&plan, g, NULL);
  ck_assert_all_ranks(st == CG_SUCCESS, "compiling two collectives of 256 MB");
  cg_graph_destroy(g);
  st = cg_plan_launch(plan, s);
  ck_assert_all_ranks(st == CG_SUCCESS, "launching them");
  CUDA_OK(cudaStreamSynchronize(s));

  unsigned long long *d_bad, send_bad = 0;
  CUDA_OK(cudaMalloc((void **)&d_bad, sizeof *d_bad));
  CUDA_OK(cudaMemsetAsync(d_bad, 0, sizeof *d_bad, s));
  CUDA_OK(cg_gpu_check_sum(rs_send + GUARD, 0, BIG_COUNT * (size_t)n, BIG_COUNT * (size_t)n, seed_rs, me, 1, d_bad, s));
  CUDA_OK(cudaMemcpyAsync(&send_bad, d_bad, sizeof send_bad, cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamSynchronize(s));
  size_t ar_bad = count_wrong(ar, 1, seed_ar, n, 0);
  size_t rs_bad = count_wrong(rs_recv, 0, seed_rs, n, (uint64_t)me * BIG_COUNT);
  char what[300];
  snprintf(what, sizeof what,
           "rank %d: allreduce (float32, in place) %zu wrong elements or guard bytes, reduce_scatter (int32) %zu, "
           "its send buffer %llu changed elements", me, ar_bad, rs_bad, send_bad);
  ck_assert_all_ranks(ar_bad == 0 && rs_bad == 0 && send_bad == 0, what);
  cg_plan_destroy(plan);
  cg_gpu_free(d_bad);
  cg_gpu_free(ar);
  cg_gpu_free(rs_send);
  cg_gpu_free(rs_recv);
}
END_TEST

/* The other forms at the same size: allgather in place (int32: this rank's
 * block already sits at its offset of the receive buffer) and broadcast out
 * of place (float32, from the last rank), checked on the device element by
 * element against each source rank's value stream. */
START_TEST(nccl_kinds__allgather_in_place_and_broadcast_over_256_mb_per_rank) {
  int me = cg_gpu_rank(), n = cg_gpu_size(), root = n - 1;
  uint64_t seed_ag = cg_test_seed() ^ 0xA6ull, seed_bc = cg_test_seed() ^ 0xBCull;
  cudaStream_t s = cg_gpu_stream();
  size_t body = BIG_COUNT * 4;
  char *ag = cg_gpu_alloc(body * (size_t)n), *bc_send = cg_gpu_alloc(body), *bc_recv = cg_gpu_alloc(body);
  CUDA_OK(cudaMemsetAsync(ag, CG_MPI_POISON, body * (size_t)n, s));
  CUDA_OK(cudaMemsetAsync(bc_recv, CG_MPI_POISON, body, s));
  CUDA_OK(cg_gpu_fill(ag + (size_t)me * body, 0, BIG_COUNT, seed_ag, me, 0, s));
  CUDA_OK(cg_gpu_fill(bc_send, 1, BIG_COUNT, seed_bc, me, 0, s));
  CUDA_OK(cudaStreamSynchronize(s));

  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allgather(NULL, g, cg_gpu_shared_comm(0), ag + (size_t)me * body, ag, BIG_COUNT, CG_INT32));
  ck_assert_cg_ok(cg_broadcast(NULL, g, cg_gpu_shared_comm(1), bc_send, bc_recv, BIG_COUNT, CG_FLOAT32, root));
  cg_status_t st = cg_compile(&plan, g, NULL);
  ck_assert_all_ranks(st == CG_SUCCESS, "compiling an allgather and a broadcast of 256 MB");
  cg_graph_destroy(g);
  st = cg_plan_launch(plan, s);
  ck_assert_all_ranks(st == CG_SUCCESS, "launching them");

  unsigned long long *d_bad, bad[3] = {0, 0, 0};
  CUDA_OK(cudaMalloc((void **)&d_bad, sizeof bad));
  CUDA_OK(cudaMemsetAsync(d_bad, 0, sizeof bad, s));
  for (int r = 0; r < n; r++)
    CUDA_OK(cg_gpu_check_sum(ag + (size_t)r * body, 0, BIG_COUNT, BIG_COUNT, seed_ag, r, 1, &d_bad[0], s));
  CUDA_OK(cg_gpu_check_sum(bc_recv, 1, BIG_COUNT, BIG_COUNT, seed_bc, root, 1, &d_bad[1], s));
  CUDA_OK(cg_gpu_check_sum(bc_send, 1, BIG_COUNT, BIG_COUNT, seed_bc, me, 1, &d_bad[2], s));
  CUDA_OK(cudaMemcpyAsync(bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamSynchronize(s));
  char what[300];
  snprintf(what, sizeof what,
           "rank %d: allgather (int32, in place) %llu wrong elements, broadcast (float32, from %d) %llu, its send "
           "buffer %llu changed", me, bad[0], root, bad[1], bad[2]);
  ck_assert_all_ranks(bad[0] == 0 && bad[1] == 0 && bad[2] == 0, what);
  cg_plan_destroy(plan);
  cg_gpu_free(d_bad);
  cg_gpu_free(ag);
  cg_gpu_free(bc_send);
  cg_gpu_free(bc_recv);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nccl_kinds");
  TCase *tc = cg_gpu_tcase("nccl_kinds");
  tcase_add_test(tc, nccl_kinds__allreduce_every_dtype_op_size_and_form);
  tcase_add_test(tc, nccl_kinds__broadcast_every_dtype_root_size_and_form);
  tcase_add_test(tc, nccl_kinds__reduce_every_dtype_op_root_size_and_form_nonroots_untouched);
  tcase_add_test(tc, nccl_kinds__allgather_every_dtype_size_and_form);
  tcase_add_test(tc, nccl_kinds__reduce_scatter_every_dtype_op_size_in_place_keeps_other_blocks);
  tcase_add_test(tc, nccl_kinds__alltoall_every_dtype_and_size);
  tcase_add_test(tc, nccl_kinds__gather_every_dtype_root_size_and_form_nonroots_untouched);
  tcase_add_test(tc, nccl_kinds__scatter_every_dtype_root_size_and_form_in_place_keeps_send);
  tcase_add_test(tc, nccl_kinds__send_recv_ring_and_self_every_dtype_and_size);
  tcase_add_test(tc, nccl_kinds__barrier_alone_and_between_other_nodes);
  tcase_add_test(tc, nccl_kinds__allreduce_in_place_and_reduce_scatter_over_256_mb_per_rank);
  tcase_add_test(tc, nccl_kinds__allgather_in_place_and_broadcast_over_256_mb_per_rank);
  suite_add_tcase(s, tc);
  return cg_gpu_test_main(s, "test_nccl_kinds");
}
