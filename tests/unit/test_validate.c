/* Validation: every rejected recording call returns the right status, names the
 * function, the node and the rank in cg_error_last(), and changes nothing. */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "test_support.h"


static const char *fn_of(cg_node_kind_t k) {
  static const char *names[] = {"cg_allreduce", "cg_broadcast", "cg_reduce", "cg_allgather", "cg_reduce_scatter",
                                "cg_alltoall",  "cg_gather",    "cg_scatter", "cg_send",     "cg_recv",
                                "cg_barrier",   "cg_host_func"};
  return names[k];
}

typedef cg_test_call_t call_t;

/* "needle" occurs in msg not followed by a digit ("node #3" is not "node #31"). */
static int contains_token(const char *msg, const char *needle) {
  size_t n = strlen(needle);
  for (const char *p = msg; (p = strstr(p, needle)) != NULL; p++)
    if (p[n] < '0' || p[n] > '9') return 1;
  return 0;
}

static void get_stats(cg_graph_stats_t *s, const cg_graph_t *g) {
  memset(s, 0, sizeof *s);
  ck_assert_cg_ok(cg_graph_stats(s, g));
}

/* ---- the environment every rejection is checked in: a graph with a random
 * prefix, a twin graph `ref` that records the same valid calls but never sees
 * the rejected ones, and a communicator `bad` that only rejected calls use. */

#define ARENA 65536
#define HALF (ARENA / 2)

typedef struct env {
  int size, rank;
  cg_comm_t *comm; /* used by valid calls */
  cg_comm_t *comm2; /* used by some of the prefix, so that not every prefix node is ordered by comm */
  cg_comm_t *bad;  /* used by rejected calls; never retained */
  cg_graph_t *g, *ref;
  unsigned char *arena;
  uint32_t next; /* index of the next node */
  cg_graph_stats_t stats;
  char *dot;
} env_t;

static void env_snapshot(env_t *e) {
  free(e->dot);
  get_stats(&e->stats, e->g);
  e->dot = cg_test_dot_text(e->g);
}

static cg_node_t env_record(env_t *e, const call_t *c) {
  cg_node_t a, b;
  ck_assert_cg_ok(cg_test_record(&a, e->g, c));
  ck_assert_cg_ok(cg_test_record(&b, e->ref, c));
  ck_assert_uint_eq(a.index, e->next);
  ck_assert_uint_eq(b.index, e->next);
  e->next++;
  env_snapshot(e);
  return a;
}

static void env_depend(env_t *e, uint32_t before, uint32_t after) {
  ck_assert_cg_ok(cg_depend(e->g, (cg_node_t){e->g->serial, before}, (cg_node_t){e->g->serial, after}));
  ck_assert_cg_ok(cg_depend(e->ref, (cg_node_t){e->ref->serial, before}, (cg_node_t){e->ref->serial, after}));
  env_snapshot(e);
}

/* An allreduce on e->comm reading and writing [off, off + bytes) of the arena. */
static void env_record_arena(env_t *e, size_t off, size_t bytes) {
  call_t c = {CG_NODE_ALLREDUCE, e->comm, e->arena + off, e->arena + off, bytes, CG_INT8, CG_SUM, -1};
  env_record(e, &c);
}

static void env_init(env_t *e, uint64_t salt, int size) {
  cg_test_reseed(salt);
  memset(e, 0, sizeof *e);
  e->size = size > 0 ? size : 1 + (int)cg_test_below(8);
  e->rank = (int)cg_test_below((uint64_t)e->size);
  ck_assert_cg_ok(cg_comm_create_offline(&e->comm, (int)cg_test_below(4), 4));
  ck_assert_cg_ok(cg_comm_create_offline(&e->comm2, (int)cg_test_below(4), 4));
  ck_assert_cg_ok(cg_comm_create_offline(&e->bad, e->rank, e->size));
  cg_graph_opts_t o = CG_GRAPH_OPTS_INIT;
  o.name = "vg";
  ck_assert_cg_ok(cg_graph_create(&e->g, &o));
  ck_assert_cg_ok(cg_graph_create(&e->ref, &o));
  e->arena = malloc(ARENA);
  ck_assert_ptr_nonnull(e->arena);
  /* the prefix: 1..6 random nodes in the lower half of the arena, on either
   * communicator (the collectives of one are chained by comm-order edges) */
  int n = 1 + (int)cg_test_below(6);
  for (int i = 0; i < n; i++) {
    size_t off = cg_test_below(HALF - 512), bytes = 1 + cg_test_below(512);
    uint64_t what = cg_test_below(8);
    cg_comm_t *c = cg_test_below(2) ? e->comm : e->comm2;
    if (what == 0) {
      env_record(e, &(call_t){.kind = CG_NODE_BARRIER, .comm = c});
    } else if (what == 1) {
      env_record(e, &(call_t){CG_NODE_SEND, c, e->arena + off, NULL, bytes, CG_UINT8, CG_SUM, 3});
    } else {
      env_record(e, &(call_t){CG_NODE_ALLREDUCE, c, e->arena + off, e->arena + HALF - 512 + cg_test_below(512), 1,
                              CG_INT8, CG_SUM, -1});
      env_record(e, &(call_t){CG_NODE_ALLREDUCE, c, e->arena + off, e->arena + off, bytes, CG_INT8, CG_SUM, -1});
    }
  }
  if (cg_test_below(2)) {
    ck_assert_cg_ok(cg_node_name(e->g, (cg_node_t){e->g->serial, 0}, "first"));
    ck_assert_cg_ok(cg_node_name(e->ref, (cg_node_t){e->ref->serial, 0}, "first"));
  }
  if (e->next > 2 && cg_test_below(2)) { /* a backward edge where it closes no cycle */
    cg_node_t last = {e->g->serial, e->next - 1}, first = {e->g->serial, 0};
    if (cg_depend(e->g, last, first) == CG_SUCCESS)
      ck_assert_cg_ok(cg_depend(e->ref, (cg_node_t){e->ref->serial, e->next - 1}, (cg_node_t){e->ref->serial, 0}));
  }
  env_snapshot(e);
}

