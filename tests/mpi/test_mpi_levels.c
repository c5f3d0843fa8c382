/* Levels of sends and receives on real ranks (sched/compile/p2p_levels.c). Host plans
 * on MPI communicators are compiled, then given levels agreed over the plan's
 * communicators (what cg_compile does for device plans; it only needs the
 * control channel, which host communicators have too), then an issue order
 * over those levels (cg_plan_issue_order). Checked across ranks:
 *   (a) every send has the level of its matching receive on the peer: the k-th
 *       send from A to B matches the k-th receive on B from A, counted per
 *       communicator in its order (gathered over MPI_COMM_WORLD);
 *   (b) raised levels keep the local rules: a send or receive is above every
 *       one of its communicator and interval that reaches it, and not below
 *       the one it posts after; the members of a unit share a level;
 *   (c) with no chain from one communicator's sends and receives to
 *       another's, every group is a complete one, so an interval's units are
 *       one per level, in increasing order, and a send and its matching
 *       receive sit in groups of the same rank among the groups of their
 *       interval that carry messages between the two ranks. Not among all the
 *       groups of the interval: a rank may have levels its peer lacks (in the
 *       pipeline rank 1 has groups at levels 0, 1, 4, 5 and rank 0 at 0, 5, so
 *       the level-5 pair follows 3 groups on one side and 1 on the other); that
 *       is fine, a group only waits for lower levels.
 *   (d) the units cannot wait for each other in a cycle across ranks: a unit
 *       is posted once the units of its members' dependencies and the unit
 *       before it on its lane are done, and done once every member's match
 *       (a collective: every other rank's) was posted; the graph of these
 *       events over all ranks, gathered on rank 0, is acyclic.
 * Cases: a forwarding ring recorded receive-first, a pipeline forward and
 * back, a token passed around the ring several times, a cycle that must be
 * reported, a chain from one communicator through another and back (the
 * random-DAG hang), random programs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreement.h"
#include "mpi_test.h"
#include "lower.h"
#include "plan_internal.h"

#define NONE UINT32_MAX

static int is_p2p(const cg_step_t *s) {
  return s->kind == CG_STEP_COLLECTIVE && (s->op_kind == CG_NODE_SEND || s->op_kind == CG_NODE_RECV);
}

static int same_interval(const cg_step_t *a, const cg_step_t *b) {
  return is_p2p(a) && is_p2p(b) && a->comm_index == b->comm_index && a->group == b->group;
}

/* A plan with its local levels, its exchanged ones, the issue order over the
 * exchanged ones, and reach[a * n + b]: a path of dependencies leads from step
 * a to step b. */
typedef struct leveled {
  cg_plan_t *plan;
  uint32_t *local, *level;
  uint8_t *reach;
} leveled_t;

/* Levels agreed over the plan's communicators, as cg_compile does for a
 * device plan (where it also takes in communicators that this rank's graph
 * does not use but others' do; here every rank uses every one). */
static cg_status_t exchanged_levels(uint32_t *levels, const cg_plan_t *p) {
  cg_participants_t pt;
  cg_status_t st = cg_participants_of_plan(&pt, p, "test");
  if (st == CG_SUCCESS) st = cg_p2p_levels(levels, p, &pt, CG_SUCCESS, "test");
  cg_participants_free(&pt);
  return st;
}

static void leveled_make_opts(leveled_t *lv, cg_graph_t *g, const cg_compile_opts_t *opts) {
  ck_assert_cg_ok(cg_compile(&lv->plan, g, opts));
  cg_plan_t *p = lv->plan;
  uint32_t n = p->n_steps;
  lv->local = malloc((n + 1) * sizeof *lv->local);
  lv->level = malloc((n + 1) * sizeof *lv->level);
  lv->reach = calloc((size_t)n * n + 1, 1);
  ck_assert(lv->local && lv->level && lv->reach);
  ck_assert_cg_ok(cg_p2p_levels(lv->local, p, NULL, CG_SUCCESS, "test"));
  ck_assert_cg_ok(exchanged_levels(lv->level, p));
  free(p->issue_order); /* the compiled order used local levels (a host plan) */
  free(p->units);
  p->issue_order = NULL;
  p->units = NULL;
  ck_assert_cg_ok(cg_plan_issue_order(p, lv->level, "test"));
  for (uint32_t b = 0; b < n; b++)
    for (uint32_t e = 0; e < p->steps[b].n_deps; e++) {
      uint32_t d = p->steps[b].deps[e];
      lv->reach[(size_t)d * n + b] = 1;
      for (uint32_t a = 0; a < d; a++) lv->reach[(size_t)a * n + b] |= lv->reach[(size_t)a * n + d];
    }
}

static void leveled_make(leveled_t *lv, cg_graph_t *g) { leveled_make_opts(lv, g, NULL); }

static void leveled_free(leveled_t *lv) {
  cg_plan_destroy(lv->plan);
  free(lv->local);
  free(lv->level);
  free(lv->reach);
}

static uint32_t step_of_node(const cg_plan_t *p, uint32_t node) {
  for (uint32_t s = 0; s < p->n_steps; s++)
    if (p->steps[s].node == node) return s;
  return NONE;
}

/* (b): returns 1 if the rules hold, else prints the first violation. */
static int check_rules(const leveled_t *lv, const char *what) {
  const cg_plan_t *p = lv->plan;
  uint32_t n = p->n_steps;
  for (uint32_t s = 0; s < n; s++) {
    const cg_step_t *st = &p->steps[s];
    uint32_t after = st->post_after;
    if (is_p2p(st) && after != CG_NO_STEP && same_interval(&p->steps[after], st) && lv->level[s] < lv->level[after]) {
      fprintf(stderr, "rank %d: %s: step %u (level %u) posts after step %u (level %u)\n", cg_mpi_rank(), what, s,
              lv->level[s], after, lv->level[after]);
      return 0;
    }
    for (uint32_t t = 0; t < n && is_p2p(st); t++)
      if (same_interval(&p->steps[t], st) && lv->reach[(size_t)t * n + s] && lv->level[s] <= lv->level[t]) {
        fprintf(stderr, "rank %d: %s: step %u (level %u) is reached from step %u (level %u) of its interval\n",
                cg_mpi_rank(), what, s, lv->level[s], t, lv->level[t]);
        return 0;
      }
  }
  for (uint32_t u = 0; u < p->n_units; u++)
    for (uint32_t k = 1; k < p->units[u].n; k++) {
      uint32_t a = p->issue_order[p->units[u].first], b = p->issue_order[p->units[u].first + k];
      if (lv->level[a] != lv->level[b]) {
        fprintf(stderr, "rank %d: %s: unit %u holds levels %u and %u\n", cg_mpi_rank(), what, u, lv->level[a],
                lv->level[b]);
        return 0;
      }
    }
  return 1;
}

