/* Tuning files (tuning_file.h): writing, reading and matching them against a
 * graph, and cg_plan_save_tuning. */
#define _POSIX_C_SOURCE 200809L /* getpid */
#include "tuning_file.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "graph_view.h"
#include "text.h"
#include "tuning.h"

#define LINE_MAX_BYTES 4096

/* ---- writing */

static void put_name(FILE *f, const char *name) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)(name ? name : ""); *c; c++) {
    if (*c == '"' || *c == '\\')
      fprintf(f, "\\%c", *c);
    else if (*c < 0x20 || *c == 0x7f)
      fprintf(f, "\\x%02x", *c);
    else
      fputc(*c, f);
  }
  fputc('"', f);
}

static void put_times(FILE *f, const char *label, const double *us) {
  fprintf(f, " %s", label);
  for (uint32_t i = 0; i < CG_COST_PATH_SIZES; i++) {
    char text[64];
    cg_text_format_double(text, sizeof text, us[i], 17, 0);
    fprintf(f, " %s", text);
  }
}

static void put_path(FILE *f, uint32_t k, const cg_cost_path_t *p) {
  if (!p->dtypes) return;
  fprintf(f, "comm_path %u dtypes %u ops %u", k, p->dtypes, p->ops);
  put_times(f, "path_us", p->path_us);
  put_times(f, "library_us", p->library_us);
  fputc('\n', f);
}

cg_status_t cg_tuning_file_write(FILE *f, const char *path, const cg_tuning_shape_t *shape,
                                 const cg_tuning_values_t *v, const char *where) {
  fprintf(f, "commgraph-tuning %d\n", CG_TUNING_FILE_VERSION);
  fputs("# the tuning a plan was compiled with (cg_plan_save_tuning; docs/tuning.md): per node on a\n"
        "# communicator, when its inputs were ready (us from the replay's start); per communicator by\n"
        "# agreed id, a collective's cost alpha_us + bytes / bytes_per_us (and overlap_us: how much each\n"
        "# collective delays the compute later ones wait for; comm_path: the allreduces its backend runs by a\n"
        "# path of its own, that path's time and the library's at 1 KB << i bytes)\n", f);
  fprintf(f, "nodes %u\n", shape->n_nodes);
  for (uint32_t i = 0; i < shape->n_nodes; i++) {
    if (!shape->communicates[i]) continue;
    fprintf(f, "node %u ", i);
    put_name(f, shape->names ? shape->names[i] : NULL);
    char ready[64];
    cg_text_format_double(ready, sizeof ready, v->ready_us[i], 17, 0);
    fprintf(f, " %s\n", ready);
  }
  fprintf(f, "comms %u\n", shape->n_comms);
  for (uint32_t k = 0; k < shape->n_comms; k++) {
    char alpha[64], bandwidth[64];
    cg_text_format_double(alpha, sizeof alpha, v->alpha_us[k], 17, 0);
    cg_text_format_double(bandwidth, sizeof bandwidth, v->bytes_per_us[k], 17, 0);
    fprintf(f, "comm %u size %d rank %d alpha_us %s bytes_per_us %s", k, shape->sizes[k], shape->ranks[k], alpha,
            bandwidth);
    if (v->overlap_us[k] != 0) {
      char overlap[64];
      cg_text_format_double(overlap, sizeof overlap, v->overlap_us[k], 17, 0);
      fprintf(f, " overlap_us %s", overlap);
    }
    fputc('\n', f);
    put_path(f, k, &v->paths[k]);
  }
  fprintf(f, "boundaries %s\nend\n", v->default_won ? "default" : "tuned");
  if (fflush(f) != 0 || ferror(f))
    return cg_fail(CG_ERR_IO, "%s: writing the tuning file %s: %s", where, path, strerror(errno));
  return CG_SUCCESS;
}

/* ---- reading */

typedef struct reader {
  FILE *f;
  const char *path, *where;
  unsigned line;
  char text[LINE_MAX_BYTES];
  int eof;
} reader_t;

