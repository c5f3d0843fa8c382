/* Hazard tracking: which earlier nodes a new node must follow because their
 * byte ranges overlap and at least one of the two writes.
 *
 * The address space is kept as disjoint segments in a treap keyed by start.
 * Each segment remembers its last writer and the readers since that write (an
 * immutable list, so both halves of a split segment can share it). A new node's
 * predecessors are found by visiting only the segments its ranges overlap:
 * O((k + 1) log n) per range instead of a scan over all earlier nodes.
 *
 * Recording is two-phase so that a failed recording changes nothing:
 * cg_hazard_prepare() finds the predecessors and reserves every byte the update
 * will need; cg_hazard_apply() then cannot fail. */
#ifndef CG_GRAPH_HAZARD_H
#define CG_GRAPH_HAZARD_H

#include <stddef.h>
#include <stdint.h>

#include "commgraph/status.h"

#define CG_NO_NODE UINT32_MAX

/* Why an edge exists; an edge may have several causes. */
enum {
  CG_EDGE_EXPLICIT = 1u << 0,
  CG_EDGE_RAW = 1u << 1,
  CG_EDGE_WAR = 1u << 2,
  CG_EDGE_WAW = 1u << 3,
  CG_EDGE_FENCE = 1u << 4,
  CG_EDGE_COMM_ORDER = 1u << 5, /* keeps one communicator's operations in record order */
};

/* Half-open byte interval [start, end). */
typedef struct cg_span {
  uintptr_t start;
  uintptr_t end;
} cg_span_t;

/* The memory one node touches. The reads, and the writes, are each normalized:
 * sorted, none empty, none overlapping or touching another (cg_span_normalize). */
typedef struct cg_access_set {
  const cg_span_t *reads;
  size_t n_reads;
  const cg_span_t *writes;
  size_t n_writes;
} cg_access_set_t;

typedef struct cg_edge {
  uint32_t node;   /* the other end */
  uint32_t causes; /* CG_EDGE_* bits */
} cg_edge_t;

typedef struct cg_edge_vec {
  cg_edge_t *items;
  uint32_t len;
  uint32_t cap;
} cg_edge_vec_t;

typedef struct cg_segment cg_segment_t;
typedef struct cg_reader_cell cg_reader_cell_t;

typedef struct cg_hazard {
  cg_segment_t *segs;
  uint32_t n_segs; /* slots handed out, including freed ones */
  uint32_t cap_segs;
  uint32_t free_segs; /* head of the free list, linked through `left` */
  uint32_t root;
  cg_reader_cell_t *cells;
  uint32_t n_cells;
  uint32_t cap_cells;
  cg_span_t *gaps; /* scratch for one read's uncovered pieces */
  size_t cap_gaps;
  uint64_t rng;
} cg_hazard_t;

void cg_hazard_init(cg_hazard_t *h);
void cg_hazard_free(cg_hazard_t *h);

/* Appends (predecessor, cause) pairs for `access` to `preds`, unsorted and
 * possibly repeated, and reserves what cg_hazard_apply needs. On failure the
 * tracker is unchanged (preds may have grown capacity). CG_ERR_INTERNAL if the
 * access set is not normalized. */
cg_status_t cg_hazard_prepare(cg_hazard_t *h, const cg_access_set_t *access, cg_edge_vec_t *preds);

/* Records that `node` performed `access`. Must follow a successful prepare with
 * the same access and no other change in between. */
void cg_hazard_apply(cg_hazard_t *h, uint32_t node, const cg_access_set_t *access);

/* Drops empty spans, sorts the rest and merges those that overlap or touch;
 * returns how many remain. */
size_t cg_span_normalize(cg_span_t *spans, size_t n);

/* Forgets every segment: used after a fence, which every later node follows. */
void cg_hazard_clear(cg_hazard_t *h);

/* Grows `v` to hold at least `need` items. */
cg_status_t cg_edge_vec_reserve(cg_edge_vec_t *v, size_t need);

#endif
