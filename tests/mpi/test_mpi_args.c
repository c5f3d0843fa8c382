/* Argument safety (issue 8, item 3): one row per public function. Each row
 * calls its function with every class of bad argument that applies (NULL,
 * zero, overflowing counts, bad enumerations, the wrong communicator, node
 * handles of another or of a destroyed graph, device pointers where host
 * memory is required and the reverse) and checks three things per call:
 *
 *   (a) the status is the documented non-success one (some calls accept one of
 *       a short list where the headers allow either);
 *   (b) cg_error_last() is non-empty and names the function;
 *   (c) nothing changed: the fixture's graphs (stats and DOT text), its plan
 *       (stats, dump, DOT text and every node's buffers), its arena (usage),
 *       its communicators (rank, size, backend, device, reference count) and
 *       the bytes of the user buffers are compared with a snapshot after
 *       every call, and at the end of each row the plan still runs on every
 *       rank and gives the right results.
 *
 * Void functions (the *_destroy calls) get rows too: NULL must be harmless.
 *
 * "Destroyed handles". In C a destroyed graph, plan, arena or communicator is
 * a dangling pointer; passing one is undefined behaviour that no library can
 * detect, so no row does that. What the rows do instead, because it is safe
 * and the API promises it:
 *   - node handles of a destroyed graph (graph serials are never reused), of
 *     another live graph, CG_NODE_NULL and indices past the end are rejected
 *     with CG_ERR_INVALID_NODE (cg_depend, cg_node_name, cg_plan_rebind);
 *   - a communicator the caller has destroyed while a graph still holds it
 *     stays usable through that graph: the graph, a plan compiled from it
 *     and its results are unchanged (the cg_comm_destroy row);
 *   - a graph destroyed after compiling leaves the plan usable (the
 *     cg_graph_destroy row).
 *
 * "Wrong communicator": a communicator over MPI_COMM_SELF where the program
 * meant MPI_COMM_WORLD (roots and peers past its size are
 * CG_ERR_OUT_OF_RANGE), an offline communicator where a transport is needed
 * (cg_comm_mpi, running its plan: CG_ERR_UNSUPPORTED), an MPI communicator
 * where an NCCL one is needed (cg_comm_nccl).
 *
 * Device pointers need a CUDA build and a GPU; without one those checks print
 * that they were skipped.
 *
 * The table `rows` below must name every CG_API function of the public
 * headers: scripts/check-arg-table greps this file for the quoted names and
 * fails (ctest unit.check-arg-table) when one is missing. Rows of functions
 * that only exist in CUDA or NCCL builds keep their name in the table in
 * every build; their bodies are compiled only where the function exists.
 */
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

static void note(fx_t *fx, const char *fmt, ...) CG_PRINTF_LIKE(2, 3);
static void note(fx_t *fx, const char *fmt, ...) {
  if (fx->rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  printf("  row %s: ", fx->row);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
}

/* A soft assertion: the row goes on (so every rank reaches the collective
 * calls at its end) and the first failures are reported together. */
static void soft_fail(fx_t *fx, int line, const char *fmt, ...) CG_PRINTF_LIKE(3, 4);
static void soft_fail(fx_t *fx, int line, const char *fmt, ...) {
  fx->ok = 0;
  size_t used = strlen(fx->msg);
  if (used + 200 >= sizeof fx->msg) return;
  int n = snprintf(fx->msg + used, sizeof fx->msg - used, "\n  rank %d, line %d: ", fx->rank, line);
  if (n < 0) return;
  used += (size_t)n;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fx->msg + used, sizeof fx->msg - used, fmt, ap);
  va_end(ap);
}

#define CHECK(fx, cond, ...)                          \
  do {                                                \
    (fx)->checks++;                                   \
    if (!(cond)) soft_fail((fx), __LINE__, __VA_ARGS__);   \
  } while (0)

static char *text_of(cg_status_t (*write)(const void *, FILE *), const void *obj) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  cg_status_t st = write(obj, f);
  fclose(f);
  ck_assert_msg(st == CG_SUCCESS, "writing a snapshot text: %s", cg_error_last());
  return text;
}
static cg_status_t write_graph_dot(const void *g, FILE *f) { return cg_graph_write_dot(g, f); }
static cg_status_t write_plan_dot(const void *p, FILE *f) { return cg_plan_write_dot(p, f); }
static cg_status_t write_plan_dump(const void *p, FILE *f) { return cg_plan_dump(p, f); }

/* ---- snapshots */

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

static void comm_snap(comm_snap_t *s, const cg_comm_t *c) {
  ck_assert_cg_ok(cg_comm_rank(&s->rank, c));
  ck_assert_cg_ok(cg_comm_size(&s->size, c));
  ck_assert_cg_ok(cg_comm_device(&s->device, c));
  ck_assert_cg_ok(cg_comm_backend_name(&s->backend, c));
  s->refs = atomic_load(&c->refs);
}

static void snap_take(snap_t *s, const fx_t *fx) {
  memset(s, 0, sizeof *s);
  ck_assert_cg_ok(cg_graph_stats(&s->gs, fx->g));
  ck_assert_cg_ok(cg_graph_stats(&s->os, fx->other));
  ck_assert_cg_ok(cg_graph_stats(&s->offs, fx->offg));
  s->gdot = text_of(write_graph_dot, fx->g);
  s->odot = text_of(write_graph_dot, fx->other);
  s->offdot = text_of(write_graph_dot, fx->offg);
  ck_assert_cg_ok(cg_plan_stats(&s->ps, fx->plan));
  ck_assert_cg_ok(cg_plan_stats(&s->offps, fx->offplan));
  s->pdump = text_of(write_plan_dump, fx->plan);
  s->pdot = text_of(write_plan_dot, fx->plan);
  s->offdump = text_of(write_plan_dump, fx->offplan);
  ck_assert_uint_eq(fx->plan->n_names, N_PLAN_NODES);
  for (uint32_t v = 0; v < N_PLAN_NODES; v++) {
    s->psend[v] = fx->plan->nodes[v].send;
    s->precv[v] = fx->plan->nodes[v].recv;
  }
  ck_assert_cg_ok(cg_arena_usage(&s->a_used, &s->a_cap, fx->arena));
  comm_snap(&s->comms[0], fx->world);
  comm_snap(&s->comms[1], fx->self);
  comm_snap(&s->comms[2], fx->off);
  memcpy(s->buf, fx->buf, sizeof s->buf);
}

static void snap_free(snap_t *s) {
  free(s->gdot);
  free(s->odot);
  free(s->offdot);
  free(s->pdump);
  free(s->pdot);
  free(s->offdump);
}

/* Empty when a and b agree, else what differs. */
static const char *snap_diff(const snap_t *a, const snap_t *b) {
  if (memcmp(&a->gs, &b->gs, sizeof a->gs)) return "the graph's stats";
  if (memcmp(&a->os, &b->os, sizeof a->os)) return "the other graph's stats";
  if (memcmp(&a->offs, &b->offs, sizeof a->offs)) return "the offline graph's stats";
  if (strcmp(a->gdot, b->gdot)) return "the graph's DOT text";
  if (strcmp(a->odot, b->odot)) return "the other graph's DOT text";
  if (strcmp(a->offdot, b->offdot)) return "the offline graph's DOT text";
  if (memcmp(&a->ps, &b->ps, sizeof a->ps)) return "the plan's stats";
  if (memcmp(&a->offps, &b->offps, sizeof a->offps)) return "the offline plan's stats";
  if (strcmp(a->pdump, b->pdump)) return "the plan's dump";
  if (strcmp(a->pdot, b->pdot)) return "the plan's DOT text";
  if (strcmp(a->offdump, b->offdump)) return "the offline plan's dump";
  for (int v = 0; v < N_PLAN_NODES; v++)
    if (a->psend[v] != b->psend[v] || a->precv[v] != b->precv[v]) return "a plan node's buffers";
  if (a->a_used != b->a_used || a->a_cap != b->a_cap) return "the arena's usage";
  for (int i = 0; i < 3; i++) {
    const comm_snap_t *x = &a->comms[i], *y = &b->comms[i];
    if (x->rank != y->rank || x->size != y->size || x->device != y->device || x->refs != y->refs ||
        strcmp(x->backend, y->backend))
      return i == 0 ? "the world communicator" : i == 1 ? "the self communicator" : "the offline communicator";
  }
  if (memcmp(a->buf, b->buf, sizeof a->buf)) return "the user's buffers";
  return "";
}

static void check_unchanged(fx_t *fx, int line, const char *what) {
  snap_t now;
  snap_take(&now, fx);
  const char *diff = snap_diff(fx->base, &now);
  fx->checks++;
  if (*diff) soft_fail(fx, line, "after %s: %s changed", what, diff);
  snap_free(&now);
}

/* ---- expectations */

/* The detail of the last failure is per thread and stays until the next
 * failure: empty it before each call so (b) sees this call's detail. */
static void clear_error(void) { cg_fail(CG_SUCCESS, "%s", ""); }

static int status_in(cg_status_t st, const cg_status_t *allowed) {
  for (; *allowed != CG_SUCCESS; allowed++)
    if (st == *allowed) return 1;
  return 0;
}

static void expect_failed(fx_t *fx, int line, const char *call, cg_status_t st, const char *fn,
                          const cg_status_t *allowed) {
  const char *msg = cg_error_last();
  fx->checks++;
  if (!status_in(st, allowed))
    soft_fail(fx, line, "%s returned %s (%s), expected %s%s", call, cg_status_string(st), msg,
         cg_status_string(allowed[0]), allowed[1] != CG_SUCCESS ? " (or another listed)" : "");
  else if (!msg || !*msg)
    soft_fail(fx, line, "%s returned %s with an empty cg_error_last()", call, cg_status_string(st));
  else if (!strstr(msg, fn))
    soft_fail(fx, line, "%s: cg_error_last() '%s' does not name %s", call, msg, fn);
  check_unchanged(fx, line, call);
}

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

/* ---- the fixture, collective over MPI_COMM_WORLD */

