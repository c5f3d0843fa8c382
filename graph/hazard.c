#include "hazard.h"

#include <stdlib.h>

struct cg_segment {
  uintptr_t start;
  uintptr_t end;
  uint32_t writer;  /* CG_NO_NODE if none since the last fence */
  uint32_t readers; /* head cell of readers since `writer`, or CG_NO_NODE */
  uint32_t left;
  uint32_t right;
  uint32_t prio;
};

struct cg_reader_cell {
  uint32_t node;
  uint32_t next;
};

void cg_hazard_init(cg_hazard_t *h) {
  *h = (cg_hazard_t){.free_segs = CG_NO_NODE, .root = CG_NO_NODE, .rng = 0x9E3779B97F4A7C15ull};
}

void cg_hazard_free(cg_hazard_t *h) {
  free(h->segs);
  free(h->cells);
  free(h->gaps);
  cg_hazard_init(h);
}

cg_status_t cg_edge_vec_reserve(cg_edge_vec_t *v, size_t need) {
  if (need <= v->cap) return CG_SUCCESS;
  if (need > UINT32_MAX) return CG_ERR_NO_MEMORY;
  size_t cap = v->cap ? v->cap : 4;
  while (cap < need) cap *= 2;
  if (cap > UINT32_MAX) cap = UINT32_MAX;
  cg_edge_t *items = realloc(v->items, cap * sizeof *items);
  if (!items) return CG_ERR_NO_MEMORY;
  v->items = items;
  v->cap = (uint32_t)cap;
  return CG_SUCCESS;
}

static cg_status_t grow(void **items, size_t item_size, uint32_t *cap, size_t need) {
  if (need <= *cap) return CG_SUCCESS;
  if (need > UINT32_MAX - 1) return CG_ERR_NO_MEMORY;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  if (n > UINT32_MAX - 1) n = UINT32_MAX - 1;
  void *p = realloc(*items, n * item_size);
  if (!p) return CG_ERR_NO_MEMORY;
  *items = p;
  *cap = (uint32_t)n;
  return CG_SUCCESS;
}

static int compare_spans(const void *a, const void *b) {
  const cg_span_t *x = a, *y = b;
  return (x->start > y->start) - (x->start < y->start);
}

/* ---- treap primitives: all infallible once the pools are reserved */

static uint32_t next_prio(cg_hazard_t *h) {
  h->rng ^= h->rng << 13;
  h->rng ^= h->rng >> 7;
  h->rng ^= h->rng << 17;
  return (uint32_t)(h->rng >> 32);
}

static uint32_t new_segment(cg_hazard_t *h, uintptr_t start, uintptr_t end, uint32_t writer, uint32_t readers) {
  uint32_t s;
  if (h->free_segs != CG_NO_NODE) {
    s = h->free_segs;
    h->free_segs = h->segs[s].left;
  } else {
    s = h->n_segs++;
  }
  h->segs[s] = (cg_segment_t){start, end, writer, readers, CG_NO_NODE, CG_NO_NODE, next_prio(h)};
  return s;
}

static void free_tree(cg_hazard_t *h, uint32_t t) {
  while (t != CG_NO_NODE) {
    free_tree(h, h->segs[t].left);
    uint32_t right = h->segs[t].right;
    h->segs[t].left = h->free_segs;
    h->free_segs = t;
    t = right;
  }
}

/* Segments starting before `key` go to *l, the rest to *r. */
static void split(cg_segment_t *s, uint32_t t, uintptr_t key, uint32_t *l, uint32_t *r) {
  if (t == CG_NO_NODE) {
    *l = *r = CG_NO_NODE;
  } else if (s[t].start < key) {
    split(s, s[t].right, key, &s[t].right, r);
    *l = t;
  } else {
    split(s, s[t].left, key, l, &s[t].left);
    *r = t;
  }
}

/* Every start in l is below every start in r. */
static uint32_t merge(cg_segment_t *s, uint32_t l, uint32_t r) {
  if (l == CG_NO_NODE) return r;
  if (r == CG_NO_NODE) return l;
  if (s[l].prio > s[r].prio) {
    s[l].right = merge(s, s[l].right, r);
    return l;
  }
  s[r].left = merge(s, l, s[r].left);
  return r;
}

static uint32_t rightmost(const cg_segment_t *s, uint32_t t) {
  if (t == CG_NO_NODE) return t;
  while (s[t].right != CG_NO_NODE) t = s[t].right;
  return t;
}

/* Cuts the tree at `at`: the segment that straddles it is divided in two, both
 * halves keeping its writer and (shared) readers. *l gets what lies below. */
