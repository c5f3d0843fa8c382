/* A failed Check assertion in an MPI suite ends the whole job at once.
 *
 * Without fork (MPI must not start in Check's parent), Check fails a test by
 * longjmp-ing back to its runner, which goes on with the next test. When only
 * one rank failed, the others are still inside the failed test waiting on it
 * in a collective, and the ranks fall out of step: the job hangs until the
 * per-test alarm (CG_MPI_TEST_TIMEOUT) and then says only that something hung.
 * So every MPI and GPU test program is linked with
 * -Wl,--wrap=_ck_assert_failed (tests/mpi/CMakeLists.txt, on
 * cg_mpi_test_support), which sends the calls that Check's assertion macros
 * make from our objects here: one line on stderr naming the rank, the place and
 * the assertion, then MPI_Abort, which MPICH turns into the end of every rank.
 *
 * Failures that every rank makes together (ck_assert_all_ranks) go on to Check
 * as before: no rank is left waiting, each rank reports its side, and the rest
 * of the suite still runs. So do failures with one rank, before MPI_Init or
 * after MPI_Finalize, where there is nobody to wait and Check's report is
 * better than an abort. */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_test.h"

/* Check's message buffer is BUFSIZ too: the same truncation as its report. */
enum { MESSAGE_BYTES = BUFSIZ };

/* The linker's names for Check's function (__real_) and ours (__wrap_);
 * prototypes for -Wmissing-prototypes, and so that the compiler holds the
 * format and the no-return promise that check.h makes for the original. */
void __real__ck_assert_failed(const char *file, int line, const char *expr, const char *msg, ...)
    CK_ATTRIBUTE_NORETURN CK_ATTRIBUTE_FORMAT(printf, 4, 5);
void __wrap__ck_assert_failed(const char *file, int line, const char *expr, const char *msg, ...)
    CK_ATTRIBUTE_NORETURN CK_ATTRIBUTE_FORMAT(printf, 4, 5);

/* Set by ck_assert_all_ranks just before an assertion that fails on every
 * rank; read and cleared by the next failure. Only the main thread sets it
 * (ck_assert_all_ranks calls a collective first). */
static int failing_together;

void cg_mpi_failing_together(void) { failing_together = 1; }

/* 1 when another rank can be left waiting on this one. */
static int job_needs_abort(void) {
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size > 1;
}

void __wrap__ck_assert_failed(const char *file, int line, const char *expr, const char *msg, ...) {
  char text[MESSAGE_BYTES] = "";
  if (msg) {
    va_list ap;
    va_start(ap, msg);
    vsnprintf(text, sizeof text, msg, ap);
    va_end(ap);
  }
  int together = failing_together;
  failing_together = 0;
  if (together || !job_needs_abort()) {
    /* Check formats the message itself; hand it the finished text, since a
     * va_list cannot be passed on to a variadic function */
    if (msg) __real__ck_assert_failed(file, line, expr, "%s", text);
    else __real__ck_assert_failed(file, line, expr, NULL);
  }

  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* Check reports the message when there is one, else the expression. Show
   * both, except where the message already restates the expression with its
   * values (ck_assert_int_eq and the other comparison macros). */
  const char *restated = "Assertion '";
  int both = msg && strncmp(text, restated, strlen(restated)) != 0;
  fflush(stdout); /* what the test printed comes before the abort's noise */
  fprintf(stderr, "rank %d of %d: assertion failed at %s:%d: %s%s%s (CG_TEST_SEED=%llu); aborting the job\n", rank,
          size, file, line, msg && !both ? text : expr, both ? ": " : "", both ? text : "",
          (unsigned long long)cg_test_seed());
  fflush(stderr);
  /* MPICH's launcher kills every rank on the abort and can drop what it has
   * not yet forwarded from this rank's stderr, the line above included (about
   * one job in fifty on a loaded machine): give it time to forward the line */
  struct timespec forward_time = {.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000};
  nanosleep(&forward_time, NULL);
  MPI_Abort(MPI_COMM_WORLD, 1);
  _Exit(1); /* MPI_Abort does not return; if it ever did, Check must not go on */
}
