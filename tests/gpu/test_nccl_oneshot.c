/* The NCCL backend's one-shot and two-shot allreduces
 * (backends/nccl/nccl_oneshot.h), each forced on alone
 * (CG_ONESHOT_MAX_BYTES=1M CG_TWOSHOT_MAX_BYTES=0, then 0 and 8M) and both
 * at once (64K and 8M: their calls alternate on the epochs they share):
 * random allreduces of float32, float16 and bfloat16 with every reduction,
 * sizes from one element to the kernels' most (1 MB, 8 MB), in place and not,
 * at element offsets that break 16-byte alignment differently on each rank,
 * next to collectives that stay on NCCL on the same communicator, fused and
 * not, launched and run: every replay matches the reference reduction
 * exactly (integer-valued inputs, poisoned outputs) and the plan's DOT names
 * the kernel for each. Off (both 0): DOT never names either. Measured: the
 * same collectives take each on every rank. Either variable set on one rank
 * only is refused on every rank. Inputs with the kernels' sentinel bits come
 * out NaN, alike on every rank. Where the ranks cannot map each other's
 * memory the forced case says so and skips, and fails instead under
 * CG_TEST_REQUIRE_ONESHOT=1 (scripts/gpu-test sets it). NCCL only. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_test.h"

enum { CASES = 10, ROUNDS = 6, GATHER = 777 };

/* the kernels a test forces on: their variables, the most they take, and
 * what DOT calls them (NULL: both, the sizes deciding which, on the epochs
 * the two share) */
typedef struct kernel_kind {
  const char *oneshot_max, *twoshot_max;
  size_t max_bytes;
  const char *name;
} kernel_kind_t;
static const kernel_kind_t kinds[3] = {{"1M", "0", (size_t)1 << 20, "one-shot allreduce"},
                                       {"0", "8M", (size_t)8 << 20, "two-shot allreduce"},
                                       {"64K", "8M", (size_t)8 << 20, NULL}};
static const char *const kernel_names[2] = {"one-shot allreduce", "two-shot allreduce"};

typedef struct oneshot_case {
  cg_dtype_t dtype;
  cg_redop_t op;
  size_t count;
  int in_place;
  char *send_base, *recv_base;
  void *send, *recv;
} oneshot_case_t;

static int count_in(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
  return n;
}

static int dot_count(const cg_plan_t *plan, const char *name) {
  char *dot = cg_gpu_plan_dot(plan);
  int n = name ? count_in(dot, name) : count_in(dot, kernel_names[0]) + count_in(dot, kernel_names[1]);
  free(dot);
  return n;
}

static void unset_sizes(void) {
  unsetenv("CG_ONESHOT_MAX_BYTES");
  unsetenv("CG_TWOSHOT_MAX_BYTES");
}

/* The suite's NCCL-only communicator, CG_ONESHOT_MAX_BYTES and
 * CG_TWOSHOT_MAX_BYTES set for its plans; NULL, the variables unset again,
 * where there is none. */
static cg_comm_t *comm_with_max(const char *oneshot_max, const char *twoshot_max) {
  setenv("CG_ONESHOT_MAX_BYTES", oneshot_max, 1);
  setenv("CG_TWOSHOT_MAX_BYTES", twoshot_max, 1);
  cg_comm_t *comm = cg_gpu_nccl_only_comm("nccl_oneshot");
  if (!comm) unset_sizes();
  return comm;
}

/* CG_TEST_REQUIRE_ONESHOT=1, peer links (NCCL_P2P_DISABLE, gpu-test's
 * sockets phase, takes them away) and peers: a collective of one rank is a
 * copy. */
static int oneshot_required(void) {
  const char *require = getenv("CG_TEST_REQUIRE_ONESHOT"), *no_p2p = getenv("NCCL_P2P_DISABLE");
  int links = !no_p2p || strcmp(no_p2p, "0") == 0;
  return require && strcmp(require, "1") == 0 && links && cg_gpu_size() > 1;
}