static cg_status_t bad(const reader_t *r, const char *fmt, ...) CG_PRINTF_LIKE(2, 3);
static cg_status_t bad(const reader_t *r, const char *fmt, ...) {
  char what[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: tuning file %s:%u: %s", r->where, r->path, r->line, what);
}

/* The next line that is not blank or a comment, without its newline; r->eof
 * at the end. */
static cg_status_t next_line(reader_t *r) {
  for (;;) {
    if (!fgets(r->text, sizeof r->text, r->f)) {
      if (ferror(r->f))
        return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: reading the tuning file %s: %s", r->where, r->path,
                       strerror(errno));
      r->eof = 1;
      r->line++;
      r->text[0] = '\0';
      return CG_SUCCESS;
    }
    r->line++;
    size_t n = strlen(r->text);
    if (n && r->text[n - 1] == '\n')
      r->text[--n] = '\0';
    else if (!feof(r->f))
      return bad(r, "a line longer than %d bytes", LINE_MAX_BYTES - 2);
    if (n && r->text[n - 1] == '\r') r->text[--n] = '\0';
    const char *p = r->text;
    while (*p == ' ' || *p == '\t') p++;
    if (*p && *p != '#') return CG_SUCCESS;
  }
}

static void skip_spaces(const char **p) {
  while (**p == ' ' || **p == '\t') (*p)++;
}

static int at_end(const char **p) {
  skip_spaces(p);
  return **p == '\0';
}

/* The word `w`, then a space or the end. */
static int word(const char **p, const char *w) {
  skip_spaces(p);
  size_t n = strlen(w);
  if (strncmp(*p, w, n) != 0 || ((*p)[n] != '\0' && (*p)[n] != ' ' && (*p)[n] != '\t')) return 0;
  *p += n;
  return 1;
}

static int number_u32(const char **p, uint32_t *out) {
  skip_spaces(p);
  if (**p < '0' || **p > '9') return 0;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(*p, &end, 10);
  if (errno || v > UINT32_MAX || (*end && *end != ' ' && *end != '\t')) return 0;
  *out = (uint32_t)v;
  *p = end;
  return 1;
}

