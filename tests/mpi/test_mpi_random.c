/* Differential test: random DAGs (mixed kinds, data types, communicators,
 * overlapping buffers, in-place forms, host functions, explicit edges) run as a
 * compiled plan and by the reference executor must leave byte-identical
 * memory. Every rank builds the same program from the shared seed; data is
 * fresh each run and differs per rank.
 *
 * The programs come from tests/mpi/support/random_program.c, shared with the
 * GPU suite; here host functions add 1 to their range of an arena.
 *
 * Lowering is deterministic: every tenth program is recorded and compiled a
 * second time (another graph, the same buffers) and both plans must dump the
 * same text; the collectives (communicator, position, group, shape) of ranks
 * that share all their communicators (one parity: the third is split by
 * parity) must dump alike; and the digest of those dumps, printed at the end,
 * depends only on the programs, which depend only on CG_TEST_SEED, so two runs
 * with one seed print the same digests
 * (ctest mpi.lowering_deterministic compares two runs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"
#include "random_program.h"

/* 300 per CI run (n2); 150 with more ranks, which CI runs on 2 cores, where
 * every collective of a compile waits for the scheduler */
#define N_DAGS (cg_mpi_size() > 2 ? 150 : 300)

typedef struct host_arg {
  char *mem; /* arena copy this node increments */
  size_t off, count;
  cg_dtype_t dtype;
} host_arg_t;

typedef struct program {
  cg_rp_program_t rp; /* arena copies: mem[0] the plan's, mem[1] the reference's */
  cg_comm_t *comms[3];
} program_t;

static void increment(void *arg) {
  host_arg_t *h = arg;
  for (size_t i = 0; i < h->count; i++)
    cg_ref_store(h->mem, h->off + i, h->dtype, cg_ref_load(h->mem, h->off + i, h->dtype) + 1);
}

/* Records the program into `g` over the arenas' plan or reference copies. */
static void record(cg_graph_t *g, program_t *p, int use_ref, host_arg_t *args) {
  cg_node_t handles[CG_RP_MAX_NODES * 2];
  for (int i = 0; i < p->rp.n_nodes; i++) {
    const cg_rp_spec_t *s = &p->rp.nodes[i];
    cg_rp_arena_t *a = &p->rp.arenas[s->arena];
    char *mem = use_ref ? a->mem[1] : a->mem[0];
    size_t es = cg_dtype_size(a->dtype), send, recv;
    cg_comm_t *c = p->comms[s->comm];
    int rank = 0, size = 1;
    cg_comm_rank(&rank, c);
    cg_comm_size(&size, c);
    cg_rp_buffers(s, rank, &send, &recv);
    cg_status_t st;
    if (s->kind == CG_NODE_HOST_FUNC) {
      args[i] = (host_arg_t){mem, s->recv_off, s->count, a->dtype};
      cg_range_t range = {mem + s->recv_off * es, s->count * es};
      cg_access_t access = CG_ACCESS_INIT;
      access.everything = 0;
      access.reads = access.writes = &range;
      access.n_reads = access.n_writes = 1;
      st = cg_host_func(&handles[i], g, increment, &args[i], s->root ? NULL : &access);
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

/* Fresh data in both copies; bytes whose first access in record order is a
 * write get the poison pattern instead, so bytes a run fails to write show. */
static void fill(program_t *p, uint64_t salt) {
  int rank = cg_mpi_rank();
  for (int a = 0; a < p->rp.n_arenas; a++) {
    cg_rp_arena_t *ar = &p->rp.arenas[a];
    size_t es = cg_dtype_size(ar->dtype);
    cg_mpi_test_fill(ar->mem[0], 2 * CG_RP_HALF, ar->dtype, CG_SUM, 1, cg_test_seed() ^ salt,
                     (uint64_t)rank * 131 + (uint64_t)a);
    unsigned char *seen = calloc(2 * CG_RP_HALF, 1);
    for (int i = 0; i < p->rp.n_nodes; i++) {
      const cg_rp_spec_t *s = &p->rp.nodes[i];
      if (s->arena != a || s->kind == CG_NODE_HOST_FUNC || s->kind == CG_NODE_BARRIER) {
        if (s->arena == a && s->kind == CG_NODE_HOST_FUNC)
          for (size_t e = 0; e < s->count; e++) seen[s->recv_off + e] = 1;
        continue;
      }
      cg_comm_t *c = p->comms[s->comm];
      int r = 0, size = 1;
      cg_comm_rank(&r, c);
      cg_comm_size(&size, c);
      size_t send, recv;
      cg_rp_buffers(s, r, &send, &recv);
      cg_node_kind_t k = s->kind == CG_NODE_SEND ? CG_NODE_SEND : s->kind;
      size_t reads = cg_test_send_elems(k, s->count, size, r, s->root);
      size_t writes = s->kind == CG_NODE_SEND ? s->count : cg_test_recv_elems(k, s->count, size, r, s->root);
      for (size_t e = 0; e < reads; e++) seen[send + e] = 1;
      for (size_t e = 0; e < writes; e++) {
        if (!seen[recv + e]) memset(ar->mem[0] + (recv + e) * es, CG_MPI_POISON, es);
        seen[recv + e] = 1;
      }
    }
    free(seen);
    memcpy(ar->mem[1], ar->mem[0], 2 * CG_RP_HALF * es);
  }
}

static char *dump_text(const cg_plan_t *plan) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  ck_assert_cg_ok(cg_plan_dump(plan, f));
  fclose(f);
  return text;
}

static uint64_t fnv1a(uint64_t h, const char *text, size_t len) {
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)text[i]) * 0x100000001B3ull;
  return h;
}