/* Random cases drawn alike on every rank (the seed is rank 0's); the
 * offsets differ per rank, so one rank's buffers may be aligned where
 * another's are not. */
static void draw_cases(oneshot_case_t *c, int me, size_t max_bytes) {
  static const cg_dtype_t dtypes[3] = {CG_FLOAT32, CG_FLOAT16, CG_BFLOAT16};
  static const cg_redop_t ops[6] = {CG_SUM, CG_SUM, CG_AVG, CG_MIN, CG_MAX, CG_PROD};
  for (int i = 0; i < CASES; i++) {
    c[i].dtype = dtypes[cg_test_rand() % 3];
    c[i].op = ops[cg_test_rand() % 6];
    size_t es = cg_dtype_size(c[i].dtype), most = max_bytes / es;
    switch (cg_test_rand() % 4) {
      case 0: c[i].count = 1 + cg_test_rand() % 16; break;
      case 1: c[i].count = 17 + cg_test_rand() % 5000; break;
      case 2: c[i].count = 5000 + cg_test_rand() % (most - 5000); break;
      default: c[i].count = most - cg_test_rand() % 9; break; /* up to the cut-over, whole or not */
    }
    if (i == 0) c[i].count = most; /* the largest the kernel takes */
    if (i == 2 && max_bytes > ((size_t)1 << 20)) c[i].count = 1 + cg_test_rand() % 5000; /* both kernels, mixed */
    c[i].in_place = (int)(cg_test_rand() % 2);
    uint64_t r = cg_test_rand();
    size_t send_off = (size_t)((r >> (8 * me)) % 8), recv_off = (size_t)((r >> (8 * me + 4)) % 8);
    if (i == 1) send_off = recv_off = 0; /* aligned on every rank */
    c[i].send_base = cg_gpu_alloc((c[i].count + 8) * es);
    c[i].recv_base = c[i].in_place ? c[i].send_base : cg_gpu_alloc((c[i].count + 8) * es);
    c[i].send = c[i].send_base + send_off * es;
    c[i].recv = c[i].in_place ? c[i].send : c[i].recv_base + recv_off * es;
  }
}

static void free_cases(oneshot_case_t *c) {
  for (int i = 0; i < CASES; i++) {
    if (!c[i].in_place) cg_gpu_free(c[i].recv_base);
    cg_gpu_free(c[i].send_base);
  }
}

static void record_cases(cg_graph_t *g, cg_comm_t *comm, oneshot_case_t *c) {
  for (int i = 0; i < CASES; i++)
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, c[i].send, c[i].recv, c[i].count, c[i].dtype, c[i].op));
}

/* Wrong elements of case i after replay k: every rank's input regenerated
 * here, reduced by the reference. */
static size_t wrong(const oneshot_case_t *c, int i, uint64_t seed, int ranks) {
  size_t es = cg_dtype_size(c->dtype), bytes = c->count * es, bad = 0;
  char *inputs = malloc(bytes * (size_t)ranks), *expect = malloc(bytes), *got = malloc(bytes);
  ck_assert(inputs && expect && got);
  for (int r = 0; r < ranks; r++)
    cg_mpi_test_fill(inputs + (size_t)r * bytes, c->count, c->dtype, c->op, ranks, seed, (uint64_t)(i * 64 + r));
  cg_ref_reduce(expect, inputs, ranks, c->count, c->dtype, c->op);
  CUDA_OK(cudaMemcpy(got, c->recv, bytes, cudaMemcpyDeviceToHost));
  size_t first_bad = 0, last_bad = 0;
  for (size_t e = 0; e < c->count; e++)
    if (cg_ref_load(got, e, c->dtype) != cg_ref_load(expect, e, c->dtype)) {
      if (!bad++) first_bad = e;
      last_bad = e;
    }
  if (bad) /* where and how: which chunks of which threads, and what arrived instead */
    fprintf(stderr, "rank %d: %zu of %zu elements wrong, #%zu .. #%zu; #%zu is %g, expected %g\n", cg_gpu_rank(), bad,
            c->count, first_bad, last_bad, first_bad, cg_ref_load(got, first_bad, c->dtype),
            cg_ref_load(expect, first_bad, c->dtype));
  free(inputs);
  free(expect);
  free(got);
  return bad;
}

