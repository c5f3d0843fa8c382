/* Communicators over MPI (host buffers), the MPI part every MPI-based
 * communicator shares (duplicates, agreed id), and the MPI backend's table. */
#include <limits.h>
#include <threads.h>
#include <stdint.h>
#include <stdlib.h>

#include "graph_internal.h"
#include "commgraph/mpi.h"
#include "error.h"
#include "memory_kind.h"
#include "mpi_backend.h"

/* Communicator ids agreed by all ranks of a communicator, so messages name a
 * communicator the same way everywhere and the cross-rank check can find one a
 * rank's graph does not use: each rank proposes its next number and all take
 * the largest. Disjoint communicators (the parts of a split) can agree on the
 * same number, so the id also carries the MPI_COMM_WORLD rank of the
 * communicator's rank 0: (number << 24) | leader. Creations in one process are
 * serialized so two threads cannot agree on the same number. */
static uint64_t next_agreed_number = 1;
static mtx_t creation_lock;
static once_flag creation_lock_once = ONCE_FLAG_INIT;
static void init_creation_lock(void) { mtx_init(&creation_lock, mtx_plain); }

cg_status_t cg_mpi_agree_on_id(uint64_t *out, MPI_Comm comm) {
  call_once(&creation_lock_once, init_creation_lock);
  mtx_lock(&creation_lock);
  unsigned long long mine = next_agreed_number, agreed = 0;
  int err = MPI_Allreduce(&mine, &agreed, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
  if (err == MPI_SUCCESS) next_agreed_number = agreed + 1;
  mtx_unlock(&creation_lock);
  if (err != MPI_SUCCESS) return cg_mpi_fail(err, "cg_comm_create: MPI_Allreduce");
  int leader = 0, zero = 0;
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  if ((err = MPI_Comm_group(comm, &group)) == MPI_SUCCESS && (err = MPI_Comm_group(MPI_COMM_WORLD, &world)) == MPI_SUCCESS)
    err = MPI_Group_translate_ranks(group, 1, &zero, world, &leader);
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  if (err != MPI_SUCCESS) return cg_mpi_fail(err, "cg_comm_create: MPI_Group_translate_ranks");
  if (leader == MPI_UNDEFINED) leader = 0xFFFFFF; /* not in MPI_COMM_WORLD (spawned): number alone */
  *out = ((uint64_t)agreed << 24) | ((uint64_t)leader & 0xFFFFFFu);
  return CG_SUCCESS;
}

const char *cg_mpi_thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}

void cg_mpi_comm_close(void *impl) {
  cg_mpi_comm_t *m = impl;
  if (!m) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    cg_mpi_types_free(m);
    if (m->data != MPI_COMM_NULL) MPI_Comm_free(&m->data);
    if (m->control != MPI_COMM_NULL) MPI_Comm_free(&m->control);
  }
  if (m->recv_lock_ready) mtx_destroy(&m->recv_lock);
  free(m->recv_queues);
  free(m);
}

static cg_status_t host_check_thread(void *comm_impl) {
  cg_mpi_comm_t *m = comm_impl;
  if (m->thread_level >= MPI_THREAD_SERIALIZED) return CG_SUCCESS;
  int is_main = 0;
  MPI_Is_thread_main(&is_main);
  if (is_main) return CG_SUCCESS;
  return cg_fail(CG_ERR_UNSUPPORTED,
                 "MPI provides %s, so only the main thread may call MPI: run host plans on the main thread, or "
                 "initialize MPI with MPI_THREAD_SERIALIZED (one thread at a time) or MPI_THREAD_MULTIPLE",
                 cg_mpi_thread_level_name(m->thread_level));
}

static size_t bucket_bytes(void *comm_impl) {
  const cg_mpi_comm_t *m = comm_impl;
  return m->one_node ? CG_MPI_BUCKET_BYTES_NODE : CG_MPI_BUCKET_BYTES_NETWORK;
}

/* Whether all ranks share one node, agreed by all (the control duplicate:
 * its errors return). A rank that cannot tell says no, so all say no. */
static int on_one_node(MPI_Comm comm) {
  MPI_Comm local = MPI_COMM_NULL;
  int size = 0, local_size = 0, mine = 0, all = 0;
  if (MPI_Comm_size(comm, &size) != MPI_SUCCESS) size = -1;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS &&
      local != MPI_COMM_NULL) {
    MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN); /* ours, until freed below */
    if (MPI_Comm_size(local, &local_size) != MPI_SUCCESS) local_size = 0;
    MPI_Comm_free(&local);
  }
  mine = local_size == size;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) return 0;
  return all;
}

