/* Text the library keeps (graph, plan and node names). */
#ifndef CG_CORE_TEXT_H
#define CG_CORE_TEXT_H

#include <stddef.h>

/* A malloc'ed copy of at most `max` bytes of `text`, cut before a partial
 * UTF-8 sequence; NULL when out of memory. */
char *cg_copy_text(const char *text, size_t max);

#endif