static void fill_case(const oneshot_case_t *c, int i, uint64_t seed, int me, int ranks) {
  size_t es = cg_dtype_size(c->dtype), bytes = c->count * es;
  char *host = malloc(bytes);
  ck_assert(host);
  cg_mpi_test_fill(host, c->count, c->dtype, c->op, ranks, seed, (uint64_t)(i * 64 + me));
  if (!c->in_place) CUDA_OK(cudaMemset(c->recv, CG_MPI_POISON, bytes));
  CUDA_OK(cudaMemcpy(c->send, host, bytes, cudaMemcpyHostToDevice));
  /* from pageable memory cudaMemcpy returns before the copy has landed: the
   * ladder's last-filled 1 MB input once arrived after its allreduce began
   * (7590014). cg_plan_start now waits for the legacy default stream
   * (gpu.md); this keeps the sums checked here independent of that wait */
  CUDA_OK(cudaDeviceSynchronize());
  free(host);
}

/* Replays `plan` ROUNDS times with fresh inputs (cg_plan_run and
 * cg_plan_launch in turn) and checks every case, the int32 allreduce and the
 * allgather NCCL runs beside them. */
static void replay_and_check(cg_plan_t *plan, oneshot_case_t *c, int32_t *ints, float *mine, float *all,
                             const char *label) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  char what[320];
  for (int k = 0; k < ROUNDS; k++) {
    uint64_t seed = cg_test_seed() ^ (uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < CASES; i++) fill_case(&c[i], i, seed, me, n);
    oneshot_case_t ic = {CG_INT32, CG_SUM, GATHER, 1, NULL, NULL, ints, ints};
    oneshot_case_t gc = {CG_FLOAT32, CG_SUM, GATHER, 0, NULL, NULL, mine, all};
    fill_case(&ic, CASES, seed, me, n);
    fill_case(&gc, CASES + 1, seed, me, n);
    CUDA_OK(cudaMemset(all, CG_MPI_POISON, (size_t)GATHER * n * sizeof(float)));
    /* ranks start apart (up to 3 ms), so a wait across ranks really waits */
    uint64_t skew = cg_test_rand();
    struct timespec nap = {0, (long)((skew >> (8 * (me % 8))) % 3000) * 1000L};
    nanosleep(&nap, NULL);
    if (k % 2) {
      ck_assert_cg_ok(cg_plan_launch(plan, cg_gpu_stream()));
      CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
    } else {
      ck_assert_cg_ok(cg_plan_run(plan));
    }
    for (int i = 0; i < CASES; i++) {
      size_t bad = wrong(&c[i], i, seed, n);
      snprintf(what, sizeof what, "%s, replay %d: %s %s of %zu elements (%s, offsets %zu/%zu): %zu wrong", label, k,
               cg_dtype_name(c[i].dtype), cg_redop_name(c[i].op), c[i].count, c[i].in_place ? "in place" : "out of place",
               (size_t)((char *)c[i].send - c[i].send_base) / cg_dtype_size(c[i].dtype),
               (size_t)((char *)c[i].recv - (c[i].in_place ? c[i].send_base : c[i].recv_base)) /
                   cg_dtype_size(c[i].dtype), bad);
      ck_assert_all_ranks(bad == 0, what);
    }
    snprintf(what, sizeof what, "%s, replay %d: the int32 allreduce on NCCL beside them", label, k);
    ck_assert_all_ranks(wrong(&ic, CASES, seed, n) == 0, what);
    /* the allgather: rank r's block is its input */
    size_t bad = 0;
    float *host = malloc((size_t)GATHER * n * sizeof(float)), *ref = malloc(GATHER * sizeof(float));
    ck_assert(host && ref);
    CUDA_OK(cudaMemcpy(host, all, (size_t)GATHER * n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < n; r++) {
      cg_mpi_test_fill(ref, GATHER, CG_FLOAT32, CG_SUM, n, seed, (uint64_t)((CASES + 1) * 64 + r));
      bad += memcmp(ref, host + (size_t)r * GATHER, GATHER * sizeof(float)) != 0;
    }
    free(host);
    free(ref);
    snprintf(what, sizeof what, "%s, replay %d: the allgather on NCCL beside them", label, k);
    ck_assert_all_ranks(bad == 0, what);
  }
}