static void fx_open(fx_t *fx, const char *row) {
  memset(fx, 0, sizeof *fx);
  fx->row = row;
  fx->ok = 1;
  fx->rank = cg_mpi_rank();
  fx->size = cg_mpi_size();
#if CG_HAVE_CUDA
  int devices = 0;
  fx->has_gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  cudaGetLastError();
#endif
  ck_assert_cg_ok(cg_comm_create(&fx->world, MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&fx->self, MPI_COMM_SELF, NULL));
  ck_assert_cg_ok(cg_comm_create_offline(&fx->off, fx->rank, fx->size));
  for (int i = 0; i < N_BUF; i++) fx->buf[i] = 1000 + i;
  int32_t *b = fx->buf;
  cg_graph_opts_t go = CG_GRAPH_OPTS_INIT;
  go.name = "args";
  ck_assert_cg_ok(cg_graph_create(&fx->g, &go));
  int next = (fx->rank + 1) % fx->size, prev = (fx->rank + fx->size - 1) % fx->size;
  ck_assert_cg_ok(cg_allreduce(&fx->n_sum, fx->g, fx->world, b, b + 4, 4, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_send(&fx->n_send, fx->g, fx->world, b + 8, 4, CG_INT32, next));
  ck_assert_cg_ok(cg_recv(&fx->n_recv, fx->g, fx->world, b + 12, 4, CG_INT32, prev));
  cg_range_t reads[1] = {{b + 4, 4 * sizeof(int32_t)}};
  cg_access_t access = CG_ACCESS_INIT;
  access.everything = 0;
  access.reads = reads;
  access.n_reads = 1;
  ck_assert_cg_ok(cg_host_func(&fx->n_host, fx->g, cg_test_noop, NULL, &access));
  ck_assert_cg_ok(cg_barrier(&fx->n_barrier, fx->g, fx->world));
  ck_assert_cg_ok(cg_node_name(fx->g, fx->n_sum, "sum"));
  ck_assert_cg_ok(cg_depend(fx->g, fx->n_send, fx->n_host));

  ck_assert_cg_ok(cg_graph_create(&fx->other, NULL));
  ck_assert_cg_ok(cg_allreduce(&fx->foreign, fx->other, fx->self, b + 16, b + 16, 2, CG_INT32, CG_MAX));
  cg_graph_t *gone = NULL;
  ck_assert_cg_ok(cg_graph_create(&gone, NULL));
  ck_assert_cg_ok(cg_barrier(NULL, gone, fx->off));
  ck_assert_cg_ok(cg_barrier(&fx->dead, gone, fx->off));
  cg_graph_destroy(gone);

  ck_assert_cg_ok(cg_graph_create(&fx->offg, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, fx->offg, fx->off, b + 20, b + 20, 4, CG_INT32, CG_SUM));

  cg_status_t st = cg_compile(&fx->plan, fx->g, NULL);
  ck_assert_all_ranks(st == CG_SUCCESS, "compiling the fixture's plan");
  ck_assert_cg_ok(cg_compile(&fx->offplan, fx->offg, NULL));

  ck_assert_cg_ok(cg_arena_create(&fx->arena, 4096, NULL));
  void *piece = NULL;
  ck_assert_cg_ok(cg_arena_alloc(&piece, fx->arena, 25, CG_FLOAT32));

  fx->base = malloc(sizeof *fx->base);
  ck_assert_ptr_nonnull(fx->base);
  snap_take(fx->base, fx);
}

/* Runs the fixture's plan (collective) and checks its results: whatever the
 * row did, the plan still works and still uses the buffers it was compiled
 * with. */
static void fx_verify_run(fx_t *fx) {
  int32_t *b = fx->buf;
  int prev = (fx->rank + fx->size - 1) % fx->size;
  for (int k = 0; k < 4; k++) {
    b[k] = 10 * fx->rank + k;
    b[4 + k] = -1;
    b[8 + k] = 100 * fx->rank + k;
    b[12 + k] = -1;
  }
  cg_status_t st = cg_plan_run(fx->plan);
  CHECK(fx, st == CG_SUCCESS, "running the fixture's plan after the row: %s: %s", cg_status_string(st),
        cg_error_last());
  for (int k = 0; k < 4 && st == CG_SUCCESS; k++) {
    int32_t sum = 10 * fx->size * (fx->size - 1) / 2 + fx->size * k;
    CHECK(fx, b[4 + k] == sum, "after the row, allreduce element %d is %d, expected %d", k, (int)b[4 + k], (int)sum);
    CHECK(fx, b[12 + k] == 100 * prev + k, "after the row, received element %d is %d, expected %d", k,
          (int)b[12 + k], 100 * prev + k);
  }
}

static void fx_close(fx_t *fx) {
  snap_free(fx->base);
  free(fx->base);
  cg_plan_destroy(fx->plan);
  cg_plan_destroy(fx->offplan);
  cg_graph_destroy(fx->g);
  cg_graph_destroy(fx->other);
  cg_graph_destroy(fx->offg);
  cg_arena_destroy(fx->arena);
  cg_comm_destroy(fx->world);
  cg_comm_destroy(fx->self);
  cg_comm_destroy(fx->off);
}

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

/* ---- rows: recording collectives.
 *
 * Common to all: NULL graph and NULL communicator (CG_ERR_INVALID_ARGUMENT),
 * NULL buffers that hold bytes (CG_ERR_INVALID_ARGUMENT), bad dtype (and op)
 * (CG_ERR_INVALID_ENUM), counts whose bytes overflow size_t or run past the
 * end of memory (CG_ERR_OVERFLOW), overlaps that are not the in-place form
 * (CG_ERR_ALIAS). Zero counts with NULL buffers are a valid empty operation
 * (NCCL accepts count 0): checked on a scratch graph, not the fixture. */

typedef cg_status_t (*coll_fn)(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *send, void *recv, size_t count,
                               cg_dtype_t dt, cg_redop_t op, int root);

static cg_status_t do_allreduce(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *s, void *r, size_t n, cg_dtype_t dt,
                                cg_redop_t op, int root) {
  (void)fx, (void)root;
  return cg_allreduce(NULL, g, c, s, r, n, dt, op);
}
static cg_status_t do_broadcast(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *s, void *r, size_t n, cg_dtype_t dt,
                                cg_redop_t op, int root) {
  (void)fx, (void)op;
  return cg_broadcast(NULL, g, c, s, r, n, dt, root);
}
static cg_status_t do_reduce(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *s, void *r, size_t n, cg_dtype_t dt,
                             cg_redop_t op, int root) {
  (void)fx;
  return cg_reduce(NULL, g, c, s, r, n, dt, op, root);
}
static cg_status_t do_allgather(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *s, void *r, size_t n, cg_dtype_t dt,
                                cg_redop_t op, int root) {
  (void)fx, (void)op, (void)root;
  return cg_allgather(NULL, g, c, s, r, n, dt);
}
static cg_status_t do_reduce_scatter(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *s, void *r, size_t n,
                                     cg_dtype_t dt, cg_redop_t op, int root) {
  (void)fx, (void)root;
  return cg_reduce_scatter(NULL, g, c, s, r, n, dt, op);
}
static cg_status_t do_alltoall(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *s, void *r, size_t n, cg_dtype_t dt,
                               cg_redop_t op, int root) {
  (void)fx, (void)op, (void)root;
  return cg_alltoall(NULL, g, c, s, r, n, dt);
}
static cg_status_t do_gather(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *s, void *r, size_t n, cg_dtype_t dt,
                             cg_redop_t op, int root) {
  (void)fx, (void)op;
  return cg_gather(NULL, g, c, s, r, n, dt, root);
}
static cg_status_t do_scatter(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *s, void *r, size_t n, cg_dtype_t dt,
                              cg_redop_t op, int root) {
  (void)fx, (void)op;
  return cg_scatter(NULL, g, c, s, r, n, dt, root);
}
static cg_status_t do_send(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *s, void *r, size_t n, cg_dtype_t dt,
                           cg_redop_t op, int peer) {
  (void)fx, (void)r, (void)op;
  return cg_send(NULL, g, c, s, n, dt, peer);
}
static cg_status_t do_recv(fx_t *fx, cg_graph_t *g, cg_comm_t *c, const void *s, void *r, size_t n, cg_dtype_t dt,
                           cg_redop_t op, int peer) {
  (void)fx, (void)s, (void)op;
  return cg_recv(NULL, g, c, r, n, dt, peer);
}

enum {
  HAS_OP = 1,      /* takes a reduction */
  HAS_ROOT = 2,    /* takes a root */
  HAS_PEER = 4,    /* takes a peer */
  SCALES = 8,      /* a buffer holds count * size elements */
  USES_SEND = 16,  /* on every rank (for a rooted kind: on the root, rank 0 here) */
  USES_RECV = 32,
  ALIAS_FREE = 64  /* no overlap allowed at all (alltoall) */
};

static void collective_row(fx_t *fx, const char *fn, coll_fn call, int flags) {
  int32_t *b = fx->buf;
  /* valid defaults: each rank is the root of its own call (recording is
   * local), so a rooted kind uses both buffers on every rank; buffers in the
   * unused tail of buf (the largest layout: 4 ranks times 1 element) */
  int peer = (fx->rank + 1) % fx->size;
  int where = flags & HAS_PEER ? peer : fx->rank;
  const void *s = (flags & USES_SEND) ? (const void *)(b + 16) : NULL;
  void *r = (flags & USES_RECV) ? (void *)(b + 20) : NULL;

  EXPECT(fx, fn, call(fx, NULL, fx->world, s, r, 1, CG_INT32, CG_SUM, where), IA);
  EXPECT(fx, fn, call(fx, fx->g, NULL, s, r, 1, CG_INT32, CG_SUM, where), IA);
  EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, 1, BAD_DTYPE_1, CG_SUM, where), CG_ERR_INVALID_ENUM);
  EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, 1, BAD_DTYPE_2, CG_SUM, where), CG_ERR_INVALID_ENUM);
  EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, 1, BAD_DTYPE_3, CG_SUM, where), CG_ERR_INVALID_ENUM);
  if (flags & HAS_OP) {
    EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, 1, CG_INT32, BAD_OP_1, where), CG_ERR_INVALID_ENUM);
    EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, 1, CG_INT32, BAD_OP_2, where), CG_ERR_INVALID_ENUM);
  }
  if (flags & (HAS_ROOT | HAS_PEER)) {
    EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, 1, CG_INT32, CG_SUM, -1), CG_ERR_OUT_OF_RANGE);
    EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, 1, CG_INT32, CG_SUM, fx->size), CG_ERR_OUT_OF_RANGE);
    EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, 1, CG_INT32, CG_SUM, INT_MIN), CG_ERR_OUT_OF_RANGE);
    /* the wrong communicator: rank 1 of the world is no rank of MPI_COMM_SELF */
    EXPECT(fx, fn, call(fx, fx->g, fx->self, s, r, 1, CG_INT32, CG_SUM, 1), CG_ERR_OUT_OF_RANGE);
  }
  if (flags & USES_SEND)
    EXPECT(fx, fn, call(fx, fx->g, fx->world, NULL, r, 1, CG_INT32, CG_SUM, where), IA);
  if (flags & USES_RECV)
    EXPECT(fx, fn, call(fx, fx->g, fx->world, s, NULL, 1, CG_INT32, CG_SUM, where), IA);
  /* overflowing counts: count * element size, count * ranks, and a range
   * running off the end of the address space */
  EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, SIZE_MAX, CG_FLOAT64, CG_SUM, where), CG_ERR_OVERFLOW);
  EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, SIZE_MAX / 2 + 1, CG_INT32, CG_SUM, where),
         CG_ERR_OVERFLOW);
  if (flags & SCALES)
    EXPECT(fx, fn, call(fx, fx->g, fx->world, s, r, SIZE_MAX / 2 + 1, CG_INT8, CG_SUM, where), CG_ERR_OVERFLOW);
  if (flags & USES_SEND)
    EXPECT(fx, fn, call(fx, fx->g, fx->world, NEAR_END, r, 16, CG_INT8, CG_SUM, where), CG_ERR_OVERFLOW);
  if (flags & USES_RECV)
    EXPECT(fx, fn, call(fx, fx->g, fx->world, s, NEAR_END, 16, CG_INT8, CG_SUM, where), CG_ERR_OVERFLOW);
  /* an overlap that is no in-place form: recv one element past send */
  if ((flags & USES_SEND) && (flags & USES_RECV)) {
    const void *s2 = b + 16;
    void *r2 = b + 17;
    EXPECT(fx, fn, call(fx, fx->g, fx->world, s2, r2, 2, CG_INT32, CG_SUM, where), CG_ERR_ALIAS);
    if (flags & ALIAS_FREE) /* alltoall has no in-place form at all */
      EXPECT(fx, fn, call(fx, fx->g, fx->world, s2, (void *)s2, 1, CG_INT32, CG_SUM, where), CG_ERR_ALIAS);
  }
  /* zero: count 0 with NULL buffers is an empty operation, valid */
  cg_graph_t *scratch = NULL;
  ck_assert_cg_ok(cg_graph_create(&scratch, NULL));
  cg_status_t st = call(fx, scratch, fx->world, NULL, NULL, 0, CG_INT32, CG_SUM, where);
  CHECK(fx, st == CG_SUCCESS, "%s with count 0 and NULL buffers returned %s (%s)", fn, cg_status_string(st),
        cg_error_last());
  cg_graph_destroy(scratch);
  /* the scratch graph's reference to the communicator is gone again */
  check_unchanged(fx, __LINE__, "recording count 0 on a scratch graph");
}