const cg_backend_t cg_mpi_backend = {
    .interface_version = CG_BACKEND_INTERFACE_VERSION,
    .name = "mpi",
    .memory = CG_BACKEND_HOST_MEMORY,
    .node_kinds = CG_ALL_COMM_KINDS,
    .dtypes = (1u << CG_DTYPE_COUNT) - 1u,
    .control_allgather_start = cg_mpi_control_allgather_start,
    .control_test = cg_mpi_control_test,
    .control_answer = cg_mpi_control_answer,
    .control_roll_call = cg_mpi_control_roll_call,
    .control_any_thread = cg_mpi_control_any_thread,
    .control_abandon = cg_mpi_control_abandon,
    .replay_allgather_start = cg_mpi_replay_allgather_start,
    .host_check_thread = host_check_thread,
    .host_step_prepare = cg_mpi_step_prepare,
    .host_step_release = cg_mpi_step_release,
    .step_rebind = cg_mpi_step_rebind,
    .host_step_start = cg_mpi_step_start,
    .host_step_test = cg_mpi_step_test,
    .step_call = cg_mpi_step_call,
    .bucket_bytes = bucket_bytes,
};

static const cg_comm_ops_t mpi_ops = {.backend_name = "mpi", .destroy_impl = cg_mpi_comm_close, .backend = &cg_mpi_backend,
                                      .memory_fits = cg_memory_fits};

cg_status_t cg_mpi_comm_open(cg_mpi_comm_t **out, MPI_Comm mpi, int thread_level, double timeout_s) {
  cg_status_t st = CG_SUCCESS;
  cg_mpi_comm_t *m = calloc(1, sizeof *m);
  if (!m) return cg_fail(CG_ERR_NO_MEMORY, "cg_comm_create: allocating the communicator");
  m->data = m->control = MPI_COMM_NULL;
  m->half = MPI_DATATYPE_NULL;
  for (int t = 0; t < CG_DTYPE_COUNT; t++)
    for (int o = 0; o < 4; o++) m->own_ops[t][o] = MPI_OP_NULL;
  m->thread_level = thread_level;
  if (mtx_init(&m->recv_lock, mtx_plain) != thrd_success) {
    free(m);
    return cg_fail(CG_ERR_NO_MEMORY, "cg_comm_create: creating the communicator's lock");
  }
  m->recv_lock_ready = 1;
  if ((st = cg_mpi_setup_dup(&m->data, mpi, timeout_s, "cg_comm_create", "the data duplicate")) != CG_SUCCESS ||
      (st = cg_mpi_setup_dup(&m->control, mpi, timeout_s, "cg_comm_create", "the control duplicate")) != CG_SUCCESS)
    goto out;
  /* on the duplicates only: the application's `mpi` keeps its own handler */
  if ((st = cg_mpi_errors_return(m->data, "cg_comm_create: the data duplicate")) != CG_SUCCESS ||
      (st = cg_mpi_errors_return(m->control, "cg_comm_create: the control duplicate")) != CG_SUCCESS)
    goto out;
  if ((st = cg_mpi_agree_on_id(&m->roll_id, m->control)) != CG_SUCCESS) goto out;
  m->one_node = on_one_node(m->control);
  if ((st = cg_mpi_types_create(m)) != CG_SUCCESS) goto out;
  *out = m;
  m = NULL;
out:
  cg_mpi_comm_close(m);
  return st;
}

cg_status_t cg_mpi_comm_create(cg_comm_t **out, MPI_Comm mpi, const cg_comm_opts_t *opts, int thread_level,
                               double timeout_s) {
  cg_status_t st = CG_SUCCESS;
  cg_mpi_comm_t *m = NULL;
  int rank = 0, size = 0;
  uint64_t id = 0;
  if (opts->device != CG_DEVICE_HOST)
    return cg_fail(CG_ERR_INTERNAL, "cg_comm_create: the host MPI backend got device %d", opts->device);
  if ((st = cg_mpi_comm_open(&m, mpi, thread_level, timeout_s)) != CG_SUCCESS) goto out;
  int err = MPI_Comm_rank(m->data, &rank);
  if (err == MPI_SUCCESS) err = MPI_Comm_size(m->data, &size);
  if (err != MPI_SUCCESS) {
    st = cg_mpi_fail(err, "cg_comm_create: MPI_Comm_size");
    goto out;
  }
  if ((st = cg_mpi_agree_on_id(&id, m->control)) != CG_SUCCESS) goto out;
  cg_comm_t *comm = cg_comm_alloc(rank, size, &mpi_ops, m);
  if (!comm) {
    st = cg_fail(CG_ERR_NO_MEMORY, "cg_comm_create: allocating the communicator");
    goto out;
  }
  comm->device = CG_DEVICE_HOST;
  comm->id = id;
  m = NULL;
  if (!cg_comm_register(comm)) {
    cg_comm_destroy(comm);
    st = cg_fail(CG_ERR_NO_MEMORY, "cg_comm_create: listing the communicator");
    goto out;
  }
  *out = comm;
out:
  cg_mpi_comm_close(m);
  return st;
}

const cg_mpi_comm_t *cg_mpi_comm_of(const cg_comm_t *comm) {
  return comm->ops == &mpi_ops ? comm->impl : NULL;
}
