/* Recording speed with hazard analysis: nodes per second for several access
 * patterns at 100,000 nodes, next to a naive all-pairs scan that finds the same
 * conflicts. One core, one process; run it on a quiet machine. Where the
 * all-pairs scan runs (nodes <= naive-limit, at most CHECK_LIMIT), the
 * recorded graph is checked against it: every edge the hazard analysis made
 * (RAW, WAR, WAW, fence) joins a conflicting pair, and every conflicting pair
 * of buffers is ordered by a path of such edges (the edges that keep the
 * communicator's record order are not counted, since they alone would order
 * every pair here; a barrier is ordered by them); a failure prints WRONG and
 * exits 1.
 *
 *   build/tests/perf/bench_record [nodes] [naive-limit]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "commgraph.h"
#include "graph_view.h"
#include "hazard.h"

/* The largest graph whose ancestor sets are checked (two sets: n^2 / 4 bytes). */
#define CHECK_LIMIT 10000

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint64_t next_random(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef enum { SORTED_DISTINCT, SHUFFLED_DISTINCT, RANDOM_OVERLAPS, OVERLAPS_WITH_FENCES, PATTERN_COUNT } pattern_t;
static const char *pattern_names[] = {"distinct buffers, address order", "distinct buffers, shuffled",
                                      "random overlapping ranges", "overlaps + fence every 1000"};

typedef struct op {
  int kind; /* 0 allreduce, 1 in-place allreduce, 2 send, 3 recv, 4 barrier */
  uintptr_t send, recv;
  size_t count;
} op_t;

/* The program to record: same ops for commgraph and the naive scan. */
static op_t *make_ops(pattern_t p, size_t n) {
  op_t *ops = malloc(n * sizeof *ops);
  const uintptr_t base = 0x100000000ull;
  for (size_t i = 0; i < n; i++) {
    if (p <= SHUFFLED_DISTINCT) {
      ops[i] = (op_t){1, base + i * 4096, base + i * 4096, 1000};
      continue;
    }
    const uintptr_t arena = 64u << 20;
    size_t count = 1 + next_random() % 4096;
    uintptr_t a = base + (next_random() % (arena / 4)) * 4, b = base + (next_random() % (arena / 4)) * 4;
    int kind = (int)(next_random() % 4);
    if (p == OVERLAPS_WITH_FENCES && i % 1000 == 999) kind = 4;
    if (kind == 0 && !((a + count * 4 <= b) || (b + count * 4 <= a))) kind = 1;
    ops[i] = (op_t){kind, a, kind == 1 ? a : b, count};
  }
  if (p == SHUFFLED_DISTINCT)
    for (size_t i = n - 1; i > 0; i--) {
      size_t j = (size_t)(next_random() % (i + 1));
      op_t t = ops[i];
      ops[i] = ops[j];
      ops[j] = t;
    }
  return ops;
}

/* Records the ops and returns the seconds it took; *kept (when not NULL)
 * receives the graph and *comm_out its communicator, for the caller to
 * destroy. */
static double record(const op_t *ops, size_t n, size_t *edges, cg_graph_t **kept, cg_comm_t **comm_out) {
  cg_comm_t *comm;
  cg_graph_t *g;
  if (cg_comm_create_offline(&comm, 0, 2) != CG_SUCCESS || cg_graph_create(&g, NULL) != CG_SUCCESS) exit(1);
  double t0 = now_seconds();
  for (size_t i = 0; i < n; i++) {
    const op_t *o = &ops[i];
    cg_status_t st;
    switch (o->kind) {
      case 0:
      case 1:
        st = cg_allreduce(NULL, g, comm, (void *)o->send, (void *)o->recv, o->count, CG_FLOAT32, CG_SUM);
        break;
      case 2:
        st = cg_send(NULL, g, comm, (void *)o->send, o->count, CG_FLOAT32, 1);
        break;
      case 3:
        st = cg_recv(NULL, g, comm, (void *)o->recv, o->count, CG_FLOAT32, 1);
        break;
      default:
        st = cg_barrier(NULL, g, comm);
    }
    if (st != CG_SUCCESS) {
      fprintf(stderr, "record failed: %s\n", cg_error_last());
      exit(1);
    }
  }
  double t = now_seconds() - t0;
  cg_graph_stats_t s;
  cg_graph_stats(&s, g);
  *edges = s.edges;
  if (kept) {
    *kept = g, *comm_out = comm;
  } else {
    cg_graph_destroy(g);
    cg_comm_destroy(comm);
  }
  return t;
}

/* Whether b (recorded after a) must wait for a because of their buffers:
 * overlapping bytes that one of them writes. */
static int data_conflict(const op_t *a, const op_t *b) {
  if (a->kind == 4 || b->kind == 4) return 0; /* a barrier has no buffers */
  uintptr_t as = a->kind == 3 ? 0 : a->send, aw = a->kind == 2 ? 0 : a->recv, al = a->count * 4;
  uintptr_t bs = b->kind == 3 ? 0 : b->send, bw = b->kind == 2 ? 0 : b->recv, bl = b->count * 4;
  return (aw && bs && aw < bs + bl && bs < aw + al) || (as && bw && as < bw + bl && bw < as + al) ||
         (aw && bw && aw < bw + bl && bw < aw + al);
}

/* Whether b must wait for a: a barrier, or their buffers. */
static int conflict(const op_t *a, const op_t *b) { return a->kind == 4 || b->kind == 4 || data_conflict(a, b); }

/* 1 when g orders what the ops need and nothing more. Each edge the hazard
 * analysis made (RAW, WAR, WAW) or a barrier's (fence) joins a conflicting
 * pair. A barrier is a fence: every node before it reaches it and it reaches
 * every node after, by any edges. Two nodes whose buffers conflict with no
 * barrier between them are joined by a path of hazard edges alone (the
 * communicator's record-order edges would order every pair here); with a
 * barrier between them, through it. */
static int edges_right(const cg_graph_t *g, const op_t *ops, size_t n, const char *pattern) {
  size_t words = (n + 63) / 64;
  /* ancestors of each node: through any edges, and through hazard edges */
  uint64_t *all = calloc(n * words, sizeof *all), *hazard = calloc(n * words, sizeof *hazard);
  if (!all || !hazard) exit(1);
  int ok = 1;
  size_t last_barrier = SIZE_MAX;
  for (size_t v = 0; v < n && ok; v++) {
    const cg_node_rec_t *node = cg_graph_node(g, (uint32_t)v);
    uint64_t *any = all + v * words, *data = hazard + v * words;
    for (uint32_t e = 0; e < node->preds.len && ok; e++) {
      uint32_t p = node->preds.items[e].node, causes = node->preds.items[e].causes;
      if (p >= v) {
        fprintf(stderr, "bench_record: WRONG: %s: edge %u -> %zu goes backwards\n", pattern, p, v);
        ok = 0;
      }
      for (size_t w = 0; w < words && ok; w++) any[w] |= all[p * words + w];
      any[p / 64] |= 1ull << (p % 64);
      if (causes == CG_EDGE_COMM_ORDER) continue;
      if (!conflict(&ops[p], &ops[v])) {
        fprintf(stderr, "bench_record: WRONG: %s: edge %u -> %zu (causes %#x) joins no conflicting pair\n", pattern,
                p, v, causes);
        ok = 0;
      }
      for (size_t w = 0; w < words && ok; w++) data[w] |= hazard[p * words + w];
      data[p / 64] |= 1ull << (p % 64);
    }
    for (size_t i = 0; i < v && ok; i++) {
      int barrier = ops[i].kind == 4 || ops[v].kind == 4 || (last_barrier != SIZE_MAX && last_barrier > i);
      const uint64_t *reach = barrier ? any : data;
      if ((barrier || data_conflict(&ops[i], &ops[v])) && !(reach[i / 64] >> (i % 64) & 1)) {
        fprintf(stderr, "bench_record: WRONG: %s: node %zu is not ordered after node %zu (%s)\n", pattern, v, i,
                barrier ? "a barrier between or at them" : "their buffers conflict");
        ok = 0;
      }
    }
    if (ops[v].kind == 4) last_barrier = v;
  }
  free(all);
  free(hazard);
  return ok;
}

/* What the interval structure replaces: compare each node with every earlier
 * one. Counts conflicting pairs (a superset of the edges commgraph keeps). */
static double naive(const op_t *ops, size_t n, size_t *conflicts) {
  double t0 = now_seconds();
  size_t found = 0;
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < j; i++) found += (size_t)conflict(&ops[i], &ops[j]);
  *conflicts = found;
  return now_seconds() - t0;
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000;
  size_t naive_limit = argc > 2 ? strtoull(argv[2], NULL, 10) : 100000;
  printf("commgraph %s: recording %zu nodes with hazard analysis (one core)\n\n", CG_VERSION_STRING, n);
  printf("%-34s %10s %10s %12s %10s %12s %10s\n", "pattern", "nodes", "edges", "commgraph ms", "ns/node",
         "all-pairs ms", "speed-up");
  for (int p = 0; p < PATTERN_COUNT; p++) {
    op_t *ops = make_ops((pattern_t)p, n);
    size_t edges = 0, conflicts = 0;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
      double t = record(ops, n, &edges, NULL, NULL);
      if (t < best) best = t;
    }
    printf("%-34s %10zu %10zu %12.1f %10.0f", pattern_names[p], n, edges, best * 1e3, best * 1e9 / (double)n);
    if (n <= naive_limit) {
      double t = naive(ops, n, &conflicts);
      printf(" %12.1f %9.0fx   (%zu conflicting pairs)\n", t * 1e3, t / best, conflicts);
      if (n <= CHECK_LIMIT) {
        cg_graph_t *g;
        cg_comm_t *comm;
        record(ops, n, &edges, &g, &comm);
        int ok = edges_right(g, ops, n, pattern_names[p]);
        cg_graph_destroy(g);
        cg_comm_destroy(comm);
        if (!ok) return 1;
      }
    } else {
      printf(" %12s %10s\n", "-", "-");
    }
    free(ops);
  }
  if (n <= naive_limit && n <= CHECK_LIMIT)
    printf("\nedges checked against the all-pairs scan: every dependency needed, none extra\n");
  else
    printf("\nedges not checked: the check runs up to %d nodes, where the all-pairs scan runs too\n", CHECK_LIMIT);
  return 0;
}
