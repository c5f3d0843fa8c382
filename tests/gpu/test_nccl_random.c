/* Differential test on the GPU: random DAGs (mixed kinds, data types,
 * communicators, overlapping buffers, in-place forms, host functions, explicit
 * edges) compiled for NCCL and run on device buffers must leave memory
 * byte-identical to the reference executor run on host copies. The program is
 * the one of tests/mpi/test_mpi_random.c, recorded twice: on device buffers
 * with NCCL communicators (the plan) and on host mirrors with MPI
 * communicators over the same ranks (the reference). Every rank builds the
 * same program from the shared seed; data is fresh each run and differs per
 * rank.
 *
 * Sends and receives: ring exchanges with random shifts, recorded send-first
 * or receive-first, several between two collectives of a communicator, some
 * sending what an earlier one received. NCCL plans issue them in groups by
 * level, and the ranks agree on the levels at compile time (sched/compile/p2p_levels.c)
 * so that a send and its receive land in groups of the same level; a mistake
 * there shows as a hang, which the time limit turns into a failure.
 *
 * Host functions become CUDA host nodes, which may only touch host memory:
 * here they append their node number to a log in host memory. Each declares
 * the log as written (so all host functions run in record order) and a range
 * of a device arena as read and written, which only orders it against the
 * collectives that touch that range. The log must match the reference's.
 *
 * The programs come from tests/mpi/support/random_program.c, shared with the
 * host suite (which keeps values exact for any order of combining). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "random_program.h"

#define N_DAGS 150

typedef struct host_log {
  int ids[CG_RP_MAX_NODES];
  int n;
} host_log_t;

typedef struct host_arg {
  host_log_t *log;
  int id;
} host_arg_t;

typedef struct program {
  cg_rp_program_t rp;      /* arena copies: mem[0] on the device (the plan's), mem[1] the reference's
                              host mirror, mem[2] host staging for mem[0] (initial contents, then the result) */
  cg_comm_t *comms[3];     /* NCCL: world, world again, half of the ranks */
  cg_comm_t *ref_comms[3]; /* MPI over the same ranks */
} program_t;

static void log_node(void *arg) {
  host_arg_t *h = arg;
  if (h->log->n < CG_RP_MAX_NODES) h->log->ids[h->log->n] = h->id;
  h->log->n++;
}

/* Records the program into `g`: over the device arenas and NCCL
 * communicators, or (use_ref) over the host mirrors and MPI communicators. */
static void record(cg_graph_t *g, program_t *p, int use_ref, host_log_t *log, host_arg_t *args) {
  cg_node_t handles[CG_RP_MAX_NODES * 2];
  for (int i = 0; i < p->rp.n_nodes; i++) {
    const cg_rp_spec_t *s = &p->rp.nodes[i];
    cg_rp_arena_t *a = &p->rp.arenas[s->arena];
    char *mem = use_ref ? a->mem[1] : a->mem[0];
    size_t es = cg_dtype_size(a->dtype), send, recv;
    cg_comm_t *c = use_ref ? p->ref_comms[s->comm] : p->comms[s->comm];
    int rank = 0, size = 1;
    cg_comm_rank(&rank, c);
    cg_comm_size(&size, c);
    cg_rp_buffers(s, rank, &send, &recv);
    cg_status_t st;
    if (s->kind == CG_NODE_HOST_FUNC) {
      args[i] = (host_arg_t){log, i};
      cg_range_t reads[] = {{mem + s->recv_off * es, s->count * es}};
      cg_range_t writes[] = {{mem + s->recv_off * es, s->count * es}, {log, sizeof *log}};
      cg_access_t access = CG_ACCESS_INIT;
      access.everything = 0;
      access.reads = reads;
      access.n_reads = 1;
      access.writes = writes;
      access.n_writes = 2;
      st = cg_host_func(&handles[i], g, log_node, &args[i], s->root ? NULL : &access);
    } else if (s->kind == CG_NODE_SEND) {
      /* a shifted ring: send to rank+shift, receive from rank-shift, in either order */
      int to = (rank + s->shift) % size, from = (rank - s->shift + size) % size;
      int recv_first = (int)(s->recv_off & 1);
      for (int k = 0; k < 2; k++) {
        if ((k == 0) == !recv_first)
          st = cg_send(&handles[i], g, c, mem + send * es, s->count, a->dtype, to);
        else
          st = cg_recv(&handles[i], g, c, mem + recv * es, s->count, a->dtype, from);
        ck_assert_msg(st == CG_SUCCESS, "node %d: %s", i, cg_error_last());
      }
    } else {
      cg_test_call_t call = {s->kind, c, mem + send * es, mem + recv * es, s->count, a->dtype, s->op, s->root};
      st = cg_test_record(&handles[i], g, &call);
    }
    ck_assert_msg(st == CG_SUCCESS, "node %d (%s): %s", i, cg_node_kind_name(s->kind), cg_error_last());
    if (s->depend_on >= 0) ck_assert_cg_ok(cg_depend(g, handles[s->depend_on], handles[i]));
  }
}

