/* What agreeing the levels of sends and receives costs at compile time
 * (sched/compile/p2p_levels.c), side by side in one run:
 *
 *   mpiexec -n 2 build/tests/perf/bench_levels [max-collectives]
 *
 * A plan of N in-place int32 allreduces on one communicator, fusion off, with
 * a ring exchange (send right, receive left) after every 50th: none, on a
 * second communicator, or on the allreduces' own. "local" is the levels a host
 * plan takes (dependencies only, no exchange); "agreed" the levels cg_compile
 * gives a device plan (depths over all ranks, settled over the communicators'
 * control channels in 17 passes), measured here on host communicators, which
 * have the same channel. Each figure is the median of 5 rounds of the slowest
 * rank; "agreed/local" their ratio; the bound is the local time (the exchange
 * can only add to it). Check: both return CG_SUCCESS, and no agreed level is
 * below the local one (levels only rise); else "WRONG" and exit 1. CPU only. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "agreement.h"
#include "bench_stats.h"
#include "commgraph.h"
#include "commgraph/mpi.h"
#include "lower.h"
#include "plan_internal.h"

#define ROUNDS 5
#define LEN 4

enum { RING_NONE, RING_OTHER_COMM, RING_SAME_COMM, N_RINGS };
static const char *ring_names[N_RINGS] = {"no sends", "ring on another comm", "ring on the same comm"};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void fail(const char *what, cg_status_t st) {
  fprintf(stderr, "bench_levels: %s: %s: %s\n", what, cg_status_string(st), cg_error_last());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Times local and agreed levels of one plan; returns 0 when a check failed. */
static int measure(double *local_s, double *agreed_s, uint32_t *steps, int n_ops, int ring, cg_comm_t *const *comms,
                   int32_t (*buf)[LEN]) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  cg_graph_t *g = NULL;
  cg_status_t st = cg_graph_create(&g, NULL);
  for (int i = 0; i < n_ops && st == CG_SUCCESS; i++) {
    st = cg_allreduce(NULL, g, comms[0], buf[i], buf[i], LEN, CG_INT32, CG_SUM);
    if (ring == RING_NONE || i % 50 != 0 || st != CG_SUCCESS) continue;
    cg_comm_t *c = comms[ring == RING_SAME_COMM ? 0 : 1];
    st = cg_send(NULL, g, c, buf[i], LEN, CG_INT32, (rank + 1) % size);
    if (st == CG_SUCCESS) st = cg_recv(NULL, g, c, buf[i + 1], LEN, CG_INT32, (rank + size - 1) % size);
  }
  if (st != CG_SUCCESS) fail("recording", st);
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.fusion = 0;
  cg_plan_t *p = NULL;
  if ((st = cg_compile(&p, g, &opts)) != CG_SUCCESS) fail("cg_compile", st);
  uint32_t *local = malloc((p->n_steps + 1) * sizeof *local), *agreed = malloc((p->n_steps + 1) * sizeof *agreed);
  if (!local || !agreed) fail("allocating levels", CG_ERR_NO_MEMORY);
  double t[2][ROUNDS];
  int ok = 1;
  for (int r = 0; r < ROUNDS; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    if ((st = cg_p2p_levels(local, p, NULL, CG_SUCCESS, "bench_levels")) != CG_SUCCESS) fail("local levels", st);
    double t1 = now_s();
    cg_participants_t pt;
    if ((st = cg_participants_of_plan(&pt, p, "bench_levels")) != CG_SUCCESS) fail("participants", st);
    MPI_Barrier(MPI_COMM_WORLD);
    double t2 = now_s();
    st = cg_p2p_levels(agreed, p, &pt, CG_SUCCESS, "bench_levels");
    double t3 = now_s();
    cg_participants_free(&pt);
    if (st != CG_SUCCESS) fail("agreed levels", st);
    t[0][r] = t1 - t0;
    t[1][r] = t3 - t2;
    for (uint32_t s = 0; s < p->n_steps; s++) ok &= agreed[s] >= local[s];
  }
  for (int m = 0; m < 2; m++) {
    MPI_Allreduce(MPI_IN_PLACE, t[m], ROUNDS, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  *steps = p->n_steps;
  *local_s = cg_bench_median(t[0], ROUNDS);
  *agreed_s = cg_bench_median(t[1], ROUNDS);
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  free(local);
  free(agreed);
  cg_plan_destroy(p);
  cg_graph_destroy(g);
  return ok;
}

int main(int argc, char **argv) {
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int max_ops = argc > 1 ? atoi(argv[1]) : 3000;
  int32_t(*buf)[LEN] = calloc((size_t)max_ops + 1, sizeof *buf);
  cg_comm_t *comms[2] = {NULL, NULL};
  cg_status_t st = buf ? CG_SUCCESS : CG_ERR_NO_MEMORY;
  for (int c = 0; c < 2 && st == CG_SUCCESS; c++) st = cg_comm_create(&comms[c], MPI_COMM_WORLD, NULL);
  if (st != CG_SUCCESS) fail("setting up", st);
  if (rank == 0)
    printf("# bench_levels: %d ranks, CPU only; median of %d rounds, slowest rank\n"
           "%-33s %6s %12s %12s %13s\n",
           size, ROUNDS, "plan", "steps", "local (ms)", "agreed (ms)", "agreed/local");
  int all_ok = 1;
  static const int sizes[] = {100, 300, 1000, 3000, 10000};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && sizes[k] <= max_ops; k++)
    for (int ring = 0; ring < N_RINGS; ring++) {
      int n = sizes[k];
      double local_s, agreed_s;
      uint32_t steps;
      int ok = measure(&local_s, &agreed_s, &steps, n, ring, comms, buf);
      all_ok &= ok;
      if (rank == 0)
        printf("%5d colls, %-21s %6u %12.3f %12.3f %12.1fx%s\n", n, ring_names[ring], steps, 1e3 * local_s, 1e3 * agreed_s,
               local_s > 0 ? agreed_s / local_s : 0.0, ok ? "" : "  WRONG");
    }
  for (int c = 0; c < 2; c++) cg_comm_destroy(comms[c]);
  free(buf);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
