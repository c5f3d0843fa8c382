/* One collective (or a send and its receive) on buffers of its own, checked
 * byte for byte: shared by the host suite (tests/mpi/test_mpi_kinds.c) and the
 * GPU suite (tests/gpu/test_nccl_kinds.c).
 *
 * A rank's input comes from the shared seed and a salt naming the case, the
 * sending rank and the block, so every rank can regenerate every other rank's
 * input and compute the expected result without communicating (and so without
 * trusting the transport under test). Values are small integers, so every
 * reduction is exact. Buffers start poisoned and carry poisoned guards on both
 * sides: bytes a node must leave alone show up as differences. */
#ifndef CG_KIND_CASES_H
#define CG_KIND_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "commgraph.h"

enum { CG_KC_GUARD = 16 }; /* a multiple of every element size, so bodies stay aligned */

typedef struct kcase {
  cg_node_kind_t kind; /* CG_NODE_SEND stands for a send and its matching receive */
  cg_dtype_t dtype;
  cg_redop_t op; /* also picks the value range for kinds without a reduction */
  int root;      /* root; for send/recv the peer sent to */
  int from;      /* send/recv: the peer received from */
  size_t count;
  int inplace;
  uint64_t id;             /* part of the input salt: one per case, its two forms share it */
  size_t a_bytes, b_bytes; /* a: send buffer, or the whole buffer in place; b: recv */
  int rank, size;          /* of the rank checking it, set by cg_kc_setup */
  char *a, *b;             /* host allocations with CG_KC_GUARD bytes on both sides: inputs, then results */
  char *da, *db;           /* device copies of a and b, for suites that run on a GPU (theirs to manage) */
  char *want_a, *want_b;   /* what they must hold after the run, guards included */
  const void *send;        /* as recorded (in a and b) */
  void *recv;
} kcase_t;

/* 1 for kinds with an in-place form (not alltoall, not send/recv). */
int cg_kc_has_inplace_form(cg_node_kind_t kind);
/* 1 for kinds whose count is per block, so buffers hold count x ranks elements. */
int cg_kc_scales_with_ranks(cg_node_kind_t kind);
/* Allocates the case's host buffers, writes this rank's inputs, the expected
 * contents after the run, and the pointers to record. */
void cg_kc_setup(kcase_t *c, int rank, int size);
void cg_kc_free(kcase_t *c);
/* Drops the inputs kept for the current case's other form. */
void cg_kc_forget(void);
/* "allreduce float32 sum count 7 in place (rank 1 of 4)" */
void cg_kc_describe(char *out, size_t len, const kcase_t *c);
/* 1 if a and b hold exactly the expected bytes; otherwise `why` names the case,
 * the first wrong byte (offset from the buffer start; negative or past its
 * length means a guard) and how many differ. */
int cg_kc_check(const kcase_t *c, char *why, size_t len);

#endif
