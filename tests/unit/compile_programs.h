/* What the two files of the compile suite share: test_compile.c (the tests,
 * the suite and main) and compile_programs.c (random programs, recorded on
 * offline communicators, and the check of a lowered plan against the graph it
 * came from). */
#ifndef CG_TEST_COMPILE_PROGRAMS_H
#define CG_TEST_COMPILE_PROGRAMS_H

#include <stddef.h>
#include <stdint.h>

#include "graph_view.h"
#include "plan_internal.h"
#include "test_support.h"

/* A node's handle in `g` from its index. */
cg_node_t compile_node(const cg_graph_t *g, uint32_t index);

/* ---- random programs, recordable any number of times on any communicators
 * and arena: only offsets are stored, so two recordings differ in addresses
 * and communicator identities only */

enum { ARENA = 1024, MAX_COMMS = 4 };

typedef enum op_kind { OP_COMM, OP_HOST, OP_HOST_FENCE, OP_DEPEND } op_kind_t;

typedef struct op {
  op_kind_t kind;
  cg_node_kind_t node_kind; /* OP_COMM: a communicator kind or a barrier */
  int comm;
  size_t send_off, send_bytes, recv_off, recv_bytes; /* OP_HOST: the range read and the range written */
  size_t count;
  cg_dtype_t dtype;
  cg_redop_t op;
  int root;
  uint32_t x, y;    /* OP_DEPEND: cg_depend(#x, #y) */
  const char *name; /* NULL: unnamed */
} op_t;

typedef struct program {
  op_t *ops;
  uint32_t n_ops, n_nodes;
  int n_comms;
  int rank[MAX_COMMS], size[MAX_COMMS];
} program_t;

/* `n_nodes` nodes, `host_percent` of them host functions; `ops` is the caller's
 * to free. */
program_t compile_random_program(uint32_t n_nodes, int n_comms, int host_percent);
/* Records `p` over `arena` (host functions: fn(&args[node]) when args is given,
 * else cg_test_noop). */
cg_graph_t *compile_record(const program_t *p, cg_comm_t *const *comms, unsigned char *arena, cg_host_fn_t fn,
                           uint32_t *args);

/* A random program recorded on offline communicators of its own. */
typedef struct sample {
  program_t p;
  cg_comm_t *comms[MAX_COMMS];
  cg_graph_t *g;
} sample_t;

void compile_sample_make(sample_t *s, uint32_t n_nodes, int n_comms, int host_percent, unsigned char *arena,
                         cg_host_fn_t fn, uint32_t *args);
/* Frees what is left: the graph may have been destroyed (and set to NULL). */
void compile_sample_free(sample_t *s);

/* ---- the plan compared with the graph it came from: every node one step, in
 * topological order, with its fields, dependencies, successors, lane,
 * communicator position and group (at the definition: the rules). */
void compile_check_plan(const cg_graph_t *g, const cg_plan_t *plan);

#endif
