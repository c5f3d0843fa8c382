/* DOT export of a recorded graph: labels, edge styles, escaping, and Graphviz
 * accepting the output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

#ifndef CG_DOT_EXECUTABLE
#define CG_DOT_EXECUTABLE ""
#endif

/* The line of `text` that starts with `prefix`, up to its end. */
static char *line_starting(const char *text, const char *prefix) {
  static char line[1024];
  size_t n = strlen(prefix);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, prefix, n) != 0) continue;
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len >= sizeof line) len = sizeof line - 1;
    memcpy(line, p, len);
    line[len] = '\0';
    return line;
  }
  return NULL;
}


typedef struct sample {
  cg_comm_t *comm;
  cg_graph_t *graph;
  float grads[64], params[64], halo[8];
  cg_node_t reduce, bcast, host, send, recv, barrier, late;
} sample_t;

static void build_sample(sample_t *s, const char *node_name) {
  cg_graph_opts_t o = CG_GRAPH_OPTS_INIT;
  o.name = "iteration \"one\"";
  ck_assert_cg_ok(cg_comm_create_offline(&s->comm, 1, 4));
  ck_assert_cg_ok(cg_graph_create(&s->graph, &o));
  ck_assert_cg_ok(cg_allreduce(&s->reduce, s->graph, s->comm, s->grads, s->grads, 64, CG_FLOAT32, CG_AVG));
  ck_assert_cg_ok(cg_node_name(s->graph, s->reduce, node_name));
  ck_assert_cg_ok(cg_broadcast(&s->bcast, s->graph, s->comm, NULL, s->params, 64, CG_BFLOAT16, 2));
  cg_range_t reads[] = {{s->grads, sizeof s->grads}};
  cg_range_t writes[] = {{s->params, sizeof s->params}};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = reads;
  access.n_reads = 1;
  access.writes = writes;
  access.n_writes = 1;
  ck_assert_cg_ok(cg_host_func(&s->host, s->graph, cg_test_noop, NULL, &access));
  ck_assert_cg_ok(cg_send(&s->send, s->graph, s->comm, s->params, 8, CG_FLOAT32, 2));
  ck_assert_cg_ok(cg_recv(&s->recv, s->graph, s->comm, s->halo, 8, CG_FLOAT32, 0));
  ck_assert_cg_ok(cg_barrier(&s->barrier, s->graph, s->comm));
  ck_assert_cg_ok(cg_reduce(&s->late, s->graph, s->comm, s->halo, NULL, 8, CG_INT64, CG_MAX, 3));
  ck_assert_cg_ok(cg_depend(s->graph, s->send, s->recv));
}

static void free_sample(sample_t *s) {
  cg_graph_destroy(s->graph);
  cg_comm_destroy(s->comm);
}

START_TEST(dot__node_labels_carry_kind_count_dtype_op_root_and_name) {
  sample_t s;
  build_sample(&s, "grad \"fc\"\\bias");
  char *text = cg_test_dot_text(s.graph);
  ck_assert_ptr_nonnull(strstr(text, "digraph \"iteration \\\"one\\\"\" {"));
  char *line = line_starting(text, "  n0 [");
  ck_assert_ptr_nonnull(line);
  ck_assert_ptr_nonnull(strstr(line, "#0 allreduce"));
  ck_assert_ptr_nonnull(strstr(line, "grad \\\"fc\\\"\\\\bias"));
  ck_assert_ptr_nonnull(strstr(line, "64 x float32 avg"));
  ck_assert_ptr_nonnull(strstr(line, "rank 1 of 4"));
  line = line_starting(text, "  n1 [");
  ck_assert_ptr_nonnull(strstr(line, "broadcast"));
  ck_assert_ptr_nonnull(strstr(line, "bfloat16"));
  ck_assert_ptr_nonnull(strstr(line, "root 2"));
  ck_assert_ptr_null(strstr(line, " sum"));
  line = line_starting(text, "  n2 [");
  ck_assert_ptr_nonnull(strstr(line, "host_func"));
  ck_assert_ptr_nonnull(strstr(line, "shape=component"));
  ck_assert_ptr_nonnull(strstr(line_starting(text, "  n3 ["), "to 2"));
  ck_assert_ptr_nonnull(strstr(line_starting(text, "  n4 ["), "from 0"));
  line = line_starting(text, "  n5 [");
  ck_assert_ptr_nonnull(strstr(line, "barrier"));
  ck_assert_ptr_nonnull(strstr(line, "fence"));
  line = line_starting(text, "  n6 [");
  ck_assert_ptr_nonnull(strstr(line, "8 x int64 max"));
  ck_assert_ptr_nonnull(strstr(line, "root 3"));
  free(text);
  free_sample(&s);
}
END_TEST

