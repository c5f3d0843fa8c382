/* Device plans replayed: a thousand replays with fresh inputs, each checked;
 * replays interleaved with the user's kernels on one stream with no host
 * synchronization in between; cg_plan_run / start / test / wait on a device
 * plan; host functions as CUDA host nodes. This file has that "nccl_replay"
 * test case, the suite and main; test_nccl_replay_api.c has the "nccl_api"
 * test case (the API around device plans). */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_kernels.h"
#include "gpu_test.h"
#include "nccl_replay_support.h"

#define REPLAYS 1000

static void to_device(void *dev, const void *host, size_t bytes) {
  CUDA_OK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, cg_gpu_stream()));
}

/* ---- a thousand replays, fresh inputs each time, every output checked
 *
 * Four nodes over two communicators: an allreduce of x into y (A), an
 * allgather of the start of y into z (B, so it waits for A's allreduce), a ring
 * sending x and receiving w (B), and a broadcast of f into fb from the last
 * rank (A). */

enum { RN = 4099, RM = 1031, RF = 517 };

START_TEST(nccl_replay__thousand_replays_with_fresh_inputs_right_every_time) {
  int me = cg_gpu_rank(), n = cg_gpu_size(), to = (me + 1) % n, from = (me + n - 1) % n, root = n - 1;
  cg_comm_t *a = cg_gpu_shared_comm(0), *b = cg_gpu_shared_comm(1);
  int32_t *x = cg_gpu_alloc(RN * 4), *y = cg_gpu_alloc(RN * 4), *w = cg_gpu_alloc(RN * 4);
  int32_t *z = cg_gpu_alloc((size_t)n * RM * 4);
  double *f = cg_gpu_alloc(RF * 8), *fb = cg_gpu_alloc(RF * 8);
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, a, x, y, RN, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_allgather(NULL, g, b, y, z, RM, CG_INT32));
  ck_assert_cg_ok(cg_send(NULL, g, b, x, RN, CG_INT32, to));
  ck_assert_cg_ok(cg_recv(NULL, g, b, w, RN, CG_INT32, from));
  ck_assert_cg_ok(cg_broadcast(NULL, g, a, f, fb, RF, CG_FLOAT64, root));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "four nodes on two communicators");
  cg_graph_destroy(g);

  int32_t *hx = malloc(RN * 4), *hy = malloc(RN * 4), *hw = malloc(RN * 4), *hz = malloc((size_t)n * RM * 4);
  double *hf = malloc(RF * 8), *hfb = malloc(RF * 8);
  ck_assert(hx && hy && hw && hz && hf && hfb);
  int bad_replays = 0, first_bad = -1;
  char first_why[200] = "";
  cg_status_t st = CG_SUCCESS;
  for (int k = 0; k < REPLAYS && st == CG_SUCCESS; k++) {
    uint64_t seed = replay_seed(k);
    for (int i = 0; i < RN; i++) hx[i] = cg_gpu_value(seed, me, (uint64_t)i);
    for (int i = 0; i < RF; i++) hf[i] = cg_gpu_value(seed ^ 0xF, me, (uint64_t)i);
    to_device(x, hx, RN * 4);
    to_device(f, hf, RF * 8);
    replay_poison(y, RN * 4);
    replay_poison(w, RN * 4);
    replay_poison(z, (size_t)n * RM * 4);
    replay_poison(fb, RF * 8);
    st = cg_plan_launch(plan, cg_gpu_stream());
    if (st != CG_SUCCESS) break;
    replay_to_host(hy, y, RN * 4);
    replay_to_host(hw, w, RN * 4);
    replay_to_host(hz, z, (size_t)n * RM * 4);
    replay_to_host(hfb, fb, RF * 8);
    CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
    const char *why = NULL;
    int at = 0;
    for (int i = 0; i < RN && !why; i++) {
      at = i;
      if (hy[i] != cg_gpu_value_sum(seed, 0, n, (uint64_t)i))
        why = "allreduce y";
      else if (hw[i] != cg_gpu_value(seed, from, (uint64_t)i))
        why = "received w";
    }
    for (int i = 0; i < n * RM && !why; i++) {
      at = i;
      if (hz[i] != cg_gpu_value_sum(seed, 0, n, (uint64_t)(i % RM))) why = "allgather z";
    }
    for (int i = 0; i < RF && !why; i++) {
      at = i;
      if (hfb[i] != (double)cg_gpu_value(seed ^ 0xF, root, (uint64_t)i)) why = "broadcast fb";
    }
    if (why && bad_replays++ == 0) {
      first_bad = k;
      snprintf(first_why, sizeof first_why, "%s element %d", why, at);
    }
  }
  char what[400];
  snprintf(what, sizeof what, "cg_plan_launch: %s", st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, what);
  snprintf(what, sizeof what, "rank %d: %d of %d replays wrong; first: replay %d, %s", me, bad_replays, REPLAYS,
           first_bad, first_why);
  ck_assert_all_ranks(bad_replays == 0, what);
  cg_plan_destroy(plan);
  free(hx); free(hy); free(hw); free(hz); free(hf); free(hfb);
  cg_gpu_free(x); cg_gpu_free(y); cg_gpu_free(w); cg_gpu_free(z);
  cg_gpu_free(f); cg_gpu_free(fb);
}
END_TEST

