/* The issue order of a plan (sched/compile/issue_order.c) and the levels of its sends
 * and receives (sched/compile/p2p_levels.c): plan->issue_order, units and step->unit,
 * read after cg_compile over offline communicators, whose levels are local
 * (no control channel to agree over). Random graphs check the structural
 * promises (a partition of the steps into units in a topological order, groups
 * of one communicator's sends and receives of one interval and level, the
 * posting order, what levels promise) and compare the levels and the whole
 * order with a plain restatement of the rules; small graphs by hand check the
 * cases the rules exist for (a ring exchange, a receive forwarded by a send,
 * host functions that feed a group, other communicators). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_view.h"
#include "lower.h"
#include "plan_internal.h"
#include "test_support.h"

#define NONE UINT32_MAX

static cg_node_t node_(const cg_graph_t *g, uint32_t index) { return (cg_node_t){g->serial, index}; }

static int is_p2p(const cg_step_t *s) {
  return s->kind == CG_STEP_COLLECTIVE && (s->op_kind == CG_NODE_SEND || s->op_kind == CG_NODE_RECV);
}

static cg_plan_t *compile(cg_graph_t *g) {
  cg_plan_t *plan = NULL;
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_ptr_nonnull(plan);
  return plan;
}

/* ---- the promises of plan_internal.h and issue_order.c, checked on any plan;
 * returns the number of units with more than one member */

static uint32_t check_units(const cg_plan_t *p) {
  uint32_t n = p->n_steps, groups = 0;
  uint32_t *pos = malloc((n + 1) * sizeof *pos); /* place in issue_order */
  REQUIRE(pos, "out of memory");
  for (uint32_t s = 0; s < n; s++) pos[s] = NONE;
  REQUIRE(n == 0 || (p->issue_order && p->units), "no issue order");
  REQUIRE(p->n_units <= n && (n == 0 || p->n_units > 0), "%u units for %u steps", p->n_units, n);
  uint32_t next = 0; /* units partition issue_order, in order */
  for (uint32_t u = 0; u < p->n_units; u++) {
    const cg_issue_unit_t *unit = &p->units[u];
    REQUIRE(unit->first == next && unit->n >= 1 && unit->n <= n - next, "unit %u: first %u n %u, expected first %u", u,
            unit->first, unit->n, next);
    for (uint32_t k = 0; k < unit->n; k++) {
      uint32_t s = p->issue_order[unit->first + k];
      REQUIRE(s < n && pos[s] == NONE, "unit %u: step %u out of range or issued twice", u, s);
      pos[s] = unit->first + k;
      const cg_step_t *st = &p->steps[s];
      REQUIRE(st->unit == u, "step %u is in unit %u but says unit %u", s, u, st->unit);
      REQUIRE(st->lane == unit->lane, "step %u on lane %u, its unit %u on lane %u", s, st->lane, u, unit->lane);
    }
    next += unit->n;
    if (unit->n == 1) continue;
    groups++;
    const cg_step_t *s0 = &p->steps[p->issue_order[unit->first]];
    for (uint32_t k = 0; k < unit->n; k++) {
      const cg_step_t *st = &p->steps[p->issue_order[unit->first + k]];
      REQUIRE(is_p2p(st), "unit %u of %u members holds a %s", u, unit->n, cg_node_kind_name(st->op_kind));
      REQUIRE(st->comm_index == s0->comm_index && st->group == s0->group,
              "unit %u mixes communicator %u group %u with communicator %u group %u", u, s0->comm_index, s0->group,
              st->comm_index, st->group);
      REQUIRE(k == 0 || st->comm_position > p->steps[p->issue_order[unit->first + k - 1]].comm_position,
              "unit %u: member %u not in communicator order", u, k);
    }
  }
  REQUIRE(next == n, "units cover %u of %u steps", next, n);
  for (uint32_t s = 0; s < n; s++) {
    const cg_step_t *st = &p->steps[s];
    for (uint32_t e = 0; e < st->n_deps; e++)
      REQUIRE(p->steps[st->deps[e]].unit < st->unit, "step %u (unit %u) depends on step %u (unit %u)", s, st->unit,
              st->deps[e], p->steps[st->deps[e]].unit);
    if (!is_p2p(st) || st->post_after == CG_NO_STEP) continue;
    const cg_step_t *a = &p->steps[st->post_after];
    REQUIRE(st->post_after < n && is_p2p(a) && a->op_kind == st->op_kind && a->root == st->root &&
                a->comm_index == st->comm_index && a->comm_position < st->comm_position && a->post_next == s,
            "step %u: post_after %u is not the previous one to the same peer", s, st->post_after);
    REQUIRE(pos[st->post_after] < pos[s], "step %u (unit %u) issued before step %u (unit %u) it posts after", s,
            st->unit, st->post_after, a->unit);
  }
  free(pos);
  return groups;
}

/* ---- levels (sched/compile/p2p_levels.c) restated from their definition, plainly and
 * slowly: a send or receive's level is 1 + the highest level of the sends and
 * receives of its communicator and interval (same `group`) from which a path
 * of dependencies (through any steps) leads to it, else 0; and at least the
 * level of the one it posts after when that is in the same interval (one in an
 * earlier interval was issued before the collective that ends it). Offline
 * communicators have no control channel, so these local levels are the ones
 * cg_compile uses; how ranks raise them to agree is tested in
 * tests/mpi/test_mpi_levels.c. */

