/* A strict JSON parser (RFC 8259) and a reader of the Chrome traces
 * cg_plan_trace writes, checked against their plan: shared by the unit
 * suite test_plan_trace and the MPI suite test_mpi_trace. Header-only. */
#ifndef CG_TEST_TRACE_JSON_H
#define CG_TEST_TRACE_JSON_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

/* ---- a strict JSON parser (RFC 8259), enough to read a trace back */

typedef enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype_t;

typedef struct jv {
  jtype_t type;
  double num;
  char *str; /* J_STR: decoded UTF-8 */
  struct jv *items; /* J_ARR, J_OBJ: values */
  char **keys;      /* J_OBJ */
  size_t n;
} jv_t;

typedef struct jp {
  const char *p, *end;
  const char *error;
} jp_t;

static inline void jv_free(jv_t *v) {
  free(v->str);
  for (size_t i = 0; i < v->n; i++) {
    jv_free(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
}

static inline void skip_ws(jp_t *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static inline int jfail(jp_t *j, const char *why) {
  if (!j->error) j->error = why;
  return 0;
}

static inline void put_utf8(char **o, uint32_t cp) {
  unsigned char *u = (unsigned char *)*o;
  if (cp < 0x80) {
    *u++ = (unsigned char)cp;
  } else if (cp < 0x800) {
    *u++ = (unsigned char)(0xc0 | cp >> 6), *u++ = (unsigned char)(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *u++ = (unsigned char)(0xe0 | cp >> 12), *u++ = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    *u++ = (unsigned char)(0x80 | (cp & 0x3f));
  } else {
    *u++ = (unsigned char)(0xf0 | cp >> 18), *u++ = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    *u++ = (unsigned char)(0x80 | (cp >> 6 & 0x3f)), *u++ = (unsigned char)(0x80 | (cp & 0x3f));
  }
  *o = (char *)u;
}

static inline int hex4(jp_t *j, uint32_t *out) {
  if (j->end - j->p < 4) return jfail(j, "short \\u escape");
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) {
    char c = *j->p++;
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return jfail(j, "bad hex digit");
  }
  *out = v;
  return 1;
}

/* Raw bytes must be UTF-8: the length of the sequence at p, 0 if invalid. */
static inline size_t utf8_len(const unsigned char *p, size_t n) {
  size_t len;
  uint32_t cp;
  if (p[0] < 0x80) return 1;
  if (p[0] >= 0xc2 && p[0] <= 0xdf) len = 2, cp = p[0] & 0x1fu;
  else if (p[0] >= 0xe0 && p[0] <= 0xef) len = 3, cp = p[0] & 0x0fu;
  else if (p[0] >= 0xf0 && p[0] <= 0xf4) len = 4, cp = p[0] & 0x07u;
  else return 0;
  if (len > n) return 0;
  for (size_t k = 1; k < len; k++) {
    if ((p[k] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[k] & 0x3fu);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

static inline int parse_string(jp_t *j, char **out) {
  if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string");
  j->p++;
  char *s = malloc((size_t)(j->end - j->p) * 2 + 4), *o = s;
  while (1) {
    if (j->p >= j->end) {
      free(s);
      return jfail(j, "unterminated string");
    }
    unsigned char c = (unsigned char)*j->p;
    if (c == '"') {
      j->p++;
      break;
    }
    if (c < 0x20) {
      free(s);
      return jfail(j, "raw control character in a string");
    }
    if (c == '\\') {
      j->p++;
      if (j->p >= j->end) break;
      char e = *j->p++;
      uint32_t cp;
      switch (e) {
      case '"': *o++ = '"'; break;
      case '\\': *o++ = '\\'; break;
      case '/': *o++ = '/'; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u':
        if (!hex4(j, &cp)) {
          free(s);
          return 0;
        }
        if (cp >= 0xd800 && cp <= 0xdbff) {
          uint32_t lo;
          if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u') {
            free(s);
            return jfail(j, "lone high surrogate");
          }
          j->p += 2;
          if (!hex4(j, &lo) || lo < 0xdc00 || lo > 0xdfff) {
            free(s);
            return jfail(j, "bad low surrogate");
          }
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
          free(s);
          return jfail(j, "lone low surrogate");
        }
        put_utf8(&o, cp);
        break;
      default:
        free(s);
        return jfail(j, "bad escape");
      }
      continue;
    }
    size_t len = utf8_len((const unsigned char *)j->p, (size_t)(j->end - j->p));
    if (!len) {
      free(s);
      return jfail(j, "a string is not UTF-8");
    }
    memcpy(o, j->p, len);
    o += len, j->p += len;
  }
  *o = '\0';
  *out = s;
  return 1;
}

static inline int parse_value(jp_t *j, jv_t *v, int depth);

static inline int parse_number(jp_t *j, jv_t *v) {
  const char *start = j->p;
  if (j->p < j->end && *j->p == '-') j->p++;
  if (j->p >= j->end) return jfail(j, "bad number");
  if (*j->p == '0') {
    j->p++;
  } else if (*j->p >= '1' && *j->p <= '9') {
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  } else {
    return jfail(j, "bad number");
  }
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jfail(j, "bad fraction");
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jfail(j, "bad exponent");
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  }
  char buf[64];
  size_t len = (size_t)(j->p - start);
  if (len >= sizeof buf) return jfail(j, "number too long");
  memcpy(buf, start, len);
  buf[len] = '\0';
  v->type = J_NUM;
  v->num = strtod(buf, NULL);
  return 1;
}

static inline int parse_container(jp_t *j, jv_t *v, int depth, int object) {
  char close = object ? '}' : ']';
  size_t cap = 0;
  v->type = object ? J_OBJ : J_ARR;
  j->p++;
  skip_ws(j);
  if (j->p < j->end && *j->p == close) {
    j->p++;
    return 1;
  }
  while (1) {
    if (v->n == cap) {
      cap = cap ? 2 * cap : 8;
      v->items = realloc(v->items, cap * sizeof *v->items);
      if (object) v->keys = realloc(v->keys, cap * sizeof *v->keys);
    }
    memset(&v->items[v->n], 0, sizeof v->items[0]);
    if (object) {
      skip_ws(j);
      if (!parse_string(j, &v->keys[v->n])) return 0;
      skip_ws(j);
      if (j->p >= j->end || *j->p != ':') {
        free(v->keys[v->n]);
        return jfail(j, "expected ':'");
      }
      j->p++;
    }
    int ok = parse_value(j, &v->items[v->n], depth + 1);
    v->n++;
    if (!ok) return 0;
    skip_ws(j);
    if (j->p < j->end && *j->p == ',') {
      j->p++;
      continue;
    }
    if (j->p < j->end && *j->p == close) {
      j->p++;
      return 1;
    }
    return jfail(j, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static inline int parse_value(jp_t *j, jv_t *v, int depth) {
  memset(v, 0, sizeof *v);
  if (depth > 64) return jfail(j, "too deep");
  skip_ws(j);
  if (j->p >= j->end) return jfail(j, "expected a value");
  char c = *j->p;
  if (c == '{' || c == '[') return parse_container(j, v, depth, c == '{');
  if (c == '"') {
    v->type = J_STR;
    return parse_string(j, &v->str);
  }
  const char *words[] = {"null", "true", "false"};
  for (int k = 0; k < 3; k++) {
    size_t len = strlen(words[k]);
    if ((size_t)(j->end - j->p) >= len && memcmp(j->p, words[k], len) == 0) {
      v->type = k ? J_BOOL : J_NULL;
      v->num = k == 1;
      j->p += len;
      return 1;
    }
  }
  return parse_number(j, v);
}

/* Parses a whole document; fails the test with the reason and offset. */
static inline jv_t parse_document(const char *text, size_t len) {
  jp_t j = {text, text + len, NULL};
  jv_t v;
  int ok = parse_value(&j, &v, 0);
  if (ok) {
    skip_ws(&j);
    if (j.p != j.end) ok = jfail(&j, "text after the value");
  }
  if (!ok) {
    long at = (long)(j.p - text);
    jv_free(&v);
    ck_abort_msg("not JSON at byte %ld: %s\n%.*s", at, j.error, (int)(len < 4000 ? len : 4000), text);
  }
  return v;
}

static inline const jv_t *get(const jv_t *obj, const char *key) {
  if (!obj || obj->type != J_OBJ) return NULL;
  for (size_t i = 0; i < obj->n; i++)
    if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
  return NULL;
}

static inline double num(const jv_t *obj, const char *key) {
  const jv_t *v = get(obj, key);
  ck_assert_msg(v && v->type == J_NUM, "no number '%s'", key);
  return v->num;
}

static inline const char *str(const jv_t *obj, const char *key) {
  const jv_t *v = get(obj, key);
  ck_assert_msg(v && v->type == J_STR, "no string '%s'", key);
  return v->str;
}

static inline char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char *text = NULL;
  size_t cap = 0, n = 0, got;
  do {
    if (n + 4096 > cap) text = realloc(text, cap = 2 * cap + 4096);
    got = fread(text + n, 1, cap - n, f);
    n += got;
  } while (got);
  fclose(f);
  *len = n;
  return text;
}

/* ---- reading a trace back against its plan */

typedef struct trace {
  jv_t doc;
  double *ts, *dur; /* per step */
  const char **name, **cat;
  const jv_t **args;
} trace_t;

/* Parses the trace at `path` and checks it against `plan`: one X event per
 * step, on the step's lane, pid `rank`, dur >= 0; every lane named. */
static inline void read_trace(trace_t *t, const char *path, const cg_plan_t *plan, int rank) {
  size_t len;
  char *text = slurp(path, &len);
  t->doc = parse_document(text, len);
  free(text);
  uint32_t n = plan->n_steps;
  t->ts = calloc(n + 1, sizeof *t->ts);
  t->dur = calloc(n + 1, sizeof *t->dur);
  t->name = calloc(n + 1, sizeof *t->name);
  t->cat = calloc(n + 1, sizeof *t->cat);
  t->args = calloc(n + 1, sizeof *t->args);
  const jv_t *events = get(&t->doc, "traceEvents");
  ck_assert_msg(events && events->type == J_ARR, "no traceEvents array");
  uint32_t *seen = calloc(n + 1, sizeof *seen), *lane_named = calloc(plan->n_lanes + 1, sizeof *lane_named);
  uint32_t n_x = 0;
  for (size_t e = 0; e < events->n; e++) {
    const jv_t *ev = &events->items[e];
    const char *ph = str(ev, "ph");
    ck_assert_int_eq((int)num(ev, "pid"), rank);
    if (strcmp(ph, "M") == 0) {
      if (strcmp(str(ev, "name"), "thread_name") == 0) {
        double tid = num(ev, "tid");
        ck_assert_msg(tid >= 0 && tid < plan->n_lanes, "thread_name for tid %g of %u lanes", tid, plan->n_lanes);
        lane_named[(uint32_t)tid]++;
        ck_assert_msg(strlen(str(get(ev, "args"), "name")) > 0, "an empty lane name");
      }
      continue;
    }
    ck_assert_msg(strcmp(ph, "X") == 0, "event of phase '%s'", ph);
    n_x++;
    const jv_t *args = get(ev, "args");
    double step = num(args, "step");
    ck_assert_msg(step >= 0 && step < n && step == (uint32_t)step, "event of step %g", step);
    uint32_t i = (uint32_t)step;
    ck_assert_msg(!seen[i]++, "two events for step %u", i);
    const cg_step_t *s = &plan->steps[i];
    ck_assert_uint_eq((uint32_t)num(ev, "tid"), s->lane);
    ck_assert_uint_eq((uint32_t)num(args, "node"), s->node);
    ck_assert_msg(num(args, "bytes") >= 0, "negative bytes");
    (void)str(args, "kind");
    ck_assert_msg(get(args, "after") && get(args, "after")->type == J_ARR && get(args, "after")->n == s->n_deps,
                  "step %u: 'after' does not list its %u dependencies", i, s->n_deps);
    t->ts[i] = num(ev, "ts");
    t->dur[i] = num(ev, "dur");
    ck_assert_msg(t->ts[i] >= 0 && t->dur[i] >= 0, "step %u: ts %g dur %g", i, t->ts[i], t->dur[i]);
    t->name[i] = str(ev, "name");
    t->cat[i] = str(ev, "cat");
    t->args[i] = args;
    const char *cats[] = {"compute", "communication", "copy", "host"};
    int known = 0;
    for (int k = 0; k < 4; k++) known |= strcmp(t->cat[i], cats[k]) == 0;
    ck_assert_msg(known, "step %u: category '%s'", i, t->cat[i]);
  }
  ck_assert_uint_eq(n_x, n);
  for (uint32_t lane = 0; lane < plan->n_lanes; lane++)
    ck_assert_msg(lane_named[lane] == 1, "lane %u named %u times", lane, lane_named[lane]);
  free(seen);
  free(lane_named);
}

static inline void trace_free(trace_t *t) {
  jv_free(&t->doc);
  free(t->ts);
  free(t->dur);
  free(t->name);
  free(t->cat);
  free(t->args);
}

#endif
