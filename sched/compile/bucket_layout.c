/* A bucket's buffers: where its collective reads and writes, and the copies
 * around it.
 *
 * The fused buffer of a bucket lays its members out one after another (for
 * allgather's receive and reduce_scatter's send buffer, rank block by rank
 * block: block q holds every member's block q). A side whose members' buffers
 * already sit exactly there, relative to the first, and inside one
 * allocation, is used directly: no copy. Otherwise the side is staged, and
 * the staging buffer is chosen so the collective runs in place where NCCL
 * and MPI allow it: an allreduce packs
 * its inputs into its output buffer (the members' own, if contiguous), an
 * allgather into its own rank's block of the output, and a reduce_scatter
 * receives into its own rank's block of the staged input. Packing into the
 * members' output buffers is safe: a member's input overlaps another member's
 * output only through a hazard edge, and members of a bucket have none. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device_memory.h"
#include "error.h"
#include "lower.h"
#include "memory_kind.h"

#define STAGING_ALIGN 256

typedef struct block {
  size_t pos;      /* element offset in the fused buffer */
  uintptr_t ptr;   /* the member's memory */
  size_t count;
} block_t;

typedef struct side {
  int used;
  block_t *blocks;
  uint32_t n;
  size_t elems; /* of the fused buffer */
  int direct;
  uintptr_t base; /* direct: where the fused buffer starts */
} side_t;

static size_t align_up(size_t v) { return (v + STAGING_ALIGN - 1) / STAGING_ALIGN * STAGING_ALIGN; }

/* Whether every non-empty block already lies at its fused position, inside
 * one allocation (memory_kind.h). */
static void find_direct(side_t *s, size_t elem) {
  s->direct = 1;
  s->base = 0;
  int have_base = 0;
  for (uint32_t k = 0; k < s->n && s->direct; k++) {
    const block_t *b = &s->blocks[k];
    if (!b->count) continue;
    uintptr_t offset = (uintptr_t)(b->pos * elem);
    if (!have_base) {
      if (b->ptr < offset) {
        s->direct = 0;
        break;
      }
      s->base = b->ptr - offset;
      have_base = 1;
    }
    s->direct = b->ptr == s->base + offset;
  }
  if (s->direct && !cg_memory_one_allocation((const void *)s->base, s->elems * elem)) s->direct = 0;
}

typedef struct bucket_sides {
  side_t send, recv;
  cg_node_kind_t kind;
  size_t fused; /* C: elements per rank block */
  size_t elem;
  int rank, size;
} bucket_sides_t;

static cg_status_t describe_sides(bucket_sides_t *bs, const cg_plan_t *p, const cg_bucket_t *b, const char *where) {
  const cg_plan_node_t *head = &p->nodes[b->members[0]];
  int n = head->comm->size, r = head->comm->rank;
  cg_node_kind_t k = head->kind;
  *bs = (bucket_sides_t){.kind = k, .elem = cg_dtype_size(head->dtype), .rank = r, .size = n};
  int per_rank_send = k == CG_NODE_REDUCE_SCATTER, per_rank_recv = k == CG_NODE_ALLGATHER;
  bs->send.used = k != CG_NODE_BROADCAST || r == head->root;
  bs->recv.used = k != CG_NODE_REDUCE || r == head->root;
  size_t max_blocks = (size_t)b->n_members * (size_t)n;
  bs->send.blocks = malloc(max_blocks * sizeof(block_t));
  bs->recv.blocks = malloc(max_blocks * sizeof(block_t));
  if (!bs->send.blocks || !bs->recv.blocks) {
    return cg_fail(CG_ERR_NO_MEMORY, "%s: laying out a bucket of %u nodes", where, b->n_members);
  }
  size_t total = 0;
  for (uint32_t m = 0; m < b->n_members; m++) total += p->nodes[b->members[m]].count;
  bs->fused = total;
  size_t offset = 0;
  for (uint32_t m = 0; m < b->n_members; m++) {
    const cg_plan_node_t *node = &p->nodes[b->members[m]];
    size_t c = node->count, bytes = c * bs->elem;
    for (int q = 0; q < (per_rank_send ? n : 1); q++)
      bs->send.blocks[bs->send.n++] =
          (block_t){(size_t)q * total + offset, (uintptr_t)node->send + (uintptr_t)q * bytes, c};
    for (int q = 0; q < (per_rank_recv ? n : 1); q++)
      bs->recv.blocks[bs->recv.n++] =
          (block_t){(size_t)q * total + offset, (uintptr_t)node->recv + (uintptr_t)q * bytes, c};
    offset += c;
  }
  bs->send.elems = per_rank_send ? total * (size_t)n : total;
  bs->recv.elems = per_rank_recv ? total * (size_t)n : total;
  if (bs->send.used) find_direct(&bs->send, bs->elem);
  if (bs->recv.used) find_direct(&bs->recv, bs->elem);
  return CG_SUCCESS;
}

