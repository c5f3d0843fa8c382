/* The watchdog of cg_plan_launch and of replays of users' graphs that embed
 * a plan, on one GPU, without MPI: a device plan of user work (two child
 * graphs around a host function) replayed on the test's stream, directly or
 * inside a graph of the test's (captured around cg_plan_launch, or holding
 * cg_plan_cuda_graph's graph as a child node). A host function that sleeps
 * past the timeout stalls the replay; the monitor thread reports it naming
 * the node, and its handler, which runs on a thread of its own, may destroy
 * the plan. Healthy replays never fire, nor do idle embedded plans. Skips
 * (exit 77, reason printed) without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph/cuda.h"
#include "test_support.h"

#define TIMEOUT_S 0.3

static double sleep_s; /* how long the host function sleeps */
static void sleepy(void *arg) {
  (void)arg;
  cg_test_nap(sleep_s);
}

static struct {
  cg_plan_t *victim; /* destroyed by the handler */
  atomic_int calls;
  double at;
  char report[4096];
} heard;

static void on_timeout(cg_status_t status, const char *report, void *arg) {
  (void)arg;
  heard.at = cg_test_now_s();
  snprintf(heard.report, sizeof heard.report, "%s: %s", cg_status_string(status), report);
  cg_plan_destroy(heard.victim); /* allowed: the handler has a thread of its own */
  heard.victim = NULL;
  atomic_fetch_add(&heard.calls, 1);
}

/* CHAIN memsets of 1 -> host function 'sleepy' -> memset 2, compiled with
 * the timeout. The chain's kernels but the last have no marks of their own
 * (cg_cuda_choose_marks): the report must still name 'sleepy', and the
 * replays' count must skip their slots. */
enum { CHAIN = 8 };
static cg_plan_t *stalling_plan(unsigned *dev, size_t n) {
  cg_graph_t *g;
  cg_node_t a, h, b;
  cg_graph_opts_t go = CG_GRAPH_OPTS_INIT;
  go.name = "stall";
  ck_assert_cg_ok(cg_graph_create(&g, &go));
  cudaGraph_t first = cg_test_memset_graph(dev, n, 1), second = cg_test_memset_graph(dev, n, 2);
  for (int k = 0; k < CHAIN; k++) ck_assert_cg_ok(cg_child_graph(&a, g, first, NULL)); /* a chain: one buffer */
  ck_assert_cg_ok(cg_host_func(&h, g, sleepy, NULL, NULL));
  ck_assert_cg_ok(cg_node_name(g, h, "sleepy"));
  ck_assert_cg_ok(cg_child_graph(&b, g, second, NULL));
  CUDA_OK(cudaGraphDestroy(first));
  CUDA_OK(cudaGraphDestroy(second));
  cg_compile_opts_t co = CG_COMPILE_OPTS_INIT;
  co.timeout_s = TIMEOUT_S;
  cg_plan_t *plan = NULL;
  ck_assert_cg_ok(cg_compile(&plan, g, &co));
  cg_graph_destroy(g);
  double t = 0;
  ck_assert_cg_ok(cg_plan_timeout(&t, plan));
  ck_assert(t == TIMEOUT_S);
  return plan;
}

