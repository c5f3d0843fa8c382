/* Tuning files (sched/compile/tuning_file.c): the writer and the reader
 * round-trip random tunings exactly (names with quotes, backslashes, control
 * bytes and UTF-8; doubles of any magnitude); every way a file can be
 * malformed or fail to match its graph is refused with
 * CG_ERR_INVALID_ARGUMENT naming the file, the line and what differs; and,
 * on offline communicators (no ranks to agree with), a plan compiled with a
 * tuning saves it, and compiling with that file gives the same buckets, or
 * the default ones where the file says the default won. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan_internal.h"
#include "test_support.h"
#include "tuning.h"
#include "tuning_file.h"

#define MAX_NODES 48
#define MAX_COMMS 5

typedef struct case_data {
  cg_tuning_shape_t shape;
  const char *names[MAX_NODES];
  char name_text[MAX_NODES][40];
  uint8_t communicates[MAX_NODES];
  int sizes[MAX_COMMS], ranks[MAX_COMMS];
  double ready[MAX_NODES], alpha[MAX_COMMS], bw[MAX_COMMS], overlap[MAX_COMMS];
  cg_cost_path_t paths[MAX_COMMS];
  cg_tuning_values_t values;
} case_t;

/* A double with random bits that is finite and >= 0 (> 0 if `positive`). */
static double random_double(int positive) {
  for (;;) {
    uint64_t bits = cg_test_rand();
    double v;
    switch (cg_test_below(4)) {
    case 0: v = (double)cg_test_below(100000); break;            /* integers */
    case 1: v = (double)cg_test_below(1u << 30) / 1024.0; break;  /* binary fractions */
    case 2: v = (double)cg_test_rand() / 3.0; break;              /* large, inexact */
    default: memcpy(&v, &bits, sizeof v); v = fabs(v); break;    /* any bits: subnormals, 1e300 */
    }
    if (isfinite(v) && (!positive || v > 0)) return v;
  }
}

static void random_name(char *buf, size_t size) {
  static const char pieces[] = "ab _\"\\\t\n#%.\x01\x7f\xc3\xa9zZ9";
  size_t n = cg_test_below(size - 1);
  for (size_t i = 0; i < n; i++) buf[i] = pieces[cg_test_below(sizeof pieces - 1)];
  buf[n] = '\0';
}

static void random_case(case_t *c) {
  memset(c, 0, sizeof *c);
  c->shape.n_nodes = (uint32_t)cg_test_below(MAX_NODES + 1);
  c->shape.n_comms = (uint32_t)cg_test_below(MAX_COMMS + 1);
  for (uint32_t i = 0; i < c->shape.n_nodes; i++) {
    c->communicates[i] = cg_test_below(3) != 0;
    if (cg_test_below(4)) {
      random_name(c->name_text[i], sizeof c->name_text[i]);
      c->names[i] = c->name_text[i];
    }
    c->ready[i] = c->communicates[i] ? random_double(0) : 0;
  }
  for (uint32_t k = 0; k < c->shape.n_comms; k++) {
    c->sizes[k] = 1 + (int)cg_test_below(64);
    c->ranks[k] = (int)cg_test_below((uint64_t)c->sizes[k]);
    c->alpha[k] = random_double(0);
    c->bw[k] = random_double(1);
    c->overlap[k] = cg_test_below(2) ? random_double(0) : 0; /* 0 is left out of the file */
    if (cg_test_below(2)) { /* a backend's own path; none is left out of the file */
      c->paths[k].dtypes = 1u + (uint32_t)cg_test_below(UINT32_MAX);
      c->paths[k].ops = (uint32_t)cg_test_below((uint64_t)UINT32_MAX + 1);
      for (uint32_t i = 0; i < CG_COST_PATH_SIZES; i++)
        if (cg_test_below(3)) c->paths[k].path_us[i] = random_double(0), c->paths[k].library_us[i] = random_double(0);
    }
  }
  c->shape.names = cg_test_below(5) ? c->names : NULL;
  c->shape.communicates = c->communicates;
  c->shape.sizes = c->sizes;
  c->shape.ranks = c->ranks;
  c->values = (cg_tuning_values_t){c->ready, c->alpha, c->bw, c->overlap, c->paths, (int)cg_test_below(2)};
}

