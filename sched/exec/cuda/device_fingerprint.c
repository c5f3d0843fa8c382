#include "device_fingerprint.h"

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_check.h"
#include "error.h"
#include "fingerprint.h"
#include "plan_lock.h"

typedef struct round {
  cg_comm_t *comm;
  cg_print_t *mine, *all; /* device: this rank's 16 bytes, then every rank's */
  cg_print_t *seen;       /* mapped: every rank's, written where they differ */
  unsigned *flag;         /* mapped: 1 once a replay found them different */
  /* a backend without a gather of its own (the staged ones): the gather as
   * an allgather step of 16 bytes, prepared like a plan's (step.backend_state) */
  cg_step_t step;
} round_t;

struct cg_device_prints {
  round_t *rounds;
  uint32_t n;
  cg_print_t *device;                /* one allocation for every round's mine and all */
  unsigned char *mapped, *mapped_dev; /* every round's flag and seen, host and device addresses */
};

/* How a communicator gathers: its backend's own gather (NCCL), or an
 * allgather step like a plan's (the staged backends); 0 where neither. */
static int can_gather(const cg_backend_t *b) { return b && (b->device_allgather_enqueue || b->device_step_enqueue); }

void cg_device_prints_free(cg_device_prints_t *prints) {
  if (!prints) return;
  for (uint32_t i = 0; prints->rounds && i < prints->n; i++) {
    const round_t *r = &prints->rounds[i];
    const cg_backend_t *b = r->comm->ops->backend;
    if (r->step.backend_state && b->host_step_release) b->host_step_release(r->comm->impl, r->step.backend_state);
  }
  if (prints->device) cudaFree(prints->device);
  if (prints->mapped) cudaFreeHost(prints->mapped);
  free(prints->rounds);
  free(prints);
}

/* A flag's 16 bytes (kept aligned), then the ranks' prints. */
static size_t mapped_bytes(int ranks) { return sizeof(cg_print_t) * (1 + (size_t)ranks); }

/* The gather as a plan step, for a backend without a gather of its own:
 * every rank's 16 bytes into `all`, on the communicator's data channel like
 * the plan's collectives (so it is ordered with them on every rank). */
static cg_status_t prepare_step(round_t *r, const char *where) {
  const cg_backend_t *b = r->comm->ops->backend;
  if (b->device_allgather_enqueue) return CG_SUCCESS;
  r->step = (cg_step_t){.kind = CG_STEP_COLLECTIVE,
                        .op_kind = CG_NODE_ALLGATHER,
                        .node = CG_NO_STEP,
                        .comm_index = CG_NO_LANE,
                        .post_after = CG_NO_STEP,
                        .post_next = CG_NO_STEP,
                        .comm = r->comm,
                        .send = r->mine,
                        .recv = r->all,
                        .count = sizeof(cg_print_t),
                        .dtype = CG_UINT8,
                        .root = -1,
                        .unit = CG_NO_STEP,
                        .bucket = CG_NO_STEP};
  if (!b->host_step_prepare) return CG_SUCCESS;
  cg_status_t st = b->host_step_prepare(&r->step.backend_state, r->comm->impl, &r->step);
  if (st == CG_SUCCESS) return CG_SUCCESS;
  r->step.backend_state = NULL;
  char detail[600];
  snprintf(detail, sizeof detail, "%s", cg_error_last());
  return cg_fail(st, "%s: preparing the replay's fingerprint: %s", where, detail);
}

cg_status_t cg_device_prints_prepare(cg_device_prints_t **out, const cg_plan_t *plan, const char *where) {
  cg_status_t st = CG_SUCCESS;
  cudaError_t err = cudaSuccess;
  size_t device_entries = 0, mapped = 0;
  cg_device_prints_t *prints = calloc(1, sizeof *prints);
  cg_print_t *mine = calloc(plan->n_comms ? plan->n_comms : 1, sizeof *mine);
  if (prints) prints->rounds = calloc(plan->n_comms ? plan->n_comms : 1, sizeof *prints->rounds);
  *out = NULL;
  if (!prints || !prints->rounds || !mine) {
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: allocating the replay's fingerprint", where);
    goto out;
  }
  for (uint32_t c = 0; c < plan->n_comms; c++) {
    cg_comm_t *comm = plan->comms[c].comm;
    /* the index the compile gives the plan on this communicator once it
     * succeeds (compile.c): the plans compiled on it so far */
    cg_print_t print = cg_print_of(plan, c, atomic_load(&comm->compiled));
    if (!can_gather(comm->ops->backend) || !print.collectives) continue;
    /* by agreed id: the same order on every rank */
    uint32_t at = prints->n++;
    while (at > 0 && prints->rounds[at - 1].comm->id > comm->id) {
      prints->rounds[at] = prints->rounds[at - 1];
      mine[at] = mine[at - 1];
      at--;
    }
    mine[at] = print;
    prints->rounds[at] = (round_t){.comm = comm};
    device_entries += 1 + (size_t)comm->size;
    mapped += mapped_bytes(comm->size);
  }
  if (!prints->n) goto out; /* nothing to exchange: no fingerprint */
  if ((err = cudaMalloc((void **)&prints->device, device_entries * sizeof(cg_print_t))) != cudaSuccess) {
    prints->device = NULL;
    st = cg_fail_cuda(err, "cudaMalloc (the replay's fingerprint)", "%s", where);
  } else if ((err = cudaHostAlloc((void **)&prints->mapped, mapped, cudaHostAllocMapped)) != cudaSuccess) {
    prints->mapped = NULL;
    st = cg_fail_cuda(err, "cudaHostAlloc (the replay's fingerprint)", "%s", where);
  } else if ((err = cudaHostGetDevicePointer((void **)&prints->mapped_dev, prints->mapped, 0)) != cudaSuccess) {
    st = cg_fail_cuda(err, "cudaHostGetDevicePointer (the replay's fingerprint)", "%s", where);
  }
  size_t at = 0, at_mapped = 0;
  for (uint32_t i = 0; i < prints->n && st == CG_SUCCESS; i++) {
    round_t *r = &prints->rounds[i];
    r->mine = prints->device + at;
    r->all = r->mine + 1;
    at += 1 + (size_t)r->comm->size;
    r->flag = (unsigned *)(prints->mapped + at_mapped);
    r->seen = (cg_print_t *)(prints->mapped + at_mapped + sizeof(cg_print_t));
    at_mapped += mapped_bytes(r->comm->size);
    if ((err = cudaMemcpy(r->mine, &mine[i], sizeof mine[i], cudaMemcpyHostToDevice)) != cudaSuccess)
      st = cg_fail_cuda(err, "cudaMemcpy (the replay's fingerprint)", "%s", where);
    if (st == CG_SUCCESS) st = prepare_step(r, where);
  }
  if (st == CG_SUCCESS) memset(prints->mapped, 0, mapped);
out:
  free(mine);
  if (st == CG_SUCCESS && prints && prints->n) {
    *out = prints;
    prints = NULL;
  }
  cg_device_prints_free(prints);
  return st;
}

