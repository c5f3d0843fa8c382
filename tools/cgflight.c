/* cgflight: merges the flight recorder dumps of a job's ranks (flight.c) and
 * says where they diverged. Collective steps carry their communicator's id and
 * sequence number, which ranks that agree share; for each communicator the
 * first sequence number some rank never completed names the collective where
 * they parted, and the ranks that never started it are the likely culprits.
 * Each ring keeps only recent events, so a rank's early sequence numbers may
 * be gone: only the highest started and completed per rank are reasoned from.
 * Usage: cgflight FILE...; exits 0 when the dumps show no divergence, 1 when
 * they do, 2 on a usage or read error. Needs nothing but libc. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a sanity bound: a corrupt size= must not allocate gigabytes */
#define MAX_RANKS (1L << 20)

enum { EV_REPLAY, EV_START, EV_DONE, EV_FINISHED, EV_TIMEOUT, EV_COUNT };
static const char *const event_names[EV_COUNT] = {"replay", "start", "done", "finished", "timeout"};

/* The key=value fields; the numeric ones come first and index event_t.number. */
enum { F_REPLAY, F_RANK, F_SIZE, F_STEP, F_NODE, F_COMM, F_SEQ, F_PLAN, F_KIND, F_NAME, F_COUNT };
static const char *const field_keys[F_COUNT] = {"replay", "rank", "size", "step", "node",
                                                "comm",   "seq",  "plan", "kind", "name"};
#define HAS(e, field) (((e)->seen >> (field)) & 1u)

/* One dump line, copied out so that it can name a step later. The recorder
 * cuts plan and node names to 39 characters: these buffers lose nothing. */
typedef struct event {
  char time[32], plan[64], kind[32], name[64];
  int event, collective;
  unsigned seen; /* a bit per F_* field present */
  unsigned long long number[F_PLAN];
} event_t;

/* Sequence numbers are kept as seq + 1 so that 0 means none; `done` is then
 * also the first seq the rank has not completed. */
typedef struct rank_state {
  int present; /* some dump has an event of this rank on this communicator */
  unsigned long long started, done;
  event_t last_start;
} rank_state_t;

typedef struct comm_summary {
  unsigned long long id;
  long size; /* ranks[] has this many entries */
  rank_state_t *ranks;
  int diverged, have_at;
  unsigned long long diverged_at; /* the first seq some rank did not complete */
  event_t at;                     /* an event of that collective, if a ring still holds one */
} comm_summary_t;

typedef struct dump_comm {
  unsigned long long id;
  long rank;
} dump_comm_t;

typedef struct dump {
  const char *path;
  char host[256];
  long pid;
  unsigned long long held, recorded; /* events in the ring and ever recorded, per the header */
  size_t n_events, n_comms, cap_comms;
  dump_comm_t *comms;
  event_t last;
} dump_t;

typedef struct timeout {
  size_t dump;
  event_t event;
} timeout_t;

typedef struct merge {
  dump_t *dumps;
  comm_summary_t *comms;
  timeout_t *timeouts;
  size_t n_dumps, n_comms, cap_comms, n_timeouts, cap_timeouts;
} merge_t;

/* A tool that runs out of memory has nothing useful left to say. */
static void *or_die(void *allocated) {
  if (!allocated) {
    fputs("cgflight: out of memory\n", stderr);
    exit(2);
  }
  return allocated;
}

/* Room for item n of an array that doubles as it fills. */
static void *grow(void *array, size_t n, size_t *cap, size_t item_size) {
  if (n < *cap) return array;
  *cap = *cap ? 2 * *cap : 8;
  return or_die(*cap <= SIZE_MAX / item_size ? realloc(array, *cap * item_size) : NULL);
}

/* ---- parsing ---- */

static int parse_number(const char *text, int base, unsigned long long *out) {
  if (!(base == 16 ? isxdigit((unsigned char)*text) : isdigit((unsigned char)*text))) return 0;
  char *end;
  errno = 0;
  *out = strtoull(text, &end, base);
  return *end == '\0' && errno == 0;
}

static int is_time(const char *text) {
  size_t seconds = strspn(text, "0123456789");
  if (!seconds || text[seconds] != '.') return 0;
  size_t nanoseconds = strspn(text + seconds + 1, "0123456789");
  return nanoseconds && text[seconds + 1 + nanoseconds] == '\0';
}

