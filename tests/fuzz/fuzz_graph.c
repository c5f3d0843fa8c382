/* Fuzz harness over the graph and scheduler layers: the input bytes are a
 * program of recording, edge, naming, compile, rebind, dump and destroy calls,
 * valid and invalid, on offline communicators (which compile but never run,
 * so buffers are only addresses and may be anything). The library must not
 * crash, leak (ASan) or misbehave (UBSan), and a call that fails must leave the
 * graph as it was: its stats and DOT text are compared around every failure.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt): with libFuzzer (-DCG_FUZZ=ON,
 * clang) as `fuzz_graph`, and as `fuzz_graph_replay`, which runs the files
 * given on its command line (the corpus in tests/fuzz/corpus) through the same
 * function, so CI replays the corpus in every build, sanitizers included. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OPS 96
#define MAX_NODES 64

typedef struct input {
  const uint8_t *p;
  size_t n;
} input_t;

static uint8_t byte(input_t *in) {
  if (!in->n) return 0;
  in->n--;
  return *in->p++;
}

static uint64_t bytes(input_t *in, int k) {
  uint64_t v = 0;
  for (int i = 0; i < k; i++) v = v << 8 | byte(in);
  return v;
}

/* Buffers are addresses only: a small region (so nodes overlap and hazards
 * form), NULL, the end of the address space, or anything. */
static char region[4096];

static void *address(input_t *in) {
  switch (byte(in) % 8) {
    case 0: return NULL;
    case 1: return (void *)(UINTPTR_MAX - byte(in));
    case 2: return (void *)(uintptr_t)bytes(in, 8);
    default: return region + bytes(in, 2) % sizeof region;
  }
}

static size_t count_of(input_t *in) {
  switch (byte(in) % 8) {
    case 0: return 0;
    case 1: return (size_t)bytes(in, 8);
    case 2: return SIZE_MAX - byte(in);
    case 3: return (size_t)bytes(in, 2);
    default: return byte(in) % 64;
  }
}

static int small_int(input_t *in) {
  switch (byte(in) % 8) {
    case 0: return -1;
    case 1: return (int)(int32_t)bytes(in, 4);
    default: return byte(in) % 9;
  }
}

/* Host functions run when a plan has no communicator (nothing offline in it). */
static void host_function(void *arg) { (void)arg; }

typedef struct state {
  cg_comm_t *comms[3];
  cg_graph_t *graphs[2];
  cg_node_t nodes[MAX_NODES];
  int n_nodes;
  cg_plan_t *plan;
  FILE *sink;
} state_t;

static cg_node_t some_node(state_t *s, input_t *in) {
  uint8_t pick = byte(in);
  if (pick % 8 == 0) return (cg_node_t){bytes(in, 8), (uint32_t)bytes(in, 4)}; /* garbage */
  if (!s->n_nodes) return (cg_node_t)CG_NODE_NULL;
  return s->nodes[pick % s->n_nodes];
}

/* What a graph looks like from outside: its stats and its DOT text. */
typedef struct look {
  cg_graph_stats_t stats;
  char *dot;
  size_t len;
} look_t;

static void look_at(look_t *l, const cg_graph_t *g) {
  memset(l, 0, sizeof *l);
  if (!g) return;
  if (cg_graph_stats(&l->stats, g) != CG_SUCCESS) abort();
  FILE *f = open_memstream(&l->dot, &l->len);
  if (!f || cg_graph_write_dot(g, f) != CG_SUCCESS) abort();
  fclose(f);
}

static void same_look(const look_t *a, const look_t *b, const char *call) {
  if (memcmp(&a->stats, &b->stats, sizeof a->stats) != 0 || a->len != b->len ||
      (a->len && memcmp(a->dot, b->dot, a->len) != 0)) {
    fprintf(stderr, "fuzz_graph: a failed %s changed the graph (%s)\n", call, cg_error_last());
    abort();
  }
}

static cg_status_t record(state_t *s, cg_graph_t *g, input_t *in, cg_node_t *out) {
  cg_comm_t *c = byte(in) % 5 ? s->comms[byte(in) % 3] : NULL;
  void *send = address(in), *recv = byte(in) % 4 ? address(in) : send;
  size_t count = count_of(in);
  cg_dtype_t t = (cg_dtype_t)(byte(in) % 16 ? byte(in) % CG_DTYPE_COUNT : small_int(in));
  cg_redop_t op = (cg_redop_t)(byte(in) % 16 ? byte(in) % CG_REDOP_COUNT : small_int(in));
  int root = small_int(in);
  switch (byte(in) % 13) {
    case 0: return cg_allreduce(out, g, c, send, recv, count, t, op);
    case 1: return cg_broadcast(out, g, c, send, recv, count, t, root);
    case 2: return cg_reduce(out, g, c, send, recv, count, t, op, root);
    case 3: return cg_allgather(out, g, c, send, recv, count, t);
    case 4: return cg_reduce_scatter(out, g, c, send, recv, count, t, op);
    case 5: return cg_alltoall(out, g, c, send, recv, count, t);
    case 6: return cg_gather(out, g, c, send, recv, count, t, root);
    case 7: return cg_scatter(out, g, c, send, recv, count, t, root);
    case 8: return cg_send(out, g, c, send, count, t, root);
    case 9: return cg_recv(out, g, c, recv, count, t, root);
    case 10: return cg_barrier(out, g, c);
    default: {
      cg_range_t ranges[6];
      cg_access_t access = CG_ACCESS_INIT;
      int n_reads = byte(in) % 4, n_writes = byte(in) % 4;
      for (int k = 0; k < n_reads + n_writes; k++) ranges[k] = (cg_range_t){address(in), count_of(in)};
      access.everything = byte(in) % 4 == 0;
      access.reads = byte(in) % 16 ? ranges : NULL;
      access.n_reads = (size_t)n_reads;
      access.writes = ranges + n_reads;
      access.n_writes = (size_t)n_writes;
      if (byte(in) % 32 == 0) access.size = 0;
      return cg_host_func(out, g, byte(in) % 16 ? host_function : NULL, NULL, byte(in) % 8 ? &access : NULL);
    }
  }
}