/* A path from a send or receive of one communicator to one of another. */
static int has_cross_chain(const leveled_t *lv) {
  const cg_plan_t *p = lv->plan;
  for (uint32_t t = 0; t < p->n_steps; t++)
    for (uint32_t s = t + 1; s < p->n_steps; s++)
      if (is_p2p(&p->steps[t]) && is_p2p(&p->steps[s]) && p->steps[t].comm_index != p->steps[s].comm_index &&
          lv->reach[(size_t)t * p->n_steps + s])
        return 1;
  return 0;
}

/* (c), locally: one unit per level of an interval, in increasing order. */
static int check_units_by_level(const leveled_t *lv, const char *what) {
  const cg_plan_t *p = lv->plan;
  for (uint32_t u = 0; u < p->n_units; u++)
    for (uint32_t v = u + 1; v < p->n_units; v++) {
      uint32_t a = p->issue_order[p->units[u].first], b = p->issue_order[p->units[v].first];
      if (same_interval(&p->steps[a], &p->steps[b]) && lv->level[b] <= lv->level[a]) {
        fprintf(stderr, "rank %d: %s: unit %u (level %u) after unit %u (level %u) of its interval\n", cg_mpi_rank(),
                what, v, lv->level[b], u, lv->level[a]);
        return 0;
      }
    }
  return 1;
}

/* ---- matching across ranks. The communicators a program may use: two on
 * MPI_COMM_WORLD, and one per half (even and odd world ranks). */

typedef struct comms {
  cg_comm_t *c[3];
  int color[3]; /* which instance: the halves differ */
  MPI_Comm split;
} comms_t;

static void comms_make(comms_t *w) {
  ck_assert_cg_ok(cg_comm_create(&w->c[0], MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&w->c[1], MPI_COMM_WORLD, NULL));
  MPI_Comm_split(MPI_COMM_WORLD, cg_mpi_rank() % 2, cg_mpi_rank(), &w->split);
  ck_assert_cg_ok(cg_comm_create(&w->c[2], w->split, NULL));
  w->color[0] = w->color[1] = 0;
  w->color[2] = cg_mpi_rank() % 2;
}

static void comms_free(comms_t *w) {
  for (int c = 0; c < 3; c++) cg_comm_destroy(w->c[c]);
  MPI_Comm_free(&w->split);
}

/* per send or receive: peer, kind (0 send, 1 receive), level, interval, node,
 * units of the interval before its unit that carry messages with that peer */
enum { PEER, KIND, LEVEL, GROUP, NODE, BEFORE, FIELDS };

static void entries(int32_t *e, const cg_plan_t *p, uint32_t ci, const uint32_t *level) {
  const cg_plan_comm_t *pc = &p->comms[ci];
  for (uint32_t k = 0; k < pc->n_steps; k++) {
    const cg_step_t *s = &p->steps[pc->steps[k]];
    if (!is_p2p(s)) continue;
    int32_t before = 0;
    for (uint32_t u = 0; u < s->unit; u++) {
      int with_peer = 0;
      for (uint32_t m = 0; m < p->units[u].n; m++) {
        const cg_step_t *t = &p->steps[p->issue_order[p->units[u].first + m]];
        with_peer |= same_interval(t, s) && t->root == s->root;
      }
      before += with_peer;
    }
    int32_t row[FIELDS] = {s->root, s->op_kind == CG_NODE_RECV, (int32_t)level[pc->steps[k]], (int32_t)s->group,
                           (int32_t)s->node, before};
    memcpy(e, row, sizeof row);
    e += FIELDS;
  }
}

/* (a), and (c) across ranks when `units` is set. Every rank sees all entries
 * (one gather for the three communicators) and reaches the same verdict; rank
 * 0 prints the first difference. */
static int check_matches(const comms_t *w, const leveled_t *lv, int units, const char *what) {
  const cg_plan_t *p = lv->plan;
  int size = cg_mpi_size(), ok = 1, hdr[9], n_mine = 0;
  int *hdrs = malloc(9 * (size_t)size * sizeof *hdrs), *counts = malloc((size_t)size * sizeof *counts),
      *displs = malloc((size_t)size * sizeof *displs);
  int32_t *mine = malloc(((size_t)p->n_steps * FIELDS + 1) * sizeof *mine);
  ck_assert(hdrs && counts && displs && mine);
  for (int c = 0; c < 3; c++) { /* header per communicator: color, rank in it, entries */
    uint32_t ci = NONE;
    int n = 0;
    for (uint32_t i = 0; i < p->n_comms; i++)
      if (p->comms[i].comm == w->c[c]) ci = i;
    for (uint32_t k = 0; ci != NONE && k < p->comms[ci].n_steps; k++) n += is_p2p(&p->steps[p->comms[ci].steps[k]]);
    if (ci != NONE) entries(mine + (size_t)n_mine * FIELDS, p, ci, lv->level);
    hdr[3 * c] = w->color[c];
    cg_comm_rank(&hdr[3 * c + 1], w->c[c]);
    hdr[3 * c + 2] = n;
    n_mine += n;
  }
  MPI_Allgather(hdr, 9, MPI_INT, hdrs, 9, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size; r++) {
    displs[r] = total;
    counts[r] = (hdrs[9 * r + 2] + hdrs[9 * r + 5] + hdrs[9 * r + 8]) * FIELDS;
    total += counts[r];
  }
  int32_t *all = malloc(((size_t)total + 1) * sizeof *all);
  ck_assert(all);
  MPI_Allgatherv(mine, n_mine * FIELDS, MPI_INT32_T, all, counts, displs, MPI_INT32_T, MPI_COMM_WORLD);
  for (int c = 0; c < 3 && ok; c++)
    for (int a = 0; a < size && ok; a++)
      for (int b = 0; b < size && ok; b++) {
        const int *ha = hdrs + 9 * a + 3 * c, *hb = hdrs + 9 * b + 3 * c;
        if (ha[0] != hb[0]) continue; /* another half */
        /* a's sends to b, in order, against b's receives from a */
        const int32_t *ea = all + displs[a], *eb = all + displs[b];
        for (int k = 0; k < c; k++) {
          ea += hdrs[9 * a + 3 * k + 2] * FIELDS;
          eb += hdrs[9 * b + 3 * k + 2] * FIELDS;
        }
        for (int i = 0, j = 0;; i++, j++) {
          while (i < ha[2] && !(ea[i * FIELDS + KIND] == 0 && ea[i * FIELDS + PEER] == hb[1])) i++;
          while (j < hb[2] && !(eb[j * FIELDS + KIND] == 1 && eb[j * FIELDS + PEER] == ha[1])) j++;
          if (i == ha[2] && j == hb[2]) break;
          const int32_t *s = i < ha[2] ? ea + i * FIELDS : NULL, *r = j < hb[2] ? eb + j * FIELDS : NULL;
          const char *bad = !s || !r                          ? "unmatched"
                            : s[LEVEL] != r[LEVEL]            ? "levels differ"
                            : s[GROUP] != r[GROUP]            ? "intervals differ"
                            : units && s[BEFORE] != r[BEFORE] ? "groups of another rank"
                                                              : NULL;
          if (!bad) continue;
          if (cg_mpi_rank() == 0)
            fprintf(stderr, "%s: communicator %d: world rank %d's send #%d (level %d, interval %d, %d groups with "
                    "the peer before) and world rank %d's receive #%d (level %d, interval %d, %d before): %s\n",
                    what, c, a, s ? s[NODE] : -1, s ? s[LEVEL] : -1, s ? s[GROUP] : -1, s ? s[BEFORE] : -1, b,
                    r ? r[NODE] : -1, r ? r[LEVEL] : -1, r ? r[GROUP] : -1, r ? r[BEFORE] : -1, bad);
          ok = 0;
          break;
        }
      }
  free(hdrs);
  free(counts);
  free(displs);
  free(mine);
  free(all);
  return ok;
}

