/* The cross-rank check on real ranks. Every injected difference between the
 * ranks' programs must make cg_compile fail on every rank with CG_ERR_MISMATCH
 * and one message, the same on all ranks, that names the first differing node
 * (index and name) and the ranks that differ; nobody may hang. Differences the
 * model allows (rank-specific point-to-point, communicators first used in a
 * different order) must compile and run, and a failed check must leave
 * nothing behind on the communicator.
 *
 * The seed is shared, so every rank draws the same base program and the same
 * injection plan; only the chosen rank then records the deviating version.
 * The "comms" case is in test_mpi_mismatch_comms.c; what it shares with this
 * file is declared in test_mpi_mismatch.h. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_mpi_mismatch.h"

#define MAX_OPS 24

cg_comm_t *mm_world(void) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  return c;
}

/* One communicator over all ranks for every test, from a checked fixture: its
 * teardown also runs after a failed test, so nothing leaks, and each test
 * starts on a communicator that earlier (failed) checks have used. */
cg_comm_t *mm_comm_w;
static void comm_setup(void) { mm_comm_w = mm_world(); }
static void comm_teardown(void) {
  cg_comm_destroy(mm_comm_w);
  mm_comm_w = NULL;
}

/* ---- buffers: every node gets its own, sized exactly for its layout, so
 * ASan would catch the library touching bytes a node does not own */

typedef struct pool {
  void *p[4 * MAX_OPS];
  int n;
} pool_t;

static void *pool_alloc(pool_t *pl, size_t bytes) {
  if (!bytes) return NULL;
  ck_assert_int_lt(pl->n, 4 * MAX_OPS);
  void *m = calloc(1, bytes);
  ck_assert_ptr_nonnull(m);
  pl->p[pl->n++] = m;
  return m;
}

static void pool_free(pool_t *pl) {
  for (int i = 0; i < pl->n; i++) free(pl->p[i]);
  pl->n = 0;
}

cg_graph_t *mm_new_graph(void) {
  cg_graph_t *g = NULL;
  cg_graph_opts_t opts = CG_GRAPH_OPTS_INIT;
  opts.name = "iteration";
  ck_assert_cg_ok(cg_graph_create(&g, &opts));
  return g;
}

/* Asserts that a recording call succeeded and names its node. */
void mm_named(cg_graph_t *g, cg_status_t recorded, const cg_node_t *node, const char *name) {
  ck_assert_msg(recorded == CG_SUCCESS, "recording '%s': %s", name, cg_error_last());
  ck_assert_cg_ok(cg_node_name(g, *node, name));
}

/* ---- collective programs */

typedef struct op_spec {
  cg_node_kind_t kind;
  size_t count;
  cg_dtype_t dtype;
  cg_redop_t op;
  int root;
  int id;          /* position in the base program, named "op.<id>"; -1: the injected extra node */
  int host_before; /* a host function precedes it, so node indices differ from positions */
} op_spec_t;

typedef struct program {
  op_spec_t ops[MAX_OPS];
  int n;
} program_t;

static const cg_node_kind_t collective_kinds[] = {
    CG_NODE_ALLREDUCE, CG_NODE_BROADCAST, CG_NODE_REDUCE,  CG_NODE_ALLGATHER, CG_NODE_REDUCE_SCATTER,
    CG_NODE_ALLTOALL,  CG_NODE_GATHER,    CG_NODE_SCATTER, CG_NODE_BARRIER};
#define N_COLLECTIVE_KINDS (sizeof collective_kinds / sizeof collective_kinds[0])

/* Types and reductions whose results do not depend on the order of the
 * reduction, for the programs that also run. */
static const cg_dtype_t exact_dtypes[] = {CG_INT32, CG_INT64, CG_FLOAT32, CG_FLOAT64};
static const cg_redop_t exact_ops[] = {CG_SUM, CG_MIN, CG_MAX};

/* Fields a kind does not take are fixed, so comparing specs compares what the
 * check compares. */