/* ---- replays between the user's kernels on one stream, no host sync: per
 * replay a kernel writes x from the replay's seed and y and z are poisoned,
 * the plan runs (allreduce x -> y on A, allgather of the start of y -> z on B),
 * and kernels check y and z, counting wrong elements in that replay's counter
 * in device memory. One synchronization at the end. */

#define IN_N (((size_t)1 << 20) + 7)
#define IN_M ((size_t)4097)

START_TEST(nccl_replay__user_kernels_and_replays_interleave_on_one_stream_without_host_sync) {
  int me = cg_gpu_rank(), n = cg_gpu_size();
  cudaStream_t s = cg_gpu_stream();
  cg_comm_t *a = cg_gpu_shared_comm(0), *b = cg_gpu_shared_comm(1);
  int32_t *x = cg_gpu_alloc(IN_N * 4), *y = cg_gpu_alloc(IN_N * 4), *z = cg_gpu_alloc((size_t)n * IN_M * 4);
  unsigned long long *d_bad;
  CUDA_OK(cudaMalloc((void **)&d_bad, REPLAYS * sizeof *d_bad));
  CUDA_OK(cudaMemset(d_bad, 0, REPLAYS * sizeof *d_bad));
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, a, x, y, IN_N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_allgather(NULL, g, b, y, z, IN_M, CG_INT32));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "allreduce and allgather");
  cg_graph_destroy(g);
  CUDA_OK(cudaDeviceSynchronize());

  cg_status_t st = CG_SUCCESS;
  for (int k = 0; k < REPLAYS && st == CG_SUCCESS; k++) {
    uint64_t seed = replay_seed(k);
    CUDA_OK(cg_gpu_fill(x, 0, IN_N, seed, me, 0, s));
    replay_poison(y, IN_N * 4);
    replay_poison(z, (size_t)n * IN_M * 4);
    st = cg_plan_launch(plan, s);
    if (st != CG_SUCCESS) break;
    CUDA_OK(cg_gpu_check_sum(y, 0, IN_N, IN_N, seed, 0, n, &d_bad[k], s));
    CUDA_OK(cg_gpu_check_sum(z, 0, (size_t)n * IN_M, IN_M, seed, 0, n, &d_bad[k], s));
  }
  char what[400];
  snprintf(what, sizeof what, "cg_plan_launch: %s", st == CG_SUCCESS ? "" : cg_error_last());
  ck_assert_all_ranks(st == CG_SUCCESS, what);
  CUDA_OK(cudaStreamSynchronize(s));

  unsigned long long *bad = malloc(REPLAYS * sizeof *bad);
  int32_t *hy = malloc(IN_N * 4), *hz = malloc((size_t)n * IN_M * 4);
  ck_assert(bad && hy && hz);
  CUDA_OK(cudaMemcpy(bad, d_bad, REPLAYS * sizeof *bad, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hy, y, IN_N * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hz, z, (size_t)n * IN_M * 4, cudaMemcpyDeviceToHost));
  int bad_replays = 0, first_bad = -1;
  for (int k = 0; k < REPLAYS; k++)
    if (bad[k] && bad_replays++ == 0) first_bad = k;
  snprintf(what, sizeof what, "rank %d: the checking kernels found %d of %d replays wrong; first: replay %d (%llu "
           "elements)", me, bad_replays, REPLAYS, first_bad, first_bad >= 0 ? bad[first_bad] : 0ull);
  ck_assert_all_ranks(bad_replays == 0, what);
  uint64_t last = replay_seed(REPLAYS - 1);
  size_t wrong = 0;
  for (size_t i = 0; i < IN_N; i++) wrong += hy[i] != cg_gpu_value_sum(last, 0, n, i);
  for (size_t i = 0; i < (size_t)n * IN_M; i++) wrong += hz[i] != cg_gpu_value_sum(last, 0, n, i % IN_M);
  snprintf(what, sizeof what, "rank %d: %zu elements of the final output wrong (checked on the host)", me, wrong);
  ck_assert_all_ranks(wrong == 0, what);
  cg_plan_destroy(plan);
  free(bad); free(hy); free(hz);
  cg_gpu_free(d_bad); cg_gpu_free(x); cg_gpu_free(y); cg_gpu_free(z);
}
END_TEST

