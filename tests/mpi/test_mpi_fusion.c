/* Differential test of fusion on host buffers (MPI backend): random programs
 * made mostly of runs of fusible collectives (cg_rp_generate_fusible in
 * tests/mpi/support/random_program.c), each recorded once and compiled three
 * ways: fusion off, fusion on with the backend's bucket size, fusion on with a
 * small random bucket size (64 B .. 64 KB). Each plan runs from the same inputs
 * (fresh integer values per program, differing per rank, poison in the bytes
 * whose first access is a write) and must leave memory byte-identical to the
 * reference executor, so to each other; the small-bucket plan then runs again
 * on fresh data (a replay must not depend on leftovers in its staging).
 *
 * Layouts rotate per program: scattered buffers (buckets copy through
 * staging), contiguous buffers taken from a host cg_arena in record order, and
 * the same in place (every other such program of allreduces only). Where the
 * generator says every possible bucket lies in place, the fused plans must copy
 * nothing (copy_bytes 0). The suite fails if no bucket formed at all, none
 * without copies, or none copying scattered buffers.
 *
 * tests/mpi/support/fusion_diff.h says how many programs run and which
 * environment variables repeat one; CG_FUSION and CG_BUCKET_BYTES are unset
 * (the suite chooses). Host functions add 1 to their range. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion_diff.h"

typedef struct host_arg {
  char *mem; /* arena memory this node increments */
  size_t off, count;
  cg_dtype_t dtype;
} host_arg_t;

typedef struct host_ctx {
  const cg_rp_program_t *p;
  host_arg_t args[CG_RP_MAX_SPECS];
} host_ctx_t;

static void increment(void *arg) {
  host_arg_t *h = arg;
  for (size_t i = 0; i < h->count; i++)
    cg_ref_store(h->mem, h->off + i, h->dtype, cg_ref_load(h->mem, h->off + i, h->dtype) + 1);
}

static cg_status_t record_host(cg_node_t *out, cg_graph_t *g, int node, const cg_rp_spec_t *s, char *mem,
                               void *ctx) {
  host_ctx_t *hc = ctx;
  cg_dtype_t dt = hc->p->arenas[s->arena].dtype;
  size_t es = cg_dtype_size(dt);
  hc->args[node] = (host_arg_t){mem, s->recv_off, s->count, dt};
  cg_range_t range = {mem + s->recv_off * es, s->count * es};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = access.writes = &range;
  access.n_reads = access.n_writes = 1;
  return cg_host_func(out, g, increment, &hc->args[node], s->root ? NULL : &access);
}

/* Plan memory: malloc'ed (scattered), or the pieces of a host arena in record
 * order, which must come out back to back. */
static char *plan_memory(cg_arena_t **arena, const cg_rp_program_t *p, int a) {
  size_t es = cg_dtype_size(p->arenas[a].dtype), total = p->arenas[a].elems, sum = 0, used = 0;
  *arena = NULL;
  if (p->layout == CG_RP_SCATTERED) {
    char *m = malloc(total * es);
    ck_assert_ptr_nonnull(m);
    return m;
  }
  ck_assert_cg_ok(cg_arena_create(arena, (total + 1) * es, NULL));
  void *ptr[CG_RP_MAX_SPECS * 2], *tail;
  for (int k = 0; k < p->n_pieces; k++) {
    if (p->pieces[k].arena != a) continue;
    ck_assert_cg_ok(cg_arena_alloc(&ptr[k], *arena, p->pieces[k].elems, p->arenas[a].dtype));
    sum += p->pieces[k].elems;
  }
  ck_assert_cg_ok(cg_arena_alloc(&tail, *arena, 1, p->arenas[a].dtype));
  char *base = (char *)tail - sum * es;
  for (int k = 0; k < p->n_pieces; k++)
    if (p->pieces[k].arena == a && p->pieces[k].elems)
      ck_assert_msg((char *)ptr[k] == base + p->pieces[k].off * es, "arena %d: piece %d is not right after the one "
                    "before it", a, k);
  ck_assert_cg_ok(cg_arena_usage(&used, NULL, *arena));
  ck_assert_uint_eq(used, (sum + 1) * es);
  return base;
}

