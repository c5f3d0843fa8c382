/* Text the library keeps (graph, plan and node names). */
#ifndef CG_CORE_TEXT_H
#define CG_CORE_TEXT_H

#include <stddef.h>

/* A malloc'ed copy of at most `max` bytes of `text`, cut before a partial
 * UTF-8 sequence; NULL when out of memory. */
char *cg_copy_text(const char *text, size_t max);

/* Decimal numbers in text that other processes read back (tuning files,
 * traces, the environment): always with '.', whatever setlocale(LC_NUMERIC)
 * the program chose (printf and strtod follow it, and a program or Python's
 * locale.setlocale may pick "1,5"). cg_text_format_double writes v with
 * `digits` significant digits ("%.*g") or, with `fixed`, that many after the
 * point ("%.*f") into buf; cg_text_to_double reads like strtod in the C
 * locale (*end: the first character not read). */
void cg_text_format_double(char *buf, size_t size, double v, int digits, int fixed);
double cg_text_to_double(const char *text, const char **end);

#endif
