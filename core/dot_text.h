/* Helpers shared by the DOT writers of graphs (graph/) and plans (sched/). */
#ifndef CG_GRAPH_DOT_TEXT_H
#define CG_GRAPH_DOT_TEXT_H

#include <stdio.h>

/* Writes `text` as the inside of a DOT double-quoted string. */
void cg_dot_put_escaped(FILE *f, const char *text);

#endif
