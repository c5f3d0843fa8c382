/* Validation: every rejected recording call returns the right status, names the
 * function, the node and the rank in cg_error_last(), and changes nothing. This
 * file has the environment the rejections are checked in, the "arguments" test
 * case, the suite and main; test_validate_edges.c has the cg_depend, node-handle
 * and host-function cases. */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "test_support.h"
#include "test_validate.h"


static const char *fn_of(cg_node_kind_t k) {
  static const char *names[] = {"cg_allreduce", "cg_broadcast", "cg_reduce", "cg_allgather", "cg_reduce_scatter",
                                "cg_alltoall",  "cg_gather",    "cg_scatter", "cg_send",     "cg_recv",
                                "cg_barrier",   "cg_host_func"};
  return names[k];
}

/* "needle" occurs in msg not followed by a digit ("node #3" is not "node #31"). */
static int contains_token(const char *msg, const char *needle) {
  size_t n = strlen(needle);
  for (const char *p = msg; (p = strstr(p, needle)) != NULL; p++)
    if (p[n] < '0' || p[n] > '9') return 1;
  return 0;
}

void validate_get_stats(cg_graph_stats_t *s, const cg_graph_t *g) {
  memset(s, 0, sizeof *s);
  ck_assert_cg_ok(cg_graph_stats(s, g));
}

/* ---- the environment (test_validate.h says what it is) */

void validate_env_snapshot(env_t *e) {
  free(e->dot);
  validate_get_stats(&e->stats, e->g);
  e->dot = cg_test_dot_text(e->g);
}

cg_node_t validate_env_record(env_t *e, const call_t *c) {
  cg_node_t a, b;
  ck_assert_cg_ok(cg_test_record(&a, e->g, c));
  ck_assert_cg_ok(cg_test_record(&b, e->ref, c));
  ck_assert_uint_eq(a.index, e->next);
  ck_assert_uint_eq(b.index, e->next);
  e->next++;
  validate_env_snapshot(e);
  return a;
}

void validate_env_depend(env_t *e, uint32_t before, uint32_t after) {
  ck_assert_cg_ok(cg_depend(e->g, (cg_node_t){e->g->serial, before}, (cg_node_t){e->g->serial, after}));
  ck_assert_cg_ok(cg_depend(e->ref, (cg_node_t){e->ref->serial, before}, (cg_node_t){e->ref->serial, after}));
  validate_env_snapshot(e);
}

/* An allreduce on e->comm reading and writing [off, off + bytes) of the arena. */
static void env_record_arena(env_t *e, size_t off, size_t bytes) {
  call_t c = {CG_NODE_ALLREDUCE, e->comm, e->arena + off, e->arena + off, bytes, CG_INT8, CG_SUM, -1};
  validate_env_record(e, &c);
}

void validate_env_init(env_t *e, uint64_t salt, int size) {
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
      validate_env_record(e, &(call_t){.kind = CG_NODE_BARRIER, .comm = c});
    } else if (what == 1) {
      validate_env_record(e, &(call_t){CG_NODE_SEND, c, e->arena + off, NULL, bytes, CG_UINT8, CG_SUM, 3});
    } else {
      validate_env_record(e, &(call_t){CG_NODE_ALLREDUCE, c, e->arena + off, e->arena + HALF - 512 + cg_test_below(512),
                                       1, CG_INT8, CG_SUM, -1});
      validate_env_record(e,
                          &(call_t){CG_NODE_ALLREDUCE, c, e->arena + off, e->arena + off, bytes, CG_INT8, CG_SUM, -1});
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
  validate_env_snapshot(e);
}

void validate_env_free(env_t *e) {
  cg_graph_destroy(e->g);
  cg_graph_destroy(e->ref);
  ck_assert_int_eq(atomic_load(&e->bad->refs), 1);
  cg_comm_destroy(e->bad);
  cg_comm_destroy(e->comm);
  cg_comm_destroy(e->comm2);
  free(e->arena);
  free(e->dot);
}

/* Checks one rejected call: its status and detail, that nothing changed, and
 * that the next valid node gets the next index and the same edges as in `ref`. */
void validate_env_rejected(env_t *e, const char *what, cg_status_t got, cg_status_t want, const char *fn, int need,
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
  validate_get_stats(&now, e->g);
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
  validate_get_stats(&now, e->g);
  validate_get_stats(&s_ref, e->ref);
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
  validate_env_rejected(e, what, st, want, fn_of(c->kind), need, extra, NULL);
}

/* ---- arguments */

