/* The checks of test_mpi_levels (sched/compile/p2p_levels.c), on real ranks.
 * Host plans on MPI communicators are compiled, then given levels agreed over
 * the plan's communicators (what cg_compile does for device plans; it only
 * needs the control channel, which host communicators have too), then an
 * issue order over those levels (cg_plan_issue_order). check_all checks
 * across ranks:
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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "levels_check.h"

static int is_p2p(const cg_step_t *s) {
  return s->kind == CG_STEP_COLLECTIVE && (s->op_kind == CG_NODE_SEND || s->op_kind == CG_NODE_RECV);
}

static int same_interval(const cg_step_t *a, const cg_step_t *b) {
  return is_p2p(a) && is_p2p(b) && a->comm_index == b->comm_index && a->group == b->group;
}


/* Levels agreed over the plan's communicators, as cg_compile does for a
 * device plan (where it also takes in communicators that this rank's graph
 * does not use but others' do; here every rank uses every one). */
cg_status_t exchanged_levels(uint32_t *levels, const cg_plan_t *p) {
  cg_participants_t pt;
  cg_status_t st = cg_participants_of_plan(&pt, p, "test");
  if (st == CG_SUCCESS) st = cg_p2p_levels(levels, p, &pt, CG_SUCCESS, "test");
  cg_participants_free(&pt);
  return st;
}

void leveled_make_opts(leveled_t *lv, cg_graph_t *g, const cg_compile_opts_t *opts) {
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

void leveled_make(leveled_t *lv, cg_graph_t *g) { leveled_make_opts(lv, g, NULL); }

void leveled_free(leveled_t *lv) {
  cg_plan_destroy(lv->plan);
  free(lv->local);
  free(lv->level);
  free(lv->reach);
}

uint32_t step_of_node(const cg_plan_t *p, uint32_t node) {
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


void comms_make(comms_t *w) {
  ck_assert_cg_ok(cg_comm_create(&w->c[0], MPI_COMM_WORLD, NULL));
  ck_assert_cg_ok(cg_comm_create(&w->c[1], MPI_COMM_WORLD, NULL));
  MPI_Comm_split(MPI_COMM_WORLD, cg_mpi_rank() % 2, cg_mpi_rank(), &w->split);
  ck_assert_cg_ok(cg_comm_create(&w->c[2], w->split, NULL));
  w->color[0] = w->color[1] = 0;
  w->color[2] = cg_mpi_rank() % 2;
}

void comms_free(comms_t *w) {
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
int check_no_wait_cycle(const comms_t *w, const leveled_t *lv, const char *what) {
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
int check_all(const comms_t *w, const leveled_t *lv, const char *what, int *raised) {
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