static void env_free(env_t *e) {
  cg_graph_destroy(e->g);
  cg_graph_destroy(e->ref);
  ck_assert_int_eq(atomic_load(&e->bad->refs), 1);
  cg_comm_destroy(e->bad);
  cg_comm_destroy(e->comm);
  cg_comm_destroy(e->comm2);
  free(e->arena);
  free(e->dot);
}

enum { NEED_NODE = 1, NEED_RANK = 2 };

/* Checks one rejected call: its status and detail, that nothing changed, and
 * that the next valid node gets the next index and the same edges as in `ref`. */
static void env_rejected(env_t *e, const char *what, cg_status_t got, cg_status_t want, const char *fn, int need,
                         const char *extra1, const char *extra2) {
  const char *msg = cg_error_last();
  ck_assert_msg(got == want, "%s: got %s (%s), expected %s", what, cg_status_string(got), msg,
                cg_status_string(want));
  ck_assert_msg(strstr(msg, fn) != NULL, "%s: detail '%s' does not name %s", what, msg, fn);
  char needle[64];
  if (need & NEED_NODE) {
    snprintf(needle, sizeof needle, "node #%u", e->next);
    ck_assert_msg(contains_token(msg, needle), "%s: detail '%s' does not name %s", what, msg, needle);
  }
  if (need & NEED_RANK) {
    snprintf(needle, sizeof needle, "rank %d of %d", e->rank, e->size);
    ck_assert_msg(strstr(msg, needle) != NULL, "%s: detail '%s' does not name %s", what, msg, needle);
  }
  if (extra1) ck_assert_msg(contains_token(msg, extra1), "%s: detail '%s' lacks '%s'", what, msg, extra1);
  if (extra2) ck_assert_msg(contains_token(msg, extra2), "%s: detail '%s' lacks '%s'", what, msg, extra2);

  cg_graph_stats_t now;
  get_stats(&now, e->g);
  ck_assert_msg(memcmp(&now, &e->stats, sizeof now) == 0, "%s: statistics changed", what);
  char *dot = cg_test_dot_text(e->g);
  ck_assert_msg(strcmp(dot, e->dot) == 0, "%s: DOT changed:\n%s\nwas:\n%s", what, dot, e->dot);
  free(dot);
  ck_assert_uint_eq(cg_graph_node_count(e->g), e->next);
  ck_assert_uint_eq(e->g->n_comms, e->ref->n_comms);
  ck_assert_uint_eq(e->g->last_fence, e->ref->last_fence);
  ck_assert_int_eq(e->g->has_backward_edges, e->ref->has_backward_edges);
  ck_assert_int_eq(atomic_load(&e->bad->refs), 1);

  /* the next valid node touches the whole arena: hazard state must match ref */
  env_record_arena(e, 0, ARENA);
  cg_graph_stats_t s_ref;
  get_stats(&now, e->g);
  get_stats(&s_ref, e->ref);
  ck_assert_msg(memcmp(&now, &s_ref, sizeof now) == 0, "%s: the next node got other edges (%zu vs %zu)", what,
                now.edges, s_ref.edges);
  char *dot_ref = cg_test_dot_text(e->ref);
  ck_assert_msg(strcmp(e->dot, dot_ref) == 0, "%s: graph differs from its twin after the next node", what);
  free(dot_ref);
}

/* A valid call of kind k on e->bad with disjoint buffers in the upper half. */
static call_t valid_call(env_t *e, cg_node_kind_t k, int at_root) {
  call_t c = {.kind = k, .comm = e->bad, .dtype = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT), .root = -1};
  size_t es = cg_dtype_size(c.dtype), fit = (HALF / 2 - 600) / ((size_t)e->size * es);
  c.count = 2 + cg_test_below(fit < 64 ? fit - 2 : 62);
  c.op = cg_test_kind_has_op(k) ? (cg_redop_t)cg_test_below(CG_REDOP_COUNT) : CG_SUM;
  if (cg_test_kind_is_rooted(k) || cg_test_kind_is_p2p(k)) {
    int other = (e->rank + 1 + (int)cg_test_below((uint64_t)(e->size > 1 ? e->size - 1 : 1))) % e->size;
    c.root = at_root || e->size == 1 ? e->rank : other;
  }
  size_t off = (cg_test_below(64) + 1) * 8;
  c.send = k == CG_NODE_RECV ? NULL : e->arena + HALF + off;
  c.recv = k == CG_NODE_SEND ? NULL : e->arena + HALF + HALF / 2 + off;
  ck_assert_uint_le(off + c.count * (size_t)e->size * es, HALF / 2);
  return c;
}

static void expect_rejected(env_t *e, const char *what, const call_t *c, cg_status_t want, int need,
                            const char *extra) {
  cg_node_t out = {777, 777};
  cg_status_t st = cg_test_record(&out, e->g, c);
  ck_assert_msg(out.graph == 777 && out.index == 777, "%s: out was written", what);
  env_rejected(e, what, st, want, fn_of(c->kind), need, extra, NULL);
}

/* ---- arguments */

START_TEST(validate__null_graph) {
  env_t e;
  env_init(&e, 1, 0);
  for (int k = 0; k <= CG_NODE_HOST_FUNC; k++) {
    call_t c = valid_call(&e, (cg_node_kind_t)k, 1);
    cg_node_t out = {777, 777};
    cg_status_t st = cg_test_record(&out, NULL, &c);
    ck_assert_uint_eq(out.index, 777);
    env_rejected(&e, fn_of(c.kind), st, CG_ERR_INVALID_ARGUMENT, fn_of(c.kind), 0, NULL, NULL);
  }
  cg_node_t n0 = {e.g->serial, 0};
  env_rejected(&e, "cg_depend", cg_depend(NULL, n0, n0), CG_ERR_INVALID_ARGUMENT, "cg_depend", 0, NULL, NULL);
  env_rejected(&e, "cg_node_name", cg_node_name(NULL, n0, "x"), CG_ERR_INVALID_ARGUMENT, "cg_node_name", 0, NULL,
               NULL);
  env_rejected(&e, "cg_node_name NULL name", cg_node_name(e.g, n0, NULL), CG_ERR_INVALID_ARGUMENT, "cg_node_name",
               0, NULL, NULL);
  env_free(&e);
}
END_TEST