/* The file's text (malloc'ed). */
static char *written(const case_t *c) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  ck_assert_cg_ok(cg_tuning_file_write(f, "t.txt", &c->shape, &c->values, "test"));
  long n = ftell(f);
  char *text = malloc((size_t)n + 1);
  rewind(f);
  ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
  text[n] = '\0';
  fclose(f);
  return text;
}

/* Reads `text` against c's shape into fresh arrays; the status. */
static cg_status_t read_text(const char *text, const case_t *c, case_t *into) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  rewind(f);
  memset(into, 0, sizeof *into);
  for (int k = 0; k < MAX_COMMS; k++) { /* poisoned: every read sets them */
    into->overlap[k] = -1;
    memset(&into->paths[k], 0xa5, sizeof into->paths[k]);
  }
  into->values = (cg_tuning_values_t){into->ready, into->alpha, into->bw, into->overlap, into->paths, -1};
  cg_status_t st = cg_tuning_file_read(f, "t.txt", &c->shape, &into->values, "test");
  fclose(f);
  return st;
}

START_TEST(tuning_file__random_tunings_round_trip_exactly) {
  cg_test_reseed((uint64_t)_i);
  case_t c, back;
  random_case(&c);
  char *text = written(&c);
  ck_assert_msg(read_text(text, &c, &back) == CG_SUCCESS, "%s\n%s", cg_error_last(), text);
  for (uint32_t i = 0; i < c.shape.n_nodes; i++)
    if (c.communicates[i]) ck_assert_msg(!memcmp(&back.ready[i], &c.ready[i], sizeof(double)), "node %u", i);
  ck_assert(!memcmp(back.alpha, c.alpha, c.shape.n_comms * sizeof(double)));
  ck_assert(!memcmp(back.bw, c.bw, c.shape.n_comms * sizeof(double)));
  ck_assert(!memcmp(back.overlap, c.overlap, c.shape.n_comms * sizeof(double)));
  for (uint32_t k = 0; k < c.shape.n_comms; k++) {
    const cg_cost_path_t *a = &c.paths[k], *b = &back.paths[k];
    ck_assert_msg(a->dtypes == b->dtypes && a->ops == b->ops && !memcmp(a->path_us, b->path_us, sizeof a->path_us) &&
                      !memcmp(a->library_us, b->library_us, sizeof a->library_us),
                  "communicator %u's path", k);
  }
  ck_assert_int_eq(back.values.default_won, c.values.default_won);
  /* another rank's file: only the ranks differ, and they are not compared */
  for (uint32_t k = 0; k < c.shape.n_comms; k++) c.ranks[k] = (c.ranks[k] + 1) % c.sizes[k];
  ck_assert_msg(read_text(text, &c, &back) == CG_SUCCESS, "%s", cg_error_last());
  free(text);
}
END_TEST

/* `text` with line `line` (1-based) replaced by `with` (NULL: removed). */
static char *edit_line(const char *text, unsigned line, const char *with) {
  size_t n = strlen(text) + (with ? strlen(with) : 0) + 2;
  char *out = malloc(n), *o = out;
  unsigned at = 1;
  for (const char *p = text; *p;) {
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) + 1 : strlen(p);
    if (at == line) {
      if (with) o += sprintf(o, "%s\n", with);
    } else {
      memcpy(o, p, len), o += len;
    }
    p += len, at++;
  }
  *o = '\0';
  return out;
}