static void cut(cg_hazard_t *h, uint32_t t, uintptr_t at, uint32_t *l, uint32_t *r) {
  split(h->segs, t, at, l, r);
  uint32_t last = rightmost(h->segs, *l);
  if (last != CG_NO_NODE && h->segs[last].end > at) {
    const cg_segment_t seg = h->segs[last];
    uint32_t upper = new_segment(h, at, seg.end, seg.writer, seg.readers);
    h->segs[last].end = at;
    *r = merge(h->segs, upper, *r);
  }
}

/* ---- queries */

typedef struct visit_state {
  uintptr_t a, b;
  uintptr_t cursor; /* end of what has been seen so far */
  size_t pieces;    /* overlapped segments plus uncovered gaps */
  cg_edge_vec_t *preds;
  int writing;
  cg_status_t status;
} visit_state_t;

static void push_pred(visit_state_t *v, uint32_t node, uint32_t cause) {
  if (v->status != CG_SUCCESS) return;
  if (cg_edge_vec_reserve(v->preds, (size_t)v->preds->len + 1) != CG_SUCCESS) {
    v->status = CG_ERR_NO_MEMORY;
    return;
  }
  v->preds->items[v->preds->len++] = (cg_edge_t){node, cause};
}

static void visit_segment(const cg_hazard_t *h, const cg_segment_t *seg, visit_state_t *v) {
  uintptr_t lo = seg->start > v->a ? seg->start : v->a;
  if (lo > v->cursor) v->pieces++; /* a gap before this segment */
  v->pieces++;
  v->cursor = seg->end < v->b ? seg->end : v->b;
  if (!v->writing) {
    if (seg->writer != CG_NO_NODE) push_pred(v, seg->writer, CG_EDGE_RAW);
  } else if (seg->readers != CG_NO_NODE) {
    /* each reader already follows the writer, so the writer needs no edge */
    for (uint32_t c = seg->readers; c != CG_NO_NODE; c = h->cells[c].next) push_pred(v, h->cells[c].node, CG_EDGE_WAR);
  } else if (seg->writer != CG_NO_NODE) {
    push_pred(v, seg->writer, CG_EDGE_WAW);
  }
}

/* In-order visit of the segments that overlap [a, b), without changing them.
 * A segment starting before a can only be the one just below a, so left
 * subtrees of nodes starting below a are skipped. */
static void visit_overlaps(const cg_hazard_t *h, uint32_t t, visit_state_t *v) {
  while (t != CG_NO_NODE) {
    const cg_segment_t *seg = &h->segs[t];
    if (seg->start >= v->b) {
      t = seg->left;
      continue;
    }
    if (seg->start > v->a) visit_overlaps(h, seg->left, v);
    if (seg->end > v->a) visit_segment(h, seg, v);
    t = seg->right;
  }
}

static cg_status_t query(const cg_hazard_t *h, cg_span_t span, int writing, cg_edge_vec_t *preds, size_t *pieces) {
  visit_state_t v = {.a = span.start, .b = span.end, .cursor = span.start, .preds = preds, .writing = writing};
  visit_overlaps(h, h->root, &v);
  if (v.cursor < v.b) v.pieces++; /* a gap at the end */
  *pieces = v.pieces;
  return v.status;
}

/* Sorted, no empty span, and each span ends strictly before the next starts. */
static int is_normalized(const cg_span_t *spans, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (spans[i].start >= spans[i].end || (i && spans[i - 1].end >= spans[i].start)) return 0;
  return 1;
}

cg_status_t cg_hazard_prepare(cg_hazard_t *h, const cg_access_set_t *access, cg_edge_vec_t *preds) {
  if (!is_normalized(access->reads, access->n_reads) || !is_normalized(access->writes, access->n_writes))
    return CG_ERR_INTERNAL;
  /* Reads are disjoint, so one read cannot cut inside another; writes replace
   * what they cover whatever the reads before them cut. So a read needs at most
   * two cut-off halves plus one segment per gap and a reader cell per piece,
   * and a write two halves plus itself. */
  size_t segs_needed = 0, cells_needed = 0, gaps_needed = 0;
  for (int writing = 0; writing < 2; writing++) {
    const cg_span_t *spans = writing ? access->writes : access->reads;
    size_t n = writing ? access->n_writes : access->n_reads;
    for (size_t i = 0; i < n; i++) {
      size_t pieces = 0;
      cg_status_t st = query(h, spans[i], writing, preds, &pieces);
      if (st != CG_SUCCESS) return st;
      if (writing) {
        segs_needed += 3;
      } else {
        segs_needed += pieces + 2;
        cells_needed += pieces;
        if (pieces > gaps_needed) gaps_needed = pieces;
      }
    }
  }
  if (grow((void **)&h->segs, sizeof *h->segs, &h->cap_segs, (size_t)h->n_segs + segs_needed) != CG_SUCCESS ||
      grow((void **)&h->cells, sizeof *h->cells, &h->cap_cells, (size_t)h->n_cells + cells_needed) != CG_SUCCESS)
    return CG_ERR_NO_MEMORY;
  if (gaps_needed > h->cap_gaps) {
    cg_span_t *gaps = realloc(h->gaps, gaps_needed * sizeof *gaps);
    if (!gaps) return CG_ERR_NO_MEMORY;
    h->gaps = gaps;
    h->cap_gaps = gaps_needed;
  }
  return CG_SUCCESS;
}