static int same_interval(const cg_step_t *a, const cg_step_t *b) {
  return is_p2p(a) && is_p2p(b) && a->comm_index == b->comm_index && a->group == b->group;
}

/* reach[a * n + b]: a path of dependencies leads from step a to step b */
static uint8_t *reach_matrix(const cg_plan_t *p) {
  uint32_t n = p->n_steps;
  uint8_t *reach = calloc((size_t)n * n + 1, 1);
  REQUIRE(reach, "out of memory");
  for (uint32_t b = 0; b < n; b++)
    for (uint32_t e = 0; e < p->steps[b].n_deps; e++) {
      uint32_t d = p->steps[b].deps[e];
      REQUIRE(d < b, "step %u depends on the later step %u", b, d);
      reach[(size_t)d * n + b] = 1;
      for (uint32_t a = 0; a < d; a++) reach[(size_t)a * n + b] |= reach[(size_t)a * n + d];
    }
  return reach;
}

static uint32_t *model_levels(const cg_plan_t *p, const uint8_t *reach) {
  uint32_t n = p->n_steps, *level = calloc(n + 1, sizeof *level);
  REQUIRE(level, "out of memory");
  for (uint32_t s = 0; s < n; s++) { /* ancestors have lower indices */
    const cg_step_t *st = &p->steps[s];
    if (!is_p2p(st)) continue;
    for (uint32_t t = 0; t < s; t++)
      if (same_interval(&p->steps[t], st) && reach[(size_t)t * n + s] && level[t] + 1 > level[s])
        level[s] = level[t] + 1;
    if (st->post_after != CG_NO_STEP && same_interval(&p->steps[st->post_after], st) &&
        level[st->post_after] > level[s])
      level[s] = level[st->post_after];
  }
  uint32_t *lib = malloc((n + 1) * sizeof *lib);
  ck_assert_cg_ok(lib ? cg_p2p_levels(lib, p, NULL, CG_SUCCESS, "test") : CG_ERR_NO_MEMORY);
  for (uint32_t s = 0; s < n; s++)
    REQUIRE(lib[s] == level[s], "step %u: cg_p2p_levels gives level %u, the definition %u", s, lib[s], level[s]);
  free(lib);
  return level;
}

/* What levels promise, for any levels (local or raised): the members of a
 * unit share a level; a send or receive is above every one of its interval
 * that reaches it and not below the one it posts after; and (given which units
 * were fallbacks; NULL: not checked) an interval whose groups were all
 * complete ones has one unit per level, in increasing order. */
static void check_levels(const cg_plan_t *p, const uint32_t *level, const uint8_t *reach, const uint8_t *fallback) {
  uint32_t n = p->n_steps;
  for (uint32_t u = 0; u < p->n_units; u++)
    for (uint32_t k = 1; k < p->units[u].n; k++) {
      uint32_t a = p->issue_order[p->units[u].first], b = p->issue_order[p->units[u].first + k];
      REQUIRE(level[a] == level[b], "unit %u holds step %u of level %u and step %u of level %u", u, a, level[a], b,
              level[b]);
    }
  for (uint32_t s = 0; s < n; s++) {
    const cg_step_t *st = &p->steps[s];
    if (!is_p2p(st)) continue;
    for (uint32_t t = 0; t < n; t++)
      REQUIRE(!same_interval(&p->steps[t], st) || !reach[(size_t)t * n + s] || level[s] > level[t],
              "step %u (level %u) is reached from step %u (level %u) of its interval", s, level[s], t, level[t]);
    REQUIRE(st->post_after == CG_NO_STEP || !same_interval(&p->steps[st->post_after], st) ||
                level[s] >= level[st->post_after],
            "step %u (level %u) posts after step %u (level %u)", s, level[s], st->post_after, level[st->post_after]);
  }
  for (uint32_t u = 0; u < p->n_units && fallback; u++) {
    uint32_t a = p->issue_order[p->units[u].first];
    int mixed = 0; /* a fallback in the interval */
    for (uint32_t w = 0; w < p->n_units; w++)
      mixed |= fallback[w] && same_interval(&p->steps[a], &p->steps[p->issue_order[p->units[w].first]]);
    for (uint32_t v = u + 1; v < p->n_units && !mixed; v++) {
      uint32_t b = p->issue_order[p->units[v].first];
      REQUIRE(!same_interval(&p->steps[a], &p->steps[b]) || level[b] > level[a],
              "unit %u (level %u) after unit %u (level %u) of its interval, no fallback", v, level[b], u, level[a]);
    }
  }
}

/* ---- the rules of issue_order.c restated plainly (and slowly), over the
 * levels above. A step is ready when its dependencies are in earlier units,
 * and a send or receive also when the one it posts after is issued. The
 * lowest ready step that is not a send or receive is a unit of its own. Else
 * a group opens. A communicator's next group is the unissued sends and
 * receives of the lowest level left in its current interval (the one of its
 * first unissued step); it is complete when all of them have their
 * dependencies issued. Of the communicators with a complete next group, the
 * one with the lowest such step issues all of it. Only when none is complete
 * (a fallback) does the lowest ready send or receive open a group of its
 * communicator, interval and level, with the first run of ready ones, up to
 * one that waits. Members go in the communicator's order, each seeing those
 * before it as issued. */

