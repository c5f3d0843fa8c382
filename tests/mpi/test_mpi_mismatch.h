/* What test_mpi_mismatch.c (the cross-rank check suite) shares with
 * test_mpi_mismatch_comms.c, the tests of its "comms" case: the communicator
 * fixture, recording helpers and the expectations every rank must meet. See
 * test_mpi_mismatch.c for what the suite checks. */
#ifndef CG_TEST_MPI_MISMATCH_H
#define CG_TEST_MPI_MISMATCH_H

#include "mpi_test.h"

/* A test that is one call: its START_TEST ... END_TEST on one line. */
#define ONE_CALL_TEST(name, call) \
  START_TEST(name) { call; }      \
  END_TEST

/* A communicator on MPI_COMM_WORLD. */
cg_comm_t *mm_world(void);
/* The communicator over all ranks the fixture gives every test. */
extern cg_comm_t *mm_comm_w;
/* An empty graph named "iteration". */
cg_graph_t *mm_new_graph(void);
/* Asserts that a recording call succeeded and names its node. */
void mm_named(cg_graph_t *g, cg_status_t recorded, const cg_node_t *node, const char *name);

/* ---- what every rank must see */

typedef struct expect {
  char must[4][300]; /* substrings of the message */
  int n_must;
  int alone;         /* a rank whose version no other rank shares; -1: none */
  int mention[2];    /* ranks the message must name; -1: none */
} expect_t;

#define ALL_ALONE (-2) /* expect_t.alone: every rank has its own version */

/* A compile's result, taken before the test frees its objects: the assertions
 * come after the cleanup, so a failing case leaks nothing into the next. */
typedef struct outcome {
  cg_status_t status;
  int got_plan;
  char msg[1100];
} outcome_t;

/* The message must name node #index 'name' (as "#index 'name'"). */
void mm_expect_node(expect_t *e, int index, const char *name);
/* Asserts on every rank that st is CG_SUCCESS everywhere. */
void mm_expect_ok_all(cg_status_t st, const char *what);
/* Compiles g, keeps the result and destroys the plan (never run). */
outcome_t mm_compile_outcome(cg_graph_t *g);
/* Asserts on every rank that o is CG_ERR_MISMATCH as e describes, with the
 * same message on every rank. */
void mm_expect_mismatch(const outcome_t *o, const expect_t *e, const char *label);

/* Adds the tests of the "comms" case (test_mpi_mismatch_comms.c) to tc. */
void mm_add_comms_tests(TCase *tc);

#endif
