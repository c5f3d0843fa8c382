/* Statistics every benchmark of tests/perf reports (CPU and GPU ones): one
 * definition, so every table means the same by "median". */
#ifndef CG_BENCH_STATS_H
#define CG_BENCH_STATS_H

/* Median of v[0..n) (sorts v; the mean of the middle two when n is even). */
double cg_bench_median(double *v, int n);

#endif
