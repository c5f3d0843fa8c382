/* The argument-safety suite's fixture and expectations (test_mpi_args.h). */
#include "test_mpi_args.h"

void note(fx_t *fx, const char *fmt, ...) {
  if (fx->rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  printf("  row %s: ", fx->row);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
}

void soft_fail(fx_t *fx, int line, const char *fmt, ...) {
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

char *text_of(cg_status_t (*write)(const void *, FILE *), const void *obj) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  cg_status_t st = write(obj, f);
  fclose(f);
  ck_assert_msg(st == CG_SUCCESS, "writing a snapshot text: %s", cg_error_last());
  return text;
}
cg_status_t write_graph_dot(const void *g, FILE *f) { return cg_graph_write_dot(g, f); }
cg_status_t write_plan_dot(const void *p, FILE *f) { return cg_plan_write_dot(p, f); }
cg_status_t write_plan_dump(const void *p, FILE *f) { return cg_plan_dump(p, f); }

/* ---- snapshots */

static void comm_snap(comm_snap_t *s, const cg_comm_t *c) {
  ck_assert_cg_ok(cg_comm_rank(&s->rank, c));
  ck_assert_cg_ok(cg_comm_size(&s->size, c));
  ck_assert_cg_ok(cg_comm_device(&s->device, c));
  ck_assert_cg_ok(cg_comm_backend_name(&s->backend, c));
  s->refs = atomic_load(&c->refs);
}

void snap_take(snap_t *s, const fx_t *fx) {
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

void snap_free(snap_t *s) {
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

void check_unchanged(fx_t *fx, int line, const char *what) {
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
void clear_error(void) { cg_fail(CG_SUCCESS, "%s", ""); }

static int status_in(cg_status_t st, const cg_status_t *allowed) {
  for (; *allowed != CG_SUCCESS; allowed++)
    if (st == *allowed) return 1;
  return 0;
}

void expect_failed(fx_t *fx, int line, const char *call, cg_status_t st, const char *fn,
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

/* ---- the fixture, collective over MPI_COMM_WORLD */

void fx_open(fx_t *fx, const char *row) {
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
void fx_verify_run(fx_t *fx) {
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

void fx_close(fx_t *fx) {
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

FILE *read_only_stream(void) {
  FILE *f = fopen("/dev/null", "r");
  ck_assert_ptr_nonnull(f);
  return f;
}