static op_spec_t random_op(int size, int id, int runnable) {
  op_spec_t o = {.kind = collective_kinds[cg_test_below(N_COLLECTIVE_KINDS)], .dtype = CG_UINT8, .op = CG_SUM,
                 .root = -1, .id = id, .host_before = cg_test_below(3) == 0};
  if (o.kind == CG_NODE_BARRIER) return o;
  o.count = 2 + cg_test_below(40);
  o.dtype = runnable ? exact_dtypes[cg_test_below(4)] : (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
  if (cg_test_kind_has_op(o.kind))
    o.op = runnable ? exact_ops[cg_test_below(3)] : (cg_redop_t)cg_test_below(CG_REDOP_COUNT);
  if (cg_test_kind_is_rooted(o.kind)) o.root = (int)cg_test_below((uint64_t)size);
  return o;
}

static void random_program(program_t *p, int size, int runnable) {
  p->n = 3 + (int)cg_test_below(10);
  for (int i = 0; i < p->n; i++) p->ops[i] = random_op(size, i, runnable);
}

static int same_shape(const op_spec_t *a, const op_spec_t *b) {
  if (a->kind != b->kind) return 0;
  return a->kind == CG_NODE_BARRIER ||
         (a->count == b->count && a->dtype == b->dtype && a->op == b->op && a->root == b->root);
}

/* Position of the first operation where the programs differ; -1 if none. */
static int first_difference(const program_t *a, const program_t *b) {
  for (int k = 0;; k++) {
    if (k >= a->n || k >= b->n) return a->n == b->n ? -1 : k;
    if (!same_shape(&a->ops[k], &b->ops[k])) return k;
  }
}

/* Node index of operation k: operations and the host functions before them. */
static int node_index(const program_t *p, int k) {
  int index = k;
  for (int j = 0; j <= k; j++) index += p->ops[j].host_before;
  return index;
}

static void op_name(char *buf, size_t size, const op_spec_t *o) {
  if (o->id < 0) snprintf(buf, size, "extra");
  else snprintf(buf, size, "op.%d", o->id);
}

/* Records p on this rank; with fill, the send buffers get test data. The recv
 * buffers and their sizes come back for comparing runs. */
static cg_graph_t *record_program(cg_comm_t *c, const program_t *p, pool_t *pl, void **recv, size_t *recv_bytes,
                                  int fill) {
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  cg_graph_t *g = mm_new_graph();
  for (int k = 0; k < p->n; k++) {
    const op_spec_t *o = &p->ops[k];
    if (o->host_before) ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL));
    size_t es = cg_dtype_size(o->dtype);
    size_t send_elems = cg_test_send_elems(o->kind, o->count, size, rank, o->root);
    size_t recv_elems = cg_test_recv_elems(o->kind, o->count, size, rank, o->root);
    cg_test_call_t call = {o->kind, c, pool_alloc(pl, send_elems * es), pool_alloc(pl, recv_elems * es),
                           o->count, o->dtype, o->op, o->root};
    if (fill && send_elems)
      cg_mpi_test_fill((void *)call.send, send_elems, o->dtype, o->op, size, cg_test_seed(),
                       (uint64_t)k * 64 + (uint64_t)rank);
    if (recv) recv[k] = call.recv;
    if (recv_bytes) recv_bytes[k] = recv_elems * es;
    cg_node_t node;
    char name[32];
    op_name(name, sizeof name, o);
    mm_named(g, cg_test_record(&node, g, &call), &node, name);
    ck_assert_int_eq((int)node.index, node_index(p, k)); /* the expectations rely on it */
  }
  return g;
}

/* ---- what every rank must see */

/* The message must name node #index 'name' (as "#index 'name'"). */
void mm_expect_node(expect_t *e, int index, const char *name) {
  ck_assert_int_lt(e->n_must, 4);
  snprintf(e->must[e->n_must++], sizeof e->must[0], "#%d '%s'", index, name);
}

/* Members of the rank list ("rank 2", "ranks 0,1,3") in msg that holds r; 0 if
 * none does. */
static int rank_group_size(const char *msg, int r) {
  for (const char *p = strstr(msg, "rank"); p; p = strstr(p + 4, "rank")) {
    const char *q = p + 4;
    if (*q == 's') q++;
    if (*q++ != ' ') continue;
    int members = 0, found = 0;
    while (isdigit((unsigned char)*q)) {
      char *end;
      long v = strtol(q, &end, 10);
      members++;
      found |= v == r;
      q = end;
      if (*q != ',' || !isdigit((unsigned char)q[1])) break;
      q++;
    }
    if (found) return members;
  }
  return 0;
}

static uint64_t text_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static void expect_same_on_all_ranks(const char *text, const char *label) {
  int size = cg_mpi_size();
  unsigned long long mine[2] = {text_hash(text), strlen(text)};
  unsigned long long *all = malloc(2 * (size_t)size * sizeof *all);
  ck_assert_ptr_nonnull(all);
  MPI_Allgather(mine, 2, MPI_UNSIGNED_LONG_LONG, all, 2, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD);
  int ok = 1;
  for (int r = 0; r < size; r++) ok &= all[2 * r] == all[0] && all[2 * r + 1] == all[1];
  free(all);
  if (!ok) fprintf(stderr, "rank %d: %s: this rank's message: %s\n", cg_mpi_rank(), label, text);
  char what[256];
  snprintf(what, sizeof what, "%s: the message is the same on every rank", label);
  ck_assert_all_ranks(ok, what);
}

