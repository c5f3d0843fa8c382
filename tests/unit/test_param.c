/* The environment variables the library reads (core/param.c): the table's
 * names, and per kind of value what parses, what is rejected (0, *out left
 * alone, one line on stderr per variable and process), "never", the K/M/G
 * suffixes, overflow to SIZE_MAX and switches in any case. Each test sets the
 * variables it reads with setenv and unsets them again. */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "param.h"
#include "test_support.h"

/* ---- helpers: set the variable, parse, unset */

static int seconds_of(const char *text, double *out) {
  setenv(cg_param_name(CG_PARAM_TIMEOUT), text, 1);
  int ok = cg_param_seconds(out, CG_PARAM_TIMEOUT);
  unsetenv(cg_param_name(CG_PARAM_TIMEOUT));
  return ok;
}

static int switch_of(cg_param_t param, const char *text, int *out) {
  setenv(cg_param_name(param), text, 1);
  int ok = cg_param_switch(out, param);
  unsetenv(cg_param_name(param));
  return ok;
}

static int bytes_of(cg_param_t param, const char *text, size_t *out) {
  setenv(cg_param_name(param), text, 1);
  int ok = cg_param_bytes(out, param);
  unsetenv(cg_param_name(param));
  return ok;
}

static int ordinal_of(const char *text, int *out) {
  setenv(cg_param_name(CG_PARAM_DEVICE), text, 1);
  int ok = cg_param_ordinal(out, CG_PARAM_DEVICE);
  unsetenv(cg_param_name(CG_PARAM_DEVICE));
  return ok;
}

/* ---- the table */

typedef struct param_entry {
  cg_param_t id;
  const char *variable;
  cg_param_kind_t kind;
} param_entry_t;

#define CG_TEST_PARAM_ENTRY(id, variable, kind, takes, does) {id, variable, kind},
static const param_entry_t param_table[] = {CG_PARAM_LIST(CG_TEST_PARAM_ENTRY)};
#undef CG_TEST_PARAM_ENTRY
#define N_PARAMS (sizeof param_table / sizeof param_table[0])

START_TEST(param__names_come_from_the_table) {
  ck_assert_uint_eq(N_PARAMS, CG_PARAM_COUNT);
  for (size_t i = 0; i < N_PARAMS; i++) {
    const param_entry_t *e = &param_table[i];
    ck_assert_int_eq((int)e->id, (int)i); /* dense, from 0 */
    ck_assert_str_eq(cg_param_name(e->id), e->variable);
    ck_assert_int_eq(strncmp(e->variable, "CG_", 3), 0);
    for (size_t j = 0; j < i; j++) ck_assert_str_ne(param_table[j].variable, e->variable);
  }
  ck_assert_str_eq(cg_param_name(CG_PARAM_TIMEOUT), "CG_TIMEOUT");
  ck_assert_str_eq(cg_param_name(CG_PARAM_BUCKET_BYTES), "CG_BUCKET_BYTES");
}
END_TEST

/* Unset or empty: 0 from every parser, *out untouched, no text. */
START_TEST(param__unset_and_empty_read_as_unset) {
  static const char *const values[] = {NULL, ""};
  for (size_t v = 0; v < 2; v++) {
    for (size_t i = 0; i < N_PARAMS; i++) {
      const param_entry_t *e = &param_table[i];
      if (values[v])
        setenv(e->variable, values[v], 1);
      else
        unsetenv(e->variable);
      ck_assert_ptr_null(cg_param_text(e->id));
      double seconds = -7.0;
      int on = -7, ordinal = -7;
      size_t bytes = 7;
      switch (e->kind) {
        case CG_PARAM_SECONDS: ck_assert_int_eq(cg_param_seconds(&seconds, e->id), 0); break;
        case CG_PARAM_SWITCH: ck_assert_int_eq(cg_param_switch(&on, e->id), 0); break;
        case CG_PARAM_BYTES:
        case CG_PARAM_BYTES_OR_NEVER: ck_assert_int_eq(cg_param_bytes(&bytes, e->id), 0); break;
        case CG_PARAM_ORDINAL: ck_assert_int_eq(cg_param_ordinal(&ordinal, e->id), 0); break;
        case CG_PARAM_PATH: break;
      }
      ck_assert(seconds == -7.0);
      ck_assert_int_eq(on, -7);
      ck_assert_int_eq(ordinal, -7);
      ck_assert_uint_eq(bytes, 7);
      unsetenv(e->variable);
    }
  }
}
END_TEST