/* Fresh data in the image, the mirror and the device; bytes whose first
 * access in record order is a write get the poison pattern instead, so bytes a
 * run fails to write show. */
static void fill(program_t *p, uint64_t salt) {
  int rank = cg_gpu_rank();
  for (int a = 0; a < p->rp.n_arenas; a++) {
    cg_rp_arena_t *ar = &p->rp.arenas[a];
    size_t es = cg_dtype_size(ar->dtype);
    cg_mpi_test_fill(ar->mem[2], 2 * CG_RP_HALF, ar->dtype, CG_SUM, 1, cg_test_seed() ^ salt,
                     (uint64_t)rank * 131 + (uint64_t)a);
    unsigned char *seen = calloc(2 * CG_RP_HALF, 1);
    ck_assert_ptr_nonnull(seen);
    for (int i = 0; i < p->rp.n_nodes; i++) {
      const cg_rp_spec_t *s = &p->rp.nodes[i];
      if (s->arena != a || s->kind == CG_NODE_HOST_FUNC || s->kind == CG_NODE_BARRIER) continue;
      cg_comm_t *c = p->comms[s->comm];
      int r = 0, size = 1;
      cg_comm_rank(&r, c);
      cg_comm_size(&size, c);
      size_t send, recv;
      cg_rp_buffers(s, r, &send, &recv);
      size_t reads = cg_test_send_elems(s->kind, s->count, size, r, s->root);
      size_t writes = s->kind == CG_NODE_SEND ? s->count : cg_test_recv_elems(s->kind, s->count, size, r, s->root);
      for (size_t e = 0; e < reads; e++) seen[send + e] = 1;
      for (size_t e = 0; e < writes; e++) {
        if (!seen[recv + e]) memset(ar->mem[2] + (recv + e) * es, CG_MPI_POISON, es);
        seen[recv + e] = 1;
      }
    }
    free(seen);
    memcpy(ar->mem[1], ar->mem[2], 2 * CG_RP_HALF * es);
    CUDA_OK(cudaMemcpy(ar->mem[0], ar->mem[2], 2 * CG_RP_HALF * es, cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaDeviceSynchronize()); /* on the device before any stream reads it */
}

/* Runs the plan once: run 0 with cg_plan_launch on a stream, run 1 with
 * cg_plan_start and cg_plan_test. */
static cg_status_t run_plan(cg_plan_t *plan, int run) {
  cg_status_t st;
  if (run == 0) {
    st = cg_plan_launch(plan, cg_gpu_stream());
    if (st == CG_SUCCESS && cudaStreamSynchronize(cg_gpu_stream()) != cudaSuccess) st = CG_ERR_BACKEND;
    return st;
  }
  int done = 0;
  st = cg_plan_start(plan);
  while (st == CG_SUCCESS && !done) st = cg_plan_test(&done, plan); /* no assertion per poll: Check logs each */
  return st;
}

/* 1 if the plan's arenas and log match the reference's; else prints where. */
static int compare(program_t *p, const host_log_t *plan_log, const host_log_t *ref_log, int dag, int run) {
  int ok = 1;
  for (int a = 0; a < p->rp.n_arenas; a++) {
    cg_rp_arena_t *ar = &p->rp.arenas[a];
    size_t bytes = 2 * CG_RP_HALF * cg_dtype_size(ar->dtype);
    CUDA_OK(cudaMemcpy(ar->mem[2], ar->mem[0], bytes, cudaMemcpyDeviceToHost));
    if (memcmp(ar->mem[2], ar->mem[1], bytes) == 0) continue;
    size_t at = 0, last = bytes - 1, n_diff = 0;
    while (ar->mem[2][at] == ar->mem[1][at]) at++;
    while (ar->mem[2][last] == ar->mem[1][last]) last--;
    for (size_t b = 0; b < bytes; b++) n_diff += ar->mem[2][b] != ar->mem[1][b];
    fprintf(stderr, "rank %d: dag %d run %d: arena %d (%s) differs in %zu bytes from byte %zu to %zu (plan %02x, "
            "reference %02x)\n", cg_gpu_rank(), dag, run, a, cg_dtype_name(ar->dtype), n_diff, at, last,
            (unsigned char)ar->mem[2][at], (unsigned char)ar->mem[1][at]);
    ok = 0;
  }
  int same_log = plan_log->n == ref_log->n;
  for (int i = 0; same_log && i < plan_log->n && i < CG_RP_MAX_NODES; i++) same_log = plan_log->ids[i] == ref_log->ids[i];
  if (!same_log) {
    fprintf(stderr, "rank %d: dag %d run %d: the plan ran %d host functions, the reference %d, or in another order:",
            cg_gpu_rank(), dag, run, plan_log->n, ref_log->n);
    for (int i = 0; i < plan_log->n && i < CG_RP_MAX_NODES; i++) fprintf(stderr, " %d", plan_log->ids[i]);
    fprintf(stderr, " vs");
    for (int i = 0; i < ref_log->n && i < CG_RP_MAX_NODES; i++) fprintf(stderr, " %d", ref_log->ids[i]);
    fprintf(stderr, "\n");
    ok = 0;
  }
  return ok;
}

START_TEST(nccl_random__device_plans_match_reference) {
  int world = cg_gpu_size();
  MPI_Comm split;
  MPI_Comm_split(MPI_COMM_WORLD, cg_gpu_rank() % 2, cg_gpu_rank(), &split);
  cg_comm_t *comms[3], *ref_comms[3];
  comms[0] = cg_gpu_nccl_comm(MPI_COMM_WORLD);
  comms[1] = cg_gpu_nccl_comm(MPI_COMM_WORLD);
  comms[2] = cg_gpu_nccl_comm(split);
  ck_assert_cg_ok(cg_comm_create(&ref_comms[0], MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&ref_comms[1], MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&ref_comms[2], split, NULL));
  size_t steps = 0, events = 0;
  for (int dag = 0; dag < N_DAGS; dag++) {
    cg_test_reseed(1000 + (uint64_t)dag);
    program_t p;
    memset(&p, 0, sizeof p);
    p.rp.n_comms = 3;
    for (int c = 0; c < 3; c++) {
      p.comms[c] = comms[c];
      p.ref_comms[c] = ref_comms[c];
    }
    cg_rp_generate(&p.rp, world, 0);
    for (int a = 0; a < p.rp.n_arenas; a++) {
      size_t bytes = 2 * CG_RP_HALF * cg_dtype_size(p.rp.arenas[a].dtype);
      p.rp.arenas[a].mem[0] = cg_gpu_alloc(bytes);
      p.rp.arenas[a].mem[1] = malloc(bytes);
      p.rp.arenas[a].mem[2] = malloc(bytes);
      ck_assert(p.rp.arenas[a].mem[1] && p.rp.arenas[a].mem[2]);
    }
    host_log_t plan_log, ref_log;
    host_arg_t plan_args[CG_RP_MAX_NODES * 2], ref_args[CG_RP_MAX_NODES * 2];
    cg_graph_t *g, *ref;
    cg_plan_t *plan = NULL;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    ck_assert_cg_ok(cg_graph_create(&ref, NULL));
    record(g, &p, 0, &plan_log, plan_args);
    record(ref, &p, 1, &ref_log, ref_args);
    cg_status_t st = cg_compile(&plan, g, NULL);
    char what[300];
    snprintf(what, sizeof what, "random DAG %d: cg_compile: %s", dag, st == CG_SUCCESS ? "" : cg_error_last());
    if (!cg_mpi_all(st == CG_SUCCESS) && cg_gpu_rank() == 0) cg_rp_dump(&p.rp);
    ck_assert_all_ranks(st == CG_SUCCESS, what);
    /* a program of host functions only (rare) uses no communicator: a host
     * plan, which runs with cg_plan_run */
    int communicates = 0;
    for (int i = 0; i < p.rp.n_nodes; i++) communicates |= p.rp.nodes[i].kind != CG_NODE_HOST_FUNC;
    cg_plan_stats_t stats;
    ck_assert_cg_ok(cg_plan_stats(&stats, plan));
    ck_assert_int_eq(stats.device, communicates ? cg_gpu_device() : CG_DEVICE_HOST);
    steps += stats.steps;
    events += stats.events;
    int ok = 1;
    /* two runs with fresh data: replays must not depend on leftovers */
    for (int run = 0; run < 2 && ok; run++) {
      fill(&p, (uint64_t)dag * 7919 + (uint64_t)run);
      memset(&plan_log, 0, sizeof plan_log);
      memset(&ref_log, 0, sizeof ref_log);
      st = communicates ? run_plan(plan, run) : cg_plan_run(plan);
      snprintf(what, sizeof what, "random DAG %d run %d: %s", dag, run, st == CG_SUCCESS ? "" : cg_error_last());
      ck_assert_all_ranks(st == CG_SUCCESS, what);
      ck_assert_cg_ok(cg_reference_run(ref));
      ok = cg_mpi_all(compare(&p, &plan_log, &ref_log, dag, run)); /* every rank stops after the same run */
    }
    if (!ok && cg_gpu_rank() == 0) cg_rp_dump(&p.rp);
    snprintf(what, sizeof what, "random DAG %d", dag);
    ck_assert_all_ranks(ok, what);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
    cg_graph_destroy(ref);
    for (int a = 0; a < p.rp.n_arenas; a++) {
      cg_gpu_free(p.rp.arenas[a].mem[0]);
      free(p.rp.arenas[a].mem[1]);
      free(p.rp.arenas[a].mem[2]);
    }
  }
  if (cg_gpu_rank() == 0)
    printf("%d random DAGs, %zu steps, %zu event edges, matched the reference\n", N_DAGS, steps, events);
  for (int c = 0; c < 3; c++) {
    cg_comm_destroy(comms[c]);
    cg_comm_destroy(ref_comms[c]);
  }
  MPI_Comm_free(&split);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nccl_random");
  TCase *tc = cg_gpu_tcase("nccl_random");
  tcase_add_test(tc, nccl_random__device_plans_match_reference);
  suite_add_tcase(s, tc);
  return cg_gpu_test_main(s, "test_nccl_random");
}