static void row_broadcast(fx_t *fx) {
  collective_row(fx, "cg_broadcast", do_broadcast, HAS_ROOT | USES_SEND | USES_RECV);
}
static void row_reduce(fx_t *fx) {
  collective_row(fx, "cg_reduce", do_reduce, HAS_OP | HAS_ROOT | USES_SEND | USES_RECV);
}
static void row_allgather(fx_t *fx) {
  collective_row(fx, "cg_allgather", do_allgather, SCALES | USES_SEND | USES_RECV);
}
static void row_reduce_scatter(fx_t *fx) {
  collective_row(fx, "cg_reduce_scatter", do_reduce_scatter, HAS_OP | SCALES | USES_SEND | USES_RECV);
}
static void row_alltoall(fx_t *fx) {
  collective_row(fx, "cg_alltoall", do_alltoall, SCALES | USES_SEND | USES_RECV | ALIAS_FREE);
}
static void row_gather(fx_t *fx) {
  collective_row(fx, "cg_gather", do_gather, HAS_ROOT | SCALES | USES_SEND | USES_RECV);
}
static void row_scatter(fx_t *fx) {
  collective_row(fx, "cg_scatter", do_scatter, HAS_ROOT | SCALES | USES_SEND | USES_RECV);
}
static void row_send(fx_t *fx) { collective_row(fx, "cg_send", do_send, HAS_PEER | USES_SEND); }
static void row_recv(fx_t *fx) { collective_row(fx, "cg_recv", do_recv, HAS_PEER | USES_RECV); }

#if CG_HAVE_CUDA
/* An mpi-staged communicator on this rank's GPU (collective); NULL, with a
 * note, where some rank cannot have one. */
static cg_comm_t *device_comm_open(fx_t *fx, const char *what) {
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  o.backend = CG_BACKEND_MPI;
  o.device = CG_DEVICE_LOCAL_RANK;
  cg_comm_t *dc = NULL;
  cg_status_t st = cg_comm_create(&dc, MPI_COMM_WORLD, &o);
  if (cg_mpi_all(st == CG_SUCCESS)) return dc;
  note(fx, "%s: skipped (no mpi-staged communicator: %s)", what, cg_error_last());
  cg_comm_destroy(dc);
  return NULL;
}

/* Buffers in the wrong place: device memory on a host communicator, and
 * pageable host memory or another GPU's memory on a device communicator, are
 * refused when recorded; the memory each accepts is recorded. */
static void allreduce_memory_rows(fx_t *fx) {
  const char *fn = "cg_allreduce";
  if (!cg_mpi_all(fx->has_gpu)) {
    note(fx, "memory placement: skipped (no GPU on some rank)");
    return;
  }
  void *dev = NULL;
  ck_assert_int_eq(cudaMalloc(&dev, 64), cudaSuccess);
  EXPECT(fx, fn, cg_allreduce(NULL, fx->g, fx->world, dev, (char *)dev + 32, 4, CG_INT32, CG_SUM), IA);
  EXPECT(fx, fn, cg_allreduce(NULL, fx->g, fx->world, fx->buf, dev, 4, CG_INT32, CG_SUM), IA);
  CHECK(fx, strstr(cg_error_last(), "recv") && strstr(cg_error_last(), "runs on the host"),
        "the error names neither the buffer nor the host: %s", cg_error_last());
  cudaFree(dev);

  cg_comm_t *dc = device_comm_open(fx, "memory placement on a device communicator");
  if (!dc) return;
  int device = 0, devices = 0, prev = 0;
  ck_assert_cg_ok(cg_comm_device(&device, dc));
  cudaGetDevice(&prev);
  cudaSetDevice(device);
  cudaGetDeviceCount(&devices);
  void *mine = NULL, *managed = NULL, *pinned = NULL, *other = NULL;
  ck_assert_int_eq(cudaMalloc(&mine, 64), cudaSuccess);
  ck_assert_int_eq(cudaMallocManaged(&managed, 64, cudaMemAttachGlobal), cudaSuccess);
  ck_assert_int_eq(cudaMallocHost(&pinned, 64), cudaSuccess);
  int pageable_ok = 0;
  cudaDeviceGetAttribute(&pageable_ok, cudaDevAttrPageableMemoryAccess, device);
  cg_graph_t *dg = NULL;
  ck_assert_cg_ok(cg_graph_create(&dg, NULL));
  if (pageable_ok)
    note(fx, "pageable host memory on a device communicator: not refused (device %d reads pageable memory)", device);
  else {
    EXPECT(fx, fn, cg_allreduce(NULL, dg, dc, fx->buf, fx->buf + 4, 4, CG_INT32, CG_SUM), IA);
    CHECK(fx, strstr(cg_error_last(), "host memory"), "the error does not say host memory: %s", cg_error_last());
    EXPECT(fx, fn, cg_allreduce(NULL, dg, dc, mine, fx->buf, 4, CG_INT32, CG_SUM), IA);
  }
  if (devices > 1) {
    cudaSetDevice((device + 1) % devices);
    ck_assert_int_eq(cudaMalloc(&other, 64), cudaSuccess);
    cudaSetDevice(device);
    EXPECT(fx, fn, cg_allreduce(NULL, dg, dc, other, (char *)other + 32, 4, CG_INT32, CG_SUM), IA);
    CHECK(fx, strstr(cg_error_last(), "runs on device"), "the error does not name the device: %s", cg_error_last());
  } else
    note(fx, "another GPU's memory on a device communicator: skipped (one GPU)");
  const void *good[3] = {mine, managed, pinned};
  const char *good_name[3] = {"its device's memory", "managed memory", "pinned host memory"};
  for (int k = 0; k < 3; k++) {
    cg_status_t st = cg_allreduce(NULL, dg, dc, good[k], (char *)good[k] + 32, 4, CG_INT32, CG_SUM);
    CHECK(fx, st == CG_SUCCESS, "a device communicator refused %s: %s", good_name[k], cg_error_last());
  }
  cg_graph_destroy(dg);
  cudaFree(other);
  cudaFree(mine);
  cudaFree(managed);
  cudaFreeHost(pinned);
  cudaSetDevice(prev);
  cg_comm_destroy(dc);
  check_unchanged(fx, __LINE__, "memory placement rows");
}
#endif

static void row_allreduce(fx_t *fx) {
  collective_row(fx, "cg_allreduce", do_allreduce, HAS_OP | USES_SEND | USES_RECV);
#if CG_HAVE_CUDA
  allreduce_memory_rows(fx);
#else
  note(fx, "memory placement: skipped (built without CUDA)");
#endif
}

static void row_barrier(fx_t *fx) {
  EXPECT(fx, "cg_barrier", cg_barrier(NULL, NULL, fx->world), IA);
  EXPECT(fx, "cg_barrier", cg_barrier(NULL, fx->g, NULL), IA);
}

