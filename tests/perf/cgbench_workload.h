/* cgbench's workload: the tensors' element counts (WORKLOAD.txt), where each
 * mode keeps them, and how DDP-style and commgraph buckets group them. Host
 * code only; see cgbench.c for the modes. */
#ifndef CGBENCH_WORKLOAD_H
#define CGBENCH_WORKLOAD_H

#include <stddef.h>

#define CGB_ALIGN_FLOATS 64 /* 256 bytes */
#define CGB_MIB ((size_t)1 << 20)

/* calloc that aborts the job when out of memory; never NULL. */
void *cgb_xcalloc(size_t n, size_t size);

/* Reads the element counts on rank 0 and broadcasts them; returns the number
 * of tensors, or 0 (on every rank) when the file is missing or malformed.
 * Collective over MPI_COMM_WORLD. */
int cgb_read_workload(const char *path, size_t **out);

/* "gpt2" for ".../workloads/gpt2.txt" */
void cgb_workload_name(const char *path, char *name, size_t size);

/* Where tensors live in one allocation: tensor i holds the elements
 * [offset[i], offset[i] + count[i]); everything else is padding. */
typedef struct cgb_layout {
  int n;          /* tensors */
  size_t *count;  /* elements of each */
  size_t *offset; /* elements from the allocation's start */
  size_t total;   /* sum of counts */
  size_t span;    /* elements the allocation holds */
} cgb_layout_t;

typedef enum cgb_placement {
  /* tensor 0 first, each at a 256-byte aligned offset with at least 256 bytes
   * of padding after it: no two tensors touch */
  CGB_GAPPED,
  /* tensor n-1 first, back to back without padding: where a cg_arena puts
   * tensors allocated in commgraph's record order (n-1 down to 0) */
  CGB_PACKED_REVERSE
} cgb_placement_t;

cgb_layout_t cgb_make_layout(int n, const size_t *count, cgb_placement_t placement);
void cgb_free_layout(cgb_layout_t *l);

/* DDP-style buckets: tensors taken in reverse order (n-1 first), the first
 * bucket closed once it holds at least first_cap_bytes, later ones at
 * cap_bytes (PyTorch DDP's rule: 1 MiB, then bucket_cap_mb), or at the last
 * tensor. Bucket k holds the tensors n-1-p for p in [first[k], first[k+1]),
 * packed back to back from element offset[k] of one flat buffer of span
 * elements (buckets at 256-byte aligned offsets); tensor i sits at element
 * pos[i]. Uses l->n and l->count only. */
typedef struct cgb_buckets {
  int n;
  int *first;
  size_t *count, *offset, *pos;
  size_t span;
} cgb_buckets_t;

cgb_buckets_t cgb_make_ddp_buckets(const cgb_layout_t *l, size_t first_cap_bytes, size_t cap_bytes);
void cgb_free_buckets(cgb_buckets_t *b);

/* "995.5 MB", "256.0 KB", "0" */
const char *cgb_bytes_text(char *out, size_t size, double bytes);

/* What cg_compile's documented fusion rule gives for the float32 allreduces of
 * l recorded in reverse order (n-1 first), independent of each other, on one
 * communicator: consecutive greedy buckets, each closed when the next tensor
 * would take it past cap_bytes. Returns the number of buckets of two or more
 * tensors (cg_plan_stats' buckets) and sets *fused to the tensors in them
 * (fused_nodes). */
size_t cgb_expected_buckets(const cgb_layout_t *l, size_t cap_bytes, size_t *fused);

#endif
