/* cg_info_write: what this commgraph build and this machine offer (the cginfo
 * tool's report, in the library so the Python package prints the same). The
 * versions of the libraries it was built with and runs with, the backends
 * built in, the CG_* environment variables (a bad value marked BAD: the call
 * that reads it would refuse it), which GPU and NUMA node each rank would
 * take, and the machine's topology. It never needs a GPU: without one it says
 * so and still writes the rest. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph/config.h"
#include "commgraph/mpi.h"
#include "commgraph/status.h"
#include "error.h"
#include "mpi/mpi_backend.h"
#include "node/topology.h"
#include "param.h"
#if CG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "staged/staged_backend.h"
#endif
#if CG_HAVE_NCCL
#include <nccl.h>
#endif

/* What each rank sends rank 0: fixed size, so one MPI_Gather of bytes. */
typedef struct rank_info {
  int local_rank, local_size;
  int device; /* -1: none */
  int numa;   /* -1: unknown */
  char host[MPI_MAX_PROCESSOR_NAME];
  char why[240]; /* why there is no device, or "" */
  int env_bad;   /* CG_* variables with a bad value */
  char env[240]; /* the first one's error, or "" */
} rank_info_t;

static void write_yes_no(FILE *f, const char *name, int yes, const char *sep) {
  fprintf(f, "%s %s%s", name, yes ? "yes" : "no", sep);
}

#if CG_HAVE_CUDA
static void write_cuda_version(FILE *f, int v) { fprintf(f, "%d.%d", v / 1000, (v % 1000) / 10); }

static void write_cuda(FILE *f) {
  int runtime = 0, driver = 0, gpus = 0;
  cudaRuntimeGetVersion(&runtime);
  /* 0 and success when no driver is installed */
  cudaDriverGetVersion(&driver);
  cudaError_t err = cudaGetDeviceCount(&gpus);
  if (err != cudaSuccess) {
    cudaGetLastError();
    gpus = 0;
  }
  fprintf(f, "CUDA: runtime ");
  write_cuda_version(f, runtime);
  if (driver) {
    fprintf(f, ", driver ");
    write_cuda_version(f, driver);
  } else {
    fprintf(f, ", no CUDA driver");
  }
  fprintf(f, ", %d GPUs", gpus);
  if (err != cudaSuccess) fprintf(f, " (%s)", cudaGetErrorString(err));
  fprintf(f, "\n");
}
#endif

