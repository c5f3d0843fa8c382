/* cg_plan_rebind on host plans, on real ranks: results land in the new
 * buffers and the old ones keep their bytes; fused buckets laid out again when
 * their members stop (or start) being contiguous; the in-place form and the
 * overlap rule; refusals that change nothing; a running plan is not rebound;
 * and many random rebinding rounds, each checked byte for byte against the
 * reference executor run on a graph recorded over the new buffers. The
 * programs over one pool that the fused and random tests rebind, and their
 * check against the reference, are in rebind_programs.c; the calls asserted on
 * every rank in rebind_support.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kind_cases.h"
#include "mpi_test.h"
#include "rebind_programs.h"
#include "rebind_support.h"

static const cg_status_t invalid_argument[] = {CG_ERR_INVALID_ARGUMENT, CG_SUCCESS};
static const cg_status_t alias_or_invalid[] = {CG_ERR_ALIAS, CG_ERR_INVALID_ARGUMENT, CG_SUCCESS};
static const cg_status_t invalid_node[] = {CG_ERR_INVALID_NODE, CG_SUCCESS};
static const cg_status_t node_or_argument[] = {CG_ERR_INVALID_NODE, CG_ERR_INVALID_ARGUMENT, CG_SUCCESS};

/* ---- every kind, rebound to other buffers and back
 *
 * One graph holds every communicating kind (a send and its receive for the
 * point-to-point pair), in place and not, on buffers set up by kind_cases.h,
 * which also computes the expected bytes (guards included) without
 * communicating. */

enum { KC_MAX = 24 };

static const size_t kc_counts[] = {1, 7, 130, 1021};
static const cg_dtype_t kc_dtypes[] = {CG_INT32, CG_FLOAT64, CG_INT8, CG_FLOAT32, CG_BFLOAT16, CG_UINT64};

/* The cases of one set: `salt` makes their data differ from another set's. */
static size_t kind_cases(kcase_t *out, uint64_t salt) {
  int me = cg_mpi_rank(), n = cg_mpi_size();
  static const cg_node_kind_t kinds[] = {CG_NODE_ALLREDUCE, CG_NODE_BROADCAST, CG_NODE_REDUCE, CG_NODE_ALLGATHER,
                                         CG_NODE_REDUCE_SCATTER, CG_NODE_ALLTOALL, CG_NODE_GATHER, CG_NODE_SCATTER,
                                         CG_NODE_SEND};
  size_t k = 0;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    for (int form = 0; form < (cg_kc_has_inplace_form(kinds[i]) ? 2 : 1); form++, k++) {
      ck_assert_uint_lt(k, KC_MAX);
      out[k] = (kcase_t){.kind = kinds[i],
                         .dtype = kc_dtypes[k % (sizeof kc_dtypes / sizeof kc_dtypes[0])],
                         .op = k % 3 == 2 ? CG_MAX : CG_SUM,
                         .root = (int)(k % (size_t)n),
                         .from = (me + n - 1) % n,
                         .count = kc_counts[k % (sizeof kc_counts / sizeof kc_counts[0])],
                         .inplace = form,
                         .id = salt << 32 | k};
      if (kinds[i] == CG_NODE_SEND) out[k].root = (me + 1) % n;
    }
  for (size_t i = 0; i < k; i++) cg_kc_setup(&out[i], me, n);
  return k;
}

static void record_case(cg_node_t h[2], cg_graph_t *g, cg_comm_t *comm, const kcase_t *c) {
  if (c->kind == CG_NODE_SEND) {
    ck_assert_cg_ok(cg_send(&h[0], g, comm, c->send, c->count, c->dtype, c->root));
    ck_assert_cg_ok(cg_recv(&h[1], g, comm, c->recv, c->count, c->dtype, c->from));
    return;
  }
  cg_test_call_t call = {c->kind, comm, c->send, c->recv, c->count, c->dtype, c->op, c->root};
  ck_assert_cg_ok(cg_test_record(&h[0], g, &call));
}

/* The entries that point case i's nodes at set `c`'s buffers. */
static size_t case_binds(cg_rebind_t *out, cg_node_t h[2], const kcase_t *c) {
  if (c->kind == CG_NODE_SEND) {
    out[0] = (cg_rebind_t){h[0], c->send, NULL};
    out[1] = (cg_rebind_t){h[1], NULL, c->recv};
    return 2;
  }
  out[0] = (cg_rebind_t){h[0], c->send, c->recv};
  return 1;
}

static int cases_right(const kcase_t *cases, size_t n, char *why, size_t len) {
  for (size_t i = 0; i < n; i++)
    if (!cg_kc_check(&cases[i], why, len)) return 0;
  return 1;
}

/* Copies of a set's buffers (guards included), to show later runs left them. */
typedef struct snapshot {
  char *a[KC_MAX], *b[KC_MAX];
} snapshot_t;

static void snap(snapshot_t *s, const kcase_t *cases, size_t n) {
  for (size_t i = 0; i < n; i++) {
    s->a[i] = rb_xmalloc(cases[i].a_bytes + 2 * CG_KC_GUARD);
    s->b[i] = rb_xmalloc(cases[i].b_bytes + 2 * CG_KC_GUARD);
    memcpy(s->a[i], cases[i].a, cases[i].a_bytes + 2 * CG_KC_GUARD);
    memcpy(s->b[i], cases[i].b, cases[i].b_bytes + 2 * CG_KC_GUARD);
  }
}

