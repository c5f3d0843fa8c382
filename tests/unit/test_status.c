/* Status codes, per-thread error detail, enumeration names, offline
 * communicators and graph creation. */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "graph_internal.h"
#include "test_support.h"

/* ---- status codes */

typedef struct status_entry {
  cg_status_t code;
  int value;
  const char *text;
} status_entry_t;

#define CG_TEST_STATUS_ENTRY(name, value, text) {name, value, text},
static const status_entry_t status_table[] = {CG_STATUS_LIST(CG_TEST_STATUS_ENTRY)};
#undef CG_TEST_STATUS_ENTRY
#define N_STATUS (sizeof status_table / sizeof status_table[0])

START_TEST(status__string_matches_list) {
  ck_assert_uint_eq(N_STATUS, 16);
  for (size_t i = 0; i < N_STATUS; i++) {
    const status_entry_t *e = &status_table[i];
    ck_assert_int_eq((int)e->code, e->value);
    ck_assert_int_eq(e->value, (int)i); /* the list is dense, from 0 */
    const char *s = cg_status_string(e->code);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_gt(strlen(s), 0);
    ck_assert_str_eq(s, e->text);
    ck_assert_str_ne(s, "unknown status");
    /* static text: the same pointer each time */
    ck_assert_ptr_eq(cg_status_string(e->code), s);
  }
  ck_assert_str_eq(cg_status_string(CG_SUCCESS), "success");
  ck_assert_str_eq(cg_status_string(CG_ERR_CYCLE), "edge would create a cycle");
  ck_assert_str_eq(cg_status_string(CG_ERR_INTERNAL), "internal error");
}
END_TEST

START_TEST(status__strings_distinct) {
  for (size_t i = 0; i < N_STATUS; i++)
    for (size_t j = i + 1; j < N_STATUS; j++)
      ck_assert_str_ne(cg_status_string(status_table[i].code), cg_status_string(status_table[j].code));
}
END_TEST

START_TEST(status__unknown_out_of_range) {
  cg_test_reseed(3);
  const int bad[] = {-1, -2, 16, 17, 100, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_str_eq(cg_status_string((cg_status_t)bad[i]), "unknown status");
  for (int i = 0; i < 100; i++) {
    int v = 16 + (int)cg_test_below(1000000);
    ck_assert_str_eq(cg_status_string((cg_status_t)v), "unknown status");
  }
}
END_TEST

/* ---- per-thread error detail */

typedef struct thread_probe {
  char before[512];
  char after[512];
  cg_status_t status;
} thread_probe_t;

static int probe_thread(void *arg) {
  thread_probe_t *p = arg;
  snprintf(p->before, sizeof p->before, "%s", cg_error_last());
  p->status = cg_comm_create_offline(NULL, 0, 1);
  snprintf(p->after, sizeof p->after, "%s", cg_error_last());
  return 0;
}

START_TEST(status__error_last_empty_in_fresh_thread) {
  thread_probe_t probe;
  memset(&probe, 'x', sizeof probe);
  thrd_t t;
  ck_assert_int_eq(thrd_create(&t, probe_thread, &probe), thrd_success);
  ck_assert_int_eq(thrd_join(t, NULL), thrd_success);
  ck_assert_str_eq(probe.before, "");
  ck_assert_int_eq(probe.status, CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(probe.after, "cg_comm_create_offline"));
}
END_TEST

START_TEST(status__error_last_per_thread) {
  cg_comm_t *c = (cg_comm_t *)&c;
  ck_assert_cg_status(cg_comm_create_offline(&c, 7, 3), CG_ERR_OUT_OF_RANGE);
  ck_assert_ptr_eq(c, (cg_comm_t *)&c);
  char mine[512];
  snprintf(mine, sizeof mine, "%s", cg_error_last());
  ck_assert_ptr_nonnull(strstr(mine, "cg_comm_create_offline"));
  ck_assert_ptr_nonnull(strstr(mine, "7"));

  /* another thread sees none of it, and its failure does not show here */
  thread_probe_t probe;
  thrd_t t;
  ck_assert_int_eq(thrd_create(&t, probe_thread, &probe), thrd_success);
  ck_assert_int_eq(thrd_join(t, NULL), thrd_success);
  ck_assert_str_eq(probe.before, "");
  ck_assert_str_ne(probe.after, mine);
  ck_assert_ptr_nonnull(strstr(probe.after, "NULL out"));
  ck_assert_str_eq(cg_error_last(), mine);

  /* a successful call leaves the detail alone; the next failure replaces it */
  cg_comm_t *ok = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&ok, 0, 1));
  ck_assert_str_eq(cg_error_last(), mine);
  ck_assert_cg_status(cg_comm_create_offline(&c, 0, 0), CG_ERR_INVALID_ARGUMENT);
  ck_assert_str_ne(cg_error_last(), mine);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "size 0"));
  cg_comm_destroy(ok);
}
END_TEST

