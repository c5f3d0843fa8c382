/* Fusion (sched/compile/fusion.c, lower.c, bucket.c, plan_dot.c) over offline
 * communicators, and arenas (core/arena.c): the tests, by hand and on random
 * programs, with the suite and main. What a correct fused plan is lives in
 * fusion_invariants.c, which every plan built here is checked against, so
 * that a test states only what is particular to it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion.h"
#include "fusion_invariants.h"
#include "graph_view.h"
#include "plan_internal.h"
#include "test_support.h"
#include "tuning.h"

enum { T = 256 /* floats in 1 KB */ };
static float big[32 * T];

static size_t count_of(const char *text, const char *what) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

static cg_plan_t *compile_with(cg_graph_t *g, int fusion, size_t bucket_bytes) {
  cg_plan_t *plan = NULL;
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.fusion = fusion;
  o.bucket_bytes = bucket_bytes;
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  return plan;
}

/* Whether step a precedes step b through dependencies. */
static int precedes(const cg_plan_t *plan, uint32_t a, uint32_t b) {
  for (uint32_t e = 0; b > a && e < plan->steps[b].n_deps; e++)
    if (plan->steps[b].deps[e] == a || precedes(plan, a, plan->steps[b].deps[e])) return 1;
  return 0;
}

/* ---- random graphs */

START_TEST(fusion__random_graphs_keep_invariants) {
  cg_test_reseed(301);
  static const size_t limits[] = {1, 16, 64, 256, 1024, (size_t)1 << 20};
  size_t seen[CG_FUSE_RANKS + 1] = {0};
  for (int round = 0; round < 400; round++) {
    sample_t s;
    fusion_sample_make(&s, 1 + (uint32_t)cg_test_below(MAX_NODES), round % 2);
    size_t limit = cg_test_below(3) ? limits[cg_test_below(6)] : 1 + (size_t)cg_test_below(512);
    cg_plan_t *plan = compile_with(s.g, 1, limit), *off = compile_with(s.g, 0, limit);
    fusion_check_fused(s.g, plan, s.acc, limit, 1);
    for (uint32_t v = 0; v < s.n; v++) seen[plan->fuse_why[v] <= CG_FUSE_RANKS ? plan->fuse_why[v] : 0]++;
    setenv("CG_FUSION", "0", 1);
    cg_plan_t *env_off = compile_with(s.g, 1, limit);
    unsetenv("CG_FUSION");
    REQUIRE(off->n_steps == s.n && env_off->n_steps == s.n, "round %d: fusion off: %u and %u steps for %u nodes", round,
            off->n_steps, env_off->n_steps, s.n);
    fusion_check_fused(s.g, off, s.acc, 0, 0);
    fusion_check_fused(s.g, env_off, s.acc, 0, 0);
    char *a = cg_test_plan_text(off, 0), *b = cg_test_plan_text(env_off, 0);
    REQUIRE(strcmp(a, b) == 0, "round %d: CG_FUSION=0 and fusion = 0 differ:\n%s\n---\n%s", round, a, b);
    free(a), free(b);
    cg_plan_destroy(plan), cg_plan_destroy(off), cg_plan_destroy(env_off);
    fusion_sample_free(&s);
  }
  /* the programs reach the reasons a single rank can give ('waited' is rare
   * here: fusion__dependent_allreduces_do_not_fuse builds it) */
  static const cg_fuse_why_t must_see[] = {CG_FUSE_JOINED, CG_FUSE_DIFFERS, CG_FUSE_FULL, CG_FUSE_DEPENDS,
                                           CG_FUSE_FEEDS};
  for (size_t k = 0; k < sizeof must_see / sizeof *must_see; k++)
    REQUIRE(seen[must_see[k]] > 0, "no node of 400 random programs got the reason '%s'", cg_fuse_why_text(must_see[k]));
}
END_TEST

/* ---- by hand: ten allreduces of 1 KB named grad.0 .. grad.9 */

typedef enum { IN_PLACE, SPLIT, REVERSED, SCATTERED_SENDS } layout_t;

/* IN_PLACE: at `base` one after another; SPLIT: sends and receives each
 * contiguous; REVERSED: in place, last first; SCATTERED_SENDS: sends with
 * gaps, receives contiguous. */
static cg_graph_t *ten_allreduces(cg_comm_t *comm, layout_t layout, float *base) {
  cg_graph_t *g = fusion_new_graph();
  for (int i = 0; i < 10; i++) {
    float *send = layout == IN_PLACE   ? base + i * T
                  : layout == REVERSED ? big + (9 - i) * T
                                       : big + (1 + (layout != SPLIT)) * i * T;
    float *recv = layout == IN_PLACE || layout == REVERSED ? send : big + (20 + i) * T;
    char name[16];
    snprintf(name, sizeof name, "grad.%d", i);
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, send, recv, T, CG_FLOAT32, CG_SUM));
    ck_assert_cg_ok(cg_node_name(g, fusion_node(g, (uint32_t)i), name));
  }
  return g;
}

/* Compiled with `limit` (0: default) and checked. */
static cg_plan_t *fused(cg_graph_t *g, size_t limit) {
  cg_plan_t *plan = compile_with(g, 1, limit);
  fusion_check_fused(g, plan, NULL, plan->bucket_bytes, 1);
  return plan;
}

static void release(cg_plan_t *plan, cg_graph_t *g, cg_comm_t *comm) {
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
}

static cg_comm_t *offline(int rank, int size) {
  cg_comm_t *comm;
  ck_assert_cg_ok(cg_comm_create_offline(&comm, rank, size));
  return comm;
}