static cg_status_t run_plan(cg_plan_t *plan, int how) {
  if (how == 0) return cg_plan_run(plan);
  int done = 0;
  cg_status_t st = cg_plan_start(plan);
  while (st == CG_SUCCESS && !done) st = cg_plan_test(&done, plan); /* no assertion per poll: Check logs each */
  return st;
}

/* Fresh data in the image; the reference runs on a copy of it. */
static void fresh_inputs(const cg_rp_program_t *p, char *const *image, char *const *ref, cg_graph_t *ref_graph,
                         cg_comm_t *const *comms, uint64_t salt) {
  int rank[3], size[3];
  for (int c = 0; c < 3; c++) {
    cg_comm_rank(&rank[c], comms[c]);
    cg_comm_size(&size[c], comms[c]);
  }
  for (int a = 0; a < p->n_arenas; a++) {
    cg_rp_fill(p, a, image[a], rank, size, cg_test_seed() ^ salt, (uint64_t)cg_mpi_rank() * 131 + (uint64_t)a);
    memcpy(ref[a], image[a], p->arenas[a].elems * cg_dtype_size(p->arenas[a].dtype));
  }
  ck_assert_cg_ok(cg_reference_run(ref_graph));
}

static void one_program(cg_fd_totals_t *t, cg_comm_t *const *comms, int prog) {
  static cg_rp_program_t p;
  static host_ctx_t plan_host, ref_host;
  char what[400];
  size_t small;
  cg_fd_program(&p, &small, prog, cg_mpi_size(), 1);
  if (t->verbose && cg_mpi_rank() == 0) cg_rp_dump(&p);
  char *mem[CG_RP_MAX_DTYPES], *ref[CG_RP_MAX_DTYPES], *image[CG_RP_MAX_DTYPES];
  cg_arena_t *arenas[CG_RP_MAX_DTYPES];
  for (int a = 0; a < p.n_arenas; a++) {
    size_t bytes = p.arenas[a].elems * cg_dtype_size(p.arenas[a].dtype);
    mem[a] = plan_memory(&arenas[a], &p, a);
    ref[a] = malloc(bytes);
    image[a] = malloc(bytes);
    ck_assert(ref[a] && image[a]);
  }
  cg_graph_t *g, *ref_graph;
  cg_node_t handles[CG_RP_MAX_SPECS];
  int bad = -1;
  plan_host.p = ref_host.p = &p;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_graph_create(&ref_graph, NULL));
  cg_status_t st = cg_rp_record(g, &p, mem, comms, record_host, &plan_host, handles, &bad);
  if (st == CG_SUCCESS) st = cg_rp_record(ref_graph, &p, ref, comms, record_host, &ref_host, handles, &bad);
  ck_assert_msg(st == CG_SUCCESS, "program %d node %d: %s", prog, bad, cg_error_last());

  /* one graph, three plans */
  cg_plan_t *plans[CG_FD_VARIANTS];
  cg_plan_stats_t stats[CG_FD_VARIANTS];
  int ok = 1;
  for (int v = 0; v < CG_FD_VARIANTS; v++) {
    cg_compile_opts_t o = cg_fd_opts(v, small);
    st = cg_compile(&plans[v], g, &o);
    snprintf(what, sizeof what, "program %d: cg_compile (%s): %s", prog, cg_fd_variant_names[v],
             st == CG_SUCCESS ? "" : cg_error_last());
    if (!cg_mpi_all(st == CG_SUCCESS) && cg_mpi_rank() == 0) cg_rp_dump(&p);
    ck_assert_all_ranks(st == CG_SUCCESS, what);
    ck_assert_cg_ok(cg_plan_stats(&stats[v], plans[v]));
    ok &= cg_fd_stats_ok(&p, prog, v, small, &stats[v]);
    if (t->verbose) {
      fprintf(stderr, "rank %d: program %d: plan (%s):\n", cg_mpi_rank(), prog, cg_fd_variant_names[v]);
      cg_plan_dump(plans[v], stderr);
    }
  }
  ok = cg_mpi_all(ok);
  if (!ok && cg_mpi_rank() == 0) cg_rp_dump(&p);
  snprintf(what, sizeof what, "program %d: plan statistics", prog);
  ck_assert_all_ranks(ok, what);

  /* each plan from the same inputs, then the last one again on fresh data */
  int failed = 0, reporter = 0;
  fresh_inputs(&p, image, ref, ref_graph, comms, (uint64_t)prog * 7919);
  for (int v = 0; v <= CG_FD_VARIANTS && ok; v++) {
    int plan = v < CG_FD_VARIANTS ? v : CG_FD_VARIANTS - 1;
    failed = plan;
    snprintf(what, sizeof what, "%s%s", cg_fd_variant_names[plan], v == CG_FD_VARIANTS ? ", second run" : "");
    if (v == CG_FD_VARIANTS) fresh_inputs(&p, image, ref, ref_graph, comms, (uint64_t)prog * 7919 + 1);
    for (int a = 0; a < p.n_arenas; a++) memcpy(mem[a], image[a], p.arenas[a].elems * cg_dtype_size(p.arenas[a].dtype));
    if (t->verbose) fprintf(stderr, "rank %d: program %d: running %s\n", cg_mpi_rank(), prog, what);
    st = run_plan(plans[plan], v % 2);
    char status[1000];
    snprintf(status, sizeof status, "program %d: running the plan (%s): %s", prog, what,
             st == CG_SUCCESS ? "" : cg_error_last());
    ck_assert_all_ranks(st == CG_SUCCESS, status);
    reporter = cg_fd_first_failure(cg_fd_compare(&p, mem, ref, prog, what));
    ok = reporter == cg_mpi_size(); /* every rank stops after the same run */
    t->runs++;
  }
  if (!ok && cg_mpi_rank() == reporter) { /* the program, and the plan of the first rank that failed */
    cg_rp_dump(&p);
    fprintf(stderr, "  small bucket size %zu; rank %d's plan (%s):\n", small, reporter, cg_fd_variant_names[failed]);
    cg_plan_dump(plans[failed], stderr);
    fprintf(stderr, "  rerun with CG_TEST_SEED=%llu CG_FUSION_TEST_FIRST=%d CG_FUSION_TEST_PROGRAMS=1\n",
            (unsigned long long)cg_test_seed(), prog);
  }
  snprintf(what, sizeof what, "program %d (%s layout): plans match the reference", prog, cg_rp_layout_name(p.layout));
  ck_assert_all_ranks(ok, what);

  cg_fd_count(t, &p, stats);
  for (int v = 0; v < CG_FD_VARIANTS; v++) cg_plan_destroy(plans[v]);
  cg_graph_destroy(g);
  cg_graph_destroy(ref_graph);
  for (int a = 0; a < p.n_arenas; a++) {
    if (arenas[a])
      cg_arena_destroy(arenas[a]);
    else
      free(mem[a]);
    free(ref[a]);
    free(image[a]);
  }
}