/* Asserts on every rank that st is CG_SUCCESS everywhere; ranks where it is
 * not print why. */
void mm_expect_ok_all(cg_status_t st, const char *what) {
  if (st != CG_SUCCESS) fprintf(stderr, "rank %d: %s: %s\n", cg_mpi_rank(), what, cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, what);
}

/* Set CG_MISMATCH_PRINT=1 to see the messages (rank 0 prints one per case). */
static void maybe_print(const char *label, const char *msg) {
  const char *env = getenv("CG_MISMATCH_PRINT");
  if (cg_mpi_rank() == 0 && env && *env == '1') printf("[%d ranks] %s:\n  %s\n", cg_mpi_size(), label, msg);
}

outcome_t mm_compile_outcome(cg_graph_t *g) {
  outcome_t o;
  cg_plan_t *plan = NULL;
  o.status = cg_compile(&plan, g, NULL);
  o.got_plan = plan != NULL;
  snprintf(o.msg, sizeof o.msg, "%s", cg_error_last());
  cg_plan_destroy(plan); /* never run: on success the ranks' plans may not match */
  return o;
}

void mm_expect_mismatch(const outcome_t *o, const expect_t *e, const char *label) {
  int size = cg_mpi_size();
  const char *msg = o->msg;
  char why[400] = "";
  if (o->status != CG_ERR_MISMATCH)
    snprintf(why, sizeof why, "status %s, expected CG_ERR_MISMATCH", cg_status_string(o->status));
  else if (o->got_plan)
    snprintf(why, sizeof why, "a failed compile returned a plan");
  for (int i = 0; !why[0] && i < e->n_must; i++)
    if (!strstr(msg, e->must[i])) snprintf(why, sizeof why, "the message lacks \"%s\"", e->must[i]);
  for (int r = 0; !why[0] && e->alone != -1 && r < size; r++) {
    int expected = e->alone == ALL_ALONE || r == e->alone ? 1 : size - 1;
    if (rank_group_size(msg, r) != expected)
      snprintf(why, sizeof why, "rank %d is not named in a group of %d", r, expected);
  }
  for (int i = 0; !why[0] && i < 2; i++)
    if (e->mention[i] >= 0 && !rank_group_size(msg, e->mention[i]))
      snprintf(why, sizeof why, "rank %d is not named", e->mention[i]);
  if (why[0]) fprintf(stderr, "rank %d: %s: %s; message: %s\n", cg_mpi_rank(), label, why, msg);
  char what[300];
  snprintf(what, sizeof what, "%s: CG_ERR_MISMATCH naming the node and ranks", label);
  ck_assert_all_ranks(!why[0], what);
  expect_same_on_all_ranks(msg, label);
  maybe_print(label, msg);
}

/* ---- injected differences in a random sequence of collectives */

typedef enum injection {
  INJ_SWAP, INJ_COUNT_PLUS, INJ_COUNT_MINUS, INJ_DTYPE, INJ_REDOP, INJ_ROOT,
  INJ_MISSING, INJ_MISSING_LAST, INJ_EXTRA, INJ_EXTRA_END
} injection_t;

/* Makes base fit the injection at a random position (the same on every rank:
 * the draws are shared), then derives the deviating program. */