/* ---- (d) the units cannot wait for each other in a cycle across ranks. A
 * unit is posted once the units holding its members' dependencies and the
 * unit before it on its lane (a stream, on a device) are done; it is done once
 * it is posted and, for each member, the peer's unit holding its match (every
 * other rank's, for a collective) is posted: a receive completes only once its
 * send was posted, and the other way round. Each rank describes its units;
 * rank 0 builds the graph over "posted" and "done" of every unit of every
 * rank and checks that it is acyclic (Kahn). */

/* per unit: lane predecessor, count and units of local dependencies, count
 * and (slot, kind, peer, ordinal) of matches; kind 2: a collective, ordinal
 * its interval */
static int32_t *describe_units(const comms_t *w, const cg_plan_t *p, int *len) {
  size_t cap = 4 + (size_t)p->n_units * 3 + (size_t)p->n_steps * 6, n = 0;
  for (uint32_t s = 0; s < p->n_steps; s++) cap += p->steps[s].n_deps;
  int32_t *d = malloc(cap * sizeof *d);
  uint32_t *ordinal = calloc((size_t)p->n_steps + 1, sizeof *ordinal);
  ck_assert(d && ordinal);
  /* ordinal of each send (receive) among those to (from) its peer on its communicator */
  for (uint32_t ci = 0; ci < p->n_comms; ci++)
    for (uint32_t k = 0; k < p->comms[ci].n_steps; k++) {
      uint32_t s = p->comms[ci].steps[k];
      for (uint32_t j = 0; j < k; j++) {
        const cg_step_t *a = &p->steps[p->comms[ci].steps[j]], *b = &p->steps[s];
        ordinal[s] += is_p2p(a) && is_p2p(b) && a->op_kind == b->op_kind && a->root == b->root;
      }
    }
  d[n++] = (int32_t)p->n_units;
  for (uint32_t u = 0; u < p->n_units; u++) {
    int32_t prev = -1;
    for (uint32_t v = 0; v < u; v++)
      if (p->units[v].lane == p->units[u].lane) prev = (int32_t)v;
    d[n++] = prev;
    size_t at = n++;
    d[at] = 0;
    for (uint32_t k = 0; k < p->units[u].n; k++) {
      const cg_step_t *s = &p->steps[p->issue_order[p->units[u].first + k]];
      for (uint32_t e = 0; e < s->n_deps; e++) {
        d[n++] = (int32_t)p->steps[s->deps[e]].unit;
        d[at]++;
      }
    }
    at = n++;
    d[at] = 0;
    for (uint32_t k = 0; k < p->units[u].n; k++) {
      uint32_t index = p->issue_order[p->units[u].first + k];
      const cg_step_t *s = &p->steps[index];
      int slot = -1;
      for (int c = 0; c < 3; c++)
        if (s->kind == CG_STEP_COLLECTIVE && s->comm == w->c[c]) slot = c;
      if (slot < 0) continue;
      int32_t m[4] = {slot, is_p2p(s) ? s->op_kind == CG_NODE_RECV : 2, is_p2p(s) ? s->root : -1,
                      is_p2p(s) ? (int32_t)ordinal[index] : (int32_t)s->group};
      memcpy(d + n, m, sizeof m);
      n += 4;
      d[at]++;
    }
  }
  free(ordinal);
  *len = (int)n;
  return d;
}