START_TEST(fusion__fused_plans_match_unfused_and_reference) {
  cg_comm_t *comms[3] = {NULL, NULL, NULL};
  MPI_Comm split;
  ck_assert_cg_ok(cg_comm_create(&comms[0], MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&comms[1], MPI_COMM_WORLD, NULL));
  MPI_Comm_split(MPI_COMM_WORLD, cg_mpi_rank() % 2, cg_mpi_rank(), &split);
  ck_assert_cg_ok(cg_comm_create(&comms[2], split, NULL));
  cg_fd_totals_t t;
  cg_fd_begin(&t);
  for (int prog = (int)t.first; cg_fd_next(&t, prog); prog++) one_program(&t, comms, prog);
  cg_fd_finish(&t);
  for (int c = 0; c < 3; c++) cg_comm_destroy(comms[c]);
  MPI_Comm_free(&split);
}
END_TEST

/* A backward pass of host functions, each writing one gradient that an
 * in-place allreduce then sums, compiled with the library's bucket size on
 * the MPI backend, which prefers 4 MiB on one node: the buckets that wait
 * for compute follow DDP's caps above that size (the first closes once it
 * holds 1 MiB, the later ones once they hold 25 MiB, the member that reaches
 * the cap joining), and the same allreduces without compute between them
 * keep the backend's 4 MiB. Gradient sizes drawn per run (128 KiB to 3 MiB:
 * two of them can exceed 4 MiB, which must not close a bucket before the
 * compute between them has run), both rules computed here; sums checked
 * (integer values, poisoned first). */