static void row_host_func(fx_t *fx) {
  const char *fn = "cg_host_func";
  cg_access_t a = CG_ACCESS_INIT;
  EXPECT(fx, fn, cg_host_func(NULL, NULL, cg_test_noop, NULL, NULL), IA);
  EXPECT(fx, fn, cg_host_func(NULL, fx->g, NULL, NULL, NULL), IA);
  a.size = 0; /* not initialized with CG_ACCESS_INIT */
  EXPECT(fx, fn, cg_host_func(NULL, fx->g, cg_test_noop, NULL, &a), IA);
  a.size = sizeof a + 8;
  EXPECT(fx, fn, cg_host_func(NULL, fx->g, cg_test_noop, NULL, &a), IA);
  cg_range_t ranges[2] = {{fx->buf, 8}, {NULL, 8}};
  a = (cg_access_t)CG_ACCESS_INIT;
  a.everything = 0;
  a.n_reads = 1; /* reads NULL */
  EXPECT(fx, fn, cg_host_func(NULL, fx->g, cg_test_noop, NULL, &a), IA);
  a.n_reads = 0;
  a.n_writes = 3; /* writes NULL */
  EXPECT(fx, fn, cg_host_func(NULL, fx->g, cg_test_noop, NULL, &a), IA);
  a.n_writes = 0;
  a.reads = ranges;
  a.n_reads = SIZE_MAX; /* overflowing count of ranges */
  EXPECT(fx, fn, cg_host_func(NULL, fx->g, cg_test_noop, NULL, &a), CG_ERR_OVERFLOW);
  a.n_reads = 2; /* the second range is NULL with bytes */
  EXPECT(fx, fn, cg_host_func(NULL, fx->g, cg_test_noop, NULL, &a), IA);
  ranges[1] = (cg_range_t){NEAR_END, 16}; /* runs past the end of memory */
  EXPECT(fx, fn, cg_host_func(NULL, fx->g, cg_test_noop, NULL, &a), CG_ERR_OVERFLOW);
  a.writes = ranges + 1;
  a.n_writes = 1;
  a.n_reads = 1;
  EXPECT(fx, fn, cg_host_func(NULL, fx->g, cg_test_noop, NULL, &a), CG_ERR_OVERFLOW);
}

/* node handles that are not nodes of fx->g */
static void bad_nodes(const fx_t *fx, cg_node_t out[5]) {
  out[0] = fx->foreign;                                   /* another live graph */
  out[1] = fx->dead;                                      /* a destroyed graph */
  out[2] = (cg_node_t)CG_NODE_NULL;                       /* never recorded */
  out[3] = (cg_node_t){fx->n_sum.graph, N_PLAN_NODES};    /* past the end */
  out[4] = (cg_node_t){fx->n_sum.graph, UINT32_MAX};
}

static void row_depend(fx_t *fx) {
  const char *fn = "cg_depend";
  cg_node_t bad[5];
  bad_nodes(fx, bad);
  EXPECT(fx, fn, cg_depend(NULL, fx->n_sum, fx->n_host), IA);
  for (int i = 0; i < 5; i++) {
    EXPECT(fx, fn, cg_depend(fx->g, bad[i], fx->n_host), CG_ERR_INVALID_NODE);
    EXPECT(fx, fn, cg_depend(fx->g, fx->n_sum, bad[i]), CG_ERR_INVALID_NODE);
  }
  EXPECT(fx, fn, cg_depend(fx->g, fx->n_host, fx->n_host), CG_ERR_CYCLE);
  EXPECT(fx, fn, cg_depend(fx->g, fx->n_barrier, fx->n_sum), CG_ERR_CYCLE);
  /* an edge that exists already: a documented no-op */
  EXPECT_NOOP(fx, cg_depend(fx->g, fx->n_send, fx->n_host));
}

static void row_node_name(fx_t *fx) {
  const char *fn = "cg_node_name";
  cg_node_t bad[5];
  bad_nodes(fx, bad);
  EXPECT(fx, fn, cg_node_name(NULL, fx->n_sum, "x"), IA);
  EXPECT(fx, fn, cg_node_name(fx->g, fx->n_sum, NULL), IA);
  for (int i = 0; i < 5; i++) EXPECT(fx, fn, cg_node_name(fx->g, bad[i], "x"), CG_ERR_INVALID_NODE);
}

static void row_graph_create(fx_t *fx) {
  const char *fn = "cg_graph_create";
  cg_graph_t *sentinel = (cg_graph_t *)fx, *out = sentinel;
  cg_graph_opts_t o = CG_GRAPH_OPTS_INIT;
  EXPECT(fx, fn, cg_graph_create(NULL, NULL), IA);
  EXPECT(fx, fn, cg_graph_create(NULL, &o), IA);
  o.size = 0;
  EXPECT(fx, fn, cg_graph_create(&out, &o), IA);
  o.size = sizeof o - 1;
  EXPECT(fx, fn, cg_graph_create(&out, &o), IA);
  CHECK(fx, out == sentinel || out == NULL, "a failed cg_graph_create wrote %p to out", (void *)out);
}

static void row_graph_destroy(fx_t *fx) {
  EXPECT_VOID(fx, cg_graph_destroy(NULL));
  /* the graph may be destroyed after compiling: its plan keeps working (the
   * run at the end of the row checks the fixture's plan the same way) */
  cg_graph_t *g = NULL;
  cg_plan_t *p = NULL;
  int32_t x[2] = {fx->rank + 1, 0};
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, fx->world, x, x + 1, 1, CG_INT32, CG_SUM));
  cg_status_t st = cg_compile(&p, g, NULL);
  ck_assert_all_ranks(st == CG_SUCCESS, "compiling the scratch graph");
  char *before = text_of(write_plan_dump, p);
  cg_graph_destroy(g);
  char *after = text_of(write_plan_dump, p);
  CHECK(fx, strcmp(before, after) == 0, "destroying the graph changed its plan's dump");
  st = cg_plan_run(p);
  CHECK(fx, st == CG_SUCCESS && x[1] == fx->size * (fx->size + 1) / 2,
        "the plan of a destroyed graph: %s, sum %d", cg_status_string(st), (int)x[1]);
  free(before);
  free(after);
  cg_plan_destroy(p);
  check_unchanged(fx, __LINE__, "a scratch graph destroyed after compiling");
}

static void row_graph_stats(fx_t *fx) {
  cg_graph_stats_t s;
  EXPECT(fx, "cg_graph_stats", cg_graph_stats(NULL, fx->g), IA);
  EXPECT(fx, "cg_graph_stats", cg_graph_stats(&s, NULL), IA);
}

/* A stream that refuses writes. */
static FILE *read_only_stream(void) {
  FILE *f = fopen("/dev/null", "r");
  ck_assert_ptr_nonnull(f);
  return f;
}

static void row_graph_write_dot(fx_t *fx) {
  const char *fn = "cg_graph_write_dot";
  EXPECT(fx, fn, cg_graph_write_dot(NULL, stdout), IA);
  EXPECT(fx, fn, cg_graph_write_dot(fx->g, NULL), IA);
  FILE *f = read_only_stream();
  EXPECT(fx, fn, cg_graph_write_dot(fx->g, f), CG_ERR_IO);
  fclose(f);
}

/* ---- rows: communicators */

static void row_comm_create_offline(fx_t *fx) {
  const char *fn = "cg_comm_create_offline";
  cg_comm_t *sentinel = (cg_comm_t *)fx, *out = sentinel;
  EXPECT(fx, fn, cg_comm_create_offline(NULL, 0, 1), IA);
  EXPECT(fx, fn, cg_comm_create_offline(&out, 0, 0), IA);
  EXPECT(fx, fn, cg_comm_create_offline(&out, 0, -1), IA);
  EXPECT(fx, fn, cg_comm_create_offline(&out, 0, INT_MIN), IA);
  EXPECT(fx, fn, cg_comm_create_offline(&out, -1, 2), CG_ERR_OUT_OF_RANGE);
  EXPECT(fx, fn, cg_comm_create_offline(&out, 2, 2), CG_ERR_OUT_OF_RANGE);
  EXPECT(fx, fn, cg_comm_create_offline(&out, INT_MAX, 2), CG_ERR_OUT_OF_RANGE);
  CHECK(fx, out == sentinel || out == NULL, "a failed cg_comm_create_offline wrote %p to out", (void *)out);
}

static void row_comm_create(fx_t *fx) {
  const char *fn = "cg_comm_create";
  cg_comm_t *sentinel = (cg_comm_t *)fx, *out = sentinel;
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  EXPECT(fx, fn, cg_comm_create(NULL, MPI_COMM_WORLD, NULL), IA);
  EXPECT(fx, fn, cg_comm_create(&out, MPI_COMM_NULL, NULL), IA);
  o.size = 0;
  EXPECT(fx, fn, cg_comm_create(&out, MPI_COMM_WORLD, &o), IA);
  o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
  o.backend = CG_BACKEND_COUNT;
  EXPECT(fx, fn, cg_comm_create(&out, MPI_COMM_WORLD, &o), CG_ERR_INVALID_ENUM);
  o.backend = (cg_backend_kind_t)-1;
  EXPECT(fx, fn, cg_comm_create(&out, MPI_COMM_WORLD, &o), CG_ERR_INVALID_ENUM);
  o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
  o.staging = CG_STAGING_COUNT;
  EXPECT(fx, fn, cg_comm_create(&out, MPI_COMM_WORLD, &o), CG_ERR_INVALID_ENUM);
  o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
  o.timeout_s = NAN;
  EXPECT(fx, fn, cg_comm_create(&out, MPI_COMM_WORLD, &o), IA);
  o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
  o.device = -3;
  EXPECT(fx, fn, cg_comm_create(&out, MPI_COMM_WORLD, &o), IA);
  o.device = INT_MIN;
  EXPECT(fx, fn, cg_comm_create(&out, MPI_COMM_WORLD, &o), IA);
  /* backends that need a device, given host memory */
  o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
  o.backend = CG_BACKEND_NCCL;
  EXPECT(fx, fn, cg_comm_create(&out, MPI_COMM_WORLD, &o), IA, CG_ERR_UNSUPPORTED);
  o.backend = CG_BACKEND_HOSTTRANSFER;
  EXPECT(fx, fn, cg_comm_create(&out, MPI_COMM_WORLD, &o), IA, CG_ERR_UNSUPPORTED);
  CHECK(fx, out == sentinel || out == NULL, "a failed cg_comm_create wrote %p to out", (void *)out);
}

static void row_comm_destroy(fx_t *fx) {
  EXPECT_VOID(fx, cg_comm_destroy(NULL));
  /* a communicator the caller destroys while a graph holds it: the graph, a
   * plan compiled from it and the results do not change */
  cg_comm_t *c = NULL;
  cg_graph_t *g = NULL;
  cg_plan_t *p = NULL;
  int32_t x[2] = {fx->rank + 1, 0};
  ck_assert_cg_ok(cg_comm_create(&c, MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, c, x, x + 1, 1, CG_INT32, CG_SUM));
  char *before = text_of(write_graph_dot, g);
  cg_comm_destroy(c); /* the caller's reference; c is not used again */
  char *after = text_of(write_graph_dot, g);
  CHECK(fx, strcmp(before, after) == 0, "destroying a communicator the graph holds changed the graph");
  cg_status_t st = cg_compile(&p, g, NULL);
  ck_assert_all_ranks(st == CG_SUCCESS, "compiling over a communicator the caller destroyed");
  cg_graph_destroy(g);
  st = cg_plan_run(p);
  CHECK(fx, st == CG_SUCCESS && x[1] == fx->size * (fx->size + 1) / 2,
        "a plan over a communicator the caller destroyed: %s, sum %d", cg_status_string(st), (int)x[1]);
  cg_plan_destroy(p); /* frees the communicator (collective) */
  free(before);
  free(after);
  check_unchanged(fx, __LINE__, "a communicator released while a graph held it");
}

