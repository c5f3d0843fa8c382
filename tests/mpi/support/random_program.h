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
 * multiplies each input by 1/ranks first: exact too with 1, 2 or 4 ranks).
 *
 * cg_rp_generate_fusible draws the programs of the fusion suites
 * (tests/mpi/test_mpi_fusion.c, with
 * tests/mpi/support/fusion_diff.h): runs of fusible collectives in a chosen
 * buffer layout; there a bound is kept per buffer rather than per arena. */
#ifndef CG_RANDOM_PROGRAM_H
#define CG_RANDOM_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "commgraph.h"

#define CG_RP_MAX_NODES 14
#define CG_RP_HALF 2048 /* elements in each half of an arena */
#define CG_RP_MAX_DTYPES 3

typedef struct cg_rp_arena {
  cg_dtype_t dtype;
  size_t elems;  /* elements in the arena: 2 * CG_RP_HALF, or what cg_rp_generate_fusible placed */
  double bound;  /* largest magnitude any element may hold */
  int frac_bits; /* fractional bits any element may need */
  char *mem[3];  /* the suite's copies of its elements (plan, reference, staging) */
} cg_rp_arena_t;

typedef struct cg_rp_spec {
  cg_node_kind_t kind; /* CG_NODE_SEND: a ring exchange (send to rank+shift, receive from rank-shift) */
  int arena, comm, root, shift;
  cg_redop_t op;
  size_t count;
  size_t send_off, recv_off; /* element offsets in the arena (bit 62 of send_off: in place) */
  int depend_on;             /* -1 or an earlier node: explicit edge */
} cg_rp_spec_t;

/* Buffer layouts of cg_rp_generate_fusible. */
typedef enum cg_rp_layout {
  CG_RP_SCATTERED,  /* buffers apart from each other (gaps, shuffled), some nodes in place, some reading or
                       writing an earlier node's buffer (hazard edges) */
  CG_RP_CONTIGUOUS, /* per arena and communicator, the send buffers back to back in record order and the
                       receive buffers too, as cg_arena_alloc places them: buckets need no copies */
  CG_RP_IN_PLACE,   /* per arena and communicator, back to back in record order, every collective in place */
  CG_RP_N_LAYOUTS
} cg_rp_layout_t;

/* A buffer of cg_rp_generate_fusible: `elems` elements at `off` of an arena.
 * In the contiguous layouts the pieces of an arena, in order, fill it. */
typedef struct cg_rp_piece {
  int arena;
  size_t off, elems;
} cg_rp_piece_t;

#define CG_RP_MAX_SPECS (CG_RP_MAX_NODES * 2)

typedef struct cg_rp_program {
  cg_rp_arena_t arenas[CG_RP_MAX_DTYPES];
  int n_arenas;
  cg_rp_spec_t nodes[CG_RP_MAX_SPECS];
  int n_nodes;
  int n_comms; /* set by the caller */
  /* cg_rp_generate_fusible only: */
  cg_rp_layout_t layout;
  cg_rp_piece_t pieces[CG_RP_MAX_SPECS * 2]; /* sorted by arena, then offset */
  int n_pieces;
  int zero_copy; /* 1: every bucket any bucket size can form has its buffers in place (copy_bytes 0) */
} cg_rp_program_t;

/* Draws a program for `world` ranks. host_func_adds is what a host function
 * adds to each element of its range (the arena's bound grows by it). */
void cg_rp_generate(cg_rp_program_t *p, int world, int host_func_adds);
/* What cg_rp_generate_fusible draws. */
typedef struct cg_rp_fusion_opts {
  cg_rp_layout_t layout;
  int host_func_adds;  /* what a host function adds to each element of its range (0: it only reads) */
  size_t max_bytes;    /* the largest buffer of a collective */
  int allreduce_only;  /* 1: every run is of allreduces */
} cg_rp_fusion_opts_t;

/* Draws a program for the fusion suites, for `world` ranks and 3
 * communicators (world, world again, half of the ranks): mostly runs of
 * fusible collectives (allreduce, reduce, broadcast, allgather,
 * reduce_scatter) of one communicator, data type, reduction and root, two runs
 * on different communicators often interleaved; counts 0, 1, small primes,
 * powers of two and primes up to max_bytes per buffer; data types drawn per
 * arena (two arenas of one type now and then); now and then an alltoall, a
 * ring exchange, a barrier, a host function (some fences) or an explicit edge.
 * Values stay exact as in cg_rp_generate. */
void cg_rp_generate_fusible(cg_rp_program_t *p, int world, const cg_rp_fusion_opts_t *opts);
/* Fresh data for arena `a` in `image` (integers, per rank), with the poison
 * pattern in the bytes whose first access in record order on this rank is a
 * write. comm_rank and comm_size: this rank's place in each communicator. */
void cg_rp_fill(const cg_rp_program_t *p, int a, char *image, const int *comm_rank, const int *comm_size,
                uint64_t seed, uint64_t salt);
/* Records the program into `g` over arena memory mem[a] and `comms`; a host
 * function node is recorded by `host` (node index, its spec, its arena's
 * memory). Node i's handle (a ring exchange's second) goes in handles[i]. On
 * failure returns the status (cg_error_last() says why) and the node's index
 * in *bad_node (may be NULL). */
typedef cg_status_t (*cg_rp_host_fn)(cg_node_t *out, cg_graph_t *g, int node, const cg_rp_spec_t *s, char *mem,
                                     void *ctx);
cg_status_t cg_rp_record(cg_graph_t *g, const cg_rp_program_t *p, char *const *mem, cg_comm_t *const *comms,
                         cg_rp_host_fn host, void *ctx, cg_node_t *handles, int *bad_node);
const char *cg_rp_layout_name(cg_rp_layout_t layout);

/* Offsets of node s's send and recv buffers on this rank, in elements. */
void cg_rp_buffers(const cg_rp_spec_t *s, int rank, size_t *send, size_t *recv);
/* The program, one line per node, on stderr. */
void cg_rp_dump(const cg_rp_program_t *p);

#endif
