/* Fault injection for the replay watchdog (issue 8): four allreduces
 * ("layer3.grad" .. "layer0.grad") compiled with a timeout and replayed five
 * times, on host buffers (MPI backend) or device buffers (NCCL), while the
 * last rank misbehaves in replay 3:
 *
 *   sleep             sleeps three timeouts before its replay
 *   exit              exits without a word (run it under mpiexec
 *                     -disable-auto-cleanup, so the job outlives it)
 *   differ            leaves layer1.grad out of its graph: the compile's
 *                     cross-rank check fails on every rank
 *   differ-unchecked  the same graph difference compiled without the check
 *                     (check_ranks = 0) and without fusion, so only the
 *                     replay can notice: the others wait for a fourth
 *                     allreduce the faulty rank never makes. (Fused, the
 *                     ranks' buckets would differ in size, which MPI does
 *                     not compare: that is what the check is for.)
 *   differ-fingerprint  differ-unchecked on a plan with the replay's
 *                     fingerprint (host plans, device plans on every backend): every
 *                     rank fails the first replay with CG_ERR_MISMATCH at once
 *   swapped-plans     a second plan (the same allreduces, summing) that the faulty rank runs
 *                     before the first in replay 3, the others after it: the
 *                     fingerprints pair the two plans, and every rank fails
 *                     with CG_ERR_MISMATCH instead of mixing their data
 *   count-unchecked   records layer1.grad with half the count, compiled
 *                     without the check and without fusion, with the
 *                     replay's fingerprint: host plans fail the first replay
 *                     with CG_ERR_MISMATCH; an NCCL plan's compile warms up a
 *                     collective of that count on the faulty rank alone, which
 *                     waits for the others until the timeout (it used to wait
 *                     for ever), and every rank fails its compile
 *   dtype-unchecked   records every allreduce as an int32 sum (the same
 *                     bytes), unchecked as above: host plans fail the first
 *                     replay with CG_ERR_MISMATCH; an NCCL plan's compile
 *                     sets up the one-shot path (float allreduces only) on
 *                     the others while the faulty rank warms up NCCL alone:
 *                     the others wait in the one-shot path's agreement, the
 *                     faulty rank in NCCL, each until the timeout (the
 *                     agreement used to wait for ever)
 *   none              behaves
 *
 * and, before the replays, the cases issue 23 found hanging (compile and
 * communicator creation honour the timeout, docs/watchdog.md#compile):
 *
 *   skip-create       never calls cg_comm_create (sleeps three timeouts)
 *   skip-compile      never calls cg_compile (sleeps three timeouts)
 *   finalize          destroys its graph and communicator and finalizes MPI
 *                     instead of compiling
 *   empty-graph       records nothing, so its compile has nobody to check
 *                     with, and goes on to the replays' barrier
 *   other-comm        records its allreduces on a second communicator of the
 *                     same ranks: every rank waits on a communicator the
 *                     others do not use, so every rank reports
 *   skip-arena        (gpu mode: NCCL) never calls cg_nccl_arena_create,
 *                     which the others call right after creating the
 *                     communicator (sleeps three timeouts): they wait for it
 *                     at most the communicator's timeout
 *   skip-wrap         (gpu mode: NCCL) every rank makes an NCCL communicator
 *                     of its own (ncclCommInitRank) and wraps it with
 *                     cg_comm_from_nccl under CG_TIMEOUT (the call has no
 *                     options), but the faulty rank never wraps it
 *   skip-wrapped-arena  (gpu mode: NCCL) skip-arena on such a wrapped
 *                     communicator: its arena waits at most CG_TIMEOUT
 *   skip-tune         (host, gpu) never calls cg_plan_tune after the
 *                     compile (sleeps three timeouts): the others wait in
 *                     its profiling replays at most the timeout, naming the
 *                     step and the rank (issue 23: "anywhere")
 *   stall-device      (gpu, gpu-staged) stalls inside cg_comm_create, after
 *                     the ranks' arrival, in the first CUDA call of its
 *                     device choice (three timeouts, then exits): the others
 *                     wait for it in the agreement that follows
 *   stall-nccl-init   (gpu mode: NCCL) its NCCL init of the plan's
 *                     communicator stalls inside cg_comm_create (on the
 *                     init's own thread): every rank waits in NCCL's init,
 *                     the others in its bootstrap, and every rank reports,
 *                     its roll call hearing the others wait there too
 *
 * The survivors must fail with CG_ERR_TIMEOUT naming the rank that did not
 * answer their roll call.
 *
 * Every rank that sees an error prints "FAULT-REPORT rank R: <status>:
 * <detail>" on stdout, lets the others report for 5% of the timeout, and ends
 * the job with MPI_Abort, as a training job would. Rank 0 prints the
 * wall-clock time the faulty phase began ("FAULT-START <seconds>": the
 * compile for differ, the first replay for differ-unchecked, replay 3
 * otherwise), so a
 * runner (run-faults) can tell how long the job took to end after it.
 *
 * gpu-launch replays with cg_plan_launch on a stream instead of cg_plan_run:
 * nobody waits inside commgraph, so the watchdog's monitor thread notices
 * and the timeout handler reports and ends the job. gpu-staged is gpu on the
 * mpi-staged backend (MPI through host staging) instead of NCCL. gpu-embed
 * replays a CUDA graph of the program's own that embeds the plan (captured
 * around cg_plan_launch) with cudaGraphLaunch: commgraph sees none of its
 * launches, the monitor follows the plan's marks, and the handler checks the
 * drain and destroys the graph, the plan and the communicator before it
 * ends the job; gpu-embed-staged and gpu-embed-hosttransfer are the same on
 * the mpi-staged and hosttransfer backends. gpu-start and gpu-start-staged
 * (NCCL, mpi-staged) replay with cg_plan_start, then synchronize the device
 * themselves (cudaDeviceSynchronize, as a program reading its results
 * before it waits would) and only then call cg_plan_wait: a replay that
 * never ends holds that synchronize, which only the watchdog's monitor can
 * end (issue 23: "anywhere"); the handler drains and tears down as
 * gpu-embed's does. gpu-direct and gpu-embed-direct are gpu-staged and
 * gpu-embed-staged with CG_STAGING_DIRECT on managed buffers
 * (docs/staged.md#direct: MPI gets the buffers themselves, on an MPI that
 * is not CUDA-aware too), so the direct path's abort runs as well;
 * they sum without fusion (an average uses the library's own MPI op, and a
 * bucket's fused buffer is device memory: either keeps a step staged), and a
 * healthy run must show "direct MPI_Iallreduce" in the plan's DOT.
 *
 * In gpu, gpu-staged and gpu-direct (and, from the handler, the gpu-embed
 * and gpu-start modes), a rank that reports also checks that the watchdog's
 * abort let its GPU go: cudaDeviceSynchronize must return cudaSuccess within
 * the 5% of the timeout it waits anyway ("FAULT-DRAINED rank R after S s", or
 * "FAULT-STUCK rank R"). A drained rank then destroys its plan and
 * communicator, as a job that carries on would ("FAULT-DESTROYED rank R
 * after S s"): the destroy waits for the communicator's abort to end.
 *
 * Usage: fault_inject MODE FAULT TIMEOUT_SECONDS, MODE one of host, gpu,
 * gpu-staged, gpu-direct, gpu-launch, gpu-start, gpu-start-staged, gpu-embed,
 * gpu-embed-staged, gpu-embed-hosttransfer, gpu-embed-direct */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commgraph.h"
