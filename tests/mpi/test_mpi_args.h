/* What the rows of the argument-safety suite share (test_mpi_args.c and the
 * files of its rows): the fixture every row's bad calls are aimed at, the
 * expectations (EXPECT: the documented status, an error detail naming the
 * function, nothing changed) and values no enumeration has. See
 * test_mpi_args.c for what the suite checks. */
#ifndef CG_TEST_MPI_ARGS_H
#define CG_TEST_MPI_ARGS_H

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "error.h"
#include "mpi_test.h"
#include "plan_internal.h"
#if CG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "commgraph/cuda.h"
#endif
#if CG_HAVE_NCCL
#include "commgraph/nccl.h"
#endif

/* ---- the fixture: objects every row's bad calls are aimed at */

#define N_BUF 24 /* int32 elements of user memory the fixture's graph touches */
#define N_PLAN_NODES 5

typedef struct fx {
  const char *row;
  int rank, size;
  cg_comm_t *world, *self, *off; /* MPI_COMM_WORLD, MPI_COMM_SELF, offline (rank, size) */
  cg_graph_t *g;                 /* allreduce, send, recv, host function, barrier on world */
  cg_graph_t *other;             /* another live graph with one node */
  cg_graph_t *offg;              /* an allreduce on the offline communicator */
  cg_node_t n_sum, n_send, n_recv, n_host, n_barrier;
  cg_node_t foreign, dead;       /* a node of `other`; a node of a graph already destroyed */
  int32_t buf[N_BUF];
  cg_plan_t *plan;               /* compiled from g */
  cg_plan_t *offplan;            /* compiled from offg: compiles, cannot run */
  cg_arena_t *arena;             /* host, 4096 bytes, 100 bytes handed out */
  int has_gpu;
  /* results */
  int ok, checks;
  char msg[6000];
  struct snap *base;
} fx_t;

/* A line for the log, rank 0 only. */
void note(fx_t *fx, const char *fmt, ...) CG_PRINTF_LIKE(2, 3);
/* A soft assertion: the row goes on (so every rank reaches the collective
 * calls at its end) and the first failures are reported together. */
void soft_fail(fx_t *fx, int line, const char *fmt, ...) CG_PRINTF_LIKE(3, 4);

#define CHECK(fx, cond, ...)                          \
  do {                                                \
    (fx)->checks++;                                   \
    if (!(cond)) soft_fail((fx), __LINE__, __VA_ARGS__);   \
  } while (0)

/* A text the object writes (DOT, dump), malloc'ed. */
char *text_of(cg_status_t (*write)(const void *, FILE *), const void *obj);
cg_status_t write_graph_dot(const void *g, FILE *f);
cg_status_t write_plan_dot(const void *p, FILE *f);
cg_status_t write_plan_dump(const void *p, FILE *f);

/* ---- snapshots: what every call must leave as it was */

typedef struct comm_snap {
  int rank, size, device, refs;
  const char *backend;
} comm_snap_t;

typedef struct snap {
  cg_graph_stats_t gs, os, offs;
  char *gdot, *odot, *offdot;
  cg_plan_stats_t ps, offps;
  char *pdump, *pdot, *offdump;
  const void *psend[N_PLAN_NODES];
  void *precv[N_PLAN_NODES];
  size_t a_used, a_cap;
  comm_snap_t comms[3];
  int32_t buf[N_BUF];
} snap_t;

void snap_take(snap_t *s, const fx_t *fx);
void snap_free(snap_t *s);

/* The fixture's state compared with its snapshot after a call (`what`). */
void check_unchanged(fx_t *fx, int line, const char *what);
/* Empties the thread's error detail, so (b) sees this call's. */
void clear_error(void);
/* Records a call that must have failed with one of `allowed` (ending with
 * CG_SUCCESS), naming `fn`, and changed nothing. */
void expect_failed(fx_t *fx, int line, const char *call, cg_status_t st, const char *fn,
                   const cg_status_t *allowed);

