/* What the two files of the fusion suite share: test_fusion.c (the tests,
 * the suite and main) and fusion_invariants.c (random programs over an arena
 * and the invariant checker every plan of the suite goes through). */
#ifndef CG_TEST_FUSION_INVARIANTS_H
#define CG_TEST_FUSION_INVARIANTS_H

#include <stddef.h>
#include <stdint.h>

#include "graph_view.h"
#include "plan_internal.h"
#include "test_support.h"

enum { MAX_COMMS = 3, MAX_NODES = 120 };

/* What a node touches, written out from the headers; in the arena of
 * fusion_invariants.c. */
typedef struct acc {
  uintptr_t r0, r1, w0, w1; /* [r0, r1) read, [w0, w1) written */
  int fence;                /* host function without declared access, or barrier: everything */
} acc_t;

/* A random program (fusion_sample_make): its graph, communicators and what
 * each node touches. */
typedef struct sample {
  cg_graph_t *g;
  cg_comm_t *comms[MAX_COMMS];
  int n_comms;
  acc_t acc[MAX_NODES];
  uint32_t n;
} sample_t;

/* A graph of its own for each test; a node's handle from its index. */
cg_graph_t *fusion_new_graph(void);
cg_node_t fusion_node(const cg_graph_t *g, uint32_t index);

/* A random program of `n_nodes` nodes over the arena, with what each node
 * touches in `acc`; fences only with `fences` (the layouts: at the definition). */
void fusion_sample_make(sample_t *s, uint32_t n_nodes, int fences);
void fusion_sample_free(sample_t *s);

/* Checks `plan`, compiled from `g`, against every invariant. `limit`: the
 * bucket size asked for (0 with fusion off); `acc`: what each node touches,
 * in the arena (NULL: skip the memory checks and the replay). */
void fusion_check_fused(const cg_graph_t *g, const cg_plan_t *plan, const acc_t *acc, size_t limit, int fusion);

#endif
