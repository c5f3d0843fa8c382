/* Aborting communicators (comm_abort.h): the job a thread of its own runs. */
#include "comm_abort.h"

#include <stdlib.h>

#include "backend.h"
#include "comm_internal.h"
#include "cuda_thread.h"

typedef struct abort_job {
  cg_comm_t **comms; /* not retained: see cg_comm_abort_begin */
  uint32_t n;
  int device;
} abort_job_t;

static void *run_abort(void *arg) {
  abort_job_t *job = arg;
  /* also when it runs inline on the program's thread: its mode comes back */
  enum cudaStreamCaptureMode mode = cg_cuda_thread_relax_capture();
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(job->device);
  for (uint32_t i = 0; i < job->n; i++) {
    job->comms[i]->ops->backend->abort(job->comms[i]->impl);
    cg_comm_abort_end(job->comms[i]); /* then never touched again: its destroy may go on now */
  }
  cudaSetDevice(previous);
  free(job->comms);
  free(job);
  cudaThreadExchangeStreamCaptureMode(&mode);
  return NULL;
}

void cg_comm_abort_each(cg_comm_t *(*comm_at)(const void *, uint32_t), const void *from, uint32_t n, int device,
                        cg_status_t status, const char *report) {
  abort_job_t *job = calloc(1, sizeof *job);
  if (job) job->comms = calloc(n ? n : 1, sizeof *job->comms);
  if (job) job->device = device;
  for (uint32_t c = 0; c < n; c++) {
    cg_comm_t *comm = comm_at(from, c);
    const cg_backend_t *b = comm->ops->backend;
    if (!b || !b->abort || !cg_comm_mark_aborted(comm, status, report)) continue;
    if (b->abort_never_blocks || !job || !job->comms) {
      b->abort(comm->impl); /* inline also when no thread can be had */
      continue;
    }
    cg_comm_abort_begin(comm); /* the caller's reference keeps it alive here */
    job->comms[job->n++] = comm;
  }
  if (job && job->n) {
    if (!cg_cuda_thread_start_detached(run_abort, job)) run_abort(job); /* frees the job */
    return;
  }
  if (job) free(job->comms);
  free(job);
}

static cg_comm_t *list_comm_at(const void *list, uint32_t i) { return ((cg_comm_t *const *)list)[i]; }

void cg_comm_abort_list(cg_comm_t *const *comms, uint32_t n, int device, cg_status_t status, const char *report) {
  cg_comm_abort_each(list_comm_at, comms, n, device, status, report);
}