START_TEST(param__path_is_the_text) {
  const char *name = cg_param_name(CG_PARAM_FLIGHT_DIR);
  setenv(name, "/tmp/flight dir", 1);
  ck_assert_str_eq(cg_param_text(CG_PARAM_FLIGHT_DIR), "/tmp/flight dir");
  setenv(name, " ", 1); /* not empty */
  ck_assert_str_eq(cg_param_text(CG_PARAM_FLIGHT_DIR), " ");
  unsetenv(name);
  ck_assert_ptr_null(cg_param_text(CG_PARAM_FLIGHT_DIR));
}
END_TEST

/* ---- seconds */

START_TEST(param__seconds_valid) {
  static const struct {
    const char *text;
    double want;
  } cases[] = {{"5", 5.0}, {"0.25", 0.25}, {"1e3", 1000.0}, {"120.5", 120.5}, {"1e9", 1e9}, {"0.001", 0.001}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double out = -1.0;
    ck_assert_msg(seconds_of(cases[i].text, &out) == 1, "CG_TIMEOUT=%s rejected", cases[i].text);
    ck_assert_msg(out == cases[i].want, "CG_TIMEOUT=%s read as %g", cases[i].text, out);
  }
}
END_TEST

START_TEST(param__seconds_rejected) {
  static const char *const bad[] = {"0", "-1", "-0.5", "abc", "5s", "5 s", "1e10", "2e9", "inf", "nan", "1e999", "."};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    double out = -1.0;
    ck_assert_msg(seconds_of(bad[i], &out) == 0, "CG_TIMEOUT=%s accepted", bad[i]);
    ck_assert_msg(out == -1.0, "CG_TIMEOUT=%s changed *out to %g", bad[i], out);
  }
}
END_TEST

/* ---- switches */

START_TEST(param__switch_words_in_any_case) {
  static const char *const on[] = {"1", "on", "yes", "true", "ON", "On", "YES", "yEs", "TRUE", "True"};
  static const char *const off[] = {"0", "off", "no", "false", "OFF", "Off", "NO", "nO", "FALSE", "fAlSe"};
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
    int out = -1;
    ck_assert_msg(switch_of(CG_PARAM_FUSION, on[i], &out) == 1, "CG_FUSION=%s rejected", on[i]);
    ck_assert_msg(out == 1, "CG_FUSION=%s read as %d", on[i], out);
  }
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    int out = -1;
    ck_assert_msg(switch_of(CG_PARAM_FUSION, off[i], &out) == 1, "CG_FUSION=%s rejected", off[i]);
    ck_assert_msg(out == 0, "CG_FUSION=%s read as %d", off[i], out);
  }
}
END_TEST

START_TEST(param__switch_rejected) {
  static const char *const bad[] = {"2", "-1", "10", "maybe", "o", "onn", "of", "offf", "yess", "tru",
                                    " 1", "1 ", "on ", "y", "n", "enable", "00", "01"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int out = -1;
    ck_assert_msg(switch_of(CG_PARAM_FUSION, bad[i], &out) == 0, "CG_FUSION=\"%s\" accepted", bad[i]);
    ck_assert_msg(out == -1, "CG_FUSION=\"%s\" changed *out to %d", bad[i], out);
  }
}
END_TEST

/* ---- sizes */

START_TEST(param__bytes_valid_with_suffixes) {
  static const struct {
    const char *text;
    size_t want;
  } cases[] = {
      {"0", 0},
      {"1", 1},
      {"65536", 65536},
      {"64K", (size_t)64 << 10},
      {"64k", (size_t)64 << 10},
      {"64KB", (size_t)64 << 10},
      {"64kb", (size_t)64 << 10},
      {"64KiB", (size_t)64 << 10},
      {"64kIb", (size_t)64 << 10},
      {"25M", (size_t)25 << 20},
      {"25m", (size_t)25 << 20},
      {"25MB", (size_t)25 << 20},
      {"25MiB", (size_t)25 << 20},
      {"1G", (size_t)1 << 30},
      {"1g", (size_t)1 << 30},
      {"3GB", (size_t)3 << 30},
      {"2GiB", (size_t)2 << 30},
      {"0K", 0},
      {"007", 7},
  };
  static const cg_param_t params[] = {CG_PARAM_BUCKET_BYTES, CG_PARAM_CHUNK_BYTES, CG_PARAM_BCAST_CHAIN_BYTES};
  for (size_t p = 0; p < sizeof params / sizeof params[0]; p++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      size_t out = 12345;
      ck_assert_msg(bytes_of(params[p], cases[i].text, &out) == 1, "%s=%s rejected", cg_param_name(params[p]),
                    cases[i].text);
      ck_assert_msg(out == cases[i].want, "%s=%s read as %zu, expected %zu", cg_param_name(params[p]), cases[i].text,
                    out, cases[i].want);
    }
}
END_TEST