/* 1 if the set still holds the snapshot's bytes; else `why` names the case. */
static int unchanged(const snapshot_t *s, const kcase_t *cases, size_t n, char *why, size_t len) {
  for (size_t i = 0; i < n; i++) {
    if (memcmp(s->a[i], cases[i].a, cases[i].a_bytes + 2 * CG_KC_GUARD) == 0 &&
        memcmp(s->b[i], cases[i].b, cases[i].b_bytes + 2 * CG_KC_GUARD) == 0)
      continue;
    char what[200];
    cg_kc_describe(what, sizeof what, &cases[i]);
    snprintf(why, len, "%s: an old buffer changed after the plan was rebound away from it", what);
    return 0;
  }
  return 1;
}

static void free_snapshot(snapshot_t *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(s->a[i]);
    free(s->b[i]);
  }
}

START_TEST(rebind__every_kind_lands_in_new_buffers_and_leaves_old_ones_alone) {
  cg_comm_t *comm[2] = {rb_world(), rb_world()};
  kcase_t a[KC_MAX], b[KC_MAX], again[KC_MAX];
  memset(a, 0, sizeof a);
  memset(b, 0, sizeof b);
  memset(again, 0, sizeof again);
  size_t n = kind_cases(a, 1);
  cg_node_t h[KC_MAX][2];
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (size_t i = 0; i < n; i++) record_case(h[i], g, comm[i % 2], &a[i]);
  cg_plan_t *plan = rb_compile_all(g, "every kind");
  cg_graph_destroy(g); /* node handles stay usable for rebinding: they are plain values */

  char why[600] = "", what[700];
  rb_run_all(plan, 0, "set A");
  int ok = cases_right(a, n, why, sizeof why);
  snprintf(what, sizeof what, "set A before rebinding: %s", why);
  ck_assert_all_ranks(ok, what);

  /* to set B: its results right, A's bytes as they were */
  snapshot_t sa;
  snap(&sa, a, n);
  ck_assert_uint_eq(kind_cases(b, 2), n);
  cg_rebind_t binds[2 * KC_MAX];
  size_t nb = 0;
  for (size_t i = 0; i < n; i++) nb += case_binds(binds + nb, h[i], &b[i]);
  rb_rebind_ok(plan, binds, nb, "every node to set B");
  rb_run_all(plan, 1, "set B");
  ok = cases_right(b, n, why, sizeof why);
  snprintf(what, sizeof what, "set B: %s", why);
  ck_assert_all_ranks(ok, what);
  ok = unchanged(&sa, a, n, why, sizeof why);
  snprintf(what, sizeof what, "set A after running on set B: %s", why);
  ck_assert_all_ranks(ok, what);

  /* back to A's very pointers, with A's inputs written again */
  ck_assert_uint_eq(kind_cases(again, 1), n);
  for (size_t i = 0; i < n; i++) {
    ck_assert_uint_eq(again[i].a_bytes, a[i].a_bytes);
    ck_assert_uint_eq(again[i].b_bytes, a[i].b_bytes);
    memcpy(a[i].a, again[i].a, a[i].a_bytes + 2 * CG_KC_GUARD);
    memcpy(a[i].b, again[i].b, a[i].b_bytes + 2 * CG_KC_GUARD);
  }
  snapshot_t sb;
  snap(&sb, b, n);
  nb = 0;
  for (size_t i = 0; i < n; i++) nb += case_binds(binds + nb, h[i], &a[i]);
  rb_rebind_ok(plan, binds, nb, "every node back to set A");
  rb_run_all(plan, 0, "set A again");
  ok = cases_right(a, n, why, sizeof why);
  snprintf(what, sizeof what, "set A after rebinding back: %s", why);
  ck_assert_all_ranks(ok, what);
  ok = unchanged(&sb, b, n, why, sizeof why);
  snprintf(what, sizeof what, "set B after running on set A again: %s", why);
  ck_assert_all_ranks(ok, what);

  cg_plan_destroy(plan);
  free_snapshot(&sa, n);
  free_snapshot(&sb, n);
  for (size_t i = 0; i < n; i++) {
    cg_kc_free(&a[i]);
    cg_kc_free(&b[i]);
    cg_kc_free(&again[i]);
  }
  cg_kc_forget();
  cg_comm_destroy(comm[0]);
  cg_comm_destroy(comm[1]);
}
END_TEST

/* ---- programs over one pool of memory, checked against the reference
 * (rebind_programs.h: the pool, its layouts and the comparison) */

static size_t copy_bytes(const cg_plan_t *plan) {
  cg_plan_stats_t st;
  ck_assert_cg_ok(cg_plan_stats(&st, plan));
  return st.copy_bytes;
}

static int fusion_disabled(void) {
  const char *v = getenv("CG_FUSION");
  return v && strcmp(v, "0") == 0;
}

/* Runs of fusible collectives (allreduces out of place and in place,
 * broadcasts, allgathers, reduce_scatters) compiled over contiguous buffers,
 * rebound to buffers apart from each other (the buckets copy more), back to
 * the compiled buffers (copies as compiled), a few members moved out, then all
 * to contiguous buffers elsewhere; every layout checked against the
 * reference. (A reduce_scatter bucket whose receive side ran on its members'
 * memory once went to MPI with sendbuf == recvbuf on rank 0 after its members
 * were scattered.) */
