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

enum { GUARD = 16 }; /* a multiple of every element size, so bodies stay aligned */

#define ODD_COUNT ((size_t)1000003)      /* odd and prime */
#define ODD_COUNT_PER_BLOCK ((size_t)250007) /* for kinds whose buffers hold count x ranks */
static const size_t sizes[] = {0, 1, 2, 7, ODD_COUNT};
#define N_SIZES (sizeof sizes / sizeof sizes[0])
/* ops x roots x sizes x forms */
#define MAX_CASES (CG_REDOP_COUNT * 2 * N_SIZES * 2)
#define N_COMMS CG_GPU_SHARED_COMMS

typedef struct kcase {
  cg_node_kind_t kind; /* CG_NODE_SEND stands for a send and its matching receive */
  cg_dtype_t dtype;
  cg_redop_t op; /* also picks the value range for kinds without a reduction */
  int root;      /* root; for send/recv the peer sent to */
  int from;      /* send/recv: the peer received from */
  size_t count;
  int inplace;
  uint64_t id;             /* part of the input salt: one per case, its two forms share it */
  size_t a_bytes, b_bytes; /* a: send buffer, or the whole buffer in place; b: recv */
  char *a, *b;             /* host images with GUARD bytes on both sides: inputs, then results */
  char *da, *db;           /* the device allocations they mirror */
  char *want_a, *want_b;   /* what they must hold after the run, guards included */
  const void *send;        /* as recorded, in the host images (translated to the device) */
  void *recv;
} kcase_t;

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  return p;
}

static char *poisoned(size_t bytes) {
  char *p = xmalloc(bytes + 2 * GUARD);
  memset(p, CG_MPI_POISON, bytes + 2 * GUARD);
  return p;
}

static int has_inplace_form(cg_node_kind_t k) { return k != CG_NODE_ALLTOALL && k != CG_NODE_SEND; }

/* Kinds whose count is per block, so buffers hold count x ranks elements. */
static int scales_with_ranks(cg_node_kind_t k) {
  return k == CG_NODE_ALLGATHER || k == CG_NODE_REDUCE_SCATTER || k == CG_NODE_ALLTOALL || k == CG_NODE_GATHER ||
         k == CG_NODE_SCATTER;
}

static size_t case_count(cg_node_kind_t kind, size_t s) {
  return sizes[s] == ODD_COUNT && scales_with_ranks(kind) ? ODD_COUNT_PER_BLOCK : sizes[s];
}

/* The two forms of a case share their inputs: the blocks of the current case
 * are kept for its other form. */
enum { REDUCED = 0xFFF }; /* sender field of a reduced block */
static struct {
  uint64_t id; /* case they belong to */
  uint64_t *salt;
  char **data;
  size_t n, cap;
} memo;

static void memo_clear(void) {
  for (size_t i = 0; i < memo.n; i++) free(memo.data[i]);
  free(memo.salt);
  free(memo.data);
  memset(&memo, 0, sizeof memo);
}

/* Rank `sender`'s input for block `block` of case c (count elements), or with
 * sender REDUCED the reduction over all ranks of their inputs for `block`. */
static const char *block_of(const kcase_t *c, int sender, int block) {
  uint64_t salt = c->id << 24 | (uint64_t)sender << 12 | (uint64_t)block;
  if (memo.id != c->id) memo_clear();
  memo.id = c->id;
  for (size_t i = 0; i < memo.n; i++)
    if (memo.salt[i] == salt) return memo.data[i];
  int n = cg_gpu_size();
  size_t cb = c->count * cg_dtype_size(c->dtype);
  char *data = xmalloc(cb);
  if (sender == REDUCED) {
    char *inputs = xmalloc(cb * (size_t)n);
    for (int r = 0; r < n; r++) memcpy(inputs + (size_t)r * cb, block_of(c, r, block), cb);
    cg_ref_reduce(data, inputs, n, c->count, c->dtype, c->op);
    free(inputs);
  } else {
    cg_mpi_test_fill(data, c->count, c->dtype, c->op, n, cg_test_seed(), salt);
  }
  if (memo.n == memo.cap) {
    memo.cap = memo.cap ? 2 * memo.cap : 16;
    memo.salt = realloc(memo.salt, memo.cap * sizeof *memo.salt);
    memo.data = realloc(memo.data, memo.cap * sizeof *memo.data);
    ck_assert(memo.salt && memo.data);
  }
  memo.salt[memo.n] = salt;
  memo.data[memo.n++] = data;
  return data;
}

static void put_input(void *dst, const kcase_t *c, int sender, int block) {
  memcpy(dst, block_of(c, sender, block), c->count * cg_dtype_size(c->dtype));
}

static void put_reduced(void *dst, const kcase_t *c, int block) {
  memcpy(dst, block_of(c, REDUCED, block), c->count * cg_dtype_size(c->dtype));
}

/* Bytes of a and b this rank needs: only what the kind uses on this rank, so
 * the guards sit right where a wrong length would write. */