START_TEST(fusion__ten_allreduces_fuse_into_one_bucket) {
  cg_comm_t *comm = offline(1, 2);
  cg_graph_t *g = ten_allreduces(comm, SPLIT, NULL);
  cg_plan_t *plan = fused(g, 0);
  const cg_bucket_t *b = &plan->buckets[0];
  ck_assert(plan->n_buckets == 1 && plan->n_steps == 3 && b->n_members == 10 && b->bytes == 10240);
  for (uint32_t i = 0; i < 10; i++)
    ck_assert(b->members[i] == i && plan->fuse_why[i] == (i ? CG_FUSE_JOINED : CG_FUSE_FIRST));
  const cg_step_t *cs = &plan->steps[b->collective_step];
  ck_assert(cs->count == 10 * T && cs->send == big && cs->recv == big + 20 * T); /* zero-copy */
  cg_plan_stats_t st;
  ck_assert_cg_ok(cg_plan_stats(&st, plan));
  ck_assert(st.buckets == 1 && st.fused_nodes == 10 && st.copy_bytes == 0 && st.bucket_bytes >= 10240);
  /* the dump and the drawing show the bucket and its members */
  char *dot = cg_test_plan_text(plan, 1), *dump = cg_test_plan_text(plan, 0);
  const char *in_dot[] = {"bucket 0: 10 nodes, 10240 bytes", "#0 grad.0", "#7 grad.7", "#9 grad.9",
                          "pack bucket 0\\nnone: zero-copy", "unpack bucket 0", "style=bold"};
  for (int k = 0; k < 7; k++) ck_assert_msg(strstr(dot, in_dot[k]), "no '%s' in:\n%s", in_dot[k], dot);
  ck_assert_msg(strstr(dump, "bucket 0 nodes 0,1,2,3,4,5,6,7,8,9 after 0"), "dump:\n%s", dump);
  free(dot), free(dump);
  release(plan, g, comm);
}
END_TEST

START_TEST(fusion__bucket_size_splits_buckets) {
  cg_comm_t *comm = offline(0, 2);
  cg_graph_t *g = ten_allreduces(comm, SPLIT, NULL);
  cg_plan_t *plan = fused(g, 1536); /* smaller than two of them */
  char *text = cg_test_plan_text(plan, 0);
  const char *full = "not fused with the one before: the bucket before it would exceed the bucket size";
  ck_assert_msg(plan->n_buckets == 0 && plan->n_steps == 10 && count_of(text, full) == 9, "dump:\n%s", text);
  free(text);
  cg_plan_destroy(plan);
  /* greedy, in order */
  const size_t limits[] = {2048, 4096, 10240, 10239};
  const uint32_t buckets[] = {5, 3, 1, 1}, steps[] = {15, 9, 3, 4}, first_size[] = {2, 4, 10, 9};
  for (int k = 0; k < 4; k++) {
    plan = fused(g, limits[k]);
    ck_assert(plan->n_buckets == buckets[k] && plan->n_steps == steps[k]);
    ck_assert_uint_eq(plan->buckets[0].n_members, first_size[k]);
    ck_assert_int_eq(plan->fuse_why[first_size[k] % 10], first_size[k] < 10 ? CG_FUSE_FULL : CG_FUSE_FIRST);
    cg_plan_destroy(plan);
  }
  cg_graph_destroy(g);
  g = fusion_new_graph(); /* a node larger than the bucket runs alone (the room left used to wrap around) */
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, big, big, 2 * T, CG_FLOAT32, CG_SUM));
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, big + 2 * T, big + 2 * T, 2, CG_FLOAT32, CG_SUM));
  plan = fused(g, 1024);
  ck_assert(plan->n_buckets == 0 && plan->fuse_why[1] == CG_FUSE_FULL);
  release(plan, g, comm);
}
END_TEST

/* Contiguous buffers, so only the dependency keeps them apart. */
START_TEST(fusion__dependent_allreduces_do_not_fuse) {
  cg_comm_t *comm = offline(0, 3);
  float *x = big;
  cg_access_t access = CG_ACCESS_INIT;
  cg_range_t reads[] = {{x + 4 * T, T * sizeof(float)}}, writes[] = {{x + T, T * sizeof(float)}};
  access.everything = 0, access.reads = reads, access.n_reads = 1, access.writes = writes, access.n_writes = 1;
  for (int variant = 0; variant < 4; variant++) {
    cg_graph_t *g = fusion_new_graph();
    int shift = variant == 0 ? 1 : variant == 1 ? 2 : 4; /* #k sends x + k T, receives x + (k + shift) T */
    for (int k = 0; k < (variant == 1 ? 3 : 2); k++) {
      if (variant == 2 && k == 1) ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &access));
      ck_assert_cg_ok(cg_allreduce(NULL, g, comm, x + k * T, x + (k + shift) * T, T, CG_FLOAT32, CG_SUM));
    }
    if (variant == 3) ck_assert_cg_ok(cg_depend(g, fusion_node(g, 0), fusion_node(g, 1)));
    /* 0: #1 reads #0's output; 1: #2 reads #0's, after bucket {#0, #1}; 2: through
     * a host function (not ready when the bucket must run); 3: an explicit edge */
    cg_plan_t *plan = fused(g, 0);
    uint32_t last = cg_graph_node_count(g) - 1;
    ck_assert_uint_eq(plan->n_buckets, variant == 1);
    ck_assert_int_eq(plan->fuse_why[last], variant == 2 ? CG_FUSE_WAITED : CG_FUSE_DEPENDS);
    char *text = cg_test_plan_text(plan, 0);
    const char *depends = "not fused with the one before: it depends on a node of the bucket before it";
    ck_assert_msg(variant == 2 || strstr(text, depends), "variant %d:\n%s", variant, text);
    free(text);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
  }
  cg_comm_destroy(comm);
}
END_TEST