#include "commgraph/mpi.h"
#if CG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "commgraph/cuda.h"
#endif
#if CG_HAVE_NCCL
#include "commgraph/nccl.h"
#endif
#include "share_gpus.h"

#define COUNT (1 << 16)
#define LAYERS 4
#define REPLAYS 5
#define FAULTY_REPLAY 3

static int rank, size;

/* A result line: on stdout, and appended to FAULT_LINES_DIR/rank<R> when
 * run-faults sets it. mpiexec forwards the ranks' stdout in pieces, so two
 * ranks' lines written at once may interleave there; the runner counts the
 * per-rank files instead. */
static void fault_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fault_line(const char *fmt, ...) {
  char line[4096];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line) line[sizeof line - 2] = '\n'; /* cut, but still one line */
  fputs(line, stdout);
  fflush(stdout);
  const char *dir = getenv("FAULT_LINES_DIR");
  if (!dir) return;
  char path[1024];
  snprintf(path, sizeof path, "%s/rank%d", dir, rank);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  size_t length = strlen(line), done = 0;
  for (ssize_t w; done < length && (w = write(fd, line + done, length - done)) > 0;) done += (size_t)w;
  close(fd);
}

static double wall_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void nap(double seconds) {
  if (seconds <= 0) return;
  struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  nanosleep(&t, NULL);
}

static int gpu_run; /* gpu, gpu-staged or gpu-direct: replays with cg_plan_run on a GPU */
static int managed; /* gpu-direct, gpu-embed-direct: buffers MPI reaches without CUDA-awareness */
static int embedded; /* gpu-embed*: replays of the program's graph that embeds the plan */
static int started; /* gpu-start*: cg_plan_start, the program's own device synchronize, then cg_plan_wait */
static int replaying; /* in the replays: a started replay's failure is the handler's to tear down */

/* stall-device and stall-nccl-init: the faulty rank stalls inside
 * cg_comm_create where the library calls the CUDA runtime or NCCL. This
 * program defines those functions itself (exported, so the dynamic linker
 * binds the library's calls to them) and forwards to the real ones
 * (dlsym(RTLD_NEXT)); the faulty rank arms one stall before it creates its
 * communicator, and the first call there takes it. */
