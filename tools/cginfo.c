/* cginfo: what this commgraph build and this machine offer: versions of the
 * libraries it was built with and runs with, the backends built in, the CG_*
 * environment variables (a bad value marked BAD: the call that reads it would
 * refuse it), which GPU and NUMA node each rank would take, and the machine's
 * topology. Run it under the launcher a job uses (mpiexec -n N cginfo) to see
 * the placement and environment that job gets: rank 0 prints the machine-wide
 * part and one line per rank.
 * It never needs a GPU: without one it says so and still prints the rest. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgraph/config.h"
#include "commgraph/status.h"
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

static void print_yes_no(const char *name, int yes, const char *sep) {
  printf("%s %s%s", name, yes ? "yes" : "no", sep);
}

#if CG_HAVE_CUDA
static void print_cuda_version(int v) { printf("%d.%d", v / 1000, (v % 1000) / 10); }

static void print_cuda(void) {
  int runtime = 0, driver = 0, gpus = 0;
  cudaRuntimeGetVersion(&runtime);
  /* 0 and success when no driver is installed */
  cudaDriverGetVersion(&driver);
  cudaError_t err = cudaGetDeviceCount(&gpus);
  if (err != cudaSuccess) {
    cudaGetLastError();
    gpus = 0;
  }
  printf("CUDA: runtime ");
  print_cuda_version(runtime);
  if (driver) {
    printf(", driver ");
    print_cuda_version(driver);
  } else {
    printf(", no CUDA driver");
  }
  printf(", %d GPUs", gpus);
  if (err != cudaSuccess) printf(" (%s)", cudaGetErrorString(err));
  printf("\n");
}
#endif