/* ---- cg_plan_run / start / test / wait on a device plan */

START_TEST(nccl_replay__run_start_test_wait_on_a_device_plan) {
  int me = cg_gpu_rank();
  uint64_t seed = replay_seed(-2);
  int32_t *x = cg_gpu_alloc(SN * 4), *y = cg_gpu_alloc(SN * 4);
  CUDA_OK(cg_gpu_fill(x, 0, SN, seed, me, 0, cg_gpu_stream()));
  CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(0), x, y, SN, CG_INT32, CG_SUM));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "one allreduce");
  cg_graph_destroy(g);

  int done = 0;
  ck_assert_cg_ok(cg_plan_test(&done, plan)); /* never started: complete */
  ck_assert_int_eq(done, 1);
  ck_assert_cg_ok(cg_plan_wait(plan));

  ck_assert_all_ranks(cg_plan_run(plan) == CG_SUCCESS, "cg_plan_run");
  ck_assert_all_ranks(replay_sum_right(y, seed), "output of cg_plan_run");

  for (int round = 0; round < 3; round++) {
    replay_poison_now(y, SN * 4);
    ck_assert_cg_ok(cg_plan_start(plan));
    /* a second start is refused while the first runs, or is a new run if it
     * has finished; ranks that were refused launch once more, so every rank
     * launches the same number of times (launching is collective) */
    cg_status_t again = cg_plan_start(plan);
    ck_assert_msg(again == CG_SUCCESS || again == CG_ERR_IN_PROGRESS, "second start: %s: %s",
                  cg_status_string(again), cg_error_last());
    int launched = again == CG_SUCCESS, any = 0;
    MPI_Allreduce(&launched, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any && !launched) {
      ck_assert_cg_ok(cg_plan_wait(plan));
      ck_assert_cg_ok(cg_plan_start(plan));
    }
    done = 0;
    cg_status_t st = CG_SUCCESS;
    while (st == CG_SUCCESS && !done) st = cg_plan_test(&done, plan); /* no assertion per poll */
    ck_assert_cg_ok(st);
    ck_assert_cg_ok(cg_plan_test(&done, plan));
    ck_assert_int_eq(done, 1);
    ck_assert_all_ranks(replay_sum_right(y, seed), "output of cg_plan_start + cg_plan_test");
  }

  replay_poison_now(y, SN * 4);
  ck_assert_cg_ok(cg_plan_start(plan));
  ck_assert_cg_ok(cg_plan_wait(plan));
  ck_assert_all_ranks(replay_sum_right(y, seed), "output of cg_plan_start + cg_plan_wait");

  replay_poison_now(y, SN * 4); /* launch and run mix */
  ck_assert_cg_ok(cg_plan_launch(plan, cg_gpu_stream()));
  CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
  ck_assert_all_ranks(replay_sum_right(y, seed), "output of cg_plan_launch after runs");

  ck_assert_cg_ok(cg_plan_start(plan)); /* destroying a running plan waits for it */
  cg_plan_destroy(plan);
  cg_gpu_free(x); cg_gpu_free(y);
}
END_TEST

/* cg_plan_run and cg_plan_start launch on the plan's own non-blocking streams:
 * they must wait for the legacy default stream, where cudaMemcpy from pageable
 * memory and cudaMemset may still be landing when they return. Here a kernel
 * keeps the legacy stream busy for 20 ms before the input is written on it,
 * and the host starts the plan at once: a replay that did not wait would read
 * the poisoned input. */
