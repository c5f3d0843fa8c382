#include "kind_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  return p;
}

static char *poisoned(size_t bytes) {
  char *p = xmalloc(bytes + 2 * CG_KC_GUARD);
  memset(p, CG_MPI_POISON, bytes + 2 * CG_KC_GUARD);
  return p;
}

int cg_kc_has_inplace_form(cg_node_kind_t k) { return k != CG_NODE_ALLTOALL && k != CG_NODE_SEND; }

int cg_kc_scales_with_ranks(cg_node_kind_t k) {
  return k == CG_NODE_ALLGATHER || k == CG_NODE_REDUCE_SCATTER || k == CG_NODE_ALLTOALL || k == CG_NODE_GATHER ||
         k == CG_NODE_SCATTER;
}

/* The two forms of a case share their inputs, and regenerating other ranks'
 * inputs (and their reductions) is most of the time of the MB cases: the blocks
 * of the current case are kept for its other form. */
enum { REDUCED = 0xFFF }; /* sender field of a reduced block */
static struct {
  uint64_t id; /* case they belong to */
  uint64_t *salt;
  char **data;
  size_t n, cap;
} memo;

void cg_kc_forget(void) {
  for (size_t i = 0; i < memo.n; i++) free(memo.data[i]);
  free(memo.salt);
  free(memo.data);
  memset(&memo, 0, sizeof memo);
}

/* Rank `sender`'s input for block `block` of case c (count elements), or with
 * sender REDUCED the reduction over all ranks of their inputs for `block`. */
static const char *block_of(const kcase_t *c, int sender, int block) {
  uint64_t salt = c->id << 24 | (uint64_t)sender << 12 | (uint64_t)block;
  if (memo.id != c->id) cg_kc_forget();
  memo.id = c->id;
  for (size_t i = 0; i < memo.n; i++)
    if (memo.salt[i] == salt) return memo.data[i];
  int n = c->size;
  size_t cb = c->count * cg_dtype_size(c->dtype);
  char *data = xmalloc(cb);
  if (sender == REDUCED) {
    char *inputs = xmalloc(cb * (size_t)n);
    for (int r = 0; r < n; r++) memcpy(inputs + (size_t)r * cb, block_of(c, r, block), cb);
    cg_ref_reduce(data, inputs, n, c->count, c->dtype, c->op);
    free(inputs);
  } else {
    cg_mpi_test_fill(data, c->count, c->dtype, c->op, n, cg_test_seed(), salt);
  }
  if (memo.n == memo.cap) {
    memo.cap = memo.cap ? 2 * memo.cap : 16;
    memo.salt = realloc(memo.salt, memo.cap * sizeof *memo.salt);
    memo.data = realloc(memo.data, memo.cap * sizeof *memo.data);
    ck_assert(memo.salt && memo.data);
  }
  memo.salt[memo.n] = salt;
  memo.data[memo.n++] = data;
  return data;
}

static void put_input(void *dst, const kcase_t *c, int sender, int block) {
  memcpy(dst, block_of(c, sender, block), c->count * cg_dtype_size(c->dtype));
}

static void put_reduced(void *dst, const kcase_t *c, int block) {
  memcpy(dst, block_of(c, REDUCED, block), c->count * cg_dtype_size(c->dtype));
}

/* Bytes of a and b this rank needs: only what the kind uses on this rank, so
 * the guards sit right where a wrong length would write. */
static void buffer_sizes(const kcase_t *c, size_t *a, size_t *b) {
  int n = c->size, is_root = c->rank == c->root, ip = c->inplace;
  size_t cb = c->count * cg_dtype_size(c->dtype), all = cb * (size_t)n;
  switch (c->kind) {
    case CG_NODE_ALLREDUCE:
    case CG_NODE_REDUCE: *a = cb, *b = ip ? 0 : cb; break;
    case CG_NODE_BROADCAST: *a = ip || is_root ? cb : 0, *b = ip ? 0 : cb; break;
    case CG_NODE_ALLGATHER: *a = ip ? all : cb, *b = ip ? 0 : all; break;
    case CG_NODE_REDUCE_SCATTER: *a = all, *b = ip ? 0 : cb; break;
    case CG_NODE_ALLTOALL: *a = all, *b = all; break;
    case CG_NODE_GATHER: *a = ip && is_root ? all : cb, *b = ip ? 0 : all; break;
    case CG_NODE_SCATTER: *a = is_root ? all : 0, *b = ip && is_root ? 0 : cb; break;
    default: *a = cb, *b = cb; break; /* send/recv */
  }
}