START_TEST(param__bytes_rejected) {
  static const char *const bad[] = {"-1", "+1",  "abc", "K",   "64X",  "64T", "64KBB", "64KiBx", "64Ki", "64 K",
                                    " 64", "64 ", "1.5M", "1e6", "0x10", "64iB", "64B",  "never",  "NEVER", "M1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t out = 12345;
    ck_assert_msg(bytes_of(CG_PARAM_BUCKET_BYTES, bad[i], &out) == 0, "CG_BUCKET_BYTES=\"%s\" accepted", bad[i]);
    ck_assert_msg(out == 12345, "CG_BUCKET_BYTES=\"%s\" changed *out to %zu", bad[i], out);
  }
}
END_TEST

/* Too large for size_t, before or after the suffix: SIZE_MAX. */
START_TEST(param__bytes_overflow_to_size_max) {
  char text[64];
  static const char *const huge[] = {"99999999999999999999999", "99999999999999999999999K", "18446744073709551616",
                                     "18446744073709551615G", "9999999999999999999M"};
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    size_t out = 12345;
    ck_assert_msg(bytes_of(CG_PARAM_BUCKET_BYTES, huge[i], &out) == 1, "CG_BUCKET_BYTES=%s rejected", huge[i]);
    ck_assert_msg(out == SIZE_MAX, "CG_BUCKET_BYTES=%s read as %zu", huge[i], out);
  }
  /* the edges: the largest that fits each shift, and one more */
  static const struct {
    const char *suffix;
    int shift;
  } shifts[] = {{"", 0}, {"K", 10}, {"M", 20}, {"G", 30}};
  for (size_t s = 0; s < sizeof shifts / sizeof shifts[0]; s++) {
    unsigned long long fits = (unsigned long long)(SIZE_MAX >> shifts[s].shift);
    size_t out = 12345;
    snprintf(text, sizeof text, "%llu%s", fits, shifts[s].suffix);
    ck_assert_msg(bytes_of(CG_PARAM_CHUNK_BYTES, text, &out) == 1, "CG_CHUNK_BYTES=%s rejected", text);
    ck_assert_msg(out == (size_t)fits << shifts[s].shift, "CG_CHUNK_BYTES=%s read as %zu", text, out);
    if (shifts[s].shift) ck_assert_uint_ne(out, SIZE_MAX);
    if (fits == ULLONG_MAX) continue; /* no larger value in the parser's range */
    out = 12345;
    snprintf(text, sizeof text, "%llu%s", fits + 1, shifts[s].suffix);
    ck_assert_msg(bytes_of(CG_PARAM_CHUNK_BYTES, text, &out) == 1, "CG_CHUNK_BYTES=%s rejected", text);
    ck_assert_msg(out == SIZE_MAX, "CG_CHUNK_BYTES=%s read as %zu", text, out);
  }
}
END_TEST

START_TEST(param__never_only_where_the_kind_takes_it) {
  static const char *const never[] = {"never", "NEVER", "Never", "nEvEr"};
  for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
    size_t out = 12345;
    ck_assert_msg(bytes_of(CG_PARAM_BCAST_CHAIN_BYTES, never[i], &out) == 1, "CG_BCAST_CHAIN_BYTES=%s rejected",
                  never[i]);
    ck_assert_uint_eq(out, SIZE_MAX);
    out = 12345;
    ck_assert_msg(bytes_of(CG_PARAM_CHUNK_BYTES, never[i], &out) == 0, "CG_CHUNK_BYTES=%s accepted", never[i]);
    ck_assert_uint_eq(out, 12345);
  }
  static const char *const bad[] = {"nevermore", "neve", "never ", " never", "always", "-1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t out = 12345;
    ck_assert_msg(bytes_of(CG_PARAM_BCAST_CHAIN_BYTES, bad[i], &out) == 0, "CG_BCAST_CHAIN_BYTES=\"%s\" accepted",
                  bad[i]);
    ck_assert_uint_eq(out, 12345);
  }
  size_t out = 0;
  ck_assert_int_eq(bytes_of(CG_PARAM_BCAST_CHAIN_BYTES, "1M", &out), 1);
  ck_assert_uint_eq(out, (size_t)1 << 20);
}
END_TEST

