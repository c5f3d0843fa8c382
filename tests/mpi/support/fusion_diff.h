/* Shared by the fusion differential suites (tests/mpi/test_mpi_fusion.c on
 * host buffers with the MPI backend, tests/gpu/test_nccl_fusion.c on device
 * buffers with NCCL): which programs run, the three ways each is compiled, what
 * their statistics must say, comparing memory, and the totals that show fusion
 * happened.
 *
 * Program k (cg_rp_generate_fusible, reseeded from the suite's seed and k)
 * uses layout k % 3 (scattered, contiguous, in place); every other in-place
 * program has allreduces only. Variants: fusion off; fusion on with the
 * backend's bucket size; fusion on with a small bucket size drawn per program
 * (64 B .. 64 KB).
 *
 * How many programs: until CG_FUSION_TEST_SECONDS (default 20) have passed on
 * rank 0, at least CG_FD_MIN_PROGRAMS and at most CG_FD_MAX_PROGRAMS;
 * CG_FUSION_TEST_PROGRAMS=n runs exactly n, CG_FUSION_TEST_FIRST=k starts at
 * program k (a failure repeats with the printed seed and its program number),
 * CG_FUSION_TEST_VERBOSE=1 prints every program, plan and run. A program
 * still running after CG_FD_STUCK_SECONDS (a plan that deadlocks) is named on
 * stderr, with how to rerun it, before the suite's time limit ends the run. */
#ifndef CG_FUSION_DIFF_H
#define CG_FUSION_DIFF_H

#include <stddef.h>

#include "mpi_test.h"
#include "random_program.h"

#define CG_FD_VARIANTS 3
#define CG_FD_MIN_PROGRAMS 12
#define CG_FD_MAX_PROGRAMS 600
#define CG_FD_MAX_BYTES (100 * 1024)
#define CG_FD_STUCK_SECONDS 30

extern const char *const cg_fd_variant_names[CG_FD_VARIANTS];

typedef struct cg_fd_totals {
  size_t programs, nodes, runs, by_layout[CG_RP_N_LAYOUTS];
  size_t buckets[CG_FD_VARIANTS], fused[CG_FD_VARIANTS], copy[CG_FD_VARIANTS];
  size_t layout_buckets[CG_RP_N_LAYOUTS], layout_copy[CG_RP_N_LAYOUTS]; /* fused variants */
  size_t zero_copy_fused; /* programs whose buckets all run in place, with at least one bucket */
  double start;
  long first, fixed;
  int verbose;
} cg_fd_totals_t;

/* Reads the environment (every rank), starts the clock and the watchdog. */
void cg_fd_begin(cg_fd_totals_t *t);
/* Whether to run program `prog`; rank 0 decides for all (collective). */
int cg_fd_next(const cg_fd_totals_t *t, int prog);
/* Program `prog` for `world` ranks, and its small bucket size; the watchdog
 * now watches it. */
void cg_fd_program(cg_rp_program_t *p, size_t *small, int prog, int world, int host_func_adds);
/* Compile options of variant v. */
cg_compile_opts_t cg_fd_opts(int v, size_t small);
/* 1 if variant v's statistics are consistent (fusion off: nothing fused or
 * copied, bucket size 0; default: a bucket size; small: that size; fused
 * variants of a program whose buckets all lie in place: no copies); otherwise
 * prints them on stderr and returns 0. */
int cg_fd_stats_ok(const cg_rp_program_t *p, int prog, int v, size_t small, const cg_plan_stats_t *s);
/* 1 if every arena of `plan` (host copies) equals `ref`; else prints where
 * they differ on stderr. */
int cg_fd_compare(const cg_rp_program_t *p, char *const *plan, char *const *ref, int prog, const char *what);
/* The lowest rank where `mine` is 0, or the world size if none (collective). */
int cg_fd_first_failure(int mine);
void cg_fd_count(cg_fd_totals_t *t, const cg_rp_program_t *p, const cg_plan_stats_t *stats);
/* Prints the totals (rank 0) and asserts on all ranks that fusion happened:
 * some bucket, some program fused without copies, some scattered bucket
 * copied (not when CG_FUSION_TEST_PROGRAMS fixes the programs). Stops the
 * watchdog. */
void cg_fd_finish(const cg_fd_totals_t *t);

#endif