START_TEST(nccl_oneshot__forced_allreduces_are_exact_every_replay_beside_nccl_ones) {
  const kernel_kind_t *kind = &kinds[_i];
  const char *name = kind->name ? kind->name : "one-shot and two-shot allreduces";
  int me = cg_gpu_rank(), n = cg_gpu_size();
  cg_comm_t *comm = comm_with_max(kind->oneshot_max, kind->twoshot_max);
  if (!comm) return;
  oneshot_case_t c[CASES];
  draw_cases(c, me, kind->max_bytes);
  int32_t *ints = cg_gpu_alloc(GATHER * sizeof(int32_t));
  float *mine = cg_gpu_alloc(GATHER * sizeof(float)), *all = cg_gpu_alloc((size_t)GATHER * n * sizeof(float));
  for (int fused = 0; fused < 2; fused++) {
    cg_graph_t *g = NULL;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    record_cases(g, comm, c);
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, ints, ints, GATHER, CG_INT32, CG_SUM));
    ck_assert_cg_ok(cg_allgather(NULL, g, comm, mine, all, GATHER, CG_FLOAT32));
    cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
    opts.fusion = fused;
    cg_plan_t *plan = NULL;
    cg_status_t st = cg_compile(&plan, g, &opts);
    cg_graph_destroy(g);
    ck_assert_all_ranks(st == CG_SUCCESS, fused ? "compile, fused" : "compile, fusion off");
    int named = dot_count(plan, kind->name);
    if (!fused && named == 0) {
      /* off on every rank alike: the ranks cannot map each other's memory */
      if (me == 0) printf("nccl_oneshot: the %s path is off here (DOT names no kernel)\n", name);
      ck_assert_msg(!oneshot_required(), "CG_TEST_REQUIRE_ONESHOT=1 but the path is off here");
      cg_plan_destroy(plan);
      break;
    }
    char what[160];
    snprintf(what, sizeof what, "%s, fusion %s: DOT names the kernel %d times (%d allreduces it takes)", name,
             fused ? "on" : "off", named, CASES);
    ck_assert_all_ranks(fused ? named >= 1 : named == CASES, what);
    if (!kind->name && !fused) {
      snprintf(what, sizeof what, "%s: both kernels run (one-shot %d, two-shot %d)", name,
               dot_count(plan, kernel_names[0]), dot_count(plan, kernel_names[1]));
      ck_assert_all_ranks(dot_count(plan, kernel_names[0]) > 0 && dot_count(plan, kernel_names[1]) > 0, what);
    }
    snprintf(what, sizeof what, "%s, %s", name, fused ? "fused" : "unfused");
    replay_and_check(plan, c, ints, mine, all, what);
    cg_plan_destroy(plan);
  }
  free_cases(c);
  cg_gpu_free(ints);
  cg_gpu_free(mine);
  cg_gpu_free(all);
  cg_comm_destroy(comm);
  unset_sizes();
}
END_TEST