static int deps_before(const cg_plan_t *p, const uint32_t *unit_of, uint32_t s, uint32_t u) {
  for (uint32_t e = 0; e < p->steps[s].n_deps; e++)
    if (unit_of[p->steps[s].deps[e]] >= u) return 0;
  return 1;
}

static int ready(const cg_plan_t *p, const uint32_t *unit_of, uint32_t s, uint32_t u) {
  const cg_step_t *st = &p->steps[s];
  if (unit_of[s] != NONE || !deps_before(p, unit_of, s, u)) return 0;
  return !is_p2p(st) || st->post_after == CG_NO_STEP || unit_of[st->post_after] != NONE;
}

/* The lowest step of a complete next group over all communicators, and its
 * level; NONE if no next group is complete. */
static uint32_t complete_group(const cg_plan_t *p, const uint32_t *level, const uint32_t *unit_of, uint32_t u,
                               uint32_t *group_level) {
  uint32_t best = NONE;
  for (uint32_t c = 0; c < p->n_comms; c++) {
    const cg_plan_comm_t *pc = &p->comms[c];
    uint32_t first = 0, end, lowest_level = NONE, lowest = NONE;
    while (first < pc->n_steps && unit_of[pc->steps[first]] != NONE) first++;
    if (first == pc->n_steps || !is_p2p(&p->steps[pc->steps[first]])) continue;
    for (end = first; end < pc->n_steps && same_interval(&p->steps[pc->steps[end]], &p->steps[pc->steps[first]]);)
      end++;
    for (uint32_t k = first; k < end; k++)
      if (unit_of[pc->steps[k]] == NONE && level[pc->steps[k]] < lowest_level) lowest_level = level[pc->steps[k]];
    int complete = 1;
    for (uint32_t k = first; k < end; k++) {
      uint32_t t = pc->steps[k];
      if (unit_of[t] != NONE || level[t] != lowest_level) continue;
      if (!deps_before(p, unit_of, t, u)) complete = 0;
      if (t < lowest) lowest = t;
    }
    if (complete && lowest < best) {
      best = lowest;
      *group_level = lowest_level;
    }
  }
  return best;
}

/* Compares the plan's levels and units with the model's; counts (when
 * `counts` is not NULL) fallback units and units above level 0. */
static void check_against_model(const cg_plan_t *p, uint32_t counts[2]) {
  uint32_t n = p->n_steps, done = 0, u = 0, ignored[2] = {0, 0};
  if (!counts) counts = ignored;
  uint8_t *reach = reach_matrix(p), *fallback = calloc(n + 1, 1);
  uint32_t *level = model_levels(p, reach);
  uint32_t *unit_of = malloc((n + 1) * sizeof *unit_of), *order = malloc((n + 1) * sizeof *order);
  REQUIRE(unit_of && order && fallback, "out of memory");
  for (uint32_t s = 0; s < n; s++) unit_of[s] = NONE;
  for (; done < n; u++) {
    uint32_t pick = NONE, first = done, group_level = 0;
    for (uint32_t s = 0; s < n && pick == NONE; s++)
      if (!is_p2p(&p->steps[s]) && ready(p, unit_of, s, u)) pick = s;
    if (pick != NONE) {
      unit_of[pick] = u;
      order[done++] = pick;
    } else {
      pick = complete_group(p, level, unit_of, u, &group_level);
      fallback[u] = pick == NONE;
      for (uint32_t s = 0; s < n && pick == NONE; s++)
        if (ready(p, unit_of, s, u)) pick = s;
      REQUIRE(pick != NONE, "the model is stuck after %u of %u steps", done, n);
      if (fallback[u]) group_level = level[pick];
      counts[0] += fallback[u];
      counts[1] += group_level > 0;
      const cg_plan_comm_t *pc = &p->comms[p->steps[pick].comm_index];
      uint32_t taken = 0;
      for (uint32_t k = 0; k < pc->n_steps; k++) {
        uint32_t t = pc->steps[k];
        if (!same_interval(&p->steps[t], &p->steps[pick]) || unit_of[t] != NONE || level[t] != group_level) continue;
        if (ready(p, unit_of, t, u)) {
          unit_of[t] = u;
          order[done++] = t;
          taken++;
        } else if (fallback[u] && taken) {
          break;
        }
      }
    }
    REQUIRE(u < p->n_units && p->units[u].first == first && p->units[u].n == done - first,
            "unit %u: the model has %u steps from %u, the plan %u from %u (of %u units)", u, done - first, first,
            u < p->n_units ? p->units[u].n : 0, u < p->n_units ? p->units[u].first : 0, p->n_units);
    for (uint32_t k = first; k < done; k++)
      REQUIRE(p->issue_order[k] == order[k], "issue_order[%u] (unit %u): step %u, the model issues step %u", k, u,
              p->issue_order[k], order[k]);
  }
  REQUIRE(u == p->n_units, "%u units, the model has %u", p->n_units, u);
  check_levels(p, level, reach, fallback);
  free(reach);
  free(fallback);
  free(level);
  free(unit_of);
  free(order);
}