static void inject(program_t *base, program_t *dev, injection_t what, int size) {
  int n = base->n, i = (int)cg_test_below((uint64_t)n);
  op_spec_t *o = &base->ops[i];
  switch (what) {
    case INJ_SWAP:
      i = (int)cg_test_below((uint64_t)n - 1);
      while (same_shape(&base->ops[i], &base->ops[i + 1])) base->ops[i + 1] = random_op(size, i + 1, 0);
      break;
    case INJ_COUNT_PLUS: case INJ_COUNT_MINUS: case INJ_DTYPE:
      while (o->kind == CG_NODE_BARRIER) *o = random_op(size, i, 0);
      break;
    case INJ_REDOP:
      while (!cg_test_kind_has_op(o->kind)) *o = random_op(size, i, 0);
      break;
    case INJ_ROOT:
      while (!cg_test_kind_is_rooted(o->kind)) *o = random_op(size, i, 0);
      break;
    default: break;
  }
  *dev = *base;
  op_spec_t *d = &dev->ops[i];
  switch (what) {
    case INJ_SWAP: {
      op_spec_t t = dev->ops[i];
      dev->ops[i] = dev->ops[i + 1];
      dev->ops[i + 1] = t;
      break;
    }
    case INJ_COUNT_PLUS: d->count++; break;
    case INJ_COUNT_MINUS: d->count--; break;
    case INJ_DTYPE: d->dtype = (cg_dtype_t)((d->dtype + 1 + cg_test_below(CG_DTYPE_COUNT - 1)) % CG_DTYPE_COUNT); break;
    case INJ_REDOP: d->op = (cg_redop_t)((d->op + 1 + cg_test_below(CG_REDOP_COUNT - 1)) % CG_REDOP_COUNT); break;
    case INJ_ROOT: d->root = (d->root + 1 + (int)cg_test_below((uint64_t)size - 1)) % size; break;
    case INJ_MISSING: case INJ_MISSING_LAST:
      if (what == INJ_MISSING_LAST) i = n - 1;
      memmove(&dev->ops[i], &dev->ops[i + 1], (size_t)(n - 1 - i) * sizeof dev->ops[0]);
      dev->n--;
      break;
    case INJ_EXTRA: case INJ_EXTRA_END:
      i = what == INJ_EXTRA_END ? n : (int)cg_test_below((uint64_t)n + 1);
      memmove(&dev->ops[i + 1], &dev->ops[i], (size_t)(n - i) * sizeof dev->ops[0]);
      dev->ops[i] = random_op(size, -1, 0);
      dev->n++;
      break;
  }
}

/* The ranks that deviate in turn: the first, the last and, with more than two,
 * one in the middle. */
static int deviants(int out[3], int size) {
  out[0] = 0;
  out[1] = size - 1;
  if (size <= 2) return 2;
  out[2] = 1 + (int)cg_test_below((uint64_t)size - 2);
  return 3;
}

static void check_injection(injection_t what, const char *test) {
  cg_test_reseed(1000 + (uint64_t)what);
  int rank = cg_mpi_rank(), size = cg_mpi_size(), devs[3];
  int n_devs = deviants(devs, size);
  for (int di = 0; di < n_devs; di++)
    for (int trial = 0; trial < 3; trial++) {
      int deviant = devs[di];
      program_t base, dev;
      random_program(&base, size, 0);
      inject(&base, &dev, what, size);
      pool_t pl = {.n = 0};
      cg_graph_t *g = record_program(mm_comm_w, rank == deviant ? &dev : &base, &pl, NULL, NULL, 0);
      outcome_t o = mm_compile_outcome(g);
      cg_graph_destroy(g);
      pool_free(&pl);
      int k = first_difference(&base, &dev);
      ck_assert_int_ge(k, 0); /* every injection changes the program */
      expect_t e = {.n_must = 0, .alone = deviant, .mention = {-1, -1}};
      char name[32], label[160];
      snprintf(e.must[e.n_must++], sizeof e.must[0], "collective #%d ", k);
      if (k < base.n) {
        op_name(name, sizeof name, &base.ops[k]);
        mm_expect_node(&e, node_index(&base, k), name);
      }
      if (k < dev.n) {
        op_name(name, sizeof name, &dev.ops[k]);
        mm_expect_node(&e, node_index(&dev, k), name);
      } else {
        snprintf(e.must[e.n_must++], sizeof e.must[0], "nothing");
      }
      if (k >= base.n) snprintf(e.must[e.n_must++], sizeof e.must[0], "nothing");
      snprintf(label, sizeof label, "%s: rank %d deviates, trial %d (seed %llu)", test, deviant, trial,
               (unsigned long long)cg_test_seed());
      mm_expect_mismatch(&o, &e, label);
    }
}

ONE_CALL_TEST(mismatch__swapped_adjacent_nodes, check_injection(INJ_SWAP, "swapped adjacent nodes"))
ONE_CALL_TEST(mismatch__count_plus_one, check_injection(INJ_COUNT_PLUS, "count + 1"))
ONE_CALL_TEST(mismatch__count_minus_one, check_injection(INJ_COUNT_MINUS, "count - 1"))
ONE_CALL_TEST(mismatch__other_dtype, check_injection(INJ_DTYPE, "other dtype"))
ONE_CALL_TEST(mismatch__other_reduction, check_injection(INJ_REDOP, "other reduction"))
ONE_CALL_TEST(mismatch__other_root, check_injection(INJ_ROOT, "other root"))
ONE_CALL_TEST(mismatch__missing_node, check_injection(INJ_MISSING, "missing node"))
ONE_CALL_TEST(mismatch__missing_last_node, check_injection(INJ_MISSING_LAST, "missing last node"))
ONE_CALL_TEST(mismatch__extra_node, check_injection(INJ_EXTRA, "extra node"))
ONE_CALL_TEST(mismatch__extra_node_at_end, check_injection(INJ_EXTRA_END, "extra node at the end"))