enum { STALL_NONE, STALL_DEVICE, STALL_NCCL_INIT };
static atomic_int stall_armed;
static double stall_s;
#if CG_HAVE_CUDA /* nothing to stall in otherwise */
/* The faulty phase starts here, where the others begin to wait for it (and
 * not when rank 0 calls cg_comm_create: a CUDA context's set-up comes first). */
static void stall_if_armed(int where) {
  int armed = where;
  if (!atomic_compare_exchange_strong(&stall_armed, &armed, STALL_NONE)) return;
  fault_line("FAULT-START %.6f\n", wall_s());
  nap(stall_s);
  _exit(0);
}

cudaError_t cudaGetDeviceCount(int *count) {
  stall_if_armed(STALL_DEVICE);
  cudaError_t (*real)(int *);
  *(void **)&real = dlsym(RTLD_NEXT, "cudaGetDeviceCount");
  return real ? real(count) : cudaErrorUnknown;
}
#if CG_HAVE_NCCL
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int its_rank, ncclConfig_t *config) {
  stall_if_armed(STALL_NCCL_INIT);
  ncclResult_t (*real)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
  *(void **)&real = dlsym(RTLD_NEXT, "ncclCommInitRankConfig");
  return real ? real(comm, nranks, id, its_rank, config) : ncclInternalError;
}
#endif
#endif

#if CG_HAVE_CUDA
static atomic_int drained;
static _Atomic cudaError_t drain_error;
static int rank_device; /* the rank's GPU: a new thread starts on GPU 0 */
static void *synchronize_device(void *arg) {
  (void)arg;
  cudaError_t err = cudaSetDevice(rank_device);
  atomic_store(&drain_error, err != cudaSuccess ? err : cudaDeviceSynchronize());
  atomic_store(&drained, 1);
  return NULL;
}
#endif

/* Waits up to `seconds` for the GPU to finish what it has (a thread of its
 * own: cudaDeviceSynchronize itself has no time limit) and says whether it
 * did; 1 if it did. */
static int wait_drained(double seconds) {
#if CG_HAVE_CUDA
  pthread_t thread;
  double began = wall_s();
  if (pthread_create(&thread, NULL, synchronize_device, NULL) != 0) return 0;
  pthread_detach(thread);
  while (!atomic_load(&drained) && wall_s() - began < seconds) nap(1e-3);
  int ok = atomic_load(&drained) && atomic_load(&drain_error) == cudaSuccess;
  if (ok)
    fault_line("FAULT-DRAINED rank %d after %.3f s\n", rank, wall_s() - began);
  else if (atomic_load(&drained))
    fault_line("FAULT-STUCK rank %d: cudaDeviceSynchronize after the abort failed: %s\n", rank,
               cudaGetErrorString(atomic_load(&drain_error)));
  else
    fault_line("FAULT-STUCK rank %d: the GPU still runs the plan %.3f s after the report\n", rank, seconds);
  return ok;
#else
  (void)seconds;
  return 0;
#endif
}

/* What a job that carries on after the error would do: destroy the plan
 * and its communicator. After an abort, the communicator's destroy waits
 * for the abort to end (graph/comm.c), so this also times the abort. */
static cg_plan_t *plan_in_use;
static cg_comm_t *comm_in_use;
#if CG_HAVE_CUDA
static cudaGraphExec_t embedding_in_use; /* gpu-embed: the program's graph that holds the plan */
#endif
static atomic_int torn_down; /* gpu-embed: the handler and fail() may both get here */
static void destroy_after_drain(void) {
  if (atomic_exchange(&torn_down, 1)) return;
  double began = wall_s();
#if CG_HAVE_CUDA
  if (embedding_in_use) cudaGraphExecDestroy(embedding_in_use); /* before the plan it holds */
  embedding_in_use = NULL;
#endif
  cg_plan_destroy(plan_in_use);
  double plan_done = wall_s();
  cg_comm_destroy(comm_in_use);
  plan_in_use = NULL;
  comm_in_use = NULL;
  double ended = wall_s();
  fault_line("FAULT-DESTROYED rank %d after %.3f s (plan %.3f s, communicator %.3f s)\n", rank, ended - began,
             plan_done - began, ended - plan_done);
}

/* gpu-embed: where the main thread waits once the handler runs */
static void park(void) {
  for (;;) nap(0.01); /* the handler ends the job */
}