/* Rank 0 checks; every rank gets the verdict. */
static int check_no_wait_cycle(const comms_t *w, const leveled_t *lv, const char *what) {
  int size = cg_mpi_size(), me = cg_mpi_rank(), len, hdr[6], ok = 1;
  int32_t *mine = describe_units(w, lv->plan, &len);
  for (int c = 0; c < 3; c++) {
    hdr[2 * c] = w->color[c];
    cg_comm_rank(&hdr[2 * c + 1], w->c[c]);
  }
  int *hdrs = malloc(6 * (size_t)size * sizeof *hdrs), *lens = malloc((size_t)size * sizeof *lens),
      *displs = malloc((size_t)size * sizeof *displs);
  ck_assert(hdrs && lens && displs);
  MPI_Allgather(hdr, 6, MPI_INT, hdrs, 6, MPI_INT, MPI_COMM_WORLD);
  MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; me == 0 && r < size; r++) {
    displs[r] = total;
    total += lens[r];
  }
  int32_t *all = malloc(((size_t)total + 1) * sizeof *all);
  ck_assert(all);
  MPI_Gatherv(mine, len, MPI_INT32_T, all, lens, displs, MPI_INT32_T, 0, MPI_COMM_WORLD);
  if (me == 0) {
    /* unit u of rank r: node 2 * (base[r] + u) is its posting, + 1 its completion */
    int *base = malloc(((size_t)size + 1) * sizeof *base), n_nodes = 0;
    const int32_t **unit_at = NULL; /* description of each unit */
    ck_assert(base);
    for (int r = 0; r < size; r++) {
      base[r] = n_nodes;
      n_nodes += all[displs[r]];
    }
    base[size] = n_nodes;
    unit_at = malloc(((size_t)n_nodes + 1) * sizeof *unit_at);
    ck_assert(unit_at);
    for (int r = 0; r < size; r++) {
      const int32_t *d = all + displs[r] + 1;
      for (int u = 0; u < all[displs[r]]; u++) {
        unit_at[base[r] + u] = d;
        d += 2 + d[1];
        d += 1 + 4 * d[0];
      }
    }
    /* edges: from, to (from must happen before to) */
    size_t cap = 16, n_edges = 0;
    int *edges = malloc(cap * 2 * sizeof *edges);
    ck_assert(edges);
#define EDGE(a, b)                                                   \
  do {                                                               \
    if (n_edges == cap) edges = realloc(edges, (cap *= 2) * 2 * sizeof *edges); \
    ck_assert(edges);                                                \
    edges[2 * n_edges] = (a);                                        \
    edges[2 * n_edges++ + 1] = (b);                                  \
  } while (0)
    for (int r = 0; r < size; r++)
      for (int u = base[r]; u < base[r + 1]; u++) {
        const int32_t *d = unit_at[u];
        if (d[0] >= 0) EDGE(2 * (base[r] + d[0]) + 1, 2 * u);
        for (int e = 0; e < d[1]; e++) EDGE(2 * (base[r] + d[2 + e]) + 1, 2 * u);
        EDGE(2 * u, 2 * u + 1);
        const int32_t *m = d + 2 + d[1];
        for (int k = 0; k < m[0]; k++) {
          const int32_t *x = m + 1 + 4 * k;
          int slot = x[0], kind = x[1], found = 0;
          for (int q = 0; q < size; q++) {
            if (hdrs[6 * q + 2 * slot] != hdrs[6 * r + 2 * slot]) continue; /* another half */
            if (kind < 2 && hdrs[6 * q + 2 * slot + 1] != x[2]) continue;
            if (kind == 2 && q == r) continue;
            for (int v = base[q]; v < base[q + 1] && !found; v++) {
              const int32_t *mv = unit_at[v] + 2 + unit_at[v][1];
              for (int j = 0; j < mv[0]; j++) {
                const int32_t *y = mv + 1 + 4 * j;
                int hit = y[0] == slot && (kind == 2 ? y[1] == 2 && y[3] == x[3]
                                                     : y[1] == !kind && y[2] == hdrs[6 * r + 2 * slot + 1] &&
                                                           y[3] == x[3]);
                if (hit) {
                  EDGE(2 * v, 2 * u + 1);
                  found = kind < 2;
                }
              }
            }
          }
        }
      }
#undef EDGE
    /* Kahn: what is left over lies on a cycle or waits for one */
    int *indeg = calloc(2 * (size_t)n_nodes + 1, sizeof *indeg), *queue = malloc((2 * (size_t)n_nodes + 1) * sizeof *queue);
    ck_assert(indeg && queue);
    for (size_t e = 0; e < n_edges; e++) indeg[edges[2 * e + 1]]++;
    int head = 0, tail = 0;
    for (int x = 0; x < 2 * n_nodes; x++)
      if (!indeg[x]) queue[tail++] = x;
    while (head < tail) {
      int x = queue[head++];
      for (size_t e = 0; e < n_edges; e++)
        if (edges[2 * e] == x && --indeg[edges[2 * e + 1]] == 0) queue[tail++] = edges[2 * e + 1];
    }
    if (tail < 2 * n_nodes) {
      ok = 0;
      fprintf(stderr, "%s: %d of %d unit events wait in a cycle across ranks (or for one):", what, 2 * n_nodes - tail,
              2 * n_nodes);
      for (int x = 0, shown = 0; x < 2 * n_nodes && shown < 12; x++)
        if (indeg[x]) {
          int r = 0;
          while (base[r + 1] <= x / 2) r++;
          fprintf(stderr, " rank %d unit %d %s;", r, x / 2 - base[r], x % 2 ? "done" : "posted");
          shown++;
        }
      fprintf(stderr, "\n");
    }
    free(indeg);
    free(queue);
    free(edges);
    free(unit_at);
    free(base);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  free(mine);
  free(hdrs);
  free(lens);
  free(displs);
  free(all);
  return ok;
}

/* All four checks, (c) only where no rank has a chain between
 * communicators; the verdict is the same on every rank. Returns whether (c)
 * was checked; *raised (if not NULL): whether the exchange changed a level on
 * some rank. */
static int check_all(const comms_t *w, const leveled_t *lv, const char *what, int *raised) {
  int changed = 0, chain = has_cross_chain(lv), all[4];
  for (uint32_t s = 0; s < lv->plan->n_steps; s++) changed |= lv->level[s] != lv->local[s];
  /* without a chain here every group of this rank is a complete one */
  int mine[4] = {!chain, check_rules(lv, what), chain || check_units_by_level(lv, what), !changed};
  MPI_Allreduce(mine, all, 4, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  int acyclic = check_no_wait_cycle(w, lv, what); /* every rank takes part */
  int compared = all[0], ok = all[1] && all[2] && check_matches(w, lv, compared, what) && acyclic;
  ck_assert_msg(ok, "%s: failed (seed %llu; stderr says where)", what, (unsigned long long)cg_test_seed());
  if (raised) *raised = !all[3];
  return compared;
}

static cg_access_t host_access(const cg_range_t *reads, size_t n_reads, const cg_range_t *writes, size_t n_writes) {
  cg_access_t a = CG_ACCESS_INIT;
  a.everything = 0;
  a.reads = reads;
  a.n_reads = n_reads;
  a.writes = writes;
  a.n_writes = n_writes;
  return a;
}

static char *units_text(const cg_plan_t *p) {
  static char text[1024];
  size_t len = 0;
  text[0] = 0;
  for (uint32_t u = 0; u < p->n_units; u++)
    for (uint32_t k = 0; k < p->units[u].n; k++)
      len += (size_t)snprintf(text + len, sizeof text - len, "%s#%u%s", k ? " " : (u ? " {" : "{"),
                              p->steps[p->issue_order[p->units[u].first + k]].node, k + 1 == p->units[u].n ? "}" : "");
  return text;
}

enum { N = 4 };

/* ---- by hand */

/* Every rank: #0 send to the right, #1 receive from the left, then the second
 * exchange receive first: #2 receive from the left, #3 send to the right what
 * #1 received. Locally only #3 is level 1, so every rank's first group would
 * hold #2, which waits for the left neighbour's #3, in that rank's second
 * group, which waits for its first: every rank waits, a deadlock on a device.
 * The exchange raises #2 to its match's level: {#0 #1} {#2 #3}. */
START_TEST(levels__forwarding_ring_recorded_receive_first) {
  static int32_t buf[3][N];
  comms_t w;
  comms_make(&w);
  int rank = cg_mpi_rank(), size = cg_mpi_size(), right = (rank + 1) % size, left = (rank + size - 1) % size;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_send(NULL, g, w.c[0], buf[0], N, CG_INT32, right));
  ck_assert_cg_ok(cg_recv(NULL, g, w.c[0], buf[1], N, CG_INT32, left));
  ck_assert_cg_ok(cg_recv(NULL, g, w.c[0], buf[2], N, CG_INT32, left));
  ck_assert_cg_ok(cg_send(NULL, g, w.c[0], buf[1], N, CG_INT32, right));
  leveled_t lv;
  leveled_make(&lv, g);
  static const uint32_t local[4] = {0, 0, 0, 1}, raised[4] = {0, 0, 1, 1};
  int ok = 1;
  for (uint32_t node = 0; node < 4; node++) {
    uint32_t s = step_of_node(lv.plan, node);
    ok &= s != NONE && lv.local[s] == local[node] && lv.level[s] == raised[node];
  }
  ok = ok && strcmp(units_text(lv.plan), "{#0 #1} {#2 #3}") == 0;
  if (!ok) fprintf(stderr, "rank %d: forwarding ring: units %s\n", rank, units_text(lv.plan));
  ck_assert_all_ranks(ok, "forwarding ring: levels and units");
  ck_assert(check_all(&w, &lv, "forwarding ring", NULL));
  leveled_free(&lv);
  cg_graph_destroy(g);
  comms_free(&w);
}
END_TEST

