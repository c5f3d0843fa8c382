/* The fusion pass: which nodes run together as one bucket.
 *
 * A bucket is a run of consecutive operations of one communicator (in its
 * total order) with the same kind, data type, reduction and root, none
 * depending on another. Keeping buckets consecutive keeps every
 * communicator's order (and so the cross-rank check's sequences) intact: a
 * bucket simply takes the place of its run.
 *
 * The pass simulates running the graph (Kahn's algorithm in the graph's
 * deterministic order). A fusible node that becomes ready opens a bucket on
 * its communicator instead of completing; the next operation on that
 * communicator joins the bucket once everything it depends on has completed,
 * other than the bucket's last member through the communicator's own order.
 * Members complete only when their bucket closes, so nothing that depends on
 * a member can be a dependency of a later member: fusing never creates a
 * cycle. A bucket closes when the next operation differs, would overflow the
 * bucket size, depends on a member, or when nothing else can make progress
 * (the lowest open bucket first).
 *
 * Ranks may record different dependencies (hazard edges follow their
 * addresses), so with a control channel the ranks then agree: a node stays
 * joined only where every rank joined it. Splitting buckets keeps the
 * contracted graph acyclic on every rank, so the agreed buckets are valid
 * everywhere. */
#ifndef CG_SCHED_FUSION_H
#define CG_SCHED_FUSION_H

#include <stddef.h>
#include <stdint.h>

#include "agreement.h"
#include "comm_order.h"
#include "fuse_why.h"

typedef struct cg_fusion {
  uint8_t *why;        /* per node; CG_FUSE_JOINED: same bucket as the operation before it on its communicator */
  size_t *bucket_bytes; /* per communicator sequence: the largest bucket allowed, or the largest formed where
                           DDP's caps went past a smaller backend size (0: fusion off) */
  uint32_t n_comms;
} cg_fusion_t;

/* Bytes a node counts against the bucket size: its largest buffer. */
size_t cg_fusion_node_bytes(const cg_node_rec_t *node);

/* This rank's buckets. `enabled` and `bucket_bytes` come from the compile
 * options, then CG_FUSION and CG_BUCKET_BYTES (cg_compile reads those);
 * bucket_bytes 0: the backend's preference. */
struct cg_tuning;
/* With `tuning` (cg_plan_tune's measurements, agreed; NULL: none), bucket
 * boundaries minimize the predicted finish of each communicator's last
 * collective instead (the library's overlap caps then do not apply). */
cg_status_t cg_fusion_plan(cg_fusion_t *out, const cg_graph_t *g, const cg_comm_order_t *order, int enabled,
                           size_t bucket_bytes, const struct cg_tuning *tuning, const char *where);

/* Agreement over the participants (collective; a rank whose `mine` failed
 * still takes part, fusing nothing, and every rank then fails). Nodes joined
 * here but not on every rank become CG_FUSE_RANKS. */
cg_status_t cg_fusion_agree(cg_fusion_t *f, const cg_graph_t *g, const cg_comm_order_t *order,
                            const cg_participants_t *pt, cg_status_t mine, const char *where);

void cg_fusion_free(cg_fusion_t *f);

#endif
