/* Argument-safety rows (test_mpi_args.c): recording collectives, user
 * code, edges, names, graphs. */
#include "test_mpi_args.h"

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

void row_broadcast(fx_t *fx) {
  collective_row(fx, "cg_broadcast", do_broadcast, HAS_ROOT | USES_SEND | USES_RECV);
}
void row_reduce(fx_t *fx) {
  collective_row(fx, "cg_reduce", do_reduce, HAS_OP | HAS_ROOT | USES_SEND | USES_RECV);
}
void row_allgather(fx_t *fx) {
  collective_row(fx, "cg_allgather", do_allgather, SCALES | USES_SEND | USES_RECV);
}
void row_reduce_scatter(fx_t *fx) {
  collective_row(fx, "cg_reduce_scatter", do_reduce_scatter, HAS_OP | SCALES | USES_SEND | USES_RECV);
}
void row_alltoall(fx_t *fx) {
  collective_row(fx, "cg_alltoall", do_alltoall, SCALES | USES_SEND | USES_RECV | ALIAS_FREE);
}
void row_gather(fx_t *fx) {
  collective_row(fx, "cg_gather", do_gather, HAS_ROOT | SCALES | USES_SEND | USES_RECV);
}
void row_scatter(fx_t *fx) {
  collective_row(fx, "cg_scatter", do_scatter, HAS_ROOT | SCALES | USES_SEND | USES_RECV);
}
void row_send(fx_t *fx) { collective_row(fx, "cg_send", do_send, HAS_PEER | USES_SEND); }
void row_recv(fx_t *fx) { collective_row(fx, "cg_recv", do_recv, HAS_PEER | USES_RECV); }

#if CG_HAVE_CUDA
/* An mpi-staged communicator on this rank's GPU (collective); NULL, with a
 * note, where some rank cannot have one. */
cg_comm_t *device_comm_open(fx_t *fx, const char *what) {
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

void row_allreduce(fx_t *fx) {
  collective_row(fx, "cg_allreduce", do_allreduce, HAS_OP | USES_SEND | USES_RECV);
#if CG_HAVE_CUDA
  allreduce_memory_rows(fx);
#else
  note(fx, "memory placement: skipped (built without CUDA)");
#endif
}

void row_barrier(fx_t *fx) {
  EXPECT(fx, "cg_barrier", cg_barrier(NULL, NULL, fx->world), IA);
  EXPECT(fx, "cg_barrier", cg_barrier(NULL, fx->g, NULL), IA);
}

void row_host_func(fx_t *fx) {
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
void bad_nodes(const fx_t *fx, cg_node_t out[5]) {
  out[0] = fx->foreign;                                   /* another live graph */
  out[1] = fx->dead;                                      /* a destroyed graph */
  out[2] = (cg_node_t)CG_NODE_NULL;                       /* never recorded */
  out[3] = (cg_node_t){fx->n_sum.graph, N_PLAN_NODES};    /* past the end */
  out[4] = (cg_node_t){fx->n_sum.graph, UINT32_MAX};
}

void row_depend(fx_t *fx) {
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

void row_node_name(fx_t *fx) {
  const char *fn = "cg_node_name";
  cg_node_t bad[5];
  bad_nodes(fx, bad);
  EXPECT(fx, fn, cg_node_name(NULL, fx->n_sum, "x"), IA);
  EXPECT(fx, fn, cg_node_name(fx->g, fx->n_sum, NULL), IA);
  for (int i = 0; i < 5; i++) EXPECT(fx, fn, cg_node_name(fx->g, bad[i], "x"), CG_ERR_INVALID_NODE);
}

void row_graph_create(fx_t *fx) {
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

void row_graph_destroy(fx_t *fx) {
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

void row_graph_stats(fx_t *fx) {
  cg_graph_stats_t s;
  EXPECT(fx, "cg_graph_stats", cg_graph_stats(NULL, fx->g), IA);
  EXPECT(fx, "cg_graph_stats", cg_graph_stats(&s, NULL), IA);
}

/* A stream that refuses writes. */

void row_graph_write_dot(fx_t *fx) {
  const char *fn = "cg_graph_write_dot";
  EXPECT(fx, fn, cg_graph_write_dot(NULL, stdout), IA);
  EXPECT(fx, fn, cg_graph_write_dot(fx->g, NULL), IA);
  FILE *f = read_only_stream();
  EXPECT(fx, fn, cg_graph_write_dot(fx->g, f), CG_ERR_IO);
  fclose(f);
}