START_TEST(rebind__fused_members_scattered_and_back_to_contiguous) {
  int n = cg_mpi_size();
  pprog_t *pg = calloc(1, sizeof *pg);
  ck_assert_ptr_nonnull(pg);
  pg->comms[0] = rb_world();
  pg->comms[1] = rb_world();
  static const size_t ar[] = {1, 17, 256, 1000, 3, 4099};
  for (size_t i = 0; i < 6; i++) prog_add(pg, CG_NODE_ALLREDUCE, CG_FLOAT32, CG_SUM, -1, ar[i], 0, 0);
  static const size_t ip[] = {5, 64, 1, 300};
  for (size_t i = 0; i < 4; i++) prog_add(pg, CG_NODE_ALLREDUCE, CG_INT64, CG_MAX, -1, ip[i], 1, 0);
  static const size_t bc[] = {7, 100, 33};
  for (size_t i = 0; i < 3; i++) prog_add(pg, CG_NODE_BROADCAST, CG_INT32, CG_SUM, 1 % n, bc[i], 0, 1);
  static const size_t ag[] = {2, 33, 100};
  for (size_t i = 0; i < 3; i++) prog_add(pg, CG_NODE_ALLGATHER, CG_FLOAT64, CG_SUM, -1, ag[i], 0, 1);
  static const size_t rs[] = {41, 3, 19};
  for (size_t i = 0; i < 3; i++) prog_add(pg, CG_NODE_REDUCE_SCATTER, CG_INT8, CG_MAX, -1, rs[i], 0, 0);
  prog_add(pg, CG_NODE_SEND, CG_INT32, CG_SUM, 1, 77, 0, 0);
  prog_alloc(pg);
  size_t packed_end = prog_layout_packed(pg, 0, pg->off);

  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  prog_record(g, pg, 0);
  cg_plan_t *plan = rb_compile_all(g, "runs of fusible collectives");
  cg_graph_destroy(g);
  cg_plan_stats_t st;
  ck_assert_cg_ok(cg_plan_stats(&st, plan));
  int fused = !fusion_disabled();
  if (fused) {
    ck_assert_msg(st.buckets >= 2 && st.fused_nodes >= 10, "rank %d: %zu buckets of %zu nodes: the allreduce runs "
                  "should fuse", cg_mpi_rank(), st.buckets, st.fused_nodes);
  }
  size_t packed_copies = st.copy_bytes;
  prog_run_and_check(pg, plan, 1, 0, "compiled layout (contiguous)");

  /* every node to scattered places in the other half */
  int all[P_MAX], some[P_MAX];
  for (int i = 0; i < P_MAX; i++) all[i] = i < pg->n, some[i] = 0;
  size_t offs[P_MAX][2];
  prog_taken_t t = {.n = 0};
  prog_layout_scattered(pg, &t, pg->half, 2 * pg->half, all, offs);
  cg_rebind_t binds[2 * P_MAX];
  size_t nb = 0;
  for (int i = 0; i < pg->n; i++) nb += prog_binds(binds + nb, pg, i, offs[i]);
  rb_rebind_ok(plan, binds, nb, "every node to scattered buffers");
  memcpy(pg->off, offs, sizeof offs);
  size_t scattered_copies = copy_bytes(plan);
  if (fused)
    ck_assert_msg(scattered_copies > packed_copies, "rank %d: copy_bytes %zu after scattering the members of the "
                  "buckets, %zu when they were contiguous: the buckets must copy now", cg_mpi_rank(),
                  scattered_copies, packed_copies);
  prog_run_and_check(pg, plan, 2, 1, "scattered layout");
  prog_run_and_check(pg, plan, 3, 0, "scattered layout, run again");

  /* back to contiguous: the very buffers it was compiled with */
  prog_layout_packed(pg, 0, offs);
  nb = 0;
  for (int i = 0; i < pg->n; i++) nb += prog_binds(binds + nb, pg, i, offs[i]);
  rb_rebind_ok(plan, binds, nb, "every node back to contiguous buffers");
  memcpy(pg->off, offs, sizeof offs);
  ck_assert_uint_eq(copy_bytes(plan), packed_copies);
  prog_run_and_check(pg, plan, 4, 0, "contiguous again");

  /* members 1 and 3 of the first run, and the middle broadcast, moved out into
   * the second half: the rest stays contiguous */
  some[1] = some[3] = some[11] = 1;
  t.n = 0;
  prog_layout_scattered(pg, &t, pg->half, 2 * pg->half, some, offs);
  nb = 0;
  for (int i = 0; i < pg->n; i++)
    if (some[i]) nb += prog_binds(binds + nb, pg, i, offs[i]);
  rb_rebind_ok(plan, binds, nb, "three members moved out of their buckets");
  memcpy(pg->off, offs, sizeof offs);
  if (fused)
    ck_assert_msg(copy_bytes(plan) > packed_copies, "rank %d: members moved out of a contiguous bucket, yet "
                  "copy_bytes stayed %zu", cg_mpi_rank(), packed_copies);
  prog_run_and_check(pg, plan, 5, 1, "three members moved out");

  /* and contiguous once more, somewhere else: past the compiled layout in the
   * first half (where nothing lies now; the three that moved out are in the
   * second half), at an odd multiple of 8 bytes */
  prog_layout_packed(pg, prog_align_up(packed_end, 8) + 24, offs);
  nb = 0;
  for (int i = 0; i < pg->n; i++) nb += prog_binds(binds + nb, pg, i, offs[i]);
  rb_rebind_ok(plan, binds, nb, "every node to contiguous buffers elsewhere");
  memcpy(pg->off, offs, sizeof offs);
  ck_assert_uint_eq(copy_bytes(plan), packed_copies);
  prog_run_and_check(pg, plan, 6, 0, "contiguous elsewhere");

  cg_plan_destroy(plan);
  prog_free(pg);
  cg_comm_destroy(pg->comms[0]);
  cg_comm_destroy(pg->comms[1]);
  free(pg);
}
END_TEST

