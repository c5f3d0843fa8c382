#include "param.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "text.h"

typedef struct param_info {
  const char *variable;
  cg_param_kind_t kind;
  const char *takes, *example, *does;
} param_info_t;

static const param_info_t params[CG_PARAM_COUNT] = {
#define CG_PARAM_INFO(id, variable, kind, takes, example, does) [id] = {variable, kind, takes, example, does},
    CG_PARAM_LIST(CG_PARAM_INFO)
#undef CG_PARAM_INFO
};

static atomic_uint reported; /* bit per parameter: its bad value went to stderr */

const char *cg_param_name(cg_param_t param) { return params[param].variable; }
cg_param_kind_t cg_param_kind(cg_param_t param) { return params[param].kind; }
const char *cg_param_takes(cg_param_t param) { return params[param].takes; }
const char *cg_param_example(cg_param_t param) { return params[param].example; }
const char *cg_param_does(cg_param_t param) { return params[param].does; }

const char *cg_param_text(cg_param_t param) {
  const char *text = getenv(params[param].variable);
  return text && *text ? text : NULL;
}

/* The value as the message shows it: at most 64 characters, anything not
 * printable as '?', so a stray control character cannot garble the line. */
static void shown(char *out, size_t size, const char *text) {
  size_t n = 0, max = size - 4;
  for (; text[n] && n < max && n < 64; n++) out[n] = isprint((unsigned char)text[n]) ? text[n] : '?';
  if (text[n]) {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = '\0';
}

/* A value that does not parse: the error detail for `where`, or (no where)
 * one line on stderr per variable and process. */
static cg_status_t reject(int *is_set, cg_param_t param, const char *text, const char *where) {
  char value[72];
  if (is_set) *is_set = 0;
  shown(value, sizeof value, text);
  if (where)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: environment variable %s='%s' is not %s (unset it or give e.g. %s)",
                   where, params[param].variable, value, params[param].takes, params[param].example);
  unsigned bit = 1u << param;
  if (!(atomic_fetch_or(&reported, bit) & bit))
    fprintf(stderr, "commgraph: environment variable %s='%s' is not %s (unset it or give e.g. %s); ignored\n",
            params[param].variable, value, params[param].takes, params[param].example);
  return CG_ERR_INVALID_ARGUMENT;
}

/* The variable's text, or NULL (unset: *is_set 0). */
static const char *text_of(int *is_set, cg_param_t param) {
  if (is_set) *is_set = 0;
  return cg_param_text(param);
}

static cg_status_t accept(int *is_set) {
  if (is_set) *is_set = 1;
  return CG_SUCCESS;
}

/* `text` is one of `words`, ignoring case. */
static int is_word(const char *text, const char *const *words) {
  for (; *words; words++) {
    const char *a = text, *b = *words;
    while (*a && tolower((unsigned char)*a) == *b) a++, b++;
    if (!*a && !*b) return 1;
  }
  return 0;
}

cg_status_t cg_param_seconds(double *out, int *is_set, cg_param_t param, const char *where) {
  const char *text = text_of(is_set, param);
  if (!text) return CG_SUCCESS;
  /* decimal only: no sign, blank, hex, inf or nan (strtod takes them all) */
  if (!(isdigit((unsigned char)text[0]) || text[0] == '.') || text[strspn(text, "0123456789.eE+-")])
    return reject(is_set, param, text, where);
  const char *end = NULL;
  errno = 0;
  double seconds = cg_text_to_double(text, &end);
  if (errno || end == text || *end || !(seconds > 0) || seconds > 1e9) return reject(is_set, param, text, where);
  *out = seconds;
  return accept(is_set);
}

cg_status_t cg_param_switch(int *out, int *is_set, cg_param_t param, const char *where) {
  static const char *const on[] = {"1", "on", "yes", "true", NULL}, *const off[] = {"0", "off", "no", "false", NULL};
  const char *text = text_of(is_set, param);
  if (!text) return CG_SUCCESS;
  if (is_word(text, on)) {
    *out = 1;
    return accept(is_set);
  }
  if (is_word(text, off)) {
    *out = 0;
    return accept(is_set);
  }
  return reject(is_set, param, text, where);
}

cg_status_t cg_param_bytes(size_t *out, int *is_set, cg_param_t param, const char *where) {
  static const char *const never[] = {"never", NULL};
  const char *text = text_of(is_set, param);
  if (!text) return CG_SUCCESS;
  if (params[param].kind == CG_PARAM_BYTES_OR_NEVER && is_word(text, never)) {
    *out = SIZE_MAX;
    return accept(is_set);
  }
  if (!isdigit((unsigned char)text[0])) return reject(is_set, param, text, where);
  char *end = NULL;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  int shift = 0;
  switch (tolower((unsigned char)*end)) {
    case 'k': shift = 10; break;
    case 'm': shift = 20; break;
    case 'g': shift = 30; break;
    default: break;
  }
  if (shift) { /* "64K", "64KB", "64KiB" */
    end++;
    if ((end[0] == 'i' || end[0] == 'I') && (end[1] == 'b' || end[1] == 'B'))
      end += 2;
    else if (end[0] == 'b' || end[0] == 'B')
      end++;
  }
  if (*end) return reject(is_set, param, text, where);
  *out = errno || value > (SIZE_MAX >> shift) ? SIZE_MAX : (size_t)value << shift;
  return accept(is_set);
}

cg_status_t cg_param_ordinal(int *out, int *is_set, cg_param_t param, const char *where) {
  const char *text = text_of(is_set, param);
  if (!text) return CG_SUCCESS;
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  if (errno || end == text || *end || value < 0 || value > INT_MAX || !isdigit((unsigned char)text[0]))
    return reject(is_set, param, text, where);
  *out = (int)value;
  return accept(is_set);
}

cg_status_t cg_param_check(cg_param_t param, const char *where) {
  double seconds = 0;
  int on = 0, ordinal = 0;
  size_t bytes = 0;
  switch (params[param].kind) {
    case CG_PARAM_SECONDS: return cg_param_seconds(&seconds, NULL, param, where);
    case CG_PARAM_SWITCH: return cg_param_switch(&on, NULL, param, where);
    case CG_PARAM_BYTES:
    case CG_PARAM_BYTES_OR_NEVER: return cg_param_bytes(&bytes, NULL, param, where);
    case CG_PARAM_ORDINAL: return cg_param_ordinal(&ordinal, NULL, param, where);
    case CG_PARAM_PATH: break;
  }
  return CG_SUCCESS;
}