/* call must fail with one of the listed statuses, name fn, change nothing. */
#define EXPECT(fx, fn, call, ...)                                                                       \
  do {                                                                                                  \
    clear_error();                                                                                      \
    cg_status_t expect_st_ = (call);                                                                    \
    expect_failed((fx), __LINE__, #call, expect_st_, (fn), (const cg_status_t[]){__VA_ARGS__, CG_SUCCESS}); \
  } while (0)

/* call must succeed and change nothing of the fixture (no-ops on bad-looking
 * but valid input). */
#define EXPECT_NOOP(fx, call)                                                                            \
  do {                                                                                                  \
    cg_status_t expect_st_ = (call);                                                                    \
    CHECK((fx), expect_st_ == CG_SUCCESS, "%s returned %s (%s), expected success", #call,                \
          cg_status_string(expect_st_), cg_error_last());                                              \
    check_unchanged((fx), __LINE__, #call);                                                             \
  } while (0)

/* a void call: must return, harmlessly */
#define EXPECT_VOID(fx, call)                \
  do {                                       \
    call;                                    \
    check_unchanged((fx), __LINE__, #call);  \
  } while (0)

/* The fixture, collective over MPI_COMM_WORLD: opened before a row, its plan
 * run and checked, closed after. */
void fx_open(fx_t *fx, const char *row);
void fx_verify_run(fx_t *fx);
void fx_close(fx_t *fx);
/* A stream whose writes fail (CG_ERR_IO). */
FILE *read_only_stream(void);
/* Node handles that are not nodes of fx->g (test_mpi_args_graph.c). */
void bad_nodes(const fx_t *fx, cg_node_t out[5]);
#if CG_HAVE_CUDA
/* An mpi-staged communicator on this rank's GPU (collective); NULL, with a
 * note, where some rank cannot have one (test_mpi_args_graph.c). */
cg_comm_t *device_comm_open(fx_t *fx, const char *what);
#endif

/* Values no enumeration has. */
#define BAD_DTYPE_1 ((cg_dtype_t)CG_DTYPE_COUNT)
#define BAD_DTYPE_2 ((cg_dtype_t)-1)
#define BAD_DTYPE_3 ((cg_dtype_t)INT_MAX)
#define BAD_OP_1 ((cg_redop_t)CG_REDOP_COUNT)
#define BAD_OP_2 ((cg_redop_t)-1)
/* An address a few bytes below the top of the address space: a buffer of
 * more than a few bytes there would run past the end. Never dereferenced. */
#define NEAR_END ((void *)(UINTPTR_MAX - 3))

#define IA CG_ERR_INVALID_ARGUMENT

/* The rows of test_mpi_args_graph.c (recording) and test_mpi_args_comm.c
 * (communicators, names and status). */
void row_broadcast(fx_t *fx);
void row_reduce(fx_t *fx);
void row_allgather(fx_t *fx);
void row_reduce_scatter(fx_t *fx);
void row_alltoall(fx_t *fx);
void row_gather(fx_t *fx);
void row_scatter(fx_t *fx);
void row_send(fx_t *fx);
void row_recv(fx_t *fx);
void row_allreduce(fx_t *fx);
void row_barrier(fx_t *fx);
void row_host_func(fx_t *fx);
void row_depend(fx_t *fx);
void row_node_name(fx_t *fx);
void row_graph_create(fx_t *fx);
void row_graph_destroy(fx_t *fx);
void row_graph_stats(fx_t *fx);
void row_graph_write_dot(fx_t *fx);
void row_comm_create_offline(fx_t *fx);
void row_comm_create(fx_t *fx);
void row_comm_destroy(fx_t *fx);
void row_comm_rank(fx_t *fx);
void row_comm_size(fx_t *fx);
void row_comm_backend_name(fx_t *fx);
void row_comm_device(fx_t *fx);
void row_comm_mpi(fx_t *fx);
void row_mpi_init(fx_t *fx);
void row_mpi_finalize(fx_t *fx);
void row_mpi_before_finalize(fx_t *fx);
void row_comm_create_fortran(fx_t *fx);
void row_mpi_world_fortran(fx_t *fx);
void row_mpi_library_version(fx_t *fx);
void row_info_write(fx_t *fx);
void row_info_write_fortran(fx_t *fx);
void row_comm_from_nccl(fx_t *fx);
void row_comm_nccl(fx_t *fx);
void row_nccl_arena_create(fx_t *fx);
void row_nccl_arena_symmetric_max(fx_t *fx);
void row_dtype_size(fx_t *fx);
void row_dtype_name(fx_t *fx);
void row_redop_name(fx_t *fx);
void row_node_kind_name(fx_t *fx);
void row_backend_kind_name(fx_t *fx);
void row_status_string(fx_t *fx);
void row_error_last(fx_t *fx);

#endif