/* The device address of a mapped pointer. */
static void *on_device(const cg_device_prints_t *prints, const void *host) {
  return prints->mapped_dev + ((const unsigned char *)host - prints->mapped);
}

static cg_status_t gather(const round_t *r, void *stream, const cg_wait_t *wait, const char *where) {
  const cg_backend_t *b = r->comm->ops->backend;
  cg_status_t st = b->device_allgather_enqueue
                       ? b->device_allgather_enqueue(r->comm->impl, r->mine, r->all, sizeof(cg_print_t), stream, wait)
                       : b->device_step_enqueue(r->comm->impl, &r->step, stream);
  if (st == CG_SUCCESS) return CG_SUCCESS;
  char detail[600];
  snprintf(detail, sizeof detail, "%s", cg_error_last());
  return cg_fail(st, "%s: the replay's fingerprint: %s", where, detail);
}

/* The backend's own gather runs apart from the steps (backend.h). */
static int is_apart(const round_t *r) { return r->comm->ops->backend->device_allgather_enqueue != NULL; }

cg_status_t cg_device_prints_gather(const cg_device_prints_t *prints, int apart, void *stream, const char *where) {
  for (uint32_t i = 0; prints && i < prints->n; i++) {
    if (is_apart(&prints->rounds[i]) != !!apart) continue;
    cg_status_t st = gather(&prints->rounds[i], stream, NULL, where);
    if (st != CG_SUCCESS) return st;
  }
  return CG_SUCCESS;
}

cg_status_t cg_device_prints_check(const cg_device_prints_t *prints, void *check_stream, const char *where) {
  for (uint32_t i = 0; prints && i < prints->n; i++) {
    const round_t *r = &prints->rounds[i];
    cudaError_t err = cg_fingerprint_check_launch(r->all, r->comm->size, on_device(prints, r->flag),
                                                  on_device(prints, r->seen), (cudaStream_t)check_stream);
    if (err != cudaSuccess) return cg_fail_cuda(err, "the fingerprint's check kernel", "%s", where);
  }
  return CG_SUCCESS;
}

static const round_t *round_of(const cg_device_prints_t *prints, const cg_comm_t *comm) {
  for (uint32_t i = 0; prints && i < prints->n; i++)
    if (prints->rounds[i].comm == comm) return &prints->rounds[i];
  return NULL;
}

int cg_device_prints_has(const cg_device_prints_t *prints, const cg_comm_t *comm) {
  return round_of(prints, comm) != NULL;
}

cg_status_t cg_device_prints_warm_up(const cg_device_prints_t *prints, const cg_comm_t *comm, void *stream,
                                     const cg_wait_t *wait, const char *where) {
  const round_t *r = round_of(prints, comm);
  if (!r) return CG_SUCCESS;
  const cg_backend_t *b = comm->ops->backend;
  cg_status_t st = b->device_allgather_setup ? b->device_allgather_setup(comm->impl, wait) : CG_SUCCESS;
  if (st != CG_SUCCESS) {
    char detail[600];
    snprintf(detail, sizeof detail, "%s", cg_error_last());
    return cg_fail(st, "%s: the replay's fingerprint: %s", where, detail);
  }
  return gather(r, stream, wait, where);
}

int cg_device_prints_pending(const cg_device_prints_t *prints) {
  for (uint32_t i = 0; prints && i < prints->n; i++)
    if (*(volatile unsigned *)prints->rounds[i].flag) return 1;
  return 0;
}

int cg_device_prints_mismatch(cg_device_prints_t *prints, char *text, size_t size) {
  for (uint32_t i = 0; prints && i < prints->n; i++) {
    round_t *r = &prints->rounds[i];
    if (!*(volatile unsigned *)r->flag) continue;
    cg_print_t *all = malloc((size_t)r->comm->size * sizeof *all);
    if (all) memcpy(all, (const void *)r->seen, (size_t)r->comm->size * sizeof *all);
    if (all && !cg_prints_mismatch(text, size, r->comm, all, r->comm->size))
      snprintf(text, size, "the ranks ran different sequences on a communicator (its fingerprints differ)");
    if (!all) snprintf(text, size, "the ranks ran different sequences on a communicator (out of memory for more)");
    *(volatile unsigned *)r->flag = 0;
    free(all);
    return 1;
  }
  return 0;
}
