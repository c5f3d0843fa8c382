/* The flight recorder's ring (flight.h). A mutex orders writers and the
 * dump: events come a few per collective step, far below what MPI or a
 * graph launch costs. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commgraph/plan.h"
#include "comm_internal.h"
#include "error.h"
#include "flight.h"
#include "param.h"

typedef struct flight_record {
  uint64_t t_ns; /* CLOCK_REALTIME, so dumps of several hosts line up */
  uint64_t replay, seq, comm_id;
  uint32_t step, node;
  int32_t rank, size;
  uint8_t event, kind, collective;
  char plan[40], name[40];
} flight_record_t;

static flight_record_t ring[CG_FLIGHT_EVENTS];
static uint64_t n_recorded;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const event_names[] = {
#define CG_FLIGHT_TEXT(name, text) text,
    CG_FLIGHT_EVENT_LIST(CG_FLIGHT_TEXT)
#undef CG_FLIGHT_TEXT
};

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static flight_record_t *claim(void) {
  pthread_mutex_lock(&lock);
  flight_record_t *r = &ring[n_recorded++ % CG_FLIGHT_EVENTS];
  memset(r, 0, sizeof *r);
  r->t_ns = now_ns();
  return r;
}

static void copy_name(char *dst, size_t size, const char *src) {
  if (src) snprintf(dst, size, "%s", src);
}

void cg_flight_plan(const cg_plan_t *plan, cg_flight_event_t event, uint64_t replay) {
  flight_record_t *r = claim();
  r->event = (uint8_t)event;
  r->replay = replay;
  r->step = UINT32_MAX;
  copy_name(r->plan, sizeof r->plan, plan->name);
  /* the plan's first communicator names the rank */
  if (plan->n_comms) r->rank = plan->comms[0].comm->rank, r->size = plan->comms[0].comm->size;
  pthread_mutex_unlock(&lock);
}

void cg_flight_step(const cg_plan_t *plan, cg_flight_event_t event, uint64_t replay, uint32_t step, uint64_t seq) {
  const cg_step_t *s = &plan->steps[step];
  flight_record_t *r = claim();
  r->event = (uint8_t)event;
  r->replay = replay;
  r->step = step;
  r->node = s->node;
  r->kind = (uint8_t)s->op_kind;
  r->collective = s->kind == CG_STEP_COLLECTIVE && s->comm;
  if (r->collective) {
    r->seq = seq;
    r->comm_id = s->comm->id;
    r->rank = s->comm->rank, r->size = s->comm->size;
  }
  copy_name(r->plan, sizeof r->plan, plan->name);
  if (s->bucket != CG_NO_STEP)
    snprintf(r->name, sizeof r->name, "bucket %u", s->bucket);
  else if (s->node < plan->n_names)
    copy_name(r->name, sizeof r->name, plan->node_names[s->node]);
  pthread_mutex_unlock(&lock);
}

/* Tabs separate fields; names lose tabs and newlines so a line stays one
 * record. */
static void put_name(FILE *f, const char *key, const char *name) {
  fprintf(f, "\t%s=", key);
  for (const char *c = name; *c; c++) fputc(*c == '\t' || *c == '\n' ? ' ' : *c, f);
}

static void write_ring(FILE *f) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  pthread_mutex_lock(&lock);
  uint64_t first = n_recorded > CG_FLIGHT_EVENTS ? n_recorded - CG_FLIGHT_EVENTS : 0;
  fprintf(f, "# commgraph flight recorder\thost=%s\tpid=%ld\tevents=%llu\trecorded=%llu\n", host, (long)getpid(),
          (unsigned long long)(n_recorded - first), (unsigned long long)n_recorded);
  for (uint64_t i = first; i < n_recorded; i++) {
    const flight_record_t *r = &ring[i % CG_FLIGHT_EVENTS];
    fprintf(f, "%llu.%09llu\t%s\treplay=%llu", (unsigned long long)(r->t_ns / 1000000000u),
            (unsigned long long)(r->t_ns % 1000000000u), event_names[r->event], (unsigned long long)r->replay);
    put_name(f, "plan", r->plan);
    fprintf(f, "\trank=%d\tsize=%d", r->rank, r->size);
    if (r->step != UINT32_MAX) {
      fprintf(f, "\tstep=%u\tnode=%u\tkind=%s", r->step, r->node, cg_node_kind_name((cg_node_kind_t)r->kind));
      put_name(f, "name", r->name);
      if (r->collective)
        fprintf(f, "\tcomm=%016llx\tseq=%llu", (unsigned long long)r->comm_id, (unsigned long long)r->seq);
    }
    fputc('\n', f);
  }
  pthread_mutex_unlock(&lock);
}

cg_status_t cg_flight_dump(FILE *file) {
  if (!file) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_flight_dump: NULL file");
  write_ring(file);
  if (fflush(file) != 0 || ferror(file)) return cg_fail(CG_ERR_IO, "cg_flight_dump: writing the flight recorder failed");
  return CG_SUCCESS;
}

const char *cg_flight_dump_to_dir(void) {
  static _Thread_local char path[1024];
  const char *dir = cg_param_text(CG_PARAM_FLIGHT_DIR);
  path[0] = '\0';
  if (!dir) return path;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  snprintf(path, sizeof path, "%s/cg-flight.%s.%ld.txt", dir, host, (long)getpid());
  FILE *f = fopen(path, "w");
  if (!f) {
    path[0] = '\0';
    return path;
  }
  write_ring(f);
  if (fclose(f) != 0) path[0] = '\0';
  return path;
}