static int parse_field(char *field, event_t *e) {
  char *value = strchr(field, '=');
  if (!value) return 0;
  *value++ = '\0';
  int key = 0;
  while (key < F_COUNT && strcmp(field, field_keys[key]) != 0) key++;
  if (key == F_COUNT) return 1; /* a newer recorder's field */
  e->seen |= 1u << key;
  if (key == F_PLAN)
    snprintf(e->plan, sizeof e->plan, "%s", value);
  else if (key == F_KIND)
    snprintf(e->kind, sizeof e->kind, "%s", value);
  else if (key == F_NAME)
    snprintf(e->name, sizeof e->name, "%s", value);
  else
    return parse_number(value, key == F_COMM ? 16 : 10, &e->number[key]);
  return 1;
}

/* Splits the line at its tabs into `e`; NULL, or why the line is malformed. */
static const char *parse_event(char *line, event_t *e) {
  memset(e, 0, sizeof *e);
  const char *what = "";
  int index = 0;
  for (char *field = line, *tab; field; field = tab ? tab + 1 : NULL, index++) {
    if ((tab = strchr(field, '\t'))) *tab = '\0';
    if (index == 0 && !is_time(field)) return "no SECONDS.NANOSECONDS time";
    if (index == 0)
      snprintf(e->time, sizeof e->time, "%s", field);
    else if (index == 1)
      what = field;
    else if (!parse_field(field, e))
      return "a field is not key=value, or its number is malformed";
  }
  while (e->event < EV_COUNT && strcmp(what, event_names[e->event]) != 0) e->event++;
  if (e->event == EV_COUNT) return "unknown event";
  if (!HAS(e, F_REPLAY) || !HAS(e, F_RANK) || !HAS(e, F_SIZE)) return "replay, rank or size missing";
  int is_step = e->event == EV_START || e->event == EV_DONE;
  if (is_step && (!HAS(e, F_STEP) || !HAS(e, F_NODE) || !HAS(e, F_KIND))) return "step, node or kind missing";
  if (HAS(e, F_COMM) != HAS(e, F_SEQ)) return "comm without seq, or seq without comm";
  e->collective = is_step && HAS(e, F_COMM);
  const unsigned long long *n = e->number;
  if (e->collective && (n[F_SIZE] == 0 || n[F_SIZE] > MAX_RANKS || n[F_RANK] >= n[F_SIZE] || n[F_SEQ] == ULLONG_MAX))
    return "rank, size or seq out of range";
  return NULL;
}

static void parse_header(dump_t *d, char *line) {
  for (char *field = line, *tab; field; field = tab ? tab + 1 : NULL) {
    if ((tab = strchr(field, '\t'))) *tab = '\0';
    if (strncmp(field, "host=", 5) == 0) snprintf(d->host, sizeof d->host, "%s", field + 5);
    if (strncmp(field, "pid=", 4) == 0) d->pid = strtol(field + 4, NULL, 10);
    if (strncmp(field, "events=", 7) == 0) d->held = strtoull(field + 7, NULL, 10);
    if (strncmp(field, "recorded=", 9) == 0) d->recorded = strtoull(field + 9, NULL, 10);
  }
}

typedef void (*event_fn)(merge_t *m, size_t dump, const event_t *e);

/* Hands each well-formed event of one dump to `on_event`; 0 when the file
 * cannot be read. Warns about malformed lines only when `warn`, so that a
 * second pass over the same file stays quiet. */
static int read_dump(merge_t *m, size_t index, event_fn on_event, int warn) {
  dump_t *d = &m->dumps[index];
  FILE *f = fopen(d->path, "r");
  if (!f) {
    fprintf(stderr, "cgflight: %s: %s\n", d->path, strerror(errno));
    return 0;
  }
  char *line = NULL;
  size_t cap = 0;
  unsigned long number = 0;
  int has_header = 0;
  event_t e;
  while (getline(&line, &cap, f) >= 0) {
    number++;
    line[strcspn(line, "\r\n")] = '\0';
    if (strncmp(line, "# commgraph flight recorder", 27) == 0) {
      parse_header(d, line);
      has_header = 1;
    }
    if (line[0] == '#' || line[0] == '\0') continue;
    const char *why = parse_event(line, &e);
    if (!why)
      on_event(m, index, &e);
    else if (warn)
      fprintf(stderr, "cgflight: %s:%lu: skipped a malformed line: %s\n", d->path, number, why);
  }
  int ok = !ferror(f);
  if (!ok) fprintf(stderr, "cgflight: %s: %s\n", d->path, strerror(errno));
  if (ok && warn && !has_header) fprintf(stderr, "cgflight: %s: no flight recorder header; a dump?\n", d->path);
  free(line);
  fclose(f);
  return ok;
}