START_TEST(validate__null_comm) {
  env_t e;
  env_init(&e, 2, 0);
  for (size_t i = 0; i < CG_TEST_N_COMM_KINDS; i++) {
    call_t c = valid_call(&e, cg_test_comm_kinds[i], (int)cg_test_below(2));
    c.comm = NULL;
    expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_INVALID_ARGUMENT, NEED_NODE, NULL);
  }
  env_free(&e);
}
END_TEST

START_TEST(validate__barrier_null_comm) {
  env_t e;
  env_init(&e, 3, 0);
  call_t c = {.kind = CG_NODE_BARRIER, .comm = NULL};
  expect_rejected(&e, "barrier without communicator", &c, CG_ERR_INVALID_ARGUMENT, NEED_NODE, NULL);
  env_free(&e);
}
END_TEST

START_TEST(validate__null_buffer_with_bytes) {
  env_t e;
  env_init(&e, 4, 0);
  for (int trial = 0; trial < 3; trial++) {
    for (size_t i = 0; i < CG_TEST_N_COMM_KINDS; i++) {
      cg_node_kind_t k = cg_test_comm_kinds[i];
      call_t c = valid_call(&e, k, trial != 1);
      if (cg_test_send_elems(k, c.count, e.size, e.rank, c.root)) {
        call_t bad = c;
        bad.send = NULL;
        expect_rejected(&e, fn_of(k), &bad, CG_ERR_INVALID_ARGUMENT, NEED_NODE | NEED_RANK,
                        cg_test_kind_is_p2p(k) ? "buf" : "send");
      }
      if (cg_test_recv_elems(k, c.count, e.size, e.rank, c.root)) {
        call_t bad = c;
        bad.recv = NULL;
        expect_rejected(&e, fn_of(k), &bad, CG_ERR_INVALID_ARGUMENT, NEED_NODE | NEED_RANK,
                        cg_test_kind_is_p2p(k) ? "buf" : "recv");
      }
    }
  }
  env_free(&e);
}
END_TEST

START_TEST(validate__unknown_dtype) {
  env_t e;
  env_init(&e, 5, 0);
  const int bad[] = {CG_DTYPE_COUNT, CG_DTYPE_COUNT + 1, -1, 1000, INT_MAX, INT_MIN};
  for (size_t i = 0; i < CG_TEST_N_COMM_KINDS; i++) {
    call_t c = valid_call(&e, cg_test_comm_kinds[i], 1);
    c.dtype = (cg_dtype_t)bad[cg_test_below(sizeof bad / sizeof bad[0])];
    expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_INVALID_ENUM, NEED_NODE | NEED_RANK, NULL);
  }
  env_free(&e);
}
END_TEST

START_TEST(validate__unknown_redop) {
  env_t e;
  env_init(&e, 6, 0);
  const int bad[] = {CG_REDOP_COUNT, CG_REDOP_COUNT + 1, -1, 99, INT_MAX};
  const cg_node_kind_t kinds[] = {CG_NODE_ALLREDUCE, CG_NODE_REDUCE, CG_NODE_REDUCE_SCATTER};
  for (size_t i = 0; i < 3; i++)
    for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
      call_t c = valid_call(&e, kinds[i], 1);
      c.op = (cg_redop_t)bad[j];
      expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_INVALID_ENUM, NEED_NODE | NEED_RANK, NULL);
    }
  env_free(&e);
}
END_TEST

START_TEST(validate__root_or_peer_out_of_range) {
  env_t e;
  env_init(&e, 7, 0);
  const cg_node_kind_t kinds[] = {CG_NODE_BROADCAST, CG_NODE_REDUCE, CG_NODE_GATHER,
                                  CG_NODE_SCATTER,   CG_NODE_SEND,   CG_NODE_RECV};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    const int bad[] = {-1, e.size, e.size + 1 + (int)cg_test_below(100), -2 - (int)cg_test_below(100), INT_MAX,
                       INT_MIN};
    for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
      call_t c = valid_call(&e, kinds[i], 1);
      c.root = bad[j];
      expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_OUT_OF_RANGE, NEED_NODE | NEED_RANK,
                      cg_test_kind_is_p2p(kinds[i]) ? "peer" : "root");
    }
  }
  env_free(&e);
}
END_TEST

/* ---- sizes */

/* Kinds with a buffer of count * ranks elements (at the root for gather and scatter). */
static const cg_node_kind_t per_rank_kinds[] = {CG_NODE_ALLGATHER, CG_NODE_REDUCE_SCATTER, CG_NODE_ALLTOALL,
                                                CG_NODE_GATHER, CG_NODE_SCATTER};

START_TEST(validate__count_times_elem_size_overflow) {
  env_t e;
  env_init(&e, 8, 1);
  for (size_t i = 0; i < CG_TEST_N_COMM_KINDS; i++) {
    call_t c = valid_call(&e, cg_test_comm_kinds[i], 1);
    c.dtype = cg_test_below(2) ? CG_FLOAT64 : CG_BFLOAT16;
    c.count = SIZE_MAX / cg_dtype_size(c.dtype) + 1 + cg_test_below(1000);
    expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_OVERFLOW, NEED_NODE | NEED_RANK, NULL);
  }
  env_free(&e);
  /* per-rank layouts: count * ranks fits, times the element size does not */
  env_init(&e, 9, 2 + (int)cg_test_below(7));
  for (size_t i = 0; i < 5; i++) {
    call_t c = valid_call(&e, per_rank_kinds[i], 1);
    c.dtype = CG_INT64;
    c.count = SIZE_MAX / ((size_t)e.size * 8) + 1;
    ck_assert_uint_le(c.count, SIZE_MAX / (size_t)e.size);
    ck_assert_uint_le(c.count, SIZE_MAX / 8);
    expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_OVERFLOW, NEED_NODE | NEED_RANK, NULL);
  }
  env_free(&e);
}
END_TEST