/* Every rank has its own count at one position: each is named alone. */
START_TEST(mismatch__every_rank_differs) {
  cg_test_reseed(1100);
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  program_t p;
  random_program(&p, size, 0);
  int k = (int)cg_test_below((uint64_t)p.n);
  while (p.ops[k].kind == CG_NODE_BARRIER) p.ops[k] = random_op(size, k, 0);
  p.ops[k].count += (size_t)rank;
  pool_t pl = {.n = 0};
  cg_graph_t *g = record_program(mm_comm_w, &p, &pl, NULL, NULL, 0);
  outcome_t o = mm_compile_outcome(g);
  cg_graph_destroy(g);
  pool_free(&pl);
  expect_t e = {.n_must = 0, .alone = ALL_ALONE, .mention = {-1, -1}};
  char name[32];
  op_name(name, sizeof name, &p.ops[k]);
  mm_expect_node(&e, node_index(&p, k), name);
  mm_expect_mismatch(&o, &e, "every rank has its own count");
}
END_TEST

/* ---- point to point: a ring between two allreduces. Node indices: 0 coll.a,
 * 1 send, 2 recv, 3 coll.b, unless the variant moves or adds a node. */

typedef enum p2p_variant {
  P2P_EQUAL,
  P2P_SEND_COUNT, /* rank d sends one element more */
  P2P_RECV_COUNT, /* d's receiver expects one element less */
  P2P_SEND_DTYPE, /* rank d sends float32 instead of int32 (same bytes) */
  P2P_RECV_DTYPE, /* d's receiver expects uint32 */
  P2P_GROUP,      /* rank d sends after coll.b, its receiver receives before it */
  P2P_EXTRA_SEND, /* rank d also sends to q, which posts no receive */
  P2P_EXTRA_RECV, /* rank q also receives from d, which sends nothing */
  P2P_SELF        /* rank d sends 5 elements to itself and receives 4 */
} p2p_variant_t;

static cg_graph_t *record_ring(cg_comm_t *c, pool_t *pl, p2p_variant_t v, int d, int q) {
  int rank = cg_mpi_rank(), size = cg_mpi_size(), next = (rank + 1) % size, prev = (rank + size - 1) % size;
  char name[48];
  cg_node_t node;
  cg_graph_t *g = mm_new_graph();
  mm_named(g, cg_allreduce(&node, g, c, pool_alloc(pl, 16), pool_alloc(pl, 16), 4, CG_INT32, CG_SUM), &node, "coll.a");
  size_t send_count = 3 + (size_t)rank, recv_count = 3 + (size_t)prev;
  cg_dtype_t send_dtype = CG_INT32, recv_dtype = CG_INT32;
  if (rank == d && v == P2P_SEND_COUNT) send_count++;
  if (rank == d && v == P2P_SEND_DTYPE) send_dtype = CG_FLOAT32;
  if (prev == d && v == P2P_RECV_COUNT) recv_count--;
  if (prev == d && v == P2P_RECV_DTYPE) recv_dtype = CG_UINT32;
  int late = rank == d && v == P2P_GROUP;
  void *send_buf = pool_alloc(pl, send_count * 4);
  snprintf(name, sizeof name, "send.%dto%d", rank, next);
  if (!late) mm_named(g, cg_send(&node, g, c, send_buf, send_count, send_dtype, next), &node, name);
  snprintf(name, sizeof name, "recv.%dfrom%d", rank, prev);
  mm_named(g, cg_recv(&node, g, c, pool_alloc(pl, recv_count * 4), recv_count, recv_dtype, prev), &node, name);
  if (rank == d && v == P2P_EXTRA_SEND) {
    mm_named(g, cg_send(&node, g, c, pool_alloc(pl, 28), 7, CG_INT32, q), &node, "lonely");
  }
  if (rank == q && v == P2P_EXTRA_RECV) {
    mm_named(g, cg_recv(&node, g, c, pool_alloc(pl, 28), 7, CG_INT32, d), &node, "waiting");
  }
  if (rank == d && v == P2P_SELF) {
    mm_named(g, cg_send(&node, g, c, pool_alloc(pl, 20), 5, CG_INT32, rank), &node, "self.send");
    mm_named(g, cg_recv(&node, g, c, pool_alloc(pl, 16), 4, CG_INT32, rank), &node, "self.recv");
  }
  mm_named(g, cg_allreduce(&node, g, c, pool_alloc(pl, 16), pool_alloc(pl, 16), 4, CG_INT32, CG_SUM), &node, "coll.b");
  snprintf(name, sizeof name, "send.%dto%d", rank, next);
  if (late) mm_named(g, cg_send(&node, g, c, send_buf, send_count, send_dtype, next), &node, name);
  return g;
}

