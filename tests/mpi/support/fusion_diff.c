#include "fusion_diff.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const cg_fd_variant_names[CG_FD_VARIANTS] = {"fusion off", "fusion on, default bucket size",
                                                         "fusion on, small buckets"};

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long env_long(const char *name, long fallback) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 0) : fallback;
}

/* ---- a watchdog: a plan that never finishes (a deadlock) would only show as
 * the suite's time limit; this names the program first */

static atomic_int watch_prog = -1;   /* the program being run, -1 none */
static atomic_long watch_since;      /* when it started, ms */
static atomic_int watch_stop;
static const cg_rp_program_t *watch_p;
static pthread_t watcher;
static int watching;

static long now_ms(void) { return (long)(seconds() * 1000); }

static void *watch(void *arg) {
  (void)arg;
  int reported = -1;
  struct timespec nap = {0, 200 * 1000 * 1000};
  while (!atomic_load(&watch_stop)) {
    nanosleep(&nap, NULL);
    int prog = atomic_load(&watch_prog);
    if (prog < 0 || prog == reported || now_ms() - atomic_load(&watch_since) < 1000L * CG_FD_STUCK_SECONDS) continue;
    reported = prog;
    fprintf(stderr, "rank %d: program %d has run for %d s: stuck? Rerun it with CG_TEST_SEED=%llu "
            "CG_FUSION_TEST_FIRST=%d CG_FUSION_TEST_PROGRAMS=1 CG_FUSION_TEST_VERBOSE=1\n", cg_mpi_rank(), prog,
            CG_FD_STUCK_SECONDS, (unsigned long long)cg_test_seed(), prog);
    if (cg_mpi_rank() == 0) cg_rp_dump(watch_p);
  }
  return NULL;
}

void cg_fd_begin(cg_fd_totals_t *t) {
  memset(t, 0, sizeof *t);
  t->first = env_long("CG_FUSION_TEST_FIRST", 0);
  t->fixed = env_long("CG_FUSION_TEST_PROGRAMS", 0);
  t->verbose = env_long("CG_FUSION_TEST_VERBOSE", 0) != 0;
  t->start = seconds();
  atomic_store(&watch_prog, -1);
  atomic_store(&watch_stop, 0);
  watching = pthread_create(&watcher, NULL, watch, NULL) == 0;
}

int cg_fd_next(const cg_fd_totals_t *t, int prog) {
  long done = prog - t->first;
  double budget = (double)env_long("CG_FUSION_TEST_SECONDS", 20);
  int go = t->fixed > 0 ? done < t->fixed
                        : done < CG_FD_MIN_PROGRAMS || (done < CG_FD_MAX_PROGRAMS && seconds() - t->start < budget);
  MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return go;
}

void cg_fd_program(cg_rp_program_t *p, size_t *small, int prog, int world, int host_func_adds) {
  cg_test_reseed(5000 + (uint64_t)prog);
  memset(p, 0, sizeof *p);
  p->n_comms = 3;
  cg_rp_fusion_opts_t o = {(cg_rp_layout_t)(prog % CG_RP_N_LAYOUTS), host_func_adds, CG_FD_MAX_BYTES,
                           prog % (2 * CG_RP_N_LAYOUTS) == CG_RP_IN_PLACE};
  cg_rp_generate_fusible(p, world, &o);
  watch_p = p;
  atomic_store(&watch_since, now_ms());
  atomic_store(&watch_prog, prog);
  size_t s = (size_t)64 << cg_test_below(11); /* 64 B .. 64 KB */
  s += cg_test_below(s);
  *small = s > 65536 ? 65536 : s;
}

cg_compile_opts_t cg_fd_opts(int v, size_t small) {
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.fusion = v > 0;
  o.bucket_bytes = v == 2 ? small : 0;
  return o;
}

int cg_fd_stats_ok(const cg_rp_program_t *p, int prog, int v, size_t small, const cg_plan_stats_t *s) {
  int ok = s->fused_nodes >= 2 * s->buckets && (s->buckets > 0) == (s->fused_nodes > 0);
  if (v == 0) ok = ok && !s->buckets && !s->copy_bytes && !s->bucket_bytes;
  if (v == 1) ok = ok && s->bucket_bytes > 0;
  if (v == 2) ok = ok && s->bucket_bytes == small;
  if (v > 0 && p->zero_copy) ok = ok && !s->copy_bytes;
  if (!ok)
    fprintf(stderr, "rank %d: program %d, %s (%s layout%s): %zu buckets, %zu fused nodes, %zu copy bytes, buckets of "
            "at most %zu bytes\n", cg_mpi_rank(), prog, cg_fd_variant_names[v], cg_rp_layout_name(p->layout),
            p->zero_copy ? ", every bucket in place" : "", s->buckets, s->fused_nodes, s->copy_bytes, s->bucket_bytes);
  return ok;
}