/* A backward pass on the host: host function k writes gradient k (reading the
 * activation layer k + 1 wrote, writing its own), then gradient k's
 * allreduce, for k = n-1 down to 0. With the library's bucket size the
 * buckets stop at 1 MiB (the first) and 25 MiB (later ones), so communication
 * overlaps the backward still to come; a size from the options or
 * CG_BUCKET_BYTES is kept; without compute between them the allreduces fuse
 * up to the library's size. Gradients of 512 KiB; offline communicators,
 * whose size is 25 MiB. */
START_TEST(fusion__buckets_overlap_compute) {
  enum { N = 60, G = 131072 /* floats in 512 KiB */ };
  cg_comm_t *comm = offline(0, 2);
  float *grads = calloc((size_t)N * G, sizeof *grads);
  static float act[N + 1];
  ck_assert_ptr_nonnull(grads);
  for (int variant = 0; variant < 4; variant++) {
    cg_graph_t *g = fusion_new_graph();
    for (int k = N - 1; k >= 0; k--) {
      if (variant != 2) {
        cg_access_t access = CG_ACCESS_INIT;
        cg_range_t reads[] = {{&act[k + 1], sizeof(float)}};
        cg_range_t writes[] = {{&act[k], sizeof(float)}, {grads + (size_t)k * G, G * sizeof(float)}};
        access.everything = 0, access.reads = reads, access.n_reads = 1, access.writes = writes, access.n_writes = 2;
        ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &access));
      }
      float *grad = grads + (size_t)k * G;
      ck_assert_cg_ok(cg_allreduce(NULL, g, comm, grad, grad, G, CG_FLOAT32, CG_SUM));
    }
    /* 0: library size; 1: 64 MiB from the options; 2: no compute; 3: CG_BUCKET_BYTES */
    if (variant == 3) setenv("CG_BUCKET_BYTES", "64M", 1);
    cg_plan_t *plan = fused(g, variant == 1 ? (size_t)64 << 20 : 0);
    unsetenv("CG_BUCKET_BYTES");
    /* members per bucket, in order: 2 (1 MiB), then 50 (25 MiB), then the 8 left */
    const uint32_t overlap[] = {2, 50, 8};
    uint32_t want_n = variant == 0 ? 3 : variant == 2 ? 2 : 1;
    ck_assert_uint_eq(plan->n_buckets, want_n);
    for (uint32_t b = 0; b < plan->n_buckets; b++) {
      uint32_t want = variant == 0 ? overlap[b] : variant == 2 ? (b ? 10 : 50) : N;
      ck_assert_msg(plan->buckets[b].n_members == want, "variant %d bucket %u: %u members, expected %u", variant, b,
                    plan->buckets[b].n_members, want);
    }
    /* why each later bucket starts where it does: after the first, the
     * overlap size is the offline communicator's own (25 MiB) */
    for (uint32_t b = 1; b < plan->n_buckets; b++) {
      int want = variant == 0 && b == 1 ? CG_FUSE_OVERLAP : CG_FUSE_FULL;
      ck_assert_int_eq(plan->fuse_why[plan->buckets[b].members[0]], want);
    }
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
  }
  free(grads);
  cg_comm_destroy(comm);
}
END_TEST

/* The overlap sizes apply as PyTorch DDP applies its caps: a bucket that
 * waits for compute closes once it holds at least its overlap size, the
 * member that reaches it included; the communicator's own size (25 MiB
 * offline) is never exceeded. Random gradient sizes (16 KiB to 3 MiB, in the
 * same backward as above) against that rule computed here. */
START_TEST(fusion__overlap_buckets_close_at_their_size_as_in_ddp) {
  enum { N = 48, MAX_FLOATS = 3 << 18 };
  const size_t first = (size_t)1 << 20, later = (size_t)25 << 20, cap = (size_t)25 << 20;
  cg_comm_t *comm = offline(0, 2);
  float *grads = calloc((size_t)N * MAX_FLOATS, sizeof *grads);
  static float act[N + 1];
  ck_assert_ptr_nonnull(grads);
  cg_test_reseed(0x0bd1);
  for (int round = 0; round < 20; round++) {
    size_t floats[N];
    cg_graph_t *g = fusion_new_graph();
    for (int k = N - 1; k >= 0; k--) {
      floats[k] = 4096 + (size_t)cg_test_below(MAX_FLOATS - 4096 + 1);
      cg_access_t access = CG_ACCESS_INIT;
      float *grad = grads + (size_t)k * MAX_FLOATS;
      cg_range_t reads[] = {{&act[k + 1], sizeof(float)}};
      cg_range_t writes[] = {{&act[k], sizeof(float)}, {grad, floats[k] * sizeof(float)}};
      access.everything = 0, access.reads = reads, access.n_reads = 1, access.writes = writes, access.n_writes = 2;
      ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &access));
      ck_assert_cg_ok(cg_allreduce(NULL, g, comm, grad, grad, floats[k], CG_FLOAT32, CG_SUM));
    }
    cg_plan_t *plan = fused(g, 0);
    /* the reference: gradients N-1 down to 0, as recorded */
    uint32_t want[N], n_want = 0, members = 0;
    size_t bytes = 0;
    for (int k = N - 1; k >= 0; k--) {
      size_t b = floats[k] * sizeof(float), overlap = n_want == 0 ? first : later;
      if (members && (bytes >= overlap || bytes + b > cap)) want[n_want++] = members, members = 0, bytes = 0;
      members++, bytes += b;
    }
    want[n_want++] = members;
    /* a bucket of one collective is no bucket: the plan lists the others */
    uint32_t got = 0;
    for (uint32_t b = 0; b < n_want; b++) {
      if (want[b] == 1) continue;
      ck_assert_msg(got < plan->n_buckets && plan->buckets[got].n_members == want[b],
                    "round %d: bucket %u holds %u members, DDP's rule gives %u", round, got,
                    got < plan->n_buckets ? plan->buckets[got].n_members : 0, want[b]);
      got++;
    }
    ck_assert_uint_eq(plan->n_buckets, got);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
  }
  free(grads);
  cg_comm_destroy(comm);
}
END_TEST