/* Every edge line of the sample: all on one communicator, so besides the
 * hazards, the fence and the explicit edge, comm-order edges chain the
 * collectives (0 -> 1, 5 -> 6), make the send and the receive follow the
 * broadcast (1 -> 3, 1 -> 4) and the barrier follow them (merged with its fence
 * edges 3 -> 5, 4 -> 5). */
START_TEST(dot__edges_drawn_by_cause) {
  sample_t s;
  build_sample(&s, "grads");
  char *text = cg_test_dot_text(s.graph);
  /* order only: thin steelblue, never labelled */
  static const char *const order_only[] = {"  n0 -> n1 ", "  n1 -> n3 ", "  n1 -> n4 ", "  n5 -> n6 "};
  for (size_t i = 0; i < sizeof order_only / sizeof order_only[0]; i++) {
    char *line = line_starting(text, order_only[i]);
    ck_assert_msg(line != NULL, "no edge '%s'", order_only[i]);
    ck_assert_str_eq(strstr(line, "["), "[style=solid, color=steelblue, arrowsize=0.6];");
  }
  /* host func reads grads after the allreduce wrote them */
  char *line = line_starting(text, "  n0 -> n2 ");
  ck_assert_ptr_nonnull(line);
  ck_assert_str_eq(strstr(line, "["), "[style=dashed, color=gray40, label=\"raw\"];");
  /* host func writes params the broadcast wrote */
  line = line_starting(text, "  n1 -> n2 ");
  ck_assert_ptr_nonnull(line);
  ck_assert_str_eq(strstr(line, "["), "[style=dashed, color=gray40, label=\"waw\"];");
  /* the send reads params after the host func wrote them; nothing explicit */
  line = line_starting(text, "  n2 -> n3 ");
  ck_assert_ptr_nonnull(line);
  ck_assert_str_eq(strstr(line, "["), "[style=dashed, color=gray40, label=\"raw\"];");
  /* explicit only: solid black, no label */
  line = line_starting(text, "  n3 -> n4 ");
  ck_assert_ptr_nonnull(line);
  ck_assert_str_eq(strstr(line, "["), "[style=solid];");
  /* the barrier is a fence after the sinks before it (the send and the
   * receive, which the communicator's order puts before it too): dotted,
   * labelled fence only */
  line = line_starting(text, "  n3 -> n5 ");
  ck_assert_ptr_nonnull(line);
  ck_assert_str_eq(strstr(line, "["), "[style=dotted, label=\"fence\"];");
  line = line_starting(text, "  n4 -> n5 ");
  ck_assert_ptr_nonnull(line);
  ck_assert_str_eq(strstr(line, "["), "[style=dotted, label=\"fence\"];");
  /* nothing else: count arrows */
  int arrows = 0, blue = 0;
  for (const char *p = text; (p = strstr(p, " -> ")); p++) arrows++;
  for (const char *p = text; (p = strstr(p, "steelblue")); p++) blue++;
  ck_assert_int_eq(arrows, 10);
  ck_assert_int_eq(blue, 4);
  cg_graph_stats_t st;
  ck_assert_cg_ok(cg_graph_stats(&st, s.graph));
  ck_assert_int_eq(arrows, (int)st.edges);
  ck_assert_uint_eq(st.explicit_edges, 1);
  ck_assert_uint_eq(st.raw_edges, 2);
  ck_assert_uint_eq(st.war_edges, 0);
  ck_assert_uint_eq(st.waw_edges, 1);
  ck_assert_uint_eq(st.fence_edges, 2);
  ck_assert_uint_eq(st.comm_order_edges, 6);
  free(text);
  free_sample(&s);
}
END_TEST