static void check_p2p(p2p_variant_t v, const char *test) {
  cg_test_reseed(2000 + (uint64_t)v);
  int size = cg_mpi_size(), devs[3];
  int n_devs = deviants(devs, size);
  for (int di = 0; di < n_devs; di++) {
    int d = devs[di], n = (d + 1) % size, q = (d + 1 + (int)cg_test_below((uint64_t)size - 1)) % size;
    pool_t pl = {.n = 0};
    cg_graph_t *g = record_ring(mm_comm_w, &pl, v, d, q);
    outcome_t o = mm_compile_outcome(g);
    cg_graph_destroy(g);
    pool_free(&pl);
    expect_t e = {.n_must = 0, .alone = -1, .mention = {d, v == P2P_EXTRA_SEND || v == P2P_EXTRA_RECV ? q : n}};
    char name[48], label[160];
    if (v == P2P_EXTRA_SEND) {
      mm_expect_node(&e, 3, "lonely");
    } else if (v == P2P_EXTRA_RECV) {
      mm_expect_node(&e, 3, "waiting");
    } else if (v == P2P_SELF) {
      e.mention[1] = d;
      mm_expect_node(&e, 3, "self.send");
      mm_expect_node(&e, 4, "self.recv");
    } else {
      snprintf(name, sizeof name, "send.%dto%d", d, n);
      mm_expect_node(&e, v == P2P_GROUP ? 3 : 1, name);
      snprintf(name, sizeof name, "recv.%dfrom%d", n, d);
      mm_expect_node(&e, 2, name);
    }
    snprintf(label, sizeof label, "%s: rank %d deviates (seed %llu)", test, d, (unsigned long long)cg_test_seed());
    mm_expect_mismatch(&o, &e, label);
  }
}

ONE_CALL_TEST(mismatch__p2p_send_without_receive, check_p2p(P2P_EXTRA_SEND, "send without receive"))
ONE_CALL_TEST(mismatch__p2p_receive_without_send, check_p2p(P2P_EXTRA_RECV, "receive without send"))
ONE_CALL_TEST(mismatch__p2p_send_count, check_p2p(P2P_SEND_COUNT, "send count differs from receive"))
ONE_CALL_TEST(mismatch__p2p_recv_count, check_p2p(P2P_RECV_COUNT, "receive count differs from send"))
ONE_CALL_TEST(mismatch__p2p_send_dtype, check_p2p(P2P_SEND_DTYPE, "send dtype differs (same bytes)"))
ONE_CALL_TEST(mismatch__p2p_recv_dtype, check_p2p(P2P_RECV_DTYPE, "receive dtype differs"))
ONE_CALL_TEST(mismatch__p2p_other_group, check_p2p(P2P_GROUP, "send after a collective, receive before it"))
ONE_CALL_TEST(mismatch__p2p_self_send_count, check_p2p(P2P_SELF, "send to self, count differs from receive"))

/* Point-to-point traffic that differs on every rank but pairs up: a ring with
 * per-sender counts, a fan-out from rank 0, a self-send on the last rank, and
 * a reverse ring of another type after the collective. */