/* The part of a dump the ranks of a communicator share: "comm C #K group G <shape>" of each
 * collective, communicator by communicator (sends and receives name peers;
 * step numbers, dependencies and so the interleaving of communicators follow
 * hazards that depend on the rank, a broadcast's root reading where the
 * others write: seed 1795855505467624889, program 130, put a bucket's
 * broadcast before or after another communicator's alltoall by rank). */
static uint64_t collectives_digest(const char *dump) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int c = 0; c < 8; c++) {
    char key[32];
    snprintf(key, sizeof key, " comm %d #", c);
    for (const char *line = dump; line && *line;) {
      const char *end = strchr(line, '\n');
      size_t len = end ? (size_t)(end - line) : strlen(line);
      const char *comm = strstr(line, key);
      if (comm && comm < line + len && !strstr(line, " send ") && !strstr(line, " recv ")) {
        const char *stop = strstr(comm, " node ");
        const char *bucket = strstr(comm, " bucket ");
        if (bucket && (!stop || bucket < stop)) stop = bucket;
        if (!stop || stop > line + len) stop = line + len;
        h = fnv1a(h, comm, (size_t)(stop - comm));
        h = fnv1a(h, "\n", 1);
      }
      line = end ? end + 1 : NULL;
    }
  }
  return h;
}