START_TEST(nccl_replay__run_and_start_wait_for_the_legacy_default_stream) {
  int me = cg_gpu_rank();
  int32_t *x = cg_gpu_alloc(SN * 4), *y = cg_gpu_alloc(SN * 4);
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(0), x, y, SN, CG_INT32, CG_SUM));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "one allreduce");
  cg_graph_destroy(g);
  for (int round = 0; round < 4; round++) {
    uint64_t seed = replay_seed(100 + round);
    replay_poison_now(x, SN * 4);
    replay_poison_now(y, SN * 4);
    CUDA_OK(cg_gpu_sleep(20000, cudaStreamLegacy));
    CUDA_OK(cg_gpu_fill(x, 0, SN, seed, me, 0, cudaStreamLegacy));
    if (round % 2 == 0) {
      ck_assert_cg_ok(cg_plan_run(plan));
    } else {
      ck_assert_cg_ok(cg_plan_start(plan));
      ck_assert_cg_ok(cg_plan_wait(plan));
    }
    char what[80];
    snprintf(what, sizeof what, "round %d (%s) after the legacy stream's fill", round,
             round % 2 == 0 ? "cg_plan_run" : "cg_plan_start + cg_plan_wait");
    ck_assert_all_ranks(replay_sum_right(y, seed), what);
  }
  cg_plan_destroy(plan);
  cg_gpu_free(x); cg_gpu_free(y);
}
END_TEST

/* ---- host functions become CUDA host nodes: ordered by their declared host
 * memory and run once per replay */

typedef struct digits {
  int64_t *cell;
  int digit;
} digits_t;

static void append_digit(void *arg) {
  digits_t *d = arg;
  *d->cell = *d->cell * 10 + d->digit;
}

START_TEST(nccl_replay__host_functions_run_once_per_replay_in_declared_order) {
  int me = cg_gpu_rank();
  uint64_t seed = replay_seed(-3);
  int32_t *x = cg_gpu_alloc(SN * 4), *y = cg_gpu_alloc(SN * 4);
  CUDA_OK(cg_gpu_fill(x, 0, SN, seed, me, 0, cg_gpu_stream()));
  int64_t cell = 0;
  digits_t one = {&cell, 1}, two = {&cell, 2};
  cg_range_t cell_range = {&cell, sizeof cell}, y_range = {y, SN * 4};
  cg_range_t first_writes[] = {cell_range}, second_reads[] = {y_range}, second_writes[] = {cell_range};
  cg_access_t first = CG_ACCESS_INIT, second = CG_ACCESS_INIT;
  first.everything = second.everything = 0;
  first.writes = first_writes;
  first.n_writes = 1;
  second.reads = second_reads; /* the allreduce's output, on the device: an ordering only */
  second.n_reads = 1;
  second.writes = second_writes;
  second.n_writes = 1;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_host_func(NULL, g, append_digit, &one, &first));
  ck_assert_cg_ok(cg_allreduce(NULL, g, cg_gpu_shared_comm(0), x, y, SN, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_host_func(NULL, g, append_digit, &two, &second));
  cg_plan_t *plan = cg_gpu_compile_all_ranks(g, "host functions around an allreduce");
  cg_graph_destroy(g);
  CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
  for (int k = 0; k < 3; k++) ck_assert_cg_ok(cg_plan_launch(plan, cg_gpu_stream()));
  CUDA_OK(cudaStreamSynchronize(cg_gpu_stream()));
  ck_assert_msg(cell == 121212, "rank %d: host functions left %lld, expected 121212", me, (long long)cell);
  ck_assert_all_ranks(replay_sum_right(y, seed), "the allreduce between host functions");
  cg_plan_destroy(plan);
  cg_gpu_free(x); cg_gpu_free(y);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nccl_replay");
  TCase *replay = cg_gpu_tcase("nccl_replay");
  tcase_add_test(replay, nccl_replay__thousand_replays_with_fresh_inputs_right_every_time);
  tcase_add_test(replay, nccl_replay__user_kernels_and_replays_interleave_on_one_stream_without_host_sync);
  tcase_add_test(replay, nccl_replay__run_start_test_wait_on_a_device_plan);
  tcase_add_test(replay, nccl_replay__run_and_start_wait_for_the_legacy_default_stream);
  tcase_add_test(replay, nccl_replay__host_functions_run_once_per_replay_in_declared_order);
  suite_add_tcase(s, replay);
  replay_add_api_tcase(s);
  return cg_gpu_test_main(s, "test_nccl_replay");
}