START_TEST(validate__count_times_ranks_overflow) {
  env_t e;
  env_init(&e, 10, 2 + (int)cg_test_below(100));
  for (size_t i = 0; i < 5; i++) {
    call_t c = valid_call(&e, per_rank_kinds[i], 1);
    c.dtype = CG_INT8;
    c.count = SIZE_MAX / (size_t)e.size + 1 + cg_test_below(1000);
    expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_OVERFLOW, NEED_NODE | NEED_RANK, NULL);
  }
  env_free(&e);
}
END_TEST

START_TEST(validate__buffer_past_end_of_memory) {
  env_t e;
  env_init(&e, 11, 0);
  for (int trial = 0; trial < 2; trial++) {
    for (size_t i = 0; i < CG_TEST_N_COMM_KINDS; i++) {
      cg_node_kind_t k = cg_test_comm_kinds[i];
      call_t c = valid_call(&e, k, 1);
      size_t es = cg_dtype_size(c.dtype);
      size_t sbytes = cg_test_send_elems(k, c.count, e.size, e.rank, c.root) * es;
      size_t rbytes = cg_test_recv_elems(k, c.count, e.size, e.rank, c.root) * es;
      if (sbytes) {
        call_t bad = c;
        /* the first trial ends exactly at 2^64, which no span can represent */
        bad.send = (const void *)(UINTPTR_MAX - sbytes + 1 + (trial ? cg_test_below(sbytes) : 0));
        expect_rejected(&e, fn_of(k), &bad, CG_ERR_OVERFLOW, NEED_NODE | NEED_RANK, NULL);
      }
      if (rbytes) {
        call_t bad = c;
        bad.recv = (void *)(UINTPTR_MAX - rbytes + 1 + (trial ? cg_test_below(rbytes) : 0));
        expect_rejected(&e, fn_of(k), &bad, CG_ERR_OVERFLOW, NEED_NODE | NEED_RANK, NULL);
      }
    }
  }
  env_free(&e);
}
END_TEST

/* ---- aliasing */

/* Places send at `s_off` and recv at `r_off` bytes into the upper half. */
static call_t placed(env_t *e, cg_node_kind_t k, size_t count, cg_dtype_t dt, size_t s_off, size_t r_off) {
  call_t c = {k, e->bad, e->arena + HALF + s_off, e->arena + HALF + r_off, count, dt, CG_SUM,
              cg_test_kind_is_rooted(k) ? e->rank : -1};
  return c;
}

static void expect_alias(env_t *e, const char *what, const call_t *c) {
  expect_rejected(e, what, c, CG_ERR_ALIAS, NEED_NODE | NEED_RANK, NULL);
}

/* Kinds whose send and recv have the same length: allreduce, and broadcast and
 * reduce at the root. Only send == recv is in place. */
static void check_alias_same_length(cg_node_kind_t k, uint64_t salt) {
  env_t e;
  env_init(&e, salt, 0);
  for (int trial = 0; trial < 4; trial++) {
    cg_dtype_t dt = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
    size_t es = cg_dtype_size(dt), count = 2 + cg_test_below(60), base = 4096;
    size_t shift = (1 + cg_test_below(count - 1)) * es; /* whole elements */
    call_t c = placed(&e, k, count, dt, base, base + shift);
    expect_alias(&e, "recv starts inside send", &c);
    c = placed(&e, k, count, dt, base + shift, base);
    expect_alias(&e, "send starts inside recv", &c);
    c = placed(&e, k, count, dt, base, base + 1 + cg_test_below(count * es - 1)); /* any byte */
    expect_alias(&e, "recv overlaps send at an odd byte", &c);
  }
  env_free(&e);
}

START_TEST(validate__alias_allreduce) { check_alias_same_length(CG_NODE_ALLREDUCE, 20); }
END_TEST
START_TEST(validate__alias_broadcast_root) { check_alias_same_length(CG_NODE_BROADCAST, 21); }
END_TEST
START_TEST(validate__alias_reduce_root) { check_alias_same_length(CG_NODE_REDUCE, 22); }
END_TEST

/* allgather and gather (root): send (count) in place at recv + rank*count of
 * recv (count * size). recv_is_big: reduce_scatter and scatter (root), the
 * mirror image. */