/* ---- ordinals */

START_TEST(param__ordinal_valid) {
  static const struct {
    const char *text;
    int want;
  } cases[] = {{"0", 0}, {"3", 3}, {"07", 7}, {"2147483647", INT_MAX}, {"5 ", 5}, {"5\n", 5}, {"5\t", 5}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int out = -1;
    ck_assert_msg(ordinal_of(cases[i].text, &out) == 1, "CG_DEVICE=\"%s\" rejected", cases[i].text);
    ck_assert_msg(out == cases[i].want, "CG_DEVICE=\"%s\" read as %d", cases[i].text, out);
  }
}
END_TEST

START_TEST(param__ordinal_rejected) {
  static const char *const bad[] = {"-1", "+3", " 3", "x", "3x", "1.5", "0x1", "2147483648", "99999999999999999999",
                                    "-0", "1 2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int out = -1;
    ck_assert_msg(ordinal_of(bad[i], &out) == 0, "CG_DEVICE=\"%s\" accepted", bad[i]);
    ck_assert_msg(out == -1, "CG_DEVICE=\"%s\" changed *out to %d", bad[i], out);
  }
}
END_TEST

/* ---- the report: one line per variable and process, naming it, its value and
 * what it takes; then the value reads as unset. CG_MPI_CUDA_AWARE is read by
 * no other test here, so this holds without Check's fork too. */

START_TEST(param__bad_value_reported_once) {
  FILE *capture = tmpfile();
  ck_assert_ptr_nonnull(capture);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_ge(dup2(fileno(capture), STDERR_FILENO), 0);
  int out = -1, first, second, third;
  setenv("CG_MPI_CUDA_AWARE", "perhaps", 1);
  first = cg_param_switch(&out, CG_PARAM_MPI_CUDA_AWARE);
  second = cg_param_switch(&out, CG_PARAM_MPI_CUDA_AWARE);
  setenv("CG_MPI_CUDA_AWARE", "sometimes", 1);
  third = cg_param_switch(&out, CG_PARAM_MPI_CUDA_AWARE);
  unsetenv("CG_MPI_CUDA_AWARE");
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  ck_assert_int_eq(first, 0);
  ck_assert_int_eq(second, 0);
  ck_assert_int_eq(third, 0);
  ck_assert_int_eq(out, -1);
  char text[1024] = {0};
  rewind(capture);
  size_t got = fread(text, 1, sizeof text - 1, capture);
  fclose(capture);
  text[got] = 0;
  ck_assert_msg(strstr(text, "CG_MPI_CUDA_AWARE") && strstr(text, "perhaps") && strstr(text, "0 or 1"),
                "report: \"%s\"", text);
  ck_assert_msg(!strstr(text, "sometimes"), "reported twice: \"%s\"", text);
  size_t lines = 0;
  for (const char *c = text; *c; c++) lines += *c == '\n';
  ck_assert_uint_eq(lines, 1);
  /* a good value still parses after the report */
  ck_assert_int_eq(switch_of(CG_PARAM_MPI_CUDA_AWARE, "1", &out), 1);
  ck_assert_int_eq(out, 1);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("param");
  TCase *tc = tcase_create("table");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, param__names_come_from_the_table);
  tcase_add_test(tc, param__unset_and_empty_read_as_unset);
  tcase_add_test(tc, param__path_is_the_text);
  suite_add_tcase(s, tc);

  tc = tcase_create("kinds");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, param__seconds_valid);
  tcase_add_test(tc, param__seconds_rejected);
  tcase_add_test(tc, param__switch_words_in_any_case);
  tcase_add_test(tc, param__switch_rejected);
  tcase_add_test(tc, param__bytes_valid_with_suffixes);
  tcase_add_test(tc, param__bytes_rejected);
  tcase_add_test(tc, param__bytes_overflow_to_size_max);
  tcase_add_test(tc, param__never_only_where_the_kind_takes_it);
  tcase_add_test(tc, param__ordinal_valid);
  tcase_add_test(tc, param__ordinal_rejected);
  suite_add_tcase(s, tc);

  tc = tcase_create("report");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, param__bad_value_reported_once);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
