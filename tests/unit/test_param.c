/* The environment variables the library reads (core/param.c): the table's
 * names, and per kind of value what parses, what is refused (status
 * CG_ERR_INVALID_ARGUMENT, *out left alone, *is_set 0, the error detail naming
 * the caller, the variable, its value, what it takes and a good value),
 * "never", the K/M/G suffixes, overflow to SIZE_MAX and switches in any case;
 * the stderr report of callers without an error path (where NULL), once per
 * variable and process; and cg_compile refusing a bad CG_TIMEOUT, CG_FUSION or
 * CG_BUCKET_BYTES. Random good and bad strings for every kind are in
 * test_param_random.c. Each test sets the variables it reads with setenv and
 * unsets them again. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "param.h"
#include "plan_internal.h"
#include "test_param.h"
#include "test_support.h"

/* ---- the table */

typedef struct param_entry {
  cg_param_t id;
  const char *variable;
  cg_param_kind_t kind;
  const char *takes, *example, *does;
} param_entry_t;

#define CG_TEST_PARAM_ENTRY(id, variable, kind, takes, example, does) {id, variable, kind, takes, example, does},
static const param_entry_t param_table[] = {CG_PARAM_LIST(CG_TEST_PARAM_ENTRY)};
#undef CG_TEST_PARAM_ENTRY
#define N_PARAMS (sizeof param_table / sizeof param_table[0])

/* ---- helpers: set the variable, parse, unset. Each returns 1 when the value
 * was taken, 0 when it was refused, and checks on the way what every parser
 * promises: a taken value sets *is_set; a refused one leaves *out alone,
 * clears *is_set and says why in the expected words. */

/* The detail a refused value must leave. */
static void expect_refusal(cg_param_t param, const char *text) {
  char want[512], shown[80];
  size_t n = 0;
  for (; text[n] && n < 64; n++) shown[n] = isprint((unsigned char)text[n]) ? text[n] : '?';
  if (text[n]) {
    memcpy(shown + n, "...", 3);
    n += 3;
  }
  shown[n] = '\0';
  snprintf(want, sizeof want, "%s: environment variable %s='%s' is not %s (unset it or give e.g. %s)", WHERE,
           cg_param_name(param), shown, cg_param_takes(param), cg_param_example(param));
  ck_assert_msg(strcmp(cg_error_last(), want) == 0, "%s: detail\n  \"%s\", expected\n  \"%s\"", cg_param_name(param),
                cg_error_last(), want);
}

/* After the parser's status `st` with *is_set `set` (started as 7). */
static int verdict(cg_param_t param, const char *text, cg_status_t st, int set, int untouched) {
  if (st == CG_SUCCESS) {
    ck_assert_msg(set == 1, "%s=\"%s\" taken, *is_set %d", cg_param_name(param), text, set);
    return 1;
  }
  ck_assert_msg(st == CG_ERR_INVALID_ARGUMENT, "%s=\"%s\": %s", cg_param_name(param), text, cg_status_string(st));
  ck_assert_msg(set == 0, "%s=\"%s\" refused, *is_set %d", cg_param_name(param), text, set);
  ck_assert_msg(untouched, "%s=\"%s\" refused but *out changed", cg_param_name(param), text);
  expect_refusal(param, text);
  /* the same verdict from the kind-blind check */
  ck_assert_int_eq(cg_param_check(param, WHERE), CG_ERR_INVALID_ARGUMENT);
  expect_refusal(param, text);
  return 0;
}

int param_seconds_of(const char *text, double *out) {
  double before = *out;
  int set = 7;
  setenv(cg_param_name(CG_PARAM_TIMEOUT), text, 1);
  cg_status_t st = cg_param_seconds(out, &set, CG_PARAM_TIMEOUT, WHERE);
  int ok = verdict(CG_PARAM_TIMEOUT, text, st, set, *out == before);
  unsetenv(cg_param_name(CG_PARAM_TIMEOUT));
  return ok;
}

int param_switch_of(cg_param_t param, const char *text, int *out) {
  int before = *out, set = 7;
  setenv(cg_param_name(param), text, 1);
  cg_status_t st = cg_param_switch(out, &set, param, WHERE);
  int ok = verdict(param, text, st, set, *out == before);
  unsetenv(cg_param_name(param));
  return ok;
}