static void check_alias_per_rank(cg_node_kind_t k, int send_in_recv, uint64_t salt) {
  env_t e;
  env_init(&e, salt, 2 + (int)cg_test_below(7));
  for (int trial = 0; trial < 4; trial++) {
    cg_dtype_t dt = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
    size_t es = cg_dtype_size(dt), count = 2 + cg_test_below(30), base = 4096, block = count * es;
    size_t right = (size_t)e.rank * block;
    int wrong_rank = (e.rank + 1 + (int)cg_test_below((uint64_t)e.size - 1)) % e.size;
    size_t wrong = (size_t)wrong_rank * block;
    size_t inside = right + (1 + cg_test_below(count - 1)) * es; /* inside this rank's block */
    size_t before = (1 + cg_test_below(count - 1)) * es;         /* straddles the start */
    /* small at `off` inside big at `base` */
    size_t offs[] = {wrong, inside};
    for (size_t i = 0; i < 2; i++) {
      call_t c = send_in_recv ? placed(&e, k, count, dt, base + offs[i], base)
                              : placed(&e, k, count, dt, base, base + offs[i]);
      expect_alias(&e, i == 0 ? "in place at another rank's block" : "inside the own block but misplaced", &c);
    }
    call_t c = send_in_recv ? placed(&e, k, count, dt, base - before, base)
                            : placed(&e, k, count, dt, base, base - before);
    expect_alias(&e, "straddles the start of the big buffer", &c);
    /* the big buffer starts inside the small one */
    c = send_in_recv ? placed(&e, k, count, dt, base, base + es) : placed(&e, k, count, dt, base + es, base);
    expect_alias(&e, "big buffer starts inside the small one", &c);
    /* the right form is accepted on a fresh graph (sanity of the layout above) */
    cg_graph_t *fresh = NULL;
    ck_assert_cg_ok(cg_graph_create(&fresh, NULL));
    c = send_in_recv ? placed(&e, k, count, dt, base + right, base) : placed(&e, k, count, dt, base, base + right);
    ck_assert_cg_ok(cg_test_record(NULL, fresh, &c));
    cg_graph_destroy(fresh);
  }
  env_free(&e);
}

START_TEST(validate__alias_allgather) { check_alias_per_rank(CG_NODE_ALLGATHER, 1, 23); }
END_TEST
START_TEST(validate__alias_gather_root) { check_alias_per_rank(CG_NODE_GATHER, 1, 24); }
END_TEST
START_TEST(validate__alias_reduce_scatter) { check_alias_per_rank(CG_NODE_REDUCE_SCATTER, 0, 25); }
END_TEST
START_TEST(validate__alias_scatter_root) { check_alias_per_rank(CG_NODE_SCATTER, 0, 26); }
END_TEST

START_TEST(validate__alias_alltoall_any_overlap) {
  env_t e;
  env_init(&e, 27, 0);
  for (int trial = 0; trial < 4; trial++) {
    cg_dtype_t dt = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
    size_t es = cg_dtype_size(dt), count = 1 + cg_test_below(30), base = 4096;
    size_t total = count * (size_t)e.size * es;
    call_t c = placed(&e, CG_NODE_ALLTOALL, count, dt, base, base);
    expect_alias(&e, "alltoall send == recv", &c);
    size_t d = 1 + cg_test_below(total - 1 + (total == 1));
    if (d < total) {
      c = placed(&e, CG_NODE_ALLTOALL, count, dt, base, base + d);
      expect_alias(&e, "alltoall recv inside send", &c);
      c = placed(&e, CG_NODE_ALLTOALL, count, dt, base + d, base);
      expect_alias(&e, "alltoall send inside recv", &c);
    }
    c = placed(&e, CG_NODE_ALLTOALL, count, dt, base + total - 1, base);
    expect_alias(&e, "alltoall one byte shared", &c);
  }
  env_free(&e);
}
END_TEST

/* ---- cycles */

START_TEST(validate__depend_cycle_through_hazard_edges) {
  env_t e;
  env_init(&e, 30, 0);
  unsigned char *x = e.arena + HALF, *y = x + 1024, *z = x + 2048;
  cg_node_t a = env_record(&e, &(call_t){CG_NODE_ALLREDUCE, e.comm, x, y, 64, CG_INT32, CG_SUM, -1});
  cg_node_t b = env_record(&e, &(call_t){CG_NODE_ALLREDUCE, e.comm, y, z, 64, CG_INT32, CG_SUM, -1}); /* raw a->b */
  cg_node_t c = env_record(&e, &(call_t){CG_NODE_SEND, e.comm, z, NULL, 64, CG_INT32, CG_SUM, 0});   /* raw b->c */
  char na[32], nb[32], nc[32];
  snprintf(na, sizeof na, "node #%u", a.index);
  snprintf(nb, sizeof nb, "node #%u", b.index);
  snprintf(nc, sizeof nc, "node #%u", c.index);
  env_rejected(&e, "c -> a", cg_depend(e.g, c, a), CG_ERR_CYCLE, "cg_depend", 0, nc, na);
  ck_assert_cg_ok(cg_node_name(e.g, a, "halo_in")); /* names show in the detail; DOT changes too */
  ck_assert_cg_ok(cg_node_name(e.ref, (cg_node_t){e.ref->serial, a.index}, "halo_in"));
  ck_assert_cg_ok(cg_node_name(e.g, c, "halo_out"));
  ck_assert_cg_ok(cg_node_name(e.ref, (cg_node_t){e.ref->serial, c.index}, "halo_out"));
  env_snapshot(&e);
  env_rejected(&e, "named c -> a", cg_depend(e.g, c, a), CG_ERR_CYCLE, "cg_depend", 0, "'halo_in'", "'halo_out'");
  env_rejected(&e, "b -> a", cg_depend(e.g, b, a), CG_ERR_CYCLE, "cg_depend", 0, nb, na);
  env_rejected(&e, "c -> b", cg_depend(e.g, c, b), CG_ERR_CYCLE, "cg_depend", 0, nc, nb);
  /* the forward edge over the path is fine */
  ck_assert_cg_ok(cg_depend(e.g, a, c));
  env_free(&e);
}
END_TEST

START_TEST(validate__depend_self_edge) {
  env_t e;
  env_init(&e, 31, 0);
  uint32_t prefix = e.next;
  for (uint32_t i = 0; i < prefix; i++) {
    cg_node_t n = {e.g->serial, i};
    char nn[32];
    snprintf(nn, sizeof nn, "node #%u", i);
    env_rejected(&e, "self edge", cg_depend(e.g, n, n), CG_ERR_CYCLE, "cg_depend", 0, nn, NULL);
  }
  env_free(&e);
}
END_TEST