/* ---- updates */

typedef struct read_state {
  cg_hazard_t *h;
  uint32_t node;
  uintptr_t cursor;
  size_t n_gaps;
} read_state_t;

static void add_reader(read_state_t *r, uint32_t t) {
  while (t != CG_NO_NODE) {
    add_reader(r, r->h->segs[t].left);
    cg_segment_t *seg = &r->h->segs[t];
    if (seg->start > r->cursor) r->h->gaps[r->n_gaps++] = (cg_span_t){r->cursor, seg->start};
    r->cursor = seg->end;
    uint32_t cell = r->h->n_cells++;
    r->h->cells[cell] = (cg_reader_cell_t){r->node, seg->readers};
    seg->readers = cell;
    t = seg->right;
  }
}

static uint32_t insert(cg_hazard_t *h, uint32_t t, uint32_t seg) {
  uint32_t l, r;
  split(h->segs, t, h->segs[seg].start, &l, &r);
  return merge(h->segs, merge(h->segs, l, seg), r);
}

static void apply_span(cg_hazard_t *h, uint32_t node, cg_span_t span, int writing) {
  uint32_t below, rest, inside, above;
  cut(h, h->root, span.start, &below, &rest);
  cut(h, rest, span.end, &inside, &above);
  if (writing) {
    free_tree(h, inside);
    inside = new_segment(h, span.start, span.end, node, CG_NO_NODE);
  } else {
    read_state_t r = {.h = h, .node = node, .cursor = span.start};
    add_reader(&r, inside);
    if (r.cursor < span.end) h->gaps[r.n_gaps++] = (cg_span_t){r.cursor, span.end};
    for (size_t i = 0; i < r.n_gaps; i++) {
      uint32_t cell = h->n_cells++;
      h->cells[cell] = (cg_reader_cell_t){node, CG_NO_NODE};
      inside = insert(h, inside, new_segment(h, h->gaps[i].start, h->gaps[i].end, CG_NO_NODE, cell));
    }
  }
  h->root = merge(h->segs, merge(h->segs, below, inside), above);
}

/* A read the same node also writes over leaves no trace: the write replaces it. */
static int covered_by_writes(const cg_access_set_t *access, cg_span_t span) {
  for (size_t i = 0; i < access->n_writes; i++)
    if (access->writes[i].start <= span.start && span.end <= access->writes[i].end) return 1;
  return 0;
}

void cg_hazard_apply(cg_hazard_t *h, uint32_t node, const cg_access_set_t *access) {
  for (size_t i = 0; i < access->n_reads; i++)
    if (!covered_by_writes(access, access->reads[i])) apply_span(h, node, access->reads[i], 0);
  for (size_t i = 0; i < access->n_writes; i++) apply_span(h, node, access->writes[i], 1);
}

size_t cg_span_normalize(cg_span_t *spans, size_t n) {
  size_t kept = 0;
  for (size_t i = 0; i < n; i++)
    if (spans[i].start < spans[i].end) spans[kept++] = spans[i];
  qsort(spans, kept, sizeof *spans, compare_spans);
  size_t merged = 0;
  for (size_t i = 0; i < kept; i++) {
    if (merged && spans[i].start <= spans[merged - 1].end) {
      if (spans[i].end > spans[merged - 1].end) spans[merged - 1].end = spans[i].end;
    } else {
      spans[merged++] = spans[i];
    }
  }
  return merged;
}

void cg_hazard_clear(cg_hazard_t *h) {
  /* Reader cells are never shared across a fence, so all of them can go. */
  free_tree(h, h->root);
  h->root = CG_NO_NODE;
  h->n_cells = 0;
}
