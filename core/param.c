#include "param.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct param_info {
  const char *variable;
  cg_param_kind_t kind;
  const char *takes;
} param_info_t;

static const param_info_t params[CG_PARAM_COUNT] = {
#define CG_PARAM_INFO(id, variable, kind, takes, does) [id] = {variable, kind, takes},
    CG_PARAM_LIST(CG_PARAM_INFO)
#undef CG_PARAM_INFO
};

static atomic_uint reported; /* bit per parameter: its bad value was reported */

const char *cg_param_name(cg_param_t param) { return params[param].variable; }

const char *cg_param_text(cg_param_t param) {
  const char *text = getenv(params[param].variable);
  return text && *text ? text : NULL;
}

static int reject(cg_param_t param, const char *text) {
  unsigned bit = 1u << param;
  if (!(atomic_fetch_or(&reported, bit) & bit))
    fprintf(stderr, "commgraph: %s=\"%s\" is not %s; ignored\n", params[param].variable, text,
            params[param].takes);
  return 0;
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

int cg_param_seconds(double *out, cg_param_t param) {
  const char *text = cg_param_text(param);
  if (!text) return 0;
  char *end = NULL;
  errno = 0;
  double seconds = strtod(text, &end);
  if (errno || end == text || *end || !(seconds > 0) || seconds > 1e9) return reject(param, text);
  *out = seconds;
  return 1;
}

int cg_param_switch(int *out, cg_param_t param) {
  static const char *const on[] = {"1", "on", "yes", "true", NULL}, *const off[] = {"0", "off", "no", "false", NULL};
  const char *text = cg_param_text(param);
  if (!text) return 0;
  if (is_word(text, on)) {
    *out = 1;
    return 1;
  }
  if (is_word(text, off)) {
    *out = 0;
    return 1;
  }
  return reject(param, text);
}

int cg_param_bytes(size_t *out, cg_param_t param) {
  static const char *const never[] = {"never", NULL};
  const char *text = cg_param_text(param);
  if (!text) return 0;
  if (params[param].kind == CG_PARAM_BYTES_OR_NEVER && is_word(text, never)) {
    *out = SIZE_MAX;
    return 1;
  }
  if (!isdigit((unsigned char)text[0])) return reject(param, text);
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
  if (*end) return reject(param, text);
  *out = errno || value > (SIZE_MAX >> shift) ? SIZE_MAX : (size_t)value << shift;
  return 1;
}

int cg_param_ordinal(int *out, cg_param_t param) {
  const char *text = cg_param_text(param);
  if (!text) return 0;
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  if (errno || end == text || *end || value < 0 || value > INT_MAX || !isdigit((unsigned char)text[0]))
    return reject(param, text);
  *out = (int)value;
  return 1;
}