/* ---- random programs: mostly sends and receives, with collectives, barriers,
 * host functions (some fences) and explicit edges, over a small arena so that
 * buffers often overlap. Everything is drawn from the stream after
 * cg_test_reseed(salt), so the same salt records the same program again. */

enum { ARENA = 384, MAX_COMMS = 3 };

typedef struct sample {
  int n_comms;
  cg_comm_t *comms[MAX_COMMS];
  cg_graph_t *g;
} sample_t;

static size_t place(size_t bytes) { return (size_t)cg_test_below(ARENA - bytes + 1); }

static int spans_overlap(size_t a, size_t a_bytes, size_t b, size_t b_bytes) {
  return a_bytes && b_bytes && a < b + b_bytes && b < a + a_bytes;
}

static cg_status_t record_comm_op(cg_graph_t *g, cg_comm_t *comm, int rank, int size, unsigned char *arena) {
  uint64_t r = cg_test_below(100);
  cg_node_kind_t kind = r < 35   ? CG_NODE_SEND
                        : r < 70 ? CG_NODE_RECV
                        : r < 75 ? CG_NODE_BARRIER
                                 : cg_test_comm_kinds[cg_test_below(8)]; /* the eight collectives */
  cg_dtype_t dtype = cg_test_below(2) ? CG_INT32 : CG_FLOAT32;
  size_t count = (size_t)cg_test_below(9), es = cg_dtype_size(dtype);
  int root = (int)cg_test_below((uint64_t)size);
  cg_redop_t op = (cg_redop_t)cg_test_below(CG_REDOP_COUNT);
  size_t send_bytes = cg_test_send_elems(kind, count, size, rank, root) * es;
  size_t recv_bytes = cg_test_recv_elems(kind, count, size, rank, root) * es;
  size_t send_off, recv_off;
  if (kind == CG_NODE_SEND || kind == CG_NODE_RECV) {
    send_off = recv_off = place(kind == CG_NODE_SEND ? send_bytes : recv_bytes);
  } else if (kind == CG_NODE_ALLREDUCE && cg_test_below(4) == 0) {
    send_off = recv_off = place(send_bytes);
  } else {
    do {
      send_off = place(send_bytes);
      recv_off = place(recv_bytes);
    } while (spans_overlap(send_off, send_bytes, recv_off, recv_bytes));
  }
  cg_test_call_t call = {kind, comm, arena + send_off, arena + recv_off, count, dtype, op, root};
  return cg_test_record(NULL, g, &call);
}

static void sample_make(sample_t *s, uint64_t salt, uint32_t max_nodes, unsigned char *arena) {
  cg_test_reseed(salt);
  int rank[MAX_COMMS], size[MAX_COMMS];
  s->n_comms = 1 + (int)cg_test_below(MAX_COMMS);
  for (int c = 0; c < s->n_comms; c++) {
    size[c] = 1 + (int)cg_test_below(4);
    rank[c] = (int)cg_test_below((uint64_t)size[c]);
    ck_assert_cg_ok(cg_comm_create_offline(&s->comms[c], rank[c], size[c]));
  }
  int host_percent = (int)cg_test_below(3) * 15;
  uint32_t n_nodes = 1 + (uint32_t)cg_test_below(max_nodes);
  ck_assert_cg_ok(cg_graph_create(&s->g, NULL));
  for (uint32_t i = 0; i < n_nodes; i++) {
    cg_status_t st;
    if ((int)cg_test_below(100) < host_percent) {
      size_t rb = cg_test_below(3) ? 1 + (size_t)cg_test_below(48) : 0,
             wb = cg_test_below(3) ? 1 + (size_t)cg_test_below(48) : 0;
      cg_range_t reads[] = {{arena + place(rb), rb}}, writes[] = {{arena + place(wb), wb}};
      cg_access_t access = CG_ACCESS_INIT;
      access.everything = 0;
      access.reads = reads;
      access.n_reads = rb ? 1 : 0;
      access.writes = writes;
      access.n_writes = wb ? 1 : 0;
      st = cg_host_func(NULL, s->g, cg_test_noop, arena + i % ARENA, cg_test_below(8) ? &access : NULL);
    } else {
      int c = (int)cg_test_below((uint64_t)s->n_comms);
      st = record_comm_op(s->g, s->comms[c], rank[c], size[c], arena);
    }
    REQUIRE(st == CG_SUCCESS, "node %u: %s (%s)", i, cg_status_string(st), cg_error_last());
    if (i >= 1 && cg_test_below(4) == 0) {
      uint32_t x = (uint32_t)cg_test_below(i + 1), y = (uint32_t)cg_test_below(i + 1);
      if (x == y) continue;
      st = cg_depend(s->g, node_(s->g, x), node_(s->g, y));
      REQUIRE(st == CG_SUCCESS || st == CG_ERR_CYCLE, "cg_depend(#%u, #%u): %s (%s)", x, y, cg_status_string(st),
              cg_error_last());
    }
  }
}

static void sample_free(sample_t *s) {
  cg_graph_destroy(s->g);
  for (int c = 0; c < s->n_comms; c++) cg_comm_destroy(s->comms[c]);
}

