/* Argument-safety rows (test_mpi_args.c): communicators (MPI, NCCL,
 * offline), names and status. */
#include "test_mpi_args.h"

/* ---- rows: communicators */

void row_comm_create_offline(fx_t *fx) {
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

void row_comm_create(fx_t *fx) {
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

void row_comm_destroy(fx_t *fx) {
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
void row_comm_rank(fx_t *fx) {
  int v = -7;
  EXPECT(fx, "cg_comm_rank", cg_comm_rank(NULL, fx->world), IA);
  EXPECT(fx, "cg_comm_rank", cg_comm_rank(&v, NULL), IA);
  CHECK(fx, v == -7, "a failed cg_comm_rank wrote %d", v);
}
void row_comm_size(fx_t *fx) {
  int v = -7;
  EXPECT(fx, "cg_comm_size", cg_comm_size(NULL, fx->world), IA);
  EXPECT(fx, "cg_comm_size", cg_comm_size(&v, NULL), IA);
  CHECK(fx, v == -7, "a failed cg_comm_size wrote %d", v);
}
void row_comm_backend_name(fx_t *fx) {
  const char *v = "unset";
  EXPECT(fx, "cg_comm_backend_name", cg_comm_backend_name(NULL, fx->world), IA);
  EXPECT(fx, "cg_comm_backend_name", cg_comm_backend_name(&v, NULL), IA);
  CHECK(fx, strcmp(v, "unset") == 0, "a failed cg_comm_backend_name wrote '%s'", v);
}
void row_comm_device(fx_t *fx) {
  int v = -7;
  EXPECT(fx, "cg_comm_device", cg_comm_device(NULL, fx->world), IA);
  EXPECT(fx, "cg_comm_device", cg_comm_device(&v, NULL), IA);
  CHECK(fx, v == -7, "a failed cg_comm_device wrote %d", v);
}

void row_comm_mpi(fx_t *fx) {
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
void row_mpi_init(fx_t *fx) {
  int level = -1;
  EXPECT_NOOP(fx, cg_mpi_init(NULL));
  EXPECT_NOOP(fx, cg_mpi_init(&level));
  CHECK(fx, level >= MPI_THREAD_SINGLE && level <= MPI_THREAD_MULTIPLE, "cg_mpi_init gave level %d", level);
}
void row_mpi_finalize(fx_t *fx) { EXPECT_NOOP(fx, cg_mpi_finalize()); }
/* No arguments to refuse; it closes the gate of the library's second threads'
 * MPI calls for the rest of the process (test_mpi_finalize_gate covers that),
 * which no row here needs: none waits for a roll call. */
void row_mpi_before_finalize(fx_t *fx) { EXPECT_NOOP(fx, cg_mpi_before_finalize()); }

void row_comm_create_fortran(fx_t *fx) {
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
void row_mpi_world_fortran(fx_t *fx) {
  EXPECT_VOID(fx, (void)cg_mpi_world_fortran());
  CHECK(fx, MPI_Comm_f2c(cg_mpi_world_fortran()) == MPI_COMM_WORLD, "cg_mpi_world_fortran is not MPI_COMM_WORLD's");
}

void row_mpi_library_version(fx_t *fx) {
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
void row_info_write(fx_t *fx) {
  const char *fn = "cg_info_write";
  EXPECT(fx, fn, cg_info_write(NULL, MPI_COMM_WORLD), IA);
  EXPECT(fx, fn, cg_info_write(stdout, MPI_COMM_NULL), IA);
  FILE *f = read_only_stream();
  EXPECT(fx, fn, cg_info_write(f, MPI_COMM_SELF), CG_ERR_IO);
  fclose(f);
}
void row_info_write_fortran(fx_t *fx) {
  const char *fn = "cg_info_write_fortran";
  EXPECT(fx, fn, cg_info_write_fortran(NULL, cg_mpi_world_fortran()), IA);
  EXPECT(fx, fn, cg_info_write_fortran(stdout, MPI_Comm_c2f(MPI_COMM_NULL)), IA);
  FILE *f = read_only_stream();
  EXPECT(fx, fn, cg_info_write_fortran(f, MPI_Comm_c2f(MPI_COMM_SELF)), CG_ERR_IO);
  fclose(f);
}

void row_comm_from_nccl(fx_t *fx) {
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

void row_comm_nccl(fx_t *fx) {
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

void row_nccl_arena_create(fx_t *fx) {
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

void row_nccl_arena_symmetric_max(fx_t *fx) {
#if CG_HAVE_NCCL
  const char *fn = "cg_nccl_arena_symmetric_max";
  size_t out = 12345;
  EXPECT(fx, fn, cg_nccl_arena_symmetric_max(NULL, fx->arena, CG_FLOAT32), IA);
  EXPECT(fx, fn, cg_nccl_arena_symmetric_max(&out, NULL, CG_FLOAT32), IA);
  EXPECT(fx, fn, cg_nccl_arena_symmetric_max(&out, fx->arena, BAD_DTYPE_1), CG_ERR_INVALID_ENUM);
  EXPECT(fx, fn, cg_nccl_arena_symmetric_max(&out, fx->arena, BAD_DTYPE_2), CG_ERR_INVALID_ENUM);
  /* an arena of cg_arena_create is in no symmetric window */
  EXPECT(fx, fn, cg_nccl_arena_symmetric_max(&out, fx->arena, CG_FLOAT32), CG_ERR_UNSUPPORTED);
  CHECK(fx, out == 12345, "a failed cg_nccl_arena_symmetric_max wrote %zu to out", out);
#else
  note(fx, "skipped (built without NCCL)");
#endif
}

/* ---- rows: names and status (static text; unknown values are not errors) */

void row_dtype_size(fx_t *fx) {
  CHECK(fx, cg_dtype_size(BAD_DTYPE_1) == 0, "cg_dtype_size(COUNT) is not 0");
  CHECK(fx, cg_dtype_size(BAD_DTYPE_2) == 0, "cg_dtype_size(-1) is not 0");
  CHECK(fx, cg_dtype_size(BAD_DTYPE_3) == 0, "cg_dtype_size(INT_MAX) is not 0");
  check_unchanged(fx, __LINE__, "cg_dtype_size");
}
static void check_unknown(fx_t *fx, const char *fn, const char *got, const char *want) {
  CHECK(fx, got && strcmp(got, want) == 0, "%s of an unknown value gave '%s', expected '%s'", fn, got ? got : "(null)",
        want);
}
void row_dtype_name(fx_t *fx) {
  check_unknown(fx, "cg_dtype_name", cg_dtype_name(BAD_DTYPE_1), "unknown");
  check_unknown(fx, "cg_dtype_name", cg_dtype_name(BAD_DTYPE_2), "unknown");
  check_unknown(fx, "cg_dtype_name", cg_dtype_name(BAD_DTYPE_3), "unknown");
}
void row_redop_name(fx_t *fx) {
  check_unknown(fx, "cg_redop_name", cg_redop_name(BAD_OP_1), "unknown");
  check_unknown(fx, "cg_redop_name", cg_redop_name(BAD_OP_2), "unknown");
}
void row_node_kind_name(fx_t *fx) {
  check_unknown(fx, "cg_node_kind_name", cg_node_kind_name(CG_NODE_KIND_COUNT), "unknown");
  check_unknown(fx, "cg_node_kind_name", cg_node_kind_name((cg_node_kind_t)-1), "unknown");
}
void row_backend_kind_name(fx_t *fx) {
  check_unknown(fx, "cg_backend_kind_name", cg_backend_kind_name(CG_BACKEND_COUNT), "unknown");
  check_unknown(fx, "cg_backend_kind_name", cg_backend_kind_name((cg_backend_kind_t)-1), "unknown");
}
void row_status_string(fx_t *fx) {
  check_unknown(fx, "cg_status_string", cg_status_string((cg_status_t)-1), "unknown status");
  check_unknown(fx, "cg_status_string", cg_status_string((cg_status_t)16), "unknown status");
  check_unknown(fx, "cg_status_string", cg_status_string((cg_status_t)INT_MAX), "unknown status");
}
void row_error_last(fx_t *fx) {
  /* never NULL; after a failure, that failure's detail */
  clear_error();
  CHECK(fx, cg_error_last() != NULL && *cg_error_last() == '\0', "cg_error_last() after clearing is not empty");
  cg_status_t st = cg_arena_reset(NULL);
  CHECK(fx, st == IA && strstr(cg_error_last(), "cg_arena_reset"), "cg_error_last() after a failure: '%s'",
        cg_error_last());
}