int param_bytes_of(cg_param_t param, const char *text, size_t *out) {
  size_t before = *out;
  int set = 7;
  setenv(cg_param_name(param), text, 1);
  cg_status_t st = cg_param_bytes(out, &set, param, WHERE);
  int ok = verdict(param, text, st, set, *out == before);
  unsetenv(cg_param_name(param));
  return ok;
}

int param_ordinal_of(const char *text, int *out) {
  int before = *out, set = 7;
  setenv(cg_param_name(CG_PARAM_DEVICE), text, 1);
  cg_status_t st = cg_param_ordinal(out, &set, CG_PARAM_DEVICE, WHERE);
  int ok = verdict(CG_PARAM_DEVICE, text, st, set, *out == before);
  unsetenv(cg_param_name(CG_PARAM_DEVICE));
  return ok;
}

/* Any parameter through its kind's parser: 1 taken, 0 refused. */
int param_parse_as_kind(cg_param_t param, const char *text) {
  double seconds = -1.0;
  int on = -1, ordinal = -1;
  size_t bytes = 12345;
  switch (cg_param_kind(param)) {
    case CG_PARAM_SECONDS: {
      int set = 7;
      setenv(cg_param_name(param), text, 1);
      cg_status_t st = cg_param_seconds(&seconds, &set, param, WHERE);
      int ok = verdict(param, text, st, set, seconds == -1.0);
      unsetenv(cg_param_name(param));
      return ok;
    }
    case CG_PARAM_SWITCH: return param_switch_of(param, text, &on);
    case CG_PARAM_BYTES:
    case CG_PARAM_BYTES_OR_NEVER: return param_bytes_of(param, text, &bytes);
    case CG_PARAM_ORDINAL: {
      int set = 7;
      setenv(cg_param_name(param), text, 1);
      cg_status_t st = cg_param_ordinal(&ordinal, &set, param, WHERE);
      int ok = verdict(param, text, st, set, ordinal == -1);
      unsetenv(cg_param_name(param));
      return ok;
    }
    case CG_PARAM_PATH: break;
  }
  setenv(cg_param_name(param), text, 1);
  ck_assert_int_eq(cg_param_check(param, WHERE), CG_SUCCESS);
  unsetenv(cg_param_name(param));
  return 1;
}

START_TEST(param__names_come_from_the_table) {
  ck_assert_uint_eq(N_PARAMS, CG_PARAM_COUNT);
  for (size_t i = 0; i < N_PARAMS; i++) {
    const param_entry_t *e = &param_table[i];
    ck_assert_int_eq((int)e->id, (int)i); /* dense, from 0 */
    ck_assert_str_eq(cg_param_name(e->id), e->variable);
    ck_assert_int_eq((int)cg_param_kind(e->id), (int)e->kind);
    ck_assert_str_eq(cg_param_takes(e->id), e->takes);
    ck_assert_str_eq(cg_param_example(e->id), e->example);
    ck_assert_str_eq(cg_param_does(e->id), e->does);
    /* ours, or NCCL's that the library reads (and never sets) */
    ck_assert_msg(strncmp(e->variable, "CG_", 3) == 0 || strncmp(e->variable, "NCCL_", 5) == 0, "%s", e->variable);
    ck_assert(*e->takes && *e->example && *e->does);
    for (size_t j = 0; j < i; j++) ck_assert_str_ne(param_table[j].variable, e->variable);
  }
  ck_assert_str_eq(cg_param_name(CG_PARAM_TIMEOUT), "CG_TIMEOUT");
  ck_assert_str_eq(cg_param_name(CG_PARAM_BUCKET_BYTES), "CG_BUCKET_BYTES");
}
END_TEST

/* The good value each refusal suggests is taken. */
START_TEST(param__every_example_parses) {
  for (size_t i = 0; i < N_PARAMS; i++)
    ck_assert_msg(param_parse_as_kind(param_table[i].id, param_table[i].example) == 1, "%s=%s (the example) refused",
                  param_table[i].variable, param_table[i].example);
}
END_TEST