/* A pipeline: rank r receives activations from r - 1, computes (a host
 * function), sends to r + 1; then the gradient comes back the other way. All
 * in one interval; message i along the chain is level i on both sides, though
 * locally every first receive is level 0 (rank r's receive of the gradient
 * would share a group with its receive of activations, which the peer sends
 * only after everything downstream has run). */
START_TEST(levels__pipeline_forward_and_back) {
  static int32_t act[N], out[N], grad_in[N], grad_out[N];
  comms_t w;
  comms_make(&w);
  int r = cg_mpi_rank(), n = cg_mpi_size();
  cg_range_t a = {act, sizeof act}, o = {out, sizeof out}, gi_o[] = {{grad_in, sizeof grad_in}, {out, sizeof out}},
             go = {grad_out, sizeof grad_out};
  cg_access_t forward = host_access(&a, 1, &o, 1), backward = host_access(gi_o, 2, &go, 1);
  cg_node_t recv_act = {0}, send_out = {0}, recv_grad = {0}, send_grad = {0};
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  if (r > 0) ck_assert_cg_ok(cg_recv(&recv_act, g, w.c[0], act, N, CG_INT32, r - 1));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &forward));
  if (r < n - 1) ck_assert_cg_ok(cg_send(&send_out, g, w.c[0], out, N, CG_INT32, r + 1));
  if (r < n - 1) ck_assert_cg_ok(cg_recv(&recv_grad, g, w.c[0], grad_in, N, CG_INT32, r + 1));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &backward));
  if (r > 0) ck_assert_cg_ok(cg_send(&send_grad, g, w.c[0], grad_out, N, CG_INT32, r - 1));
  leveled_t lv;
  leveled_make(&lv, g);
  struct {
    int present;
    cg_node_t node;
    int level;
  } want[] = {{r > 0, recv_act, r - 1}, {r < n - 1, send_out, r}, {r < n - 1, recv_grad, 2 * n - 3 - r},
              {r > 0, send_grad, 2 * n - 2 - r}};
  int ok = 1;
  for (int k = 0; k < 4; k++) {
    if (!want[k].present) continue;
    uint32_t s = step_of_node(lv.plan, want[k].node.index);
    if (s == NONE || lv.level[s] != (uint32_t)want[k].level) {
      fprintf(stderr, "rank %d: pipeline: node #%u has level %u, expected %d\n", r, want[k].node.index,
              s == NONE ? NONE : lv.level[s], want[k].level);
      ok = 0;
    }
  }
  ck_assert_all_ranks(ok, "pipeline: levels");
  ck_assert(check_all(&w, &lv, "pipeline", NULL));
  leveled_free(&lv);
  cg_graph_destroy(g);
  comms_free(&w);
}
END_TEST

/* A token goes around the ring three times: message j, from rank j % n to
 * the next, forwards message j - 1. Message j is level j on both sides, so the
 * ranks must keep raising until the chain has gone all the way round: about
 * one message per round of the exchange. */
START_TEST(levels__token_around_the_ring) {
  enum { LAPS = 3, MAX = 3 * 64 };
  static int32_t tok[MAX + 1][N];
  comms_t w;
  comms_make(&w);
  int r = cg_mpi_rank(), n = cg_mpi_size(), m = LAPS * n;
  ck_assert_int_le(m, MAX);
  cg_node_t node[MAX];
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int j = 0; j < m; j++) {
    if ((j + 1) % n == r) ck_assert_cg_ok(cg_recv(&node[j], g, w.c[0], tok[j + 1], N, CG_INT32, (r + n - 1) % n));
    if (j % n == r) ck_assert_cg_ok(cg_send(&node[j], g, w.c[0], tok[j], N, CG_INT32, (r + 1) % n));
  }
  leveled_t lv;
  leveled_make(&lv, g);
  int ok = 1;
  for (int j = 0; j < m; j++) {
    if ((j + 1) % n != r && j % n != r) continue;
    uint32_t s = step_of_node(lv.plan, node[j].index);
    if (s == NONE || lv.level[s] != (uint32_t)j) {
      fprintf(stderr, "rank %d: token: message %d (node #%u) has level %u (locally %u), expected %d\n", r, j,
              node[j].index, s == NONE ? NONE : lv.level[s], s == NONE ? NONE : lv.local[s], j);
      ok = 0;
    }
  }
  ck_assert_all_ranks(ok, "token around the ring: levels");
  ck_assert(check_all(&w, &lv, "token around the ring", NULL));
  leveled_free(&lv);
  cg_graph_destroy(g);
  comms_free(&w);
}
END_TEST

/* Ranks in pairs (A even, B odd). B receives from itself into w, sends to
 * itself, receives from A into w again (so after the first: level 1) and
 * sends to A. A sends to B (the match of B's level-1 receive: raised to 1),
 * then receives from B (level 0). A's lower level goes first, though recorded
 * second: a group opened by A's lowest ready step, its send, would wait for
 * B's second group, which waits for B's first, whose send to A waits for A's
 * second group: a deadlock on a device. */
