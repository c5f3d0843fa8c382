/* C11 <threads.h> on top of pthreads, for the ThreadSanitizer build only
 * (CG_TSAN: compiled into every test program): glibc's thrd_create, mtx_lock,
 * cnd_wait and call_once go through glibc-internal pthread entry points that
 * ThreadSanitizer does not intercept (google/sanitizers#1195, #1603), so
 * without this it neither sees those threads and locks nor survives the
 * first instrumented function on such a thread. Same types, same results. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

_Static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t), "mtx_t");
_Static_assert(sizeof(cnd_t) == sizeof(pthread_cond_t), "cnd_t");
_Static_assert(sizeof(thrd_t) == sizeof(pthread_t), "thrd_t");

static int map(int e) {
  switch (e) {
  case 0: return thrd_success;
  case ENOMEM: return thrd_nomem;
  case ETIMEDOUT: return thrd_timedout;
  case EBUSY: return thrd_busy;
  default: return thrd_error;
  }
}

typedef struct { thrd_start_t func; void *arg; } start_t;
static void *trampoline(void *p) {
  start_t s = *(start_t *)p;
  free(p);
  return (void *)(intptr_t)s.func(s.arg);
}
int thrd_create(thrd_t *t, thrd_start_t func, void *arg) {
  start_t *s = malloc(sizeof *s);
  if (!s) return thrd_nomem;
  s->func = func;
  s->arg = arg;
  int e = pthread_create((pthread_t *)t, NULL, trampoline, s);
  if (e) free(s);
  return map(e);
}
int thrd_join(thrd_t t, int *res) {
  void *r;
  int e = pthread_join((pthread_t)t, &r);
  if (!e && res) *res = (int)(intptr_t)r;
  return map(e);
}
int thrd_detach(thrd_t t) { return map(pthread_detach((pthread_t)t)); }
int mtx_init(mtx_t *m, int type) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  if (type & mtx_recursive) pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  int e = pthread_mutex_init((pthread_mutex_t *)m, &a);
  pthread_mutexattr_destroy(&a);
  return map(e);
}
int mtx_lock(mtx_t *m) { return map(pthread_mutex_lock((pthread_mutex_t *)m)); }
int mtx_trylock(mtx_t *m) { return map(pthread_mutex_trylock((pthread_mutex_t *)m)); }
int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts) {
  return map(pthread_mutex_timedlock((pthread_mutex_t *)m, ts));
}
int mtx_unlock(mtx_t *m) { return map(pthread_mutex_unlock((pthread_mutex_t *)m)); }
void mtx_destroy(mtx_t *m) { pthread_mutex_destroy((pthread_mutex_t *)m); }
int cnd_init(cnd_t *c) { return map(pthread_cond_init((pthread_cond_t *)c, NULL)); }
int cnd_signal(cnd_t *c) { return map(pthread_cond_signal((pthread_cond_t *)c)); }
int cnd_broadcast(cnd_t *c) { return map(pthread_cond_broadcast((pthread_cond_t *)c)); }
int cnd_wait(cnd_t *c, mtx_t *m) { return map(pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m)); }
int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts) {
  return map(pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, ts));
}
void cnd_destroy(cnd_t *c) { pthread_cond_destroy((pthread_cond_t *)c); }
void call_once(once_flag *f, void (*func)(void)) { pthread_once((pthread_once_t *)&f->__data, func); }
