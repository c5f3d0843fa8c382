/* The cross-rank check. Per communicator, in three rounds of nonblocking
 * allgathers over its control channel (all communicators' rounds in flight
 * together, so ranks that list communicators in different orders cannot
 * deadlock):
 *   1. a summary: how many collectives and point-to-point operations, and a hash
 *      of the collective sequence;
 *   2. only where the summaries show a difference, or where there is
 *      point-to-point traffic to pair up: the operation records themselves;
 *   3. only where a difference was found: the names of the nodes involved,
 *      so every rank can print the same message.
 * Every rank of a communicator sees the same data, so all take the same rounds
 * and reach the same verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "rank_check.h"

typedef struct op_record {
  uint64_t count;
  uint32_t node;  /* this rank's node index: reported, not compared */
  uint32_t group; /* collectives before it (point-to-point only) */
  int32_t root;   /* root, or peer of send/recv; -1 if none */
  uint8_t kind, dtype, op, present;
} op_record_t;

/* Communicator ids a rank lists in its summary: enough for real programs; a
 * graph on more communicators lists the first ones. */
#define CG_CHECK_IDS 16
/* Communicators a rank may join because other ranks' graphs use them. */
#define CG_CHECK_MAX_JOINS 1024

typedef struct summary {
  uint64_t n_collectives;
  uint64_t n_p2p;
  uint64_t hash;
  uint64_t local_status; /* a rank that cannot compile the graph says so here */
  uint64_t n_ids;        /* agreed ids of the communicators this rank's graph uses */
  uint64_t ids[CG_CHECK_IDS];
} summary_t;

#define NAME_BYTES 128

typedef struct comm_check {
  const cg_comm_sequence_t *seq;
  const cg_backend_t *backend;
  int size, rank;
  op_record_t *mine; /* collectives, then point-to-point */
  uint64_t n_coll, n_p2p;
  summary_t mine_summary;
  summary_t *summaries;     /* per rank */
  uint64_t max_coll, max_p2p;
  op_record_t *all;         /* per rank: max_coll + max_p2p records */
  int exchange_records;
  /* the first difference, if any */
  int mismatch;
  char *message;            /* without names, filled in after round 3 */
  uint32_t name_node[2];    /* this rank's nodes to name (collective or send side, receive side) */
  char *names;              /* per rank 2 * NAME_BYTES */
  int name_rank[2];         /* ranks whose names the message shows (p2p) */
  uint64_t coll_position;   /* collective mismatch: position */
  int p2p;                  /* 1: the mismatch is point-to-point */
  int failed_rank;          /* a rank of it that cannot compile its graph, or -1 */
  cg_comm_t *joined;        /* retained: a communicator this rank's graph does not use */
  cg_comm_sequence_t empty; /* its (empty) sequence */
} comm_check_t;


static op_record_t record_of(const cg_node_rec_t *n, uint32_t index, uint32_t group) {
  op_record_t r;
  memset(&r, 0, sizeof r); /* padding too: records are hashed and compared as bytes */
  r.kind = (uint8_t)n->kind;
  r.node = index;
  r.present = 1;
  r.root = -1;
  if (n->kind != CG_NODE_BARRIER) {
    r.count = n->count;
    r.dtype = (uint8_t)n->dtype;
  }
  if (cg_kind_has_op(n->kind)) r.op = (uint8_t)n->op;
  if (cg_kind_has_root(n->kind) || cg_kind_is_p2p(n->kind)) r.root = n->root;
  if (cg_kind_is_p2p(n->kind)) r.group = group;
  return r;
}

static int same_op(const op_record_t *a, const op_record_t *b) {
  return a->present == b->present && a->kind == b->kind && a->count == b->count && a->dtype == b->dtype &&
         a->op == b->op && a->root == b->root;
}

static uint64_t hash_ops(const op_record_t *r, uint64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; i++) {
    op_record_t c = r[i];
    c.node = 0; /* node indices may differ between ranks */
    const unsigned char *b = (const unsigned char *)&c;
    for (size_t k = 0; k < sizeof c; k++) h = (h ^ b[k]) * 1099511628211ull;
  }
  return h;
}