/* A host function reading [p, p + 64) and writing [p + 1024, p + 1088), in both twins. */
static uint32_t env_host_func(env_t *e, unsigned char *p) {
  cg_range_t reads[] = {{p, 64}}, writes[] = {{p + 1024, 64}};
  cg_access_t access = {sizeof(cg_access_t), 0, reads, 1, writes, 1};
  cg_node_t a, b;
  ck_assert_cg_ok(cg_host_func(&a, e->g, cg_test_noop, NULL, &access));
  ck_assert_cg_ok(cg_host_func(&b, e->ref, cg_test_noop, NULL, &access));
  ck_assert_uint_eq(a.index, e->next);
  ck_assert_uint_eq(b.index, e->next);
  e->next++;
  env_snapshot(e);
  return a.index;
}

START_TEST(validate__depend_cycle_through_backward_edges) {
  env_t e;
  env_init(&e, 32, 0);
  /* nothing orders these four: disjoint buffers, allreduces on communicators
   * of their own, host functions with declared accesses (not fences) */
  cg_comm_t *comms[2];
  uint32_t n[4];
  for (int i = 0; i < 4; i++) {
    unsigned char *p = e.arena + HALF + 4096 * (size_t)i;
    if (i % 2) {
      n[i] = env_host_func(&e, p);
    } else {
      ck_assert_cg_ok(cg_comm_create_offline(&comms[i / 2], 0, 2));
      call_t c = {CG_NODE_ALLREDUCE, comms[i / 2], p, p + 1024, 16, CG_FLOAT32, CG_SUM, -1};
      n[i] = env_record(&e, &c).index;
    }
  }
  env_depend(&e, n[3], n[2]);
  env_depend(&e, n[2], n[1]);
  env_depend(&e, n[1], n[0]);
  ck_assert_int_eq(e.g->has_backward_edges, 1);
  const uint32_t bad[][2] = {{n[0], n[3]}, {n[0], n[2]}, {n[1], n[3]}, {n[0], n[1]}};
  for (size_t i = 0; i < 4; i++) {
    char nb[32], na[32];
    snprintf(nb, sizeof nb, "node #%u", bad[i][0]);
    snprintf(na, sizeof na, "node #%u", bad[i][1]);
    cg_node_t before = {e.g->serial, bad[i][0]}, after = {e.g->serial, bad[i][1]};
    env_rejected(&e, "closes a backward chain", cg_depend(e.g, before, after), CG_ERR_CYCLE, "cg_depend", 0, nb, na);
  }
  env_free(&e);
  for (int i = 0; i < 2; i++) cg_comm_destroy(comms[i]);
}
END_TEST

START_TEST(validate__depend_backward_between_collectives_of_one_comm) {
  env_t e;
  env_init(&e, 34, 0);
  cg_comm_t *other = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&other, 0, 2));
  /* disjoint buffers: only comm-order edges relate these nodes */
  unsigned char *p = e.arena + HALF;
  uint32_t a = env_record(&e, &(call_t){CG_NODE_ALLREDUCE, e.comm, p, p + 1024, 16, CG_FLOAT32, CG_SUM, -1}).index;
  uint32_t a2 = env_record(&e, &(call_t){CG_NODE_BROADCAST, e.comm, p + 2048, p + 2048, 16, CG_FLOAT32, CG_SUM,
                                         e.comm->rank}).index;
  uint32_t s = env_record(&e, &(call_t){CG_NODE_SEND, e.comm, p + 4096, NULL, 16, CG_FLOAT32, CG_SUM, 0}).index;
  uint32_t r = env_record(&e, &(call_t){CG_NODE_RECV, e.comm, NULL, p + 5120, 16, CG_FLOAT32, CG_SUM, 1}).index;
  uint32_t b =
      env_record(&e, &(call_t){CG_NODE_ALLGATHER, e.comm, p + 6144, p + 7168, 16, CG_FLOAT32, CG_SUM, -1}).index;
  uint32_t c =
      env_record(&e, &(call_t){CG_NODE_ALLREDUCE, other, p + 9216, p + 10240, 16, CG_FLOAT32, CG_SUM, -1}).index;
  const cg_node_rec_t *rec = cg_graph_node(e.g, a2);
  ck_assert_uint_eq(rec->preds.len, 1); /* the order edge alone */
  ck_assert_uint_eq(rec->preds.items[0].node, a);
  ck_assert_uint_eq(rec->preds.items[0].causes, CG_EDGE_COMM_ORDER);
  /* a later collective cannot run before an earlier one of its communicator,
   * directly or through the sends and receives between them */
  const uint32_t bad[][2] = {{a2, a}, {b, a}, {b, a2}, {s, a2}, {r, a}, {b, s}, {b, r}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char nb[32], na[32];
    snprintf(nb, sizeof nb, "node #%u", bad[i][0]);
    snprintf(na, sizeof na, "node #%u", bad[i][1]);
    cg_node_t before = {e.g->serial, bad[i][0]}, after = {e.g->serial, bad[i][1]};
    env_rejected(&e, "backward across the communicator's order", cg_depend(e.g, before, after), CG_ERR_CYCLE,
                 "cg_depend", 0, nb, na);
  }
  /* the sends and receives of one group are not ordered among themselves, and
   * another communicator's collective is not ordered with these at all */
  env_depend(&e, r, s);
  env_depend(&e, c, a);
  env_depend(&e, c, b);
  ck_assert_int_eq(e.g->has_backward_edges, 1);
  env_free(&e);
  cg_comm_destroy(other);
}
END_TEST

/* Does `from` reach `to` along successors? (plain DFS over the stored edges) */
static int reaches(const cg_graph_t *g, uint32_t from, uint32_t to) {
  uint32_t n = cg_graph_node_count(g), stack[64], depth = 0;
  unsigned char seen[64] = {0};
  stack[depth++] = from;
  seen[from] = 1;
  while (depth) {
    const cg_node_rec_t *r = cg_graph_node(g, stack[--depth]);
    for (uint32_t i = 0; i < r->succs.len; i++) {
      uint32_t s = r->succs.items[i].node;
      if (s == to) return 1;
      if (!seen[s] && s < n) seen[s] = 1, stack[depth++] = s;
    }
  }
  return 0;
}

