/* A program outside the tree: records a small graph through the installed
 * headers and library and checks what it gets back. */
#include <commgraph.h>
#if CG_HAVE_CUDA
#include <commgraph/cuda.h> /* the package must carry the CUDA include path too */
#endif
#include <stdio.h>
#include <string.h>

int main(void) {
  cg_comm_t *comm = NULL;
  cg_graph_t *graph = NULL;
  float grads[16] = {0};
  cg_graph_stats_t stats;
  int failed = 1;
  if (cg_comm_create_offline(&comm, 0, 2) != CG_SUCCESS || cg_graph_create(&graph, NULL) != CG_SUCCESS) goto out;
  if (cg_allreduce(NULL, graph, comm, grads, grads, 16, CG_FLOAT32, CG_SUM) != CG_SUCCESS) goto out;
  if (cg_allreduce(NULL, graph, comm, grads, grads + 1, 16, CG_FLOAT32, CG_SUM) != CG_ERR_ALIAS) goto out;
  if (strstr(cg_error_last(), "node #1") == NULL) goto out;
  if (cg_graph_stats(&stats, graph) != CG_SUCCESS || stats.nodes != 1) goto out;
  printf("consumer: commgraph %s, %zu node, %s\n", CG_VERSION_STRING, stats.nodes, cg_status_string(CG_ERR_ALIAS));
  failed = 0;
out:
  if (failed) fprintf(stderr, "consumer: unexpected result: %s\n", cg_error_last());
  cg_graph_destroy(graph);
  cg_comm_destroy(comm);
  return failed;
}