/* Input elements whose bits are the kernel's sentinel (all ones: a NaN in
 * every dtype), on one rank or on all, come out NaN: no rank waits for them
 * forever (a hang becomes the plan's timeout, naming the node), every other
 * element is exact, and every rank gets the same bits; a float32 NaN whose
 * high 16 bits are all ones (not the sentinel in a 4-byte lane) likewise.
 * Out of place on aligned buffers, and in place one element off alignment. */
START_TEST(nccl_oneshot__sentinel_bits_in_an_input_arrive_as_nan) {
  static const cg_dtype_t dtypes[3] = {CG_FLOAT32, CG_FLOAT16, CG_BFLOAT16};
  enum { COUNT = 1003, NANS = 5, HALF_ONES_AT = 300 };
  const size_t nan_at[NANS] = {0, 7, 100, 500, COUNT - 1}; /* 100: on every rank, the others on one each */
  const kernel_kind_t *kind = &kinds[_i];
  int me = cg_gpu_rank(), n = cg_gpu_size();
  cg_comm_t *comm = comm_with_max(kind->oneshot_max, kind->twoshot_max);
  if (!comm) return;
  for (int d = 0; d < 3; d++)
    for (int in_place = 0; in_place < 2; in_place++) {
      size_t es = cg_dtype_size(dtypes[d]), bytes = COUNT * es;
      char *send_base = cg_gpu_alloc(bytes + es), *recv_base = in_place ? NULL : cg_gpu_alloc(bytes);
      char *send = send_base + (in_place ? es : 0), *recv = in_place ? send : recv_base;
      char *inputs = malloc(bytes * (size_t)n), *expect = malloc(bytes), *got = malloc(bytes);
      unsigned char *lo = malloc(bytes), *hi = malloc(bytes);
      ck_assert(inputs && expect && got && lo && hi);
      char *mine = inputs + (size_t)me * bytes;
      cg_mpi_test_fill(mine, COUNT, dtypes[d], CG_SUM, n, cg_test_seed(), (uint64_t)(d * 64 + in_place * 8 + me));
      for (int k = 0; k < NANS; k++)
        if (nan_at[k] == 100 || k % n == me) memset(mine + nan_at[k] * es, 0xff, es);
      if (dtypes[d] == CG_FLOAT32 && me == n - 1) {
        uint32_t half_ones = 0xffff0000u; /* a NaN; its high half alone is all ones */
        memcpy(mine + HALF_ONES_AT * es, &half_ones, sizeof half_ones);
      }
      MPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, inputs, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
      cg_ref_reduce(expect, inputs, n, COUNT, dtypes[d], CG_SUM);
      cg_graph_t *g = NULL;
      ck_assert_cg_ok(cg_graph_create(&g, NULL));
      ck_assert_cg_ok(cg_allreduce(NULL, g, comm, send, recv, COUNT, dtypes[d], CG_SUM));
      cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
      opts.timeout_s = 30;
      cg_plan_t *plan = NULL;
      cg_status_t st = cg_compile(&plan, g, &opts);
      cg_graph_destroy(g);
      ck_assert_all_ranks(st == CG_SUCCESS, "compile");
      char what[200];
      snprintf(what, sizeof what, "%s%s: the allreduce takes the %s kernel", cg_dtype_name(dtypes[d]),
               in_place ? ", in place" : "", kind->name);
      int named = dot_count(plan, kind->name);
      ck_assert_all_ranks(named == 1 || !oneshot_required(), what);
      if (named == 0 && me == 0 && d == 0 && !in_place)
        printf("nccl_oneshot: the %s path is off here: the sentinel case checks NCCL's allreduce only\n", kind->name);
      for (int k = 0; k < 2; k++) { /* twice: the second call uses the other buffer */
        CUDA_OK(cudaMemcpy(send, mine, bytes, cudaMemcpyHostToDevice));
        if (!in_place) CUDA_OK(cudaMemset(recv, CG_MPI_POISON, bytes));
        CUDA_OK(cudaDeviceSynchronize());
        st = cg_plan_run(plan);
        snprintf(what, sizeof what, "%s%s, call %d: runs (%s)", cg_dtype_name(dtypes[d]), in_place ? ", in place" : "",
                 k, st == CG_SUCCESS ? "ok" : cg_error_last());
        ck_assert_all_ranks(st == CG_SUCCESS, what);
        CUDA_OK(cudaMemcpy(got, recv, bytes, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t e = 0; e < COUNT; e++) {
          double x = cg_ref_load(got, e, dtypes[d]), want = cg_ref_load(expect, e, dtypes[d]);
          bad += want != want ? x == x : x != want; /* NaN where an input was */
        }
        MPI_Allreduce(got, lo, (int)bytes, MPI_UNSIGNED_CHAR, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(got, hi, (int)bytes, MPI_UNSIGNED_CHAR, MPI_MAX, MPI_COMM_WORLD);
        snprintf(what, sizeof what, "%s%s, call %d: %zu wrong elements (NaN where an input was one)",
                 cg_dtype_name(dtypes[d]), in_place ? ", in place" : "", k, bad);
        ck_assert_all_ranks(bad == 0, what);
        snprintf(what, sizeof what, "%s%s, call %d: the same bits on every rank", cg_dtype_name(dtypes[d]),
                 in_place ? ", in place" : "", k);
        ck_assert_all_ranks(memcmp(lo, hi, bytes) == 0, what);
      }
      cg_plan_destroy(plan);
      free(inputs), free(expect), free(got), free(lo), free(hi);
      cg_gpu_free(send_base);
      if (recv_base) cg_gpu_free(recv_base);
    }
  cg_comm_destroy(comm);
  unset_sizes();
}
END_TEST

enum { LADDER = 14 };

/* f32 sum allreduces of 1 KB, 2 KB, ... 8 MB, in place, fusion off. */
static cg_plan_t *ladder_plan(cg_comm_t *comm, oneshot_case_t *c, const char *what) {
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int i = 0; i < LADDER; i++) {
    size_t count = ((size_t)1024 << i) / sizeof(float);
    char *buf = cg_gpu_alloc(count * sizeof(float));
    c[i] = (oneshot_case_t){CG_FLOAT32, CG_SUM, count, 1, buf, buf, buf, buf};
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, buf, buf, count, CG_FLOAT32, CG_SUM));
  }
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.fusion = 0;
  cg_plan_t *plan = NULL;
  cg_status_t st = cg_compile(&plan, g, &opts);
  cg_graph_destroy(g);
  ck_assert_all_ranks(st == CG_SUCCESS, what);
  return plan;
}