/* The line of `text` that starts with `prefix`; 0 if none. */
static unsigned line_of(const char *text, const char *prefix) {
  unsigned at = 1;
  for (const char *p = text; *p; at++) {
    if (!strncmp(p, prefix, strlen(prefix))) return at;
    const char *end = strchr(p, '\n');
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

static void expect_refused(const char *text, const case_t *c, unsigned line, const char *reason) {
  case_t back;
  char where[32];
  ck_assert_msg(read_text(text, c, &back) == CG_ERR_INVALID_ARGUMENT, "accepted (%s):\n%s", reason, text);
  snprintf(where, sizeof where, "t.txt:%u: ", line);
  ck_assert_msg(strstr(cg_error_last(), where) && strstr(cg_error_last(), reason) &&
                    !strncmp(cg_error_last(), "test: tuning file", 17),
                "expected '%s' and '%s' in: %s", where, reason, cg_error_last());
}

/* A fixed shape: 4 nodes (1 and 3 on communicators), 2 communicators. */
static void fixed_case(case_t *c) {
  memset(c, 0, sizeof *c);
  static const char *const names[] = {"fwd", "grad.1", NULL, "grad \"0\""};
  c->shape = (cg_tuning_shape_t){4, names, c->communicates, 2, c->sizes, c->ranks};
  c->communicates[1] = c->communicates[3] = 1;
  c->sizes[0] = 4, c->sizes[1] = 2, c->ranks[0] = 3, c->ranks[1] = 1;
  c->ready[1] = 1.5, c->ready[3] = 2500.25, c->alpha[0] = 12, c->alpha[1] = 0.5, c->bw[0] = 3e4, c->bw[1] = 1e5;
  c->paths[0].dtypes = 1u << CG_FLOAT32, c->paths[0].ops = 1u << CG_SUM;
  c->paths[0].path_us[0] = 4.5, c->paths[0].library_us[0] = 11.25;
  c->values = (cg_tuning_values_t){c->ready, c->alpha, c->bw, c->overlap, c->paths, 0};
}

/* A comm_path line for communicator k: `times` for path_us, 1 for the rest. */
static char *path_line(unsigned k, const char *times) {
  char *line = malloc(1024);
  int n = snprintf(line, 1024, "comm_path %u dtypes 2 ops 1 path_us %s library_us", k, times);
  for (unsigned i = 0; i < CG_COST_PATH_SIZES; i++) n += snprintf(line + n, 1024 - (size_t)n, " 1");
  return line;
}

START_TEST(tuning_file__mismatches_and_malformed_files_are_named) {
  case_t c;
  fixed_case(&c);
  char *text = written(&c);
  unsigned nodes = line_of(text, "nodes "), n1 = line_of(text, "node 1 "), n3 = line_of(text, "node 3 ");
  unsigned comms = line_of(text, "comms "), c0 = line_of(text, "comm 0 "), c1 = line_of(text, "comm 1 ");
  unsigned bounds = line_of(text, "boundaries "), end = line_of(text, "end"), cp = line_of(text, "comm_path 0 ");
  ck_assert(nodes && n1 && n3 && comms && c0 && c1 && bounds && end && cp == c0 + 1 && !line_of(text, "comm_path 1"));
  char *path_1 = path_line(1, "1 1 1 1 1 1 1 1 1 1 1 1 1 1"), *short_path = path_line(0, "1 1");
  char *negative = path_line(0, "1 1 1 1 1 1 -1 1 1 1 1 1 1 1");
  char *infinite = path_line(0, "1 1 1 1 1 1 1 inf 1 1 1 1 1 1");
  char *zero_dtypes = path_line(0, "1 1 1 1 1 1 1 1 1 1 1 1 1 1");
  memcpy(strstr(zero_dtypes, "dtypes 2"), "dtypes 0", 8);
  struct {
    unsigned line;
    const char *with, *reason;
    unsigned at; /* where the error is reported; 0: `line` */
  } edits[] = {
      {1, "commgraph-tuning 2", "version 2; this library reads version 1", 0},
      {1, "hello", "not a commgraph tuning file", 0},
      {nodes, "nodes 5", "the file is for a graph of 5 nodes, this graph has 4", 0},
      {nodes, "nodes x", "expected 'nodes <count>'", 0},
      {n1, "node 1 \"grad.2\" 1.5", "node 1 is 'grad.2' in the file and 'grad.1' in the graph", 0},
      {n1, "node 0 \"fwd\" 1.5", "node 0 ('fwd') is not on a communicator in this graph", 0},
      {n1, "node 9 \"x\" 1.5", "node 9: the graph has 4 nodes", 0},
      {n1, "node 3 \"grad \\\"0\\\"\" 1.5", "node 1 ('grad.1', on a communicator) is missing from the file", 0},
      {n1, NULL, "node 1 ('grad.1', on a communicator) is missing from the file", 0},
      {n3, NULL, "node 3 ('grad \"0\"', on a communicator) is missing from the file", 0},
      {n3, "node 1 \"grad.1\" 1.5", "node 1 again or out of order", 0},
      {n1, "node 1 \"grad.1\" -1", "ready time -1 is not a finite number >= 0", 0},
      {n1, "node 1 \"grad.1\" nan", "expected 'node <index> \"<name>\" <ready_us>'", 0},
      {n1, "node 1 \"grad.1 1.5", "expected 'node <index>", 0},
      {n1, "node 1 \"grad\\q\" 1.5", "expected 'node <index>", 0},
      {comms, "comms 3", "3 communicators in the file, the graph uses 2", 0},
      {comms, "bogus", "or 'comms <count>', found 'bogus'", 0},
      {c0, "comm 0 size 8 rank 3 alpha_us 12 bytes_per_us 30000", "communicator 0 (by agreed id) has 8 ranks in "
                                                                  "the file, 4 in the graph", 0},
      {c0, "comm 1 size 4 rank 3 alpha_us 12 bytes_per_us 30000", "communicator 1 where communicator 0 comes", 0},
      {c0, "comm 0 size 4 rank 4 alpha_us 12 bytes_per_us 30000", "communicator 0: rank 4 of 4 ranks", 0},
      {c0, "comm 0 size 4 rank 3 alpha_us inf bytes_per_us 30000", "alpha_us inf is not a finite number", 0},
      {c1, "comm 1 size 2 rank 1 alpha_us 1 bytes_per_us 0", "bytes_per_us 0 is not above 0", 0},
      {c1, "comm 1 size 2 rank 1 alpha_us 1", "expected 'comm 1 size <ranks>", 0},
      {c1, "comm 1 size 2 rank 1 alpha_us 1 bytes_per_us 5 overlap_us -2", "overlap_us -2 is not a finite", 0},
      {c1, "comm 1 size 2 rank 1 alpha_us 1 bytes_per_us 5 overlap_us", "expected 'comm 1 size <ranks>", 0},
      {c1, "comm 1 size 2 rank 1 alpha_us 1 bytes_per_us 5 lag_us 3", "expected 'comm 1 size <ranks>", 0},
      {cp, path_1, "comm_path 1 after the line of communicator 0", 0},
      {cp, short_path, "expected 'comm_path 0 dtypes <bits> ops <bits> path_us <14 times >= 0>", 0},
      {cp, negative, "expected 'comm_path 0 dtypes", 0},
      {cp, zero_dtypes, "comm_path 0: dtypes 0", 0},
      {cp, infinite, "expected 'comm_path 0 dtypes", 0},
      {c1, path_1, "expected 'comm 1 size <ranks>", 0},
      {bounds, path_1, "expected 'boundaries tuned' or 'boundaries default', found 'end'", end},
      {bounds, "boundaries best", "expected 'boundaries tuned' or 'boundaries default'", 0},
      {end, NULL, "expected 'end', found 'the end of the file (cut short?)'", 0},
      {end, "end\nmore", "text after 'end': 'more'", end + 1},
  };
  for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
    char *bad = edit_line(text, edits[e].line, edits[e].with);
    /* a removed line moves the report to the line that took its place */
    expect_refused(bad, &c, edits[e].at ? edits[e].at : edits[e].line, edits[e].reason);
    free(bad);
  }
  /* comments and blank lines are fine anywhere */
  char *commented = edit_line(text, c0, "# a comment\n\ncomm 0 size 4 rank 3 alpha_us 12 bytes_per_us 30000");
  case_t back;
  ck_assert_msg(read_text(commented, &c, &back) == CG_SUCCESS, "%s", cg_error_last());
  ck_assert(back.alpha[0] == 12 && back.bw[1] == 1e5 && back.ready[3] == 2500.25 && back.values.default_won == 0);
  ck_assert(back.paths[0].dtypes == 1u << CG_FLOAT32 && back.paths[0].path_us[0] == 4.5 &&
            back.paths[0].library_us[0] == 11.25 && back.paths[0].path_us[1] == 0 && back.paths[1].dtypes == 0);
  free(commented);
  free(path_1);
  free(short_path);
  free(negative);
  free(infinite);
  free(zero_dtypes);
  /* an empty file */
  expect_refused("", &c, 1, "not a commgraph tuning file");
  free(text);
}
END_TEST

START_TEST(tuning_file__paths_take_the_rank) {
  char buf[64];
  ck_assert(cg_tuning_file_path(buf, sizeof buf, "tune.%r.txt", 12) && !strcmp(buf, "tune.12.txt"));
  ck_assert(cg_tuning_file_path(buf, sizeof buf, "%r/%r%", 3) && !strcmp(buf, "3/3%"));
  ck_assert(cg_tuning_file_path(buf, sizeof buf, "plain", 3) && !strcmp(buf, "plain"));
  ck_assert(!cg_tuning_file_path(buf, 8, "12345678", 0));
  ck_assert(cg_tuning_file_path(buf, 9, "12345678", 0));
}
END_TEST

/* ---- through the compile, on an offline communicator */

enum { N = 24, G = 65536 };
static float act[N + 1];

static cg_graph_t *backward(cg_comm_t *comm, float *grads) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int k = N - 1; k >= 0; k--) {
    cg_access_t access = CG_ACCESS_INIT;
    cg_range_t reads[] = {{&act[k + 1], sizeof(float)}};
    cg_range_t writes[] = {{&act[k], sizeof(float)}, {grads + (size_t)k * G, G * sizeof(float)}};
    access.everything = 0, access.reads = reads, access.n_reads = 1, access.writes = writes, access.n_writes = 2;
    cg_node_t h, a;
    char name[32];
    ck_assert_cg_ok(cg_host_func(&h, g, cg_test_noop, NULL, &access));
    ck_assert_cg_ok(cg_allreduce(&a, g, comm, grads + (size_t)k * G, grads + (size_t)k * G, G, CG_FLOAT32, CG_SUM));
    snprintf(name, sizeof name, "grad \"%d\"", k);
    ck_assert_cg_ok(cg_node_name(g, a, name));
  }
  return g;
}

