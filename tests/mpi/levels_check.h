/* Levels of sends and receives agreed over real ranks, and the checks of
 * test_mpi_levels on them (levels_check.c says what each checks). */
#ifndef CG_TEST_LEVELS_CHECK_H
#define CG_TEST_LEVELS_CHECK_H

#include "agreement.h"
#include "lower.h"
#include "mpi_test.h"
#include "plan_internal.h"

#define NONE UINT32_MAX

/* A plan with its local levels, its exchanged ones, the issue order over the
 * exchanged ones, and reach[a * n + b]: a path of dependencies leads from step
 * a to step b. */
typedef struct leveled {
  cg_plan_t *plan;
  uint32_t *local, *level;
  uint8_t *reach;
} leveled_t;

/* The communicators a program may use: two on MPI_COMM_WORLD, and one per
 * half (even and odd world ranks). */
typedef struct comms {
  cg_comm_t *c[3];
  int color[3]; /* which instance: the halves differ */
  MPI_Comm split;
} comms_t;

void comms_make(comms_t *w);
void comms_free(comms_t *w);

/* Levels agreed over the plan's communicators, as cg_compile does for a
 * device plan. */
cg_status_t exchanged_levels(uint32_t *levels, const cg_plan_t *p);
/* Compiles g (opts may be NULL) and fills lv: local and agreed levels, the
 * issue order over the agreed ones, reachability. */
void leveled_make_opts(leveled_t *lv, cg_graph_t *g, const cg_compile_opts_t *opts);
void leveled_make(leveled_t *lv, cg_graph_t *g);
void leveled_free(leveled_t *lv);
uint32_t step_of_node(const cg_plan_t *p, uint32_t node);

/* (d) alone: 1 when the units cannot wait for each other in a cycle across
 * ranks (every rank takes part). */
int check_no_wait_cycle(const comms_t *w, const leveled_t *lv, const char *what);
/* (a) to (d), asserted on every rank; *raised (may be NULL): the exchange
 * raised some level on some rank. Returns 1 when groups were compared (c). */
int check_all(const comms_t *w, const leveled_t *lv, const char *what, int *raised);

#endif