/* Two replays of the ladder with fresh inputs, every sum checked. */
static void ladder_check(cg_plan_t *plan, oneshot_case_t *c, const char *label) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  char what[160];
  for (int k = 0; k < 2; k++) {
    uint64_t seed = cg_test_seed() ^ (uint64_t)(k + 7) * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < LADDER; i++) fill_case(&c[i], i, seed, me, n);
    ck_assert_cg_ok(cg_plan_run(plan));
    for (int i = 0; i < LADDER; i++) {
      snprintf(what, sizeof what, "%s, replay %d: the allreduce of %zu floats", label, k, c[i].count);
      ck_assert_all_ranks(wrong(&c[i], i, seed, n) == 0, what);
    }
  }
  for (int i = 0; i < LADDER; i++) cg_gpu_free(c[i].send_base);
}

START_TEST(nccl_oneshot__zero_keeps_every_allreduce_on_nccl) {
  cg_comm_t *comm = comm_with_max("0", "0");
  if (!comm) return;
  oneshot_case_t c[LADDER];
  cg_plan_t *plan = ladder_plan(comm, c, "compile with both sizes 0");
  ck_assert_all_ranks(dot_count(plan, kinds[0].name) == 0 && dot_count(plan, kinds[1].name) == 0,
                      "CG_ONESHOT_MAX_BYTES=0 CG_TWOSHOT_MAX_BYTES=0: DOT names neither kernel");
  ladder_check(plan, c, "both sizes 0");
  cg_plan_destroy(plan);
  cg_comm_destroy(comm);
  unset_sizes();
}
END_TEST