START_TEST(issue_order__random_plans_keep_every_promise_and_follow_the_rules) {
  static unsigned char arena[ARENA];
  uint32_t groups = 0, big_groups = 0, counts[2] = {0, 0};
  for (int round = 0; round < 600; round++) {
    sample_t s;
    sample_make(&s, 3000 + (uint64_t)round, round % 10 ? 45 : 300, arena);
    cg_plan_t *plan = compile(s.g);
    groups += check_units(plan);
    for (uint32_t u = 0; u < plan->n_units; u++) big_groups += plan->units[u].n > 2;
    check_against_model(plan, counts);
    cg_plan_destroy(plan);
    sample_free(&s);
  }
  /* the generator must produce what the checks are about: groups, both ways of
   * opening one, and intervals of several levels */
  ck_assert_msg(groups > 2000 && big_groups > 1000 && counts[0] > 15 && counts[1] > 1200,
                "only %u groups, %u of more than two, %u fallbacks, %u above level 0", groups, big_groups, counts[0],
                counts[1]);
}
END_TEST

/* Compiled twice, and recorded again on other communicators over another
 * arena: the same units and order. */
START_TEST(issue_order__same_program_same_order) {
  static unsigned char arena1[ARENA], arena2[ARENA];
  for (int round = 0; round < 150; round++) {
    sample_t s1, s2;
    sample_make(&s1, 5000 + (uint64_t)round, 80, arena1);
    sample_make(&s2, 5000 + (uint64_t)round, 80, arena2);
    cg_plan_t *plans[3] = {compile(s1.g), compile(s1.g), compile(s2.g)};
    const cg_plan_t *a = plans[0];
    for (int k = 1; k < 3; k++) {
      const cg_plan_t *b = plans[k];
      REQUIRE(b->n_steps == a->n_steps && b->n_units == a->n_units, "round %d plan %d: %u steps %u units, not %u %u",
              round, k, b->n_steps, b->n_units, a->n_steps, a->n_units);
      REQUIRE(memcmp(a->issue_order, b->issue_order, a->n_steps * sizeof *a->issue_order) == 0,
              "round %d plan %d: another issue order", round, k);
      for (uint32_t u = 0; u < a->n_units; u++)
        REQUIRE(a->units[u].first == b->units[u].first && a->units[u].n == b->units[u].n &&
                    a->units[u].lane == b->units[u].lane,
                "round %d plan %d: unit %u differs", round, k, u);
      for (uint32_t i = 0; i < a->n_steps; i++)
        REQUIRE(a->steps[i].unit == b->steps[i].unit && a->steps[i].node == b->steps[i].node,
                "round %d plan %d: step %u differs", round, k, i);
    }
    for (int k = 0; k < 3; k++) cg_plan_destroy(plans[k]);
    sample_free(&s1);
    sample_free(&s2);
  }
}
END_TEST

/* Without sends and receives every unit is one step, and the order is the
 * steps' own (lowest ready index first over a topologically numbered DAG);
 * the empty plan has no unit. */
START_TEST(issue_order__without_p2p_units_are_the_steps_in_order) {
  static unsigned char arena[ARENA];
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  cg_plan_t *plan = compile(g);
  ck_assert_uint_eq(plan->n_units, 0);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
  for (int round = 0; round < 100; round++) {
    sample_t s;
    sample_make(&s, 6000 + (uint64_t)round, 60, arena);
    plan = compile(s.g);
    int any_p2p = 0;
    for (uint32_t i = 0; i < plan->n_steps; i++) any_p2p |= is_p2p(&plan->steps[i]);
    if (!any_p2p) {
      ck_assert_uint_eq(plan->n_units, plan->n_steps);
      for (uint32_t i = 0; i < plan->n_steps; i++) REQUIRE(plan->issue_order[i] == i, "round %d: step %u", round, i);
    }
    cg_plan_destroy(plan);
    sample_free(&s);
  }
}
END_TEST

/* ---- by hand. Units are written "{#a #b} {#c}" with node (record) indices. */

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

/* Compiles g, checks every promise, and compares the units with `want`. */
static void expect_units(cg_graph_t *g, const char *want, const char *what) {
  cg_plan_t *plan = compile(g);
  check_units(plan);
  check_against_model(plan, NULL);
  ck_assert_msg(strcmp(units_text(plan), want) == 0, "%s: units %s, expected %s", what, units_text(plan), want);
  cg_plan_destroy(plan);
  cg_graph_destroy(g);
}

static cg_graph_t *new_graph(void) {
  cg_graph_t *g;
  ck_assert_cg_ok(cg_graph_create(&g, NULL));
  return g;
}

static cg_access_t host_access(cg_range_t *reads, size_t n_reads, cg_range_t *writes, size_t n_writes) {
  cg_access_t a = CG_ACCESS_INIT;
  a.everything = 0;
  a.reads = reads;
  a.n_reads = n_reads;
  a.writes = writes;
  a.n_writes = n_writes;
  return a;
}

static int32_t buf[8][4];
enum { N = 4 };

/* Every rank sends to the next and receives from the previous, in either
 * order: one group, or the exchange would deadlock. */
