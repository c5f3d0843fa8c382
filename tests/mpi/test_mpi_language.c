/* The entry points for callers in other languages (commgraph/mpi.h, the
 * Python package's ctypes calls) with MPI already started by the program, as
 * mpi4py does: cg_mpi_init then starts nothing and cg_mpi_finalize ends
 * nothing; Fortran handles give the communicators their MPI_Comm would; the
 * library's MPI version line is MPI's own; cg_info_write is the cginfo report,
 * on rank 0 of its communicator only, and waits at most CG_TIMEOUT for a rank
 * that never calls. The path where the library starts MPI
 * itself is test_mpi_language_init.c (MPI starts once per process). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_backend.h"
#include "mpi_test.h"

/* Everything written to `f` as a string (caller frees). */
static char *read_back(FILE *f) {
  long end = ftell(f);
  ck_assert_int_ge(end, 0);
  char *text = malloc((size_t)end + 1);
  ck_assert_ptr_nonnull(text);
  rewind(f);
  ck_assert_uint_eq(fread(text, 1, (size_t)end, f), (size_t)end);
  text[end] = '\0';
  return text;
}

static void assert_refused(cg_status_t st, const char *function) {
  ck_assert_int_eq(st, CG_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(cg_error_last(), function) != NULL, "'%s' does not name %s", cg_error_last(), function);
}

START_TEST(language__init_after_the_program_reports_the_level_and_starts_nothing) {
  int provided = -1, level = -1, initialized = 0, finalized = 0;
  MPI_Query_thread(&level);
  ck_assert_cg_ok(cg_mpi_init(&provided));
  ck_assert_int_eq(provided, level);
  ck_assert_cg_ok(cg_mpi_init(NULL));
  /* the program started MPI, so it is the program's to finalize */
  ck_assert_cg_ok(cg_mpi_finalize());
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  ck_assert_int_eq(initialized, 1);
  ck_assert_int_eq(finalized, 0);
  /* MPI still works after it */
  int sum = 0, one = 1;
  ck_assert_int_eq(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ck_assert_int_eq(sum, cg_mpi_size());
}
END_TEST

START_TEST(language__world_fortran_round_trips) {
  MPI_Comm world = MPI_Comm_f2c(cg_mpi_world_fortran());
  int result = MPI_UNEQUAL, size = 0, rank = -1;
  ck_assert_int_eq(MPI_Comm_compare(world, MPI_COMM_WORLD, &result), MPI_SUCCESS);
  ck_assert_int_eq(result, MPI_IDENT);
  MPI_Comm_size(world, &size);
  MPI_Comm_rank(world, &rank);
  ck_assert_int_eq(size, cg_mpi_size());
  ck_assert_int_eq(rank, cg_mpi_rank());
  ck_assert_int_eq(cg_mpi_world_fortran(), MPI_Comm_c2f(MPI_COMM_WORLD));
}
END_TEST

/* On MPI_COMM_WORLD's handle and on a split's (odd and even ranks), as
 * mpi4py's comm.py2f() would hand them over. */
START_TEST(language__comm_create_fortran_gives_the_communicator_of_the_handle) {
  int rank = cg_mpi_rank(), size = cg_mpi_size(), got = -1;
  const char *backend = NULL;
  cg_comm_t *c = NULL;
  ck_assert_cg_ok(cg_comm_create_fortran(&c, cg_mpi_world_fortran(), NULL));
  ck_assert_cg_ok(cg_comm_rank(&got, c));
  ck_assert_int_eq(got, rank);
  ck_assert_cg_ok(cg_comm_size(&got, c));
  ck_assert_int_eq(got, size);
  ck_assert_cg_ok(cg_comm_backend_name(&backend, c));
  ck_assert_str_eq(backend, "mpi");
  cg_comm_destroy(c);

  MPI_Comm half = MPI_COMM_NULL;
  ck_assert_int_eq(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half), MPI_SUCCESS);
  cg_comm_opts_t o = CG_COMM_OPTS_INIT;
  o.backend = CG_BACKEND_MPI;
  c = NULL;
  ck_assert_cg_ok(cg_comm_create_fortran(&c, MPI_Comm_c2f(half), &o));
  ck_assert_cg_ok(cg_comm_rank(&got, c));
  ck_assert_int_eq(got, rank / 2);
  ck_assert_cg_ok(cg_comm_size(&got, c));
  ck_assert_int_eq(got, (size - rank % 2 + 1) / 2);
  cg_comm_destroy(c);
  MPI_Comm_free(&half);

  /* refused alike on every rank, before any collective call */
  cg_comm_t *sentinel = (cg_comm_t *)&got;
  c = sentinel;
  assert_refused(cg_comm_create_fortran(NULL, cg_mpi_world_fortran(), NULL), "cg_comm_create_fortran");
  assert_refused(cg_comm_create_fortran(&c, MPI_Comm_c2f(MPI_COMM_NULL), NULL), "cg_comm_create");
  ck_assert_ptr_eq(c, sentinel);
}
END_TEST

