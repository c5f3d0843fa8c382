#include "text.h"

#include <ctype.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The radix character printf and strtod use now. */
static const char *radix(void) {
  const struct lconv *l = localeconv();
  return l && l->decimal_point && l->decimal_point[0] ? l->decimal_point : ".";
}

void cg_text_format_double(char *buf, size_t size, double v, int digits, int fixed) {
  char raw[400];
  snprintf(raw, sizeof raw, fixed ? "%.*f" : "%.*g", digits, v);
  const char *dp = radix();
  size_t dl = strlen(dp), o = 0;
  for (const char *c = raw; *c && o + 1 < size;) {
    if (!strncmp(c, dp, dl)) {
      buf[o++] = '.';
      c += dl;
    } else {
      buf[o++] = *c++;
    }
  }
  if (size) buf[o] = '\0';
}

double cg_text_to_double(const char *text, const char **end) {
  const char *dp = radix();
  char *stop = NULL;
  if (!strcmp(dp, ".")) {
    double v = strtod(text, &stop);
    *end = stop;
    return v;
  }
  /* the number's characters with the point spelled as the locale's, and for
   * each how many bytes it became, to map strtod's end back */
  char local[128];
  unsigned char width[64];
  size_t dl = strlen(dp), o = 0, n = 0;
  /* what strtod may read: digits, signs, the point, letters (exponents,
   * hex, inf, nan) */
  while (text[n] && n < sizeof width && o + dl + 1 < sizeof local &&
         (isalnum((unsigned char)text[n]) || strchr("+-.", text[n]))) {
    if (text[n] == '.') {
      memcpy(local + o, dp, dl);
      o += dl;
      width[n] = (unsigned char)dl;
    } else {
      local[o++] = text[n];
      width[n] = 1;
    }
    n++;
  }
  local[o] = '\0';
  double v = strtod(local, &stop);
  size_t used = (size_t)(stop - local), k = 0;
  for (size_t at = 0; k < n && at + width[k] <= used; k++) at += width[k];
  *end = text + k;
  return v;
}

char *cg_copy_text(const char *text, size_t max) {
  size_t n = 0;
  while (n < max && text[n]) n++;
  if (text[n]) /* cut: do not split a UTF-8 sequence */
    while (n && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
  char *copy = malloc(n + 1);
  if (copy) {
    memcpy(copy, text, n);
    copy[n] = '\0';
  }
  return copy;
}
