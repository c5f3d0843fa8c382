/* What the two files of the record suite share: test_record.c (the "kinds"
 * and "buffers" test cases, the suite and main) and test_record_handles.c (the
 * "handles" test case), through record_support.c: calls recorded on a chosen
 * communicator, random calls with buffers of their own, and the checks of what
 * the graph stored. */
#ifndef CG_TEST_RECORD_SUPPORT_H
#define CG_TEST_RECORD_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "graph_view.h"
#include "test_support.h"

typedef cg_test_call_t call_t;

/* Records `k` on `c`, whatever k->comm is. */
cg_status_t record_on_comm(cg_node_t *out, cg_graph_t *g, cg_comm_t *c, const call_t *k);

/* cg_graph_stats bytes: what this rank contributes (graph.c node_bytes). */
size_t record_expected_bytes(cg_node_kind_t k, size_t count, cg_dtype_t dt, int size, int rank, int root);

/* Buffers handed out during one test, freed at its end. */
typedef struct pool {
  void *items[4096];
  size_t n;
} pool_t;

void record_pool_free(pool_t *p);
int record_rand_size(void);

/* A random call of kind `k` with its own buffers; the root is this rank half
 * of the time. */
call_t record_random_call(pool_t *p, cg_node_kind_t k, int size, int rank);

void record_check_node(const cg_graph_t *g, uint32_t index, const cg_comm_t *comm, const call_t *c);
void record_get_stats(cg_graph_stats_t *s, const cg_graph_t *g);

/* The edge to `node` in v has exactly `causes` (0 if there is none). */
int record_has_edge(const cg_edge_vec_t *v, uint32_t node, uint32_t causes);

/* Node `index` has exactly the predecessors want[0..n), with exactly those causes. */
void record_expect_preds(const cg_graph_t *g, uint32_t index, const cg_edge_t *want, uint32_t n);

/* Adds the "handles" test case to `s` (test_record_handles.c). */
void record_add_handles_tcase(Suite *s);

#endif