START_TEST(language__library_version_is_the_first_line_of_mpis) {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = "", buf[MPI_MAX_LIBRARY_VERSION_STRING] = "x";
  int len = 0;
  MPI_Get_library_version(text, &len);
  text[strcspn(text, "\r\n")] = '\0';
  ck_assert_cg_ok(cg_mpi_library_version(buf, sizeof buf));
  ck_assert_uint_gt(strlen(buf), 0);
  ck_assert_str_eq(buf, text);
#if defined(MPICH_VERSION)
  ck_assert_ptr_nonnull(strstr(buf, "MPICH"));
#endif
  /* exactly the line and its NUL fit; one byte less is refused, not cut */
  size_t need = strlen(text) + 1;
  memset(buf, 'x', sizeof buf);
  ck_assert_cg_ok(cg_mpi_library_version(buf, need));
  ck_assert_str_eq(buf, text);
  memset(buf, 'x', sizeof buf);
  assert_refused(cg_mpi_library_version(buf, need - 1), "cg_mpi_library_version");
  ck_assert_str_eq(buf, "");
  assert_refused(cg_mpi_library_version(buf, 0), "cg_mpi_library_version");
  assert_refused(cg_mpi_library_version(NULL, sizeof buf), "cg_mpi_library_version");
}
END_TEST

START_TEST(language__info_write_is_rank_0s_and_the_cginfo_report) {
  int rank = cg_mpi_rank(), size = cg_mpi_size(), level = MPI_THREAD_SINGLE;
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  ck_assert_cg_ok(cg_info_write(f, MPI_COMM_WORLD));
  char *text = read_back(f);
  if (rank == 0) {
    char want[160];
    ck_assert_msg(strncmp(text, "commgraph ", 10) == 0, "the report starts '%.40s'", text);
    ck_assert_ptr_nonnull(strstr(text, "\nbackends: offline mpi"));
    snprintf(want, sizeof want, "\nranks: %d, ", size);
    ck_assert_msg(strstr(text, want) != NULL, "no '%s' in the report", want + 1);
    snprintf(want, sizeof want, "\nrank %d: local rank ", size - 1);
    ck_assert_msg(strstr(text, want) != NULL, "no '%s' in the report", want + 1);
    MPI_Query_thread(&level);
    snprintf(want, sizeof want, "\nMPI thread level: %s\n", cg_mpi_thread_level_name(level));
    ck_assert_msg(strstr(text, want) != NULL, "no '%s' in the report", want + 1);
    ck_assert_ptr_nonnull(strstr(text, "\nenvironment (rank 0):\n"));
  } else {
    ck_assert_msg(text[0] == '\0', "rank %d wrote '%.40s'", rank, text);
  }
  free(text);
  fclose(f);
}
END_TEST

/* Through a Fortran handle on each rank's own MPI_COMM_SELF: every rank is
 * rank 0 of one and writes a report of one rank. */