START_TEST(issue_order__ring_exchange_is_one_group) {
  for (int size = 2; size <= 4; size++)
    for (int rank = 0; rank < size; rank++) {
      cg_comm_t *c;
      ck_assert_cg_ok(cg_comm_create_offline(&c, rank, size));
      cg_graph_t *g = new_graph();
      ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, (rank + 1) % size));
      ck_assert_cg_ok(cg_recv(NULL, g, c, buf[1], N, CG_INT32, (rank + size - 1) % size));
      expect_units(g, "{#0 #1}", "send then receive");
      g = new_graph();
      ck_assert_cg_ok(cg_recv(NULL, g, c, buf[1], N, CG_INT32, (rank + size - 1) % size));
      ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, (rank + 1) % size));
      expect_units(g, "{#0 #1}", "receive then send");
      /* both directions at once, as a halo exchange does */
      g = new_graph();
      for (int k = 0; k < 2; k++)
        ck_assert_cg_ok(cg_send(NULL, g, c, buf[k], N, CG_INT32, (rank + size - 1 + 2 * k) % size));
      for (int k = 0; k < 2; k++)
        ck_assert_cg_ok(cg_recv(NULL, g, c, buf[2 + k], N, CG_INT32, (rank + 1 + size - 2 * k) % size));
      expect_units(g, "{#0 #1 #2 #3}", "halo exchange");
      cg_comm_destroy(c);
    }
}
END_TEST

/* Two ring exchanges in one interval, the second forwarding what the first
 * received. Locally only the forwarding send (#2 or #3) depends on a receive:
 * it alone is level 1, and the second receive joins the first group. That is
 * what an offline communicator gets; on real ranks the exchange of levels
 * raises the second receive to the level of its match, the left neighbour's
 * forwarding send, so each exchange is one group on every rank and sends and
 * receives match group for group (tests/mpi/test_mpi_levels.c). */
START_TEST(issue_order__forwarding_ring_has_local_levels_offline) {
  for (int size = 2; size <= 4; size++)
    for (int rank = 0; rank < size; rank++) {
      cg_comm_t *c;
      ck_assert_cg_ok(cg_comm_create_offline(&c, rank, size));
      cg_graph_t *g = new_graph();
      int right = (rank + 1) % size, left = (rank + size - 1) % size;
      ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, right));
      ck_assert_cg_ok(cg_recv(NULL, g, c, buf[1], N, CG_INT32, left));
      ck_assert_cg_ok(cg_send(NULL, g, c, buf[1], N, CG_INT32, right)); /* forwards what #1 received */
      ck_assert_cg_ok(cg_recv(NULL, g, c, buf[2], N, CG_INT32, left));
      expect_units(g, "{#0 #1 #3} {#2}", "forwarding ring");
      g = new_graph(); /* the second exchange recorded receive first */
      ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, right));
      ck_assert_cg_ok(cg_recv(NULL, g, c, buf[1], N, CG_INT32, left));
      ck_assert_cg_ok(cg_recv(NULL, g, c, buf[2], N, CG_INT32, left));
      ck_assert_cg_ok(cg_send(NULL, g, c, buf[1], N, CG_INT32, right)); /* forwards what #1 received */
      expect_units(g, "{#0 #1 #2} {#3}", "forwarding ring, receive first");
      cg_comm_destroy(c);
    }
}
END_TEST

/* A receive whose buffer a later send reads completes first: the send is one
 * level up. A send recorded after the forwarding one but independent of the
 * receive is level 0 and joins the receive's group when it goes to another
 * peer; to the same peer it posts after the forwarding send, so it is at least
 * its level and joins it. */
START_TEST(issue_order__forwarded_receive_is_issued_before_the_send) {
  cg_comm_t *c;
  ck_assert_cg_ok(cg_comm_create_offline(&c, 1, 4));
  cg_graph_t *g = new_graph();
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[0], N, CG_INT32, 0));
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, 2));
  expect_units(g, "{#0} {#1}", "receive, then send of its buffer");
  g = new_graph();
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[0], N, CG_INT32, 0));
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, 2));
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[1], N, CG_INT32, 3));
  expect_units(g, "{#0 #2} {#1}", "and an independent send to another peer");
  g = new_graph();
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[0], N, CG_INT32, 0));
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, 2));
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[1], N, CG_INT32, 2));
  expect_units(g, "{#0} {#1 #2}", "and an independent send to the same peer");
  cg_comm_destroy(c);
}
END_TEST

/* Sends to one peer go out in record order even when a later one is ready
 * first (posting after one of level 1 makes them level 1); receives from one
 * peer likewise. A receive that only posts after an earlier one of level 0
 * stays at level 0 and goes with it. */
