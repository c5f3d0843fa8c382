/* Shared helpers for the Check suites: a reproducible random source, status
 * assertions that print cg_error_last(), and a main() body. */
#ifndef CG_TEST_SUPPORT_H
#define CG_TEST_SUPPORT_H

#include <check.h>
#include <stdint.h>

#include "commgraph.h"

/* Seed of this run: $CG_TEST_SEED if set, else drawn from the clock. Printed by
 * cg_test_main so a failing run can be repeated. */
uint64_t cg_test_seed(void);
/* Next value of a xorshift64* stream seeded from cg_test_seed() (per process;
 * each forked test continues from the same state, so reseed with
 * cg_test_reseed(salt) at the start of a test for independent streams). */
uint64_t cg_test_rand(void);
void cg_test_reseed(uint64_t salt);
/* Replaces the seed (MPI suites use rank 0's on every rank). */
void cg_test_set_seed(uint64_t value);
/* Uniform in [0, bound). */
uint64_t cg_test_below(uint64_t bound);

/* ck_assert for hot loops: Check logs every passing ck_assert, which costs a
 * system call each. */
#define REQUIRE(cond, ...)                  \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

#define ck_assert_cg_ok(expr)                                                                           \
  do {                                                                                                 \
    cg_status_t cg_test_status_ = (expr);                                                              \
    ck_assert_msg(cg_test_status_ == CG_SUCCESS, "%s returned %s: %s", #expr,                          \
                  cg_status_string(cg_test_status_), cg_error_last());                                 \
  } while (0)

#define ck_assert_cg_status(expr, expected)                                                            \
  do {                                                                                                 \
    cg_status_t cg_test_status_ = (expr);                                                              \
    ck_assert_msg(cg_test_status_ == (expected), "%s returned %s (%s), expected %s", #expr,           \
                  cg_status_string(cg_test_status_), cg_error_last(), cg_status_string(expected));     \
  } while (0)

/* Monotonic seconds, and a sleep of `seconds`, for tests of timeouts. */
double cg_test_now_s(void);
void cg_test_nap(double seconds);

/* A host function that does nothing, for recording host-function nodes. */
void cg_test_noop(void *arg);

/* The ten node kinds that run on a communicator and touch buffers. */
extern const cg_node_kind_t cg_test_comm_kinds[10];
#define CG_TEST_N_COMM_KINDS 10
int cg_test_kind_has_op(cg_node_kind_t kind);    /* takes a reduction */
int cg_test_kind_is_rooted(cg_node_kind_t kind); /* takes a root */
int cg_test_kind_is_p2p(cg_node_kind_t kind);    /* send or recv */

/* One recording call with every argument any kind takes. */
typedef struct cg_test_call {
  cg_node_kind_t kind;
  cg_comm_t *comm;
  const void *send; /* also the host function's argument */
  void *recv;
  size_t count;
  cg_dtype_t dtype;
  cg_redop_t op;
  int root; /* root or peer */
} cg_test_call_t;
/* Makes the public recording call for call->kind (collectives, send, recv,
 * barrier, host function with no declared access). */
cg_status_t cg_test_record(cg_node_t *out, cg_graph_t *graph, const cg_test_call_t *call);

/* Elements this rank reads from send / writes to recv (0: unused), written out
 * from the header's documentation, independently of graph/record.c. */
size_t cg_test_send_elems(cg_node_kind_t kind, size_t count, int size, int rank, int root);
size_t cg_test_recv_elems(cg_node_kind_t kind, size_t count, int size, int rank, int root);

/* The graph's DOT text (malloc'ed); fails the test if writing fails. */
char *cg_test_dot_text(const cg_graph_t *graph);

/* Runs `suite`, prints the seed, returns the process exit status. */
int cg_test_main(Suite *suite);

/* cg_test_main for a suite that needs a GPU: without one it prints why and
 * returns 77 (ctest's skip), or fails under CG_REQUIRE_GPU (scripts/gpu-test,
 * where a skip is a failure). CUDA builds only. */
int cg_test_gpu_main(Suite *suite, const char *name);

#if CG_HAVE_CUDA
#include <cuda_runtime_api.h>
/* Fails the test unless the CUDA call returns cudaSuccess, naming the call
 * and CUDA's error (the MPI GPU suites' gpu_test.h adds the rank). */
#define CUDA_OK(expr)                                                                               \
  do {                                                                                              \
    cudaError_t cuda_err_ = (expr);                                                                 \
    ck_assert_msg(cuda_err_ == cudaSuccess, "%s failed: %s", #expr, cudaGetErrorString(cuda_err_)); \
  } while (0)
/* A CUDA graph of one memset node setting the n 4-byte elements at dst to
 * value (the caller destroys it); fails the test if CUDA refuses. */
cudaGraph_t cg_test_memset_graph(void *dst, size_t n, unsigned value);
#endif

/* A plan's dump (dot 0) or DOT text (dot 1), malloc'ed; fails the test if
 * writing it fails. */
char *cg_test_plan_text(const cg_plan_t *plan, int dot);

#endif
