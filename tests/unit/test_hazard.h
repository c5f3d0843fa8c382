/* What the two files of the hazard suite share: test_hazard.c (graph
 * inspection helpers, fixture, by-hand tests, the suite and main) and
 * test_hazard_random.c (brute-force references on random graphs). */
#ifndef CG_TEST_HAZARD_H
#define CG_TEST_HAZARD_H

#include <stddef.h>
#include <stdint.h>

#include "graph_view.h"
#include "test_support.h"

/* ---- inspecting a graph (test_hazard.c) */

/* Causes of the edge from -> to, 0 if there is none; checks that the edge is
 * stored at most once on each side, with the same causes on both. */
uint32_t edge(const cg_graph_t *g, uint32_t from, uint32_t to);
/* Whether a path of edges leads from `from` to `to` (from != to), looking only
 * at nodes up to `bound`; reaches() looks at all nodes. */
int reaches_within(const cg_graph_t *g, uint32_t from, uint32_t to, uint32_t bound);
int reaches(const cg_graph_t *g, uint32_t from, uint32_t to);
/* cg_graph_stats gives these edge counts, in total and per cause. */
void check_stats(const cg_graph_t *g, size_t edges, size_t expl, size_t raw, size_t war, size_t waw,
                 size_t fence, size_t comm_order);

/* Adds the "random" test case to `s` (test_hazard_random.c). */
void hazard_add_random_tcase(Suite *s);

#endif
