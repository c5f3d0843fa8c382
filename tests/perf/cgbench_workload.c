#include "cgbench_workload.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_bench.h"

void *cgb_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) cg_bench_fail("calloc", "out of memory");
  return p;
}

static size_t align_up(size_t floats) {
  return (floats + CGB_ALIGN_FLOATS - 1) / CGB_ALIGN_FLOATS * CGB_ALIGN_FLOATS;
}

/* ---- the workload file */

int cgb_read_workload(const char *path, size_t **out) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  unsigned long long *counts = NULL;
  long long n = 0;
  if (rank == 0) {
    FILE *f = fopen(path, "r");
    size_t capacity = 0;
    char line[256];
    int lineno = 0;
    if (!f) {
      fprintf(stderr, "cgbench: cannot open %s\n", path);
      n = -1;
    }
    while (f && n >= 0 && fgets(line, sizeof line, f)) {
      lineno++;
      char *p = line + strspn(line, " \t\r\n"), *end;
      if (!*p || *p == '#') continue;
      unsigned long long c = strtoull(p, &end, 10);
      if (end == p || c == 0 || end[strspn(end, " \t\r\n")]) {
        fprintf(stderr, "cgbench: %s:%d: expected a positive element count\n", path, lineno);
        n = -1;
        break;
      }
      if ((size_t)n == capacity) {
        capacity = capacity ? 2 * capacity : 256;
        counts = realloc(counts, capacity * sizeof *counts);
        if (!counts) cg_bench_fail("realloc", "out of memory");
      }
      counts[n++] = c;
    }
    if (f) fclose(f);
    if (n == 0) fprintf(stderr, "cgbench: %s lists no tensors\n", path);
  }
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  if (n <= 0) {
    free(counts);
    return 0;
  }
  if (rank != 0) counts = cgb_xcalloc((size_t)n, sizeof *counts);
  MPI_Bcast(counts, (int)n, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  *out = cgb_xcalloc((size_t)n, sizeof **out);
  for (long long i = 0; i < n; i++) (*out)[i] = (size_t)counts[i];
  free(counts);
  return (int)n;
}

void cgb_workload_name(const char *path, char *name, size_t size) {
  const char *base = strrchr(path, '/');
  snprintf(name, size, "%s", base ? base + 1 : path);
  char *dot = strrchr(name, '.');
  if (dot && dot != name) *dot = '\0';
}

/* ---- layouts and buckets */

cgb_layout_t cgb_make_layout(int n, const size_t *count, cgb_placement_t placement) {
  cgb_layout_t l = {.n = n,
                    .count = cgb_xcalloc((size_t)n, sizeof(size_t)),
                    .offset = cgb_xcalloc((size_t)n, sizeof(size_t))};
  for (int k = 0; k < n; k++) {
    int i = placement == CGB_PACKED_REVERSE ? n - 1 - k : k;
    l.count[i] = count[i];
    l.offset[i] = l.span;
    l.span = placement == CGB_PACKED_REVERSE ? l.span + count[i] : align_up(l.span + count[i]) + CGB_ALIGN_FLOATS;
    l.total += count[i];
  }
  return l;
}

void cgb_free_layout(cgb_layout_t *l) {
  free(l->count);
  free(l->offset);
}

cgb_buckets_t cgb_make_ddp_buckets(const cgb_layout_t *l, size_t first_cap_bytes, size_t cap_bytes) {
  cgb_buckets_t b = {.first = cgb_xcalloc((size_t)l->n + 1, sizeof(int)),
                     .count = cgb_xcalloc((size_t)l->n, sizeof(size_t)),
                     .offset = cgb_xcalloc((size_t)l->n, sizeof(size_t)),
                     .pos = cgb_xcalloc((size_t)l->n, sizeof(size_t))};
  size_t elements = 0; /* in the open bucket, which starts at element b.span */
  for (int p = 0; p < l->n; p++) {
    int i = l->n - 1 - p;
    b.pos[i] = b.span + elements;
    elements += l->count[i];
    size_t cap = b.n == 0 ? first_cap_bytes : cap_bytes;
    if (elements * sizeof(float) >= cap || p == l->n - 1) { /* close the bucket */
      b.count[b.n] = elements;
      b.offset[b.n] = b.span;
      b.span = align_up(b.span + elements);
      b.first[++b.n] = p + 1;
      elements = 0;
    }
  }
  return b;
}

void cgb_free_buckets(cgb_buckets_t *b) {
  free(b->first);
  free(b->count);
  free(b->offset);
  free(b->pos);
}

const char *cgb_bytes_text(char *out, size_t size, double bytes) {
  if (bytes >= 1e6)
    snprintf(out, size, "%.1f MB", bytes / 1e6);
  else if (bytes > 0)
    snprintf(out, size, "%.1f KB", bytes / 1e3);
  else
    snprintf(out, size, "0");
  return out;
}

size_t cgb_expected_buckets(const cgb_layout_t *l, size_t cap_bytes, size_t *fused) {
  size_t buckets = 0, bytes = 0;
  int members = 0;
  *fused = 0;
  for (int p = 0; p <= l->n; p++) {
    size_t next = p < l->n ? l->count[l->n - 1 - p] * sizeof(float) : 0;
    if (p == l->n || !members || bytes > cap_bytes || next > cap_bytes - bytes) { /* close; open with p */
      if (members > 1) {
        buckets++;
        *fused += (size_t)members;
      }
      members = 0;
      bytes = 0;
    }
    members++;
    bytes += next;
  }
  return buckets;
}