START_TEST(match__rank_specific_p2p_compiles_and_runs) {
  int rank = cg_mpi_rank(), size = cg_mpi_size(), next = (rank + 1) % size, prev = (rank + size - 1) % size;
  pool_t pl = {.n = 0};
  cg_graph_t *g = mm_new_graph();
  int32_t a_in[4], a_out[4];
  for (int i = 0; i < 4; i++) a_in[i] = rank + 1;
  ck_assert_cg_ok(cg_allreduce(NULL, g, mm_comm_w, a_in, a_out, 4, CG_INT32, CG_SUM));
  int32_t *ring_out = pool_alloc(&pl, (3 + (size_t)rank) * 4), *ring_in = pool_alloc(&pl, (3 + (size_t)prev) * 4);
  for (int i = 0; i < 3 + rank; i++) ring_out[i] = rank * 100 + i;
  ck_assert_cg_ok(cg_send(NULL, g, mm_comm_w, ring_out, 3 + (size_t)rank, CG_INT32, next));
  ck_assert_cg_ok(cg_recv(NULL, g, mm_comm_w, ring_in, 3 + (size_t)prev, CG_INT32, prev));
  int32_t *fan = pool_alloc(&pl, 2 * 4 * (size_t)size);
  for (int r = 1; r < size; r++) {
    if (rank == 0) {
      for (int i = 0; i < 2; i++) fan[2 * r + i] = 1000 + 10 * r + i;
      ck_assert_cg_ok(cg_send(NULL, g, mm_comm_w, fan + 2 * r, 2, CG_INT32, r));
    } else if (rank == r) {
      ck_assert_cg_ok(cg_recv(NULL, g, mm_comm_w, fan, 2, CG_INT32, 0));
    }
  }
  int32_t self_out[5], self_in[5] = {0};
  for (int i = 0; i < 5; i++) self_out[i] = 7000 + i;
  if (rank == size - 1) {
    ck_assert_cg_ok(cg_send(NULL, g, mm_comm_w, self_out, 5, CG_INT32, rank));
    ck_assert_cg_ok(cg_recv(NULL, g, mm_comm_w, self_in, 5, CG_INT32, rank));
  }
  int32_t b_in[4] = {1, 1, 1, 1}, b_out[4];
  ck_assert_cg_ok(cg_allreduce(NULL, g, mm_comm_w, b_in, b_out, 4, CG_INT32, CG_SUM));
  double back_out[2] = {rank, rank + 0.5}, back_in[2] = {-1, -1};
  ck_assert_cg_ok(cg_send(NULL, g, mm_comm_w, back_out, 2, CG_FLOAT64, prev));
  ck_assert_cg_ok(cg_recv(NULL, g, mm_comm_w, back_in, 2, CG_FLOAT64, next));

  cg_plan_t *plan = NULL;
  mm_expect_ok_all(cg_compile(&plan, g, NULL), "rank-specific point-to-point compiles");
  mm_expect_ok_all(cg_plan_run(plan), "rank-specific point-to-point runs");
  int ok = a_out[0] == size * (size + 1) / 2 && b_out[3] == size;
  for (int i = 0; i < 3 + prev; i++) ok &= ring_in[i] == prev * 100 + i;
  for (int i = 0; rank > 0 && i < 2; i++) ok &= fan[i] == 1000 + 10 * rank + i;
  for (int i = 0; rank == size - 1 && i < 5; i++) ok &= self_in[i] == 7000 + i;
  ok &= back_in[0] == next && back_in[1] == next + 0.5;
  ck_assert_all_ranks(ok, "rank-specific point-to-point delivers the data");
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  pool_free(&pl);
}
END_TEST

/* ---- options, equal programs, and what a failed check leaves behind */

START_TEST(opts__check_ranks_zero_skips_the_check) {
  cg_test_reseed(3000);
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  program_t base, dev;
  random_program(&base, size, 0);
  inject(&base, &dev, INJ_COUNT_PLUS, size);
  pool_t pl = {.n = 0};
  cg_graph_t *g = record_program(mm_comm_w, rank == size - 1 ? &dev : &base, &pl, NULL, NULL, 0);
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.check_ranks = 0;
  cg_plan_t *plan = NULL;
  mm_expect_ok_all(cg_compile(&plan, g, &opts), "check_ranks = 0 compiles despite the difference");
  ck_assert_all_ranks(plan != NULL, "check_ranks = 0 returns a plan");
  cg_plan_destroy(plan); /* never run: it would not match across ranks */
  /* the same graph with the check on does fail, so the difference was real */
  plan = NULL;
  opts.check_ranks = 1;
  cg_status_t st = cg_compile(&plan, g, &opts);
  ck_assert_all_ranks(st == CG_ERR_MISMATCH && !plan, "check_ranks = 1 reports the same graph");
  cg_graph_destroy(g);
  pool_free(&pl);
}
END_TEST

/* Compiles and runs a random program that is the same on every rank and
 * compares every output with the reference executor. */
static void compile_and_run_equal_program(const char *label) {
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  program_t p;
  random_program(&p, size, 1);
  pool_t pl = {.n = 0};
  void *recv[MAX_OPS];
  size_t bytes[MAX_OPS];
  cg_graph_t *g = record_program(mm_comm_w, &p, &pl, recv, bytes, 1);
  cg_plan_t *plan = NULL;
  mm_expect_ok_all(cg_compile(&plan, g, NULL), label);
  for (int k = 0; k < p.n; k++)
    if (bytes[k]) memset(recv[k], CG_MPI_POISON, bytes[k]);
  mm_expect_ok_all(cg_plan_run(plan), label);
  void *got[MAX_OPS];
  for (int k = 0; k < p.n; k++) {
    got[k] = pool_alloc(&pl, bytes[k]);
    if (bytes[k]) {
      memcpy(got[k], recv[k], bytes[k]);
      memset(recv[k], CG_MPI_POISON, bytes[k]);
    }
  }
  ck_assert_all_ranks(cg_reference_run(g) == CG_SUCCESS, "reference run");
  int ok = 1;
  for (int k = 0; k < p.n; k++)
    if (bytes[k] && memcmp(got[k], recv[k], bytes[k])) {
      fprintf(stderr, "rank %d: %s: node for op.%d differs from the reference\n", rank, label, k);
      ok = 0;
    }
  ck_assert_all_ranks(ok, label);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  pool_free(&pl);
}