/* Unset or empty: CG_SUCCESS from every parser, *is_set 0, *out untouched, no text. */
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
      int on = -7, ordinal = -7, set = 7;
      size_t bytes = 7;
      switch (e->kind) {
        case CG_PARAM_SECONDS: ck_assert_cg_ok(cg_param_seconds(&seconds, &set, e->id, WHERE)); break;
        case CG_PARAM_SWITCH: ck_assert_cg_ok(cg_param_switch(&on, &set, e->id, WHERE)); break;
        case CG_PARAM_BYTES:
        case CG_PARAM_BYTES_OR_NEVER: ck_assert_cg_ok(cg_param_bytes(&bytes, &set, e->id, WHERE)); break;
        case CG_PARAM_ORDINAL: ck_assert_cg_ok(cg_param_ordinal(&ordinal, &set, e->id, WHERE)); break;
        case CG_PARAM_PATH: set = 0; break;
      }
      ck_assert_int_eq(set, 0);
      ck_assert_cg_ok(cg_param_check(e->id, WHERE));
      ck_assert_cg_ok(cg_param_check(e->id, NULL));
      ck_assert(seconds == -7.0);
      ck_assert_int_eq(on, -7);
      ck_assert_int_eq(ordinal, -7);
      ck_assert_uint_eq(bytes, 7);
      unsetenv(e->variable);
    }
  }
}
END_TEST

/* is_set may be NULL, good value or bad. */
START_TEST(param__is_set_may_be_null) {
  double seconds = 0;
  setenv("CG_TIMEOUT", "12", 1);
  ck_assert_cg_ok(cg_param_seconds(&seconds, NULL, CG_PARAM_TIMEOUT, WHERE));
  ck_assert(seconds == 12.0);
  setenv("CG_TIMEOUT", "twelve", 1);
  ck_assert_cg_status(cg_param_seconds(&seconds, NULL, CG_PARAM_TIMEOUT, WHERE), CG_ERR_INVALID_ARGUMENT);
  ck_assert(seconds == 12.0);
  unsetenv("CG_TIMEOUT");
  size_t bytes = 0;
  setenv("CG_CHUNK_BYTES", "8K", 1);
  ck_assert_cg_ok(cg_param_bytes(&bytes, NULL, CG_PARAM_CHUNK_BYTES, WHERE));
  ck_assert_uint_eq(bytes, 8192);
  unsetenv("CG_CHUNK_BYTES");
}
END_TEST

START_TEST(param__path_is_the_text) {
  const char *name = cg_param_name(CG_PARAM_FLIGHT_DIR);
  setenv(name, "/tmp/flight dir", 1);
  ck_assert_str_eq(cg_param_text(CG_PARAM_FLIGHT_DIR), "/tmp/flight dir");
  ck_assert_cg_ok(cg_param_check(CG_PARAM_FLIGHT_DIR, WHERE));
  setenv(name, " ", 1); /* not empty */
  ck_assert_str_eq(cg_param_text(CG_PARAM_FLIGHT_DIR), " ");
  ck_assert_cg_ok(cg_param_check(CG_PARAM_FLIGHT_DIR, WHERE));
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
    ck_assert_msg(param_seconds_of(cases[i].text, &out) == 1, "CG_TIMEOUT=%s refused", cases[i].text);
    ck_assert_msg(out == cases[i].want, "CG_TIMEOUT=%s read as %g", cases[i].text, out);
  }
}
END_TEST

START_TEST(param__seconds_refused) {
  static const char *const bad[] = {"0",   "-1",  "-0.5", "abc", "5s", "5 s", "1e10", "2e9",  "inf", "nan",
                                    "1e999", ".", "+5",  " 5",  "5 ", "0x10", "0x1p3", "INF", "1e-400", "e5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    double out = -1.0;
    ck_assert_msg(param_seconds_of(bad[i], &out) == 0, "CG_TIMEOUT=%s accepted", bad[i]);
  }
}
END_TEST

/* ---- switches */

START_TEST(param__switch_words_in_any_case) {
  static const char *const on[] = {"1", "on", "yes", "true", "ON", "On", "YES", "yEs", "TRUE", "True"};
  static const char *const off[] = {"0", "off", "no", "false", "OFF", "Off", "NO", "nO", "FALSE", "fAlSe"};
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
    int out = -1;
    ck_assert_msg(param_switch_of(CG_PARAM_FUSION, on[i], &out) == 1, "CG_FUSION=%s refused", on[i]);
    ck_assert_msg(out == 1, "CG_FUSION=%s read as %d", on[i], out);
  }
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    int out = -1;
    ck_assert_msg(param_switch_of(CG_PARAM_FUSION, off[i], &out) == 1, "CG_FUSION=%s refused", off[i]);
    ck_assert_msg(out == 0, "CG_FUSION=%s read as %d", off[i], out);
  }
}
END_TEST