START_TEST(random__plans_match_reference) {
  int world = cg_mpi_size();
  cg_comm_t *comms[3] = {NULL, NULL, NULL};
  MPI_Comm split;
  ck_assert_cg_ok(cg_comm_create(&comms[0], MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&comms[1], MPI_COMM_WORLD, NULL));
  MPI_Comm_split(MPI_COMM_WORLD, cg_mpi_rank() % 2, cg_mpi_rank(), &split);
  ck_assert_cg_ok(cg_comm_create(&comms[2], split, NULL));
  size_t steps = 0;
  uint64_t digest = 0xCBF29CE484222325ull;
  const int n_dags = N_DAGS;
  for (int dag = 0; dag < n_dags; dag++) {
    cg_test_reseed(1000 + (uint64_t)dag);
    program_t p;
    memset(&p, 0, sizeof p);
    p.rp.n_comms = 3;
    for (int c = 0; c < 3; c++) p.comms[c] = comms[c];
    cg_rp_generate(&p.rp, world, 1);
    for (int a = 0; a < p.rp.n_arenas; a++) {
      size_t bytes = 2 * CG_RP_HALF * cg_dtype_size(p.rp.arenas[a].dtype);
      p.rp.arenas[a].mem[0] = malloc(bytes);
      p.rp.arenas[a].mem[1] = malloc(bytes);
    }
    host_arg_t plan_args[CG_RP_MAX_NODES * 2], ref_args[CG_RP_MAX_NODES * 2];
    cg_graph_t *g, *ref;
    cg_plan_t *plan;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    ck_assert_cg_ok(cg_graph_create(&ref, NULL));
    record(g, &p, 0, plan_args);
    record(ref, &p, 1, ref_args);
    ck_assert_cg_ok(cg_compile(&plan, g, NULL));
    /* every tenth program: compiling costs collectives, which 4 ranks on 2
     * cores pay dearly */
    if (dag % 10 == 0) {
      cg_graph_t *again;
      cg_plan_t *plan2;
      host_arg_t again_args[CG_RP_MAX_NODES * 2];
      ck_assert_cg_ok(cg_graph_create(&again, NULL));
      record(again, &p, 0, again_args);
      ck_assert_cg_ok(cg_compile(&plan2, again, NULL));
      char *first = dump_text(plan), *second = dump_text(plan2);
      ck_assert_msg(strcmp(first, second) == 0, "rank %d: random DAG %d: compiling it again dumps another plan:\n%s\n--- "
                    "against ---\n%s", cg_mpi_rank(), dag, first, second);
      digest = fnv1a(digest, first, strlen(first));
      uint64_t mine = collectives_digest(first), theirs[64];
      int world_size = cg_mpi_size();
      ck_assert_int_le(world_size, 64);
      MPI_Allgather(&mine, 1, MPI_UINT64_T, theirs, 1, MPI_UINT64_T, MPI_COMM_WORLD);
      /* ranks of one parity share all three communicators (the third is split
       * by parity); ranks of the other parity order another communicator */
      int alike = 1;
      for (int r = 0; r < world_size; r++) alike &= theirs[r] == theirs[r % 2];
      if (!alike) fprintf(stderr, "rank %d: random DAG %d: my collectives dump as\n%s", cg_mpi_rank(), dag, first);
      ck_assert_msg(alike, "random DAG %d: the ranks' plans order their collectives differently", dag);
      free(first);
      free(second);
      cg_plan_destroy(plan2);
      cg_graph_destroy(again);
    }
    cg_plan_stats_t stats;
    ck_assert_cg_ok(cg_plan_stats(&stats, plan));
    steps += stats.steps;
    int ok = 1;
    /* two runs with fresh data: replays must not depend on leftovers */
    for (int run = 0; run < 2 && ok; run++) {
      fill(&p, (uint64_t)dag * 7919 + (uint64_t)run);
      if (run == 0) {
        ck_assert_cg_ok(cg_plan_run(plan));
      } else {
        int done = 0;
        cg_status_t st = cg_plan_start(plan);
        while (st == CG_SUCCESS && !done) st = cg_plan_test(&done, plan); /* no assertion per poll: Check logs each */
        ck_assert_cg_ok(st);
      }
      ck_assert_cg_ok(cg_reference_run(ref));
      for (int a = 0; a < p.rp.n_arenas; a++) {
        size_t bytes = 2 * CG_RP_HALF * cg_dtype_size(p.rp.arenas[a].dtype);
        if (memcmp(p.rp.arenas[a].mem[0], p.rp.arenas[a].mem[1], bytes) != 0) {
          size_t at = 0;
          while (p.rp.arenas[a].mem[0][at] == p.rp.arenas[a].mem[1][at]) at++;
          size_t last = bytes - 1, n_diff = 0;
          while (p.rp.arenas[a].mem[0][last] == p.rp.arenas[a].mem[1][last]) last--;
          for (size_t b = 0; b < bytes; b++) n_diff += p.rp.arenas[a].mem[0][b] != p.rp.arenas[a].mem[1][b];
          fprintf(stderr, "rank %d: dag %d run %d: arena %d (%s) differs in %zu bytes from byte %zu to %zu (plan %02x, "
                  "reference %02x)\n", cg_mpi_rank(), dag, run, a, cg_dtype_name(p.rp.arenas[a].dtype), n_diff, at, last,
                  (unsigned char)p.rp.arenas[a].mem[0][at], (unsigned char)p.rp.arenas[a].mem[1][at]);
          ok = 0;
        }
      }
      ok = cg_mpi_all(ok); /* every rank stops after the same run */
    }
    if (!ok && cg_mpi_rank() == 0) cg_rp_dump(&p.rp);
    char what[64];
    snprintf(what, sizeof what, "random DAG %d", dag);
    ck_assert_all_ranks(ok, what);
    cg_plan_destroy(plan);
    cg_graph_destroy(g);
    cg_graph_destroy(ref);
    for (int a = 0; a < p.rp.n_arenas; a++) {
      free(p.rp.arenas[a].mem[0]);
      free(p.rp.arenas[a].mem[1]);
    }
  }
  if (cg_mpi_rank() == 0) printf("%d random DAGs, %zu steps, matched the reference\n", n_dags, steps);
  /* one line per rank, in rank order: what a second run must print again */
  uint64_t digests[64];
  MPI_Gather(&digest, 1, MPI_UINT64_T, digests, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  for (int r = 0; cg_mpi_rank() == 0 && r < cg_mpi_size(); r++)
    printf("lowering digest rank %d: %016llx\n", r, (unsigned long long)digests[r]);
  for (int c = 0; c < 3; c++) cg_comm_destroy(comms[c]);
  MPI_Comm_free(&split);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_random");
  TCase *tc = cg_mpi_tcase("random");
  tcase_add_test(tc, random__plans_match_reference);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