START_TEST(match__equal_programs_compile_and_run) {
  cg_test_reseed(4000);
  for (int trial = 0; trial < 4; trial++) compile_and_run_equal_program("equal random program");
}
END_TEST

/* After a failed check: the same graph fails again with the same message (no
 * exchange of the first attempt is still pending), the graph is destroyed, and
 * equal programs compile and run on the same communicator. Once for a
 * collective difference, once for a point-to-point one. */
START_TEST(cleanup__mismatch_leaves_nothing_behind) {
  cg_test_reseed(5000);
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  for (int round = 0; round < 2; round++) {
    program_t base, dev;
    random_program(&base, size, 0);
    inject(&base, &dev, INJ_COUNT_MINUS, size);
    pool_t pl = {.n = 0};
    cg_graph_t *g = round == 0 ? record_program(mm_comm_w, rank == size - 1 ? &dev : &base, &pl, NULL, NULL, 0)
                               : record_ring(mm_comm_w, &pl, P2P_SEND_DTYPE, 0, -1);
    outcome_t first = mm_compile_outcome(g), again = mm_compile_outcome(g);
    cg_graph_destroy(g);
    pool_free(&pl);
    ck_assert_all_ranks(first.status == CG_ERR_MISMATCH && !first.got_plan, "the first compile fails");
    ck_assert_all_ranks(again.status == CG_ERR_MISMATCH && !again.got_plan && !strcmp(first.msg, again.msg),
                        "compiling the same graph again fails the same way");
    cg_plan_t *plan = NULL;
    compile_and_run_equal_program("an equal program after a mismatch");
    /* point-to-point records travel in the second round: exercise it too */
    g = record_ring(mm_comm_w, &pl, P2P_EQUAL, -1, -1);
    mm_expect_ok_all(cg_compile(&plan, g, NULL), "a matching ring after a mismatch compiles");
    ck_assert_all_ranks(cg_plan_run(plan) == CG_SUCCESS, "and runs");
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
    pool_free(&pl);
  }
}
END_TEST

/* A case of the suite, on the communicator fixture. */
static TCase *new_case(Suite *s, const char *name) {
  TCase *tc = cg_mpi_tcase(name);
  tcase_add_checked_fixture(tc, comm_setup, comm_teardown);
  suite_add_tcase(s, tc);
  return tc;
}

static void add_case(Suite *s, const char *name, const TTest *const *tests, size_t n) {
  TCase *tc = new_case(s, name);
  for (size_t i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
}
#define ADD_CASE(s, name, ...)                                                   \
  do {                                                                           \
    const TTest *tests_[] = {__VA_ARGS__};                                       \
    add_case(s, name, tests_, sizeof tests_ / sizeof tests_[0]);                 \
  } while (0)

int main(void) {
  Suite *s = suite_create("mpi_mismatch");
  ADD_CASE(s, "collectives", mismatch__swapped_adjacent_nodes, mismatch__count_plus_one, mismatch__count_minus_one,
           mismatch__other_dtype, mismatch__other_reduction, mismatch__other_root, mismatch__missing_node,
           mismatch__missing_last_node, mismatch__extra_node, mismatch__extra_node_at_end,
           mismatch__every_rank_differs);
  ADD_CASE(s, "p2p", mismatch__p2p_send_without_receive, mismatch__p2p_receive_without_send, mismatch__p2p_send_count,
           mismatch__p2p_recv_count, mismatch__p2p_send_dtype, mismatch__p2p_recv_dtype, mismatch__p2p_other_group,
           mismatch__p2p_self_send_count, match__rank_specific_p2p_compiles_and_runs);
  mm_add_comms_tests(new_case(s, "comms"));
  ADD_CASE(s, "lifecycle", opts__check_ranks_zero_skips_the_check, match__equal_programs_compile_and_run,
           cleanup__mismatch_leaves_nothing_behind);
  return cg_mpi_test_main(s);
}