START_TEST(language__info_write_fortran_on_a_handle) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  ck_assert_cg_ok(cg_info_write_fortran(f, MPI_Comm_c2f(MPI_COMM_SELF)));
  char *text = read_back(f);
  ck_assert_ptr_nonnull(strstr(text, "\nranks: 1, "));
  ck_assert_ptr_nonnull(strstr(text, "\nrank 0: local rank "));
  ck_assert_ptr_null(strstr(text, "\nrank 1: "));
  free(text);
  fclose(f);
}
END_TEST

START_TEST(language__info_write_refuses_before_any_collective) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  assert_refused(cg_info_write(NULL, MPI_COMM_WORLD), "cg_info_write");
  assert_refused(cg_info_write(f, MPI_COMM_NULL), "cg_info_write");
  assert_refused(cg_info_write_fortran(NULL, cg_mpi_world_fortran()), "cg_info_write_fortran");
  assert_refused(cg_info_write_fortran(f, MPI_Comm_c2f(MPI_COMM_NULL)), "cg_info_write_fortran");
  /* an intercommunicator between the odd and the even ranks */
  if (cg_mpi_size() >= 2) {
    int rank = cg_mpi_rank();
    MPI_Comm half = MPI_COMM_NULL, inter = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 32000, &inter);
    assert_refused(cg_info_write(f, inter), "cg_info_write");
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
  }
  ck_assert_int_eq(ftell(f), 0);
  fclose(f);
}
END_TEST

/* Under CG_TIMEOUT the last rank never calls (on a duplicate of the world,
 * where the others' barrier stays posted): the others fail on time naming
 * it, write nothing, and the world still pairs collectives. */
START_TEST(language__info_write_without_a_rank_times_out_naming_it) {
  int rank = cg_mpi_rank(), size = cg_mpi_size(), late = size - 1;
  const char *given = getenv("CG_TIMEOUT");
  char *saved = given ? strdup(given) : NULL;
  setenv("CG_TIMEOUT", "1", 1);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  if (rank != late) {
    double began = MPI_Wtime();
    cg_status_t st = cg_info_write(f, dup);
    double waited = MPI_Wtime() - began;
    char want[64];
    snprintf(want, sizeof want, "%d of %d did not answer", late, size);
    ck_assert_msg(st == CG_ERR_TIMEOUT && strstr(cg_error_last(), "cg_info_write") && strstr(cg_error_last(), want),
                  "rank %d: %s: %s", rank, cg_status_string(st), cg_error_last());
    ck_assert_msg(waited >= 1.0 && waited < 1.5, "rank %d gave up after %.3f s", rank, waited);
    ck_assert_int_eq(ftell(f), 0);
  }
  if (saved)
    setenv("CG_TIMEOUT", saved, 1);
  else
    unsetenv("CG_TIMEOUT");
  free(saved);
  fclose(f);
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  ck_assert_int_eq(sum, size);
  /* the roll call's messages to the late rank, received so none is left */
  for (int flag = 1; flag;) {
    MPI_Message message;
    char bytes[1024];
    MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &flag, &message, MPI_STATUS_IGNORE);
    if (flag) MPI_Mrecv(bytes, (int)sizeof bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mpi_language");
  TCase *tc = cg_mpi_tcase("language");
  tcase_add_test(tc, language__init_after_the_program_reports_the_level_and_starts_nothing);
  tcase_add_test(tc, language__world_fortran_round_trips);
  tcase_add_test(tc, language__comm_create_fortran_gives_the_communicator_of_the_handle);
  tcase_add_test(tc, language__library_version_is_the_first_line_of_mpis);
  tcase_add_test(tc, language__info_write_is_rank_0s_and_the_cginfo_report);
  tcase_add_test(tc, language__info_write_fortran_on_a_handle);
  tcase_add_test(tc, language__info_write_refuses_before_any_collective);
  tcase_add_test(tc, language__info_write_without_a_rank_times_out_naming_it);
  suite_add_tcase(s, tc);
  return cg_mpi_test_main(s);
}