/* The kernels that measured the cut-over advanced the epochs: the plan's
 * calls after them must still pair up. */
START_TEST(nccl_oneshot__the_measured_cutover_is_the_same_on_every_rank) {
  unset_sizes();
  cg_comm_t *comm = cg_gpu_nccl_only_comm("nccl_oneshot");
  if (!comm) return;
  oneshot_case_t c[LADDER];
  cg_plan_t *plan = ladder_plan(comm, c, "compile, the cut-overs measured");
  int mine[2] = {dot_count(plan, kinds[0].name), dot_count(plan, kinds[1].name)}, lo[2] = {0}, hi[2] = {0};
  MPI_Allreduce(mine, lo, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine, hi, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (cg_gpu_rank() == 0)
    printf("nccl_oneshot: measured: of the %d allreduces of 1 KB .. 8 MB, %d take the one-shot kernel and %d the "
           "two-shot kernel\n", LADDER, mine[0], mine[1]);
  ck_assert_all_ranks(lo[0] == hi[0] && lo[1] == hi[1], "every rank takes each kernel for the same allreduces");
  ladder_check(plan, c, "the cut-over measured");
  cg_plan_destroy(plan);
  cg_comm_destroy(comm);
}
END_TEST

START_TEST(nccl_oneshot__the_variable_on_one_rank_only_is_refused_everywhere) {
  const char *variable = _i ? "CG_TWOSHOT_MAX_BYTES" : "CG_ONESHOT_MAX_BYTES";
  char expect[80], what[120];
  if (cg_gpu_size() < 2) return;
  unset_sizes();
  cg_comm_t *comm = cg_gpu_nccl_only_comm("nccl_oneshot");
  if (!comm) return;
  if (cg_gpu_rank() == 0) setenv(variable, "8K", 1);
  float *buf = cg_gpu_alloc(256 * sizeof(float));
  cg_graph_t *g = NULL;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, comm, buf, buf, 256, CG_FLOAT32, CG_SUM));
  cg_plan_t *plan = NULL;
  cg_status_t st = cg_compile(&plan, g, NULL);
  unset_sizes();
  cg_graph_destroy(g);
  snprintf(what, sizeof what, "%s on rank 0 only: refused on every rank", variable);
  ck_assert_all_ranks(st == CG_ERR_INVALID_ARGUMENT, what);
  snprintf(expect, sizeof expect, "%s differs", variable);
  ck_assert_all_ranks(strstr(cg_error_last(), expect) != NULL, "the refusal says why");
  cg_plan_destroy(plan);
  cg_gpu_free(buf);
  cg_comm_destroy(comm);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nccl_oneshot");
  TCase *tc = cg_gpu_tcase("nccl_oneshot");
  tcase_add_loop_test(tc, nccl_oneshot__forced_allreduces_are_exact_every_replay_beside_nccl_ones, 0, 3);
  tcase_add_loop_test(tc, nccl_oneshot__sentinel_bits_in_an_input_arrive_as_nan, 0, 2);
  tcase_add_test(tc, nccl_oneshot__zero_keeps_every_allreduce_on_nccl);
  tcase_add_test(tc, nccl_oneshot__the_measured_cutover_is_the_same_on_every_rank);
  tcase_add_loop_test(tc, nccl_oneshot__the_variable_on_one_rank_only_is_refused_everywhere, 0, 2);
  suite_add_tcase(s, tc);
  return cg_gpu_test_main(s, "nccl_oneshot");
}
