#define _POSIX_C_SOURCE 200809L /* open_memstream, clock_gettime */
#include "test_support.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "commgraph/config.h"
#if CG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static uint64_t seed;
static uint64_t state;

double cg_test_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void cg_test_nap(double seconds) {
  struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  nanosleep(&t, NULL);
}

uint64_t cg_test_seed(void) {
  if (!seed) {
    const char *env = getenv("CG_TEST_SEED");
    if (env && *env) {
      seed = strtoull(env, NULL, 0);
    } else {
      struct timespec ts;
      timespec_get(&ts, TIME_UTC);
      seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    if (!seed) seed = 1;
    state = seed;
  }
  return seed;
}

void cg_test_set_seed(uint64_t value) {
  seed = value ? value : 1;
  state = seed;
}

void cg_test_reseed(uint64_t salt) {
  state = cg_test_seed() ^ (salt * 0x9E3779B97F4A7C15ull);
  if (!state) state = 1;
}

uint64_t cg_test_rand(void) {
  if (!state) cg_test_seed();
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1Dull;
}

uint64_t cg_test_below(uint64_t bound) { return bound ? cg_test_rand() % bound : 0; }

void cg_test_noop(void *arg) { (void)arg; }

const cg_node_kind_t cg_test_comm_kinds[10] = {CG_NODE_ALLREDUCE, CG_NODE_BROADCAST,      CG_NODE_REDUCE,
                                               CG_NODE_ALLGATHER, CG_NODE_REDUCE_SCATTER, CG_NODE_ALLTOALL,
                                               CG_NODE_GATHER,    CG_NODE_SCATTER,        CG_NODE_SEND,
                                               CG_NODE_RECV};

int cg_test_kind_has_op(cg_node_kind_t k) {
  return k == CG_NODE_ALLREDUCE || k == CG_NODE_REDUCE || k == CG_NODE_REDUCE_SCATTER;
}

int cg_test_kind_is_rooted(cg_node_kind_t k) {
  return k == CG_NODE_BROADCAST || k == CG_NODE_REDUCE || k == CG_NODE_GATHER || k == CG_NODE_SCATTER;
}

int cg_test_kind_is_p2p(cg_node_kind_t k) { return k == CG_NODE_SEND || k == CG_NODE_RECV; }

cg_status_t cg_test_record(cg_node_t *out, cg_graph_t *g, const cg_test_call_t *k) {
  cg_comm_t *c = k->comm;
  switch (k->kind) {
    case CG_NODE_ALLREDUCE: return cg_allreduce(out, g, c, k->send, k->recv, k->count, k->dtype, k->op);
    case CG_NODE_BROADCAST: return cg_broadcast(out, g, c, k->send, k->recv, k->count, k->dtype, k->root);
    case CG_NODE_REDUCE: return cg_reduce(out, g, c, k->send, k->recv, k->count, k->dtype, k->op, k->root);
    case CG_NODE_ALLGATHER: return cg_allgather(out, g, c, k->send, k->recv, k->count, k->dtype);
    case CG_NODE_REDUCE_SCATTER: return cg_reduce_scatter(out, g, c, k->send, k->recv, k->count, k->dtype, k->op);
    case CG_NODE_ALLTOALL: return cg_alltoall(out, g, c, k->send, k->recv, k->count, k->dtype);
    case CG_NODE_GATHER: return cg_gather(out, g, c, k->send, k->recv, k->count, k->dtype, k->root);
    case CG_NODE_SCATTER: return cg_scatter(out, g, c, k->send, k->recv, k->count, k->dtype, k->root);
    case CG_NODE_SEND: return cg_send(out, g, c, k->send, k->count, k->dtype, k->root);
    case CG_NODE_RECV: return cg_recv(out, g, c, k->recv, k->count, k->dtype, k->root);
    case CG_NODE_BARRIER: return cg_barrier(out, g, c);
    case CG_NODE_HOST_FUNC: return cg_host_func(out, g, cg_test_noop, (void *)k->send, NULL);
    default: ck_abort_msg("no recording call for kind %d", (int)k->kind);
  }
  return CG_ERR_INTERNAL;
}

size_t cg_test_send_elems(cg_node_kind_t k, size_t count, int size, int rank, int root) {
  switch (k) {
    case CG_NODE_ALLREDUCE: case CG_NODE_REDUCE: case CG_NODE_ALLGATHER: case CG_NODE_GATHER: case CG_NODE_SEND:
      return count;
    case CG_NODE_BROADCAST: return rank == root ? count : 0;
    case CG_NODE_REDUCE_SCATTER: case CG_NODE_ALLTOALL: return count * (size_t)size;
    case CG_NODE_SCATTER: return rank == root ? count * (size_t)size : 0;
    default: return 0;
  }
}

size_t cg_test_recv_elems(cg_node_kind_t k, size_t count, int size, int rank, int root) {
  switch (k) {
    case CG_NODE_ALLREDUCE: case CG_NODE_BROADCAST: case CG_NODE_REDUCE_SCATTER: case CG_NODE_SCATTER:
    case CG_NODE_RECV:
      return count;
    case CG_NODE_REDUCE: return rank == root ? count : 0;
    case CG_NODE_ALLGATHER: case CG_NODE_ALLTOALL: return count * (size_t)size;
    case CG_NODE_GATHER: return rank == root ? count * (size_t)size : 0;
    default: return 0;
  }
}

char *cg_test_dot_text(const cg_graph_t *graph) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  ck_assert_cg_ok(cg_graph_write_dot(graph, f));
  fclose(f);
  return text;
}

