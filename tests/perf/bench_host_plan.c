/* Replaying a host plan against calling MPI directly for the same operations,
 * side by side in one run:
 *
 *   mpiexec -n 4 build/tests/perf/bench_host_plan [max-bytes]
 *
 * For each message size: one float32 allreduce per iteration, and a batch of 8
 * independent allreduces per iteration (the plan may overlap them; direct MPI
 * issues them one after another, or all at once with nonblocking calls and
 * MPI_Waitall). Modes are interleaved round by round and each figure is the
 * median over rounds of the slowest rank's time per iteration, because a shared
 * machine is noisy. "plan/MPI" is the plan's time over the blocking MPI
 * calls'; the target is at most 1.05 from 1 MB up. After timing each
 * size, the plan runs once more into NaN-filled results, which must hold the
 * ranks' sum (integer-valued floats); a wrong sum prints "WRONG" and exits
 * non-zero, as does any error. "run, no fingerprint" is the same plan
 * compiled with cg_compile_opts_t.fingerprint = 0; "print" is what the
 * replay's fingerprint costs (cg_plan_run over it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_stats.h"
#include "commgraph.h"
#include "commgraph/mpi.h"

#define ROUNDS 9
#define BATCH 8

enum { DIRECT_BLOCKING, DIRECT_NONBLOCKING, PLAN_RUN, PLAN_START_WAIT, PLAN_RUN_UNPRINTED, N_MODES };
static const char *mode_names[N_MODES] = {"MPI_Allreduce", "MPI_Iallreduce+Wait", "cg_plan_run", "plan start+wait",
                                          "run, no fingerprint"};

static void check(cg_status_t st, const char *what) {
  if (st != CG_SUCCESS) {
    fprintf(stderr, "%s: %s: %s\n", what, cg_status_string(st), cg_error_last());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* 1 on every rank if recv[0 .. ops) hold the ranks' sum of send[k][i] = rank + i % 7. */