/* Tuned boundaries (cg_plan_tune's fusion, with a hand-made tuning): the
 * same backward as above; gradient k ready (N - k) ms after the start. A
 * collective of 512 KiB costing 15 us goes as soon as its gradient is ready;
 * with no compute between them, they fuse up to the bucket size; with a
 * fixed cost far above the gaps and bytes for free, as few buckets as the
 * bucket size allows finish as early as any split (ties go to larger
 * buckets). The bucket size is the compile's where it gives one (25 MiB:
 * 50 gradients), else the tuned plans' 256 MiB, not the default 25 MiB:
 * the model decides. */
START_TEST(fusion__tuned_boundaries_follow_the_cost_model) {
  enum { N = 60, G = 131072 };
  cg_comm_t *comm = offline(0, 2);
  float *grads = calloc((size_t)N * G, sizeof *grads);
  static float act[N + 1];
  ck_assert_ptr_nonnull(grads);
  cg_graph_t *g = fusion_new_graph();
  for (int k = N - 1; k >= 0; k--) {
    cg_access_t access = CG_ACCESS_INIT;
    cg_range_t reads[] = {{&act[k + 1], sizeof(float)}};
    cg_range_t writes[] = {{&act[k], sizeof(float)}, {grads + (size_t)k * G, G * sizeof(float)}};
    access.everything = 0, access.reads = reads, access.n_reads = 1, access.writes = writes, access.n_writes = 2;
    ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &access));
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, grads + (size_t)k * G, grads + (size_t)k * G, G, CG_FLOAT32, CG_SUM));
  }
  uint32_t n = cg_graph_node_count(g);
  for (int variant = 0; variant < 5; variant++) {
    int big_alpha = variant == 2 || variant == 4, all_ready = variant == 1 || variant == 3;
    cg_comm_cost_t cost = {comm, big_alpha ? 5000.0 : 10.0, big_alpha ? 1e12 : 1e5, 0, {0}};
    cg_tuning_t t = {calloc(n, sizeof(double)), n, &cost, 1, 0};
    for (uint32_t v = 0; v < n; v++) /* node 2j + 1 is gradient N-1-j's allreduce */
      t.ready_us[v] = all_ready ? 0 : 1000.0 * (double)(v / 2 + 1);
    cg_plan_t *plan = NULL;
    cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
    if (variant <= 2) o.bucket_bytes = (size_t)25 << 20;
    ck_assert_cg_ok(cg_compile_tuned(&plan, g, &o, &t, CG_SUCCESS));
    fusion_check_fused(g, plan, NULL, plan->bucket_bytes, 1);
    uint32_t colls = 0;
    for (uint32_t i = 0; i < plan->n_steps; i++) colls += plan->steps[i].kind == CG_STEP_COLLECTIVE;
    if (variant == 0) {
      ck_assert_msg(colls == N && plan->n_buckets == 0, "%u collectives, %u buckets", colls, plan->n_buckets);
      for (uint32_t v = 3; v < n; v += 2) ck_assert_int_eq(plan->fuse_why[v], CG_FUSE_TUNED);
    } else if (variant == 1) {
      /* two buckets (the size allows 50), split anywhere: the same finish */
      ck_assert_msg(colls == 2 && plan->n_buckets == 2 && plan->buckets[0].n_members + plan->buckets[1].n_members == N,
                    "%u collectives, %u buckets", colls, plan->n_buckets);
    } else if (variant == 2) {
      /* two: one bucket holds 50 at most */
      ck_assert_msg(colls == 2 && plan->n_buckets == 2, "%u collectives", colls);
    } else {
      /* no size given: one bucket of all 60 (30 MiB, above the default 25) */
      ck_assert_msg(colls == 1 && plan->n_buckets == 1 && plan->buckets[0].n_members == N,
                    "variant %d: %u collectives, %u buckets", variant, colls, plan->n_buckets);
      ck_assert_uint_eq(plan->bucket_bytes, (size_t)256 << 20);
    }
    cg_plan_destroy(plan);
    free(t.ready_us);
  }
  cg_graph_destroy(g);
  free(grads);
  cg_comm_destroy(comm);
}
END_TEST

/* The predicted finish of the buckets `cut` makes (bit j: a new bucket at
 * position j + 1) under the search's model with overlap: the k-th bucket's
 * members are ready overlap (k - 1) later. */
static double overlap_finish(unsigned cut, int n, const double *ready, const size_t *bytes,
                             const cg_comm_cost_t *c) {
  double finish = 0, r = 0;
  size_t b = 0;
  int k = 0;
  for (int p = 0; p < n; p++) {
    if (ready[p] > r) r = ready[p];
    b += bytes[p];
    if (p < n - 1 && !(cut >> p & 1u)) continue;
    double start = r + c->overlap_us * k++;
    finish = (finish > start ? finish : start) + c->alpha_us + (double)b / c->bytes_per_us;
    r = 0, b = 0;
  }
  return finish;
}

/* The search with overlap (cg_plan_tune's overlap candidates) on random
 * backward passes of up to 9 gradients: its buckets predict the earliest
 * finish of every way to cut the sequence (all 2^(n-1), by brute force). */