/* ---- the in-place form */

enum { IP_N = 64 };

static void fill_rank(int32_t *v, size_t n, int salt) {
  for (size_t i = 0; i < n; i++) v[i] = cg_mpi_rank() * 1000 + (int32_t)i + salt;
}

static int32_t sum_of(size_t i, int salt) {
  int n = cg_mpi_size();
  return 1000 * n * (n - 1) / 2 + n * ((int32_t)i + salt);
}

static int all_poison(const void *p, size_t bytes) {
  const unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++)
    if (b[i] != CG_MPI_POISON) return 0;
  return 1;
}

static int32_t *poisoned_ints(size_t n) {
  int32_t *p = rb_xmalloc(n * sizeof *p);
  memset(p, CG_MPI_POISON, n * sizeof *p);
  return p;
}

START_TEST(rebind__in_place_form_must_be_kept) {
  cg_comm_t *c = rb_world();
  int me = cg_mpi_rank(), n = cg_mpi_size();
  int32_t *x = poisoned_ints(IP_N), *x2 = poisoned_ints(IP_N), *x3 = poisoned_ints(IP_N), *y3 = poisoned_ints(IP_N);
  int32_t *u = poisoned_ints(IP_N), *v = poisoned_ints(IP_N), *w = poisoned_ints(2 * IP_N);
  int32_t *ag = poisoned_ints((size_t)n * IP_N), *ag2 = poisoned_ints((size_t)n * IP_N);
  cg_node_t a, b, ga;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(&a, g, c, x, x, IP_N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_allreduce(&b, g, c, u, v, IP_N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_allgather(&ga, g, c, ag + (size_t)me * IP_N, ag, IP_N, CG_INT32));
  cg_plan_t *plan = rb_compile_all(g, "in-place allreduce and allgather, out-of-place allreduce");
  cg_graph_destroy(g);

  /* checks the current buffers after a run on inputs from `salt` */
  int32_t *cx = x, *cag = ag;
  int salt = 0;
#define IP_RUN(label)                                                                  \
  do {                                                                                 \
    salt++;                                                                            \
    fill_rank(cx, IP_N, salt);                                                         \
    fill_rank(u, IP_N, 2 * salt);                                                      \
    memset(v, CG_MPI_POISON, IP_N * sizeof *v);                                        \
    memset(cag, CG_MPI_POISON, (size_t)n * IP_N * sizeof *cag);                        \
    fill_rank(cag + (size_t)me * IP_N, IP_N, 3 * salt);                                \
    rb_run_all(plan, salt % 2, label);                                                 \
    int ok_ = 1;                                                                       \
    for (size_t i = 0; i < IP_N; i++) ok_ &= cx[i] == sum_of(i, salt) && v[i] == sum_of(i, 2 * salt); \
    for (int r = 0; r < n; r++)                                                        \
      for (size_t i = 0; i < IP_N; i++) ok_ &= cag[(size_t)r * IP_N + i] == r * 1000 + (int32_t)i + 3 * salt; \
    ck_assert_all_ranks(ok_, label);                                                   \
  } while (0)

  IP_RUN("as compiled");

  /* in place to in place elsewhere: fine */
  cg_rebind_t ok_binds[] = {{a, x2, x2}, {ga, ag2 + (size_t)me * IP_N, ag2}};
  rb_rebind_ok(plan, ok_binds, 2, "in place to other in-place buffers");
  int32_t *old_x = rb_xmalloc(IP_N * sizeof *old_x), *old_ag = rb_xmalloc((size_t)n * IP_N * sizeof *old_ag);
  memcpy(old_x, x, IP_N * sizeof *x);
  memcpy(old_ag, ag, (size_t)n * IP_N * sizeof *ag);
  cx = x2;
  cag = ag2;
  IP_RUN("rebound in place");
  ck_assert_all_ranks(memcmp(old_x, x, IP_N * sizeof *x) == 0 && memcmp(old_ag, ag, (size_t)n * IP_N * sizeof *ag) == 0,
                      "the old in-place buffers are left alone");

  /* in place to two separate buffers */
  cg_rebind_t split[] = {{a, x3, y3}};
  rb_rebind_refused(plan, split, 1, invalid_argument, "an in-place allreduce given separate send and recv");
  /* out of place to in place */
  cg_rebind_t joined[] = {{b, w, w}};
  rb_rebind_refused(plan, joined, 1, alias_or_invalid, "an out-of-place allreduce given send == recv");
  /* out of place to overlapping, not in place */
  cg_rebind_t shifted[] = {{b, w + 1, w}};
  rb_rebind_refused(plan, shifted, 1, alias_or_invalid, "an out-of-place allreduce given overlapping send and recv");
  /* in-place allgather with the send block at another rank's place */
  cg_rebind_t wrong_block[] = {{ga, ag + (size_t)((me + 1) % n) * IP_N, ag}};
  if (n > 1)
    rb_rebind_refused(plan, wrong_block, 1, alias_or_invalid,
                      "an in-place allgather whose send is another rank's block");
  /* in-place allgather to separate buffers */
  cg_rebind_t ag_split[] = {{ga, x3, ag}};
  rb_rebind_refused(plan, ag_split, 1, invalid_argument, "an in-place allgather given a separate send buffer");
  ck_assert_all_ranks(all_poison(x3, IP_N * sizeof *x3) && all_poison(y3, IP_N * sizeof *y3) &&
                      all_poison(w, 2 * IP_N * sizeof *w), "refused buffers untouched");
  IP_RUN("after the refusals: still on the last buffers that were accepted");
  ck_assert_all_ranks(all_poison(x3, IP_N * sizeof *x3) && all_poison(y3, IP_N * sizeof *y3) &&
                      all_poison(w, 2 * IP_N * sizeof *w), "refused buffers untouched by the run");
#undef IP_RUN
  cg_plan_destroy(plan);
  free(x); free(x2); free(x3); free(y3); free(u); free(v); free(w); free(ag); free(ag2);
  free(old_x); free(old_ag);
  cg_comm_destroy(c);
}
END_TEST

/* ---- overlap with another node's buffers
 *
 * a: x1 -> y1, b: x2 -> y2, c: y1 -> z (reads what a writes). */

enum { OV_N = 40 };

typedef struct ov_bufs {
  int32_t *x1, *y1, *x2, *y2, *z;
} ov_bufs_t;

static void ov_fill(const ov_bufs_t *o, int salt) {
  fill_rank(o->x1, OV_N, salt);
  fill_rank(o->x2, OV_N, salt + 50);
  memset(o->y1, CG_MPI_POISON, OV_N * 4);
  memset(o->y2, CG_MPI_POISON, OV_N * 4);
  memset(o->z, CG_MPI_POISON, OV_N * 4);
}

static int ov_right(const ov_bufs_t *o, int salt) {
  int ok = 1, n = cg_mpi_size();
  for (size_t i = 0; i < OV_N; i++)
    ok &= o->y1[i] == sum_of(i, salt) && o->y2[i] == sum_of(i, salt + 50) && o->z[i] == n * sum_of(i, salt);
  return ok;
}

START_TEST(rebind__overlap_with_another_node_is_refused_unless_it_was_there_at_compile) {
  cg_comm_t *c = rb_world();
  int32_t *mem = rb_xmalloc(20 * OV_N * 4); /* room for three sets of five buffers, and spares */
  memset(mem, CG_MPI_POISON, 20 * OV_N * 4);
  ov_bufs_t s1 = {mem, mem + OV_N, mem + 2 * OV_N, mem + 3 * OV_N, mem + 4 * OV_N};
  ov_bufs_t s2 = {mem + 5 * OV_N, mem + 6 * OV_N, mem + 7 * OV_N, mem + 8 * OV_N, mem + 9 * OV_N};
  int32_t *spare = mem + 15 * OV_N;
  cg_node_t a, b, cc;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(&a, g, c, s1.x1, s1.y1, OV_N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_allreduce(&b, g, c, s1.x2, s1.y2, OV_N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_allreduce(&cc, g, c, s1.y1, s1.z, OV_N, CG_INT32, CG_SUM));
  cg_plan_t *plan = rb_compile_all(g, "two independent allreduces and one reading the first's output");
  cg_graph_destroy(g);
  ov_fill(&s1, 1);
  rb_run_all(plan, 0, "as compiled");
  ck_assert_all_ranks(ov_right(&s1, 1), "results as compiled");

  /* overlaps the plan does not order: refused */
  cg_rebind_t write_on_write[] = {{b, s1.x2, s1.y1}};
  rb_rebind_refused(plan, write_on_write, 1, alias_or_invalid, "b writing into a's output");
  cg_rebind_t write_on_read[] = {{b, s1.x2, s1.x1 + 3}};
  rb_rebind_refused(plan, write_on_read, 1, alias_or_invalid, "b writing over part of a's input");
  cg_rebind_t read_of_write[] = {{b, s1.z + OV_N / 2, s1.y2}};
  rb_rebind_refused(plan, read_of_write, 1, alias_or_invalid, "b reading half of c's output");
  cg_rebind_t c_reads_b[] = {{cc, s1.y2, s1.z}};
  rb_rebind_refused(plan, c_reads_b, 1, alias_or_invalid, "c reading b's output (a dependency the plan lacks)");
  /* a batch whose second entry is bad changes nothing, first entry included */
  cg_rebind_t half_bad[] = {{a, s2.x1, s2.y1}, {b, s1.x2, s1.y1}};
  rb_rebind_refused(plan, half_bad, 2, alias_or_invalid, "a good entry followed by an overlapping one");
  ov_fill(&s1, 2);
  rb_run_all(plan, 1, "after the refusals");
  ck_assert_all_ranks(ov_right(&s1, 2) && all_poison(s2.y1, OV_N * 4),
                      "after refusals the plan still runs on the compiled buffers");

  /* the overlap that was there at compile, kept: a and c move together */
  cg_rebind_t together[] = {{cc, s2.y1, s2.z}, {a, s2.x1, s2.y1}, {b, s2.x2, s2.y2}};
  rb_rebind_ok(plan, together, 3, "a and c moved together, keeping c reading a's output");
  int32_t *keep = rb_xmalloc(5 * OV_N * 4);
  memcpy(keep, mem, 5 * OV_N * 4);
  ov_fill(&s2, 3);
  rb_run_all(plan, 0, "moved together");
  ck_assert_all_ranks(ov_right(&s2, 3), "results after moving a and c together");
  ck_assert_all_ranks(memcmp(keep, mem, 5 * OV_N * 4) == 0, "the compiled buffers are left alone");

  /* dropping that overlap is allowed too: c now reads a buffer nobody writes */
  fill_rank(spare, OV_N, 7);
  cg_rebind_t apart[] = {{cc, spare, s2.z}};
  rb_rebind_ok(plan, apart, 1, "c reading a buffer of its own");
  ov_fill(&s2, 4);
  rb_run_all(plan, 1, "c apart");
  int ok = 1;
  for (size_t i = 0; i < OV_N; i++)
    ok &= s2.y1[i] == sum_of(i, 4) && s2.y2[i] == sum_of(i, 54) && s2.z[i] == sum_of(i, 7);
  ck_assert_all_ranks(ok, "results with c reading its own buffer");

  /* two nodes trading outputs in one call leave no overlap behind: accepted
   * and right, or refused and nothing changed (the header does not say
   * whether the overlap rule looks at the other node's old buffers or its new
   * ones) */
  cg_rebind_t trade[] = {{a, s2.x1, s2.y2}, {b, s2.x2, s2.y1}};
  cg_status_t st = cg_plan_rebind(plan, trade, 2);
  int accepted = st == CG_SUCCESS;
  int all_accepted = cg_mpi_all(accepted), none_accepted = cg_mpi_all(!accepted);
  int same = all_accepted || none_accepted;
  ck_assert_all_ranks(same, "trading buffers: every rank decides alike");
  if (cg_mpi_rank() == 0 && !accepted)
    printf("note: two nodes trading buffers in one cg_plan_rebind were refused: %s\n", cg_error_last());
  fill_rank(s2.x1, OV_N, 8);
  fill_rank(s2.x2, OV_N, 9);
  memset(s2.y1, CG_MPI_POISON, OV_N * 4);
  memset(s2.y2, CG_MPI_POISON, OV_N * 4);
  memset(s2.z, CG_MPI_POISON, OV_N * 4);
  rb_run_all(plan, 0, "after trading");
  ok = 1;
  for (size_t i = 0; i < OV_N; i++)
    ok &= accepted ? s2.y2[i] == sum_of(i, 8) && s2.y1[i] == sum_of(i, 9)
                   : s2.y1[i] == sum_of(i, 8) && s2.y2[i] == sum_of(i, 9);
  for (size_t i = 0; i < OV_N; i++) ok &= s2.z[i] == sum_of(i, 7);
  ck_assert_all_ranks(ok, "results after trading buffers");

  cg_plan_destroy(plan);
  free(keep);
  free(mem);
  cg_comm_destroy(c);
}
END_TEST

/* ---- handles and arguments that are refused, and change nothing */

START_TEST(rebind__bad_handles_and_arguments_are_refused_and_change_nothing) {
  cg_comm_t *c = rb_world();
  int me = cg_mpi_rank(), n = cg_mpi_size();
  enum { N = 33 };
  int32_t *x = poisoned_ints(N), *y = poisoned_ints(N), *x2 = poisoned_ints(N), *y2 = poisoned_ints(N);
  int32_t *out = poisoned_ints(N), *in = poisoned_ints(N), *spare = poisoned_ints(N);
  cg_node_t a, bar, hf, snd, rcv, other;
  cg_range_t yr = {y, N * 4};
  cg_access_t reads_y = CG_ACCESS_INIT;
  reads_y.everything = 0;
  reads_y.reads = &yr;
  reads_y.n_reads = 1;
  cg_graph_t *g, *g2;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(&a, g, c, x, y, N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_barrier(&bar, g, c));
  ck_assert_cg_ok(cg_host_func(&hf, g, cg_test_noop, NULL, &reads_y));
  ck_assert_cg_ok(cg_send(&snd, g, c, out, N, CG_INT32, (me + 1) % n));
  ck_assert_cg_ok(cg_recv(&rcv, g, c, in, N, CG_INT32, (me + n - 1) % n));
  cg_plan_t *plan = rb_compile_all(g, "allreduce, barrier, host function, ring");
  ck_assert_cg_ok(cg_graph_create(&g2, NULL));
  ck_assert_cg_ok(cg_allreduce(&other, g2, c, x2, y2, N, CG_INT32, CG_SUM)); /* index 0, like a */
  ck_assert_uint_eq(other.index, a.index);

  cg_rebind_t from_other[] = {{other, x2, y2}};
  rb_rebind_refused(plan, from_other, 1, invalid_node, "a node of another graph");
  cg_rebind_t past_end[] = {{{a.graph, 1000}, x2, y2}};
  rb_rebind_refused(plan, past_end, 1, node_or_argument, "a node index past the graph's end");
  cg_rebind_t null_node[] = {{CG_NODE_NULL, x2, y2}};
  rb_rebind_refused(plan, null_node, 1, node_or_argument, "CG_NODE_NULL");
  cg_rebind_t barrier_buf[] = {{bar, x2, NULL}};
  rb_rebind_refused(plan, barrier_buf, 1, invalid_argument, "a barrier given a buffer");
  cg_rebind_t host_buf[] = {{hf, NULL, y2}};
  rb_rebind_refused(plan, host_buf, 1, invalid_argument, "a host function given a buffer");
  cg_rebind_t send_recv[] = {{snd, spare, y2}};
  rb_rebind_refused(plan, send_recv, 1, invalid_argument, "a send node given a recv buffer");
  cg_rebind_t recv_send[] = {{rcv, spare, y2}};
  rb_rebind_refused(plan, recv_send, 1, invalid_argument, "a receive node given a send buffer");
  cg_rebind_t recv_in_send[] = {{rcv, spare, NULL}};
  rb_rebind_refused(plan, recv_in_send, 1, invalid_argument, "a receive node's buffer passed as send");
  cg_rebind_t no_send[] = {{a, NULL, y2}};
  rb_rebind_refused(plan, no_send, 1, invalid_argument, "an allreduce without a send buffer");
  cg_rebind_t good_then_bad[] = {{a, x2, y2}, {bar, spare, NULL}};
  rb_rebind_refused(plan, good_then_bad, 2, invalid_argument, "a good entry, then a barrier given a buffer");
  ck_assert_cg_status(cg_plan_rebind(NULL, good_then_bad, 1), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_plan_rebind(plan, NULL, 1), CG_ERR_INVALID_ARGUMENT);

  fill_rank(x, N, 1);
  fill_rank(out, N, 2);
  rb_run_all(plan, 0, "after the refusals");
  int ok = 1;
  for (size_t i = 0; i < N; i++) ok &= y[i] == sum_of(i, 1) && in[i] == ((me + n - 1) % n) * 1000 + (int32_t)i + 2;
  ck_assert_all_ranks(ok, "the plan still runs on its compiled buffers");
  ck_assert_all_ranks(all_poison(y2, N * 4) && all_poison(spare, N * 4), "refused buffers untouched");

  /* and the right way round the ring rebinds fine */
  cg_rebind_t ring[] = {{rcv, NULL, spare}, {snd, x2, NULL}};
  rb_rebind_ok(plan, ring, 2, "the ring's send and receive to other buffers");
  fill_rank(x, N, 3);
  fill_rank(x2, N, 4);
  memset(in, CG_MPI_POISON, N * 4);
  rb_run_all(plan, 1, "ring rebound");
  ok = 1;
  for (size_t i = 0; i < N; i++) ok &= y[i] == sum_of(i, 3) && spare[i] == ((me + n - 1) % n) * 1000 + (int32_t)i + 4;
  ck_assert_all_ranks(ok && all_poison(in, N * 4), "the ring's receive lands in its new buffer only");

  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_graph_destroy(g2);
  free(x); free(y); free(x2); free(y2); free(out); free(in); free(spare);
  cg_comm_destroy(c);
}
END_TEST

/* ---- a running plan */

START_TEST(rebind__a_running_plan_is_not_rebound) {
  cg_comm_t *c = rb_world();
  enum { N = 1 << 16 };
  int32_t *x = poisoned_ints(N), *y = poisoned_ints(N), *x2 = poisoned_ints(N), *y2 = poisoned_ints(N);
  cg_node_t a;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(&a, g, c, x, y, N, CG_INT32, CG_SUM));
  cg_plan_t *plan = rb_compile_all(g, "one allreduce");
  cg_graph_destroy(g);
  fill_rank(x, N, 5);
  fill_rank(x2, N, 6);
  ck_assert_cg_ok(cg_plan_start(plan));
  cg_rebind_t to2[] = {{a, x2, y2}};
  cg_status_t st = cg_plan_rebind(plan, to2, 1);
  char text[600];
  snprintf(text, sizeof text, "cg_plan_rebind on a started plan returned %s (%s); it must refuse (CG_ERR_IN_PROGRESS "
           "expected)", cg_status_string(st), st == CG_SUCCESS ? "" : cg_error_last());
  int refused = st != CG_SUCCESS;
  ck_assert_cg_ok(cg_plan_wait(plan)); /* completes wherever the rebind went */
  ck_assert_all_ranks(refused, text);
  if (st != CG_ERR_IN_PROGRESS && cg_mpi_rank() == 0)
    printf("note: rebinding a running plan returned %s, not CG_ERR_IN_PROGRESS\n", cg_status_string(st));
  int ok = 1;
  for (size_t i = 0; i < N; i++) ok &= y[i] == sum_of(i, 5);
  ck_assert_all_ranks(ok && all_poison(y2, N * 4), "the run completes on the old buffers");
  rb_rebind_ok(plan, to2, 1, "the same rebinding once the run is over");
  rb_run_all(plan, 0, "rebound after the run");
  ok = 1;
  for (size_t i = 0; i < N; i++) ok &= y2[i] == sum_of(i, 6);
  ck_assert_all_ranks(ok, "results in the new buffers");
  cg_plan_destroy(plan);
  free(x); free(y); free(x2); free(y2);
  cg_comm_destroy(c);
}
END_TEST

/* ---- random rounds
 *
 * Random programs of up to 14 nodes (every kind but gather and scatter, with
 * in-place forms, runs of fusible collectives on two communicators); each
 * round moves some nodes to new places, or every node to the other half of
 * the pool (contiguous or scattered), or tries a batch with one overlapping
 * entry that must be refused whole; then runs the plan on fresh data and
 * compares the pool with the reference's. Decisions come from the shared seed
 * (every rank records the same program); the places from a per-rank stream,
 * because buffer sizes differ between ranks. */

#define RANDOM_PROGRAMS 6
#define RANDOM_ROUNDS 20

START_TEST(rebind__random_rounds_match_the_reference) {
  cg_comm_t *comms[2] = {rb_world(), rb_world()};
  size_t rounds = 0, refusals = 0, entries = 0;
  const char *v = getenv("CG_REBIND_TEST_VERBOSE"); /* 1: every round on stderr */
  int verbose = v && *v && strcmp(v, "0") != 0;
  for (int prog = 0; prog < RANDOM_PROGRAMS; prog++) {
    cg_test_reseed(7000 + (uint64_t)prog);
    pprog_t *pg = calloc(1, sizeof *pg);
    ck_assert_ptr_nonnull(pg);
    pg->comms[0] = comms[0];
    pg->comms[1] = comms[1];
    prog_random(pg);
    prog_alloc(pg);
    int home = (int)cg_test_below(2), all[P_MAX];
    for (int i = 0; i < P_MAX; i++) all[i] = i < pg->n;
    prog_taken_t t = {.n = 0};
    if (cg_test_below(2))
      prog_layout_packed(pg, (size_t)home * pg->half, pg->off);
    else
      prog_layout_scattered(pg, &t, (size_t)home * pg->half, (size_t)(home + 1) * pg->half, all, pg->off);
    cg_graph_t *g;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    prog_record(g, pg, 0);
    char what[200];
    snprintf(what, sizeof what, "random program %d", prog);
    cg_plan_t *plan = rb_compile_all(g, what);
    cg_graph_destroy(g);
    snprintf(what, sizeof what, "random program %d as compiled", prog);
    prog_run_and_check(pg, plan, (uint64_t)prog << 16, 0, what);

    for (int round = 0; round < RANDOM_ROUNDS; round++) {
      int mode = (int)cg_test_below(5), move[P_MAX];
      uint64_t data_round = (uint64_t)prog << 16 | (uint64_t)(round + 1);
      size_t offs[P_MAX][2];
      memcpy(offs, pg->off, sizeof offs);
      memset(move, 0, sizeof move);
      t.n = 0;
      if (mode == 0 || mode == 4) { /* some nodes within the home half */
        for (int i = 0; i < pg->n; i++) move[i] = cg_test_below(3) == 0;
        prog_take(&t, pg, pg->off, NULL); /* away from every current buffer, the movers' own too */
        prog_layout_scattered(pg, &t, (size_t)home * pg->half, (size_t)(home + 1) * pg->half, move, offs);
      } else if (mode == 1 || mode == 2) { /* everything to the other half */
        home = 1 - home;
        memcpy(move, all, sizeof move);
        if (mode == 1)
          prog_layout_packed(pg, (size_t)home * pg->half + 8 * cg_test_below(4), offs);
        else
          prog_layout_scattered(pg, &t, (size_t)home * pg->half, (size_t)(home + 1) * pg->half, move, offs);
      } /* mode 3: no rebinding, fresh data only */
      cg_rebind_t binds[2 * P_MAX + 1];
      size_t nb = 0;
      for (int i = 0; i < pg->n; i++)
        if (move[i]) nb += prog_binds(binds + nb, pg, i, offs[i]);
      /* shuffle the entries: their order must not matter */
      for (size_t i = nb; i > 1; i--) {
        size_t j = (size_t)cg_test_below(i);
        cg_rebind_t tmp = binds[i - 1];
        binds[i - 1] = binds[j];
        binds[j] = tmp;
      }
      snprintf(what, sizeof what, "random program %d round %d (mode %d, %zu entries)", prog, round, mode, nb);
      if (verbose) fprintf(stderr, "rank %d: %s\n", cg_mpi_rank(), what);
      if (mode == 4) {
        /* plus one entry that lays the input of a node that does not move
         * over what another node writes (on every rank: the one reads and the
         * other writes something everywhere), where that node is after this
         * batch: a hazard the plan does not order */
        int from = -1, onto = -1;
        for (int tries = 0; tries < 40; tries++) {
          int f = (int)cg_test_below((uint64_t)pg->n), o = (int)cg_test_below((uint64_t)pg->n);
          if (f != o && !move[f] && prog_reads_everywhere(&pg->nodes[f]) &&
              prog_written_everywhere(&pg->nodes[o]) >= 0) {
            from = f;
            onto = o;
            break;
          }
        }
        if (from >= 0) {
          size_t bad[2] = {offs[onto][prog_written_everywhere(&pg->nodes[onto])], offs[from][1]};
          cg_rebind_t extra[2];
          prog_binds(extra, pg, from, bad);
          binds[nb++] = extra[0]; /* the entry that carries region 0 (a ring's send) */
          cg_status_t st = cg_plan_rebind(plan, binds, nb);
          char text[600];
          snprintf(text, sizeof text, "%s: a batch with node %d's input laid over node %d's output returned %s", what,
                   from, onto, cg_status_string(st));
          ck_assert_all_ranks(st != CG_SUCCESS, text);
          refusals++;
          snprintf(what, sizeof what, "random program %d round %d after a refused batch", prog, round);
          prog_run_and_check(pg, plan, data_round, (int)cg_test_below(2), what);
          rounds++;
          continue;
        }
        mode = 0; /* no pair found: an ordinary round */
      }
      if (nb) rb_rebind_ok(plan, binds, nb, what);
      entries += nb;
      memcpy(pg->off, offs, sizeof offs);
      prog_run_and_check(pg, plan, data_round, (int)cg_test_below(2), what);
      rounds++;
    }
    cg_plan_destroy(plan);
    prog_free(pg);
    free(pg);
  }
  if (cg_mpi_rank() == 0)
    printf("%d random programs, %zu rounds (%zu rebinding entries, %zu refused batches), all matched the reference\n",
           RANDOM_PROGRAMS, rounds, entries, refusals);
  cg_comm_destroy(comms[0]);
  cg_comm_destroy(comms[1]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_rebind");
  TCase *tc = cg_mpi_tcase("rebind");
  tcase_add_test(tc, rebind__every_kind_lands_in_new_buffers_and_leaves_old_ones_alone);
  tcase_add_test(tc, rebind__fused_members_scattered_and_back_to_contiguous);
  tcase_add_test(tc, rebind__in_place_form_must_be_kept);
  tcase_add_test(tc, rebind__overlap_with_another_node_is_refused_unless_it_was_there_at_compile);
  tcase_add_test(tc, rebind__bad_handles_and_arguments_are_refused_and_change_nothing);
  tcase_add_test(tc, rebind__a_running_plan_is_not_rebound);
  tcase_add_test(tc, rebind__random_rounds_match_the_reference);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