START_TEST(validate__null_graph) {
  env_t e;
  validate_env_init(&e, 1, 0);
  for (int k = 0; k <= CG_NODE_HOST_FUNC; k++) {
    call_t c = valid_call(&e, (cg_node_kind_t)k, 1);
    cg_node_t out = {777, 777};
    cg_status_t st = cg_test_record(&out, NULL, &c);
    ck_assert_uint_eq(out.index, 777);
    validate_env_rejected(&e, fn_of(c.kind), st, CG_ERR_INVALID_ARGUMENT, fn_of(c.kind), 0, NULL, NULL);
  }
  cg_node_t n0 = {e.g->serial, 0};
  validate_env_rejected(&e, "cg_depend", cg_depend(NULL, n0, n0), CG_ERR_INVALID_ARGUMENT, "cg_depend", 0, NULL, NULL);
  validate_env_rejected(&e, "cg_node_name", cg_node_name(NULL, n0, "x"), CG_ERR_INVALID_ARGUMENT, "cg_node_name", 0,
                        NULL, NULL);
  validate_env_rejected(&e, "cg_node_name NULL name", cg_node_name(e.g, n0, NULL), CG_ERR_INVALID_ARGUMENT,
                        "cg_node_name", 0, NULL, NULL);
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__null_comm) {
  env_t e;
  validate_env_init(&e, 2, 0);
  for (size_t i = 0; i < CG_TEST_N_COMM_KINDS; i++) {
    call_t c = valid_call(&e, cg_test_comm_kinds[i], (int)cg_test_below(2));
    c.comm = NULL;
    expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_INVALID_ARGUMENT, NEED_NODE, NULL);
  }
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__barrier_null_comm) {
  env_t e;
  validate_env_init(&e, 3, 0);
  call_t c = {.kind = CG_NODE_BARRIER, .comm = NULL};
  expect_rejected(&e, "barrier without communicator", &c, CG_ERR_INVALID_ARGUMENT, NEED_NODE, NULL);
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__null_buffer_with_bytes) {
  env_t e;
  validate_env_init(&e, 4, 0);
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
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__unknown_dtype) {
  env_t e;
  validate_env_init(&e, 5, 0);
  const int bad[] = {CG_DTYPE_COUNT, CG_DTYPE_COUNT + 1, -1, 1000, INT_MAX, INT_MIN};
  for (size_t i = 0; i < CG_TEST_N_COMM_KINDS; i++) {
    call_t c = valid_call(&e, cg_test_comm_kinds[i], 1);
    c.dtype = (cg_dtype_t)bad[cg_test_below(sizeof bad / sizeof bad[0])];
    expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_INVALID_ENUM, NEED_NODE | NEED_RANK, NULL);
  }
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__unknown_redop) {
  env_t e;
  validate_env_init(&e, 6, 0);
  const int bad[] = {CG_REDOP_COUNT, CG_REDOP_COUNT + 1, -1, 99, INT_MAX};
  const cg_node_kind_t kinds[] = {CG_NODE_ALLREDUCE, CG_NODE_REDUCE, CG_NODE_REDUCE_SCATTER};
  for (size_t i = 0; i < 3; i++)
    for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
      call_t c = valid_call(&e, kinds[i], 1);
      c.op = (cg_redop_t)bad[j];
      expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_INVALID_ENUM, NEED_NODE | NEED_RANK, NULL);
    }
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__root_or_peer_out_of_range) {
  env_t e;
  validate_env_init(&e, 7, 0);
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
  validate_env_free(&e);
}
END_TEST

/* ---- sizes */

/* Kinds with a buffer of count * ranks elements (at the root for gather and scatter). */
static const cg_node_kind_t per_rank_kinds[] = {CG_NODE_ALLGATHER, CG_NODE_REDUCE_SCATTER, CG_NODE_ALLTOALL,
                                                CG_NODE_GATHER, CG_NODE_SCATTER};

START_TEST(validate__count_times_elem_size_overflow) {
  env_t e;
  validate_env_init(&e, 8, 1);
  for (size_t i = 0; i < CG_TEST_N_COMM_KINDS; i++) {
    call_t c = valid_call(&e, cg_test_comm_kinds[i], 1);
    c.dtype = cg_test_below(2) ? CG_FLOAT64 : CG_BFLOAT16;
    c.count = SIZE_MAX / cg_dtype_size(c.dtype) + 1 + cg_test_below(1000);
    expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_OVERFLOW, NEED_NODE | NEED_RANK, NULL);
  }
  validate_env_free(&e);
  /* per-rank layouts: count * ranks fits, times the element size does not */
  validate_env_init(&e, 9, 2 + (int)cg_test_below(7));
  for (size_t i = 0; i < 5; i++) {
    call_t c = valid_call(&e, per_rank_kinds[i], 1);
    c.dtype = CG_INT64;
    c.count = SIZE_MAX / ((size_t)e.size * 8) + 1;
    ck_assert_uint_le(c.count, SIZE_MAX / (size_t)e.size);
    ck_assert_uint_le(c.count, SIZE_MAX / 8);
    expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_OVERFLOW, NEED_NODE | NEED_RANK, NULL);
  }
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__count_times_ranks_overflow) {
  env_t e;
  validate_env_init(&e, 10, 2 + (int)cg_test_below(100));
  for (size_t i = 0; i < 5; i++) {
    call_t c = valid_call(&e, per_rank_kinds[i], 1);
    c.dtype = CG_INT8;
    c.count = SIZE_MAX / (size_t)e.size + 1 + cg_test_below(1000);
    expect_rejected(&e, fn_of(c.kind), &c, CG_ERR_OVERFLOW, NEED_NODE | NEED_RANK, NULL);
  }
  validate_env_free(&e);
}
END_TEST

START_TEST(validate__buffer_past_end_of_memory) {
  env_t e;
  validate_env_init(&e, 11, 0);
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
  validate_env_free(&e);
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
  validate_env_init(&e, salt, 0);
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
  validate_env_free(&e);
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
  validate_env_init(&e, salt, 2 + (int)cg_test_below(7));
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
  validate_env_free(&e);
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
  validate_env_init(&e, 27, 0);
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
  validate_env_free(&e);
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
  validate_add_edges_and_host_funcs_tests(tc);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