START_TEST(levels__a_later_lower_level_goes_first) {
  static int32_t w[N], v[N], x[N], y[N], self[N];
  comms_t wc;
  comms_make(&wc);
  int rank = cg_mpi_rank(), peer = rank ^ 1;
  if (peer >= cg_mpi_size()) peer = rank; /* an odd rank out exchanges with itself */
  cg_comm_t *c = wc.c[0];
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  const char *want;
  if (rank % 2 == 0 && peer != rank) {
    ck_assert_cg_ok(cg_send(NULL, g, c, x, N, CG_INT32, peer));
    ck_assert_cg_ok(cg_recv(NULL, g, c, y, N, CG_INT32, peer));
    want = "{#1} {#0}";
  } else {
    ck_assert_cg_ok(cg_recv(NULL, g, c, w, N, CG_INT32, rank));
    ck_assert_cg_ok(cg_send(NULL, g, c, self, N, CG_INT32, rank));
    ck_assert_cg_ok(cg_recv(NULL, g, c, w, N, CG_INT32, peer)); /* after #0: write after write */
    ck_assert_cg_ok(cg_send(NULL, g, c, v, N, CG_INT32, peer));
    want = "{#0 #1 #3} {#2}";
  }
  leveled_t lv;
  leveled_make(&lv, g);
  int ok = peer == rank || strcmp(units_text(lv.plan), want) == 0;
  if (!ok) fprintf(stderr, "rank %d: units %s, expected %s\n", rank, units_text(lv.plan), want);
  ck_assert_all_ranks(ok, "a later, lower level: units");
  ck_assert(check_all(&wc, &lv, "a later, lower level", NULL));
  leveled_free(&lv);
  cg_graph_destroy(g);
  comms_free(&wc);
}
END_TEST

/* A ring in which every rank receives into the buffer it sends from, send
 * recorded first: the receive waits for the send (write after read), and the
 * send completes only once the right neighbour has posted its receive, which
 * waits for that rank's own send, and so on round the ring: a cycle that hangs
 * on any transport that does not buffer the message. Levels would grow
 * without end; every rank reports it. */
START_TEST(levels__a_cycle_across_ranks_is_reported) {
  static int32_t buf[N];
  comms_t w;
  comms_make(&w);
  int rank = cg_mpi_rank(), size = cg_mpi_size();
  cg_graph_t *g;
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_send(NULL, g, w.c[0], buf, N, CG_INT32, (rank + 1) % size));
  ck_assert_cg_ok(cg_recv(NULL, g, w.c[0], buf, N, CG_INT32, (rank + size - 1) % size));
  ck_assert_cg_ok(cg_compile(&plan, g, NULL)); /* a host plan: no exchange */
  uint32_t levels[2];
  cg_status_t st = exchanged_levels(levels, plan);
  int ok = st == CG_ERR_MISMATCH && strstr(cg_error_last(), "cycle") != NULL;
  if (!ok) fprintf(stderr, "rank %d: %s: %s\n", rank, cg_status_string(st), st ? cg_error_last() : "");
  ck_assert_all_ranks(ok, "a cycle across ranks");
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  comms_free(&w);
}
END_TEST

/* Two communicators A and B over the same ranks, in pairs (a rank without a
 * pair exchanges with itself). Every rank records:
 *   #0 A allgather; #1 B scatter; #2 B allreduce;
 *   #3 A receive from itself, #4 A send to itself;
 *   #5 B send to the peer, #6 B receive from the peer;
 *   #7 a host function;
 *   #8 A receive from the peer; #9 A send to the peer, after #6;
 *   #10 B receive from the peer; #11 B send to the peer, after #8;
 *   #12 A broadcast; #13 B allreduce.
 * Levels that follow chains within a communicator only put all of A's and
 * all of B's sends and receives at level 0: my A group {#3 #4 #8} waits for
 * the peer's #9, which waits for its B group {#5 #6 #10 #11}, whose #11 waits
 * for its #8, whose group waits for my #9, which waits for my B group, whose
 * #11 waits for my #8: a deadlock on a device. #11 must be a level above #5
 * (its chain reaches the peer's #9, which waits for the peer's #6, the match
 * of my #5), and with it #10: {#5 #6} {#10 #11}, A in one group. */
START_TEST(levels__a_chain_through_another_communicator) {
  static int32_t ag_in[N], ag_out[64 * N], sc[64 * N], sc_out[N], ar[N], ar_out[N], self_in[N], self_out[N];
  static int32_t b_out[N], b_in[N], host[N], a_in[N], a_out[N], b_in2[N], b_out2[N], bc[N], ar2[N], ar2_out[N];
  comms_t w;
  comms_make(&w);
  int rank = cg_mpi_rank(), size = cg_mpi_size(), peer = rank ^ 1;
  ck_assert_int_le(size, 64);
  if (peer >= size) peer = rank;
  cg_comm_t *a = w.c[0], *b = w.c[1];
  cg_range_t hr = {host, sizeof host};
  cg_access_t ha = host_access(&hr, 1, &hr, 1);
  cg_node_t n6, n8, n9, n11;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  ck_assert_cg_ok(cg_allgather(NULL, g, a, ag_in, ag_out, N, CG_INT32));
  ck_assert_cg_ok(cg_scatter(NULL, g, b, sc, sc_out, N, CG_INT32, 0));
  ck_assert_cg_ok(cg_allreduce(NULL, g, b, ar, ar_out, N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_recv(NULL, g, a, self_in, N, CG_INT32, rank));
  ck_assert_cg_ok(cg_send(NULL, g, a, self_out, N, CG_INT32, rank));
  ck_assert_cg_ok(cg_send(NULL, g, b, b_out, N, CG_INT32, peer));
  ck_assert_cg_ok(cg_recv(&n6, g, b, b_in, N, CG_INT32, peer));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &ha));
  ck_assert_cg_ok(cg_recv(&n8, g, a, a_in, N, CG_INT32, peer));
  ck_assert_cg_ok(cg_send(&n9, g, a, a_out, N, CG_INT32, peer));
  ck_assert_cg_ok(cg_depend(g, n6, n9));
  ck_assert_cg_ok(cg_recv(NULL, g, b, b_in2, N, CG_INT32, peer));
  ck_assert_cg_ok(cg_send(&n11, g, b, b_out2, N, CG_INT32, peer));
  ck_assert_cg_ok(cg_depend(g, n8, n11));
  ck_assert_cg_ok(cg_broadcast(NULL, g, a, bc, bc, N, CG_INT32, 0));
  ck_assert_cg_ok(cg_allreduce(NULL, g, b, ar2, ar2_out, N, CG_INT32, CG_SUM));
  leveled_t lv;
  leveled_make(&lv, g);
  const char *text = units_text(lv.plan);
  if (rank == 0) printf("a chain through another communicator: rank 0's units %s\n", text);
  int ok = check_no_wait_cycle(&w, &lv, "a chain through another communicator");
  ck_assert_all_ranks(ok, "a chain through another communicator: no cycle of units across ranks");
  /* and no more groups than that takes: A's in one, B's in two */
  static const uint32_t want[14] = {[3] = 0, [4] = 0, [5] = 0, [6] = 0, [8] = 0, [9] = 0, [10] = 1, [11] = 1};
  ok = 1;
  for (uint32_t node = 3; node < 12 && peer != rank; node++) {
    uint32_t s = step_of_node(lv.plan, node);
    if (node == 7) continue;
    if (s == NONE || lv.level[s] != want[node]) {
      fprintf(stderr, "rank %d: chain: node #%u has level %u, expected %u\n", rank, node, s == NONE ? NONE : lv.level[s],
              want[node]);
      ok = 0;
    }
  }
  ck_assert_all_ranks(ok, "a chain through another communicator: levels");
  ck_assert(!check_all(&w, &lv, "a chain through another communicator", NULL)); /* a chain: (c) not compared */
  leveled_free(&lv);
  cg_graph_destroy(g);
  comms_free(&w);
}
END_TEST