/* ---- merging ---- */

static comm_summary_t *find_comm(merge_t *m, unsigned long long id) {
  for (size_t i = 0; i < m->n_comms; i++)
    if (m->comms[i].id == id) return &m->comms[i];
  return NULL;
}

/* The communicator's summary, with a slot for each of `size` ranks. Dumps of
 * one communicator should agree on its size; if not, the largest wins. */
static comm_summary_t *comm_of(merge_t *m, unsigned long long id, long size) {
  comm_summary_t *c = find_comm(m, id);
  if (!c) {
    m->comms = grow(m->comms, m->n_comms, &m->cap_comms, sizeof *m->comms);
    c = &m->comms[m->n_comms++];
    *c = (comm_summary_t){.id = id};
  }
  if (size <= c->size) return c;
  if (c->size) fprintf(stderr, "cgflight: comm %016llx: dumps disagree on its size (%ld, %ld)\n", id, c->size, size);
  c->ranks = or_die(realloc(c->ranks, (size_t)size * sizeof *c->ranks));
  memset(c->ranks + c->size, 0, (size_t)(size - c->size) * sizeof *c->ranks);
  c->size = size;
  return c;
}

static void note_dump_comm(dump_t *d, unsigned long long id, long rank) {
  for (size_t i = 0; i < d->n_comms; i++)
    if (d->comms[i].id == id && d->comms[i].rank == rank) return;
  d->comms = grow(d->comms, d->n_comms, &d->cap_comms, sizeof *d->comms);
  d->comms[d->n_comms++] = (dump_comm_t){id, rank};
}

static void record_collective(merge_t *m, dump_t *d, const event_t *e) {
  comm_summary_t *c = comm_of(m, e->number[F_COMM], (long)e->number[F_SIZE]);
  long rank = (long)e->number[F_RANK];
  note_dump_comm(d, c->id, rank);
  rank_state_t *r = &c->ranks[rank];
  unsigned long long next = e->number[F_SEQ] + 1;
  r->present = 1;
  if (e->event == EV_DONE && next > r->done) r->done = next;
  if (e->event == EV_START && next >= r->started) {
    r->started = next;
    r->last_start = *e;
  }
}

static void record_event(merge_t *m, size_t index, const event_t *e) {
  dump_t *d = &m->dumps[index];
  d->n_events++;
  d->last = *e;
  if (e->collective) record_collective(m, d, e);
  if (e->event == EV_TIMEOUT) {
    m->timeouts = grow(m->timeouts, m->n_timeouts, &m->cap_timeouts, sizeof *m->timeouts);
    m->timeouts[m->n_timeouts++] = (timeout_t){index, *e};
  }
}

/* The first seq some rank with a dump did not complete, if another got beyond
 * it. A rank whose last start it was names its step; if there is none (the
 * ranks that started it went on), a second pass (note_divergent_step) looks
 * through the dumps for it. */
static void find_divergence(comm_summary_t *c) {
  unsigned long long reached = 0, first_undone = ULLONG_MAX;
  for (long r = 0; r < c->size; r++) {
    const rank_state_t *s = &c->ranks[r];
    if (!s->present) continue;
    if (s->started > reached) reached = s->started;
    if (s->done > reached) reached = s->done;
    if (s->done < first_undone) first_undone = s->done;
  }
  if (first_undone >= reached) return;
  c->diverged = 1;
  c->diverged_at = first_undone;
  for (long r = 0; r < c->size && !c->have_at; r++) {
    if (c->ranks[r].started != first_undone + 1) continue;
    c->at = c->ranks[r].last_start;
    c->have_at = 1;
  }
}

