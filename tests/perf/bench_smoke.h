/* --smoke, the benchmarks' short mode: one round of every mode at small sizes,
 * results still checked. CTest runs every GPU benchmark so (labels gpu and
 * perf-smoke, tests/perf/CMakeLists.txt; scripts/gpu-test), and fails a run
 * that exits non-zero or prints WRONG or FAILED. Host code only: no CUDA. */
#ifndef CG_BENCH_SMOKE_H
#define CG_BENCH_SMOKE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a benchmark returns when it cannot run on a GPU per rank, `why` (the
 * details are printed already). Run by hand: 0, a benchmark is not a test. Under
 * --smoke: 77, ctest's skip, after "SKIPPED <tool>"; or 1 after
 * "FAILED <tool>" where CG_REQUIRE_GPU is set and not 0 (scripts/gpu-test),
 * as the GPU suites do. Only rank 0 prints; every rank returns the same. */
static inline int cg_bench_no_gpu_status(const char *tool, const char *why, int rank, int smoke) {
  if (!smoke) return 0;
  const char *v = getenv("CG_REQUIRE_GPU");
  int required = v && *v && strcmp(v, "0") != 0;
  if (rank == 0) {
    printf("%s %s --smoke: %s%s\n", required ? "FAILED" : "SKIPPED", tool, why,
           required ? " (CG_REQUIRE_GPU is set)" : "");
    fflush(stdout);
  }
  return required ? 1 : 77;
}

#endif