static atomic_int handler_called;
static void fail(cg_status_t st, double timeout_s) {
  double began = wall_s();
  fault_line("FAULT-REPORT rank %d: %s: %s\n", rank, cg_status_string(st), cg_error_last());
  /* gpu-start: the monitor's report comes with its handler, which may be a
   * moment behind the abort that ended the synchronize */
  while (started && replaying && !atomic_load(&handler_called) && wall_s() - began < 0.02 * timeout_s) nap(1e-3);
  /* gpu-embed, gpu-start: once the watchdog's handler runs it drains, tears
   * down and ends the job; a failure the main thread meets meanwhile (the
   * second plan of swapped-plans on the aborted communicator) leaves that
   * to it */
  if ((embedded || started) && atomic_load(&handler_called)) park();
  /* after a compile's or creation's timeout nothing ran on the GPU and the
   * job is to end: an ordinary NCCL teardown (about 0.25 s per communicator)
   * would only delay the abort */
  int before_replays = !plan_in_use && st == CG_ERR_TIMEOUT;
  /* without a communicator nothing ran on the GPU: nothing to drain */
  if ((gpu_run || embedded || started) && comm_in_use && wait_drained(0.05 * timeout_s) && !before_replays)
    destroy_after_drain();
  nap(0.05 * timeout_s - (wall_s() - began));
  /* the cross-rank check fails on every rank alike, so all of them are here
   * and none is aborted: each finishes its destroy (an ordinary NCCL
   * teardown, which takes a good part of a second on H100) before the job
   * ends */
  if (st == CG_ERR_MISMATCH) MPI_Barrier(MPI_COMM_WORLD);
  MPI_Abort(MPI_COMM_WORLD, 3);
}

/* gpu-launch, gpu-start and gpu-embed: the watchdog's handler, on a thread
 * of its own (or the waiter's). gpu-embed and gpu-start then check that the
 * abort drained the GPU and destroy what a job that carries on would; the
 * main thread has stopped replaying (handler_called). */
static double handler_timeout_s;
/* gpu-embed: the main thread launches the program's graph only while no
 * timeout was heard (under replay_lock), so once the handler set
 * handler_called no launch follows, and it may drain and tear the graph,
 * the plan and the communicator down wherever the main thread waits: in a
 * replay's poll (it parks), in the replays' barrier (it stays there), or in
 * the second plan's run of swapped-plans (which fails). */
static pthread_mutex_t replay_lock = PTHREAD_MUTEX_INITIALIZER;
/* gpu-start: the main thread's cg_plan_wait and the handler's teardown
 * exclude each other, unless the handler runs inside that wait (on the
 * waiting thread, which reported it) */
static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int in_wait;
static void on_timeout(cg_status_t st, const char *report, void *arg) {
  (void)arg;
  double began = wall_s();
#if CG_HAVE_CUDA
  cudaSetDevice(rank_device); /* a thread of the watchdog's starts on GPU 0 */
#endif
  int exclude_wait = started && !in_wait;
  if (exclude_wait) pthread_mutex_lock(&wait_lock);
  pthread_mutex_lock(&replay_lock);
  atomic_store(&handler_called, 1);
  pthread_mutex_unlock(&replay_lock);
  if (exclude_wait) pthread_mutex_unlock(&wait_lock);
  fault_line("FAULT-REPORT rank %d: %s: %s\n", rank, cg_status_string(st), report);
  if ((embedded || started) && wait_drained(0.05 * handler_timeout_s - (wall_s() - began)))
    destroy_after_drain();
  nap(0.05 * handler_timeout_s - (wall_s() - began));
  MPI_Abort(MPI_COMM_WORLD, 3);
}

static void buffer_free(void *p, int gpu) {
#if CG_HAVE_CUDA
  if (gpu) {
    cudaFree(p);
    return;
  }
#endif
  (void)gpu;
  free(p);
}

static void *buffer(int gpu) {
#if CG_HAVE_CUDA
  void *p = NULL;
  if (gpu) {
    cudaError_t e = managed ? cudaMallocManaged(&p, COUNT * sizeof(float), cudaMemAttachGlobal)
                            : cudaMalloc(&p, COUNT * sizeof(float));
    if (e != cudaSuccess || cudaMemset(p, 0, COUNT * sizeof(float)) != cudaSuccess) return NULL;
    return p;
  }
#endif
  (void)gpu;
  return calloc(COUNT, sizeof(float));
}

/* A launch on the program's stream, then a wait that polls the stream (as
 * a training loop would, between its own kernels); a hang ends in the
 * handler. */