START_TEST(fusion__tuned_boundaries_with_overlap_finish_first) {
  enum { MAX = 9, UNIT = 4096 };
  cg_comm_t *comm = offline(0, 2);
  float *grads = calloc((size_t)MAX * 8 * UNIT, sizeof *grads);
  ck_assert_ptr_nonnull(grads);
  for (int round = 0; round < 40; round++) {
    int n = 1 + (int)cg_test_below(MAX);
    size_t count[MAX], bytes[MAX], at = 0;
    double ready[MAX], r = 0;
    cg_graph_t *g = fusion_new_graph();
    for (int j = 0; j < n; j++) { /* position j is gradient n - 1 - j, recorded j-th */
      count[j] = UNIT * (1 + cg_test_below(8));
      bytes[j] = count[j] * sizeof(float);
      ready[j] = r += (double)cg_test_below(200);
      ck_assert_cg_ok(cg_allreduce(NULL, g, comm, grads + at, grads + at, count[j], CG_FLOAT32, CG_SUM));
      at += count[j];
    }
    cg_comm_cost_t cost = {comm, (double)cg_test_below(100), 100.0 + (double)cg_test_below(2000),
                           (double)(1 + cg_test_below(60)), {0}};
    uint32_t nodes = cg_graph_node_count(g);
    cg_tuning_t t = {calloc(nodes, sizeof(double)), nodes, &cost, 1, 0};
    for (int j = 0; j < n; j++) t.ready_us[j] = ready[j];
    cg_plan_t *plan = NULL;
    cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
    o.bucket_bytes = (size_t)MAX * 8 * UNIT * sizeof(float); /* no cap */
    ck_assert_cg_ok(cg_compile_tuned(&plan, g, &o, &t, CG_SUCCESS));
    fusion_check_fused(g, plan, NULL, plan->bucket_bytes, 1);
    /* the plan's cuts: a collective of one node or a bucket of consecutive ones */
    unsigned got = 0;
    for (uint32_t i = 0; i < plan->n_steps; i++) {
      const cg_step_t *st = &plan->steps[i];
      if (st->kind != CG_STEP_COLLECTIVE) continue;
      uint32_t first = st->bucket == CG_NO_STEP ? st->node : plan->buckets[st->bucket].members[0];
      if (first > 0) got |= 1u << (first - 1);
    }
    double best = INFINITY, mine = overlap_finish(got, n, ready, bytes, &cost);
    for (unsigned cut = 0; cut < 1u << (n - 1); cut++) {
      double f = overlap_finish(cut, n, ready, bytes, &cost);
      if (f < best) best = f;
    }
    ck_assert_msg(mine <= best + 1e-3, "round %d, %d gradients: cut %#x finishes at %.3f us, the best at %.3f "
                  "(alpha %.0f, %.0f bytes/us, overlap %.0f)", round, n, got, mine, best, cost.alpha_us,
                  cost.bytes_per_us, cost.overlap_us);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
    free(t.ready_us);
  }
  free(grads);
  cg_comm_destroy(comm);
}
END_TEST

/* The hang CI once found on two ranks: a bucket {a0, a1} holds back what a0
 * feeds until a1 is done; when another rank needs that (a collective of
 * another communicator, a send) before it reaches a1, every rank waits. So
 * a1 never joins a0 then, whatever the path; work that leads nowhere, only
 * to later operations of the same communicator, or that waits for a1 anyway
 * (a fence), and receives before the bucket do not stop it. Buffers
 * disjoint: only the edges below matter. */
START_TEST(fusion__bucket_never_holds_back_other_communication) {
  cg_comm_t *a = offline(0, 2), *b = offline(0, 2);
  float *x = big;
  enum { TO_COLLECTIVE, THROUGH_HOST_TO_SEND, TO_DEAD_END, TO_LATER_SAME_COMM, AFTER_RECEIVE, FENCE_AFTER_BOTH,
         N_VARIANTS };
  for (int variant = 0; variant < N_VARIANTS; variant++) {
    cg_graph_t *g = fusion_new_graph();
    cg_node_t a0, a1, h, other, later;
    if (variant == AFTER_RECEIVE) {
      ck_assert_cg_ok(cg_recv(&other, g, b, x + 8 * T, T, CG_FLOAT32, 1));
    }
    ck_assert_cg_ok(cg_allreduce(&a0, g, a, x, x + T, T, CG_FLOAT32, CG_SUM));
    cg_access_t none = CG_ACCESS_INIT;
    none.everything = 0;
    if (variant == THROUGH_HOST_TO_SEND || variant == TO_DEAD_END) {
      ck_assert_cg_ok(cg_host_func(&h, g, cg_test_noop, NULL, &none));
      ck_assert_cg_ok(cg_depend(g, a0, h));
    }
    if (variant == TO_COLLECTIVE) ck_assert_cg_ok(cg_allreduce(&other, g, b, x + 6 * T, x + 7 * T, T, CG_FLOAT32, CG_SUM));
    if (variant == THROUGH_HOST_TO_SEND) ck_assert_cg_ok(cg_send(&other, g, b, x + 6 * T, T, CG_FLOAT32, 1));
    if (variant == TO_COLLECTIVE) ck_assert_cg_ok(cg_depend(g, a0, other));
    if (variant == THROUGH_HOST_TO_SEND) ck_assert_cg_ok(cg_depend(g, h, other));
    ck_assert_cg_ok(cg_allreduce(&a1, g, a, x + 2 * T, x + 3 * T, T, CG_FLOAT32, CG_SUM));
    if (variant == AFTER_RECEIVE) ck_assert_cg_ok(cg_depend(g, other, a1));
    if (variant == TO_LATER_SAME_COMM) {
      ck_assert_cg_ok(cg_broadcast(&later, g, a, x + 4 * T, x + 5 * T, T, CG_FLOAT32, 0));
      ck_assert_cg_ok(cg_depend(g, a0, later));
    }
    if (variant == FENCE_AFTER_BOTH) { /* waits for a1 anyway */
      ck_assert_cg_ok(cg_host_func(&h, g, cg_test_noop, NULL, NULL));
      ck_assert_cg_ok(cg_allreduce(&later, g, b, x + 6 * T, x + 7 * T, T, CG_FLOAT32, CG_SUM));
    }
    cg_plan_t *plan = fused(g, 0);
    int apart = variant == TO_COLLECTIVE || variant == THROUGH_HOST_TO_SEND;
    ck_assert_msg(plan->fuse_why[a1.index] == (apart ? CG_FUSE_FEEDS : CG_FUSE_JOINED), "variant %d: reason '%s'",
                  variant, cg_fuse_why_text(plan->fuse_why[a1.index]));
    ck_assert_uint_eq(plan->n_buckets, !apart);
    char *text = cg_test_plan_text(plan, 0);
    const char *feeds = "not fused with the one before: the operation before it feeds communication on another";
    ck_assert_msg(!apart || strstr(text, feeds), "variant %d:\n%s", variant, text);
    free(text);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
  }
  cg_comm_destroy(b);
  cg_comm_destroy(a);
}
END_TEST