START_TEST(validate__depend_random_matches_reachability) {
  cg_test_reseed(33);
  for (int trial = 0; trial < 20; trial++) {
    cg_comm_t *c = NULL;
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_comm_create_offline(&c, 0, 1));
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    unsigned char buf[256];
    uint32_t n = 8 + (uint32_t)cg_test_below(25);
    for (uint32_t i = 0; i < n; i++) {
      size_t off = cg_test_below(240), len = 1 + cg_test_below(16);
      if (cg_test_below(3) == 0) off += 1024; /* mostly overlapping, sometimes not */
      if (cg_test_below(25) == 0)
        ck_assert_cg_ok(cg_barrier(NULL, g, c));
      else if (off < 256)
        ck_assert_cg_ok(cg_send(NULL, g, c, buf + off, len, CG_UINT8, 0));
      else
        ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &(cg_access_t){sizeof(cg_access_t), 0, NULL, 0, NULL, 0}));
      if (cg_test_below(2)) ck_assert_cg_ok(cg_recv(NULL, g, c, buf + cg_test_below(240), len, CG_UINT8, 0));
    }
    n = cg_graph_node_count(g);
    ck_assert_uint_le(n, 64);
    for (int step = 0; step < 150; step++) {
      uint32_t b = (uint32_t)cg_test_below(n), a = (uint32_t)cg_test_below(n);
      int cycle = a == b || reaches(g, a, b);
      uint32_t had = 0; /* causes of an existing b -> a edge, CG_EDGE_EXPLICIT | ... */
      const cg_edge_vec_t *succs = &cg_graph_node(g, b)->succs;
      for (uint32_t i = 0; i < succs->len; i++)
        if (succs->items[i].node == a) had = succs->items[i].causes;
      cg_graph_stats_t before, after;
      get_stats(&before, g);
      cg_status_t st = cg_depend(g, (cg_node_t){g->serial, b}, (cg_node_t){g->serial, a});
      get_stats(&after, g);
      if (cycle) {
        ck_assert_msg(st == CG_ERR_CYCLE, "%u -> %u closes a cycle but got %s", b, a, cg_status_string(st));
        ck_assert_int_eq(memcmp(&before, &after, sizeof before), 0);
      } else {
        ck_assert_msg(st == CG_SUCCESS, "%u -> %u: %s", b, a, cg_error_last());
        ck_assert(reaches(g, b, a));
        ck_assert_uint_eq(after.edges, before.edges + !had);
        ck_assert_uint_eq(after.explicit_edges, before.explicit_edges + !(had & CG_EDGE_EXPLICIT));
      }
    }
    uint32_t order[64], pos[64];
    ck_assert_cg_ok(cg_graph_topo_order(g, order));
    for (uint32_t i = 0; i < n; i++) pos[order[i]] = i;
    for (uint32_t i = 0; i < n; i++) {
      const cg_node_rec_t *r = cg_graph_node(g, i);
      for (uint32_t j = 0; j < r->succs.len; j++) ck_assert_uint_lt(pos[i], pos[r->succs.items[j].node]);
    }
    cg_graph_destroy(g);
    cg_comm_destroy(c);
  }
}
END_TEST

/* ---- node handles */

START_TEST(validate__invalid_node_handles) {
  env_t e;
  env_init(&e, 40, 0);
  cg_graph_t *other = NULL, *gone = NULL;
  ck_assert_cg_ok(cg_graph_create(&other, NULL));
  ck_assert_cg_ok(cg_graph_create(&gone, NULL));
  for (uint32_t i = 0; i < e.next + 3; i++) {
    ck_assert_cg_ok(cg_barrier(NULL, other, e.comm));
    ck_assert_cg_ok(cg_barrier(NULL, gone, e.comm));
  }
  uint64_t gone_serial = gone->serial;
  cg_graph_destroy(gone);
  uint32_t some = (uint32_t)cg_test_below(e.next);
  cg_node_t good = {e.g->serial, some};
  for (int i = 0; i < 9; i++) {
    for (int use = 0; use < 3; use++) {
      cg_node_t bad; /* recomputed: every rejection is followed by one more node */
      switch (i) {
        case 0: bad = (cg_node_t){other->serial, some}; break;             /* another graph, valid index there */
        case 1: bad = (cg_node_t){other->serial, e.next + 1}; break;
        case 2: bad = (cg_node_t){gone_serial, 0}; break;                  /* a destroyed graph */
        case 3: bad = (cg_node_t){e.g->serial, e.next}; break;             /* one past the last */
        case 4: bad = (cg_node_t){e.g->serial, e.next + 1000 + (uint32_t)cg_test_below(1000)}; break;
        case 5: bad = (cg_node_t){e.g->serial, UINT32_MAX}; break;
        case 6: bad = (cg_node_t)CG_NODE_NULL; break;                      /* zero-initialized */
        case 7: bad = (cg_node_t){0, some}; break;
        default: bad = (cg_node_t){e.g->serial + 1000, some}; break;       /* a serial no graph has */
      }
      char id[32];
      snprintf(id, sizeof id, "#%u", bad.index);
      if (use == 0)
        env_rejected(&e, "bad before", cg_depend(e.g, bad, good), CG_ERR_INVALID_NODE, "cg_depend", 0, id, NULL);
      else if (use == 1)
        env_rejected(&e, "bad after", cg_depend(e.g, good, bad), CG_ERR_INVALID_NODE, "cg_depend", 0, id, NULL);
      else
        env_rejected(&e, "bad name", cg_node_name(e.g, bad, "n"), CG_ERR_INVALID_NODE, "cg_node_name", 0, id, NULL);
    }
  }
  cg_graph_destroy(other);
  env_free(&e);
}
END_TEST

/* ---- host functions */