/* A token that goes back and forth between pairs of ranks (even, odd),
 * alternating communicators: message k goes on A from the even rank to the
 * odd one for even k, on B back for odd k, and each forwards the one before.
 * Message k must be above message k - 2 on its communicator, and only the
 * other communicator's exchange tells a rank so (the chain goes through the
 * peer), so each message takes about a pass over the communicators: a short token
 * settles; a long one does not within the passes cg_compile makes, and every
 * rank says so alike, naming nodes, rather than leave levels that differ. */
static cg_status_t zigzag(comms_t *w, int hops, uint32_t *levels_out, uint32_t *nodes_out) {
  static int32_t buf[128][N];
  ck_assert_int_le(hops, 128);
  int rank = cg_mpi_rank(), peer = rank ^ 1, even = rank % 2 == 0;
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  cg_node_t nodes[128];
  if (peer >= cg_mpi_size()) /* a rank without a pair still takes part in both communicators' exchanges */
    for (int c = 0; c < 2; c++) {
      ck_assert_cg_ok(cg_recv(NULL, g, w->c[c], buf[2 * c], N, CG_INT32, rank));
      ck_assert_cg_ok(cg_send(NULL, g, w->c[c], buf[2 * c + 1], N, CG_INT32, rank));
    }
  for (int k = 0; k < hops && peer < cg_mpi_size(); k++) {
    cg_comm_t *c = w->c[k % 2];
    int sending = (k % 2 == 0) == even;
    if (sending)
      ck_assert_cg_ok(cg_send(&nodes[k], g, c, buf[k > 0 ? k - 1 : 127], N, CG_INT32, peer));
    else
      ck_assert_cg_ok(cg_recv(&nodes[k], g, c, buf[k], N, CG_INT32, peer));
  }
  cg_plan_t *plan;
  ck_assert_cg_ok(cg_compile(&plan, g, NULL)); /* a host plan: no exchange */
  uint32_t *levels = calloc(plan->n_steps + 1, sizeof *levels);
  ck_assert(levels);
  cg_status_t st = exchanged_levels(levels, plan);
  for (int k = 0; st == CG_SUCCESS && k < hops && peer < cg_mpi_size(); k++) {
    uint32_t s = step_of_node(plan, nodes[k].index);
    levels_out[k] = s == NONE ? NONE : levels[s];
    nodes_out[k] = nodes[k].index;
  }
  free(levels);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  return st;
}

START_TEST(levels__a_token_between_two_communicators) {
  comms_t w;
  comms_make(&w);
  int rank = cg_mpi_rank(), paired = (rank ^ 1) < cg_mpi_size();
  uint32_t levels[128], nodes[128];
  enum { SHORT = 8, LONG = 80 };
  cg_status_t st = zigzag(&w, SHORT, levels, nodes);
  int ok = st == CG_SUCCESS;
  for (int k = 0; ok && paired && k < SHORT; k++)
    if (k >= 2 && levels[k] <= levels[k - 2]) {
      fprintf(stderr, "rank %d: token between communicators: message %d (node #%u) has level %u, message %d %u\n",
              rank, k, nodes[k], levels[k], k - 2, levels[k - 2]);
      ok = 0;
    }
  if (st != CG_SUCCESS) fprintf(stderr, "rank %d: %s: %s\n", rank, cg_status_string(st), cg_error_last());
  ck_assert_all_ranks(ok, "a short token between two communicators: levels");
  st = zigzag(&w, LONG, levels, nodes);
  ok = st == CG_ERR_UNSUPPORTED && strstr(cg_error_last(), "did not settle") && strstr(cg_error_last(), "node #");
  if (!ok) fprintf(stderr, "rank %d: long token: %s: %s\n", rank, cg_status_string(st), st ? cg_error_last() : "");
  if (rank == 0 && ok) printf("a long token between two communicators: %s\n", cg_error_last());
  ck_assert_all_ranks(ok, "a long token between two communicators: refused alike on every rank");
  comms_free(&w);
}
END_TEST

/* ---- random programs, the same on every rank (drawn from the shared seed):
 * ring exchanges with random shifts recorded send first or receive first,
 * some forwarding what an earlier one received, host functions, a few
 * collectives, explicit edges, on one or two communicators. Some host
 * functions and edges are recorded on world ranks of one parity only, so
 * ranks differ and their local levels too. A send never shares a buffer with
 * its own ring's receive, and every dependency points back in record order,
 * while matching operations sit at the same record position on both ranks: no
 * program waits in a cycle (none would deadlock on the host), so the exchange
 * has a fixed point. */

enum { N_PROGRAMS = 200, MAX_SPECS = 24, SLOTS = 12 };
enum { RING, HOST, ALLREDUCE, BARRIER };

typedef struct spec {
  int kind, comm, shift, recv_first, send_slot, recv_slot, fence, depend_on;
  int only; /* host functions and edges: -1, or only on world ranks of this parity */
} spec_t;

typedef struct program {
  int comm_of[2]; /* indices into comms_t */
  spec_t specs[MAX_SPECS];
  int n_specs;
} program_t;

static void generate(program_t *p) {
  int n_comms = 1 + (int)cg_test_below(2);
  p->comm_of[0] = (int)cg_test_below(3);
  p->comm_of[1] = (p->comm_of[0] + 1 + (int)cg_test_below(2)) % 3;
  p->n_specs = 4 + (int)cg_test_below(MAX_SPECS - 3);
  int received[MAX_SPECS], n_received = 0;
  for (int i = 0; i < p->n_specs; i++) {
    spec_t s = {0};
    int draw = (int)cg_test_below(100);
    s.kind = draw < 65 ? RING : draw < 85 ? HOST : draw < 95 ? ALLREDUCE : BARRIER;
    s.comm = (int)cg_test_below((uint64_t)n_comms);
    s.shift = (int)cg_test_below((uint64_t)cg_mpi_size()); /* the same draw on every rank; reduced per communicator */
    s.recv_first = (int)cg_test_below(2);
    s.recv_slot = (int)cg_test_below(SLOTS);
    s.send_slot = n_received && cg_test_below(2) ? received[cg_test_below((uint64_t)n_received)]
                                                 : (int)cg_test_below(SLOTS);
    while (s.send_slot == s.recv_slot) s.send_slot = (int)cg_test_below(SLOTS);
    s.fence = cg_test_below(8) == 0;
    s.depend_on = i > 0 && cg_test_below(4) == 0 ? (int)cg_test_below((uint64_t)i) : -1;
    s.only = cg_test_below(3) == 0 ? (int)cg_test_below(2) : -1;
    if (s.kind == RING) received[n_received++] = s.recv_slot;
    p->specs[i] = s;
  }
}