static cg_status_t launch_and_wait(cg_plan_t *plan) {
#if CG_HAVE_CUDA
  static cudaStream_t stream;
  if (!stream && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return CG_ERR_BACKEND;
  cg_status_t st = cg_plan_launch(plan, stream);
  if (st != CG_SUCCESS) return st;
  cudaError_t err;
  while ((err = cudaStreamQuery(stream)) == cudaErrorNotReady) nap(1e-4);
  return err == cudaSuccess ? CG_SUCCESS : CG_ERR_BACKEND;
#else
  (void)plan;
  return CG_ERR_UNSUPPORTED;
#endif
}

/* gpu-start: see `started`; after a report the handler has the plan, and
 * this thread parks. */
static cg_status_t start_synchronize_wait(cg_plan_t *plan) {
#if CG_HAVE_CUDA
  cg_status_t st = cg_plan_start(plan);
  if (st != CG_SUCCESS) return st;
  cudaError_t err = cudaDeviceSynchronize();
  pthread_mutex_lock(&wait_lock);
  if (atomic_load(&handler_called)) {
    pthread_mutex_unlock(&wait_lock);
    park();
  }
  in_wait = 1;
  st = cg_plan_wait(plan);
  in_wait = 0;
  pthread_mutex_unlock(&wait_lock);
  return st == CG_SUCCESS && err != cudaSuccess ? CG_ERR_BACKEND : st;
#else
  (void)plan;
  return CG_ERR_UNSUPPORTED;
#endif
}

/* gpu-embed: one replay of the program's graph, polled as a training loop
 * would; after a timeout the handler has the plan, and this thread waits
 * for the job's end (park) instead of replaying a graph on aborted
 * communicators. */

static cg_status_t replay_embedding(void) {
#if CG_HAVE_CUDA
  static cudaStream_t stream;
  if (!stream && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return CG_ERR_BACKEND;
  pthread_mutex_lock(&replay_lock);
  if (atomic_load(&handler_called)) {
    pthread_mutex_unlock(&replay_lock);
    park();
  }
  cudaError_t err = cudaGraphLaunch(embedding_in_use, stream);
  pthread_mutex_unlock(&replay_lock);
  if (err != cudaSuccess) return CG_ERR_BACKEND;
  while ((err = cudaStreamQuery(stream)) == cudaErrorNotReady && !atomic_load(&handler_called)) nap(1e-4);
  if (atomic_load(&handler_called)) park();
  return err == cudaSuccess ? CG_SUCCESS : CG_ERR_BACKEND;
#else
  return CG_ERR_UNSUPPORTED;
#endif
}

/* gpu-embed: the program's graph, captured around cg_plan_launch. */
static cg_status_t embed_plan(cg_plan_t *plan) {
#if CG_HAVE_CUDA
  cudaStream_t stream;
  cudaGraph_t graph = NULL;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return CG_ERR_BACKEND;
  cg_status_t st = CG_ERR_BACKEND;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    st = cg_plan_launch(plan, stream);
    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess && st == CG_SUCCESS) st = CG_ERR_BACKEND;
  }
  if (st == CG_SUCCESS && cudaGraphInstantiate(&embedding_in_use, graph, 0) != cudaSuccess) st = CG_ERR_BACKEND;
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return st;
#else
  (void)plan;
  return CG_ERR_UNSUPPORTED;
#endif
}

#if CG_HAVE_NCCL
/* skip-wrap, skip-wrapped-arena: the program's own NCCL communicator on its
 * node-local GPU, wrapped with CG_TIMEOUT set to the run's timeout. A setup
 * failure ends the job: it is not the fault under test. */