START_TEST(status__error_last_one_line_naming_function) {
  ck_assert_cg_status(cg_graph_create(NULL, NULL), CG_ERR_INVALID_ARGUMENT);
  const char *msg = cg_error_last();
  ck_assert_uint_gt(strlen(msg), 0);
  ck_assert_ptr_nonnull(strstr(msg, "cg_graph_create"));
  ck_assert_ptr_null(strchr(msg, '\n')); /* one line */
}
END_TEST

/* ---- names of enumerations */

typedef struct dtype_entry {
  cg_dtype_t dtype;
  size_t bytes;
  const char *text;
} dtype_entry_t;

START_TEST(status__dtype_size_and_name) {
  static const dtype_entry_t expected[] = {
      {CG_INT8, 1, "int8"},       {CG_UINT8, 1, "uint8"},     {CG_INT32, 4, "int32"},
      {CG_UINT32, 4, "uint32"},   {CG_INT64, 8, "int64"},     {CG_UINT64, 8, "uint64"},
      {CG_FLOAT16, 2, "float16"}, {CG_BFLOAT16, 2, "bfloat16"}, {CG_FLOAT32, 4, "float32"},
      {CG_FLOAT64, 8, "float64"}};
  ck_assert_int_eq(CG_DTYPE_COUNT, 10);
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
    ck_assert_int_eq((int)expected[i].dtype, (int)i);
    ck_assert_uint_eq(cg_dtype_size(expected[i].dtype), expected[i].bytes);
    ck_assert_str_eq(cg_dtype_name(expected[i].dtype), expected[i].text);
    for (size_t j = 0; j < i; j++) ck_assert_str_ne(cg_dtype_name(expected[j].dtype), expected[i].text);
  }
#define CG_TEST_DTYPE_CHECK(name, bytes, text) \
  ck_assert_uint_eq(cg_dtype_size(name), bytes); \
  ck_assert_str_eq(cg_dtype_name(name), text);
  CG_DTYPE_LIST(CG_TEST_DTYPE_CHECK)
#undef CG_TEST_DTYPE_CHECK
  const int bad[] = {CG_DTYPE_COUNT, CG_DTYPE_COUNT + 1, -1, 1000, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_uint_eq(cg_dtype_size((cg_dtype_t)bad[i]), 0);
    ck_assert_str_eq(cg_dtype_name((cg_dtype_t)bad[i]), "unknown");
  }
}
END_TEST

START_TEST(status__redop_name) {
  static const char *expected[] = {"sum", "prod", "min", "max", "avg"};
  ck_assert_int_eq(CG_REDOP_COUNT, 5);
  ck_assert_int_eq(CG_SUM, 0);
  ck_assert_int_eq(CG_AVG, 4);
  for (int i = 0; i < CG_REDOP_COUNT; i++) ck_assert_str_eq(cg_redop_name((cg_redop_t)i), expected[i]);
#define CG_TEST_REDOP_CHECK(name, text) ck_assert_str_eq(cg_redop_name(name), text);
  CG_REDOP_LIST(CG_TEST_REDOP_CHECK)
#undef CG_TEST_REDOP_CHECK
  const int bad[] = {CG_REDOP_COUNT, -1, 77, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) ck_assert_str_eq(cg_redop_name((cg_redop_t)bad[i]), "unknown");
}
END_TEST