/* The plan's buckets as text: members of each. */
static void buckets_text(char *buf, size_t size, const cg_plan_t *p) {
  size_t n = (size_t)snprintf(buf, size, "%u buckets:", p->n_buckets);
  for (uint32_t b = 0; b < p->n_buckets && n < size; b++) {
    n += (size_t)snprintf(buf + n, size - n, " [");
    for (uint32_t m = 0; m < p->buckets[b].n_members && n < size; m++)
      n += (size_t)snprintf(buf + n, size - n, "%s%u", m ? " " : "", p->buckets[b].members[m]);
    if (n < size) n += (size_t)snprintf(buf + n, size - n, "]");
  }
}

START_TEST(tuning_file__a_saved_tuning_compiles_to_the_same_buckets) {
  cg_test_reseed(100 + (uint64_t)_i);
  cg_comm_t *comm;
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 1, 4));
  float *grads = calloc((size_t)N * G, sizeof *grads);
  cg_graph_t *g = backward(comm, grads);
  uint32_t n = cg_graph_node_count(g);
  /* random ready times, rising with the backward, and a random cost */
  cg_comm_cost_t cost = {comm, 1.0 + (double)cg_test_below(2000), 1e3 * (double)(1 + cg_test_below(1000)),
                         cg_test_below(2) ? (double)cg_test_below(50) : 0, {0}};
  if (cg_test_below(2)) { /* a backend's own path, cheaper than the line at some sizes: it moves boundaries */
    cost.path.dtypes = 1u << CG_FLOAT32, cost.path.ops = 1u << CG_SUM;
    for (uint32_t k = 0; k < CG_COST_PATH_SIZES; k++)
      if (cg_test_below(3)) {
        cost.path.path_us[k] = 1.0 + (double)cg_test_below(20);
        cost.path.library_us[k] = cost.path.path_us[k] + (double)cg_test_below(400);
      }
  }
  cg_tuning_t t = {calloc(n, sizeof(double)), n, &cost, 1, 0};
  double at = 0;
  for (uint32_t v = 0; v < n; v++) t.ready_us[v] = at += (double)cg_test_below(3000) / 7.0;
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.bucket_bytes = (size_t)G * sizeof(float) * (2 + cg_test_below(N));
  cg_plan_t *tuned = NULL, *loaded = NULL, *plain = NULL, *dflt = NULL;
  ck_assert_cg_ok(cg_compile_tuned(&tuned, g, &o, &t, CG_SUCCESS));
  ck_assert_ptr_nonnull(tuned->tuning);
  char path[] = "/tmp/cg_tuning_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_cg_ok(cg_plan_save_tuning(tuned, path));
  o.tuning_file = path;
  ck_assert_cg_ok(cg_compile(&loaded, g, &o));
  char a[4096], b[4096];
  buckets_text(a, sizeof a, tuned);
  buckets_text(b, sizeof b, loaded);
  ck_assert_msg(!strcmp(a, b), "tuned %s\nloaded %s", a, b);
  /* the file keeps the ready times of nodes on communicators (the others mean nothing) */
  for (uint32_t v = 0; v < n; v++)
    ck_assert(loaded->tuning->ready_us[v] == (loaded->nodes[v].comm ? t.ready_us[v] : 0.0));
  ck_assert(loaded->tuning->costs[0].alpha_us == cost.alpha_us && loaded->tuning->costs[0].comm == comm);
  ck_assert(!cg_plan_default_won(loaded));
  /* saved again, the file is the same */
  char again[sizeof path + 8];
  snprintf(again, sizeof again, "%s.again", path);
  ck_assert_cg_ok(cg_plan_save_tuning(loaded, again));
  FILE *f1 = fopen(path, "r"), *f2 = fopen(again, "r");
  int same = 1, c1, c2;
  do c1 = fgetc(f1), c2 = fgetc(f2), same &= c1 == c2;
  while (c1 != EOF && c2 != EOF);
  fclose(f1), fclose(f2);
  ck_assert_msg(same, "saving a loaded tuning changed the file");
  /* "boundaries default": the default buckets, the tuning kept */
  o.tuning_file = NULL;
  ck_assert_cg_ok(cg_compile(&plain, g, &o));
  ck_assert_ptr_null(plain->tuning);
  ck_assert_int_eq(cg_plan_save_tuning(plain, path), CG_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(cg_error_last(), "without a tuning"), "%s", cg_error_last());
  ck_assert_cg_ok(cg_compile_tuning(&dflt, g, &o, &t, 1, CG_SUCCESS));
  ck_assert(cg_plan_default_won(dflt));
  ck_assert_cg_ok(cg_plan_save_tuning(dflt, path));
  cg_plan_destroy(loaded);
  o.tuning_file = path;
  ck_assert_cg_ok(cg_compile(&loaded, g, &o));
  ck_assert(cg_plan_default_won(loaded) && loaded->tuning);
  buckets_text(a, sizeof a, plain);
  buckets_text(b, sizeof b, loaded);
  ck_assert_msg(!strcmp(a, b), "default %s\nloaded %s", a, b);
  cg_plan_destroy(loaded);
  /* another graph: refused, naming the file */
  cg_graph_t *other;
  ck_assert_cg_ok(cg_graph_create(&other, NULL));
  ck_assert_cg_ok(cg_allreduce(NULL, other, comm, grads, grads, 4, CG_FLOAT32, CG_SUM));
  loaded = (cg_plan_t *)&loaded;
  ck_assert_int_eq(cg_compile(&loaded, other, &o), CG_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(cg_error_last(), path) && strstr(cg_error_last(), "this graph has 1"), "%s", cg_error_last());
  ck_assert(loaded == (cg_plan_t *)&loaded);
  /* no such file; an empty path */
  o.tuning_file = "/nonexistent/tuning.txt";
  ck_assert_int_eq(cg_compile(&loaded, g, &o), CG_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(cg_error_last(), "cannot open the tuning file /nonexistent/tuning.txt"), "%s",
                cg_error_last());
  o.tuning_file = "";
  ck_assert_int_eq(cg_compile(&loaded, g, &o), CG_ERR_INVALID_ARGUMENT);
  /* saving where nothing can be written */
  ck_assert_int_eq(cg_plan_save_tuning(tuned, "/nonexistent/dir/t.txt"), CG_ERR_IO);
  ck_assert_int_eq(cg_plan_save_tuning(NULL, path), CG_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(cg_plan_save_tuning(tuned, NULL), CG_ERR_INVALID_ARGUMENT);
  remove(path);
  remove(again);
  cg_graph_destroy(other);
  cg_plan_destroy(tuned);
  cg_plan_destroy(plain);
  cg_plan_destroy(dflt);
  cg_graph_destroy(g);
  free(t.ready_us);
  free(grads);
  cg_comm_destroy(comm);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("tuning_file");
  TCase *c = tcase_create("format");
  tcase_set_timeout(c, 60);
  tcase_add_loop_test(c, tuning_file__random_tunings_round_trip_exactly, 0, 200);
  tcase_add_test(c, tuning_file__mismatches_and_malformed_files_are_named);
  tcase_add_test(c, tuning_file__paths_take_the_rank);
  tcase_add_loop_test(c, tuning_file__a_saved_tuning_compiles_to_the_same_buckets, 0, 8);
  suite_add_tcase(s, c);
  return s;
}

int main(void) { return cg_test_main(suite()); }