enum { BW_N = 40, BW_UNIT = 1 << 15 /* floats: 128 KiB */, BW_MAX_UNITS = 24 };

typedef struct backward_layer {
  float *grad;
  size_t count;
  int k;
} backward_layer_t;

static void write_gradient(void *arg) {
  const backward_layer_t *l = arg;
  for (size_t i = 0; i < l->count; i++) l->grad[i] = (float)(cg_mpi_rank() + l->k + (int)(i % 7));
}

/* Buckets of several members, nodes in them and the largest's bytes, as
 * `overlap` (DDP's caps) or the 4 MiB size alone would cut the gradients,
 * in record order (the last gradient first); *over_cap: some bucket's first
 * two members hold more than 4 MiB together. */
static void reference_buckets(size_t *buckets, size_t *fused, size_t *largest, int *over_cap,
                              const backward_layer_t *layers, int overlap) {
  const size_t first = (size_t)1 << 20, later = (size_t)25 << 20, cap = (size_t)4 << 20;
  size_t bytes = 0, members = 0, opened = 0;
  *buckets = *fused = *largest = 0;
  *over_cap = 0;
  for (int k = BW_N; k >= 0; k--) {
    size_t b = k > 0 ? layers[k - 1].count * sizeof(float) : 0;
    int full = overlap ? bytes >= (opened ? later : first) : bytes + b > cap;
    if (members && (k == 0 || full)) {
      if (members > 1) *buckets += 1, *fused += members, *largest = bytes > *largest ? bytes : *largest;
      members = 0, bytes = 0, opened++;
    }
    if (members == 1 && k > 0 && bytes + b > cap) *over_cap = 1;
    members++, bytes += b;
  }
}

