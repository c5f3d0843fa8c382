/* Differential test of fusion on device buffers with NCCL, one GPU per rank:
 * the programs of tests/mpi/test_mpi_fusion.c (cg_rp_generate_fusible, mostly
 * runs of fusible collectives), recorded on device buffers with NCCL
 * communicators and compiled three ways (fusion off, fusion on with the
 * backend's bucket size, fusion on with a small random bucket size of 64 B ..
 * 64 KB), and on host mirrors with MPI communicators over the same ranks for
 * the reference executor. Each plan runs from the same inputs (fresh integer
 * values, poison in bytes first written) and must leave device memory
 * byte-identical to the reference's, so to each other; the small-bucket plan
 * then runs again on fresh data. Runs alternate cg_plan_launch with a stream
 * synchronization, cg_plan_start with cg_plan_test, and cg_plan_run.
 *
 * Layouts rotate per program: scattered buffers (cudaMalloc'ed arenas; buckets
 * copy with the batched kernel), contiguous buffers taken from a device
 * cg_arena (opts.device = this rank's GPU) in record order, and the same in
 * place. Where every possible bucket lies in place, the fused plans must copy
 * nothing. The suite fails if no bucket formed, none without copies, or none
 * copying scattered buffers.
 *
 * Host functions become CUDA host nodes, which may only touch host memory:
 * they append their node number to a log in host memory, declaring the log as
 * written and their range of a device arena as read and written (some declare
 * nothing: fences). The log must match the reference's.
 *
 * tests/mpi/support/fusion_diff.h says how many programs run and which
 * environment variables repeat one; CG_FUSION and CG_BUCKET_BYTES are unset. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion_diff.h"
#include "gpu_test.h"

typedef struct host_log {
  int ids[CG_RP_MAX_SPECS];
  int n;
} host_log_t;

typedef struct host_arg {
  host_log_t *log;
  int id;
} host_arg_t;

typedef struct host_ctx {
  const cg_rp_program_t *p;
  host_log_t log;
  host_arg_t args[CG_RP_MAX_SPECS];
} host_ctx_t;

static void log_node(void *arg) {
  host_arg_t *h = arg;
  if (h->log->n < CG_RP_MAX_SPECS) h->log->ids[h->log->n] = h->id;
  h->log->n++;
}

static cg_status_t record_host(cg_node_t *out, cg_graph_t *g, int node, const cg_rp_spec_t *s, char *mem,
                               void *ctx) {
  host_ctx_t *hc = ctx;
  size_t es = cg_dtype_size(hc->p->arenas[s->arena].dtype);
  hc->args[node] = (host_arg_t){&hc->log, node};
  cg_range_t reads[] = {{mem + s->recv_off * es, s->count * es}};
  cg_range_t writes[] = {{mem + s->recv_off * es, s->count * es}, {&hc->log, sizeof hc->log}};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = reads;
  access.n_reads = 1;
  access.writes = writes;
  access.n_writes = 2;
  return cg_host_func(out, g, log_node, &hc->args[node], s->root ? NULL : &access);
}

/* Device memory: cudaMalloc'ed (scattered), or the pieces of a device arena
 * in record order, which must come out back to back. */