static int number_double(const char **p, double *out) {
  skip_spaces(p);
  if (!**p) return 0;
  const char *end;
  double v = cg_text_to_double(*p, &end);
  if (end == *p || (*end && *end != ' ' && *end != '\t') || isnan(v)) return 0;
  *out = v;
  *p = end;
  return 1;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A quoted name into buf (at most size - 1 bytes). */
static int quoted(const char **p, char *buf, size_t size) {
  skip_spaces(p);
  const char *s = *p;
  size_t n = 0;
  if (*s++ != '"') return 0;
  for (;;) {
    int c = (unsigned char)*s++;
    if (c == '\0') return 0;
    if (c == '"') break;
    if (c == '\\') {
      c = (unsigned char)*s++;
      if (c == 'x') {
        int hi = hex_digit(s[0]), lo = hi >= 0 ? hex_digit(s[1]) : -1;
        if (lo < 0 || (hi == 0 && lo == 0)) return 0;
        c = hi * 16 + lo;
        s += 2;
      } else if (c != '"' && c != '\\') {
        return 0;
      }
    }
    if (n + 1 >= size) return 0;
    buf[n++] = (char)c;
  }
  if (*s && *s != ' ' && *s != '\t') return 0;
  buf[n] = '\0';
  *p = s;
  return 1;
}

/* `label` and CG_COST_PATH_SIZES finite times >= 0. */
static int times(const char **p, const char *label, double *us) {
  if (!word(p, label)) return 0;
  for (uint32_t i = 0; i < CG_COST_PATH_SIZES; i++)
    if (!number_double(p, &us[i]) || !isfinite(us[i]) || us[i] < 0) return 0;
  return 1;
}

/* A comm_path line for communicator k (after "comm_path") into *out. */
static cg_status_t read_path(const reader_t *r, const char *p, uint32_t k, cg_cost_path_t *out) {
  uint32_t index = 0;
  cg_cost_path_t path = {0};
  if (!number_u32(&p, &index) || !word(&p, "dtypes") || !number_u32(&p, &path.dtypes) || !word(&p, "ops") ||
      !number_u32(&p, &path.ops) || !times(&p, "path_us", path.path_us) ||
      !times(&p, "library_us", path.library_us) || !at_end(&p))
    return bad(r, "expected 'comm_path %u dtypes <bits> ops <bits> path_us <%u times >= 0> library_us <%u times "
               ">= 0>', found '%.80s'", k, CG_COST_PATH_SIZES, CG_COST_PATH_SIZES, r->text);
  if (index != k) return bad(r, "comm_path %u after the line of communicator %u", index, k);
  if (!path.dtypes) return bad(r, "comm_path %u: dtypes 0 (a path takes some dtype; none is no line)", k);
  *out = path;
  return CG_SUCCESS;
}

static const char *name_of(const cg_tuning_shape_t *shape, uint32_t i) {
  return shape->names && shape->names[i] ? shape->names[i] : "";
}

/* The first node on a communicator at or after i; n_nodes if none. */
static uint32_t next_communicating(const cg_tuning_shape_t *shape, uint32_t i) {
  while (i < shape->n_nodes && !shape->communicates[i]) i++;
  return i;
}

cg_status_t cg_tuning_file_read(FILE *f, const char *path, const cg_tuning_shape_t *shape, cg_tuning_values_t *v,
                                const char *where) {
  reader_t *r = malloc(sizeof *r);
  if (!r) return cg_fail(CG_ERR_NO_MEMORY, "%s: reading the tuning file %s", where, path);
  r->f = f, r->path = path, r->where = where, r->line = 0, r->eof = 0;
  cg_status_t st = next_line(r);
  const char *p = r->text;
  uint32_t u = 0, k = 0;
  char name[1024];
  /* the header */
  if (st == CG_SUCCESS && !word(&p, "commgraph-tuning"))
    st = bad(r, "not a commgraph tuning file: the first line is not 'commgraph-tuning %d'", CG_TUNING_FILE_VERSION);
  if (st == CG_SUCCESS && (!number_u32(&p, &u) || !at_end(&p)))
    st = bad(r, "expected 'commgraph-tuning <version>', found '%.80s'", r->text);
  if (st == CG_SUCCESS && u != CG_TUNING_FILE_VERSION)
    st = bad(r, "version %u; this library reads version %d", u, CG_TUNING_FILE_VERSION);
  /* nodes */
  if (st == CG_SUCCESS) st = next_line(r);
  p = r->text;
  if (st == CG_SUCCESS && (!word(&p, "nodes") || !number_u32(&p, &u) || !at_end(&p)))
    st = bad(r, "expected 'nodes <count>', found '%.80s'", r->eof ? "the end of the file" : r->text);
  if (st == CG_SUCCESS && u != shape->n_nodes)
    st = bad(r, "the file is for a graph of %u nodes, this graph has %u", u, shape->n_nodes);
  uint32_t want = next_communicating(shape, 0);
  for (;;) {
    if (st == CG_SUCCESS) st = next_line(r);
    p = r->text;
    if (st != CG_SUCCESS || !word(&p, "node")) break;
    double ready = 0;
    if (!number_u32(&p, &u) || !quoted(&p, name, sizeof name) || !number_double(&p, &ready) || !at_end(&p)) {
      st = bad(r, "expected 'node <index> \"<name>\" <ready_us>', found '%.80s'", r->text);
      break;
    }
    if (u >= shape->n_nodes)
      st = bad(r, "node %u: the graph has %u nodes", u, shape->n_nodes);
    else if (!shape->communicates[u])
      st = bad(r, "node %u ('%.60s') is not on a communicator in this graph", u, name_of(shape, u));
    else if (u < want)
      st = bad(r, "node %u again or out of order: each node on a communicator comes once, by index", u);
    else if (u > want)
      st = bad(r, "node %u ('%.60s', on a communicator) is missing from the file", want, name_of(shape, want));
    else if (strcmp(name, name_of(shape, u)) != 0)
      st = bad(r, "node %u is '%.60s' in the file and '%.60s' in the graph", u, name, name_of(shape, u));
    else if (!isfinite(ready) || ready < 0)
      st = bad(r, "node %u: ready time %g is not a finite number >= 0", u, ready);
    if (st != CG_SUCCESS) break;
    v->ready_us[u] = ready;
    want = next_communicating(shape, u + 1);
  }
  /* communicators */
  p = r->text;
  if (st == CG_SUCCESS && want < shape->n_nodes && (r->eof || word(&p, "comms")))
    st = bad(r, "node %u ('%.60s', on a communicator) is missing from the file", want, name_of(shape, want));
  p = r->text;
  if (st == CG_SUCCESS && (!word(&p, "comms") || !number_u32(&p, &u) || !at_end(&p)))
    st = bad(r, "expected 'node <index> \"<name>\" <ready_us>' or 'comms <count>', found '%.80s'",
             r->eof ? "the end of the file" : r->text);
  if (st == CG_SUCCESS && u != shape->n_comms)
    st = bad(r, "%u communicators in the file, the graph uses %u", u, shape->n_comms);
  int have_line = 0; /* r->text holds a line not yet taken (what came after a comm line) */
  for (k = 0; st == CG_SUCCESS && k < shape->n_comms; k++) {
    if (!have_line) st = next_line(r);
    have_line = 0;
    p = r->text;
    uint32_t index = 0, size = 0, rank = 0;
    double alpha = 0, bw = 0, overlap = 0;
    if (st == CG_SUCCESS &&
        (!word(&p, "comm") || !number_u32(&p, &index) || !word(&p, "size") || !number_u32(&p, &size) ||
         !word(&p, "rank") || !number_u32(&p, &rank) || !word(&p, "alpha_us") || !number_double(&p, &alpha) ||
         !word(&p, "bytes_per_us") || !number_double(&p, &bw) ||
         (!at_end(&p) && (!word(&p, "overlap_us") || !number_double(&p, &overlap) || !at_end(&p)))))
      st = bad(r, "expected 'comm %u size <ranks> rank <rank> alpha_us <a> bytes_per_us <b> [overlap_us <o>]', "
               "found '%.80s'", k, r->eof ? "the end of the file" : r->text);
    else if (st == CG_SUCCESS && index != k)
      st = bad(r, "communicator %u where communicator %u comes (by agreed id)", index, k);
    else if (st == CG_SUCCESS && size != (uint32_t)shape->sizes[k])
      st = bad(r, "communicator %u (by agreed id) has %u ranks in the file, %d in the graph", k, size,
               shape->sizes[k]);
    else if (st == CG_SUCCESS && rank >= size)
      st = bad(r, "communicator %u: rank %u of %u ranks", k, rank, size);
    else if (st == CG_SUCCESS && (!isfinite(alpha) || alpha < 0))
      st = bad(r, "communicator %u: alpha_us %g is not a finite number >= 0", k, alpha);
    else if (st == CG_SUCCESS && !(bw > 0))
      st = bad(r, "communicator %u: bytes_per_us %g is not above 0", k, bw);
    else if (st == CG_SUCCESS && (!isfinite(overlap) || overlap < 0))
      st = bad(r, "communicator %u: overlap_us %g is not a finite number >= 0", k, overlap);
    if (st == CG_SUCCESS) v->alpha_us[k] = alpha, v->bytes_per_us[k] = bw, v->overlap_us[k] = overlap;
    if (st == CG_SUCCESS) v->paths[k] = (cg_cost_path_t){0};
    if (st == CG_SUCCESS) st = next_line(r);
    p = r->text;
    if (st == CG_SUCCESS && word(&p, "comm_path"))
      st = read_path(r, p, k, &v->paths[k]);
    else
      have_line = 1;
  }
  /* the winner, and the end */
  if (st == CG_SUCCESS && !have_line) st = next_line(r);
  p = r->text;
  int tuned = 0, dflt = 0;
  if (st == CG_SUCCESS && (!word(&p, "boundaries") || (!(tuned = word(&p, "tuned")) && !(dflt = word(&p, "default"))) ||
                           !at_end(&p)))
    st = bad(r, "expected 'boundaries tuned' or 'boundaries default', found '%.80s'",
             r->eof ? "the end of the file" : r->text);
  if (st == CG_SUCCESS) v->default_won = dflt;
  if (st == CG_SUCCESS) st = next_line(r);
  p = r->text;
  if (st == CG_SUCCESS && (!word(&p, "end") || !at_end(&p)))
    st = bad(r, "expected 'end', found '%.80s'", r->eof ? "the end of the file (cut short?)" : r->text);
  if (st == CG_SUCCESS) st = next_line(r);
  if (st == CG_SUCCESS && !r->eof) st = bad(r, "text after 'end': '%.80s'", r->text);
  free(r);
  return st;
}

/* ---- paths */

int cg_tuning_file_path(char *buf, size_t size, const char *path, int rank) {
  size_t n = 0;
  for (const char *c = path; *c; c++) {
    char piece[16];
    const char *add = piece;
    if (c[0] == '%' && c[1] == 'r') {
      snprintf(piece, sizeof piece, "%d", rank);
      c++;
    } else {
      piece[0] = *c, piece[1] = '\0';
    }
    size_t len = strlen(add);
    if (n + len + 1 > size) return 0;
    memcpy(buf + n, add, len);
    n += len;
  }
  if (!size) return 0;
  buf[n] = '\0';
  return 1;
}

/* ---- the plan's side and the graph's side */

typedef struct shape_storage {
  uint8_t *communicates;
  int *sizes, *ranks;
  uint32_t *by_id; /* communicator indices by agreed id */
} shape_storage_t;

static void shape_storage_free(shape_storage_t *s) {
  free(s->communicates);
  free(s->sizes);
  free(s->ranks);
  free(s->by_id);
}

static cg_status_t shape_storage_make(shape_storage_t *s, uint32_t n_nodes, uint32_t n_comms, const char *where) {
  *s = (shape_storage_t){calloc(n_nodes ? n_nodes : 1, 1), calloc(n_comms ? n_comms : 1, sizeof(int)),
                         calloc(n_comms ? n_comms : 1, sizeof(int)), calloc(n_comms ? n_comms : 1, sizeof(uint32_t))};
  if (s->communicates && s->sizes && s->ranks && s->by_id) return CG_SUCCESS;
  shape_storage_free(s);
  return cg_fail(CG_ERR_NO_MEMORY, "%s: describing a tuning of %u nodes", where, n_nodes);
}

static cg_status_t open_for_write(FILE **f, char *tmp, size_t size, const char *path, int rank, const char *where) {
  /* written beside the file, then renamed over it: ranks that share a file
   * system and save to one path leave one whole file (the process id keeps
   * equal ranks of different communicators, or of different nodes writing
   * through one shared file system, apart: hostnames are not compared) */
  if (snprintf(tmp, size, "%s.%d.%ld.tmp", path, rank, (long)getpid()) >= (int)size)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: the path '%.80s...' is too long", where, path);
  if (!(*f = fopen(tmp, "w")))
    return cg_fail(CG_ERR_IO, "%s: cannot write the tuning file %s: %s", where, tmp, strerror(errno));
  return CG_SUCCESS;
}

cg_status_t cg_plan_save_tuning(const cg_plan_t *plan, const char *path) {
  const char *where = "cg_plan_save_tuning";
  if (!plan || !path) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: NULL %s", where, plan ? "path" : "plan");
  if (!*path) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: an empty path", where);
  if (!plan->tuning)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: the plan was compiled without a tuning (cg_plan_tune returns a "
                   "plan with one, as does cg_compile with a tuning_file)", where);
  const cg_tuning_t *t = plan->tuning;
  if (t->n_nodes != plan->n_names)
    return cg_fail(CG_ERR_INTERNAL, "%s: the plan's tuning is for %u nodes, the plan has %u", where, t->n_nodes,
                   plan->n_names);
  shape_storage_t s;
  cg_status_t st = shape_storage_make(&s, plan->n_names, plan->n_comms, where);
  if (st != CG_SUCCESS) return st;
  double *alpha = calloc(plan->n_comms ? plan->n_comms : 1, sizeof *alpha);
  double *bw = calloc(plan->n_comms ? plan->n_comms : 1, sizeof *bw);
  double *overlap = calloc(plan->n_comms ? plan->n_comms : 1, sizeof *overlap);
  cg_cost_path_t *paths = calloc(plan->n_comms ? plan->n_comms : 1, sizeof *paths);
  if (!alpha || !bw || !overlap || !paths) st = cg_fail(CG_ERR_NO_MEMORY, "%s: describing the tuning", where);
  if (st == CG_SUCCESS) cg_plan_comms_by_id(s.by_id, plan);
  for (uint32_t v = 0; st == CG_SUCCESS && v < plan->n_names; v++) s.communicates[v] = plan->nodes[v].comm != NULL;
  for (uint32_t k = 0; st == CG_SUCCESS && k < plan->n_comms; k++) {
    const cg_comm_t *c = plan->comms[s.by_id[k]].comm;
    const cg_comm_cost_t *cost = cg_tuning_cost(t, c);
    if (!cost) {
      st = cg_fail(CG_ERR_INTERNAL, "%s: the plan's tuning has no cost for communicator %u", where, k);
      break;
    }
    s.sizes[k] = c->size, s.ranks[k] = c->rank, alpha[k] = cost->alpha_us, bw[k] = cost->bytes_per_us;
    overlap[k] = cost->overlap_us, paths[k] = cost->path;
  }
  cg_tuning_shape_t shape = {plan->n_names, (const char *const *)plan->node_names, s.communicates, plan->n_comms,
                             s.sizes, s.ranks};
  cg_tuning_values_t values = {t->ready_us, alpha, bw, overlap, paths, cg_plan_default_won(plan)};
  int rank = plan->n_comms ? plan->comms[0].comm->rank : 0;
  char full[4096], tmp[4200];
  FILE *f = NULL;
  if (st == CG_SUCCESS && !cg_tuning_file_path(full, sizeof full, path, rank))
    st = cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: the path '%.80s...' is too long", where, path);
  if (st == CG_SUCCESS) st = open_for_write(&f, tmp, sizeof tmp, full, rank, where);
  if (st == CG_SUCCESS) st = cg_tuning_file_write(f, full, &shape, &values, where);
  if (f && fclose(f) != 0 && st == CG_SUCCESS)
    st = cg_fail(CG_ERR_IO, "%s: writing the tuning file %s: %s", where, tmp, strerror(errno));
  if (f && st == CG_SUCCESS && rename(tmp, full) != 0)
    st = cg_fail(CG_ERR_IO, "%s: cannot write the tuning file %s (renaming %s): %s", where, full, tmp,
                 strerror(errno));
  if (f && st != CG_SUCCESS) remove(tmp);
  free(alpha);
  free(bw);
  free(overlap);
  free(paths);
  shape_storage_free(&s);
  return st;
}

cg_status_t cg_tuning_load(cg_tuning_t *out, int *default_won, const cg_graph_t *g, const cg_comm_order_t *order,
                           const char *path, const char *where) {
  uint32_t n = cg_graph_node_count(g), n_comms = order->n_sequences;
  *out = (cg_tuning_t){0};
  shape_storage_t s;
  cg_status_t st = shape_storage_make(&s, n, n_comms, where);
  if (st != CG_SUCCESS) return st;
  const char **names = calloc(n ? n : 1, sizeof *names);
  double *alpha = calloc(n_comms ? n_comms : 1, sizeof *alpha), *bw = calloc(n_comms ? n_comms : 1, sizeof *bw);
  double *overlap = calloc(n_comms ? n_comms : 1, sizeof *overlap);
  cg_cost_path_t *paths = calloc(n_comms ? n_comms : 1, sizeof *paths);
  *out = (cg_tuning_t){calloc(n ? n : 1, sizeof(double)), n, calloc(n_comms ? n_comms : 1, sizeof(cg_comm_cost_t)),
                       n_comms, 0};
  if (!names || !alpha || !bw || !overlap || !paths || !out->ready_us || !out->costs)
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: loading a tuning of %u nodes", where, n);
  for (uint32_t v = 0; st == CG_SUCCESS && v < n; v++) {
    const cg_node_rec_t *node = cg_graph_node(g, v);
    names[v] = node->name, s.communicates[v] = node->comm != NULL;
  }
  /* by agreed id, as cg_plan_comms_by_id orders a plan's (whose list is the order's) */
  for (uint32_t i = 0; st == CG_SUCCESS && i < n_comms; i++) {
    uint32_t k = i;
    for (; k > 0 && order->sequences[s.by_id[k - 1]].comm->id > order->sequences[i].comm->id; k--)
      s.by_id[k] = s.by_id[k - 1];
    s.by_id[k] = i;
  }
  for (uint32_t k = 0; st == CG_SUCCESS && k < n_comms; k++) {
    const cg_comm_t *c = order->sequences[s.by_id[k]].comm;
    s.sizes[k] = c->size, s.ranks[k] = c->rank;
  }
  cg_tuning_shape_t shape = {n, names, s.communicates, n_comms, s.sizes, s.ranks};
  cg_tuning_values_t values = {out->ready_us, alpha, bw, overlap, paths, 0};
  char full[4096];
  FILE *f = NULL;
  int rank = n_comms ? order->sequences[0].comm->rank : 0;
  if (st == CG_SUCCESS && !cg_tuning_file_path(full, sizeof full, path, rank))
    st = cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: the tuning_file path '%.80s...' is too long", where, path);
  if (st == CG_SUCCESS && !(f = fopen(full, "r")))
    st = cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: cannot open the tuning file %s: %s", where, full, strerror(errno));
  if (st == CG_SUCCESS) st = cg_tuning_file_read(f, full, &shape, &values, where);
  if (f) fclose(f);
  for (uint32_t k = 0; st == CG_SUCCESS && k < n_comms; k++)
    out->costs[k] = (cg_comm_cost_t){order->sequences[s.by_id[k]].comm, alpha[k], bw[k], overlap[k], paths[k]};
  if (st == CG_SUCCESS)
    *default_won = values.default_won;
  else
    cg_tuning_free(out);
  free(names);
  free(alpha);
  free(bw);
  free(overlap);
  free(paths);
  shape_storage_free(&s);
  return st;
}
