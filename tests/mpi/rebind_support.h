/* The calls every part of the cg_plan_rebind suite makes, each asserted on
 * every rank at once (a failure on one rank would leave the others waiting on
 * its messages): shared by test_mpi_rebind.c and rebind_programs.c so that the
 * tests and the program machinery fail the same way. */
#ifndef CG_TEST_REBIND_SUPPORT_H
#define CG_TEST_REBIND_SUPPORT_H

#include <stddef.h>

#include "mpi_test.h"

/* A communicator on MPI_COMM_WORLD. */
cg_comm_t *rb_world(void);
/* malloc that asserts (at least one byte). */
void *rb_xmalloc(size_t bytes);
/* cg_compile, succeeding on every rank; `what` names the graph. */
cg_plan_t *rb_compile_all(cg_graph_t *g, const char *what);
/* Runs the plan once, blocking or with start and test. */
void rb_run_all(cg_plan_t *plan, int nonblocking, const char *what);
/* cg_plan_rebind, succeeding on every rank. */
void rb_rebind_ok(cg_plan_t *plan, const cg_rebind_t *binds, size_t n, const char *what);
/* A refusal with one of the statuses in `allowed` (CG_SUCCESS ends the list)
 * on every rank. */
void rb_rebind_refused(cg_plan_t *plan, const cg_rebind_t *binds, size_t n, const cg_status_t *allowed,
                       const char *what);

#endif