START_TEST(validate__host_func_null_fn) {
  env_t e;
  env_init(&e, 50, 0);
  cg_access_t access = CG_ACCESS_INIT;
  cg_node_t out = {777, 777};
  env_rejected(&e, "NULL fn", cg_host_func(&out, e.g, NULL, &e, NULL), CG_ERR_INVALID_ARGUMENT, "cg_host_func",
               NEED_NODE, NULL, NULL);
  env_rejected(&e, "NULL fn with access", cg_host_func(&out, e.g, NULL, NULL, &access), CG_ERR_INVALID_ARGUMENT,
               "cg_host_func", NEED_NODE, NULL, NULL);
  ck_assert_uint_eq(out.index, 777);
  env_free(&e);
}
END_TEST

START_TEST(validate__host_func_access_wrong_size) {
  env_t e;
  env_init(&e, 51, 0);
  const size_t sizes[] = {0, 8, sizeof(cg_access_t) - 1, sizeof(cg_access_t) + 8, SIZE_MAX};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    cg_access_t access = CG_ACCESS_INIT;
    access.size = sizes[i];
    access.everything = (int)(i % 2);
    env_rejected(&e, "access.size", cg_host_func(NULL, e.g, cg_test_noop, NULL, &access), CG_ERR_INVALID_ARGUMENT,
                 "cg_host_func", NEED_NODE, NULL, NULL);
  }
  env_free(&e);
}
END_TEST

START_TEST(validate__host_func_null_reads_huge_count) {
  /* A NULL array is a bad argument whatever its claimed length. */
  env_t e;
  env_init(&e, 53, 0);
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.n_reads = (size_t)1 << 40;
  env_rejected(&e, "NULL reads, 2^40 of them", cg_host_func(NULL, e.g, cg_test_noop, NULL, &access), CG_ERR_INVALID_ARGUMENT,
               "cg_host_func", NEED_NODE, "reads", NULL);
  env_free(&e);
}
END_TEST

START_TEST(validate__host_func_bad_ranges) {
  env_t e;
  env_init(&e, 54, 0);
  for (int trial = 0; trial < 12; trial++) {
    cg_range_t ranges[5], other = {e.arena + HALF + 4096, 8};
    size_t n = 1 + cg_test_below(5), bad = cg_test_below(n);
    for (size_t i = 0; i < n; i++) ranges[i] = (cg_range_t){e.arena + HALF + 64 * i, 1 + cg_test_below(64)};
    int kind = trial / 4; /* 0: a NULL range, 1: a range past the end of memory, 2: a NULL array */
    if (kind == 1)
      ranges[bad] = (cg_range_t){(const void *)(UINTPTR_MAX - cg_test_below(8)), 9 + cg_test_below(100)};
    else
      ranges[bad] = (cg_range_t){NULL, 1 + cg_test_below(100)};
    const cg_range_t *list = kind == 2 ? NULL : ranges;
    int reads = trial % 2; /* the other list is valid and non-empty */
    cg_access_t access = {sizeof(cg_access_t), 0, reads ? list : &other, reads ? n : 1, reads ? &other : list,
                          reads ? 1 : n};
    char which[32];
    snprintf(which, sizeof which, "%s[%zu]", reads ? "reads" : "writes", bad);
    if (kind == 2) which[reads ? 5 : 6] = '\0';
    env_rejected(&e, "bad range", cg_host_func(NULL, e.g, cg_test_noop, NULL, &access),
                 kind == 1 ? CG_ERR_OVERFLOW : CG_ERR_INVALID_ARGUMENT, "cg_host_func", NEED_NODE, which, NULL);
  }
  /* more ranges than memory can describe */
  cg_range_t one = {e.arena, 1};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = &one;
  access.n_reads = SIZE_MAX;
  env_rejected(&e, "SIZE_MAX ranges", cg_host_func(NULL, e.g, cg_test_noop, NULL, &access), CG_ERR_OVERFLOW, "cg_host_func",
               NEED_NODE, NULL, NULL);
  env_free(&e);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("validate");
  TCase *tc = tcase_create("arguments");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, validate__null_graph);
  tcase_add_test(tc, validate__null_comm);
  tcase_add_test(tc, validate__barrier_null_comm);
  tcase_add_test(tc, validate__null_buffer_with_bytes);
  tcase_add_test(tc, validate__unknown_dtype);
  tcase_add_test(tc, validate__unknown_redop);
  tcase_add_test(tc, validate__root_or_peer_out_of_range);
  tcase_add_test(tc, validate__count_times_elem_size_overflow);
  tcase_add_test(tc, validate__count_times_ranks_overflow);
  tcase_add_test(tc, validate__buffer_past_end_of_memory);
  tcase_add_test(tc, validate__alias_allreduce);
  tcase_add_test(tc, validate__alias_broadcast_root);
  tcase_add_test(tc, validate__alias_reduce_root);
  tcase_add_test(tc, validate__alias_allgather);
  tcase_add_test(tc, validate__alias_gather_root);
  tcase_add_test(tc, validate__alias_reduce_scatter);
  tcase_add_test(tc, validate__alias_scatter_root);
  tcase_add_test(tc, validate__alias_alltoall_any_overlap);
  suite_add_tcase(s, tc);

  tc = tcase_create("edges_and_host_funcs");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, validate__depend_cycle_through_hazard_edges);
  tcase_add_test(tc, validate__depend_self_edge);
  tcase_add_test(tc, validate__depend_cycle_through_backward_edges);
  tcase_add_test(tc, validate__depend_backward_between_collectives_of_one_comm);
  tcase_add_test(tc, validate__depend_random_matches_reachability);
  tcase_add_test(tc, validate__invalid_node_handles);
  tcase_add_test(tc, validate__host_func_null_fn);
  tcase_add_test(tc, validate__host_func_access_wrong_size);
  tcase_add_test(tc, validate__host_func_null_reads_huge_count);
  tcase_add_test(tc, validate__host_func_bad_ranges);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