/* Three nodes per row, sends and receives each contiguous: rows 0-3 differ
 * in a key, row 4 shares it (a broadcast takes no reduction), alltoall never
 * fuses. */
START_TEST(fusion__different_keys_do_not_fuse) {
  cg_comm_t *comm = offline(1, 2);
  typedef struct { cg_node_kind_t kind; cg_dtype_t dtype; cg_redop_t op; int root; } key_t;
#define K(kind, dtype, op, root) {CG_NODE_##kind, CG_##dtype, CG_##op, root}
  static const key_t keys[][3] = {
      {K(ALLREDUCE, FLOAT32, SUM, 0), K(BROADCAST, FLOAT32, SUM, 0), K(ALLREDUCE, FLOAT32, SUM, 0)},
      {K(ALLREDUCE, FLOAT32, SUM, 0), K(ALLREDUCE, FLOAT32, MAX, 0), K(ALLREDUCE, INT32, MAX, 0)},
      {K(BROADCAST, INT8, SUM, 0), K(BROADCAST, INT8, SUM, 1), K(REDUCE, INT8, SUM, 1)},
      {K(REDUCE, FLOAT64, SUM, 0), K(REDUCE, FLOAT64, SUM, 1), K(ALLGATHER, FLOAT64, SUM, 1)},
      {K(BROADCAST, BFLOAT16, SUM, 1), K(BROADCAST, BFLOAT16, MAX, 1), K(BROADCAST, BFLOAT16, MIN, 1)},
      {K(ALLTOALL, UINT64, SUM, 0), K(ALLTOALL, UINT64, SUM, 0), K(ALLTOALL, UINT64, SUM, 0)}};
#undef K
  for (int k = 0; k < 6; k++) {
    cg_graph_t *g = fusion_new_graph();
    for (int i = 0; i < 3; i++) {
      unsigned char *at = (unsigned char *)big + 16 * cg_dtype_size(keys[k][i].dtype) * (size_t)i;
      cg_test_call_t call = {keys[k][i].kind, comm, at, at + 8192, 8, keys[k][i].dtype, keys[k][i].op, keys[k][i].root};
      ck_assert_cg_ok(cg_test_record(NULL, g, &call));
    }
    cg_plan_t *plan = fused(g, 0);
    char *text = cg_test_plan_text(plan, 0);
    size_t differs = count_of(text, "not fused with the one before: the operation before it differs");
    ck_assert_msg(plan->n_buckets == (k == 4) && differs == (k < 4 ? 2 : 0) && (k < 5 || !strstr(text, "not fused")),
                  "keys %d:\n%s", k, text);
    for (uint32_t i = 1; i < 3; i++)
      ck_assert_int_eq(plan->fuse_why[i], k < 4 ? CG_FUSE_DIFFERS : k == 4 ? CG_FUSE_JOINED : CG_FUSE_NOT_FUSIBLE);
    free(text);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
  }
  cg_comm_destroy(comm);
}
END_TEST

START_TEST(fusion__bucket_bytes_from_the_environment) {
  cg_comm_t *comm = offline(0, 4);
  cg_graph_t *g = ten_allreduces(comm, SPLIT, NULL);
  const char *values[] = {"2048", "4K", "1k", ""};
  const size_t want_bytes[] = {2048, 4096, 1024, 0};
  const uint32_t want_buckets[] = {5, 3, 0, 1};
  for (int k = 0; k < 4; k++) {
    setenv("CG_BUCKET_BYTES", values[k], 1);
    cg_plan_t *plan = fused(g, 0);
    ck_assert_msg(want_bytes[k] ? plan->bucket_bytes == want_bytes[k] : plan->bucket_bytes >= 10240,
                  "CG_BUCKET_BYTES=%s: bucket_bytes %zu", values[k], plan->bucket_bytes);
    ck_assert_uint_eq(plan->n_buckets, want_buckets[k]);
    cg_plan_destroy(plan);
  }
  setenv("CG_BUCKET_BYTES", "junk", 1); /* refused, not ignored (core/param.h) */
  cg_plan_t *refused = NULL;
  ck_assert_int_eq(cg_compile(&refused, g, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(refused);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "CG_BUCKET_BYTES='junk'"));
  setenv("CG_BUCKET_BYTES", "2K", 1); /* the option wins */
  cg_plan_t *plan = fused(g, 3072);
  ck_assert(plan->n_buckets == 3 && plan->bucket_bytes == 3072);
  unsetenv("CG_BUCKET_BYTES"); /* (CG_FUSION: the random test) */
  release(plan, g, comm);
}
END_TEST