static void note_divergent_step(merge_t *m, size_t index, const event_t *e) {
  (void)index;
  comm_summary_t *c = e->collective ? find_comm(m, e->number[F_COMM]) : NULL;
  if (!c || !c->diverged || c->have_at || e->number[F_SEQ] != c->diverged_at) return;
  c->at = *e;
  c->have_at = 1;
}

/* ---- reporting ---- */

static void print_node(const event_t *e) {
  printf("node #%llu", e->number[F_NODE]);
  if (e->name[0]) printf(" '%s'", e->name);
}

static void print_dump(const dump_t *d) {
  printf("%s: host %s, pid %ld, %zu events", d->path, d->host[0] ? d->host : "?", d->pid, d->n_events);
  if (d->recorded > d->held) printf(" (of %llu recorded: the ring wrapped, older ones are gone)", d->recorded);
  printf("; comms:%s", d->n_comms ? "" : " none");
  for (size_t i = 0; i < d->n_comms; i++) printf(" %016llx (rank %ld)", d->comms[i].id, d->comms[i].rank);
  const event_t *e = &d->last;
  if (!d->n_events) {
    printf("; last: none\n");
    return;
  }
  printf("; last: %s %s, plan '%s', replay %llu", e->time, event_names[e->event], e->plan, e->number[F_REPLAY]);
  if (HAS(e, F_STEP)) {
    printf(", step %llu: ", e->number[F_STEP]);
    print_node(e);
    printf(" (%s)", e->kind);
  }
  if (e->collective) printf(", comm %016llx seq %llu", e->number[F_COMM], e->number[F_SEQ]);
  putchar('\n');
}

typedef int (*rank_test)(const comm_summary_t *c, long rank);
static int is_missing(const comm_summary_t *c, long r) { return !c->ranks[r].present; }
static int not_done(const comm_summary_t *c, long r) {
  return c->ranks[r].present && c->ranks[r].done <= c->diverged_at;
}
static int never_started(const comm_summary_t *c, long r) {
  return not_done(c, r) && c->ranks[r].started && c->ranks[r].started <= c->diverged_at;
}
/* Device plans record no starts, and completions only at a timeout: whether
 * such a rank reached the collective is unknown. */
static int start_unknown(const comm_summary_t *c, long r) { return not_done(c, r) && !c->ranks[r].started; }

static long count_ranks(const comm_summary_t *c, rank_test test) {
  long n = 0;
  for (long r = 0; r < c->size; r++) n += test(c, r);
  return n;
}

/* "rank 2" or "ranks 2, 3": the ranks that pass the test */
static void print_ranks(const comm_summary_t *c, rank_test test) {
  long n = count_ranks(c, test);
  for (long r = 0, printed = 0; r < c->size; r++)
    if (test(c, r)) printf("%s%ld", printed++ ? ", " : n > 1 ? "ranks " : "rank ", r);
}

/* A seq kept as seq + 1 (rank_state_t). */
static void print_seq(const char *prefix, unsigned long long count) {
  if (count)
    printf("%sseq %llu", prefix, count - 1);
  else
    printf("%snone", prefix);
}

/* The collective where the ranks parted: its node if some ring still holds
 * an event of it, else only its seq. */
static void print_divergent_step(const comm_summary_t *c) {
  if (c->have_at)
    print_node(&c->at);
  else
    printf("collective seq %llu", c->diverged_at);
}

static void print_rank_at_divergence(const comm_summary_t *c, long r) {
  const rank_state_t *s = &c->ranks[r];
  printf("  rank %ld: ", r);
  if (!s->present) {
    printf("no dump from rank %ld (it exited, or did not dump; or its ring holds no event on this comm)\n", r);
  } else if (s->done > c->diverged_at) {
    printf("done\n");
  } else if (s->started > c->diverged_at) {
    print_seq("started it, not done (last done: ", s->done);
    printf(")\n");
  } else if (!s->started) {
    print_seq("not done, and its ring holds no start on this comm (last done ", s->done);
    printf(")\n");
  } else {
    print_seq("never started it (last started ", s->started);
    printf(", ");
    print_node(&s->last_start);
    print_seq(", last done ", s->done);
    printf(")\n");
  }
}