#if CG_HAVE_NCCL
/* NCCL's version codes: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after */
static void write_nccl_version(FILE *f, int v) {
  if (v >= 20900) fprintf(f, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  else fprintf(f, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}
#endif

static void write_mpi(FILE *f, int provided) {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0, version = 0, subversion = 0;
  MPI_Get_library_version(text, &len);
  MPI_Get_version(&version, &subversion);
  /* the first line names the library; the rest is its configure line */
  text[strcspn(text, "\r\n")] = '\0';
  for (char *c = text; *c; c++)
    if (*c == '\t') *c = ' ';
  for (size_t n = strlen(text); n && text[n - 1] == ' '; n--) text[n - 1] = '\0';
  fprintf(f, "MPI: %s (standard %d.%d)\n", text, version, subversion);
  fprintf(f, "MPI thread level: %s\n", cg_mpi_thread_level_name(provided));
#if CG_HAVE_CUDA
  int aware = cg_mpi_cuda_aware();
  fprintf(f, "MPI CUDA-aware: %s\n",
          aware == 1 ? "yes" : aware == 0 ? "no" : "cannot tell (this MPI has no query for it)");
  fprintf(f, "MPI on device buffers, staging AUTO: %s\n",
          aware == 1 ? "direct (device pointers to MPI)" : "host (pinned staging memory)");
#else
  fprintf(f, "MPI CUDA-aware: n/a (built without CUDA)\n");
#endif
}

static void write_build(FILE *f, int provided) {
  fprintf(f, "commgraph %s\n", CG_VERSION_STRING);
  fprintf(f, "build: ");
  write_yes_no(f, "CUDA", CG_HAVE_CUDA, ", ");
  write_yes_no(f, "NCCL", CG_HAVE_NCCL, ", ");
  write_yes_no(f, "MPI", CG_HAVE_MPI, ", ");
  write_yes_no(f, "hwloc", CG_HAVE_HWLOC, "\n");
#if CG_HAVE_CUDA
  write_cuda(f);
#else
  fprintf(f, "CUDA: n/a (built without CUDA)\n");
#endif
#if CG_HAVE_NCCL
  int nccl = 0;
  fprintf(f, "NCCL: ");
  if (ncclGetVersion(&nccl) == ncclSuccess) write_nccl_version(f, nccl);
  else fprintf(f, "?");
  fprintf(f, " (headers ");
  write_nccl_version(f, NCCL_VERSION_CODE);
  fprintf(f, ")\n");
  /* cg_nccl_arena_create's symmetric windows: NCCL 2.27 and later, in the
   * headers built against and in the library loaded */
#if defined(NCCL_WIN_COLL_SYMMETRIC)
  int windows = nccl >= 22700;
#else
  int windows = 0;
#endif
  fprintf(f, "NCCL symmetric memory (cg_nccl_arena_create): %s\n",
          windows ? "yes (NCCL's symmetric kernels on one node, with peer access)"
                  : "no: symmetric arenas are plain device memory (NCCL 2.27 or later has it)");
  /* which allreduces in such an arena take the symmetric kernels (nccl_arena.c) */
  const char *given = cg_param_text(CG_PARAM_SYMMETRIC_MAX_BYTES);
  if (windows && given)
    fprintf(f, "  symmetric or plain kernels: symmetric up to CG_SYMMETRIC_MAX_BYTES=%s, plain above\n", given);
  else if (windows)
    fprintf(f, "  symmetric or plain kernels: per allreduce, from the cut-over each arena measures when made "
            "(cg_nccl_arena_symmetric_max; plan DOT names the path)\n");
  /* nccl_oneshot.h: decided per communicator on its first plan */
  const char *oneshot = cg_param_text(CG_PARAM_ONESHOT_MAX_BYTES);
  if (oneshot)
    fprintf(f, "one-shot allreduce (commgraph's kernel, ranks with peer links): allreduces of float32/16, bfloat16 up "
            "to CG_ONESHOT_MAX_BYTES=%s\n", oneshot);
  else
    fprintf(f, "one-shot allreduce (commgraph's kernel, ranks with peer links): allreduces of float32/16, bfloat16 up "
            "to the cut-over each communicator measures on its first plan; in a symmetric window only where it "
            "measured faster than NCCL's symmetric kernels (plan DOT names the path)\n");
  const char *twoshot = cg_param_text(CG_PARAM_TWOSHOT_MAX_BYTES);
  size_t twoshot_bytes = 1;
  int twoshot_set = 0;
  if (twoshot && cg_param_bytes(&twoshot_bytes, &twoshot_set, CG_PARAM_TWOSHOT_MAX_BYTES, NULL) == CG_SUCCESS &&
      twoshot_set && twoshot_bytes == 0)
    fprintf(f, "two-shot allreduce (commgraph's kernel): off (CG_TWOSHOT_MAX_BYTES=0)\n");
  else if (twoshot)
    fprintf(f, "two-shot allreduce (commgraph's kernel, ranks with peer links): the same allreduces above the one-shot "
            "size, up to CG_TWOSHOT_MAX_BYTES=%s\n", twoshot);
  else
    fprintf(f, "two-shot allreduce (commgraph's kernel, ranks with peer links): the same allreduces above the one-shot "
            "size, up to the cut-over measured with the one-shot's (at most 8 MB)\n");
#endif
  write_mpi(f, provided);
  /* the backends this build compiled in (backends/, top-level CMakeLists.txt) */
  fprintf(f, "backends: offline mpi%s%s\n", CG_HAVE_NCCL ? " nccl" : "",
          CG_HAVE_CUDA ? " mpi-staged hosttransfer" : "");
}

/* The CG_* variables as this rank sees them: the value and what it reads as,
 * or BAD and why (the call that reads it returns CG_ERR_INVALID_ARGUMENT). */
static void write_env(FILE *f) {
  fprintf(f, "environment (rank 0):\n");
  for (int i = 0; i < CG_PARAM_COUNT; i++) {
    cg_param_t param = (cg_param_t)i;
    const char *text = cg_param_text(param);
    double seconds = 0;
    int on = 0;
    size_t bytes = 0;
    fprintf(f, "  %-21s ", cg_param_name(param));
    if (!text) {
      fprintf(f, "unset\n");
      continue;
    }
    if (cg_param_check(param, "BAD") != CG_SUCCESS) {
      fprintf(f, "%s\n", cg_error_last());
      continue;
    }
    /* good values have no blanks but an ordinal's trailing ones; paths may */
    fprintf(f, "%.*s", cg_param_kind(param) == CG_PARAM_PATH ? (int)strlen(text) : (int)strcspn(text, " \t\n"),
            text);
    switch (cg_param_kind(param)) {
      case CG_PARAM_SECONDS:
        cg_param_seconds(&seconds, NULL, param, "cg_info_write");
        fprintf(f, " (%g seconds)", seconds);
        break;
      case CG_PARAM_SWITCH:
        cg_param_switch(&on, NULL, param, "cg_info_write");
        if (strcmp(text, on ? "on" : "off")) fprintf(f, " (%s)", on ? "on" : "off");
        break;
      case CG_PARAM_BYTES:
      case CG_PARAM_BYTES_OR_NEVER:
        cg_param_bytes(&bytes, NULL, param, "cg_info_write");
        if (bytes == SIZE_MAX && cg_param_kind(param) == CG_PARAM_BYTES) fprintf(f, " (SIZE_MAX bytes)");
        else if (bytes != SIZE_MAX) fprintf(f, " (%zu bytes)", bytes);
        break;
      case CG_PARAM_ORDINAL:
      case CG_PARAM_PATH: break;
    }
    fprintf(f, "\n");
  }
}

/* This rank's bad CG_* values: how many, and the first one's error. */
static void check_env(rank_info_t *mine) {
  for (int i = 0; i < CG_PARAM_COUNT; i++)
    if (cg_param_check((cg_param_t)i, "BAD") != CG_SUCCESS && !mine->env_bad++)
      snprintf(mine->env, sizeof mine->env, "%s", cg_error_last());
}

/* Collective over comm (the node split and the device choice). */
static void gather_mine(rank_info_t *mine, MPI_Comm comm) {
  int len = 0;
  memset(mine, 0, sizeof *mine);
  mine->device = -1;
  mine->numa = -1;
  if (cg_topo_local_rank(&mine->local_rank, &mine->local_size, comm) != CG_SUCCESS) {
    mine->local_rank = mine->local_size = -1;
    snprintf(mine->why, sizeof mine->why, "%s", cg_error_last());
  } else if (cg_topo_device_for_local_rank(&mine->device, comm) != CG_SUCCESS) {
    mine->device = -1;
    snprintf(mine->why, sizeof mine->why, "%s", cg_error_last());
  } else {
    mine->numa = cg_topo_gpu_numa_node(mine->device);
  }
  MPI_Get_processor_name(mine->host, &len);
  check_env(mine);
}

static void write_rank(FILE *f, int r, const rank_info_t *in) {
  fprintf(f, "rank %d: local rank %d, device ", r, in->local_rank);
  if (in->device >= 0) fprintf(f, "%d", in->device);
  else fprintf(f, "none");
  fprintf(f, ", numa ");
  if (in->numa >= 0) fprintf(f, "%d", in->numa);
  else fprintf(f, "unknown");
  fprintf(f, ", host %s\n", in->host);
}

static void write_report(FILE *f, int provided, int size, const rank_info_t *mine, const rank_info_t *all) {
  write_build(f, provided);
  fprintf(f, "ranks: %d, %d on rank 0's node\n", size, mine->local_size);
  int first_why = -1;
  for (int r = 0; r < size; r++) {
    write_rank(f, r, &all[r]);
    if (first_why < 0 && all[r].why[0]) first_why = r;
  }
  if (first_why >= 0) fprintf(f, "why rank %d has no device: %s\n", first_why, all[first_why].why);
  write_env(f);
  for (int r = 1; r < size; r++)
    if (all[r].env_bad)
      fprintf(f, "rank %d's environment: %s%s\n", r, all[r].env, all[r].env_bad > 1 ? " (and more)" : "");
  fprintf(f, "\n");
  cg_topo_describe(f);
}

/* `where` names the public function in every error detail. */
static cg_status_t info_write(FILE *file, MPI_Comm comm, const char *where) {
  cg_status_t st = CG_SUCCESS;
  int provided = MPI_THREAD_SINGLE, rank = 0, size = 1, inter = 0, have_room = 1, err = MPI_SUCCESS;
  rank_info_t mine, *all = NULL;
  if ((err = MPI_Comm_test_inter(comm, &inter)) != MPI_SUCCESS)
    return cg_fail_mpi(err, "MPI_Comm_test_inter", "%s", where);
  /* a gather on an intercommunicator goes from one group to the other */
  if (inter) return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: an intercommunicator (give an intracommunicator)", where);
  if ((err = MPI_Comm_rank(comm, &rank)) != MPI_SUCCESS) return cg_fail_mpi(err, "MPI_Comm_rank", "%s", where);
  if ((err = MPI_Comm_size(comm, &size)) != MPI_SUCCESS) return cg_fail_mpi(err, "MPI_Comm_size", "%s", where);
  MPI_Query_thread(&provided);
  /* a rank that never comes leaves the others waiting at most CG_TIMEOUT,
   * the ranks that did not arrive named, before the collective calls below */
  double timeout_s = 0;
  if ((st = cg_param_seconds(&timeout_s, NULL, CG_PARAM_TIMEOUT, where)) != CG_SUCCESS) return st;
  if ((st = cg_mpi_arrive(comm, timeout_s, where)) != CG_SUCCESS) return st;
  gather_mine(&mine, comm);
  if (rank == 0) have_room = (all = malloc((size_t)size * sizeof *all)) != NULL;
  /* rank 0 tells whether it can receive, so no rank waits in a gather it skips */
  if ((err = MPI_Bcast(&have_room, 1, MPI_INT, 0, comm)) != MPI_SUCCESS) {
    st = cg_fail_mpi(err, "MPI_Bcast", "%s", where);
    goto out;
  }
  if (!have_room) {
    st = cg_fail(CG_ERR_NO_MEMORY, "%s: rank 0 is out of memory for the lines of %d ranks", where, size);
    goto out;
  }
  err = MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0, comm);
  if (err != MPI_SUCCESS) {
    st = cg_fail_mpi(err, "MPI_Gather", "%s", where);
    goto out;
  }
  if (rank == 0) {
    write_report(file, provided, size, &mine, all);
    if (fflush(file) != 0 || ferror(file)) st = cg_fail(CG_ERR_IO, "%s: writing the report failed", where);
  }
out:
  free(all);
  return st;
}

/* The checks every rank makes alike before any collective call. */
static cg_status_t check_mpi_running(const char *where) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "%s: MPI is %s", where, finalized ? "finalized" : "not initialized");
  return CG_SUCCESS;
}

cg_status_t cg_info_write(FILE *file, MPI_Comm comm) {
  cg_status_t st = CG_SUCCESS;
  if (!file) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_info_write: NULL file");
  if ((st = check_mpi_running("cg_info_write")) != CG_SUCCESS) return st;
  if (comm == MPI_COMM_NULL) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_info_write: MPI_COMM_NULL");
  return info_write(file, comm, "cg_info_write");
}

cg_status_t cg_info_write_fortran(FILE *file, MPI_Fint comm) {
  cg_status_t st = CG_SUCCESS;
  if (!file) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_info_write_fortran: NULL file");
  /* MPI_Comm_f2c is only defined while MPI runs */
  if ((st = check_mpi_running("cg_info_write_fortran")) != CG_SUCCESS) return st;
  MPI_Comm c = MPI_Comm_f2c(comm);
  if (c == MPI_COMM_NULL) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_info_write_fortran: MPI_COMM_NULL");
  return info_write(file, c, "cg_info_write_fortran");
}