static void describe_op(char *buf, size_t size, const op_record_t *r) {
  if (!r->present) {
    snprintf(buf, size, "nothing");
    return;
  }
  int n = snprintf(buf, size, "%s", cg_node_kind_name((cg_node_kind_t)r->kind));
  if (r->kind != CG_NODE_BARRIER && n >= 0 && (size_t)n < size)
    n += snprintf(buf + n, size - (size_t)n, " %llu x %s", (unsigned long long)r->count,
                  cg_dtype_name((cg_dtype_t)r->dtype));
  if (cg_kind_has_op((cg_node_kind_t)r->kind) && n >= 0 && (size_t)n < size)
    n += snprintf(buf + n, size - (size_t)n, " %s", cg_redop_name((cg_redop_t)r->op));
  if (cg_kind_has_root((cg_node_kind_t)r->kind) && n >= 0 && (size_t)n < size)
    snprintf(buf + n, size - (size_t)n, " root %d", r->root);
}

/* Posts one allgather on every check with `bytes[i] > 0`, then waits for
 * them all (cg_control_complete: at most timeout_s, when positive). */
static cg_status_t exchange(comm_check_t *checks, uint32_t n, const void **mine, void **all, const size_t *bytes,
                            double timeout_s, const char *where) {
  cg_status_t st = CG_SUCCESS;
  cg_control_round_t *rounds = calloc(n ? n : 1, sizeof *rounds);
  if (!rounds) return cg_fail(CG_ERR_NO_MEMORY, "allocating the check's rounds");
  uint32_t posted = 0;
  for (uint32_t i = 0; i < n && st == CG_SUCCESS; i++) {
    if (!bytes[i]) continue;
    const cg_comm_t *comm = checks[i].seq->comm;
    rounds[posted].comm = comm;
    st = checks[i].backend->control_allgather_start(&rounds[posted].request, comm->impl, mine[i], all[i], bytes[i]);
    if (st == CG_SUCCESS) posted++;
  }
  char waiting_in[512];
  snprintf(waiting_in, sizeof waiting_in, "%s (the cross-rank check)", where);
  /* after a failed start the rounds already posted are still waited for:
   * the other ranks take part in them */
  cg_status_t waited = cg_control_complete(rounds, posted, timeout_s, waiting_in);
  free(rounds);
  return st != CG_SUCCESS ? st : waited;
}

static op_record_t *record_at(comm_check_t *c, int rank, uint64_t i) {
  return &c->all[(size_t)rank * (c->max_coll + c->max_p2p) + i];
}

/* Collectives: the first position where the ranks' sequences differ. */
static void find_collective_mismatch(comm_check_t *c) {
  static const op_record_t absent = {0};
  for (uint64_t k = 0; k < c->max_coll; k++) {
    const op_record_t *first = k < c->summaries[0].n_collectives ? record_at(c, 0, k) : &absent;
    for (int r = 1; r < c->size; r++) {
      const op_record_t *other = k < c->summaries[r].n_collectives ? record_at(c, r, k) : &absent;
      if (!same_op(first, other)) {
        c->mismatch = 1;
        c->coll_position = k;
        c->name_node[0] = k < c->n_coll ? c->mine[k].node : UINT32_MAX;
        return;
      }
    }
  }
}

/* The i-th operation of `kind` between `from` and `to` in rank `r`'s records. */
static const op_record_t *nth_p2p(comm_check_t *c, int r, cg_node_kind_t kind, int peer, uint64_t nth) {
  uint64_t seen = 0;
  for (uint64_t i = 0; i < c->summaries[r].n_p2p; i++) {
    const op_record_t *x = record_at(c, r, c->max_coll + i);
    if (x->kind == kind && x->root == peer && seen++ == nth) return x;
  }
  return NULL;
}

static uint64_t count_p2p(comm_check_t *c, int r, cg_node_kind_t kind, int peer) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < c->summaries[r].n_p2p; i++) {
    const op_record_t *x = record_at(c, r, c->max_coll + i);
    if (x->kind == kind && x->root == peer) n++;
  }
  return n;
}

static void describe_p2p(char *buf, size_t size, const op_record_t *x) {
  snprintf(buf, size, "%llu x %s after %u collective%s", (unsigned long long)x->count,
           cg_dtype_name((cg_dtype_t)x->dtype), x->group, x->group == 1 ? "" : "s");
}

/* Point to point: every send from `from` to `to` pairs with the receive of the
 * same position on `to`, with the same count, type and group. */
