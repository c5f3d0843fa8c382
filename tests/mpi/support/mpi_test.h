/* Shared by the MPI suites: MPI start-up around a Check runner (no fork: MPI
 * must not start in Check's parent), one seed for all ranks, a per-test time
 * limit that names the test, agreement across ranks before asserting, an end
 * to the whole job when an assertion fails on one rank (mpi_abort_on_failure.c),
 * test data and the reference executor. */
#ifndef CG_MPI_TEST_H
#define CG_MPI_TEST_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "commgraph.h"
#include "commgraph/mpi.h"
#include "test_support.h"

/* Seconds a test may take before the run aborts with its name. */
#define CG_MPI_TEST_TIMEOUT 120

/* Initializes MPI (MPI_THREAD_MULTIPLE requested), makes every rank use rank
 * 0's seed, runs `suite` without forking with a time limit on each test,
 * finalizes MPI; returns the process exit status (failure if any rank failed). */
int cg_mpi_test_main(Suite *suite);
/* Adds a test case with the time limit; use instead of tcase_create. */
TCase *cg_mpi_tcase(const char *name);
/* The same with another limit (one limit per process: the last one set). */
TCase *cg_mpi_tcase_limit(const char *name, int seconds);
/* For suites with a main of their own (tests/gpu): the rank and size that
 * cg_mpi_rank, cg_mpi_size and the time-limit message report. */
void cg_mpi_test_adopt(int rank, int size);

int cg_mpi_rank(void);
int cg_mpi_size(void);

/* 1 on every rank if `ok` is nonzero on every rank of MPI_COMM_WORLD. */
int cg_mpi_all(int ok);
/* Asserts on every rank that `ok` holds on every rank; the message names the
 * ranks where it did not. Such a failure fails the test on every rank and the
 * suite goes on; any other failed assertion with more than one rank ends the
 * job (support/mpi_abort_on_failure.c). */
#define ck_assert_all_ranks(ok, what)                                                           \
  do {                                                                                          \
    int cg_mpi_ok_ = (ok);                                                                      \
    int cg_mpi_all_ok_ = cg_mpi_all(cg_mpi_ok_);                                                \
    if (!cg_mpi_all_ok_) cg_mpi_failing_together();                                             \
    ck_assert_msg(cg_mpi_all_ok_, "%s: failed on %s (seed %llu)", (what),                       \
                  cg_mpi_ok_ ? "another rank" : "this rank", (unsigned long long)cg_test_seed()); \
  } while (0)
/* Marks the next failed assertion as one that every rank makes at the same
 * point: Check reports it as usual instead of the job being aborted. */
void cg_mpi_failing_together(void);

/* A random integer-valued element of `dtype` small enough that sums and
 * products over `ranks` ranks stay exact. */
void cg_mpi_test_value(void *dst, cg_dtype_t dtype, int64_t value);
int64_t cg_mpi_test_small_value(cg_dtype_t dtype, cg_redop_t op, int ranks, uint64_t random);
/* Fills n elements with values drawn from a stream seeded by (seed, salt). */
void cg_mpi_test_fill(void *buf, size_t n, cg_dtype_t dtype, cg_redop_t op, int ranks, uint64_t seed,
                      uint64_t salt);
/* Poison byte written into outputs before a run. */
#define CG_MPI_POISON 0xA5

/* Runs `graph` node by node in record order with plain MPI on each
 * communicator's MPI_Comm: collectives move bytes (allgather, bcast, ...) and
 * reduce them here, with conversions written independently of the library. */
cg_status_t cg_reference_run(const cg_graph_t *graph);

/* Independent float16/bfloat16 conversions (round to nearest even). */
double cg_ref_half_to_double(uint16_t h);
uint16_t cg_ref_double_to_half(double v);
double cg_ref_bf16_to_double(uint16_t b);
uint16_t cg_ref_double_to_bf16(double v);
/* Element i of buf as a double / stored from a double (rounded to the type;
 * integers truncate toward zero). */
double cg_ref_load(const void *buf, size_t i, cg_dtype_t dtype);
void cg_ref_store(void *buf, size_t i, cg_dtype_t dtype, double v);
/* dst = reduction over `ranks` inputs laid out one after another (`count`
 * elements each), in rank order, as the library defines it (avg: sum / ranks). */
void cg_ref_reduce(void *dst, const void *inputs, int ranks, size_t count, cg_dtype_t dtype, cg_redop_t op);

#endif