/* The four getters share their rows' shape: NULL out, NULL communicator. */
static void row_comm_rank(fx_t *fx) {
  int v = -7;
  EXPECT(fx, "cg_comm_rank", cg_comm_rank(NULL, fx->world), IA);
  EXPECT(fx, "cg_comm_rank", cg_comm_rank(&v, NULL), IA);
  CHECK(fx, v == -7, "a failed cg_comm_rank wrote %d", v);
}
static void row_comm_size(fx_t *fx) {
  int v = -7;
  EXPECT(fx, "cg_comm_size", cg_comm_size(NULL, fx->world), IA);
  EXPECT(fx, "cg_comm_size", cg_comm_size(&v, NULL), IA);
  CHECK(fx, v == -7, "a failed cg_comm_size wrote %d", v);
}
static void row_comm_backend_name(fx_t *fx) {
  const char *v = "unset";
  EXPECT(fx, "cg_comm_backend_name", cg_comm_backend_name(NULL, fx->world), IA);
  EXPECT(fx, "cg_comm_backend_name", cg_comm_backend_name(&v, NULL), IA);
  CHECK(fx, strcmp(v, "unset") == 0, "a failed cg_comm_backend_name wrote '%s'", v);
}
static void row_comm_device(fx_t *fx) {
  int v = -7;
  EXPECT(fx, "cg_comm_device", cg_comm_device(NULL, fx->world), IA);
  EXPECT(fx, "cg_comm_device", cg_comm_device(&v, NULL), IA);
  CHECK(fx, v == -7, "a failed cg_comm_device wrote %d", v);
}

static void row_comm_mpi(fx_t *fx) {
  MPI_Comm m = MPI_COMM_NULL;
  EXPECT(fx, "cg_comm_mpi", cg_comm_mpi(NULL, fx->world), IA);
  EXPECT(fx, "cg_comm_mpi", cg_comm_mpi(&m, NULL), IA);
  /* the wrong communicator: an offline one has no MPI_Comm */
  EXPECT(fx, "cg_comm_mpi", cg_comm_mpi(&m, fx->off), CG_ERR_UNSUPPORTED);
  CHECK(fx, m == MPI_COMM_NULL, "a failed cg_comm_mpi wrote its output");
}

/* The entry points for other languages. MPI runs here, so cg_mpi_init only
 * reports the level and cg_mpi_finalize does nothing (test_mpi_language_init.c
 * covers the library starting and ending MPI). */
static void row_mpi_init(fx_t *fx) {
  int level = -1;
  EXPECT_NOOP(fx, cg_mpi_init(NULL));
  EXPECT_NOOP(fx, cg_mpi_init(&level));
  CHECK(fx, level >= MPI_THREAD_SINGLE && level <= MPI_THREAD_MULTIPLE, "cg_mpi_init gave level %d", level);
}
static void row_mpi_finalize(fx_t *fx) { EXPECT_NOOP(fx, cg_mpi_finalize()); }

static void row_comm_create_fortran(fx_t *fx) {
  const char *fn = "cg_comm_create_fortran";
  cg_comm_t *sentinel = (cg_comm_t *)fx, *out = sentinel;
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  EXPECT(fx, fn, cg_comm_create_fortran(NULL, cg_mpi_world_fortran(), NULL), IA);
  /* the rest is cg_comm_create's, whose detail names it */
  EXPECT(fx, "cg_comm_create", cg_comm_create_fortran(&out, MPI_Comm_c2f(MPI_COMM_NULL), NULL), IA);
  o.size = 0;
  EXPECT(fx, "cg_comm_create", cg_comm_create_fortran(&out, cg_mpi_world_fortran(), &o), IA);
  o = (cg_comm_opts_t)CG_COMM_OPTS_INIT;
  o.backend = CG_BACKEND_COUNT;
  EXPECT(fx, "cg_comm_create", cg_comm_create_fortran(&out, cg_mpi_world_fortran(), &o), CG_ERR_INVALID_ENUM);
  CHECK(fx, out == sentinel || out == NULL, "a failed cg_comm_create_fortran wrote %p to out", (void *)out);
}

/* No bad argument: MPI_COMM_WORLD's handle, whatever it is. */
static void row_mpi_world_fortran(fx_t *fx) {
  EXPECT_VOID(fx, (void)cg_mpi_world_fortran());
  CHECK(fx, MPI_Comm_f2c(cg_mpi_world_fortran()) == MPI_COMM_WORLD, "cg_mpi_world_fortran is not MPI_COMM_WORLD's");
}

static void row_mpi_library_version(fx_t *fx) {
  const char *fn = "cg_mpi_library_version";
  char buf[4] = "abc";
  EXPECT(fx, fn, cg_mpi_library_version(NULL, 64), IA);
  EXPECT(fx, fn, cg_mpi_library_version(buf, 0), IA);
  CHECK(fx, strcmp(buf, "abc") == 0, "cg_mpi_library_version with size 0 wrote '%s'", buf);
  /* too short for any MPI's name: refused, not cut */
  EXPECT(fx, fn, cg_mpi_library_version(buf, 1), IA);
  CHECK(fx, buf[0] == '\0', "a refused cg_mpi_library_version left '%s'", buf);
}

/* On MPI_COMM_SELF, where every rank is rank 0 and writes (the write error
 * comes back on the rank that writes). */
static void row_info_write(fx_t *fx) {
  const char *fn = "cg_info_write";
  EXPECT(fx, fn, cg_info_write(NULL, MPI_COMM_WORLD), IA);
  EXPECT(fx, fn, cg_info_write(stdout, MPI_COMM_NULL), IA);
  FILE *f = read_only_stream();
  EXPECT(fx, fn, cg_info_write(f, MPI_COMM_SELF), CG_ERR_IO);
  fclose(f);
}
static void row_info_write_fortran(fx_t *fx) {
  const char *fn = "cg_info_write_fortran";
  EXPECT(fx, fn, cg_info_write_fortran(NULL, cg_mpi_world_fortran()), IA);
  EXPECT(fx, fn, cg_info_write_fortran(stdout, MPI_Comm_c2f(MPI_COMM_NULL)), IA);
  FILE *f = read_only_stream();
  EXPECT(fx, fn, cg_info_write_fortran(f, MPI_Comm_c2f(MPI_COMM_SELF)), CG_ERR_IO);
  fclose(f);
}

static void row_comm_from_nccl(fx_t *fx) {
#if CG_HAVE_NCCL
  cg_comm_t *sentinel = (cg_comm_t *)fx, *out = sentinel;
  ncclComm_t bogus = (ncclComm_t)(void *)fx; /* never dereferenced: the NULL out is refused first */
  EXPECT(fx, "cg_comm_from_nccl", cg_comm_from_nccl(&out, NULL, MPI_COMM_WORLD), IA);
  EXPECT(fx, "cg_comm_from_nccl", cg_comm_from_nccl(NULL, bogus, MPI_COMM_WORLD), IA);
  CHECK(fx, out == sentinel || out == NULL, "a failed cg_comm_from_nccl wrote %p to out", (void *)out);
#else
  note(fx, "skipped (built without NCCL)");
#endif
}

static void row_comm_nccl(fx_t *fx) {
#if CG_HAVE_NCCL
  ncclComm_t out = NULL;
  EXPECT(fx, "cg_comm_nccl", cg_comm_nccl(NULL, fx->world), IA);
  EXPECT(fx, "cg_comm_nccl", cg_comm_nccl(&out, NULL), IA);
  /* the wrong communicator: MPI and offline ones have no NCCL communicator */
  EXPECT(fx, "cg_comm_nccl", cg_comm_nccl(&out, fx->world), CG_ERR_UNSUPPORTED);
  EXPECT(fx, "cg_comm_nccl", cg_comm_nccl(&out, fx->off), CG_ERR_UNSUPPORTED);
  CHECK(fx, out == NULL, "a failed cg_comm_nccl wrote its output");
#else
  note(fx, "skipped (built without NCCL)");
#endif
}

static void row_nccl_arena_create(fx_t *fx) {
#if CG_HAVE_NCCL
  const char *fn = "cg_nccl_arena_create";
  cg_arena_t *sentinel = (cg_arena_t *)fx, *out = sentinel;
  cg_arena_opts_t o = CG_ARENA_OPTS_INIT;
  EXPECT(fx, fn, cg_nccl_arena_create(NULL, fx->world, 64, NULL), IA);
  EXPECT(fx, fn, cg_nccl_arena_create(&out, NULL, 64, NULL), IA);
  o.size = 0;
  EXPECT(fx, fn, cg_nccl_arena_create(&out, fx->world, 64, &o), IA);
  /* symmetric memory is NCCL's: MPI and offline communicators have none */
  EXPECT(fx, fn, cg_nccl_arena_create(&out, fx->world, 64, NULL), CG_ERR_UNSUPPORTED);
  EXPECT(fx, fn, cg_nccl_arena_create(&out, fx->off, 64, NULL), CG_ERR_UNSUPPORTED);
  CHECK(fx, out == sentinel, "a failed cg_nccl_arena_create wrote %p to out", (void *)out);
#else
  note(fx, "skipped (built without NCCL)");
#endif
}

/* ---- rows: names and status (static text; unknown values are not errors) */