#if CG_HAVE_CUDA
int cg_test_gpu_main(Suite *suite, const char *name) {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    const char *required = getenv("CG_REQUIRE_GPU");
    printf("%s %s: no usable GPU (%s)\n", required ? "FAILED" : "SKIPPED", name,
           err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found 0 devices");
    srunner_free(srunner_create(suite)); /* frees the suite */
    return required ? 1 : 77;
  }
  return cg_test_main(suite);
}

cudaGraph_t cg_test_memset_graph(void *dst, size_t n, unsigned value) {
  cudaGraph_t graph = NULL;
  cudaGraphNode_t node;
  struct cudaMemsetParams p = {.dst = dst, .value = value, .elementSize = 4, .width = n, .height = 1};
  cudaError_t err = cudaGraphCreate(&graph, 0);
  if (err == cudaSuccess) err = cudaGraphAddMemsetNode(&node, graph, NULL, 0, &p);
  ck_assert_msg(err == cudaSuccess, "a memset graph: %s", cudaGetErrorString(err));
  return graph;
}
#endif

int cg_test_main(Suite *suite) {
  /* tests/unit/with-comma-locale: the whole suite under a locale whose
   * decimal point is not '.', as a program that called setlocale has */
  const char *numeric = getenv("CG_TEST_NUMERIC_LOCALE");
  if (numeric && *numeric) {
    if (!setlocale(LC_NUMERIC, numeric)) {
      fprintf(stderr, "CG_TEST_NUMERIC_LOCALE=%s: setlocale(LC_NUMERIC) refused it\n", numeric);
      return EXIT_FAILURE;
    }
    printf("LC_NUMERIC=%s (decimal point '%s')\n", numeric, localeconv()->decimal_point);
  }
  printf("seed: CG_TEST_SEED=%llu\n", (unsigned long long)cg_test_seed());
  fflush(stdout);
  SRunner *runner = srunner_create(suite);
  srunner_run_all(runner, CK_NORMAL);
  int failed = srunner_ntests_failed(runner);
  srunner_free(runner);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

char *cg_test_plan_text(const cg_plan_t *plan, int dot) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  ck_assert_cg_ok(dot ? cg_plan_write_dot(plan, f) : cg_plan_dump(plan, f));
  fclose(f);
  return text;
}
