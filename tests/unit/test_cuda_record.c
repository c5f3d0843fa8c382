/* Recording the CUDA-typed nodes without a GPU: event nodes only keep their
 * handle, so made-up handle values are enough to check fences, declared
 * accesses and argument errors. Child graphs need a device: tests/gpu. */
#include <string.h>

#include "commgraph/cuda.h"
#include "graph_view.h"
#include "test_support.h"

static cudaEvent_t fake_event(uintptr_t value) { return (cudaEvent_t)value; }

/* Causes of the edge from -> to, 0 if there is none. */
static uint32_t causes_of(const cg_graph_t *g, cg_node_t from, cg_node_t to) {
  const cg_edge_vec_t *preds = &cg_graph_node(g, to.index)->preds;
  for (uint32_t e = 0; e < preds->len; e++)
    if (preds->items[e].node == from.index) return preds->items[e].causes;
  return 0;
}

START_TEST(cuda_record__event_nodes_are_fences_by_default) {
  cg_comm_t *comm;
  cg_graph_t *g;
  float a[32], b[32];
  cg_node_t n0, wait, n2, rec, n4;
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 0, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(&n0, g, comm, a, a, 32, CG_FLOAT32, CG_SUM));
  ck_assert_cg_ok(cg_event_wait(&wait, g, fake_event(0x1000), NULL));
  ck_assert_cg_ok(cg_allreduce(&n2, g, comm, b, b, 32, CG_FLOAT32, CG_SUM));
  ck_assert_cg_ok(cg_event_record(&rec, g, fake_event(0x2000), NULL));
  ck_assert_cg_ok(cg_barrier(&n4, g, comm));
  const cg_node_rec_t *w = cg_graph_node(g, wait.index), *r = cg_graph_node(g, rec.index);
  ck_assert_int_eq(w->kind, CG_NODE_EVENT_WAIT);
  ck_assert_int_eq(r->kind, CG_NODE_EVENT_RECORD);
  ck_assert_ptr_eq(w->user_object, (void *)0x1000);
  ck_assert_ptr_eq(r->user_object, (void *)0x2000);
  ck_assert(w->is_fence && r->is_fence);
  /* chain of fences: n0 -> wait -> n2 -> record -> barrier; the collectives on
   * comm also follow each other directly (comm-order edges), the events, which
   * have no communicator, get none */
  ck_assert_int_eq(w->preds.len, 1);
  ck_assert_uint_eq(causes_of(g, n0, wait), CG_EDGE_FENCE);
  ck_assert_int_eq(cg_graph_node(g, n2.index)->preds.len, 2);
  ck_assert_uint_eq(causes_of(g, n0, n2), CG_EDGE_COMM_ORDER);
  ck_assert_uint_eq(causes_of(g, wait, n2), CG_EDGE_FENCE);
  ck_assert_int_eq(r->preds.len, 1);
  ck_assert_uint_eq(causes_of(g, n2, rec), CG_EDGE_FENCE);
  ck_assert_int_eq(cg_graph_node(g, n4.index)->preds.len, 2);
  ck_assert_uint_eq(causes_of(g, n2, n4), CG_EDGE_COMM_ORDER);
  ck_assert_uint_eq(causes_of(g, rec, n4), CG_EDGE_FENCE);
  cg_graph_stats_t st;
  ck_assert_cg_ok(cg_graph_stats(&st, g));
  ck_assert_uint_eq(st.edges, 6);
  ck_assert_uint_eq(st.fence_edges, 4);
  ck_assert_uint_eq(st.comm_order_edges, 2);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
}
END_TEST

START_TEST(cuda_record__event_with_declared_access_gets_only_hazard_edges) {
  cg_comm_t *comm;
  cg_graph_t *g;
  float a[32], b[32];
  cg_node_t n0, n1, rec;
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 1, 2));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(&n0, g, comm, a, a, 32, CG_FLOAT32, CG_SUM));
  ck_assert_cg_ok(cg_allreduce(&n1, g, comm, b, b, 32, CG_FLOAT32, CG_SUM));
  cg_range_t reads[] = {{b, sizeof b}};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = reads;
  access.n_reads = 1;
  ck_assert_cg_ok(cg_event_record(&rec, g, fake_event(0x3000), &access));
  const cg_node_rec_t *r = cg_graph_node(g, rec.index);
  ck_assert(!r->is_fence);
  ck_assert_int_eq(r->preds.len, 1);
  ck_assert_uint_eq(causes_of(g, n1, rec), CG_EDGE_RAW); /* no communicator: no comm-order edge */
  ck_assert_int_eq(cg_graph_node(g, n1.index)->preds.len, 1);
  ck_assert_uint_eq(causes_of(g, n0, n1), CG_EDGE_COMM_ORDER);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
}
END_TEST

START_TEST(cuda_record__null_handles_are_rejected_and_change_nothing) {
  cg_graph_t *g;
  cg_node_t n;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_status(cg_event_wait(&n, g, NULL, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "cg_event_wait"));
  ck_assert_cg_status(cg_event_record(&n, NULL, fake_event(1), NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_child_graph(&n, g, NULL, NULL), CG_ERR_INVALID_ARGUMENT);
  cg_access_t bad = CG_ACCESS_INIT;
  bad.size = 3;
  ck_assert_cg_status(cg_event_record(&n, g, fake_event(1), &bad), CG_ERR_INVALID_ARGUMENT);
  cg_graph_stats_t st;
  ck_assert_cg_ok(cg_graph_stats(&st, g));
  ck_assert_uint_eq(st.nodes, 0);
  cg_graph_destroy(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_record");
  TCase *tc = tcase_create("cuda_record");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, cuda_record__event_nodes_are_fences_by_default);
  tcase_add_test(tc, cuda_record__event_with_declared_access_gets_only_hazard_edges);
  tcase_add_test(tc, cuda_record__null_handles_are_rejected_and_change_nothing);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
