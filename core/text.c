#include "text.h"

#include <stdlib.h>
#include <string.h>

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
