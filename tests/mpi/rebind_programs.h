/* Programs over one pool of memory, for the cg_plan_rebind suite: the model of
 * a program, where its buffers lie, random programs, and the check of a plan's
 * run against the reference executor. Kept apart from the tests
 * (test_mpi_rebind.c) because it is machinery several of them drive, not
 * something any one of them checks.
 *
 * Every buffer is a region of a pool; the plan's pool and the reference's
 * start byte-identical, the plan runs on its pool, the reference executor on
 * a graph recorded over the same offsets of its own pool, and the pools must
 * end byte-identical (regions that are only written start poisoned). Region 0
 * of a node is what it reads (or its whole buffer in place), region 1 what it
 * writes. A node of kind CG_NODE_SEND stands for a ring: a send to rank+shift
 * and a receive from rank-shift. */
#ifndef CG_TEST_REBIND_PROGRAMS_H
#define CG_TEST_REBIND_PROGRAMS_H

#include <stddef.h>
#include <stdint.h>

#include "mpi_test.h"

#define P_MAX 24
#define NO_OFF ((size_t)-1)

typedef struct pnode {
  cg_node_kind_t kind;
  cg_dtype_t dtype;
  cg_redop_t op;
  int root; /* root, or the ring's shift */
  size_t count;
  int inplace; /* allreduce, broadcast, allgather */
  int comm;
} pnode_t;

typedef struct pprog {
  pnode_t nodes[P_MAX];
  int n;
  cg_comm_t *comms[2];
  size_t off[P_MAX][2]; /* the current binding: byte offsets of regions 0 and 1 (NO_OFF: none) */
  size_t half;          /* the pool is two halves of this many bytes */
  char *pool[2];        /* the plan's, the reference's */
  cg_node_t h[P_MAX][2];
  uint64_t local;       /* this rank's random stream, for placements (sizes differ between ranks) */
} pprog_t;

/* Byte intervals taken by the regions in offs (for nodes with mask[i] set). */
typedef struct prog_taken {
  size_t lo[4 * P_MAX], hi[4 * P_MAX];
  int n;
} prog_taken_t;

/* ---- building a program */

void prog_add(pprog_t *pg, cg_node_kind_t kind, cg_dtype_t dtype, cg_redop_t op, int root, size_t count,
              int inplace, int comm);
/* A random program of 6 to 14 nodes (every kind but gather and scatter, with
 * in-place forms, runs of fusible collectives on two communicators), drawn
 * from the shared seed: every rank builds the same one. */
void prog_random(pprog_t *pg);
/* A node whose region 0 has bytes on every rank. */
int prog_reads_everywhere(const pnode_t *p);
/* The region a node writes on every rank: 0 (in place), 1, or -1 (a reduce
 * writes on its root only). */
int prog_written_everywhere(const pnode_t *p);

/* ---- where its buffers lie */

/* Room for the program: each half of the pool holds it twice, and besides
 * that the largest region (with its gaps) once more than there can be
 * intervals taken in it, so that however scattered they are, some free gap
 * fits any region (pigeonhole). */
void prog_alloc(pprog_t *pg);
void prog_free(pprog_t *pg);
size_t prog_align_up(size_t v, size_t a);
/* Every region back to back from `base`: regions 0 of all nodes in record
 * order, then regions 1, each aligned to its element size only (as
 * cg_arena_alloc places them), so fusible neighbours are contiguous. */
size_t prog_layout_packed(pprog_t *pg, size_t base, size_t offs[P_MAX][2]);
void prog_take(prog_taken_t *t, const pprog_t *pg, size_t offs[P_MAX][2], const int *mask);
/* New places in [lo, hi) for the regions of the nodes with move[i] set, apart
 * from each other and from everything in `t` (which grows); the places come
 * from this rank's stream (pg->local), because sizes differ between ranks. */
void prog_layout_scattered(pprog_t *pg, prog_taken_t *t, size_t lo, size_t hi, const int *move,
                           size_t offs[P_MAX][2]);

/* ---- recording, rebinding and checking it */

/* Records the program over the plan's pool (ref 0: its handles kept in pg->h)
 * or the reference's (ref 1). */
void prog_record(cg_graph_t *g, pprog_t *pg, int ref);
/* The entries that point node i at offsets `off` of the plan's pool. */
size_t prog_binds(cg_rebind_t *out, const pprog_t *pg, int i, const size_t off[2]);
/* Fresh data for `round` in both pools, the plan run, and its pool compared
 * with the reference's run over the current binding, on every rank. */
void prog_run_and_check(pprog_t *pg, cg_plan_t *plan, uint64_t round, int nonblocking, const char *what);

#endif