START_TEST(status__node_kind_name) {
  static const char *expected[] = {"allreduce", "broadcast", "reduce",  "allgather", "reduce_scatter",
                                   "alltoall",  "gather",    "scatter", "send",      "recv",
                                   "barrier",   "host_func", "child_graph", "event_wait", "event_record"};
  ck_assert_int_eq(CG_NODE_KIND_COUNT, 15);
  for (int i = 0; i < CG_NODE_KIND_COUNT; i++) {
    ck_assert_str_eq(cg_node_kind_name((cg_node_kind_t)i), expected[i]);
    for (int j = 0; j < i; j++) ck_assert_str_ne(cg_node_kind_name((cg_node_kind_t)j), expected[i]);
  }
#define CG_TEST_KIND_CHECK(name, text) ck_assert_str_eq(cg_node_kind_name(name), text);
  CG_NODE_KIND_LIST(CG_TEST_KIND_CHECK)
#undef CG_TEST_KIND_CHECK
  const int bad[] = {CG_NODE_KIND_COUNT, -1, 99, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_str_eq(cg_node_kind_name((cg_node_kind_t)bad[i]), "unknown");
}
END_TEST

/* ---- offline communicators */

START_TEST(status__comm_offline_valid) {
  cg_test_reseed(11);
  for (int trial = 0; trial < 200; trial++) {
    int size = 1 + (int)cg_test_below(trial < 100 ? 16 : 100000);
    int rank = (int)cg_test_below((uint64_t)size);
    if (trial == 0) rank = 0, size = 1;
    if (trial == 1) rank = size - 1;
    cg_comm_t *c = NULL;
    ck_assert_cg_ok(cg_comm_create_offline(&c, rank, size));
    ck_assert_ptr_nonnull(c);
    int r = -7, s = -7;
    const char *backend = NULL;
    ck_assert_cg_ok(cg_comm_rank(&r, c));
    ck_assert_cg_ok(cg_comm_size(&s, c));
    ck_assert_cg_ok(cg_comm_backend_name(&backend, c));
    ck_assert_int_eq(r, rank);
    ck_assert_int_eq(s, size);
    ck_assert_str_eq(backend, "offline");
    cg_comm_destroy(c);
  }
  cg_comm_t *big = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&big, INT_MAX - 1, INT_MAX));
  int r = 0;
  ck_assert_cg_ok(cg_comm_rank(&r, big));
  ck_assert_int_eq(r, INT_MAX - 1);
  cg_comm_destroy(big);
}
END_TEST

START_TEST(status__comm_offline_distinct_objects) {
  cg_comm_t *a = NULL, *b = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&a, 0, 2));
  ck_assert_cg_ok(cg_comm_create_offline(&b, 0, 2));
  ck_assert_ptr_ne(a, b);
  ck_assert_uint_ne(a->serial, b->serial);
  ck_assert_int_eq(atomic_load(&a->refs), 1);
  cg_comm_destroy(a);
  cg_comm_destroy(b);
}
END_TEST