START_TEST(issue_order__messages_to_one_peer_keep_record_order) {
  cg_comm_t *c;
  ck_assert_cg_ok(cg_comm_create_offline(&c, 0, 2));
  cg_range_t reads[] = {{buf[0], sizeof buf[0]}}, writes[] = {{buf[1], sizeof buf[1]}};
  cg_access_t a = host_access(reads, 1, writes, 1);
  cg_graph_t *g = new_graph();
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[0], N, CG_INT32, 1));   /* #0 */
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &a)); /* #1 reads #0's buffer */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[1], N, CG_INT32, 1));   /* #2 sends #1's result */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[2], N, CG_INT32, 1));   /* #3 ready at once, posts after #2 */
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[3], N, CG_INT32, 1));   /* #4 ready at once, posts after #3 */
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[4], N, CG_INT32, 1));   /* #5 posts after #0 */
  expect_units(g, "{#0 #5} {#1} {#2 #3 #4}", "sends after a forwarded one");
  /* receives: the first from peer 1 overwrites a receive from peer 0, so
   * the group of that one leaves the second from peer 1 out too */
  cg_comm_t *d;
  ck_assert_cg_ok(cg_comm_create_offline(&d, 2, 3));
  g = new_graph();
  ck_assert_cg_ok(cg_recv(NULL, g, d, buf[0], N, CG_INT32, 0)); /* #0 */
  ck_assert_cg_ok(cg_recv(NULL, g, d, buf[0], N, CG_INT32, 1)); /* #1 after #0 (write after write) */
  ck_assert_cg_ok(cg_recv(NULL, g, d, buf[1], N, CG_INT32, 1)); /* #2 posted after #1 */
  expect_units(g, "{#0} {#1 #2}", "receives from one peer");
  cg_comm_destroy(c);
  cg_comm_destroy(d);
}
END_TEST

/* Steps other than sends and receives go first, so a host function that
 * feeds a send is issued before the group, and the receive that does not
 * depend on it joins the send; when the host function reads what is
 * received, three units. */
START_TEST(issue_order__host_function_feeding_a_send_goes_before_its_group) {
  cg_comm_t *c;
  ck_assert_cg_ok(cg_comm_create_offline(&c, 1, 3));
  cg_range_t r[] = {{buf[1], sizeof buf[1]}}, w[] = {{buf[0], sizeof buf[0]}};
  cg_access_t writes_a = host_access(NULL, 0, w, 1), reads_b_writes_a = host_access(r, 1, w, 1);
  cg_graph_t *g = new_graph();
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[1], N, CG_INT32, 0));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &writes_a));
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, 2));
  expect_units(g, "{#1} {#0 #2}", "receive recorded first");
  g = new_graph();
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &writes_a));
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, 2));
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[1], N, CG_INT32, 0));
  expect_units(g, "{#0} {#1 #2}", "host function recorded first");
  g = new_graph(); /* an explicit edge instead of a hazard */
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[1], N, CG_INT32, 0));
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, 2));
  cg_access_t nothing = host_access(NULL, 0, NULL, 0);
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &nothing));
  ck_assert_cg_ok(cg_depend(g, node_(g, 2), node_(g, 1)));
  expect_units(g, "{#2} {#0 #1}", "host function recorded last, with an edge");
  g = new_graph();
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[1], N, CG_INT32, 0));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &reads_b_writes_a));
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, 2));
  expect_units(g, "{#0} {#1} {#2}", "host function reads the receive");
  g = new_graph(); /* a fence splits the group the same way */
  ck_assert_cg_ok(cg_recv(NULL, g, c, buf[1], N, CG_INT32, 0));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, NULL));
  ck_assert_cg_ok(cg_send(NULL, g, c, buf[0], N, CG_INT32, 2));
  expect_units(g, "{#0} {#1} {#2}", "fence between receive and send");
  cg_comm_destroy(c);
}
END_TEST

/* Groups end at their communicator's collectives, never mix communicators,
 * and wait for ready collectives of any communicator. */
START_TEST(issue_order__collectives_and_other_communicators_interleave) {
  cg_comm_t *a, *b;
  ck_assert_cg_ok(cg_comm_create_offline(&a, 0, 2));
  ck_assert_cg_ok(cg_comm_create_offline(&b, 1, 2));
  cg_graph_t *g = new_graph();
  ck_assert_cg_ok(cg_send(NULL, g, a, buf[0], N, CG_INT32, 1));                   /* #0 */
  ck_assert_cg_ok(cg_send(NULL, g, b, buf[1], N, CG_INT32, 0));                   /* #1 */
  ck_assert_cg_ok(cg_allreduce(NULL, g, a, buf[2], buf[3], N, CG_INT32, CG_SUM)); /* #2 after #0 */
  ck_assert_cg_ok(cg_recv(NULL, g, b, buf[4], N, CG_INT32, 0));                   /* #3 */
  ck_assert_cg_ok(cg_recv(NULL, g, a, buf[5], N, CG_INT32, 1));                   /* #4 after #2 */
  expect_units(g, "{#0} {#2} {#1 #3} {#4}", "two communicators");
  g = new_graph();
  ck_assert_cg_ok(cg_send(NULL, g, a, buf[0], N, CG_INT32, 1));
  ck_assert_cg_ok(cg_barrier(NULL, g, a));
  ck_assert_cg_ok(cg_send(NULL, g, a, buf[1], N, CG_INT32, 1));
  expect_units(g, "{#0} {#1} {#2}", "a barrier between two sends");
  g = new_graph();
  ck_assert_cg_ok(cg_send(NULL, g, a, buf[0], N, CG_INT32, 1));
  ck_assert_cg_ok(cg_allreduce(NULL, g, b, buf[1], buf[2], N, CG_INT32, CG_SUM));
  ck_assert_cg_ok(cg_recv(NULL, g, a, buf[3], N, CG_INT32, 1));
  ck_assert_cg_ok(cg_send(NULL, g, b, buf[4], N, CG_INT32, 0));
  ck_assert_cg_ok(cg_recv(NULL, g, b, buf[5], N, CG_INT32, 0));
  expect_units(g, "{#1} {#0 #2} {#3 #4}", "another communicator's collective");
  g = new_graph(); /* b's send forwards a's receive */
  ck_assert_cg_ok(cg_recv(NULL, g, a, buf[0], N, CG_INT32, 1));
  ck_assert_cg_ok(cg_send(NULL, g, b, buf[0], N, CG_INT32, 0));
  ck_assert_cg_ok(cg_send(NULL, g, a, buf[1], N, CG_INT32, 1));
  ck_assert_cg_ok(cg_recv(NULL, g, b, buf[2], N, CG_INT32, 0));
  expect_units(g, "{#0 #2} {#1 #3}", "a group of b fed by a group of a");
  /* a chain through both communicators: each group waits for a member fed by
   * the other one, so none is complete and the lowest ready step, #0, opens a
   * group with the first run of ready steps of its level: itself */
  g = new_graph();
  ck_assert_cg_ok(cg_recv(NULL, g, a, buf[0], N, CG_INT32, 1)); /* #0 */
  ck_assert_cg_ok(cg_send(NULL, g, b, buf[0], N, CG_INT32, 0)); /* #1 forwards #0 */
  ck_assert_cg_ok(cg_recv(NULL, g, b, buf[1], N, CG_INT32, 0)); /* #2 */
  ck_assert_cg_ok(cg_send(NULL, g, a, buf[1], N, CG_INT32, 1)); /* #3 forwards #2 */
  expect_units(g, "{#0} {#1 #2} {#3}", "a chain through two communicators");
  cg_comm_destroy(a);
  cg_comm_destroy(b);
}
END_TEST