static void row_dtype_size(fx_t *fx) {
  CHECK(fx, cg_dtype_size(BAD_DTYPE_1) == 0, "cg_dtype_size(COUNT) is not 0");
  CHECK(fx, cg_dtype_size(BAD_DTYPE_2) == 0, "cg_dtype_size(-1) is not 0");
  CHECK(fx, cg_dtype_size(BAD_DTYPE_3) == 0, "cg_dtype_size(INT_MAX) is not 0");
  check_unchanged(fx, __LINE__, "cg_dtype_size");
}
static void check_unknown(fx_t *fx, const char *fn, const char *got, const char *want) {
  CHECK(fx, got && strcmp(got, want) == 0, "%s of an unknown value gave '%s', expected '%s'", fn, got ? got : "(null)",
        want);
}
static void row_dtype_name(fx_t *fx) {
  check_unknown(fx, "cg_dtype_name", cg_dtype_name(BAD_DTYPE_1), "unknown");
  check_unknown(fx, "cg_dtype_name", cg_dtype_name(BAD_DTYPE_2), "unknown");
  check_unknown(fx, "cg_dtype_name", cg_dtype_name(BAD_DTYPE_3), "unknown");
}
static void row_redop_name(fx_t *fx) {
  check_unknown(fx, "cg_redop_name", cg_redop_name(BAD_OP_1), "unknown");
  check_unknown(fx, "cg_redop_name", cg_redop_name(BAD_OP_2), "unknown");
}
static void row_node_kind_name(fx_t *fx) {
  check_unknown(fx, "cg_node_kind_name", cg_node_kind_name(CG_NODE_KIND_COUNT), "unknown");
  check_unknown(fx, "cg_node_kind_name", cg_node_kind_name((cg_node_kind_t)-1), "unknown");
}
static void row_backend_kind_name(fx_t *fx) {
  check_unknown(fx, "cg_backend_kind_name", cg_backend_kind_name(CG_BACKEND_COUNT), "unknown");
  check_unknown(fx, "cg_backend_kind_name", cg_backend_kind_name((cg_backend_kind_t)-1), "unknown");
}
static void row_status_string(fx_t *fx) {
  check_unknown(fx, "cg_status_string", cg_status_string((cg_status_t)-1), "unknown status");
  check_unknown(fx, "cg_status_string", cg_status_string((cg_status_t)16), "unknown status");
  check_unknown(fx, "cg_status_string", cg_status_string((cg_status_t)INT_MAX), "unknown status");
}
static void row_error_last(fx_t *fx) {
  /* never NULL; after a failure, that failure's detail */
  clear_error();
  CHECK(fx, cg_error_last() != NULL && *cg_error_last() == '\0', "cg_error_last() after clearing is not empty");
  cg_status_t st = cg_arena_reset(NULL);
  CHECK(fx, st == IA && strstr(cg_error_last(), "cg_arena_reset"), "cg_error_last() after a failure: '%s'",
        cg_error_last());
}

/* ---- rows: compiling and plans */

static void row_compile(fx_t *fx) {
  const char *fn = "cg_compile";
  cg_plan_t *sentinel = (cg_plan_t *)fx, *out = sentinel;
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  /* every rank fails alike before any collective step */
  EXPECT(fx, fn, cg_compile(NULL, fx->g, NULL), IA);
  EXPECT(fx, fn, cg_compile(&out, NULL, NULL), IA);
  o.size = 0;
  EXPECT(fx, fn, cg_compile(&out, fx->g, &o), IA);
  o.size = sizeof o + 1;
  EXPECT(fx, fn, cg_compile(&out, fx->g, &o), IA);
  CHECK(fx, out == sentinel || out == NULL, "a failed cg_compile wrote %p to out", (void *)out);
}

static void row_plan_destroy(fx_t *fx) { EXPECT_VOID(fx, cg_plan_destroy(NULL)); }

static void row_plan_run(fx_t *fx) {
  EXPECT(fx, "cg_plan_run", cg_plan_run(NULL), IA);
  /* the wrong communicator: an offline plan compiles but cannot run */
  clear_error();
  cg_status_t st = cg_plan_run(fx->offplan);
  CHECK(fx, st == CG_ERR_UNSUPPORTED, "cg_plan_run of an offline plan returned %s", cg_status_string(st));
  CHECK(fx, strstr(cg_error_last(), "cg_plan_run") != NULL, "cg_plan_run: cg_error_last() '%s' does not name it",
        cg_error_last());
  check_unchanged(fx, __LINE__, "cg_plan_run(offline plan)");
}

static void row_plan_start(fx_t *fx) {
  const char *fn = "cg_plan_start";
  EXPECT(fx, fn, cg_plan_start(NULL), IA);
  EXPECT(fx, fn, cg_plan_start(fx->offplan), CG_ERR_UNSUPPORTED);
  /* starting a running plan: CG_ERR_IN_PROGRESS, and the run goes on */
  cg_status_t st = cg_plan_start(fx->plan);
  CHECK(fx, st == CG_SUCCESS, "cg_plan_start: %s", cg_error_last());
  int done = 0;
  if (st == CG_SUCCESS) {
    clear_error();
    cg_status_t again = cg_plan_start(fx->plan);
    /* a run may finish inside cg_plan_start (one rank, or all steps done) */
    CHECK(fx, cg_plan_test(&done, fx->plan) == CG_SUCCESS, "cg_plan_test: %s", cg_error_last());
    CHECK(fx, again == CG_ERR_IN_PROGRESS || (again == CG_SUCCESS && done), "starting a running plan returned %s",
          cg_status_string(again));
    if (again == CG_ERR_IN_PROGRESS)
      CHECK(fx, strstr(cg_error_last(), fn) != NULL, "detail '%s' does not name %s", cg_error_last(), fn);
    /* the second start, had it succeeded, must be finished too */
    CHECK(fx, cg_plan_wait(fx->plan) == CG_SUCCESS, "cg_plan_wait: %s", cg_error_last());
  }
  /* the run rewrote the outputs with the same values: take a new base */
  snap_free(fx->base);
  snap_take(fx->base, fx);
}

static void row_plan_test(fx_t *fx) {
  int done = -7;
  EXPECT(fx, "cg_plan_test", cg_plan_test(NULL, fx->plan), IA);
  EXPECT(fx, "cg_plan_test", cg_plan_test(&done, NULL), IA);
  CHECK(fx, done == -7, "a failed cg_plan_test wrote %d", done);
  /* a plan that is not running (or cannot run) is done */
  EXPECT_NOOP(fx, cg_plan_test(&done, fx->offplan));
  CHECK(fx, done == 1, "cg_plan_test of a plan not running gave done = %d", done);
}

static void row_plan_wait(fx_t *fx) {
  EXPECT(fx, "cg_plan_wait", cg_plan_wait(NULL), IA);
  EXPECT_NOOP(fx, cg_plan_wait(fx->offplan));
}

static void row_plan_rebind(fx_t *fx) {
  const char *fn = "cg_plan_rebind";
  int32_t *b = fx->buf;
  cg_node_t bad[5];
  bad_nodes(fx, bad);
  cg_rebind_t one = {fx->n_sum, b + 16, b + 20};
  EXPECT(fx, fn, cg_plan_rebind(NULL, &one, 1), IA);
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, NULL, 1), IA);
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, NULL, SIZE_MAX), IA);
  /* zero entries: nothing to do */
  EXPECT_NOOP(fx, cg_plan_rebind(fx->plan, NULL, 0));
  EXPECT_NOOP(fx, cg_plan_rebind(fx->plan, &one, 0));
  for (int i = 0; i < 5; i++) {
    cg_rebind_t e = {bad[i], b + 16, b + 20};
    EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), CG_ERR_INVALID_NODE);
    /* a bad entry after a good one: the good one is not applied either */
    cg_rebind_t two[2] = {one, e};
    EXPECT(fx, fn, cg_plan_rebind(fx->plan, two, 2), CG_ERR_INVALID_NODE);
  }
  cg_rebind_t e;
  e = (cg_rebind_t){fx->n_barrier, NULL, NULL}; /* no buffers to rebind */
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), IA);
  e = (cg_rebind_t){fx->n_host, NULL, NULL};
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), IA);
  cg_rebind_t twice[2] = {one, one};
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, twice, 2), IA);
  e = (cg_rebind_t){fx->n_send, b + 16, b + 20}; /* a send's recv must be NULL */
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), IA);
  e = (cg_rebind_t){fx->n_recv, b + 16, b + 20}; /* a receive's send must be NULL */
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), IA);
  e = (cg_rebind_t){fx->n_sum, NULL, b + 20}; /* NULL with bytes */
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), IA);
  e = (cg_rebind_t){fx->n_sum, NEAR_END, b + 20}; /* past the end of memory */
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), CG_ERR_OVERFLOW);
  e = (cg_rebind_t){fx->n_sum, b + 16, b + 17}; /* an overlap that is no in-place form */
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), CG_ERR_ALIAS, IA);
  e = (cg_rebind_t){fx->n_sum, b + 16, b + 16}; /* compiled out of place, now in place */
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), IA);
  e = (cg_rebind_t){fx->n_sum, b + 16, b + 10}; /* writes the send node's bytes: unordered */
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), CG_ERR_ALIAS);
  /* the wrong plan: a node of the graph, rebound on the offline plan */
  EXPECT(fx, fn, cg_plan_rebind(fx->offplan, &one, 1), CG_ERR_INVALID_NODE);
  /* a running plan is not rebound */
  cg_status_t st = cg_plan_start(fx->plan);
  CHECK(fx, st == CG_SUCCESS, "cg_plan_start: %s", cg_error_last());
  if (st == CG_SUCCESS) {
    int done = 0;
    clear_error();
    cg_status_t got = cg_plan_rebind(fx->plan, &one, 1);
    cg_status_t tested = cg_plan_test(&done, fx->plan);
    CHECK(fx, got == CG_ERR_IN_PROGRESS || (got == CG_SUCCESS && done && tested == CG_SUCCESS),
          "rebinding a running plan returned %s (%s)", cg_status_string(got), cg_error_last());
    CHECK(fx, cg_plan_wait(fx->plan) == CG_SUCCESS, "cg_plan_wait: %s", cg_error_last());
    if (got == CG_SUCCESS) { /* finished before: rebound; put it back */
      cg_rebind_t back = {fx->n_sum, b, b + 4};
      CHECK(fx, cg_plan_rebind(fx->plan, &back, 1) == CG_SUCCESS, "rebinding back: %s", cg_error_last());
    }
  }
  snap_free(fx->base);
  snap_take(fx->base, fx);