START_TEST(status__comm_offline_invalid) {
  cg_test_reseed(12);
  cg_comm_t *sentinel = (cg_comm_t *)&sentinel;
  cg_comm_t *c = sentinel;
  const int bad_sizes[] = {0, -1, -2, INT_MIN};
  for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
    ck_assert_cg_status(cg_comm_create_offline(&c, 0, bad_sizes[i]), CG_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(c, sentinel);
    ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_comm_create_offline"));
  }
  for (int trial = 0; trial < 100; trial++) {
    int size = 1 + (int)cg_test_below(64);
    int rank;
    switch (trial % 4) {
      case 0: rank = -1; break;
      case 1: rank = size; break;
      case 2: rank = size + 1 + (int)cg_test_below(1000); break;
      default: rank = -2 - (int)cg_test_below(1000); break;
    }
    ck_assert_cg_status(cg_comm_create_offline(&c, rank, size), CG_ERR_OUT_OF_RANGE);
    ck_assert_ptr_eq(c, sentinel);
    ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_comm_create_offline"));
  }
  ck_assert_cg_status(cg_comm_create_offline(&c, INT_MAX, INT_MAX), CG_ERR_OUT_OF_RANGE);
  ck_assert_cg_status(cg_comm_create_offline(&c, INT_MIN, 4), CG_ERR_OUT_OF_RANGE);
  ck_assert_ptr_eq(c, sentinel);
  ck_assert_cg_status(cg_comm_create_offline(NULL, 0, 1), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_comm_create_offline"));
}
END_TEST

START_TEST(status__comm_accessors_reject_null) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&c, 2, 5));
  int v = 42;
  const char *name = "untouched";
  ck_assert_cg_status(cg_comm_rank(NULL, c), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_comm_rank"));
  ck_assert_cg_status(cg_comm_rank(&v, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_comm_rank"));
  ck_assert_cg_status(cg_comm_size(NULL, c), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_comm_size(&v, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_comm_size"));
  ck_assert_int_eq(v, 42);
  ck_assert_cg_status(cg_comm_backend_name(NULL, c), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_comm_backend_name(&name, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_comm_backend_name"));
  ck_assert_str_eq(name, "untouched");
  cg_comm_destroy(c);
  cg_comm_destroy(NULL);
}
END_TEST

/* ---- graph creation */

static void assert_empty_graph(const cg_graph_t *g) {
  cg_graph_stats_t s, zero;
  memset(&s, 0xff, sizeof s);
  memset(&zero, 0, sizeof zero);
  ck_assert_cg_ok(cg_graph_stats(&s, g));
  ck_assert_int_eq(memcmp(&s, &zero, sizeof s), 0);
  ck_assert_uint_ne(g->serial, 0);
  ck_assert_uint_eq(g->n_nodes, 0);
}

START_TEST(status__graph_create_null_opts) {
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_ptr_nonnull(g);
  assert_empty_graph(g);
  ck_assert_ptr_null(g->name);
  char *dot = cg_test_dot_text(g);
  ck_assert_ptr_nonnull(strstr(dot, "digraph \"commgraph\" {"));
  free(dot);
  cg_graph_destroy(g);
  cg_graph_destroy(NULL);
}
END_TEST

START_TEST(status__graph_create_with_name) {
  char name[32];
  snprintf(name, sizeof name, "step%d", 7);
  cg_graph_opts_t o = CG_GRAPH_OPTS_INIT;
  ck_assert_uint_eq(o.size, sizeof(cg_graph_opts_t));
  ck_assert_ptr_null(o.name);
  o.name = name;
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, &o));
  assert_empty_graph(g);
  name[0] = 'X'; /* the graph keeps its own copy */
  ck_assert_str_eq(g->name, "step7");
  char *dot = cg_test_dot_text(g);
  ck_assert_ptr_nonnull(strstr(dot, "digraph \"step7\" {"));
  free(dot);

  /* the name shows in error details */
  ck_assert_cg_status(cg_allreduce(NULL, g, NULL, NULL, NULL, 0, CG_FLOAT32, CG_SUM), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "step7"));

  /* CG_GRAPH_OPTS_INIT with name left NULL is the default */
  cg_graph_opts_t plain = CG_GRAPH_OPTS_INIT;
  cg_graph_t *h = NULL;
  ck_assert_cg_ok(cg_graph_create(&h, &plain));
  ck_assert_ptr_null(h->name);
  ck_assert_uint_ne(g->serial, h->serial);
  cg_graph_destroy(h);
  cg_graph_destroy(g);
}
END_TEST

START_TEST(status__graph_create_long_name_truncated) {
  char name[400];
  memset(name, 'a', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  name[254] = 'z';
  cg_graph_opts_t o = CG_GRAPH_OPTS_INIT;
  o.name = name;
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, &o));
  ck_assert_uint_eq(strlen(g->name), 255);
  ck_assert_int_eq(strncmp(g->name, name, 255), 0);
  cg_graph_destroy(g);
}
END_TEST

START_TEST(status__graph_create_rejects_wrong_opts_size) {
  cg_test_reseed(21);
  const size_t sizes[] = {0, 1, sizeof(cg_graph_opts_t) - 1, sizeof(cg_graph_opts_t) + 1,
                          sizeof(cg_graph_opts_t) + 8, SIZE_MAX};
  cg_graph_t *sentinel = (cg_graph_t *)&sentinel;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    cg_graph_opts_t o = CG_GRAPH_OPTS_INIT;
    o.size = sizes[i];
    o.name = "x";
    cg_graph_t *g = sentinel;
    ck_assert_cg_status(cg_graph_create(&g, &o), CG_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(g, sentinel);
    ck_assert_ptr_nonnull(strstr(cg_error_last(), "size"));
  }
  cg_graph_opts_t o = CG_GRAPH_OPTS_INIT;
  o.size = sizeof(cg_graph_opts_t) + 1 + cg_test_below(1000);
  cg_graph_t *g = sentinel;
  ck_assert_cg_status(cg_graph_create(&g, &o), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_eq(g, sentinel);
  ck_assert_cg_status(cg_graph_create(NULL, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_graph_create"));
}
END_TEST

START_TEST(status__graph_serials_distinct) {
  enum { N = 32 };
  cg_graph_t *g[N];
  for (int i = 0; i < N; i++) {
    ck_assert_cg_ok(cg_graph_create(&g[i], NULL));
    ck_assert_uint_ne(g[i]->serial, 0);
    for (int j = 0; j < i; j++) ck_assert_uint_ne(g[i]->serial, g[j]->serial);
  }
  for (int i = 0; i < N; i++) cg_graph_destroy(g[i]);
}
END_TEST

START_TEST(status__graph_inspection_rejects_null) {
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  cg_graph_stats_t s;
  ck_assert_cg_status(cg_graph_stats(NULL, g), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_graph_stats"));
  ck_assert_cg_status(cg_graph_stats(&s, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_graph_write_dot(NULL, stderr), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_graph_write_dot"));
  ck_assert_cg_status(cg_graph_write_dot(g, NULL), CG_ERR_INVALID_ARGUMENT);
  cg_graph_destroy(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("status");
  TCase *tc = tcase_create("status");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, status__string_matches_list);
  tcase_add_test(tc, status__strings_distinct);
  tcase_add_test(tc, status__unknown_out_of_range);
  tcase_add_test(tc, status__error_last_empty_in_fresh_thread);
  tcase_add_test(tc, status__error_last_per_thread);
  tcase_add_test(tc, status__error_last_one_line_naming_function);
  suite_add_tcase(s, tc);

  tc = tcase_create("names");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, status__dtype_size_and_name);
  tcase_add_test(tc, status__redop_name);
  tcase_add_test(tc, status__node_kind_name);
  suite_add_tcase(s, tc);

  tc = tcase_create("comm");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, status__comm_offline_valid);
  tcase_add_test(tc, status__comm_offline_distinct_objects);
  tcase_add_test(tc, status__comm_offline_invalid);
  tcase_add_test(tc, status__comm_accessors_reject_null);
  suite_add_tcase(s, tc);

  tc = tcase_create("graph");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, status__graph_create_null_opts);
  tcase_add_test(tc, status__graph_create_with_name);
  tcase_add_test(tc, status__graph_create_long_name_truncated);
  tcase_add_test(tc, status__graph_create_rejects_wrong_opts_size);
  tcase_add_test(tc, status__graph_serials_distinct);
  tcase_add_test(tc, status__graph_inspection_rejects_null);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
