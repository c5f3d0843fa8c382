/* Graphviz DOT export of a recorded graph. */
#include <stdio.h>

#include "dot_text.h"
#include "error.h"
#include "graph_internal.h"

void cg_dot_put_escaped(FILE *f, const char *text) {
  for (const char *p = text; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else if ((unsigned char)*p >= 0x20)
      fputc(*p, f);
  }
}

static const char *shape_of(const cg_node_rec_t *n) {
  switch (n->kind) {
    case CG_NODE_SEND:
    case CG_NODE_RECV:
      return "ellipse";
    case CG_NODE_BARRIER:
      return "octagon";
    case CG_NODE_HOST_FUNC:
    case CG_NODE_CHILD_GRAPH:
      return "component";
    case CG_NODE_EVENT_WAIT:
    case CG_NODE_EVENT_RECORD:
      return "cds";
    default:
      return "box";
  }
}

static void write_node(FILE *f, uint32_t index, const cg_node_rec_t *n) {
  fprintf(f, "  n%u [shape=%s, label=\"#%u %s", index, shape_of(n), index, cg_node_kind_name(n->kind));
  if (n->name) {
    fputs("\\n", f);
    cg_dot_put_escaped(f, n->name);
  }
  if (n->comm && n->kind != CG_NODE_BARRIER) {
    fprintf(f, "\\n%zu x %s", n->count, cg_dtype_name(n->dtype));
    if (cg_kind_has_op(n->kind)) fprintf(f, " %s", cg_redop_name(n->op));
    if (n->kind == CG_NODE_SEND) fprintf(f, "\\nto %d", n->root);
    if (n->kind == CG_NODE_RECV) fprintf(f, "\\nfrom %d", n->root);
    if (n->root >= 0 && n->kind != CG_NODE_SEND && n->kind != CG_NODE_RECV) fprintf(f, "\\nroot %d", n->root);
  }
  if (n->comm) fprintf(f, "\\ncomm %llu (rank %d of %d)", (unsigned long long)n->comm->serial, n->comm->rank,
                       n->comm->size);
  fputs(n->is_fence ? "\\nfence\"" : "\"", f);
  if (n->is_fence) fputs(", style=bold", f);
  fputs("];\n", f);
}

static void write_edge(FILE *f, uint32_t from, uint32_t to, uint32_t causes) {
  const uint32_t hazards = CG_EDGE_RAW | CG_EDGE_WAR | CG_EDGE_WAW;
  fprintf(f, "  n%u -> n%u", from, to);
  if (causes & CG_EDGE_EXPLICIT)
    fputs(" [style=solid", f);
  else if (causes & hazards)
    fputs(" [style=dashed, color=gray40", f);
  else if (causes & CG_EDGE_FENCE)
    fputs(" [style=dotted", f);
  else /* only keeps a communicator's order */
    fputs(" [style=solid, color=steelblue, arrowsize=0.6", f);
  static const struct {
    uint32_t bit;
    const char *text;
  } labels[] = {{CG_EDGE_RAW, "raw"}, {CG_EDGE_WAR, "war"}, {CG_EDGE_WAW, "waw"}, {CG_EDGE_FENCE, "fence"}};
  int labelled = 0;
  for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++) {
    if (!(causes & labels[i].bit)) continue;
    fprintf(f, "%s%s", labelled ? "," : ", label=\"", labels[i].text);
    labelled = 1;
  }
  fputs(labelled ? "\"];\n" : "];\n", f);
}

cg_status_t cg_graph_write_dot(const cg_graph_t *g, FILE *f) {
  if (!g || !f) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_graph_write_dot: NULL %s", g ? "file" : "graph");
  fputs("digraph \"", f);
  cg_dot_put_escaped(f, g->name ? g->name : "commgraph");
  fputs("\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
        "  edge [fontname=\"Helvetica\", fontsize=8];\n",
        f);
  /* Long order chains with many edges into one node (gradients into an
   * optimizer step) take Graphviz minutes to route; straight edges and a
   * bounded crossing search keep large graphs at about a second. */
  if (g->n_nodes > 64) fputs("  splines=line;\n  nslimit=1;\n  mclimit=0.1;\n", f);
  for (uint32_t i = 0; i < g->n_nodes; i++) write_node(f, i, &g->nodes[i]);
  for (uint32_t i = 0; i < g->n_nodes; i++) {
    const cg_edge_vec_t *succs = &g->nodes[i].succs;
    for (uint32_t e = 0; e < succs->len; e++) write_edge(f, i, succs->items[e].node, succs->items[e].causes);
  }
  fputs("}\n", f);
  if (fflush(f) != 0 || ferror(f)) return cg_fail(CG_ERR_IO, "cg_graph_write_dot: writing the DOT file failed");
  return CG_SUCCESS;
}