START_TEST(param__switch_refused) {
  static const char *const bad[] = {"2", "-1", "10", "maybe", "o", "onn", "of", "offf", "yess", "tru",
                                    " 1", "1 ", "on ", "y", "n", "enable", "00", "01"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int out = -1;
    ck_assert_msg(param_switch_of(CG_PARAM_FUSION, bad[i], &out) == 0, "CG_FUSION=\"%s\" accepted", bad[i]);
    out = -1;
    ck_assert_msg(param_switch_of(CG_PARAM_MPI_CUDA_AWARE, bad[i], &out) == 0, "CG_MPI_CUDA_AWARE=\"%s\" accepted",
                  bad[i]);
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
      ck_assert_msg(param_bytes_of(params[p], cases[i].text, &out) == 1, "%s=%s refused", cg_param_name(params[p]),
                    cases[i].text);
      ck_assert_msg(out == cases[i].want, "%s=%s read as %zu, expected %zu", cg_param_name(params[p]), cases[i].text,
                    out, cases[i].want);
    }
}
END_TEST

START_TEST(param__bytes_refused) {
  static const char *const bad[] = {"-1", "+1",  "abc", "K",   "64X",  "64T", "64KBB", "64KiBx", "64Ki", "64 K",
                                    " 64", "64 ", "1.5M", "1e6", "0x10", "64iB", "64B",  "never",  "NEVER", "M1", "lots"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t out = 12345;
    ck_assert_msg(param_bytes_of(CG_PARAM_BUCKET_BYTES, bad[i], &out) == 0, "CG_BUCKET_BYTES=\"%s\" accepted", bad[i]);
    out = 12345;
    ck_assert_msg(param_bytes_of(CG_PARAM_CHUNK_BYTES, bad[i], &out) == 0, "CG_CHUNK_BYTES=\"%s\" accepted", bad[i]);
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
    ck_assert_msg(param_bytes_of(CG_PARAM_BUCKET_BYTES, huge[i], &out) == 1, "CG_BUCKET_BYTES=%s refused", huge[i]);
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
    ck_assert_msg(param_bytes_of(CG_PARAM_CHUNK_BYTES, text, &out) == 1, "CG_CHUNK_BYTES=%s refused", text);
    ck_assert_msg(out == (size_t)fits << shifts[s].shift, "CG_CHUNK_BYTES=%s read as %zu", text, out);
    if (shifts[s].shift) ck_assert_uint_ne(out, SIZE_MAX);
    if (fits == ULLONG_MAX) continue; /* no larger value in the parser's range */
    out = 12345;
    snprintf(text, sizeof text, "%llu%s", fits + 1, shifts[s].suffix);
    ck_assert_msg(param_bytes_of(CG_PARAM_CHUNK_BYTES, text, &out) == 1, "CG_CHUNK_BYTES=%s refused", text);
    ck_assert_msg(out == SIZE_MAX, "CG_CHUNK_BYTES=%s read as %zu", text, out);
  }
}
END_TEST

START_TEST(param__never_only_where_the_kind_takes_it) {
  static const char *const never[] = {"never", "NEVER", "Never", "nEvEr"};
  for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
    size_t out = 12345;
    ck_assert_msg(param_bytes_of(CG_PARAM_BCAST_CHAIN_BYTES, never[i], &out) == 1, "CG_BCAST_CHAIN_BYTES=%s refused",
                  never[i]);
    ck_assert_uint_eq(out, SIZE_MAX);
    out = 12345;
    ck_assert_msg(param_bytes_of(CG_PARAM_CHUNK_BYTES, never[i], &out) == 0, "CG_CHUNK_BYTES=%s accepted", never[i]);
  }
  static const char *const bad[] = {"nevermore", "neve", "never ", " never", "always", "-1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t out = 12345;
    ck_assert_msg(param_bytes_of(CG_PARAM_BCAST_CHAIN_BYTES, bad[i], &out) == 0, "CG_BCAST_CHAIN_BYTES=\"%s\" accepted",
                  bad[i]);
  }
  size_t out = 0;
  ck_assert_int_eq(param_bytes_of(CG_PARAM_BCAST_CHAIN_BYTES, "1M", &out), 1);
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
    ck_assert_msg(param_ordinal_of(cases[i].text, &out) == 1, "CG_DEVICE=\"%s\" refused", cases[i].text);
    ck_assert_msg(out == cases[i].want, "CG_DEVICE=\"%s\" read as %d", cases[i].text, out);
  }
}
END_TEST