#if CG_HAVE_CUDA
  if (!fx->has_gpu) {
    note(fx, "device pointers in a host plan: skipped (no GPU)");
    return;
  }
  void *dev = NULL;
  if (cudaMalloc(&dev, 64) != cudaSuccess) {
    cudaGetLastError();
    note(fx, "device pointers in a host plan: skipped (cudaMalloc failed)");
    return;
  }
  e = (cg_rebind_t){fx->n_sum, dev, (char *)dev + 32};
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), IA);
  e = (cg_rebind_t){fx->n_send, dev, NULL};
  EXPECT(fx, fn, cg_plan_rebind(fx->plan, &e, 1), IA);
  cudaFree(dev);
  /* host memory where the plan needs device memory: a plan of an mpi-staged
   * communicator on this rank's GPU */
  cg_comm_t *dc = device_comm_open(fx, "host pointers in a device plan");
  if (!dc) return;
  int device = 0;
  ck_assert_cg_ok(cg_comm_device(&device, dc));
  void *dbuf = NULL;
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device);
  ck_assert_int_eq(cudaMalloc(&dbuf, 64), cudaSuccess);
  cg_graph_t *dg = NULL;
  cg_plan_t *dp = NULL;
  cg_node_t dn;
  ck_assert_cg_ok(cg_graph_create(&dg, NULL));
  ck_assert_cg_ok(cg_allreduce(&dn, dg, dc, dbuf, (char *)dbuf + 32, 4, CG_INT32, CG_SUM));
  st = cg_compile(&dp, dg, NULL);
  ck_assert_all_ranks(st == CG_SUCCESS, "compiling a device plan");
  int pageable_ok = 0;
  cudaDeviceGetAttribute(&pageable_ok, cudaDevAttrPageableMemoryAccess, device);
  e = (cg_rebind_t){dn, b + 16, b + 20};
  clear_error();
  st = cg_plan_rebind(dp, &e, 1);
  if (pageable_ok)
    note(fx, "rebinding a device plan to pageable host memory: not refused (device %d reads pageable memory)", device);
  else
    CHECK(fx, st == IA && strstr(cg_error_last(), fn), "rebinding a device plan to host memory returned %s (%s)",
          cg_status_string(st), cg_error_last());
  cg_plan_destroy(dp);
  cg_graph_destroy(dg);
  cg_comm_destroy(dc);
  cudaFree(dbuf);
  cudaSetDevice(prev);
  check_unchanged(fx, __LINE__, "a device plan on the side");
#endif
}

static void row_plan_tune(fx_t *fx) {
  const char *fn = "cg_plan_tune";
  cg_plan_t *out = NULL;
  cg_tune_opts_t o = CG_TUNE_OPTS_INIT;
  EXPECT(fx, fn, cg_plan_tune(NULL, fx->plan, fx->g, NULL), IA);
  EXPECT(fx, fn, cg_plan_tune(&out, NULL, fx->g, NULL), IA);
  EXPECT(fx, fn, cg_plan_tune(&out, fx->plan, NULL, NULL), IA);
  EXPECT(fx, fn, cg_plan_tune(&out, fx->plan, fx->other, NULL), IA); /* not its graph */
  o.size = 1;
  EXPECT(fx, fn, cg_plan_tune(&out, fx->plan, fx->g, &o), IA);
  o = (cg_tune_opts_t)CG_TUNE_OPTS_INIT;
  o.replays = 0;
  EXPECT(fx, fn, cg_plan_tune(&out, fx->plan, fx->g, &o), IA);
  o.replays = 1001;
  EXPECT(fx, fn, cg_plan_tune(&out, fx->plan, fx->g, &o), IA);
  o = (cg_tune_opts_t)CG_TUNE_OPTS_INIT;
  o.compile.size = 3;
  EXPECT(fx, fn, cg_plan_tune(&out, fx->plan, fx->g, &o), IA);
  /* offline communicators compile, they do not run: nothing to profile */
  EXPECT(fx, fn, cg_plan_tune(&out, fx->offplan, fx->offg, NULL), CG_ERR_UNSUPPORTED);
  CHECK(fx, out == NULL, "cg_plan_tune set *out on failure");
}

static void row_plan_save_tuning(fx_t *fx) {
  const char *fn = "cg_plan_save_tuning";
  EXPECT(fx, fn, cg_plan_save_tuning(NULL, "tuning.txt"), IA);
  EXPECT(fx, fn, cg_plan_save_tuning(fx->plan, NULL), IA);
  EXPECT(fx, fn, cg_plan_save_tuning(fx->plan, ""), IA);
  /* the fixture's plan was compiled without a tuning: refused before any file is written */
  EXPECT(fx, fn, cg_plan_save_tuning(fx->plan, "/nonexistent/tuning.txt"), IA);
}

static void row_plan_trace(fx_t *fx) {
  const char *fn = "cg_plan_trace";
  cg_trace_opts_t o = CG_TRACE_OPTS_INIT;
  EXPECT(fx, fn, cg_plan_trace(NULL, NULL, NULL), IA);
  o.size = 1;
  EXPECT(fx, fn, cg_plan_trace(fx->plan, NULL, &o), IA);
  o = (cg_trace_opts_t)CG_TRACE_OPTS_INIT;
  o.replays = 0;
  EXPECT(fx, fn, cg_plan_trace(fx->plan, NULL, &o), IA);
  o.replays = 1001;
  EXPECT(fx, fn, cg_plan_trace(fx->plan, NULL, &o), IA);
  EXPECT(fx, fn, cg_plan_trace(fx->plan, "", NULL), IA);
  /* offline communicators compile, they do not run: nothing to profile */
  EXPECT(fx, fn, cg_plan_trace(fx->offplan, NULL, NULL), CG_ERR_UNSUPPORTED);
  CHECK(fx, !fx->plan->measured && !fx->offplan->measured, "cg_plan_trace kept a measurement on failure");
}

static void row_plan_stats(fx_t *fx) {
  cg_plan_stats_t s;
  EXPECT(fx, "cg_plan_stats", cg_plan_stats(NULL, fx->plan), IA);
  EXPECT(fx, "cg_plan_stats", cg_plan_stats(&s, NULL), IA);
}

static void row_plan_write_dot(fx_t *fx) {
  const char *fn = "cg_plan_write_dot";
  EXPECT(fx, fn, cg_plan_write_dot(NULL, stdout), IA);
  EXPECT(fx, fn, cg_plan_write_dot(fx->plan, NULL), IA);
  FILE *f = read_only_stream();
  EXPECT(fx, fn, cg_plan_write_dot(fx->plan, f), CG_ERR_IO);
  fclose(f);
}

static void row_plan_dump(fx_t *fx) {
  const char *fn = "cg_plan_dump";
  EXPECT(fx, fn, cg_plan_dump(NULL, stdout), IA);
  EXPECT(fx, fn, cg_plan_dump(fx->plan, NULL), IA);
  FILE *f = read_only_stream();
  EXPECT(fx, fn, cg_plan_dump(fx->plan, f), CG_ERR_IO);
  fclose(f);
}

static void row_plan_timeout(fx_t *fx) {
  const char *fn = "cg_plan_timeout";
  double seconds = -1;
  EXPECT(fx, fn, cg_plan_timeout(NULL, fx->plan), IA);
  EXPECT(fx, fn, cg_plan_timeout(&seconds, NULL), IA);
  ck_assert(seconds == -1); /* outputs untouched on failure */
}

static void row_flight_dump(fx_t *fx) {
  const char *fn = "cg_flight_dump";
  EXPECT(fx, fn, cg_flight_dump(NULL), IA);
  FILE *f = read_only_stream();
  EXPECT(fx, fn, cg_flight_dump(f), CG_ERR_IO);
  fclose(f);
}

/* Any handler (or none) is valid: setting one changes no object, and the
 * previous one comes back. */
static void count_timeouts(cg_status_t st, const char *report, void *arg) {
  (void)st, (void)report;
  ++*(int *)arg;
}

static void row_set_timeout_handler(fx_t *fx) {
  static int calls;
  EXPECT_NOOP(fx, cg_set_timeout_handler(count_timeouts, &calls));
  EXPECT_NOOP(fx, cg_set_timeout_handler(NULL, NULL));
  ck_assert_int_eq(calls, 0);
}

/* ---- rows: CUDA (names always in the table; bodies in CUDA builds) */

static void row_child_graph(fx_t *fx) {
#if CG_HAVE_CUDA
  const char *fn = "cg_child_graph";
  EXPECT(fx, fn, cg_child_graph(NULL, NULL, NULL, NULL), IA);
  EXPECT(fx, fn, cg_child_graph(NULL, fx->g, NULL, NULL), IA);
  if (!fx->has_gpu) {
    note(fx, "bad access with a real child graph: skipped (no GPU)");
    return;
  }
  cudaGraph_t child = NULL;
  ck_assert_int_eq(cudaGraphCreate(&child, 0), cudaSuccess);
  cg_access_t a = CG_ACCESS_INIT;
  a.size = 0;
  EXPECT(fx, fn, cg_child_graph(NULL, fx->g, child, &a), IA);
  a = (cg_access_t)CG_ACCESS_INIT;
  a.everything = 0;
  a.n_writes = 1;
  EXPECT(fx, fn, cg_child_graph(NULL, fx->g, child, &a), IA);
  cudaGraphDestroy(child);
#else
  note(fx, "skipped (built without CUDA)");
#endif
}

#if CG_HAVE_CUDA
static void event_row(fx_t *fx, const char *fn,
                      cg_status_t (*call)(cg_node_t *, cg_graph_t *, cudaEvent_t, const cg_access_t *)) {
  /* a non-NULL handle that is never used: each call below fails first */
  cudaEvent_t unused = (cudaEvent_t)(void *)fx;
  cg_access_t a = CG_ACCESS_INIT;
  EXPECT(fx, fn, call(NULL, NULL, unused, NULL), IA);
  EXPECT(fx, fn, call(NULL, fx->g, NULL, NULL), IA);
  a.size = 1;
  EXPECT(fx, fn, call(NULL, fx->g, unused, &a), IA);
  a = (cg_access_t)CG_ACCESS_INIT;
  a.everything = 0;
  a.n_reads = 2;
  EXPECT(fx, fn, call(NULL, fx->g, unused, &a), IA);
  cg_range_t r = {NEAR_END, 64};
  a.reads = &r;
  a.n_reads = 1;
  EXPECT(fx, fn, call(NULL, fx->g, unused, &a), CG_ERR_OVERFLOW);
}
#endif

static void row_event_wait(fx_t *fx) {
#if CG_HAVE_CUDA
  event_row(fx, "cg_event_wait", cg_event_wait);
#else
  note(fx, "skipped (built without CUDA)");
#endif
}

static void row_event_record(fx_t *fx) {
#if CG_HAVE_CUDA
  event_row(fx, "cg_event_record", cg_event_record);
#else
  note(fx, "skipped (built without CUDA)");
#endif
}

