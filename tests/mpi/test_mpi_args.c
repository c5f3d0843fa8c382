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
#include "test_mpi_args.h"

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
    {"cg_mpi_before_finalize", row_mpi_before_finalize},
    {"cg_comm_create_fortran", row_comm_create_fortran},
    {"cg_mpi_world_fortran", row_mpi_world_fortran},
    {"cg_mpi_library_version", row_mpi_library_version},
    {"cg_info_write", row_info_write},
    {"cg_info_write_fortran", row_info_write_fortran},
    /* nccl.h (NCCL builds) */
    {"cg_comm_from_nccl", row_comm_from_nccl},
    {"cg_comm_nccl", row_comm_nccl},
    {"cg_nccl_arena_create", row_nccl_arena_create},
    {"cg_nccl_arena_symmetric_max", row_nccl_arena_symmetric_max},
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
  ck_assert_int_eq(N_ROWS, 71);
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