int cg_fd_compare(const cg_rp_program_t *p, char *const *plan, char *const *ref, int prog, const char *what) {
  int ok = 1;
  for (int a = 0; a < p->n_arenas; a++) {
    size_t bytes = p->arenas[a].elems * cg_dtype_size(p->arenas[a].dtype);
    if (memcmp(plan[a], ref[a], bytes) == 0) continue;
    size_t at = 0, last = bytes - 1, n_diff = 0;
    while (plan[a][at] == ref[a][at]) at++;
    while (plan[a][last] == ref[a][last]) last--;
    for (size_t b = 0; b < bytes; b++) n_diff += plan[a][b] != ref[a][b];
    fprintf(stderr, "rank %d: program %d, %s: arena %d (%s) differs in %zu bytes from byte %zu to %zu (plan %02x, "
            "reference %02x)\n", cg_mpi_rank(), prog, what, a, cg_dtype_name(p->arenas[a].dtype), n_diff, at, last,
            (unsigned char)plan[a][at], (unsigned char)ref[a][at]);
    ok = 0;
  }
  return ok;
}

int cg_fd_first_failure(int mine) {
  int first = mine ? cg_mpi_size() : cg_mpi_rank();
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return first;
}

void cg_fd_count(cg_fd_totals_t *t, const cg_rp_program_t *p, const cg_plan_stats_t *stats) {
  t->programs++;
  t->nodes += (size_t)p->n_nodes;
  t->by_layout[p->layout]++;
  for (int v = 0; v < CG_FD_VARIANTS; v++) {
    t->buckets[v] += stats[v].buckets;
    t->fused[v] += stats[v].fused_nodes;
    t->copy[v] += stats[v].copy_bytes;
    if (v == 0) continue;
    t->layout_buckets[p->layout] += stats[v].buckets;
    t->layout_copy[p->layout] += stats[v].copy_bytes;
  }
  t->zero_copy_fused += p->zero_copy && (stats[1].buckets || stats[2].buckets);
}

void cg_fd_finish(const cg_fd_totals_t *t) {
  atomic_store(&watch_prog, -1);
  atomic_store(&watch_stop, 1);
  if (watching) pthread_join(watcher, NULL);
  watching = 0;
  if (cg_mpi_rank() == 0) {
    printf("%zu programs (%zu scattered, %zu contiguous, %zu in place), %zu nodes, %zu plan runs in %.1f s; all "
           "matched the reference\n", t->programs, t->by_layout[0], t->by_layout[1], t->by_layout[2], t->nodes,
           t->runs, seconds() - t->start);
    for (int v = 0; v < CG_FD_VARIANTS; v++)
      printf("  %s: %zu buckets of %zu nodes, %zu bytes copied per run (rank 0)\n", cg_fd_variant_names[v],
             t->buckets[v], t->fused[v], t->copy[v]);
    for (int l = 0; l < CG_RP_N_LAYOUTS; l++)
      printf("  %s layout, fused plans: %zu buckets, %zu bytes copied per run (rank 0)\n",
             cg_rp_layout_name((cg_rp_layout_t)l), t->layout_buckets[l], t->layout_copy[l]);
    printf("  %zu programs fused with every bucket in place (no copies)\n", t->zero_copy_fused);
    fflush(stdout);
  }
  /* fusion must actually have happened, in place and through copies (not
   * asked of a rerun of chosen programs: CG_FUSION_TEST_PROGRAMS) */
  if (t->fixed > 0) return;
  ck_assert_all_ranks(t->buckets[1] + t->buckets[2] > 0, "no program formed a bucket");
  ck_assert_all_ranks(t->zero_copy_fused > 0, "no program fused with every bucket in place");
  ck_assert_all_ranks(t->layout_copy[CG_RP_SCATTERED] > 0, "no bucket of scattered buffers copied");
}
