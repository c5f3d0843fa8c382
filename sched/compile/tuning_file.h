/* Tuning files: the tuning a plan was compiled with, saved as text
 * (cg_plan_save_tuning) and loaded by the next run's compile
 * (cg_compile_opts_t.tuning_file), so it does not profile again
 * (docs/tuning.md#saving-and-loading-a-tuning).
 *
 * The format, one record per line ('#' starts a comment line; blank lines are
 * skipped):
 *
 *   commgraph-tuning 1
 *   nodes <the graph's node count>
 *   node <index> "<name>" <ready_us>          one per node on a communicator,
 *                                             by index
 *   comms <communicator count>
 *   comm <k> size <ranks> rank <rank> alpha_us <a> bytes_per_us <b> [overlap_us <o>]
 *                                             k: by agreed id, 0, 1, ...;
 *                                             overlap_us only where not 0
 *   [comm_path <k> dtypes <bits> ops <bits> path_us <14 times> library_us <14 times>]
 *                                             after its comm line, where the
 *                                             backend has a path of its own
 *                                             (cg_cost_path_t, plan_measure.h)
 *   boundaries tuned | default                which won cg_plan_tune's timing
 *   end
 *
 * Names are quoted with \\, \" and \xHH escapes (bytes below 0x20 and 0x7f);
 * doubles are printed with %.17g, so reading gives back the same bits. A
 * communicator's rank is this rank's when written and is not compared when
 * read: the ranks' files hold the same agreed tuning, so any rank's file
 * loads on any rank. */
#ifndef CG_SCHED_TUNING_FILE_H
#define CG_SCHED_TUNING_FILE_H

#include <stdint.h>
#include <stdio.h>

#include "comm_order.h"
#include "plan_internal.h"

#define CG_TUNING_FILE_VERSION 1

/* What a file must match: the graph's nodes and communicators. */
typedef struct cg_tuning_shape {
  uint32_t n_nodes;
  const char *const *names;    /* per node: its name; NULL (or a NULL entry): unnamed */
  const uint8_t *communicates; /* per node: 1 for a node on a communicator (it has a ready time) */
  uint32_t n_comms;            /* communicators, by agreed id */
  const int *sizes, *ranks;    /* per communicator */
} cg_tuning_shape_t;

/* What a file holds besides the shape; arrays the caller allocates. */
typedef struct cg_tuning_values {
  double *ready_us;                /* n_nodes; only communicating nodes' are written and read */
  double *alpha_us, *bytes_per_us; /* n_comms */
  double *overlap_us;              /* n_comms: 0 where the file has none */
  cg_cost_path_t *paths;           /* n_comms: zeros where the file has none */
  int default_won;                 /* the default boundaries won the timing (boundaries default) */
} cg_tuning_values_t;

/* Writes the file to f; `path` names it in errors (CG_ERR_IO). */
cg_status_t cg_tuning_file_write(FILE *f, const char *path, const cg_tuning_shape_t *shape,
                                 const cg_tuning_values_t *v, const char *where);
/* Reads f into *v (only the values of the shape's communicating nodes and
 * communicators are set). A file that is malformed or does not match
 * `shape` fails with CG_ERR_INVALID_ARGUMENT: "<where>: tuning file
 * <path>:<line>: <what differs>"; a read error too (CG_ERR_INVALID_ARGUMENT, as
 * cg_compile reports every file that does not load). */
cg_status_t cg_tuning_file_read(FILE *f, const char *path, const cg_tuning_shape_t *shape, cg_tuning_values_t *v,
                                const char *where);

/* `path` with every "%r" replaced by `rank`, in buf; 0 if it does not fit. */
int cg_tuning_file_path(char *buf, size_t size, const char *path, int rank);

/* Loads `path` ("%r": the rank in the graph's first communicator, as in
 * cg_plan_trace) for `g`, whose per-communicator orders are `order`: *out
 * gets ready times and costs bound to the graph's communicators, and
 * *default_won what the file says. This rank's alone: the compile makes the
 * ranks agree (cg_tuning_agree). */
cg_status_t cg_tuning_load(cg_tuning_t *out, int *default_won, const cg_graph_t *g, const cg_comm_order_t *order,
                           const char *path, const char *where);

#endif