START_TEST(dot__explicit_edge_over_hazard_is_solid_and_labelled) {
  sample_t s;
  build_sample(&s, "grads");
  ck_assert_cg_ok(cg_depend(s.graph, s.reduce, s.host));  /* over raw */
  ck_assert_cg_ok(cg_depend(s.graph, s.reduce, s.bcast)); /* over comm order */
  ck_assert_cg_ok(cg_depend(s.graph, s.recv, s.barrier)); /* over fence and comm order */
  char *text = cg_test_dot_text(s.graph);
  char *line = line_starting(text, "  n0 -> n2 ");
  ck_assert_ptr_nonnull(line);
  ck_assert_str_eq(strstr(line, "["), "[style=solid, label=\"raw\"];");
  /* the comm-order cause is neither drawn nor labelled once another cause is there */
  line = line_starting(text, "  n0 -> n1 ");
  ck_assert_ptr_nonnull(line);
  ck_assert_str_eq(strstr(line, "["), "[style=solid];");
  line = line_starting(text, "  n4 -> n5 ");
  ck_assert_ptr_nonnull(line);
  ck_assert_str_eq(strstr(line, "["), "[style=solid, label=\"fence\"];");
  int arrows = 0, blue = 0;
  for (const char *p = text; (p = strstr(p, " -> ")); p++) arrows++;
  for (const char *p = text; (p = strstr(p, "steelblue")); p++) blue++;
  ck_assert_int_eq(arrows, 10); /* no new edges */
  ck_assert_int_eq(blue, 3);
  free(text);
  free_sample(&s);
}
END_TEST

START_TEST(dot__graphviz_parses_output) {
  ck_assert_msg(CG_DOT_EXECUTABLE[0], "Graphviz 'dot' was not found at configure time (install graphviz)");
  sample_t s;
  build_sample(&s, "odd \"name\" with \\ and\nnewline");
  char dot_path[] = "/tmp/cg_test_dot_XXXXXX";
  int fd = mkstemp(dot_path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  ck_assert_cg_ok(cg_graph_write_dot(s.graph, f));
  fclose(f);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "'%s' -Tsvg '%s' -o '%s.svg'", CG_DOT_EXECUTABLE, dot_path, dot_path);
  ck_assert_int_eq(system(cmd), 0);
  char svg_path[64];
  snprintf(svg_path, sizeof svg_path, "%s.svg", dot_path);
  FILE *svg = fopen(svg_path, "r");
  ck_assert_ptr_nonnull(svg);
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, svg);
  buf[n] = '\0';
  fclose(svg);
  ck_assert_ptr_nonnull(strstr(buf, "<svg"));
  remove(svg_path);
  remove(dot_path);
  free_sample(&s);
}
END_TEST

START_TEST(dot__write_errors_and_null_arguments) {
  sample_t s;
  build_sample(&s, "grads");
  ck_assert_cg_status(cg_graph_write_dot(NULL, stdout), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_graph_write_dot(s.graph, NULL), CG_ERR_INVALID_ARGUMENT);
  FILE *full = fopen("/dev/full", "w");
  if (full) {
    ck_assert_cg_status(cg_graph_write_dot(s.graph, full), CG_ERR_IO);
    fclose(full);
  }
  free_sample(&s);
}
END_TEST

START_TEST(dot__large_graphs_ask_graphviz_for_a_fast_layout) {
  /* an order chain of all-reduces all feeding one host function: without the
   * layout hints Graphviz spends minutes on it */
  cg_comm_t *comm;
  cg_graph_t *g;
  static float grads[100][16];
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 0, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int i = 0; i < 64; i++) ck_assert_cg_ok(cg_allreduce(NULL, g, comm, grads[i], grads[i], 16, CG_FLOAT32, CG_SUM));
  char *small = cg_test_dot_text(g);
  ck_assert_ptr_null(strstr(small, "splines=line"));
  for (int i = 64; i < 100; i++) ck_assert_cg_ok(cg_allreduce(NULL, g, comm, grads[i], grads[i], 16, CG_FLOAT32, CG_SUM));
  cg_range_t reads[] = {{grads, sizeof grads}};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = reads;
  access.n_reads = 1;
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &access));
  char *large = cg_test_dot_text(g);
  ck_assert_ptr_nonnull(strstr(large, "  splines=line;\n  nslimit=1;\n  mclimit=0.1;\n"));
  free(small);
  free(large);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("dot");
  TCase *tc = tcase_create("dot");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, dot__node_labels_carry_kind_count_dtype_op_root_and_name);
  tcase_add_test(tc, dot__edges_drawn_by_cause);
  tcase_add_test(tc, dot__explicit_edge_over_hazard_is_solid_and_labelled);
  tcase_add_test(tc, dot__graphviz_parses_output);
  tcase_add_test(tc, dot__large_graphs_ask_graphviz_for_a_fast_layout);
  tcase_add_test(tc, dot__write_errors_and_null_arguments);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