static int plan_sums_right(cg_plan_t *plan, int ops, float **recv, int count, int rank, int size) {
  for (int k = 0; k < ops; k++)
    for (int i = 0; i < count; i++) recv[k][i] = NAN;
  check(cg_plan_run(plan), "cg_plan_run");
  long long wrong = 0;
  for (int k = 0; k < ops; k++)
    for (int i = 0; i < count; i++) {
      float want = (float)(size * (size - 1) / 2 + size * (i % 7));
      if (recv[k][i] != want && wrong++ < 3)
        fprintf(stderr, "rank %d: allreduce %d of %d: element %d is %g, expected %g\n", rank, k, ops, i,
                (double)recv[k][i], (double)want);
    }
  int ok = !wrong, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

/* Runs `iters` iterations of `mode` over `ops` allreduces of `count` floats and
 * returns the slowest rank's seconds per iteration. */
static double time_mode(int mode, int iters, int ops, float **send, float **recv, int count, MPI_Comm comm,
                        cg_plan_t *plan, cg_plan_t *unprinted) {
  MPI_Request requests[BATCH];
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int it = 0; it < iters; it++) {
    switch (mode) {
      case DIRECT_BLOCKING:
        for (int k = 0; k < ops; k++) MPI_Allreduce(send[k], recv[k], count, MPI_FLOAT, MPI_SUM, comm);
        break;
      case DIRECT_NONBLOCKING:
        for (int k = 0; k < ops; k++) MPI_Iallreduce(send[k], recv[k], count, MPI_FLOAT, MPI_SUM, comm, &requests[k]);
        for (int k = 0; k < ops; k++) MPI_Wait(&requests[k], MPI_STATUS_IGNORE);
        break;
      case PLAN_RUN:
        check(cg_plan_run(plan), "cg_plan_run");
        break;
      case PLAN_RUN_UNPRINTED:
        check(cg_plan_run(unprinted), "cg_plan_run");
        break;
      default:
        check(cg_plan_start(plan), "cg_plan_start");
        check(cg_plan_wait(plan), "cg_plan_wait");
        break;
    }
  }
  double mine = (MPI_Wtime() - t0) / iters, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

int main(int argc, char **argv) {
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)64 << 20;
  cg_comm_t *comm;
  check(cg_comm_create(&comm, MPI_COMM_WORLD, NULL), "cg_comm_create");
  MPI_Comm mpi; /* the same duplicate the plan uses, so both go through one communicator */
  check(cg_comm_mpi(&mpi, comm), "cg_comm_mpi");
  if (rank == 0) {
    printf("host plan vs direct MPI, %d ranks, float32 sum allreduce, median of %d rounds (slowest rank)\n", size,
           ROUNDS);
    printf("%10s %4s", "bytes", "ops");
    for (int m = 0; m < N_MODES; m++) printf(" %20s", mode_names[m]);
    printf(" %9s %9s %9s\n", "plan/MPI", "plan/I+W", "print");
  }
  for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
    int count = (int)(bytes / sizeof(float));
    for (int ops = 1; ops <= BATCH; ops *= BATCH) {
      float *send[BATCH], *recv[BATCH];
      cg_graph_t *g;
      cg_plan_t *plan, *unprinted;
      check(cg_graph_create(&g, NULL), "cg_graph_create");
      for (int k = 0; k < ops; k++) {
        send[k] = malloc(bytes);
        recv[k] = malloc(bytes);
        if (!send[k] || !recv[k]) {
          fprintf(stderr, "rank %d: out of memory\n", rank);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int i = 0; i < count; i++) send[k][i] = (float)(rank + i % 7);
        check(cg_allreduce(NULL, g, comm, send[k], recv[k], (size_t)count, CG_FLOAT32, CG_SUM), "cg_allreduce");
      }
      check(cg_compile(&plan, g, NULL), "cg_compile");
      cg_compile_opts_t no_print = CG_COMPILE_OPTS_INIT;
      no_print.fingerprint = 0;
      check(cg_compile(&unprinted, g, &no_print), "cg_compile (fingerprint 0)");
      /* about 0.2 s per mode per round on small sizes, at least 3 iterations */
      int iters = (int)(((size_t)64 << 20) / (bytes * (size_t)ops));
      if (iters > 200) iters = 200;
      if (iters < 3) iters = 3;
      double t[N_MODES][ROUNDS];
      for (int m = 0; m < N_MODES; m++) time_mode(m, 2, ops, send, recv, count, mpi, plan, unprinted); /* warm-up */
      for (int r = 0; r < ROUNDS; r++)
        for (int m = 0; m < N_MODES; m++) t[m][r] = time_mode(m, iters, ops, send, recv, count, mpi, plan, unprinted);
      if (!plan_sums_right(plan, ops, recv, count, rank, size) ||
          !plan_sums_right(unprinted, ops, recv, count, rank, size)) {
        if (rank == 0) fprintf(stderr, "bench_host_plan: WRONG results: the plan of %d allreduces of %zu bytes\n", ops,
                               bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      if (rank == 0) {
        double med[N_MODES];
        printf("%10zu %4d", bytes, ops);
        for (int m = 0; m < N_MODES; m++) {
          med[m] = cg_bench_median(t[m], ROUNDS);
          printf(" %17.1f us", med[m] * 1e6);
        }
        printf(" %9.3f %9.3f %9.3f\n", med[PLAN_RUN] / med[DIRECT_BLOCKING], med[PLAN_RUN] / med[DIRECT_NONBLOCKING],
               med[PLAN_RUN] / med[PLAN_RUN_UNPRINTED]);
        fflush(stdout);
      }
      cg_plan_destroy(plan);
      cg_plan_destroy(unprinted);
      cg_graph_destroy(g);
      for (int k = 0; k < ops; k++) {
        free(send[k]);
        free(recv[k]);
      }
    }
  }
  cg_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