static void compile(state_t *s, cg_graph_t *g, input_t *in) {
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.fusion = byte(in) % 2;
  opts.bucket_bytes = byte(in) % 2 ? (size_t)bytes(in, 3) : 0;
  opts.check_ranks = byte(in) % 2;
  opts.name = byte(in) % 2 ? "fuzz" : NULL;
  cg_plan_t *plan = NULL;
  if (cg_compile(&plan, g, &opts) != CG_SUCCESS) return;
  cg_plan_stats_t stats;
  if (cg_plan_stats(&stats, plan) != CG_SUCCESS || cg_plan_dump(plan, s->sink) != CG_SUCCESS ||
      cg_plan_write_dot(plan, s->sink) != CG_SUCCESS)
    abort();
  /* offline communicators have no transport: running must be refused; a plan
   * of host functions alone runs */
  if ((cg_plan_run(plan) == CG_SUCCESS) != (stats.communicators == 0)) {
    fprintf(stderr, "fuzz_graph: cg_plan_run of a plan with %zu offline communicators: %s\n", stats.communicators,
            cg_error_last());
    abort();
  }
  cg_plan_destroy(s->plan);
  s->plan = plan;
}

static void rebind(state_t *s, input_t *in) {
  cg_rebind_t binds[4];
  size_t n = byte(in) % 5;
  for (size_t k = 0; k < n; k++) binds[k] = (cg_rebind_t){some_node(s, in), address(in), address(in)};
  char *before = NULL, *after = NULL;
  size_t before_len = 0, after_len = 0;
  FILE *f = open_memstream(&before, &before_len);
  if (!f) abort();
  cg_plan_dump(s->plan, f);
  fclose(f);
  if (cg_plan_rebind(s->plan, byte(in) % 16 ? binds : NULL, n) != CG_SUCCESS) {
    f = open_memstream(&after, &after_len);
    if (!f) abort();
    cg_plan_dump(s->plan, f);
    fclose(f);
    if (before_len != after_len || memcmp(before, after, before_len) != 0) {
      fprintf(stderr, "fuzz_graph: a failed cg_plan_rebind changed the plan (%s)\n", cg_error_last());
      abort();
    }
  }
  free(before);
  free(after);
}

static void step(state_t *s, input_t *in) {
  int which = byte(in) % 2;
  cg_graph_t *g = s->graphs[which];
  look_t before, after;
  uint8_t op = byte(in) % 16;
  if (op == 15) { /* a new graph in this slot */
    cg_graph_destroy(g);
    s->graphs[which] = NULL;
    if (cg_graph_create(&s->graphs[which], NULL) != CG_SUCCESS) abort();
    return;
  }
  if (op == 14) {
    compile(s, g, in);
    return;
  }
  if (op == 13) {
    if (s->plan) rebind(s, in);
    return;
  }
  if (op == 12) {
    cg_plan_destroy(s->plan);
    s->plan = NULL;
    return;
  }
  look_at(&before, g);
  cg_status_t st;
  const char *call;
  if (op == 11) {
    call = "cg_depend";
    st = cg_depend(byte(in) % 16 ? g : NULL, some_node(s, in), some_node(s, in));
  } else if (op == 10) {
    char name[300];
    size_t len = byte(in) % sizeof name;
    for (size_t k = 0; k < len; k++) name[k] = (char)(byte(in) | 1);
    name[len] = '\0';
    call = "cg_node_name";
    st = cg_node_name(g, some_node(s, in), byte(in) % 16 ? name : NULL);
  } else {
    cg_node_t node;
    call = "recording";
    st = record(s, byte(in) % 32 ? g : NULL, in, &node);
    if (st == CG_SUCCESS && s->n_nodes < MAX_NODES) s->nodes[s->n_nodes++] = node;
  }
  if (st != CG_SUCCESS) {
    look_at(&after, g);
    same_look(&before, &after, call);
    free(after.dot);
  }
  free(before.dot);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input_t in = {data, size};
  state_t s;
  memset(&s, 0, sizeof s);
  if (cg_comm_create_offline(&s.comms[0], 1, 4) != CG_SUCCESS || cg_comm_create_offline(&s.comms[1], 0, 1) != CG_SUCCESS ||
      cg_comm_create_offline(&s.comms[2], 7, 8) != CG_SUCCESS || cg_graph_create(&s.graphs[0], NULL) != CG_SUCCESS ||
      cg_graph_create(&s.graphs[1], NULL) != CG_SUCCESS || !(s.sink = fopen("/dev/null", "w")))
    abort();
  for (int op = 0; op < MAX_OPS && in.n; op++) step(&s, &in);
  cg_plan_destroy(s.plan);
  for (int k = 0; k < 2; k++) cg_graph_destroy(s.graphs[k]);
  for (int k = 0; k < 3; k++) cg_comm_destroy(s.comms[k]);
  fclose(s.sink);
  return 0;
}