static ncclComm_t program_nccl;
static cg_status_t wrap_program_nccl(cg_comm_t **out, int skip, const char *timeout_text, int faulty) {
  MPI_Comm local;
  int local_rank = 0, devices = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_free(&local);
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  int ok = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0 &&
           cudaSetDevice(local_rank % devices) == cudaSuccess && (rank != 0 || ncclGetUniqueId(&id) == ncclSuccess);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (!ok || ncclCommInitRank(&program_nccl, size, id, rank) != ncclSuccess) {
    fprintf(stderr, "fault_inject: rank %d: making the program's NCCL communicator failed\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  setenv("CG_TIMEOUT", timeout_text, 1);
  if (skip) {
    if (rank == 0) fault_line("FAULT-START %.6f\n", wall_s());
    if (faulty) nap(3 * atof(timeout_text)), _exit(0);
  }
  return cg_comm_from_nccl(out, program_nccl, MPI_COMM_WORLD);
}
#endif

/* Whether the plan's DOT holds `what`. */
static int plan_names(const cg_plan_t *plan, const char *what) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return 0;
  cg_status_t st = cg_plan_write_dot(plan, f);
  fclose(f);
  int found = st == CG_SUCCESS && text && strstr(text, what) != NULL;
  free(text);
  return found;
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  static const char *const modes[] = {"host",           "gpu",       "gpu-staged",       "gpu-direct",
                                      "gpu-launch",     "gpu-start", "gpu-start-staged", "gpu-embed",
                                      "gpu-embed-staged", "gpu-embed-hosttransfer", "gpu-embed-direct"};
  int known = 0;
  for (size_t m = 0; argc == 4 && m < sizeof modes / sizeof *modes; m++) known |= strcmp(argv[1], modes[m]) == 0;
  if (!known) {
    if (rank == 0)
      fprintf(stderr, "usage: fault_inject host|gpu|gpu-staged|gpu-direct|gpu-launch|gpu-start|gpu-start-staged|"
              "gpu-embed|gpu-embed-staged|"
              "gpu-embed-hosttransfer|gpu-embed-direct "
              "none|sleep|exit|differ|differ-unchecked|differ-fingerprint|swapped-plans|count-unchecked|"
              "dtype-unchecked|"
              "skip-create|skip-compile|finalize|empty-graph|other-comm|skip-arena|skip-wrap|skip-wrapped-arena|"
              "skip-tune|"
              "stall-device|stall-nccl-init "
              "SECONDS\n");
    MPI_Finalize();
    return 2;
  }
  const char *mode = argv[1];
  embedded = strncmp(mode, "gpu-embed", 9) == 0;
  int launch = strcmp(mode, "gpu-launch") == 0;
  started = strncmp(mode, "gpu-start", 9) == 0;
  managed = strcmp(mode, "gpu-direct") == 0 || strcmp(mode, "gpu-embed-direct") == 0;
  int staged = managed || strcmp(mode, "gpu-staged") == 0 || strcmp(mode, "gpu-embed-staged") == 0 ||
               strcmp(mode, "gpu-start-staged") == 0;
  int hosttransfer = strcmp(mode, "gpu-embed-hosttransfer") == 0;
  gpu_run = strcmp(mode, "gpu") == 0 || strcmp(mode, "gpu-staged") == 0 || strcmp(mode, "gpu-direct") == 0;
  int gpu = strcmp(mode, "host") != 0;
  if (gpu) cg_test_share_gpus_setup(rank); /* run-faults: CG_TEST_SHARE_GPUS=1, ranks above the GPUs */
  int faulty = rank == size - 1;
  const char *fault = argv[2];
  double timeout_s = atof(argv[3]);
  handler_timeout_s = timeout_s;
  if (launch || embedded || started) {
    /* the handler runs on a thread of the watchdog's and calls MPI */
    if (provided < MPI_THREAD_MULTIPLE) {
      if (rank == 0) fprintf(stderr, "fault_inject: %s needs MPI_THREAD_MULTIPLE\n", mode);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    cg_set_timeout_handler(on_timeout, NULL);
  }
  int printed = strcmp(fault, "differ-fingerprint") == 0, swapped = strcmp(fault, "swapped-plans") == 0;
  int halved = strcmp(fault, "count-unchecked") == 0, as_int = strcmp(fault, "dtype-unchecked") == 0;
  int unchecked = printed || halved || as_int || strcmp(fault, "differ-unchecked") == 0,
      differs = unchecked || strcmp(fault, "differ") == 0;
  int other_comm = strcmp(fault, "other-comm") == 0;

  cg_comm_t *comm = NULL;
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  if (gpu) {
    o.backend = staged ? CG_BACKEND_MPI : hosttransfer ? CG_BACKEND_HOSTTRANSFER : CG_BACKEND_NCCL;
    o.device = CG_DEVICE_LOCAL_RANK;
    if (managed) o.staging = CG_STAGING_DIRECT;
  }
  o.timeout_s = timeout_s;
  if (strcmp(fault, "skip-create") == 0) {
    if (rank == 0) fault_line("FAULT-START %.6f\n", wall_s());
    if (faulty) nap(3 * timeout_s), _exit(0);
  }
  int stall = strcmp(fault, "stall-device") == 0 ? STALL_DEVICE
              : strcmp(fault, "stall-nccl-init") == 0 ? STALL_NCCL_INIT
                                                      : STALL_NONE;
  if (stall != STALL_NONE) {
#if CG_HAVE_CUDA
    /* the driver's set-up on every rank first (the call is not armed yet): the
     * others then wait from the moment the faulty rank stalls */
    int devices = 0;
    cudaGetDeviceCount(&devices);
#endif
    stall_s = 3 * timeout_s;
    if (faulty) atomic_store(&stall_armed, stall);
  }
  int skip_wrap = strcmp(fault, "skip-wrap") == 0, wrapped_arena = strcmp(fault, "skip-wrapped-arena") == 0;
  cg_status_t st = CG_SUCCESS;
#if CG_HAVE_NCCL
  if (gpu && (skip_wrap || wrapped_arena))
    st = wrap_program_nccl(&comm, skip_wrap, argv[3], faulty);
  else
#endif
    st = cg_comm_create(&comm, MPI_COMM_WORLD, &o);
  (void)skip_wrap, (void)wrapped_arena; /* NCCL's faults */
  if (st != CG_SUCCESS) fail(st, timeout_s);
  comm_in_use = comm;
  cg_comm_t *second = NULL; /* other-comm: the faulty rank's graph uses it */
  if (other_comm && (st = cg_comm_create(&second, MPI_COMM_WORLD, &o)) != CG_SUCCESS) fail(st, timeout_s);
#if CG_HAVE_CUDA
  int device = CG_DEVICE_HOST;
  if (gpu && ((st = cg_comm_device(&device, comm)) != CG_SUCCESS || cudaSetDevice(device) != cudaSuccess))
    fail(st != CG_SUCCESS ? st : CG_ERR_BACKEND, timeout_s);
  rank_device = device;
#endif
#if CG_HAVE_NCCL
  if (gpu && (strcmp(fault, "skip-arena") == 0 || wrapped_arena)) {
    /* collective: the others wait for the faulty rank at most the
     * communicator's timeout, then a second arena is refused at once */
    int version = 0;
#if defined(NCCL_WIN_COLL_SYMMETRIC)
    if (ncclGetVersion(&version) != ncclSuccess) version = 0;
#endif
    if (version < 22700) { /* no symmetric windows: the arena is plain device memory, made by each rank alone */
      if (rank == 0) fault_line("FAULT-NOT-APPLICABLE NCCL %d has no symmetric windows\n", version);
      cg_comm_destroy(comm);
      if (program_nccl) ncclCommDestroy(program_nccl); /* after its wrapper */
      MPI_Finalize();
      return 0;
    }
    if (rank == 0) fault_line("FAULT-START %.6f\n", wall_s());
    if (faulty) nap(3 * timeout_s), _exit(0);
    cg_arena_t *arena = NULL;
    st = cg_nccl_arena_create(&arena, comm, COUNT * sizeof(float), NULL);
    if (st == CG_ERR_TIMEOUT) {
      double began = wall_s();
      cg_arena_t *again = NULL;
      cg_status_t st2 = cg_nccl_arena_create(&again, comm, COUNT * sizeof(float), NULL);
      if (st2 == CG_ERR_TIMEOUT && wall_s() - began < 0.25 * timeout_s)
        fault_line("FAULT-REFUSED rank %d after %.3f s\n", rank, wall_s() - began);
      cg_arena_destroy(again);
      st = st2; /* the refusal repeats the first report, which fail() prints */
    }
    if (st != CG_SUCCESS) fail(st, timeout_s);
    cg_arena_destroy(arena);
  }
#endif
  cg_graph_t *g = NULL;
  cg_graph_opts_t go = CG_GRAPH_OPTS_INIT;
  go.name = "train step";
  if ((st = cg_graph_create(&g, &go)) != CG_SUCCESS) fail(st, timeout_s);
  void *grads[LAYERS];
  for (int l = LAYERS - 1; l >= 0; l--) {
    if (!(grads[l] = buffer(gpu))) fail(CG_ERR_NO_MEMORY, timeout_s);
    if (differs && faulty && l == 1) continue;
    if (faulty && strcmp(fault, "empty-graph") == 0) continue;
    cg_node_t node;
    char name[32];
    snprintf(name, sizeof name, "layer%d.grad", l);
    cg_comm_t *on = other_comm && faulty ? second : comm;
    /* the direct modes sum: MPI has no average, and a step on the library's
     * own MPI op is staged through host memory even under CG_STAGING_DIRECT */
    cg_redop_t op = managed || (as_int && faulty) ? CG_SUM : CG_AVG;
    size_t count = halved && faulty && l == 1 ? COUNT / 2 : COUNT;
    cg_dtype_t dtype = as_int && faulty ? CG_INT32 : CG_FLOAT32;
    if ((st = cg_allreduce(&node, g, on, grads[l], grads[l], count, dtype, op)) != CG_SUCCESS ||
        (st = cg_node_name(g, node, name)) != CG_SUCCESS)
      fail(st, timeout_s);
  }
  int at_compile = (differs && !unchecked) || ((halved || as_int) && gpu) || other_comm ||
                   !strcmp(fault, "skip-compile") || !strcmp(fault, "finalize") || !strcmp(fault, "empty-graph");
  if (rank == 0 && at_compile) fault_line("FAULT-START %.6f\n", wall_s());
  if (faulty && strcmp(fault, "skip-compile") == 0) nap(3 * timeout_s), _exit(0);
  if (faulty && strcmp(fault, "finalize") == 0) {
    cg_graph_destroy(g);
    cg_comm_destroy(comm);
    MPI_Finalize();
    return 0;
  }
  cg_compile_opts_t co = CG_COMPILE_OPTS_INIT;
  co.timeout_s = timeout_s;
  co.check_ranks = !unchecked;
  co.fusion = !unchecked && !managed; /* a bucket's fused buffer is device memory: staged, not direct */
  co.fingerprint = printed || swapped || halved || as_int; /* the others see the watchdog at work */
  cg_plan_t *plan = NULL, *other = NULL;
  st = cg_compile(&plan, g, &co);
  if (st == CG_SUCCESS && swapped) {
    /* a second plan of the same shape (so MPI pairs its messages with the
     * first's without complaint), summing instead of averaging: run in
     * different orders, the ranks would mix the two plans' data silently */
    cg_graph_t *g2 = NULL;
    st = cg_graph_create(&g2, NULL);
    for (int l = LAYERS - 1; l >= 0 && st == CG_SUCCESS; l--)
      st = cg_allreduce(NULL, g2, comm, grads[l], grads[l], COUNT, CG_FLOAT32, CG_SUM);
    if (st == CG_SUCCESS) st = cg_compile(&other, g2, &co);
    cg_graph_destroy(g2);
  }
  if (st == CG_ERR_TIMEOUT) {
    /* the timed-out round stays posted: the communicator must now refuse
     * at once instead of waiting again, repeating the first report (which
     * fail() prints) */
    double began = wall_s();
    cg_plan_t *again = NULL;
    cg_status_t st2 = cg_compile(&again, g, &co);
    if (st2 == CG_ERR_TIMEOUT && wall_s() - began < 0.25 * timeout_s)
      fault_line("FAULT-REFUSED rank %d after %.3f s\n", rank, wall_s() - began);
    cg_plan_destroy(again);
    st = st2;
  }
  if (st == CG_SUCCESS && strcmp(fault, "skip-tune") == 0) {
    /* every rank but the faulty one tunes the plan: they wait in its
     * profiling replays, at most the timeout */
    plan_in_use = plan;
    if (rank == 0) fault_line("FAULT-START %.6f\n", wall_s());
    if (faulty) nap(3 * timeout_s), _exit(0);
    cg_tune_opts_t to = CG_TUNE_OPTS_INIT;
    to.compile = co;
    cg_plan_t *tuned = NULL;
    st = cg_plan_tune(&tuned, plan, g, &to);
    cg_plan_destroy(tuned);
    if (st == CG_SUCCESS) st = CG_ERR_INTERNAL; /* tuned without the faulty rank: cannot be */
  }
  cg_graph_destroy(g); /* before fail(): its communicator destroy is then the last reference */
  /* other-comm's second communicator is left to the job's end on failure:
   * an NCCL teardown takes a good part of a second */
  if (st != CG_SUCCESS) fail(st, timeout_s);
  cg_comm_destroy(second);
  plan_in_use = plan;
  /* gpu.faults.oneshot, .twoshot: the plan must take that kernel of
   * commgraph's ("one-shot", "two-shot"), or the run would test NCCL's
   * kernels only (checked once, in the healthy run) */
  const char *expect = getenv("FAULT_EXPECT_KERNEL");
  char kernel[64];
  if (expect && expect[0] && strcmp(fault, "none") == 0) {
    snprintf(kernel, sizeof kernel, "%s allreduce", expect);
    if (!plan_names(plan, kernel)) {
      fprintf(stderr, "fault_inject: rank %d: FAULT_EXPECT_KERNEL=%s but the plan's DOT names no %s\n", rank, expect,
              kernel);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  }
  /* the direct modes: MPI must get the buffers themselves, or the run tests staging through host memory */
  if (managed && strcmp(fault, "none") == 0 && !plan_names(plan, "direct MPI_Iallreduce")) {
    fprintf(stderr, "fault_inject: rank %d: %s, but the plan's DOT names no direct MPI_Iallreduce\n", rank, mode);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  if (embedded && (st = embed_plan(plan)) != CG_SUCCESS) fail(st, timeout_s);
  replaying = 1;

  for (int replay = 1; replay <= REPLAYS; replay++) {
    MPI_Barrier(MPI_COMM_WORLD); /* every replay starts together: the timeout measures the fault alone */
    /* an unchecked difference shows from the first replay on */
    if (rank == 0 && replay == (unchecked ? 1 : FAULTY_REPLAY) && !at_compile)
      fault_line("FAULT-START %.6f\n", wall_s());
    if (replay == FAULTY_REPLAY) {
      if (faulty && strcmp(fault, "sleep") == 0) nap(3 * timeout_s);
      if (faulty && strcmp(fault, "exit") == 0) _exit(0);
    }
    int other_first = swapped && faulty && replay == FAULTY_REPLAY;
    if (other_first && (st = cg_plan_run(other)) != CG_SUCCESS) fail(st, timeout_s);
    if (embedded) {
      if ((st = replay_embedding()) != CG_SUCCESS) fail(st, timeout_s);
    } else if (launch) {
      if ((st = launch_and_wait(plan)) != CG_SUCCESS) fail(st, timeout_s);
    } else if (started) {
      if ((st = start_synchronize_wait(plan)) != CG_SUCCESS) fail(st, timeout_s);
    } else if ((st = cg_plan_run(plan)) != CG_SUCCESS) {
      fail(st, timeout_s);
    }
    if (swapped && !other_first && (st = cg_plan_run(other)) != CG_SUCCESS) fail(st, timeout_s);
  }
  cg_plan_destroy(other);
  if (rank == 0) fault_line("FAULT-NONE all %d replays finished\n", REPLAYS);
#if CG_HAVE_CUDA
  if (embedding_in_use) cudaGraphExecDestroy(embedding_in_use);
#endif
  cg_plan_destroy(plan);
  cg_comm_destroy(comm);
  for (int l = 0; l < LAYERS; l++) buffer_free(grads[l], gpu);
  MPI_Finalize();
  return 0;
}