START_TEST(gpu_watchdog__healthy_launches_never_fire) {
  const size_t n = 1 << 16;
  unsigned *dev, host;
  cudaStream_t stream;
  CUDA_OK(cudaMalloc((void **)&dev, n * sizeof *dev));
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  memset(&heard, 0, sizeof heard);
  ck_assert_cg_ok(cg_set_timeout_handler(on_timeout, NULL));
  sleep_s = 0.001;
  cg_plan_t *plan = stalling_plan(dev, n);
  for (int i = 0; i < 50; i++) ck_assert_cg_ok(cg_plan_launch(plan, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  cg_test_nap(2 * TIMEOUT_S); /* the monitor had time to misjudge */
  ck_assert_int_eq(atomic_load(&heard.calls), 0);
  ck_assert_cg_ok(cg_plan_launch(plan, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(&host, dev, sizeof host, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(host, 2u); /* a 4-byte memset node writes the value per element */
  cg_plan_destroy(plan);
  ck_assert_cg_ok(cg_set_timeout_handler(NULL, NULL));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(dev));
}
END_TEST

START_TEST(gpu_watchdog__stalled_launch_is_reported_and_the_handler_destroys_the_plan) {
  const size_t n = 1 << 16;
  unsigned *dev;
  cudaStream_t stream;
  CUDA_OK(cudaMalloc((void **)&dev, n * sizeof *dev));
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  memset(&heard, 0, sizeof heard);
  ck_assert_cg_ok(cg_set_timeout_handler(on_timeout, NULL));
  sleep_s = 6 * TIMEOUT_S;
  heard.victim = stalling_plan(dev, n);
  double launched = cg_test_now_s();
  ck_assert_cg_ok(cg_plan_launch(heard.victim, stream));
  while (atomic_load(&heard.calls) == 0 && cg_test_now_s() - launched < 5.0) cg_test_nap(0.001);
  ck_assert_msg(atomic_load(&heard.calls) == 1, "the handler was called %d times in 5 s", atomic_load(&heard.calls));
  double after = heard.at - launched;
  /* progress stops when the host function begins, just after the launch */
  ck_assert_msg(after >= TIMEOUT_S && after < TIMEOUT_S + 0.2, "reported %.3f s after the launch (timeout %.1f s)",
                after, TIMEOUT_S);
  ck_assert_msg(strstr(heard.report, "timed out") && strstr(heard.report, "cg_plan_launch") &&
                    strstr(heard.report, "'sleepy'") && strstr(heard.report, "plan 'stall'"),
                "report: %s", heard.report);
  ck_assert_ptr_null(heard.victim);
  /* the replay ends when the host function wakes; the plan is gone */
  CUDA_OK(cudaStreamSynchronize(stream));
  cg_test_nap(2 * TIMEOUT_S);
  ck_assert_int_eq(atomic_load(&heard.calls), 1);
  ck_assert_cg_ok(cg_set_timeout_handler(NULL, NULL));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(dev));
}
END_TEST

/* A graph of the test's that embeds the plan: captured around
 * cg_plan_launch (captured = 1), or holding cg_plan_cuda_graph's graph as a
 * child node; instantiated. */
static cudaGraphExec_t embedding_exec(cg_plan_t *plan, cudaStream_t stream, int captured) {
  cudaGraph_t graph, embed;
  cudaGraphNode_t node;
  cudaGraphExec_t exec;
  if (captured) {
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    ck_assert_cg_ok(cg_plan_launch(plan, stream));
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
  } else {
    ck_assert_cg_ok(cg_plan_cuda_graph(&embed, plan));
    CUDA_OK(cudaGraphCreate(&graph, 0));
    CUDA_OK(cudaGraphAddChildGraphNode(&node, graph, NULL, 0, embed));
  }
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphDestroy(graph));
  return exec;
}

START_TEST(gpu_watchdog__healthy_and_idle_embedded_replays_never_fire) {
  const size_t n = 1 << 16;
  unsigned *dev, host;
  cudaStream_t stream;
  CUDA_OK(cudaMalloc((void **)&dev, n * sizeof *dev));
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  memset(&heard, 0, sizeof heard);
  ck_assert_cg_ok(cg_set_timeout_handler(on_timeout, NULL));
  sleep_s = 0.001;
  cg_plan_t *plan = stalling_plan(dev, n);
  cudaGraphExec_t captured = embedding_exec(plan, stream, 1), child = embedding_exec(plan, stream, 0);
  for (int i = 0; i < 30; i++) {
    CUDA_OK(cudaGraphLaunch(captured, stream));
    CUDA_OK(cudaGraphLaunch(child, stream));
    ck_assert_cg_ok(cg_plan_launch(plan, stream)); /* the plan's own, through the lock now */
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  cg_test_nap(3 * TIMEOUT_S); /* idle for longer than the timeout: nothing is in flight */
  ck_assert_int_eq(atomic_load(&heard.calls), 0);
  CUDA_OK(cudaMemset(dev, 0, n * sizeof *dev));
  CUDA_OK(cudaGraphLaunch(child, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(&host, dev, sizeof host, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(host, 2u);
  ck_assert_int_eq(atomic_load(&heard.calls), 0);
  CUDA_OK(cudaGraphExecDestroy(captured));
  CUDA_OK(cudaGraphExecDestroy(child));
  cg_plan_destroy(plan);
  ck_assert_cg_ok(cg_set_timeout_handler(NULL, NULL));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(dev));
}
END_TEST

/* Both ways of embedding: a healthy replay of the test's graph first, then
 * one that stalls; the monitor reports it, the plan refuses launches after,
 * and the test's graph instance goes before the plan. */
START_TEST(gpu_watchdog__stalled_embedded_replay_is_reported) {
  const size_t n = 1 << 16;
  unsigned *dev;
  cudaStream_t stream;
  CUDA_OK(cudaMalloc((void **)&dev, n * sizeof *dev));
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int captured = 0; captured < 2; captured++) {
    memset(&heard, 0, sizeof heard);
    ck_assert_cg_ok(cg_set_timeout_handler(on_timeout, NULL));
    sleep_s = 0.001;
    cg_plan_t *plan = stalling_plan(dev, n);
    cudaGraphExec_t exec = embedding_exec(plan, stream, captured);
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    sleep_s = 6 * TIMEOUT_S;
    double launched = cg_test_now_s();
    CUDA_OK(cudaGraphLaunch(exec, stream));
    while (atomic_load(&heard.calls) == 0 && cg_test_now_s() - launched < 5.0) cg_test_nap(0.001);
    ck_assert_msg(atomic_load(&heard.calls) == 1, "%s: the handler was called %d times in 5 s",
                  captured ? "captured" : "child node", atomic_load(&heard.calls));
    double after = heard.at - launched;
    ck_assert_msg(after >= TIMEOUT_S && after < TIMEOUT_S + 0.2, "%s: reported %.3f s after the launch (timeout %.1f s)",
                  captured ? "captured" : "child node", after, TIMEOUT_S);
    ck_assert_msg(strstr(heard.report, "timed out") && strstr(heard.report, "embeds the plan") &&
                      strstr(heard.report, "'sleepy'") && strstr(heard.report, "plan 'stall'") &&
                      strstr(heard.report, "replay 2"),
                  "report: %s", heard.report);
    ck_assert_int_eq(cg_plan_launch(plan, stream), CG_ERR_TIMEOUT);
    ck_assert_msg(strstr(cg_error_last(), "'sleepy'"), "%s", cg_error_last());
    CUDA_OK(cudaStreamSynchronize(stream)); /* the host function wakes */
    cg_test_nap(2 * TIMEOUT_S);
    ck_assert_int_eq(atomic_load(&heard.calls), 1);
    CUDA_OK(cudaGraphExecDestroy(exec));
    cg_plan_destroy(plan);
    ck_assert_cg_ok(cg_set_timeout_handler(NULL, NULL));
  }
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(dev));
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("gpu_watchdog");
  TCase *tc = tcase_create("gpu_watchdog");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, gpu_watchdog__healthy_launches_never_fire);
  tcase_add_test(tc, gpu_watchdog__stalled_launch_is_reported_and_the_handler_destroys_the_plan);
  tcase_add_test(tc, gpu_watchdog__healthy_and_idle_embedded_replays_never_fire);
  tcase_add_test(tc, gpu_watchdog__stalled_embedded_replay_is_reported);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_gpu_main(suite(), "gpu_watchdog"); }
