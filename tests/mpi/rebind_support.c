/* The all-rank calls of the cg_plan_rebind suite (rebind_support.h), kept
 * apart so that test_mpi_rebind.c and rebind_programs.c share one definition
 * of each. */
#include "rebind_support.h"

#include <stdio.h>
#include <stdlib.h>

cg_comm_t *rb_world(void) {
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  return c;
}

void *rb_xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  return p;
}

cg_plan_t *rb_compile_all(cg_graph_t *g, const char *what) {
  cg_plan_t *plan = NULL;
  cg_status_t st = cg_compile(&plan, g, NULL);
  char text[700];
  snprintf(text, sizeof text, "%s: cg_compile: %s", what, st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, text);
  return plan;
}

void rb_run_all(cg_plan_t *plan, int nonblocking, const char *what) {
  cg_status_t st;
  if (nonblocking) {
    int done = 0;
    st = cg_plan_start(plan);
    while (st == CG_SUCCESS && !done) st = cg_plan_test(&done, plan); /* no assertion per poll */
  } else {
    st = cg_plan_run(plan);
  }
  char text[700];
  snprintf(text, sizeof text, "%s: running the plan: %s", what, st == CG_SUCCESS ? "" : cg_error_last());
  /* said at once: the other ranks may be waiting for this one's messages */
  if (st != CG_SUCCESS) fprintf(stderr, "rank %d: %s\n", cg_mpi_rank(), text);
  ck_assert_all_ranks(st == CG_SUCCESS, text);
}

void rb_rebind_ok(cg_plan_t *plan, const cg_rebind_t *binds, size_t n, const char *what) {
  cg_status_t st = cg_plan_rebind(plan, binds, n);
  char text[700];
  snprintf(text, sizeof text, "%s: cg_plan_rebind returned %s: %s", what, cg_status_string(st),
           st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, text);
}

void rb_rebind_refused(cg_plan_t *plan, const cg_rebind_t *binds, size_t n, const cg_status_t *allowed,
                       const char *what) {
  cg_status_t st = cg_plan_rebind(plan, binds, n);
  int ok = 0;
  for (const cg_status_t *a = allowed; *a != CG_SUCCESS; a++) ok |= st == *a;
  char text[700];
  snprintf(text, sizeof text, "%s: cg_plan_rebind returned %s (%s), expected %s%s%s", what, cg_status_string(st),
           st == CG_SUCCESS ? "" : cg_error_last(), cg_status_string(allowed[0]),
           allowed[1] != CG_SUCCESS ? " or " : "", allowed[1] != CG_SUCCESS ? cg_status_string(allowed[1]) : "");
  ck_assert_all_ranks(ok, text);
}