START_TEST(fusion__stats_count_copies) {
  cg_comm_t *comm = offline(0, 2);
  cg_arena_t *a;
  void *p[10];
  ck_assert_cg_ok(cg_arena_create(&a, 10 * T * sizeof(float), NULL));
  for (int i = 0; i < 10; i++) ck_assert_cg_ok(cg_arena_alloc(&p[i], a, T, CG_FLOAT32));
  /* bytes copied per fused node: in and out, or only in (packed into the contiguous outputs) */
  const size_t per_node[] = {0, 0, 2048, 1024};
  const char *says[] = {"pack bucket 0: none: zero-copy", "unpack bucket 0: none: zero-copy",
                        "unpack bucket 0: %u copies", "unpack bucket 0: none: zero-copy"};
  for (int k = 0; k < 4; k++) {
    cg_graph_t *g = ten_allreduces(comm, (layout_t)k, p[0]);
    cg_plan_t *plan = fused(g, 0);
    cg_plan_stats_t st;
    ck_assert_cg_ok(cg_plan_stats(&st, plan));
    ck_assert_msg(st.buckets >= 1 && st.fused_nodes >= 2 && (k >= 2 || st.fused_nodes == 10) &&
                      st.copy_bytes == per_node[k] * st.fused_nodes,
                  "layout %d: %zu buckets %zu fused %zu copied", k, st.buckets, st.fused_nodes, st.copy_bytes);
    char *text = cg_test_plan_text(plan, 0), want[64];
    snprintf(want, sizeof want, says[k], plan->buckets[0].n_members);
    ck_assert_msg(strstr(text, want), "layout %d: no '%s' in\n%s", k, want, text);
    free(text);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
  }
  cg_arena_destroy(a);
  cg_comm_destroy(comm);
}
END_TEST

/* ---- Regressions of a bug fixed in ca841a7 (the "bugs" test case).
 *
 * graph/graph.c: a fence (host function without access, barrier) gets edges
 * only from the nodes nothing follows yet (collect_fence_preds), and a node
 * after a fence none when a predecessor recorded after the fence orders it;
 * both count on paths through comm-order edges. sched/compile/lower.c
 * (emit_steps) once lowered comm-order-only edges to collective -> collective,
 * so along such a path a bucket's unpack (writing members' outputs) no longer
 * preceded the fence, and its pack (reading members' inputs) no longer
 * followed it. Every edge between items now runs from last step to first. */

/* Six allreduces with copies (in place, last first) and a broadcast, with a
 * fence after them (`after`) or before. */
static void fence_and_bucket(int after) {
  cg_comm_t *comm = offline(0, 2);
  cg_graph_t *g = fusion_new_graph();
  uint32_t fence = 0;
  if (!after) ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL)); /* may write any input */
  ck_assert_cg_ok(cg_broadcast(NULL, g, comm, big + 8 * T, big + 9 * T, T, CG_FLOAT32, 0));
  for (int i = 5; i >= 0; i--)
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, big + i * T, big + i * T, T, CG_FLOAT32, CG_SUM));
  if (after) ck_assert_cg_ok(cg_broadcast(NULL, g, comm, big + 10 * T, big + 11 * T, T, CG_FLOAT32, 0));
  if (after) ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL)); /* may read any output */
  cg_plan_t *plan = fused(g, 0);
  while (plan->steps[fence].kind != CG_STEP_HOST_FUNC) fence++;
  ck_assert_uint_ge(plan->n_buckets, 1);
  for (uint32_t b = 0; b < plan->n_buckets; b++) {
    const cg_bucket_t *k = &plan->buckets[b];
    ck_assert_msg(after ? precedes(plan, k->unpack_step, fence) : precedes(plan, fence, k->pack_step),
                  after ? "the fence (step %u) may run before bucket %u's unpack (step %u, %u copies) writes"
                        : "the fence (step %u) may run after bucket %u's pack (step %u, %u copies) reads",
                  fence, b, after ? k->unpack_step : k->pack_step, after ? k->n_unpack : k->n_pack);
  }
  release(plan, g, comm);
}

START_TEST(fusion__fence_waits_for_bucket_unpack) { fence_and_bucket(1); }
END_TEST

START_TEST(fusion__bucket_pack_waits_for_fence) { fence_and_bucket(0); }
END_TEST

/* ---- arenas */