static char *plan_memory(cg_arena_t **arena, const cg_rp_program_t *p, int a) {
  size_t es = cg_dtype_size(p->arenas[a].dtype), total = p->arenas[a].elems, sum = 0, used = 0;
  *arena = NULL;
  if (p->layout == CG_RP_SCATTERED) return cg_gpu_alloc(total * es);
  cg_arena_opts_t o = CG_ARENA_OPTS_INIT;
  o.device = cg_gpu_device();
  ck_assert_cg_ok(cg_arena_create(arena, (total + 1) * es, &o));
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

/* Runs the plan once: launch on a stream (how 0), start and test (1), run (2). */
static cg_status_t run_plan(cg_plan_t *plan, int how, int communicates) {
  if (!communicates || how == 2) return cg_plan_run(plan); /* host functions only: a host plan */
  cg_status_t st;
  if (how == 0) {
    st = cg_plan_launch(plan, cg_gpu_stream());
    if (st == CG_SUCCESS && cudaStreamSynchronize(cg_gpu_stream()) != cudaSuccess) st = CG_ERR_BACKEND;
    return st;
  }
  int done = 0;
  st = cg_plan_start(plan);
  while (st == CG_SUCCESS && !done) st = cg_plan_test(&done, plan); /* no assertion per poll: Check logs each */
  return st;
}

/* Fresh data in the image; the reference runs on a copy of it. */
static void fresh_inputs(const cg_rp_program_t *p, char *const *image, char *const *ref, cg_graph_t *ref_graph,
                         cg_comm_t *const *comms, host_ctx_t *ref_host, uint64_t salt) {
  int rank[3], size[3];
  for (int c = 0; c < 3; c++) {
    cg_comm_rank(&rank[c], comms[c]);
    cg_comm_size(&size[c], comms[c]);
  }
  for (int a = 0; a < p->n_arenas; a++) {
    cg_rp_fill(p, a, image[a], rank, size, cg_test_seed() ^ salt, (uint64_t)cg_gpu_rank() * 131 + (uint64_t)a);
    memcpy(ref[a], image[a], p->arenas[a].elems * cg_dtype_size(p->arenas[a].dtype));
  }
  memset(&ref_host->log, 0, sizeof ref_host->log);
  ck_assert_cg_ok(cg_reference_run(ref_graph));
}

static int same_log(const host_log_t *plan, const host_log_t *ref, int prog, const char *what) {
  int same = plan->n == ref->n;
  for (int i = 0; same && i < plan->n && i < CG_RP_MAX_SPECS; i++) same = plan->ids[i] == ref->ids[i];
  if (!same)
    fprintf(stderr, "rank %d: program %d, %s: the plan ran %d host functions, the reference %d, or in another "
            "order\n", cg_gpu_rank(), prog, what, plan->n, ref->n);
  return same;
}

static void one_program(cg_fd_totals_t *t, cg_comm_t *const *comms, cg_comm_t *const *ref_comms, int prog) {
  static cg_rp_program_t p;
  static host_ctx_t plan_host, ref_host;
  char what[400];
  size_t small;
  cg_fd_program(&p, &small, prog, cg_gpu_size(), 0);
  if (t->verbose && cg_gpu_rank() == 0) cg_rp_dump(&p);
  char *mem[CG_RP_MAX_DTYPES], *ref[CG_RP_MAX_DTYPES], *image[CG_RP_MAX_DTYPES], *result[CG_RP_MAX_DTYPES];
  cg_arena_t *arenas[CG_RP_MAX_DTYPES];
  for (int a = 0; a < p.n_arenas; a++) {
    size_t bytes = p.arenas[a].elems * cg_dtype_size(p.arenas[a].dtype);
    mem[a] = plan_memory(&arenas[a], &p, a);
    ref[a] = malloc(bytes);
    image[a] = malloc(bytes);
    result[a] = malloc(bytes);
    ck_assert(ref[a] && image[a] && result[a]);
  }
  cg_graph_t *g, *ref_graph;
  cg_node_t handles[CG_RP_MAX_SPECS];
  int bad = -1, communicates = 0;
  for (int i = 0; i < p.n_nodes; i++) communicates |= p.nodes[i].kind != CG_NODE_HOST_FUNC;
  plan_host.p = ref_host.p = &p;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_graph_create(&ref_graph, NULL));
  cg_status_t st = cg_rp_record(g, &p, mem, comms, record_host, &plan_host, handles, &bad);
  if (st == CG_SUCCESS) st = cg_rp_record(ref_graph, &p, ref, ref_comms, record_host, &ref_host, handles, &bad);
  ck_assert_msg(st == CG_SUCCESS, "program %d node %d: %s", prog, bad, cg_error_last());

  cg_plan_t *plans[CG_FD_VARIANTS];
  cg_plan_stats_t stats[CG_FD_VARIANTS];
  int ok = 1;
  for (int v = 0; v < CG_FD_VARIANTS; v++) {
    cg_compile_opts_t o = cg_fd_opts(v, small);
    st = cg_compile(&plans[v], g, &o);
    snprintf(what, sizeof what, "program %d: cg_compile (%s): %s", prog, cg_fd_variant_names[v],
             st == CG_SUCCESS ? "" : cg_error_last());
    if (!cg_mpi_all(st == CG_SUCCESS) && cg_gpu_rank() == 0) cg_rp_dump(&p);
    ck_assert_all_ranks(st == CG_SUCCESS, what);
    ck_assert_cg_ok(cg_plan_stats(&stats[v], plans[v]));
    ck_assert_int_eq(stats[v].device, communicates ? cg_gpu_device() : CG_DEVICE_HOST);
    ok &= cg_fd_stats_ok(&p, prog, v, small, &stats[v]);
    if (t->verbose) {
      fprintf(stderr, "rank %d: program %d: plan (%s):\n", cg_gpu_rank(), prog, cg_fd_variant_names[v]);
      cg_plan_dump(plans[v], stderr);
    }
  }
  ok = cg_mpi_all(ok);
  if (!ok && cg_gpu_rank() == 0) cg_rp_dump(&p);
  snprintf(what, sizeof what, "program %d: plan statistics", prog);
  ck_assert_all_ranks(ok, what);

  int failed = 0, reporter = 0;
  fresh_inputs(&p, image, ref, ref_graph, ref_comms, &ref_host, (uint64_t)prog * 7919);
  for (int v = 0; v <= CG_FD_VARIANTS && ok; v++) {
    int plan = v < CG_FD_VARIANTS ? v : CG_FD_VARIANTS - 1;
    failed = plan;
    snprintf(what, sizeof what, "%s%s", cg_fd_variant_names[plan], v == CG_FD_VARIANTS ? ", second run" : "");
    if (v == CG_FD_VARIANTS) fresh_inputs(&p, image, ref, ref_graph, ref_comms, &ref_host, (uint64_t)prog * 7919 + 1);
    for (int a = 0; a < p.n_arenas; a++)
      CUDA_OK(cudaMemcpy(mem[a], image[a], p.arenas[a].elems * cg_dtype_size(p.arenas[a].dtype),
                         cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize()); /* on the device before any stream reads it */
    memset(&plan_host.log, 0, sizeof plan_host.log);
    if (t->verbose) fprintf(stderr, "rank %d: program %d: running %s\n", cg_gpu_rank(), prog, what);
    st = run_plan(plans[plan], v % 3, communicates);
    char status[1000];
    snprintf(status, sizeof status, "program %d: running the plan (%s): %s", prog, what,
             st == CG_SUCCESS ? "" : cg_error_last());
    ck_assert_all_ranks(st == CG_SUCCESS, status);
    for (int a = 0; a < p.n_arenas; a++)
      CUDA_OK(cudaMemcpy(result[a], mem[a], p.arenas[a].elems * cg_dtype_size(p.arenas[a].dtype),
                         cudaMemcpyDeviceToHost));
    int mine = cg_fd_compare(&p, result, ref, prog, what);
    mine &= same_log(&plan_host.log, &ref_host.log, prog, what);
    reporter = cg_fd_first_failure(mine);
    ok = reporter == cg_gpu_size(); /* every rank stops after the same run */
    t->runs++;
  }
  if (!ok && cg_gpu_rank() == reporter) { /* the program, and the plan of the first rank that failed */
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
      cg_gpu_free(mem[a]);
    free(ref[a]);
    free(image[a]);
    free(result[a]);
  }
}

START_TEST(nccl_fusion__fused_plans_match_unfused_and_reference) {
  MPI_Comm split;
  MPI_Comm_split(MPI_COMM_WORLD, cg_gpu_rank() % 2, cg_gpu_rank(), &split);
  cg_comm_t *comms[3], *ref_comms[3];
  comms[0] = cg_gpu_nccl_comm(MPI_COMM_WORLD);
  comms[1] = cg_gpu_nccl_comm(MPI_COMM_WORLD);
  comms[2] = cg_gpu_nccl_comm(split);
  ck_assert_cg_ok(cg_comm_create(&ref_comms[0], MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&ref_comms[1], MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&ref_comms[2], split, NULL));
  cg_fd_totals_t t;
  cg_fd_begin(&t);
  for (int prog = (int)t.first; cg_fd_next(&t, prog); prog++) one_program(&t, comms, ref_comms, prog);
  cg_fd_finish(&t);
  for (int c = 0; c < 3; c++) {
    cg_comm_destroy(comms[c]);
    cg_comm_destroy(ref_comms[c]);
  }
  MPI_Comm_free(&split);
}
END_TEST

int main(void) {
  unsetenv("CG_FUSION"); /* the suite chooses fusion and bucket sizes itself */
  unsetenv("CG_BUCKET_BYTES");
  Suite *s = suite_create("nccl_fusion");
  TCase *tc = cg_gpu_tcase("nccl_fusion");
  tcase_add_test(tc, nccl_fusion__fused_plans_match_unfused_and_reference);
  suite_add_tcase(s, tc);
  return cg_gpu_test_main(s, "test_nccl_fusion");
}