/* What the rules are for (the comment of issue_order.c): sends and receives
 * that do not depend on each other must not wait for each other. A device plan
 * runs a lane's units one after another, so a receive and an independent send
 * of one communicator in two units are ordered. Here the send waits for a host
 * function fed by a receive on another communicator; rank 1 receives the send,
 * forwards it through a host function and sends it back:
 *   rank 0: #0 recv A<-1   #1 recv B<-1   #2 host(buf1 -> buf2)   #3 send A->1 buf2
 *   rank 1: #0 recv A<-0   #1 host(buf0 -> buf2)   #2 send A->0 buf2   #3 send B->0
 * On the host this runs. If rank 0 issues {#0} before #3 is ready, lane A
 * holds #3 behind #0, which waits for rank 1's #2, which waits for #3: the
 * device plan deadlocks. {#1} {#2} {#0 #3} would not. */
START_TEST(issue_order__independent_send_and_receive_share_a_group_when_they_can) {
  cg_comm_t *a, *b;
  ck_assert_cg_ok(cg_comm_create_offline(&a, 0, 2));
  ck_assert_cg_ok(cg_comm_create_offline(&b, 0, 2));
  cg_range_t r[] = {{buf[1], sizeof buf[1]}}, w[] = {{buf[2], sizeof buf[2]}};
  cg_access_t forward = host_access(r, 1, w, 1);
  cg_graph_t *g = new_graph();
  ck_assert_cg_ok(cg_recv(NULL, g, a, buf[0], N, CG_INT32, 1));
  ck_assert_cg_ok(cg_recv(NULL, g, b, buf[1], N, CG_INT32, 1));
  ck_assert_cg_ok(cg_host_func(NULL, g, cg_test_noop, NULL, &forward));
  ck_assert_cg_ok(cg_send(NULL, g, a, buf[2], N, CG_INT32, 1));
  expect_units(g, "{#1} {#2} {#0 #3}", "the send #3 must not wait for the independent receive #0");
  cg_comm_destroy(a);
  cg_comm_destroy(b);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("issue_order");
  TCase *random = tcase_create("random");
  tcase_set_timeout(random, 120);
  tcase_add_test(random, issue_order__random_plans_keep_every_promise_and_follow_the_rules);
  tcase_add_test(random, issue_order__same_program_same_order);
  tcase_add_test(random, issue_order__without_p2p_units_are_the_steps_in_order);
  suite_add_tcase(s, random);
  TCase *hand = tcase_create("by_hand");
  tcase_set_timeout(hand, 30);
  tcase_add_test(hand, issue_order__ring_exchange_is_one_group);
  tcase_add_test(hand, issue_order__forwarded_receive_is_issued_before_the_send);
  tcase_add_test(hand, issue_order__forwarding_ring_has_local_levels_offline);
  tcase_add_test(hand, issue_order__messages_to_one_peer_keep_record_order);
  tcase_add_test(hand, issue_order__host_function_feeding_a_send_goes_before_its_group);
  tcase_add_test(hand, issue_order__collectives_and_other_communicators_interleave);
  suite_add_tcase(s, hand);
  TCase *goal = tcase_create("goal");
  tcase_set_timeout(goal, 30);
  tcase_add_test(goal, issue_order__independent_send_and_receive_share_a_group_when_they_can);
  suite_add_tcase(s, goal);
  return s;
}

int main(void) { return cg_test_main(suite()); }