/* Where the fused buffers go, with staging at `staging` (0 on the sizing
 * pass); returns the staging bytes needed. */
static size_t place(const bucket_sides_t *bs, uintptr_t staging, uintptr_t *send, uintptr_t *recv) {
  size_t need = 0, elem = bs->elem, own_block = (size_t)bs->rank * bs->fused * elem;
  *send = *recv = 0;
  if (bs->recv.used) {
    if (bs->recv.direct) {
      *recv = bs->recv.base;
    } else if (bs->kind != CG_NODE_REDUCE_SCATTER) {
      *recv = staging;
      need = align_up(bs->recv.elems * elem);
    }
  }
  if (bs->send.used) {
    if (bs->send.direct) {
      *send = bs->send.base;
    } else if (bs->recv.used && bs->kind == CG_NODE_ALLGATHER) {
      *send = *recv + own_block; /* in place */
    } else if (bs->recv.used && bs->kind != CG_NODE_REDUCE_SCATTER) {
      *send = *recv; /* in place */
    } else {
      *send = staging + need;
      need += align_up(bs->send.elems * elem);
    }
  }
  if (bs->kind == CG_NODE_REDUCE_SCATTER && bs->recv.used && !bs->recv.direct) {
    if (!bs->send.direct) {
      *recv = *send + own_block; /* in place */
    } else {
      *recv = staging + need;
      need += align_up(bs->recv.elems * elem);
    }
  }
  return need;
}

static cg_status_t make_segments(cg_copy_segment_t **out, uint32_t *n_out, const side_t *s, uintptr_t fused,
                                 size_t elem, int packing, const char *where) {
  *out = NULL;
  *n_out = 0;
  if (!s->used || s->direct) return CG_SUCCESS;
  cg_copy_segment_t *segs = malloc((s->n ? s->n : 1) * sizeof *segs);
  if (!segs) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating %u bucket copies", where, s->n);
  uint32_t n = 0;
  for (uint32_t k = 0; k < s->n; k++) {
    const block_t *b = &s->blocks[k];
    uintptr_t at = fused + (uintptr_t)(b->pos * elem);
    if (!b->count || at == b->ptr) continue; /* a member already in place */
    segs[n++] = packing ? (cg_copy_segment_t){(const void *)b->ptr, (void *)at, b->count * elem}
                        : (cg_copy_segment_t){(const void *)at, (void *)b->ptr, b->count * elem};
  }
  *out = segs;
  *n_out = n;
  return CG_SUCCESS;
}

static void free_sides(bucket_sides_t *bs) {
  free(bs->send.blocks);
  free(bs->recv.blocks);
}

static cg_status_t alloc_staging(cg_plan_t *p, size_t bytes, const char *where) {
  p->staging_bytes = bytes;
  if (!bytes) return CG_SUCCESS;
  if (p->device != CG_DEVICE_HOST) return cg_device_alloc(&p->staging, bytes, p->device, "bucket staging", where);
  p->staging = aligned_alloc(STAGING_ALIGN, bytes);
  if (!p->staging) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating %zu bytes of bucket staging", where, bytes);
  return CG_SUCCESS;
}

cg_status_t cg_plan_layout_buckets(cg_plan_t *p, const char *where) {
  cg_status_t st = CG_SUCCESS;
  size_t total = 0;
  for (uint32_t i = 0; i < p->n_buckets && st == CG_SUCCESS; i++) {
    bucket_sides_t bs;
    uintptr_t send, recv;
    st = describe_sides(&bs, p, &p->buckets[i], where);
    if (st == CG_SUCCESS) {
      p->buckets[i].staging_offset = total;
      p->buckets[i].staging_bytes = place(&bs, 0, &send, &recv);
      total += p->buckets[i].staging_bytes;
    }
    free_sides(&bs);
  }
  if (st == CG_SUCCESS) st = alloc_staging(p, total, where);
  for (uint32_t i = 0; i < p->n_buckets && st == CG_SUCCESS; i++) {
    cg_bucket_t *b = &p->buckets[i];
    bucket_sides_t bs;
    uintptr_t send, recv;
    st = describe_sides(&bs, p, b, where);
    if (st == CG_SUCCESS) {
      place(&bs, (uintptr_t)p->staging + b->staging_offset, &send, &recv);
      b->send_direct = bs.send.used && bs.send.direct;
      b->recv_direct = bs.recv.used && bs.recv.direct;
      st = make_segments(&b->pack, &b->n_pack, &bs.send, send, bs.elem, 1, where);
      if (st == CG_SUCCESS) st = make_segments(&b->unpack, &b->n_unpack, &bs.recv, recv, bs.elem, 0, where);
      cg_step_t *s = &p->steps[b->collective_step];
      s->send = (const void *)send;
      s->recv = (void *)recv;
      s->count = bs.fused;
    }
    free_sides(&bs);
  }
  return st;
}