void cg_kc_setup(kcase_t *c, int rank, int size) {
  c->rank = rank;
  c->size = size;
  int me = c->rank, n = c->size, root = c->root, is_root = me == root;
  size_t cb = c->count * cg_dtype_size(c->dtype);
  buffer_sizes(c, &c->a_bytes, &c->b_bytes);
  c->a = poisoned(c->a_bytes);
  c->want_a = poisoned(c->a_bytes);
  c->b = poisoned(c->b_bytes);
  c->want_b = poisoned(c->b_bytes);
  char *a = c->a + CG_KC_GUARD, *wa = c->want_a + CG_KC_GUARD, *b = c->b + CG_KC_GUARD, *wb = c->want_b + CG_KC_GUARD;
  switch (c->kind) {
    case CG_NODE_ALLREDUCE:
      put_input(a, c, me, 0);
      if (!c->inplace) memcpy(wa, a, cb);
      put_reduced(c->inplace ? wa : wb, c, 0);
      c->send = a;
      c->recv = c->inplace ? a : b;
      break;
    case CG_NODE_REDUCE:
      /* in place, every rank passes send == recv as NCCL users do; only the
       * root's buffer may change */
      put_input(a, c, me, 0);
      memcpy(wa, a, cb);
      if (is_root) put_reduced(c->inplace ? wa : wb, c, 0);
      c->send = a;
      c->recv = c->inplace ? a : b;
      break;
    case CG_NODE_BROADCAST:
      if (is_root) put_input(a, c, me, 0);
      if (c->inplace) {
        put_input(wa, c, root, 0);
        c->send = c->recv = a;
      } else {
        memcpy(wa, a, c->a_bytes);
        put_input(wb, c, root, 0);
        c->send = is_root ? a : NULL; /* unused off the root: may be NULL */
        c->recv = b;
      }
      break;
    case CG_NODE_ALLGATHER:
      for (int r = 0; r < n; r++) put_input((c->inplace ? wa : wb) + (size_t)r * cb, c, r, 0);
      if (c->inplace) {
        put_input(a + (size_t)me * cb, c, me, 0);
        c->send = a + (size_t)me * cb;
        c->recv = a;
      } else {
        put_input(a, c, me, 0);
        memcpy(wa, a, cb);
        c->send = a;
        c->recv = b;
      }
      break;
    case CG_NODE_REDUCE_SCATTER:
      /* in place only this rank's block may change (NCCL's form; MPI's own
       * in-place form would also write the start of the buffer) */
      for (int j = 0; j < n; j++) put_input(a + (size_t)j * cb, c, me, j);
      memcpy(wa, a, (size_t)n * cb);
      put_reduced(c->inplace ? wa + (size_t)me * cb : wb, c, me);
      c->send = a;
      c->recv = c->inplace ? a + (size_t)me * cb : b;
      break;
    case CG_NODE_ALLTOALL:
      for (int j = 0; j < n; j++) put_input(a + (size_t)j * cb, c, me, j);
      memcpy(wa, a, (size_t)n * cb);
      for (int r = 0; r < n; r++) put_input(wb + (size_t)r * cb, c, r, me);
      c->send = a;
      c->recv = b;
      break;
    case CG_NODE_GATHER:
      if (c->inplace && is_root) {
        put_input(a + (size_t)root * cb, c, me, 0);
        for (int r = 0; r < n; r++) put_input(wa + (size_t)r * cb, c, r, 0);
        c->send = a + (size_t)root * cb;
        c->recv = a;
      } else {
        put_input(a, c, me, 0);
        memcpy(wa, a, cb);
        if (is_root)
          for (int r = 0; r < n; r++) put_input(wb + (size_t)r * cb, c, r, 0);
        c->send = a;
        /* out of place a non-root's recv must stay poisoned; in place it
         * passes NULL, which the header allows */
        c->recv = c->inplace ? NULL : b;
      }
      break;
    case CG_NODE_SCATTER:
      if (is_root) {
        for (int j = 0; j < n; j++) put_input(a + (size_t)j * cb, c, me, j);
        memcpy(wa, a, (size_t)n * cb);
      }
      if (c->inplace && is_root) {
        c->send = a;
        c->recv = a + (size_t)root * cb;
      } else {
        put_input(wb, c, root, me);
        c->send = is_root ? a : NULL;
        c->recv = b;
      }
      break;
    default: /* send to c->root, receive from c->from */
      put_input(a, c, me, 0);
      memcpy(wa, a, cb);
      put_input(wb, c, c->from, 0);
      c->send = a;
      c->recv = b;
      break;
  }
  /* zero bytes: NULL is valid, and MPI must not be handed a bad pointer */
  if (c->count == 0 && !c->inplace) c->send = c->recv = NULL;
}

void cg_kc_free(kcase_t *c) {
  free(c->a);
  free(c->b);
  free(c->want_a);
  free(c->want_b);
}

void cg_kc_describe(char *out, size_t len, const kcase_t *c) {
  char extra[64] = "";
  if (c->kind == CG_NODE_SEND)
    snprintf(extra, sizeof extra, " to %d from %d", c->root, c->from);
  else if (cg_test_kind_has_op(c->kind) && cg_test_kind_is_rooted(c->kind))
    snprintf(extra, sizeof extra, " %s root %d", cg_redop_name(c->op), c->root);
  else if (cg_test_kind_has_op(c->kind))
    snprintf(extra, sizeof extra, " %s", cg_redop_name(c->op));
  else if (cg_test_kind_is_rooted(c->kind))
    snprintf(extra, sizeof extra, " root %d", c->root);
  snprintf(out, len, "%s %s%s count %zu %s (rank %d of %d)",
           c->kind == CG_NODE_SEND ? "send/recv" : cg_node_kind_name(c->kind), cg_dtype_name(c->dtype), extra,
           c->count, c->inplace ? "in place" : "out of place", c->rank, c->size);
}

int cg_kc_check(const kcase_t *c, char *why, size_t len) {
  const char *names[2] = {c->inplace ? "buffer" : "send", "recv"};
  const char *got[2] = {c->a, c->b}, *want[2] = {c->want_a, c->want_b};
  size_t bytes[2] = {c->a_bytes, c->b_bytes};
  for (int k = 0; k < 2; k++) {
    size_t total = bytes[k] + 2 * CG_KC_GUARD;
    if (!memcmp(got[k], want[k], total)) continue;
    size_t i = 0, n_diff = 0;
    while (got[k][i] == want[k][i]) i++;
    for (size_t j = i; j < total; j++) n_diff += got[k][j] != want[k][j];
    char what[200];
    cg_kc_describe(what, sizeof what, c);
    snprintf(why, len, "%s: %s byte %td of %zu is 0x%02x, expected 0x%02x (%zu bytes differ)", what, names[k],
             (ptrdiff_t)i - CG_KC_GUARD, bytes[k], (unsigned char)got[k][i], (unsigned char)want[k][i], n_diff);
    return 0;
  }
  return 1;
}