START_TEST(param__ordinal_refused) {
  static const char *const bad[] = {"-1", "+3", " 3", "x", "3x", "1.5", "0x1", "2147483648", "99999999999999999999",
                                    "-0", "1 2", "gpu1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int out = -1;
    ck_assert_msg(param_ordinal_of(bad[i], &out) == 0, "CG_DEVICE=\"%s\" accepted", bad[i]);
  }
}
END_TEST

/* Long values are cut, unprintable characters shown as '?'. */
START_TEST(param__long_and_unprintable_values_are_shown_safely) {
  char text[200];
  memset(text, '7', sizeof text - 1);
  text[0] = 'x';
  text[sizeof text - 1] = '\0';
  size_t out = 1;
  ck_assert_int_eq(param_bytes_of(CG_PARAM_BUCKET_BYTES, text, &out), 0); /* the detail: checked in the helper */
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "...' is not"));
  ck_assert_ptr_null(strstr(cg_error_last(), text));
  int on = -1;
  ck_assert_int_eq(param_switch_of(CG_PARAM_FUSION, "o\x01n\x1b[31m", &on), 0);
  ck_assert_str_eq(cg_error_last(), WHERE ": environment variable CG_FUSION='o?n?[31m' is not 0/off/no/false or "
                                          "1/on/yes/true (unset it or give e.g. 0)");
}
END_TEST