START_TEST(arena__pieces_touch_and_align_to_their_elements) {
  cg_arena_t *a;
  void *p[7], *q = &a;
  size_t used = 0, cap = 0;
  ck_assert_cg_ok(cg_arena_create(&a, 1000, NULL));
  const size_t count[] = {10, 20, 3, 1, 1, 0, 142};
  const cg_dtype_t dt[] = {CG_FLOAT32, CG_FLOAT32, CG_INT8, CG_FLOAT64, CG_UINT8, CG_FLOAT16, CG_INT32};
  const size_t at[] = {0, 40, 120, 128, 136, 138, 140}; /* the last one ends at 708 */
  for (int k = 0; k < 7; k++) {
    ck_assert_cg_ok(cg_arena_alloc(&p[k], a, count[k], dt[k]));
    ck_assert_msg((char *)p[k] == (char *)p[0] + at[k], "piece %d at %td", k, (char *)p[k] - (char *)p[0]);
  }
  ck_assert_uint_eq((uintptr_t)p[0] % 256, 0);
  ck_assert_cg_status(cg_arena_alloc(&q, a, 300, CG_FLOAT32), CG_ERR_NO_MEMORY); /* 1200 bytes */
  ck_assert_msg(cg_arena_alloc(&q, a, SIZE_MAX / 2, CG_FLOAT64) != CG_SUCCESS && q == (void *)&a, "overflowing count");
  ck_assert_cg_ok(cg_arena_usage(&used, &cap, a));
  ck_assert(used == 708 && cap == 1000 && q == (void *)&a); /* the failures changed nothing */
  ck_assert_cg_ok(cg_arena_alloc(&q, a, 73, CG_INT32)); /* exactly fills it */
  ck_assert_ptr_eq(q, (char *)p[0] + 708);
  ck_assert_cg_ok(cg_arena_alloc(&q, a, 0, CG_FLOAT64));
  ck_assert_ptr_nonnull(q);
  ck_assert_cg_status(cg_arena_alloc(&q, a, 1, CG_INT8), CG_ERR_NO_MEMORY);
  memset(p[0], 0x5a, 1000); /* all of it is ours (the sanitizer checks) */
  ck_assert_cg_ok(cg_arena_usage(NULL, NULL, a));
  ck_assert_cg_ok(cg_arena_reset(a));
  ck_assert_cg_ok(cg_arena_usage(&used, NULL, a));
  ck_assert_cg_ok(cg_arena_alloc(&q, a, 1, CG_INT64));
  ck_assert(used == 0 && q == p[0]);
  cg_arena_destroy(a);
  cg_arena_destroy(NULL);
  /* refused: NULL arguments, bad options (a non-power-of-two alignment), unknown data types */
  a = NULL;
  q = NULL;
  used = 1;
  const cg_arena_opts_t bad[] = {{1, CG_DEVICE_HOST, 0},
                                 {sizeof(cg_arena_opts_t), -2, 0},
                                 {sizeof(cg_arena_opts_t), CG_DEVICE_HOST, 3},
                                 {sizeof(cg_arena_opts_t), CG_DEVICE_HOST, 48},
                                 {sizeof(cg_arena_opts_t), CG_DEVICE_HOST, ((size_t)1 << 20) | 1}};
  ck_assert_cg_status(cg_arena_create(NULL, 64, NULL), CG_ERR_INVALID_ARGUMENT);
  for (int k = 0; k < 5; k++) ck_assert_cg_status(cg_arena_create(&a, 64, &bad[k]), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(a);
  ck_assert_cg_ok(cg_arena_create(&a, 64, NULL));
  ck_assert_cg_status(cg_arena_alloc(NULL, a, 1, CG_INT8), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_arena_alloc(&q, NULL, 1, CG_INT8), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_arena_alloc(&q, a, 1, CG_DTYPE_COUNT), CG_ERR_INVALID_ENUM);
  ck_assert_cg_status(cg_arena_alloc(&q, a, 1, (cg_dtype_t)-1), CG_ERR_INVALID_ENUM);
  ck_assert_cg_status(cg_arena_usage(&used, NULL, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_status(cg_arena_reset(NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_cg_ok(cg_arena_usage(&used, NULL, a));
  ck_assert(used == 0 && q == NULL); /* nothing above allocated */
  cg_arena_destroy(a);
}
END_TEST

/* Random sequences against a model of the documented placement. */
START_TEST(arena__random_allocations_follow_the_model) {
  cg_test_reseed(302);
  for (int round = 0; round < 300; round++) {
    size_t cap = (size_t)cg_test_below(3000), align = cg_test_below(2) ? 0 : (size_t)1 << cg_test_below(8), used = 0, u;
    cg_arena_opts_t o = CG_ARENA_OPTS_INIT;
    cg_arena_t *a;
    char *base = NULL;
    o.alignment = align;
    ck_assert_cg_ok(cg_arena_create(&a, cap, &o));
    for (int k = 0; k < 40; k++) {
      if (cg_test_below(20) == 0 && cg_arena_reset(a) == CG_SUCCESS) used = 0;
      cg_dtype_t dt = (cg_dtype_t)cg_test_below(CG_DTYPE_COUNT);
      size_t es = cg_dtype_size(dt), count = (size_t)cg_test_below(100), al = align > es ? align : es;
      size_t at = (used + al - 1) / al * al;
      void *p = NULL;
      cg_status_t st = cg_arena_alloc(&p, a, count, dt);
      int fits = at + count * es <= cap;
      base = base || !fits ? base : (char *)p - at;
      REQUIRE(st == (fits ? CG_SUCCESS : CG_ERR_NO_MEMORY) && (!fits || (char *)p == base + at),
              "round %d: %zu x %zu bytes at %zu in %zu (align %zu): %s at %td", round, count, es, at, cap, align,
              cg_status_string(st), p ? (char *)p - base : -1);
      if (fits) memset(p, 0xa5, count * es), used = at + count * es;
      ck_assert_cg_ok(cg_arena_usage(&u, NULL, a));
      REQUIRE(u == used, "round %d: usage %zu, expected %zu", round, u, used);
    }
    cg_arena_destroy(a);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("fusion");
  const TTest *tests[][12] = {
      {fusion__random_graphs_keep_invariants, fusion__ten_allreduces_fuse_into_one_bucket,
       fusion__bucket_size_splits_buckets, fusion__dependent_allreduces_do_not_fuse, fusion__different_keys_do_not_fuse,
       fusion__bucket_bytes_from_the_environment, fusion__stats_count_copies,
       fusion__bucket_never_holds_back_other_communication, fusion__buckets_overlap_compute,
       fusion__overlap_buckets_close_at_their_size_as_in_ddp, fusion__tuned_boundaries_follow_the_cost_model,
       fusion__tuned_boundaries_with_overlap_finish_first},
      {fusion__fence_waits_for_bucket_unpack, fusion__bucket_pack_waits_for_fence},
      {arena__pieces_touch_and_align_to_their_elements, arena__random_allocations_follow_the_model}};
  const char *names[] = {"fusion", "bugs", "arena"};
  for (int c = 0; c < 3; c++) {
    TCase *tc = tcase_create(names[c]);
    tcase_set_timeout(tc, 120);
    for (int k = 0; k < 12 && tests[c][k]; k++) tcase_add_test(tc, tests[c][k]);
    suite_add_tcase(s, tc);
  }
  return s;
}

int main(void) {
  unsetenv("CG_FUSION"); /* the tests set these themselves */
  unsetenv("CG_BUCKET_BYTES");
  return cg_test_main(suite());
}
