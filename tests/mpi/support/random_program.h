/* Random programs for the differential suites (tests/mpi/test_mpi_random.c on
 * host buffers, tests/gpu/test_nccl_random.c on device buffers): mixed kinds,
 * data types, three communicators (world, world again, half of the ranks),
 * overlapping buffers in one or more arenas, in-place forms, ring exchanges in
 * either order, host functions and explicit edges. Every rank draws the same
 * program from the shared seed.
 *
 * Values stay exact: each arena tracks a bound on magnitudes and on fractional
 * bits (avg over 2 or 4 ranks halves or quarters), and an operation that could
 * leave the type's exact range is replaced by min or max, so no result depends
 * on the order in which contributions are combined (float avg in NCCL
 * multiplies each input by 1/ranks first: exact too with 1, 2 or 4 ranks). */
#ifndef CG_RANDOM_PROGRAM_H
#define CG_RANDOM_PROGRAM_H

#include <stddef.h>

#include "commgraph.h"

#define CG_RP_MAX_NODES 14
#define CG_RP_HALF 2048 /* elements in each half of an arena */
#define CG_RP_MAX_DTYPES 3

typedef struct cg_rp_arena {
  cg_dtype_t dtype;
  double bound;  /* largest magnitude any element may hold */
  int frac_bits; /* fractional bits any element may need */
  char *mem[3];  /* the suite's copies of its 2 * CG_RP_HALF elements (plan, reference, staging) */
} cg_rp_arena_t;

typedef struct cg_rp_spec {
  cg_node_kind_t kind; /* CG_NODE_SEND: a ring exchange (send to rank+shift, receive from rank-shift) */
  int arena, comm, root, shift;
  cg_redop_t op;
  size_t count;
  size_t send_off, recv_off; /* element offsets in the arena (bit 62 of send_off: in place) */
  int depend_on;             /* -1 or an earlier node: explicit edge */
} cg_rp_spec_t;

typedef struct cg_rp_program {
  cg_rp_arena_t arenas[CG_RP_MAX_DTYPES];
  int n_arenas;
  cg_rp_spec_t nodes[CG_RP_MAX_NODES * 2];
  int n_nodes;
  int n_comms; /* set by the caller */
} cg_rp_program_t;

/* Draws a program for `world` ranks. host_func_adds is what a host function
 * adds to each element of its range (the arena's bound grows by it). */
void cg_rp_generate(cg_rp_program_t *p, int world, int host_func_adds);
/* Offsets of node s's send and recv buffers on this rank, in elements. */
void cg_rp_buffers(const cg_rp_spec_t *s, int rank, size_t *send, size_t *recv);
/* The program, one line per node, on stderr. */
void cg_rp_dump(const cg_rp_program_t *p);

#endif