#if CG_HAVE_NCCL
/* NCCL's version codes: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after */
static void print_nccl_version(int v) {
  if (v >= 20900) printf("%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  else printf("%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}
#endif

static void print_mpi(int provided) {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0, version = 0, subversion = 0;
  MPI_Get_library_version(text, &len);
  MPI_Get_version(&version, &subversion);
  /* the first line names the library; the rest is its configure line */
  text[strcspn(text, "\r\n")] = '\0';
  for (char *c = text; *c; c++)
    if (*c == '\t') *c = ' ';
  for (size_t n = strlen(text); n && text[n - 1] == ' '; n--) text[n - 1] = '\0';
  printf("MPI: %s (standard %d.%d)\n", text, version, subversion);
  printf("MPI thread level: %s\n", cg_mpi_thread_level_name(provided));
#if CG_HAVE_CUDA
  int aware = cg_mpi_cuda_aware();
  printf("MPI CUDA-aware: %s\n", aware == 1 ? "yes" : aware == 0 ? "no" : "cannot tell (this MPI has no query for it)");
  printf("MPI on device buffers, staging AUTO: %s\n",
         aware == 1 ? "direct (device pointers to MPI)" : "host (pinned staging memory)");
#else
  printf("MPI CUDA-aware: n/a (built without CUDA)\n");
#endif
}

static void print_build(int provided) {
  printf("commgraph %s\n", CG_VERSION_STRING);
  printf("build: ");
  print_yes_no("CUDA", CG_HAVE_CUDA, ", ");
  print_yes_no("NCCL", CG_HAVE_NCCL, ", ");
  print_yes_no("MPI", CG_HAVE_MPI, ", ");
  print_yes_no("hwloc", CG_HAVE_HWLOC, "\n");
#if CG_HAVE_CUDA
  print_cuda();
#else
  printf("CUDA: n/a (built without CUDA)\n");
#endif
#if CG_HAVE_NCCL
  int nccl = 0;
  printf("NCCL: ");
  if (ncclGetVersion(&nccl) == ncclSuccess) print_nccl_version(nccl);
  else printf("?");
  printf(" (headers ");
  print_nccl_version(NCCL_VERSION_CODE);
  printf(")\n");
#endif
  print_mpi(provided);
  /* the backends this build compiled in (backends/, top-level CMakeLists.txt) */
  printf("backends: offline mpi%s%s\n", CG_HAVE_NCCL ? " nccl" : "", CG_HAVE_CUDA ? " mpi-staged hosttransfer" : "");
}

/* The CG_* variables as this rank sees them: the value and what it reads as,
 * or BAD and why (the call that reads it returns CG_ERR_INVALID_ARGUMENT). */
static void print_env(void) {
  printf("environment (rank 0):\n");
  for (int i = 0; i < CG_PARAM_COUNT; i++) {
    cg_param_t param = (cg_param_t)i;
    const char *text = cg_param_text(param);
    double seconds = 0;
    int on = 0;
    size_t bytes = 0;
    printf("  %-21s ", cg_param_name(param));
    if (!text) {
      printf("unset\n");
      continue;
    }
    if (cg_param_check(param, "BAD") != CG_SUCCESS) {
      printf("%s\n", cg_error_last());
      continue;
    }
    /* good values have no blanks but an ordinal's trailing ones; paths may */
    printf("%.*s", cg_param_kind(param) == CG_PARAM_PATH ? (int)strlen(text) : (int)strcspn(text, " \t\n"), text);
    switch (cg_param_kind(param)) {
      case CG_PARAM_SECONDS:
        cg_param_seconds(&seconds, NULL, param, "cginfo");
        printf(" (%g seconds)", seconds);
        break;
      case CG_PARAM_SWITCH:
        cg_param_switch(&on, NULL, param, "cginfo");
        if (strcmp(text, on ? "on" : "off")) printf(" (%s)", on ? "on" : "off");
        break;
      case CG_PARAM_BYTES:
      case CG_PARAM_BYTES_OR_NEVER:
        cg_param_bytes(&bytes, NULL, param, "cginfo");
        if (bytes == SIZE_MAX && cg_param_kind(param) == CG_PARAM_BYTES) printf(" (SIZE_MAX bytes)");
        else if (bytes != SIZE_MAX) printf(" (%zu bytes)", bytes);
        break;
      case CG_PARAM_ORDINAL:
      case CG_PARAM_PATH: break;
    }
    printf("\n");
  }
}

/* This rank's bad CG_* values: how many, and the first one's error. */
static void check_env(rank_info_t *mine) {
  for (int i = 0; i < CG_PARAM_COUNT; i++)
    if (cg_param_check((cg_param_t)i, "BAD") != CG_SUCCESS && !mine->env_bad++)
      snprintf(mine->env, sizeof mine->env, "%s", cg_error_last());
}

static void gather_mine(rank_info_t *mine) {
  int len = 0;
  memset(mine, 0, sizeof *mine);
  mine->device = -1;
  mine->numa = -1;
  if (cg_topo_local_rank(&mine->local_rank, &mine->local_size, MPI_COMM_WORLD) != CG_SUCCESS) {
    mine->local_rank = mine->local_size = -1;
    snprintf(mine->why, sizeof mine->why, "%s", cg_error_last());
  } else if (cg_topo_device_for_local_rank(&mine->device, MPI_COMM_WORLD) != CG_SUCCESS) {
    mine->device = -1;
    snprintf(mine->why, sizeof mine->why, "%s", cg_error_last());
  } else {
    mine->numa = cg_topo_gpu_numa_node(mine->device);
  }
  MPI_Get_processor_name(mine->host, &len);
  check_env(mine);
}

static void print_rank(int r, const rank_info_t *in) {
  printf("rank %d: local rank %d, device ", r, in->local_rank);
  if (in->device >= 0) printf("%d", in->device);
  else printf("none");
  printf(", numa ");
  if (in->numa >= 0) printf("%d", in->numa);
  else printf("unknown");
  printf(", host %s\n", in->host);
}

int main(int argc, char **argv) {
  int provided = MPI_THREAD_SINGLE, rank = 0, size = 1;
  rank_info_t mine, *all = NULL;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* collective: every rank before rank 0 starts printing */
  gather_mine(&mine);
  if (rank == 0 && !(all = malloc((size_t)size * sizeof *all))) {
    fprintf(stderr, "cginfo: out of memory for %d ranks\n", size);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    print_build(provided);
    printf("ranks: %d, %d on rank 0's node\n", size, mine.local_size);
    int first_why = -1;
    for (int r = 0; r < size; r++) {
      print_rank(r, &all[r]);
      if (first_why < 0 && all[r].why[0]) first_why = r;
    }
    if (first_why >= 0) printf("why rank %d has no device: %s\n", first_why, all[first_why].why);
    print_env();
    for (int r = 1; r < size; r++)
      if (all[r].env_bad)
        printf("rank %d's environment: %s%s\n", r, all[r].env, all[r].env_bad > 1 ? " (and more)" : "");
    printf("\n");
    cg_topo_describe(stdout);
    fflush(stdout);
  }
  free(all);
  MPI_Finalize();
  return 0;
}