static void record(cg_graph_t *g, const program_t *p, const comms_t *w, int32_t (*slot)[N]) {
  cg_node_t first[MAX_SPECS], last[MAX_SPECS];
  int present[MAX_SPECS];
  for (int i = 0; i < p->n_specs; i++) {
    const spec_t *s = &p->specs[i];
    int here = s->only < 0 || cg_mpi_rank() % 2 == s->only;
    present[i] = s->kind != HOST || here;
    cg_comm_t *c = w->c[p->comm_of[s->comm]];
    int rank = 0, size = 1;
    cg_comm_rank(&rank, c);
    cg_comm_size(&size, c);
    int shift = s->shift % size;
    cg_range_t reads = {slot[s->send_slot], sizeof slot[0]}, writes = {slot[s->recv_slot], sizeof slot[0]};
    cg_access_t access = host_access(&reads, 1, &writes, 1);
    switch (s->kind) {
      case RING:
        for (int k = 0; k < 2; k++) {
          cg_node_t *out = k == 0 ? &first[i] : &last[i];
          if ((k == 0) == (s->recv_first != 0))
            ck_assert_cg_ok(cg_recv(out, g, c, slot[s->recv_slot], N, CG_INT32, (rank + size - shift) % size));
          else
            ck_assert_cg_ok(cg_send(out, g, c, slot[s->send_slot], N, CG_INT32, (rank + shift) % size));
        }
        break;
      case HOST:
        if (here) ck_assert_cg_ok(cg_host_func(&first[i], g, cg_test_noop, NULL, s->fence ? NULL : &access));
        break;
      case ALLREDUCE:
        ck_assert_cg_ok(cg_allreduce(&first[i], g, c, slot[s->send_slot], slot[s->recv_slot], N, CG_INT32, CG_SUM));
        break;
      default: ck_assert_cg_ok(cg_barrier(&first[i], g, c)); break;
    }
    if (s->kind != RING) last[i] = first[i];
    if (s->depend_on >= 0 && here && present[i] && present[s->depend_on])
      ck_assert_cg_ok(cg_depend(g, last[s->depend_on], first[i]));
  }
}

/* What a chain waits for is kept per communicator, not per interval: a plan
 * of many collectives (fusion off) with sends and receives among them, on
 * their own communicator and on the collectives' one, settles within the
 * test's time limit (kept per interval, 1000 collectives took minutes). */
START_TEST(levels__a_thousand_collectives_with_messages_settle) {
  enum { OPS = 1200, LEN = 4 };
  static int32_t buf[OPS + 1][LEN];
  comms_t w;
  comms_make(&w);
  int r = cg_mpi_rank(), n = cg_mpi_size();
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  for (int i = 0; i < OPS; i++) {
    ck_assert_cg_ok(cg_allreduce(NULL, g, w.c[0], buf[i], buf[i], LEN, CG_INT32, CG_SUM));
    if (i % 40 != 0) continue;
    cg_comm_t *c = w.c[i % 120 == 0 ? 0 : 1]; /* now and then among the collectives */
    ck_assert_cg_ok(cg_send(NULL, g, c, buf[i], LEN, CG_INT32, (r + 1) % n));
    ck_assert_cg_ok(cg_recv(NULL, g, c, buf[i + 1], LEN, CG_INT32, (r + n - 1) % n));
  }
  cg_compile_opts_t opts = CG_COMPILE_OPTS_INIT;
  opts.fusion = 0;
  leveled_t lv;
  leveled_make_opts(&lv, g, &opts);
  ck_assert_uint_ge(lv.plan->n_steps, OPS);
  check_all(&w, &lv, "a thousand collectives", NULL);
  leveled_free(&lv);
  cg_graph_destroy(g);
  comms_free(&w);
}
END_TEST

START_TEST(levels__random_programs_match_across_ranks) {
  static int32_t slot[SLOTS][N];
  comms_t w;
  comms_make(&w);
  int units_checked = 0, raised_programs = 0;
  for (int k = 0; k < N_PROGRAMS; k++) {
    cg_test_reseed(7000 + (uint64_t)k);
    program_t p;
    generate(&p);
    cg_graph_t *g;
    ck_assert_cg_ok(cg_graph_create(&g, NULL));
    record(g, &p, &w, slot);
    leveled_t lv;
    leveled_make(&lv, g);
    int raised = 0;
    char what[64];
    snprintf(what, sizeof what, "random program %d", k);
    units_checked += check_all(&w, &lv, what, &raised);
    raised_programs += raised;
    leveled_free(&lv);
    cg_graph_destroy(g);
  }
  if (cg_mpi_rank() == 0)
    printf("%d random programs: levels raised by the exchange in %d, groups compared in %d\n", N_PROGRAMS,
           raised_programs, units_checked);
  /* the generator must produce what the checks are about */
  ck_assert_msg(raised_programs > N_PROGRAMS / 4 && units_checked > N_PROGRAMS / 4, "raised in %d, units in %d",
                raised_programs, units_checked);
  comms_free(&w);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_levels");
  TCase *hand = cg_mpi_tcase("by_hand");
  tcase_add_test(hand, levels__forwarding_ring_recorded_receive_first);
  tcase_add_test(hand, levels__pipeline_forward_and_back);
  tcase_add_test(hand, levels__token_around_the_ring);
  tcase_add_test(hand, levels__a_later_lower_level_goes_first);
  tcase_add_test(hand, levels__a_cycle_across_ranks_is_reported);
  tcase_add_test(hand, levels__a_chain_through_another_communicator);
  tcase_add_test(hand, levels__a_token_between_two_communicators);
  tcase_add_test(hand, levels__a_thousand_collectives_with_messages_settle);
  suite_add_tcase(s, hand);
  /* 200 programs, each settled in 17 passes over three communicators: on four
   * ranks sharing two cores that is about 35 s alone, twice that beside other
   * suites */
  TCase *random = cg_mpi_tcase_limit("random", 300);
  tcase_add_test(random, levels__random_programs_match_across_ranks);
  suite_add_tcase(s, random);
  return cg_mpi_test_main(s);
}