static void buffer_sizes(const kcase_t *c, size_t *a, size_t *b) {
  int n = cg_gpu_size(), is_root = cg_gpu_rank() == c->root, ip = c->inplace;
  size_t cb = c->count * cg_dtype_size(c->dtype), all = cb * (size_t)n;
  switch (c->kind) {
    case CG_NODE_ALLREDUCE:
    case CG_NODE_REDUCE: *a = cb, *b = ip ? 0 : cb; break;
    case CG_NODE_BROADCAST: *a = ip || is_root ? cb : 0, *b = ip ? 0 : cb; break;
    case CG_NODE_ALLGATHER: *a = ip ? all : cb, *b = ip ? 0 : all; break;
    case CG_NODE_REDUCE_SCATTER: *a = all, *b = ip ? 0 : cb; break;
    case CG_NODE_ALLTOALL: *a = all, *b = all; break;
    case CG_NODE_GATHER: *a = ip && is_root ? all : cb, *b = ip ? 0 : all; break;
    case CG_NODE_SCATTER: *a = is_root ? all : 0, *b = ip && is_root ? 0 : cb; break;
    default: *a = cb, *b = cb; break; /* send/recv */
  }
}

/* Writes this rank's inputs into the host image a, the expected contents
 * after the run into want_a and want_b, and the pointers to record. */
static void setup_host(kcase_t *c) {
  int me = cg_gpu_rank(), n = cg_gpu_size(), root = c->root, is_root = me == root;
  size_t cb = c->count * cg_dtype_size(c->dtype);
  buffer_sizes(c, &c->a_bytes, &c->b_bytes);
  c->a = poisoned(c->a_bytes);
  c->want_a = poisoned(c->a_bytes);
  c->b = poisoned(c->b_bytes);
  c->want_b = poisoned(c->b_bytes);
  char *a = c->a + GUARD, *wa = c->want_a + GUARD, *b = c->b + GUARD, *wb = c->want_b + GUARD;
  switch (c->kind) {
    case CG_NODE_ALLREDUCE:
      put_input(a, c, me, 0);
      if (!c->inplace) memcpy(wa, a, cb);
      put_reduced(c->inplace ? wa : wb, c, 0);
      c->send = a;
      c->recv = c->inplace ? a : b;
      break;
    case CG_NODE_REDUCE: /* in place every rank passes send == recv; only the root's buffer changes */
      put_input(a, c, me, 0);
      memcpy(wa, a, cb);
      if (is_root) put_reduced(c->inplace ? wa : wb, c, 0);
      c->send = a;
      c->recv = c->inplace ? a : b;
      break;
    case CG_NODE_BROADCAST:
      if (is_root) put_input(a, c, me, 0);
      if (c->inplace) {
        put_input(wa, c, root, 0);
        c->send = c->recv = a;
      } else {
        memcpy(wa, a, c->a_bytes);
        put_input(wb, c, root, 0);
        c->send = is_root ? a : NULL; /* unused off the root: may be NULL */
        c->recv = b;
      }
      break;
    case CG_NODE_ALLGATHER:
      for (int r = 0; r < n; r++) put_input((c->inplace ? wa : wb) + (size_t)r * cb, c, r, 0);
      if (c->inplace) {
        put_input(a + (size_t)me * cb, c, me, 0);
        c->send = a + (size_t)me * cb;
        c->recv = a;
      } else {
        put_input(a, c, me, 0);
        memcpy(wa, a, cb);
        c->send = a;
        c->recv = b;
      }
      break;
    case CG_NODE_REDUCE_SCATTER: /* in place only this rank's block may change */
      for (int j = 0; j < n; j++) put_input(a + (size_t)j * cb, c, me, j);
      memcpy(wa, a, (size_t)n * cb);
      put_reduced(c->inplace ? wa + (size_t)me * cb : wb, c, me);
      c->send = a;
      c->recv = c->inplace ? a + (size_t)me * cb : b;
      break;
    case CG_NODE_ALLTOALL:
      for (int j = 0; j < n; j++) put_input(a + (size_t)j * cb, c, me, j);
      memcpy(wa, a, (size_t)n * cb);
      for (int r = 0; r < n; r++) put_input(wb + (size_t)r * cb, c, r, me);
      c->send = a;
      c->recv = b;
      break;
    case CG_NODE_GATHER:
      if (c->inplace && is_root) {
        put_input(a + (size_t)root * cb, c, me, 0);
        for (int r = 0; r < n; r++) put_input(wa + (size_t)r * cb, c, r, 0);
        c->send = a + (size_t)root * cb;
        c->recv = a;
      } else {
        put_input(a, c, me, 0);
        memcpy(wa, a, cb);
        if (is_root)
          for (int r = 0; r < n; r++) put_input(wb + (size_t)r * cb, c, r, 0);
        c->send = a;
        c->recv = c->inplace ? NULL : b; /* out of place a non-root's recv must stay poisoned */
      }
      break;
    case CG_NODE_SCATTER:
      if (is_root) {
        for (int j = 0; j < n; j++) put_input(a + (size_t)j * cb, c, me, j);
        memcpy(wa, a, (size_t)n * cb);
      }
      if (c->inplace && is_root) {
        c->send = a;
        c->recv = a + (size_t)root * cb;
      } else {
        put_input(wb, c, root, me);
        c->send = is_root ? a : NULL;
        c->recv = b;
      }
      break;
    default: /* send to c->root, receive from c->from */
      put_input(a, c, me, 0);
      memcpy(wa, a, cb);
      put_input(wb, c, c->from, 0);
      c->send = a;
      c->recv = b;
      break;
  }
  if (c->count == 0 && !c->inplace) c->send = c->recv = NULL; /* zero bytes: NULL is valid */
}