static void row_plan_launch(fx_t *fx) {
#if CG_HAVE_CUDA
  EXPECT(fx, "cg_plan_launch", cg_plan_launch(NULL, 0), IA);
  /* host plans run with cg_plan_run */
  EXPECT(fx, "cg_plan_launch", cg_plan_launch(fx->plan, 0), CG_ERR_UNSUPPORTED);
  EXPECT(fx, "cg_plan_launch", cg_plan_launch(fx->offplan, 0), CG_ERR_UNSUPPORTED);
#else
  note(fx, "skipped (built without CUDA)");
#endif
}

static void row_plan_cuda_graph(fx_t *fx) {
#if CG_HAVE_CUDA
  cudaGraph_t out = NULL;
  EXPECT(fx, "cg_plan_cuda_graph", cg_plan_cuda_graph(NULL, fx->plan), IA);
  EXPECT(fx, "cg_plan_cuda_graph", cg_plan_cuda_graph(&out, NULL), IA);
  EXPECT(fx, "cg_plan_cuda_graph", cg_plan_cuda_graph(&out, fx->plan), CG_ERR_UNSUPPORTED);
  CHECK(fx, out == NULL, "a failed cg_plan_cuda_graph wrote its output");
#else
  note(fx, "skipped (built without CUDA)");
#endif
}

/* ---- rows: arenas */

static void row_arena_create(fx_t *fx) {
  const char *fn = "cg_arena_create";
  cg_arena_t *sentinel = (cg_arena_t *)fx, *out = sentinel;
  cg_arena_opts_t o = CG_ARENA_OPTS_INIT;
  EXPECT(fx, fn, cg_arena_create(NULL, 64, NULL), IA);
  o.size = 0;
  EXPECT(fx, fn, cg_arena_create(&out, 64, &o), IA);
  o = (cg_arena_opts_t)CG_ARENA_OPTS_INIT;
  o.alignment = 3;
  EXPECT(fx, fn, cg_arena_create(&out, 64, &o), IA);
  o.alignment = SIZE_MAX;
  EXPECT(fx, fn, cg_arena_create(&out, 64, &o), IA);
  o = (cg_arena_opts_t)CG_ARENA_OPTS_INIT;
  o.device = -2;
  EXPECT(fx, fn, cg_arena_create(&out, 64, &o), IA);
  EXPECT(fx, fn, cg_arena_create(&out, SIZE_MAX, NULL), CG_ERR_OVERFLOW);
  /* a device this process does not have */
  o = (cg_arena_opts_t)CG_ARENA_OPTS_INIT;
  o.device = 9999;
  EXPECT(fx, fn, cg_arena_create(&out, 64, &o), CG_ERR_BACKEND, CG_ERR_UNSUPPORTED, IA);
  CHECK(fx, out == sentinel || out == NULL, "a failed cg_arena_create wrote %p to out", (void *)out);
  /* zero capacity is valid: an arena that only hands out empty pieces */
  cg_arena_t *empty = NULL;
  void *p = NULL;
  ck_assert_cg_ok(cg_arena_create(&empty, 0, NULL));
  CHECK(fx, cg_arena_alloc(&p, empty, 0, CG_INT8) == CG_SUCCESS && p != NULL, "an empty piece of an empty arena");
  CHECK(fx, cg_arena_alloc(&p, empty, 1, CG_INT8) == CG_ERR_NO_MEMORY, "one byte of an empty arena");
  cg_arena_destroy(empty);
}

static void row_arena_alloc(fx_t *fx) {
  const char *fn = "cg_arena_alloc";
  void *sentinel = fx, *out = sentinel;
  EXPECT(fx, fn, cg_arena_alloc(NULL, fx->arena, 1, CG_INT8), IA);
  EXPECT(fx, fn, cg_arena_alloc(&out, NULL, 1, CG_INT8), IA);
  EXPECT(fx, fn, cg_arena_alloc(&out, fx->arena, 1, BAD_DTYPE_1), CG_ERR_INVALID_ENUM);
  EXPECT(fx, fn, cg_arena_alloc(&out, fx->arena, 1, BAD_DTYPE_2), CG_ERR_INVALID_ENUM);
  EXPECT(fx, fn, cg_arena_alloc(&out, fx->arena, SIZE_MAX, CG_FLOAT64), CG_ERR_OVERFLOW);
  EXPECT(fx, fn, cg_arena_alloc(&out, fx->arena, SIZE_MAX / 2 + 1, CG_FLOAT16), CG_ERR_OVERFLOW);
  EXPECT(fx, fn, cg_arena_alloc(&out, fx->arena, SIZE_MAX, CG_INT8), CG_ERR_NO_MEMORY);
  EXPECT(fx, fn, cg_arena_alloc(&out, fx->arena, 4096, CG_INT8), CG_ERR_NO_MEMORY);
  CHECK(fx, out == sentinel, "a failed cg_arena_alloc wrote %p to out", out);
}

static void row_arena_usage(fx_t *fx) {
  size_t used = 7, cap = 7;
  EXPECT(fx, "cg_arena_usage", cg_arena_usage(&used, &cap, NULL), IA);
  CHECK(fx, used == 7 && cap == 7, "a failed cg_arena_usage wrote its outputs");
  EXPECT_NOOP(fx, cg_arena_usage(NULL, NULL, fx->arena)); /* either may be NULL */
}

static void row_arena_reset(fx_t *fx) { EXPECT(fx, "cg_arena_reset", cg_arena_reset(NULL), IA); }

static void row_arena_destroy(fx_t *fx) { EXPECT_VOID(fx, cg_arena_destroy(NULL)); }

/* ---- the table: one row per CG_API function (scripts/check-arg-table) */

typedef struct row {
  const char *name;
  void (*run)(fx_t *fx);
} row_t;

static const row_t rows[] = {
    /* status.h */
    {"cg_status_string", row_status_string},
    {"cg_error_last", row_error_last},
    /* types.h */
    {"cg_dtype_size", row_dtype_size},
    {"cg_dtype_name", row_dtype_name},
    {"cg_redop_name", row_redop_name},
    {"cg_node_kind_name", row_node_kind_name},
    /* comm.h */
    {"cg_backend_kind_name", row_backend_kind_name},
    {"cg_comm_create_offline", row_comm_create_offline},
    {"cg_comm_destroy", row_comm_destroy},
    {"cg_comm_rank", row_comm_rank},
    {"cg_comm_size", row_comm_size},
    {"cg_comm_backend_name", row_comm_backend_name},
    {"cg_comm_device", row_comm_device},
    /* mpi.h */
    {"cg_comm_create", row_comm_create},
    {"cg_comm_mpi", row_comm_mpi},
    {"cg_mpi_init", row_mpi_init},
    {"cg_mpi_finalize", row_mpi_finalize},
    {"cg_comm_create_fortran", row_comm_create_fortran},
    {"cg_mpi_world_fortran", row_mpi_world_fortran},
    {"cg_mpi_library_version", row_mpi_library_version},
    {"cg_info_write", row_info_write},
    {"cg_info_write_fortran", row_info_write_fortran},
    /* nccl.h (NCCL builds) */
    {"cg_comm_from_nccl", row_comm_from_nccl},
    {"cg_comm_nccl", row_comm_nccl},
    {"cg_nccl_arena_create", row_nccl_arena_create},
    /* graph.h */
    {"cg_graph_create", row_graph_create},
    {"cg_graph_destroy", row_graph_destroy},
    {"cg_allreduce", row_allreduce},
    {"cg_broadcast", row_broadcast},
    {"cg_reduce", row_reduce},
    {"cg_allgather", row_allgather},
    {"cg_reduce_scatter", row_reduce_scatter},
    {"cg_alltoall", row_alltoall},
    {"cg_gather", row_gather},
    {"cg_scatter", row_scatter},
    {"cg_send", row_send},
    {"cg_recv", row_recv},
    {"cg_barrier", row_barrier},
    {"cg_host_func", row_host_func},
    {"cg_depend", row_depend},
    {"cg_node_name", row_node_name},
    {"cg_graph_stats", row_graph_stats},
    {"cg_graph_write_dot", row_graph_write_dot},
    /* cuda.h (CUDA builds) */
    {"cg_child_graph", row_child_graph},
    {"cg_event_wait", row_event_wait},
    {"cg_event_record", row_event_record},
    {"cg_plan_launch", row_plan_launch},
    {"cg_plan_cuda_graph", row_plan_cuda_graph},
    /* plan.h */
    {"cg_compile", row_compile},
    {"cg_plan_destroy", row_plan_destroy},
    {"cg_plan_run", row_plan_run},
    {"cg_plan_start", row_plan_start},
    {"cg_plan_test", row_plan_test},
    {"cg_plan_wait", row_plan_wait},
    {"cg_plan_rebind", row_plan_rebind},
    {"cg_plan_stats", row_plan_stats},
    {"cg_plan_tune", row_plan_tune},
    {"cg_plan_save_tuning", row_plan_save_tuning},
    {"cg_plan_trace", row_plan_trace},
    {"cg_plan_write_dot", row_plan_write_dot},
    {"cg_plan_dump", row_plan_dump},
    {"cg_plan_timeout", row_plan_timeout},
    {"cg_flight_dump", row_flight_dump},
    {"cg_set_timeout_handler", row_set_timeout_handler},
    /* arena.h */
    {"cg_arena_create", row_arena_create},
    {"cg_arena_alloc", row_arena_alloc},
    {"cg_arena_usage", row_arena_usage},
    {"cg_arena_reset", row_arena_reset},
    {"cg_arena_destroy", row_arena_destroy},
};
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

START_TEST(args__row) {
  const row_t *row = &rows[_i];
  fx_t fx;
  fx_open(&fx, row->name);
  row->run(&fx);
  check_unchanged(&fx, __LINE__, "the whole row");
  fx_verify_run(&fx);
  note(&fx, "%d checks", fx.checks);
  fx_close(&fx);
  char what[sizeof fx.msg + 128];
  snprintf(what, sizeof what, "row %s (%d checks):%s", row->name, fx.checks, fx.msg);
  ck_assert_all_ranks(fx.ok, what);
}
END_TEST

START_TEST(args__table_has_no_duplicates) {
  for (int i = 0; i < N_ROWS; i++)
    for (int j = i + 1; j < N_ROWS; j++) ck_assert_msg(strcmp(rows[i].name, rows[j].name) != 0, "row %s twice", rows[i].name);
  ck_assert_int_eq(N_ROWS, 69);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_args");
  TCase *tc = cg_mpi_tcase("args");
  tcase_add_test(tc, args__table_has_no_duplicates);
  tcase_add_loop_test(tc, args__row, 0, N_ROWS);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