START_TEST(fusion__buckets_waiting_for_compute_take_ddp_caps_over_the_backend_size) {
  cg_comm_t *comm = NULL;
  ck_assert_cg_ok(cg_comm_create(&comm, MPI_COMM_WORLD, NULL));
  int size = cg_mpi_size();
  float *grads = malloc((size_t)BW_N * BW_MAX_UNITS * BW_UNIT * sizeof *grads);
  static float act[BW_N + 1];
  static backward_layer_t layers[BW_N];
  ck_assert_ptr_nonnull(grads);
  cg_test_reseed(0xdd9);
  size_t n_buckets, n_fused, largest;
  /* sizes where DDP's rule puts more than 4 MiB in some bucket's first two
   * members (drawn again until they do), so that a size check made before
   * the compute between them has run would show */
  for (int over_cap = 0, tries = 0; !over_cap && tries < 1000; tries++) {
    for (int k = 0; k < BW_N; k++) {
      size_t units = 1 + (size_t)cg_test_below(BW_MAX_UNITS);
      layers[k] = (backward_layer_t){grads + (size_t)k * BW_MAX_UNITS * BW_UNIT, units * BW_UNIT, k};
    }
    reference_buckets(&n_buckets, &n_fused, &largest, &over_cap, layers, 1);
    ck_assert_msg(over_cap || tries < 999, "no draw of sizes puts 4 MiB in a bucket's first two members");
  }
  for (int with_compute = 1; with_compute >= 0; with_compute--) {
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    for (int k = BW_N - 1; k >= 0; k--) {
      backward_layer_t *l = &layers[k];
      if (with_compute) {
        cg_access_t access = CG_ACCESS_INIT;
        cg_range_t reads[] = {{&act[k + 1], sizeof(float)}};
        cg_range_t writes[] = {{&act[k], sizeof(float)}, {l->grad, l->count * sizeof(float)}};
        access.everything = 0, access.reads = reads, access.n_reads = 1;
        access.writes = writes, access.n_writes = 2;
        ck_assert_cg_ok(cg_host_func(NULL, g, write_gradient, l, &access));
      }
      ck_assert_cg_ok(cg_allreduce(NULL, g, comm, l->grad, l->grad, l->count, CG_FLOAT32, CG_SUM));
    }
    cg_plan_t *plan = NULL;
    ck_assert_cg_ok(cg_compile(&plan, g, NULL));
    cg_plan_stats_t st;
    ck_assert_cg_ok(cg_plan_stats(&st, plan));
    size_t want_buckets, want_fused, want_bytes = (size_t)4 << 20;
    int over_cap = 0;
    reference_buckets(&want_buckets, &want_fused, &largest, &over_cap, layers, with_compute);
    if (largest > want_bytes) want_bytes = largest;
    ck_assert_msg(st.buckets == want_buckets && st.fused_nodes == want_fused && st.bucket_bytes == want_bytes,
                  "rank %d, %s compute: %zu buckets of %zu nodes, at most %zu bytes; expected %zu of %zu, %zu",
                  cg_mpi_rank(), with_compute ? "with" : "without", st.buckets, st.fused_nodes, st.bucket_bytes,
                  want_buckets, want_fused, want_bytes);
    /* the two rules must differ here, or the test shows nothing */
    ck_assert(!with_compute || largest > ((size_t)4 << 20));
    char *dot = NULL, members[64];
    size_t dot_len = 0;
    FILE *f = open_memstream(&dot, &dot_len);
    ck_assert_ptr_nonnull(f);
    ck_assert_cg_ok(cg_plan_write_dot(plan, f));
    fclose(f);
    snprintf(members, sizeof members, "at most %zu bytes", want_bytes);
    ck_assert_msg(strstr(dot, members), "rank %d: the DOT does not say '%s'", cg_mpi_rank(), members);
    free(dot);
    for (int k = 0; k < BW_N; k++) {
      for (size_t i = 0; i < layers[k].count; i++) layers[k].grad[i] = with_compute ? -1.0f : 0.0f;
      if (!with_compute) write_gradient(&layers[k]);
    }
    ck_assert_cg_ok(cg_plan_run(plan));
    int bad = -1;
    for (int k = 0; k < BW_N && bad < 0; k++)
      for (size_t i = 0; i < layers[k].count && bad < 0; i++)
        if (layers[k].grad[i] != (float)(size * (k + (int)(i % 7)) + size * (size - 1) / 2)) bad = k;
    ck_assert_msg(bad < 0, "rank %d, %s compute: gradient %d summed wrong", cg_mpi_rank(),
                  with_compute ? "with" : "without", bad);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
  }
  free(grads);
  cg_comm_destroy(comm);
}
END_TEST

int main(void) {
  unsetenv("CG_FUSION"); /* the suite chooses fusion and bucket sizes itself */
  unsetenv("CG_BUCKET_BYTES");
  Suite *s = suite_create("mpi_fusion");
  TCase *tc = cg_mpi_tcase("fusion");
  tcase_add_test(tc, fusion__fused_plans_match_unfused_and_reference);
  tcase_add_test(tc, fusion__buckets_waiting_for_compute_take_ddp_caps_over_the_backend_size);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
