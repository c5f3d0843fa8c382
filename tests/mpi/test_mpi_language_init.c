/* cg_mpi_init and cg_mpi_finalize where the library starts MPI, as the Python
 * package without mpi4py does: MPI starts once per process, so this is a
 * program of its own and not a Check suite (whose runner starts MPI). The
 * calls that need MPI refuse before it starts and after it ends; the version
 * line needs no running MPI. Every rank checks alike and says what failed;
 * the exit status is the verdict. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "commgraph/mpi.h"

static int failures;

static void expect(int ok, const char *what) {
  if (ok) return;
  failures++;
  fprintf(stderr, "test_mpi_language_init: FAILED: %s (last error: %s)\n", what, cg_error_last());
}

static int refused(cg_status_t st, const char *function) {
  return st == CG_ERR_INVALID_ARGUMENT && strstr(cg_error_last(), function) != NULL;
}

static int mpi_state(void) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return finalized ? 2 : initialized;
}

int main(void) {
  char before[MPI_MAX_LIBRARY_VERSION_STRING] = "", after[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int provided = -1, again = -1, level = -1, rank = -1, size = 0;
  cg_comm_t *comm = NULL;
  expect(mpi_state() == 0, "MPI not started before the test starts it");
  /* before MPI starts */
  expect(cg_mpi_library_version(before, sizeof before) == CG_SUCCESS && before[0], "the version line before MPI_Init");
  expect(refused(cg_comm_create_fortran(&comm, 0, NULL), "cg_comm_create_fortran"),
         "cg_comm_create_fortran refused before MPI_Init");
  expect(refused(cg_info_write(stdout, MPI_COMM_WORLD), "cg_info_write"), "cg_info_write refused before MPI_Init");
  expect(refused(cg_info_write_fortran(stdout, 0), "cg_info_write_fortran"),
         "cg_info_write_fortran refused before MPI_Init");
  expect(cg_mpi_finalize() == CG_SUCCESS && mpi_state() == 0, "cg_mpi_finalize before MPI_Init does nothing");

  /* the library starts MPI, asking for MPI_THREAD_MULTIPLE */
  expect(cg_mpi_init(&provided) == CG_SUCCESS, "cg_mpi_init");
  expect(mpi_state() == 1, "MPI initialized by cg_mpi_init");
  MPI_Query_thread(&level);
  expect(provided == level, "cg_mpi_init gives MPI_Query_thread's level");
  expect(cg_mpi_init(&again) == CG_SUCCESS && again == level, "a second cg_mpi_init gives the same level");
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  expect(cg_comm_create_fortran(&comm, cg_mpi_world_fortran(), NULL) == CG_SUCCESS, "cg_comm_create_fortran");
  int got_rank = -1, got_size = -1;
  expect(comm && cg_comm_rank(&got_rank, comm) == CG_SUCCESS && got_rank == rank, "its rank");
  expect(comm && cg_comm_size(&got_size, comm) == CG_SUCCESS && got_size == size, "its size");
  cg_comm_destroy(comm);
  comm = NULL;

  /* the library ends what it started */
  expect(cg_mpi_finalize() == CG_SUCCESS, "cg_mpi_finalize");
  expect(mpi_state() == 2, "MPI finalized by cg_mpi_finalize");
  expect(cg_mpi_finalize() == CG_SUCCESS, "a second cg_mpi_finalize does nothing");
  /* MPI cannot start again */
  expect(refused(cg_mpi_init(&provided), "cg_mpi_init"), "cg_mpi_init refused after MPI_Finalize");
  expect(refused(cg_comm_create_fortran(&comm, 0, NULL), "cg_comm_create_fortran") && !comm,
         "cg_comm_create_fortran refused after MPI_Finalize");
  expect(refused(cg_info_write(stdout, MPI_COMM_WORLD), "cg_info_write"), "cg_info_write refused after MPI_Finalize");
  expect(cg_mpi_library_version(after, sizeof after) == CG_SUCCESS && !strcmp(before, after),
         "the same version line after MPI_Finalize");
  if (failures) return 1;
  printf("test_mpi_language_init: rank %d of %d: all checks passed\n", rank, size);
  return 0;
}