static cg_status_t find_p2p_mismatch(comm_check_t *c, unsigned long long comm_id) {
  char label[64];
  cg_comm_id_label(label, sizeof label, comm_id);
  char a[160], b[160];
  for (int from = 0; from < c->size; from++)
    for (int to = 0; to < c->size; to++) {
      uint64_t sends = count_p2p(c, from, CG_NODE_SEND, to), recvs = count_p2p(c, to, CG_NODE_RECV, from);
      uint64_t n = sends > recvs ? sends : recvs;
      for (uint64_t k = 0; k < n; k++) {
        const op_record_t *s = nth_p2p(c, from, CG_NODE_SEND, to, k);
        const op_record_t *r = nth_p2p(c, to, CG_NODE_RECV, from, k);
        if (s && r && s->count == r->count && s->dtype == r->dtype && s->group == r->group) continue;
        c->mismatch = 1;
        c->p2p = 1;
        c->name_rank[0] = s ? from : -1;
        c->name_rank[1] = r ? to : -1;
        if (c->rank == from && s) c->name_node[0] = s->node;
        if (c->rank == to && r) c->name_node[1] = r->node;
        if (s) describe_p2p(a, sizeof a, s);
        if (r) describe_p2p(b, sizeof b, r);
        size_t len = 700;
        if (!(c->message = malloc(len))) return cg_fail(CG_ERR_NO_MEMORY, "formatting the mismatch");
        if (s && r)
          snprintf(c->message, len, "communicator %s: rank %d's send #%llu to rank %d (node #%u%%s: %s) does not "
                   "match rank %d's receive #%llu from rank %d (node #%u%%s: %s)", label, from,
                   (unsigned long long)k, to, s->node, a, to, (unsigned long long)k, from, r->node, b);
        else if (s)
          snprintf(c->message, len, "communicator %s: rank %d's send #%llu to rank %d (node #%u%%s: %s) has no "
                   "receive on rank %d, which posts %llu receive%s from rank %d%%s", label, from,
                   (unsigned long long)k, to, s->node, a, to, (unsigned long long)recvs, recvs == 1 ? "" : "s", from);
        else
          snprintf(c->message, len, "communicator %s: rank %d's receive #%llu from rank %d (node #%u%%s: %s) has no "
                   "send on rank %d, which posts %llu send%s to rank %d%%s", label, to, (unsigned long long)k,
                   from, r->node, b, from, (unsigned long long)sends, sends == 1 ? "" : "s", to);
        return CG_SUCCESS;
      }
    }
  return CG_SUCCESS;
}

static const char *name_of(const comm_check_t *c, int rank, int slot, char *buf, size_t size) {
  const char *n = rank >= 0 ? c->names + ((size_t)rank * 2 + (size_t)slot) * NAME_BYTES : "";
  if (n[0])
    snprintf(buf, size, " '%.*s'", NAME_BYTES - 1, n);
  else
    buf[0] = '\0';
  return buf;
}

/* The final text, the same on every rank: "communicator 7 (4 ranks):
 * collective #3 differs between ranks: ranks 0,1,3: allreduce 1024 x float32
 * sum (node #5 'g3' on the first); rank 2: allreduce 1025 x float32 sum (node
 * #5 'g3')" */