/* The brief's example, word for word. */
START_TEST(param__refusal_names_variable_value_and_forms) {
  double seconds = 0;
  setenv("CG_TIMEOUT", "abc", 1);
  ck_assert_cg_status(cg_param_seconds(&seconds, NULL, CG_PARAM_TIMEOUT, "cg_compile"), CG_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(cg_error_last(),
                   "cg_compile: environment variable CG_TIMEOUT='abc' is not seconds > 0 (unset it or give e.g. 30)");
  unsetenv("CG_TIMEOUT");
  size_t bytes = 0;
  setenv("CG_BUCKET_BYTES", "lots", 1);
  ck_assert_cg_status(cg_param_check(CG_PARAM_BUCKET_BYTES, "cg_compile"), CG_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(cg_error_last(), "cg_compile: environment variable CG_BUCKET_BYTES='lots' is not a size: 65536, "
                                    "64K, 25M, 1G (unset it or give e.g. 25M)");
  ck_assert_cg_status(cg_param_bytes(&bytes, NULL, CG_PARAM_BUCKET_BYTES, "cg_compile"), CG_ERR_INVALID_ARGUMENT);
  unsetenv("CG_BUCKET_BYTES");
}
END_TEST

/* ---- callers without an error path (where NULL): one line on stderr per
 * variable and process, naming it, its value and what it takes; the value
 * reads as unset and cg_error_last() is left alone. CG_MPI_CUDA_AWARE is read
 * with where NULL by no other test here, so this holds without Check's fork
 * too. */

START_TEST(param__no_error_path_reports_once_on_stderr) {
  FILE *capture = tmpfile();
  ck_assert_ptr_nonnull(capture);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_ge(dup2(fileno(capture), STDERR_FILENO), 0);
  cg_fail(CG_ERR_INTERNAL, "an earlier error");
  int out = -1, set = 7;
  cg_status_t first, second, third;
  setenv("CG_MPI_CUDA_AWARE", "perhaps", 1);
  first = cg_param_switch(&out, &set, CG_PARAM_MPI_CUDA_AWARE, NULL);
  second = cg_param_switch(&out, NULL, CG_PARAM_MPI_CUDA_AWARE, NULL);
  setenv("CG_MPI_CUDA_AWARE", "sometimes", 1);
  third = cg_param_check(CG_PARAM_MPI_CUDA_AWARE, NULL);
  unsetenv("CG_MPI_CUDA_AWARE");
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  ck_assert_int_eq(first, CG_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(second, CG_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(third, CG_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(out, -1);
  ck_assert_int_eq(set, 0);
  ck_assert_str_eq(cg_error_last(), "an earlier error");
  char text[1024] = {0};
  rewind(capture);
  size_t got = fread(text, 1, sizeof text - 1, capture);
  fclose(capture);
  text[got] = 0;
  ck_assert_str_eq(text, "commgraph: environment variable CG_MPI_CUDA_AWARE='perhaps' is not 0 or 1 (unset it or "
                         "give e.g. 1); ignored\n");
  /* a good value still parses after the report */
  ck_assert_int_eq(param_switch_of(CG_PARAM_MPI_CUDA_AWARE, "1", &out), 1);
  ck_assert_int_eq(out, 1);
}
END_TEST

/* ---- cg_compile reads CG_TIMEOUT, CG_FUSION and CG_BUCKET_BYTES: a bad one
 * fails it (nothing returned, the graph still compiles once it is fixed); good
 * ones do what they say. An offline communicator: compiles, never runs. */

static float buffers[10][64];

static cg_graph_t *ten_allreduces(cg_comm_t *comm) {
  cg_graph_t *g = NULL;
  cg_graph_opts_t o = CG_GRAPH_OPTS_INIT;
  o.name = "g";
  ck_assert_cg_ok(cg_graph_create(&g, &o));
  for (int i = 0; i < 10; i++)
    ck_assert_cg_ok(cg_allreduce(NULL, g, comm, buffers[i], buffers[i], 64, CG_FLOAT32, CG_SUM));
  return g;
}

START_TEST(param__cg_compile_refuses_a_bad_value) {
  static const struct {
    const char *variable, *value, *detail;
  } cases[] = {
      {"CG_TIMEOUT", "abc", "cg_compile: graph 'g': environment variable CG_TIMEOUT='abc' is not seconds > 0 (unset it "
                            "or give e.g. 30)"},
      {"CG_TIMEOUT", "-3", NULL},
      {"CG_FUSION", "maybe", "cg_compile: graph 'g': environment variable CG_FUSION='maybe' is not 0/off/no/false or "
                             "1/on/yes/true (unset it or give e.g. 0)"},
      {"CG_BUCKET_BYTES", "lots", "cg_compile: graph 'g': environment variable CG_BUCKET_BYTES='lots' is not a size: "
                                  "65536, 64K, 25M, 1G (unset it or give e.g. 25M)"},
      {"CG_BUCKET_BYTES", "1.5M", NULL},
  };
  cg_comm_t *comm = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 0, 2));
  cg_graph_t *g = ten_allreduces(comm);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* refused whether or not the options make the variable moot */
    for (int moot = 0; moot < 2; moot++) {
      cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
      if (moot) {
        o.timeout_s = 5;
        o.bucket_bytes = 4096;
        o.fusion = 0;
      }
      cg_plan_t *plan = (cg_plan_t *)&plan; /* must stay as it is */
      setenv(cases[i].variable, cases[i].value, 1);
      cg_status_t st = cg_compile(&plan, g, &o);
      unsetenv(cases[i].variable);
      ck_assert_msg(st == CG_ERR_INVALID_ARGUMENT, "%s=%s: %s (%s)", cases[i].variable, cases[i].value,
                    cg_status_string(st), cg_error_last());
      ck_assert_ptr_eq(plan, (cg_plan_t *)&plan);
      if (cases[i].detail) ck_assert_str_eq(cg_error_last(), cases[i].detail);
      char names[64];
      snprintf(names, sizeof names, "%s='%s'", cases[i].variable, cases[i].value);
      ck_assert_msg(strstr(cg_error_last(), names) != NULL, "\"%s\" does not name %s", cg_error_last(), names);
      /* fixed: it compiles */
      ck_assert_cg_ok(cg_compile(&plan, g, &o));
      cg_plan_destroy(plan);
    }
  }
  /* several bad: the first in the table's order is named */
  setenv("CG_BUCKET_BYTES", "lots", 1);
  setenv("CG_FUSION", "maybe", 1);
  setenv("CG_TIMEOUT", "abc", 1);
  cg_plan_t *plan = NULL;
  ck_assert_cg_status(cg_compile(&plan, g, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(plan);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "CG_TIMEOUT='abc'"));
  unsetenv("CG_TIMEOUT");
  ck_assert_cg_status(cg_compile(&plan, g, NULL), CG_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(cg_error_last(), "CG_FUSION='maybe'"));
  unsetenv("CG_FUSION");
  unsetenv("CG_BUCKET_BYTES");
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
}
END_TEST

START_TEST(param__cg_compile_takes_good_values) {
  cg_comm_t *comm = NULL;
  ck_assert_cg_ok(cg_comm_create_offline(&comm, 1, 2));
  cg_graph_t *g = ten_allreduces(comm);
  cg_plan_t *plan = NULL;
  cg_plan_stats_t stats;
  /* none set: the library's bucket, no watchdog */
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  ck_assert_uint_eq(stats.buckets, 1);
  ck_assert(plan->timeout_s == 0);
  cg_plan_destroy(plan);
  setenv("CG_TIMEOUT", "2.5", 1);
  setenv("CG_BUCKET_BYTES", "512", 1); /* two nodes of 256 bytes each per bucket */
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  ck_assert(plan->timeout_s == 2.5);
  ck_assert_uint_eq(stats.bucket_bytes, 512);
  ck_assert_uint_eq(stats.buckets, 5);
  cg_plan_destroy(plan);
  setenv("CG_FUSION", "OFF", 1);
  ck_assert_cg_ok(cg_compile(&plan, g, NULL));
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  ck_assert_uint_eq(stats.buckets, 0);
  ck_assert_uint_eq(stats.bucket_bytes, 0);
  cg_plan_destroy(plan);
  /* the options win */
  cg_compile_opts_t o = CG_COMPILE_OPTS_INIT;
  o.timeout_s = -1;
  setenv("CG_FUSION", "yes", 1);
  o.bucket_bytes = 1024;
  ck_assert_cg_ok(cg_compile(&plan, g, &o));
  ck_assert_cg_ok(cg_plan_stats(&stats, plan));
  ck_assert(plan->timeout_s == 0);
  ck_assert_uint_eq(stats.bucket_bytes, 1024);
  cg_plan_destroy(plan);
  unsetenv("CG_TIMEOUT");
  unsetenv("CG_FUSION");
  unsetenv("CG_BUCKET_BYTES");
  cg_graph_destroy(g);
  cg_comm_destroy(comm);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("param");
  TCase *tc = tcase_create("table");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, param__names_come_from_the_table);
  tcase_add_test(tc, param__every_example_parses);
  tcase_add_test(tc, param__unset_and_empty_read_as_unset);
  tcase_add_test(tc, param__is_set_may_be_null);
  tcase_add_test(tc, param__path_is_the_text);
  suite_add_tcase(s, tc);

  tc = tcase_create("kinds");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, param__seconds_valid);
  tcase_add_test(tc, param__seconds_refused);
  tcase_add_test(tc, param__switch_words_in_any_case);
  tcase_add_test(tc, param__switch_refused);
  tcase_add_test(tc, param__bytes_valid_with_suffixes);
  tcase_add_test(tc, param__bytes_refused);
  tcase_add_test(tc, param__bytes_overflow_to_size_max);
  tcase_add_test(tc, param__never_only_where_the_kind_takes_it);
  tcase_add_test(tc, param__ordinal_valid);
  tcase_add_test(tc, param__ordinal_refused);
  suite_add_tcase(s, tc);

  tc = tcase_create("random");
  tcase_set_timeout(tc, 60);
  param_add_random_tests(tc);
  suite_add_tcase(s, tc);

  tc = tcase_create("refusal");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, param__refusal_names_variable_value_and_forms);
  tcase_add_test(tc, param__long_and_unprintable_values_are_shown_safely);
  tcase_add_test(tc, param__no_error_path_reports_once_on_stderr);
  suite_add_tcase(s, tc);

  tc = tcase_create("compile");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, param__cg_compile_refuses_a_bad_value);
  tcase_add_test(tc, param__cg_compile_takes_good_values);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
