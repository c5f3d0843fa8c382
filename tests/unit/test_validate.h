/* What the two files of the validate suite share: test_validate.c (the
 * environment below, the "arguments" test case, the suite and main) and
 * test_validate_edges.c (the "edges_and_host_funcs" test case: cg_depend,
 * node handles and host functions). */
#ifndef CG_TEST_VALIDATE_H
#define CG_TEST_VALIDATE_H

#include <stdint.h>

#include "graph_view.h"
#include "test_support.h"

typedef cg_test_call_t call_t;

/* cg_graph_stats of `g` into `s`, which must succeed. */
void validate_get_stats(cg_graph_stats_t *s, const cg_graph_t *g);

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

/* What validate_env_rejected expects the detail to name besides the function. */
enum { NEED_NODE = 1, NEED_RANK = 2 };

/* A fresh environment (reseeded with `salt`; `size` ranks, or 1..8 at random
 * when 0), and its release. */
void validate_env_init(env_t *e, uint64_t salt, int size);
void validate_env_free(env_t *e);
/* Takes e->g's statistics and DOT as the state rejected calls must leave. */
void validate_env_snapshot(env_t *e);
/* A valid call, or a cg_depend(#before, #after), in both twins. */
cg_node_t validate_env_record(env_t *e, const call_t *c);
void validate_env_depend(env_t *e, uint32_t before, uint32_t after);
/* Checks one rejected call: its status and its detail (naming `fn`, and what
 * `need` and the extras say), that nothing changed, and the next valid node. */
void validate_env_rejected(env_t *e, const char *what, cg_status_t got, cg_status_t want, const char *fn, int need,
                           const char *extra1, const char *extra2);

/* Adds the tests of the "edges_and_host_funcs" test case to `tc` (test_validate_edges.c). */
void validate_add_edges_and_host_funcs_tests(TCase *tc);

#endif