/* Device buffers: poisoned with cudaMemset, then the inputs (the body of a,
 * where the host image holds inputs and poison) copied in. b holds no input. */
static void setup_device(kcase_t *c) {
  c->da = cg_gpu_alloc(c->a_bytes + 2 * GUARD);
  c->db = cg_gpu_alloc(c->b_bytes + 2 * GUARD);
  if (c->a_bytes) CUDA_OK(cudaMemcpy(c->da + GUARD, c->a + GUARD, c->a_bytes, cudaMemcpyHostToDevice));
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
  free(c->a);
  free(c->b);
  free(c->want_a);
  free(c->want_b);
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

static void describe(char *out, size_t len, const kcase_t *c) {
  char extra[64] = "";
  if (c->kind == CG_NODE_SEND)
    snprintf(extra, sizeof extra, " to %d from %d", c->root, c->from);
  else if (cg_test_kind_has_op(c->kind) && cg_test_kind_is_rooted(c->kind))
    snprintf(extra, sizeof extra, " %s root %d", cg_redop_name(c->op), c->root);
  else if (cg_test_kind_has_op(c->kind))
    snprintf(extra, sizeof extra, " %s", cg_redop_name(c->op));
  else if (cg_test_kind_is_rooted(c->kind))
    snprintf(extra, sizeof extra, " root %d", c->root);
  snprintf(out, len, "%s %s%s count %zu %s (rank %d of %d)",
           c->kind == CG_NODE_SEND ? "send/recv" : cg_node_kind_name(c->kind), cg_dtype_name(c->dtype), extra,
           c->count, c->inplace ? "in place" : "out of place", cg_gpu_rank(), cg_gpu_size());
}

/* 1 if both buffers hold exactly the expected bytes; otherwise `why` names the
 * case and the first wrong byte (offset from the buffer start; negative or past
 * its length means a guard). */
static int check_case(const kcase_t *c, char *why, size_t len) {
  const char *names[2] = {c->inplace ? "buffer" : "send", "recv"};
  const char *got[2] = {c->a, c->b}, *want[2] = {c->want_a, c->want_b};
  size_t bytes[2] = {c->a_bytes, c->b_bytes};
  for (int k = 0; k < 2; k++) {
    size_t total = bytes[k] + 2 * GUARD;
    if (!memcmp(got[k], want[k], total)) continue;
    size_t i = 0, n_diff = 0;
    while (got[k][i] == want[k][i]) i++;
    for (size_t j = i; j < total; j++) n_diff += got[k][j] != want[k][j];
    char what[200];
    describe(what, sizeof what, c);
    snprintf(why, len, "%s: %s byte %td of %zu is 0x%02x, expected 0x%02x (%zu bytes differ)", what, names[k],
             (ptrdiff_t)i - GUARD, bytes[k], (unsigned char)got[k][i], (unsigned char)want[k][i], n_diff);
    return 0;
  }
  return 1;
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
    setup_host(&cases[i]);
    setup_device(&cases[i]);
    if (record_case(g, comms[i % N_COMMS], &cases[i]) != CG_SUCCESS) {
      char desc[200];
      describe(desc, sizeof desc, &cases[i]);
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
    if (!check_case(&cases[i], why, sizeof why) && bad++ == 0) memcpy(first, why, sizeof first);
  }
  snprintf(what, sizeof what, "%s: %zu of %zu cases differ here; first: %s", label, bad, n, bad ? first : "(none)");
  ck_assert_all_ranks(bad == 0, what);
  cg_plan_destroy(plan);
  for (size_t i = 0; i < n; i++) free_case(&cases[i]);
  memo_clear();
}

/* Every reduction, root, size and form of one kind and type, in record order
 * identical on every rank. */
static size_t build_cases(kcase_t *out, cg_node_kind_t kind, cg_dtype_t dtype) {
  int n = cg_gpu_size(), roots[2] = {0, n - 1};
  int n_ops = cg_test_kind_has_op(kind) ? CG_REDOP_COUNT : 1;
  int n_roots = cg_test_kind_is_rooted(kind) ? 2 : 1, n_forms = has_inplace_form(kind) ? 2 : 1;
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
