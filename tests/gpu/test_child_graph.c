/* Child-graph nodes on a real GPU: the user's CUDA graph is cloned at record
 * time, the clone survives the user's copy, runs, and is released with the
 * commgraph graph. Skips (exit 77, reason printed) without a GPU. */
#include <stdio.h>
#include <stdlib.h>

#include "commgraph/cuda.h"
#include "graph_view.h"
#include "test_support.h"

/* A user graph of two memset nodes, the second after the first. */
static cudaGraph_t memset_graph(unsigned *dev, size_t n, unsigned first, unsigned second) {
  cudaGraph_t graph;
  cudaGraphNode_t a, b;
  CUDA_OK(cudaGraphCreate(&graph, 0));
  struct cudaMemsetParams p = {.dst = dev, .value = first, .elementSize = 4, .width = n, .height = 1};
  CUDA_OK(cudaGraphAddMemsetNode(&a, graph, NULL, 0, &p));
  p.value = second;
  CUDA_OK(cudaGraphAddMemsetNode(&b, graph, &a, 1, &p));
  return graph;
}

START_TEST(gpu_child_graph__clone_outlives_user_graph_and_runs) {
  const size_t n = 1000;
  unsigned *dev, host[1000];
  CUDA_OK(cudaMalloc((void **)&dev, n * sizeof *dev));
  cudaGraph_t user = memset_graph(dev, n, 7, 0xC0FFEEu);
  cg_graph_t *g;
  cg_node_t node;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_child_graph(&node, g, user, NULL));
  CUDA_OK(cudaGraphDestroy(user));

  const cg_node_rec_t *rec = cg_graph_node(g, node.index);
  ck_assert_int_eq(rec->kind, CG_NODE_CHILD_GRAPH);
  ck_assert(rec->is_fence);
  cudaGraph_t clone = (cudaGraph_t)rec->user_object;
  size_t count = 0;
  CUDA_OK(cudaGraphGetNodes(clone, NULL, &count));
  ck_assert_uint_eq(count, 2);

  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, clone, 0));
  CUDA_OK(cudaMemset(dev, 0, n * sizeof *dev));
  CUDA_OK(cudaGraphLaunch(exec, 0));
  CUDA_OK(cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) ck_assert_uint_eq(host[i], 0xC0FFEEu);
  CUDA_OK(cudaGraphExecDestroy(exec));
  cg_graph_destroy(g); /* releases the clone */
  CUDA_OK(cudaFree(dev));
}
END_TEST

START_TEST(gpu_child_graph__declared_access_orders_against_collectives) {
  const size_t n = 256;
  float *grads;
  CUDA_OK(cudaMalloc((void **)&grads, n * sizeof *grads));
  cudaGraph_t user = memset_graph((unsigned *)grads, n, 0, 0);
  cg_comm_t *comm;
  cg_graph_t *g;
  cg_node_t reduce, child;
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 0, 4));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  /* the child graph (a stand-in for backward) writes the gradients ... */
  cg_range_t writes[] = {{grads, n * sizeof *grads}};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.writes = writes;
  access.n_writes = 1;
  ck_assert_cg_ok(cg_child_graph(&child, g, user, &access));
  /* ... and the allreduce of them must follow it */
  ck_assert_cg_ok(cg_allreduce(&reduce, g, comm, grads, grads, n, CG_FLOAT32, CG_SUM));
  const cg_node_rec_t *r = cg_graph_node(g, reduce.index);
  ck_assert_int_eq(r->preds.len, 1);
  ck_assert_uint_eq(r->preds.items[0].node, child.index);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
  CUDA_OK(cudaGraphDestroy(user));
  CUDA_OK(cudaFree(grads));
}
END_TEST

START_TEST(gpu_child_graph__invalid_graph_is_rejected) {
  cg_graph_t *g;
  cg_node_t node;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_status(cg_child_graph(&node, g, NULL, NULL), CG_ERR_INVALID_ARGUMENT);
  cg_graph_stats_t st;
  ck_assert_cg_ok(cg_graph_stats(&st, g));
  ck_assert_uint_eq(st.nodes, 0);
  cg_graph_destroy(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("gpu_child_graph");
  TCase *tc = tcase_create("gpu_child_graph");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, gpu_child_graph__clone_outlives_user_graph_and_runs);
  tcase_add_test(tc, gpu_child_graph__declared_access_orders_against_collectives);
  tcase_add_test(tc, gpu_child_graph__invalid_graph_is_rejected);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_gpu_main(suite(), "gpu_child_graph"); }