static cg_status_t report(const comm_check_t *c, const char *where) {
  char label[64];
  cg_comm_id_label(label, sizeof label, c->seq->comm->id);
  char text[1000], name0[NAME_BYTES + 8], name1[NAME_BYTES + 8];
  if (c->p2p) {
    char fmt[700];
    snprintf(fmt, sizeof fmt, "%s", c->message);
    if (c->name_rank[0] >= 0 && c->name_rank[1] >= 0)
      snprintf(text, sizeof text, fmt, name_of(c, c->name_rank[0], 0, name0, sizeof name0),
               name_of(c, c->name_rank[1], 1, name1, sizeof name1));
    else if (c->name_rank[0] >= 0)
      snprintf(text, sizeof text, fmt, name_of(c, c->name_rank[0], 0, name0, sizeof name0), "");
    else
      snprintf(text, sizeof text, fmt, name_of(c, c->name_rank[1], 1, name0, sizeof name0), "");
    return cg_fail(CG_ERR_MISMATCH, "%s: %s", where, text);
  }
  static const op_record_t absent = {0};
  int n = snprintf(text, sizeof text, "communicator %s (%d ranks): collective #%llu differs between ranks:",
                   label, c->size, (unsigned long long)c->coll_position);
  int *done = calloc((size_t)c->size, sizeof *done);
  if (!done) return cg_fail(CG_ERR_NO_MEMORY, "formatting the mismatch");
  for (int r = 0; r < c->size && n >= 0 && (size_t)n < sizeof text; r++) {
    if (done[r]) continue;
    const op_record_t *x = c->coll_position < c->summaries[r].n_collectives ? record_at((comm_check_t *)c, r,
                                                                                       c->coll_position) : &absent;
    char ranks[200] = "", op[160];
    int m = 0, members = 0;
    for (int q = r; q < c->size; q++) {
      const op_record_t *y = c->coll_position < c->summaries[q].n_collectives
                                 ? record_at((comm_check_t *)c, q, c->coll_position) : &absent;
      if (done[q] || !same_op(x, y)) continue;
      done[q] = 1;
      members++;
      if (m >= 0 && (size_t)m < sizeof ranks) m += snprintf(ranks + m, sizeof ranks - (size_t)m, "%s%d", members > 1 ? "," : "", q);
    }
    describe_op(op, sizeof op, x);
    if (x->present)
      n += snprintf(text + n, sizeof text - (size_t)n, "%s rank%s %s: %s (node #%u%s%s)", r ? ";" : "",
                    members > 1 ? "s" : "", ranks, op, x->node, name_of(c, r, 0, name0, sizeof name0),
                    members > 1 ? " on the first" : "");
    else
      n += snprintf(text + n, sizeof text - (size_t)n, "%s rank%s %s: nothing (%llu collective%s in all)",
                    r ? ";" : "", members > 1 ? "s" : "", ranks,
                    (unsigned long long)c->summaries[r].n_collectives, c->summaries[r].n_collectives == 1 ? "" : "s");
  }
  free(done);
  return cg_fail(CG_ERR_MISMATCH, "%s: %s", where, text);
}

static cg_status_t prepare_records(comm_check_t *c, const cg_graph_t *g, const char *where) {
  const cg_comm_sequence_t *seq = c->seq;
  c->mine = malloc((seq->len ? seq->len : 1) * sizeof *c->mine);
  c->summaries = calloc((size_t)c->size, sizeof *c->summaries);
  if (!c->mine || !c->summaries) return cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the cross-rank check", where);
  uint32_t collectives = 0;
  for (uint32_t k = 0; k < seq->len; k++)
    if (!cg_kind_is_p2p(cg_graph_node(g, seq->nodes[k])->kind)) c->n_coll++;
  uint64_t ci = 0, pi = c->n_coll;
  for (uint32_t k = 0; k < seq->len; k++) {
    const cg_node_rec_t *node = cg_graph_node(g, seq->nodes[k]);
    if (cg_kind_is_p2p(node->kind)) {
      c->mine[pi++] = record_of(node, seq->nodes[k], collectives);
    } else {
      c->mine[ci++] = record_of(node, seq->nodes[k], 0);
      collectives++;
    }
  }
  c->n_p2p = seq->len - c->n_coll;
  memset(&c->mine_summary, 0, sizeof c->mine_summary);
  c->mine_summary.n_collectives = c->n_coll;
  c->mine_summary.n_p2p = c->n_p2p;
  c->mine_summary.hash = hash_ops(c->mine, c->n_coll);
  c->name_node[0] = c->name_node[1] = UINT32_MAX;
  c->name_rank[0] = c->name_rank[1] = -1;
  return CG_SUCCESS;
}