static void print_divergence(const comm_summary_t *c) {
  const event_t *at = &c->at;
  printf("comm %016llx: diverged at collective seq %llu: ", c->id, c->diverged_at);
  if (c->have_at) {
    print_node(at);
    printf(" (%s, plan '%s', step %llu, replay %llu)\n", at->kind, at->plan, at->number[F_STEP], at->number[F_REPLAY]);
  } else {
    printf("no ring still holds its events\n");
  }
  for (long r = 0; r < c->size; r++) print_rank_at_divergence(c, r);
  printf("  verdict: ");
  if (count_ranks(c, never_started)) {
    print_ranks(c, never_started);
    printf(" did not reach ");
    print_divergent_step(c);
  } else if (count_ranks(c, start_unknown)) {
    print_ranks(c, start_unknown);
    printf(" did not complete ");
    print_divergent_step(c);
    printf(" (whether it got there is not recorded)");
  } else if (count_ranks(c, is_missing)) {
    printf("every rank with a dump reached ");
    print_divergent_step(c);
    printf("; look first at the one without: ");
    print_ranks(c, is_missing);
  } else {
    printf("every rank reached ");
    print_divergent_step(c);
    printf(", but ");
    print_ranks(c, not_done);
    printf(" did not complete it: the collective itself stalled");
  }
  putchar('\n');
}

/* Prints what is known of one communicator; 1 when its ranks diverged. */
static int report_comm(const comm_summary_t *c) {
  printf("comm %016llx: size %ld\n", c->id, c->size);
  const rank_state_t *any = NULL;
  for (long r = 0; r < c->size; r++) {
    const rank_state_t *s = &c->ranks[r];
    if (!s->present) continue;
    any = s;
    printf("  rank %ld: highest started ", r);
    print_seq("", s->started);
    print_seq(", highest done ", s->done);
    putchar('\n');
  }
  if (c->diverged) {
    print_divergence(c);
    return 1;
  }
  /* not diverged: every rank with a dump completed the same seq */
  if (!count_ranks(c, is_missing)) {
    printf("comm %016llx: in step (last collective seq %llu completed by all %ld ranks)\n", c->id, any->done - 1,
           c->size);
    return 0;
  }
  printf("comm %016llx: the ranks with a dump completed seq %llu, but no dump from ", c->id, any->done - 1);
  print_ranks(c, is_missing);
  printf(" (exited, or did not dump)\n");
  return 1;
}

/* Prints the merged dumps; 1 when some communicator's ranks diverged. */
static int report(const merge_t *m) {
  int diverged = 0;
  for (size_t i = 0; i < m->n_dumps; i++) print_dump(&m->dumps[i]);
  for (size_t i = 0; i < m->n_comms; i++) {
    putchar('\n');
    diverged |= report_comm(&m->comms[i]);
  }
  if (m->n_timeouts) printf("\ntimeouts:\n");
  for (size_t i = 0; i < m->n_timeouts; i++) {
    const event_t *t = &m->timeouts[i].event;
    printf("  %s: at %s, plan '%s', rank %llu, replay %llu\n", m->dumps[m->timeouts[i].dump].path, t->time, t->plan,
           t->number[F_RANK], t->number[F_REPLAY]);
  }
  return diverged;
}

int main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: cgflight FILE...  (the flight recorder dumps of all ranks, e.g. flight/*.txt)\n");
    return 2;
  }
  merge_t m = {.n_dumps = (size_t)argc - 1};
  m.dumps = or_die(calloc(m.n_dumps, sizeof *m.dumps));
  int read_ok = 1, status = 2;
  for (size_t i = 0; i < m.n_dumps; i++) m.dumps[i] = (dump_t){.path = argv[i + 1], .pid = -1};
  for (size_t i = 0; i < m.n_dumps; i++) read_ok &= read_dump(&m, i, record_event, 1);
  if (read_ok) {
    int second_pass = 0;
    for (size_t i = 0; i < m.n_comms; i++) {
      find_divergence(&m.comms[i]);
      second_pass |= m.comms[i].diverged && !m.comms[i].have_at;
    }
    for (size_t i = 0; second_pass && i < m.n_dumps; i++) read_dump(&m, i, note_divergent_step, 0);
    status = report(&m);
  }
  for (size_t i = 0; i < m.n_dumps; i++) free(m.dumps[i].comms);
  for (size_t i = 0; i < m.n_comms; i++) free(m.comms[i].ranks);
  free(m.dumps);
  free(m.comms);
  free(m.timeouts);
  return status;
}
