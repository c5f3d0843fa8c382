/* MPI for callers in other languages (commgraph/mpi.h): a Python program
 * without mpi4py has nobody to start MPI, and one with mpi4py holds its
 * communicators as Fortran handles (comm.py2f()), which only C can turn back
 * into an MPI_Comm. The library's version line lets such a caller refuse an
 * mpi4py built on another MPI, whose handles would mean nothing here. */
#include <string.h>
#include <threads.h>

#include "commgraph/mpi.h"
#include "error.h"
#include "mpi_check.h"

/* Whether cg_mpi_init started MPI: only then does cg_mpi_finalize end it. The
 * lock keeps two threads from both finding MPI uninitialized and both calling
 * MPI_Init_thread. */
static mtx_t init_lock;
static once_flag init_once = ONCE_FLAG_INIT;
static int library_initialized;

static void init_init_lock(void) { mtx_init(&init_lock, mtx_plain); }

cg_status_t cg_mpi_init(int *provided) {
  cg_status_t st = CG_SUCCESS;
  int initialized = 0, finalized = 0, level = MPI_THREAD_SINGLE, err = MPI_SUCCESS;
  call_once(&init_once, init_init_lock);
  mtx_lock(&init_lock);
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    st = cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_mpi_init: MPI is finalized (it cannot be initialized again)");
    goto out;
  }
  if (!initialized) {
    if ((err = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level)) != MPI_SUCCESS) {
      st = cg_fail_mpi(err, "MPI_Init_thread", "cg_mpi_init");
      goto out;
    }
    library_initialized = 1;
  }
  /* the level in force, whoever initialized: MPI_Init_thread's answer is the same */
  MPI_Query_thread(&level);
  if (provided) *provided = level;
out:
  mtx_unlock(&init_lock);
  return st;
}

cg_status_t cg_mpi_finalize(void) {
  cg_status_t st = CG_SUCCESS;
  int finalized = 0, err = MPI_SUCCESS;
  call_once(&init_once, init_init_lock);
  mtx_lock(&init_lock);
  MPI_Finalized(&finalized);
  if (library_initialized && !finalized) cg_mpi_before_finalize();
  if (library_initialized && !finalized && (err = MPI_Finalize()) != MPI_SUCCESS)
    st = cg_fail_mpi(err, "MPI_Finalize", "cg_mpi_finalize");
  mtx_unlock(&init_lock);
  return st;
}

cg_status_t cg_comm_create_fortran(cg_comm_t **out, MPI_Fint mpi, const cg_comm_opts_t *opts) {
  int initialized = 0, finalized = 0;
  if (!out) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create_fortran: NULL out");
  /* MPI_Comm_f2c is only defined while MPI runs */
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_comm_create_fortran: MPI is %s",
                   finalized ? "finalized" : "not initialized");
  return cg_comm_create(out, MPI_Comm_f2c(mpi), opts);
}

MPI_Fint cg_mpi_world_fortran(void) { return MPI_Comm_c2f(MPI_COMM_WORLD); }

cg_status_t cg_mpi_library_version(char *buf, size_t size) {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0, err = MPI_SUCCESS;
  if (!buf) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_mpi_library_version: NULL buf");
  if (size) buf[0] = '\0';
  if ((err = MPI_Get_library_version(text, &len)) != MPI_SUCCESS)
    return cg_fail_mpi(err, "MPI_Get_library_version", "cg_mpi_library_version");
  /* the first line names the library; the rest is its configure line */
  size_t line = strcspn(text, "\r\n");
  /* a cut line could compare equal to another MPI's */
  if (line >= size)
    return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_mpi_library_version: size %zu: the line needs %zu bytes", size,
                   line + 1);
  memcpy(buf, text, line);
  buf[line] = '\0';
  return CG_SUCCESS;
}