cg_status_t cg_rank_check(const cg_graph_t *g, const cg_comm_order_t *order, const char *where,
                          cg_status_t local_status, double timeout_s, cg_comm_t ***joined, uint32_t *n_joined) {
  cg_status_t st = CG_SUCCESS;
  uint32_t n = 0;
  size_t cap = (size_t)order->n_sequences + CG_CHECK_MAX_JOINS; /* joins beyond: see plan.h */
  comm_check_t *checks = calloc(cap, sizeof *checks);
  const void **mine = calloc(cap, sizeof *mine);
  void **all = calloc(cap, sizeof *all);
  size_t *bytes = calloc(cap, sizeof *bytes);
  uint32_t *index = calloc(cap, sizeof *index);
  if (!checks || !mine || !all || !bytes || !index) {
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the cross-rank check", where);
    goto out;
  }
  for (uint32_t s = 0; s < order->n_sequences; s++) {
    const cg_comm_t *comm = order->sequences[s].comm;
    const cg_backend_t *b = comm->ops->backend;
    if (!b || !b->control_allgather_start) continue; /* offline: nothing to compare with */
    comm_check_t *c = &checks[n];
    c->seq = &order->sequences[s];
    c->backend = b;
    c->size = comm->size;
    c->rank = comm->rank;
    index[n++] = s;
    if ((st = prepare_records(c, g, where)) != CG_SUCCESS) goto out;
    c->mine_summary.local_status = (uint64_t)local_status;
  }

  /* the communicators this rank's graph uses, in every summary */
  uint64_t ids[CG_CHECK_IDS];
  uint64_t n_ids = 0;
  for (uint32_t i = 0; i < n && n_ids < CG_CHECK_IDS; i++) ids[n_ids++] = checks[i].seq->comm->id;
  for (uint32_t i = 0; i < n; i++) {
    checks[i].mine_summary.n_ids = n_ids;
    memcpy(checks[i].mine_summary.ids, ids, n_ids * sizeof ids[0]);
  }

  /* round 1: summaries. A communicator that other ranks' graphs use and this
   * rank's does not shows up in their lists; this rank then joins its check
   * with an empty sequence, so they get a mismatch instead of waiting for it. */
  for (uint32_t from = 0; from < n;) {
    for (uint32_t i = 0; i < n; i++) {
      mine[i] = &checks[i].mine_summary;
      all[i] = checks[i].summaries;
      bytes[i] = i >= from ? sizeof(summary_t) : 0;
    }
    if ((st = exchange(checks, n, mine, all, bytes, timeout_s, where)) != CG_SUCCESS) goto failed_exchange;
    uint32_t end = n;
    for (uint32_t i = from; i < end; i++)
      for (int r = 0; r < checks[i].size; r++)
        for (uint64_t k = 0; k < checks[i].summaries[r].n_ids && k < CG_CHECK_IDS; k++) {
          uint64_t id = checks[i].summaries[r].ids[k];
          int known = 0;
          for (uint32_t j = 0; j < n && !known; j++) known = checks[j].seq->comm->id == id;
          if (known || n == cap) continue;
          cg_comm_t *comm = cg_comm_lookup(id);
          if (!comm) continue; /* not a member: nothing to join */
          if (!comm->ops->backend || !comm->ops->backend->control_allgather_start) {
            cg_comm_release(comm);
            continue;
          }
          comm_check_t *c = &checks[n];
          c->joined = comm;
          c->empty = (cg_comm_sequence_t){comm, NULL, 0};
          c->seq = &c->empty;
          c->backend = comm->ops->backend;
          c->size = comm->size;
          c->rank = comm->rank;
          index[n++] = UINT32_MAX;
          if ((st = prepare_records(c, g, where)) != CG_SUCCESS) goto out;
          c->mine_summary.local_status = (uint64_t)local_status;
          c->mine_summary.n_ids = n_ids;
          memcpy(c->mine_summary.ids, ids, n_ids * sizeof ids[0]);
        }
    from = end;
  }
  /* a communicator with a rank that cannot compile skips the later rounds; every
   * rank of it sees the same summaries, so all skip them (deciding for all
   * communicators at once would let ranks that share only another one go on
   * and wait) */
  for (uint32_t i = 0; i < n; i++) {
    checks[i].failed_rank = -1;
    for (int r = 0; r < checks[i].size && checks[i].failed_rank < 0; r++)
      if (checks[i].summaries[r].local_status != CG_SUCCESS) checks[i].failed_rank = r;
  }

  /* round 2: records, where needed */
  for (uint32_t i = 0; i < n; i++) {
    comm_check_t *c = &checks[i];
    int differ = 0;
    for (int r = 0; r < c->size; r++) {
      if (c->summaries[r].n_collectives != c->summaries[0].n_collectives || c->summaries[r].hash != c->summaries[0].hash)
        differ = 1;
      if (c->summaries[r].n_p2p > c->max_p2p) c->max_p2p = c->summaries[r].n_p2p;
      if (c->summaries[r].n_collectives > c->max_coll) c->max_coll = c->summaries[r].n_collectives;
    }
    if (!differ) c->max_coll = 0; /* equal sequences: only point-to-point records travel */
    bytes[i] = 0;
    if (c->failed_rank >= 0 || (!c->max_coll && !c->max_p2p)) continue;
    size_t per_rank = c->max_coll + c->max_p2p;
    op_record_t *padded = calloc(per_rank, sizeof *padded);
    c->all = calloc(per_rank * (size_t)c->size, sizeof *c->all);
    if (!padded || !c->all) {
      free(padded);
      st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the cross-rank check", where);
      goto out;
    }
    if (c->max_coll) memcpy(padded, c->mine, c->n_coll * sizeof *padded);
    memcpy(padded + c->max_coll, c->mine + c->n_coll, c->n_p2p * sizeof *padded);
    free(c->mine);
    c->mine = padded; /* the collectives part only holds data when exchanged */
    mine[i] = padded;
    all[i] = c->all;
    bytes[i] = per_rank * sizeof *padded;
  }
  if ((st = exchange(checks, n, mine, all, bytes, timeout_s, where)) != CG_SUCCESS) goto failed_exchange;

  /* the verdicts, then round 3: names for the messages */
  for (uint32_t i = 0; i < n; i++) {
    comm_check_t *c = &checks[i];
    bytes[i] = 0;
    if (!c->all) continue;
    if (c->max_coll) {
      /* c->mine now holds the padded records; positions of my collectives are unchanged */
      find_collective_mismatch(c);
    }
    if (!c->mismatch && c->max_p2p && (st = find_p2p_mismatch(c, (unsigned long long)c->seq->comm->id)) != CG_SUCCESS)
      goto out;
    if (!c->mismatch) continue;
    char *name = calloc(2, NAME_BYTES);
    c->names = calloc((size_t)c->size * 2, NAME_BYTES);
    if (!name || !c->names) {
      free(name);
      st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the cross-rank check", where);
      goto out;
    }
    for (int slot = 0; slot < 2; slot++) {
      const cg_node_rec_t *node = c->name_node[slot] != UINT32_MAX ? cg_graph_node(g, c->name_node[slot]) : NULL;
      if (node && node->name) snprintf(name + slot * NAME_BYTES, NAME_BYTES, "%s", node->name);
    }
    free(c->mine);
    c->mine = (op_record_t *)name;
    mine[i] = name;
    all[i] = c->names;
    bytes[i] = 2 * NAME_BYTES;
  }
  if ((st = exchange(checks, n, mine, all, bytes, timeout_s, where)) != CG_SUCCESS) goto failed_exchange;
  if (local_status != CG_SUCCESS) { /* the caller's detail stands */
    st = local_status;
    goto out;
  }
  for (uint32_t i = 0; i < n; i++)
    if (checks[i].failed_rank >= 0) {
      char label[64];
      st = cg_fail(CG_ERR_MISMATCH, "%s: communicator %s: rank %d cannot compile its graph (%s); see its error",
                   where, cg_comm_id_label(label, sizeof label, checks[i].seq->comm->id), checks[i].failed_rank,
                   cg_status_string((cg_status_t)checks[i].summaries[checks[i].failed_rank].local_status));
      goto out;
    }
  /* several communicators may differ: every rank names the one with the
   * smallest agreed id */
  const comm_check_t *first = NULL;
  for (uint32_t i = 0; i < n; i++)
    if (checks[i].mismatch && (!first || checks[i].seq->comm->id < first->seq->comm->id)) first = &checks[i];
  if (first) st = report(first, where);
  goto out;

failed_exchange: {
  char detail[1536];
  snprintf(detail, sizeof detail, "%s", cg_error_last());
  /* a timeout's detail already says where it waited */
  if (st == CG_ERR_TIMEOUT)
    st = cg_fail(st, "%s", detail);
  else
    st = cg_fail(st, "%s: cross-rank check: %s", where, detail);
}
out:
  if (joined) {
    /* handed to the caller, who has later rounds of agreement to take part in */
    *joined = NULL;
    *n_joined = 0;
    cg_comm_t **list = st == CG_SUCCESS ? malloc(((size_t)n + 1) * sizeof *list) : NULL;
    for (uint32_t i = 0; list && i < n; i++)
      if (checks[i].joined) {
        list[(*n_joined)++] = checks[i].joined;
        checks[i].joined = NULL;
      }
    if (st == CG_SUCCESS && !list) st = cg_fail(CG_ERR_NO_MEMORY, "%s: listing joined communicators", where);
    *joined = list;
  }
  for (uint32_t i = 0; checks && i < n; i++) {
    cg_comm_release(checks[i].joined);
    free(checks[i].mine);
    free(checks[i].summaries);
    free(checks[i].all);
    free(checks[i].names);
    free(checks[i].message);
  }
  free(checks);
  free(mine);
  free(all);
  free(bytes);
  free(index);
  return st;
}
