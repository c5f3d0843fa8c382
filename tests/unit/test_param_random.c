/* The "random" test case of the param suite: random strings, good and bad,
 * for every kind of value, and random bytes. Kept apart from test_param.c
 * (the table, the values of each kind written out by hand, the refusals and
 * cg_compile) because it is a generator of values with what each must read
 * as, rather than cases chosen by hand; both go through the parsing helpers
 * of test_param.h. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "param.h"
#include "test_param.h"
#include "test_support.h"
#include "text.h"

/* ---- random strings, good and bad, for every kind. Good ones are built with
 * their value known; bad ones are good ones spoiled (a character no form
 * takes, in front or behind) or words no kind takes. */

static void random_case(char *text) {
  for (; *text; text++)
    if (cg_test_below(2)) *text = (char)toupper((unsigned char)*text);
}

/* Zeros in front, sometimes. */
static void leading_zeros(char *text, size_t size) {
  size_t zeros = cg_test_below(3) ? 0 : cg_test_below(4), n = strlen(text);
  if (n + zeros + 1 > size) return;
  memmove(text + zeros, text, n + 1);
  memset(text, '0', zeros);
}

/* A good value of `param`'s kind in text[], and what it reads as. */
typedef struct good_value {
  double seconds;
  int on, ordinal;
  size_t bytes;
} good_value_t;

static void random_good(char *text, size_t size, good_value_t *want, cg_param_t param) {
  static const char *const on[] = {"1", "on", "yes", "true"}, *const off[] = {"0", "off", "no", "false"};
  static const char *const suffixes[] = {"", "K", "KB", "KiB", "M", "MB", "MiB", "G", "GB", "GiB"};
  static const int shifts[] = {0, 10, 10, 10, 20, 20, 20, 30, 30, 30};
  switch (cg_param_kind(param)) {
    case CG_PARAM_SECONDS:
      if (cg_test_below(2)) { /* k / 2^m: exact in binary and in decimal */
        uint64_t k = 1 + cg_test_below(1000000);
        int m = (int)cg_test_below(11);
        want->seconds = (double)k / (double)(1u << m);
        /* as a user writes it: with '.', whatever this process's locale */
        cg_text_format_double(text, size, want->seconds, 10, 1);
      } else { /* mantissa e exponent, up to 1e9 */
        uint64_t mant = 1 + cg_test_below(999);
        int e = (int)cg_test_below(7);
        double p = 1;
        for (int i = 0; i < e; i++) p *= 10;
        want->seconds = (double)mant * p;
        snprintf(text, size, "%llu%s%d", (unsigned long long)mant, cg_test_below(2) ? "e" : "E", e);
      }
      return;
    case CG_PARAM_SWITCH:
      want->on = (int)cg_test_below(2);
      snprintf(text, size, "%s", (want->on ? on : off)[cg_test_below(4)]);
      random_case(text);
      return;
    case CG_PARAM_BYTES_OR_NEVER:
      if (!cg_test_below(5)) {
        snprintf(text, size, "never");
        random_case(text);
        want->bytes = SIZE_MAX;
        return;
      }
      /* fall through */
    case CG_PARAM_BYTES: {
      uint64_t v = cg_test_below(2) ? cg_test_below(4096) : cg_test_rand() >> cg_test_below(64);
      size_t s = (size_t)cg_test_below(10);
      snprintf(text, size, "%llu", (unsigned long long)v);
      leading_zeros(text, size);
      char suffix[8];
      snprintf(suffix, sizeof suffix, "%s", suffixes[s]);
      random_case(suffix);
      strncat(text, suffix, size - strlen(text) - 1);
      want->bytes = v > (SIZE_MAX >> shifts[s]) ? SIZE_MAX : (size_t)v << shifts[s];
      return;
    }
    case CG_PARAM_ORDINAL:
      want->ordinal = (int)(cg_test_rand() % ((uint64_t)INT_MAX + 1));
      if (cg_test_below(2)) want->ordinal %= 16;
      snprintf(text, size, "%d", want->ordinal);
      leading_zeros(text, size);
      if (!cg_test_below(4)) strncat(text, cg_test_below(2) ? " " : "\t\n", size - strlen(text) - 1);
      return;
    case CG_PARAM_PATH:
      snprintf(text, size, "/tmp/dir%llu", (unsigned long long)cg_test_below(1000));
      return;
  }
}

/* `param`'s good value spoiled: no kind takes it. */
static void random_bad(char *text, size_t size, cg_param_t param) {
  static const char *const words[] = {"abc", "lots", "maybe", "perhaps", "nevermore", "x", "?", "-", ".", "+",
                                      "enable", "disabled", "NaN", "inf", "-inf", "1,000", "0x10", "64T"};
  static const char junk[] = "xzqXZ#?/,;_%=@!~";
  good_value_t ignored;
  switch (cg_test_below(3)) {
    case 0:
      snprintf(text, size, "%s", words[cg_test_below(sizeof words / sizeof words[0])]);
      return;
    case 1: { /* junk in front; for the sizes a sign too */
      char good[64];
      random_good(good, sizeof good, &ignored, param);
      char front = cg_test_below(2) ? junk[cg_test_below(sizeof junk - 1)] : "-+ \t"[cg_test_below(4)];
      snprintf(text, size, "%c%s", front, good);
      return;
    }
    default: { /* junk behind */
      char good[64];
      random_good(good, sizeof good, &ignored, param);
      /* a blank behind an ordinal is taken (trimmed) */
      snprintf(text, size, "%s%c", good, junk[cg_test_below(sizeof junk - 1)]);
      return;
    }
  }
}

START_TEST(param__random_good_values_of_every_kind) {
  cg_test_reseed(0x9a0d);
  char text[96];
  for (int round = 0; round < 2000; round++) {
    cg_param_t param = (cg_param_t)cg_test_below(CG_PARAM_COUNT);
    good_value_t want = {0, 0, 0, 0};
    random_good(text, sizeof text, &want, param);
    double seconds = -1.0;
    int on = -1, ordinal = -1;
    size_t bytes = 12345;
    switch (cg_param_kind(param)) {
      case CG_PARAM_SECONDS:
        ck_assert_msg(param_seconds_of(text, &seconds) == 1, "CG_TIMEOUT=\"%s\" refused (seed %llu)", text,
                      (unsigned long long)cg_test_seed());
        ck_assert_msg(seconds == want.seconds, "CG_TIMEOUT=\"%s\" read as %.17g, expected %.17g", text, seconds,
                      want.seconds);
        break;
      case CG_PARAM_SWITCH:
        ck_assert_msg(param_switch_of(param, text, &on) == 1, "%s=\"%s\" refused", cg_param_name(param), text);
        ck_assert_int_eq(on, want.on);
        break;
      case CG_PARAM_BYTES:
      case CG_PARAM_BYTES_OR_NEVER:
        ck_assert_msg(param_bytes_of(param, text, &bytes) == 1, "%s=\"%s\" refused", cg_param_name(param), text);
        ck_assert_msg(bytes == want.bytes, "%s=\"%s\" read as %zu, expected %zu", cg_param_name(param), text, bytes,
                      want.bytes);
        break;
      case CG_PARAM_ORDINAL:
        ck_assert_msg(param_ordinal_of(text, &ordinal) == 1, "CG_DEVICE=\"%s\" refused", text);
        ck_assert_int_eq(ordinal, want.ordinal);
        break;
      case CG_PARAM_PATH: ck_assert_int_eq(param_parse_as_kind(param, text), 1); break;
    }
    setenv(cg_param_name(param), text, 1);
    ck_assert_cg_ok(cg_param_check(param, WHERE));
    unsetenv(cg_param_name(param));
  }
}
END_TEST

START_TEST(param__random_bad_values_of_every_kind) {
  cg_test_reseed(0xbad0);
  char text[96];
  for (int round = 0; round < 2000; round++) {
    cg_param_t param = (cg_param_t)cg_test_below(CG_PARAM_COUNT);
    if (cg_param_kind(param) == CG_PARAM_PATH) continue; /* any text is a path */
    random_bad(text, sizeof text, param);
    ck_assert_msg(param_parse_as_kind(param, text) == 0, "%s=\"%s\" accepted (seed %llu)", cg_param_name(param), text,
                  (unsigned long long)cg_test_seed());
  }
}
END_TEST

/* Any bytes at all: either taken (and then again, the same) or refused with a
 * detail of printable characters that names the variable. */
START_TEST(param__random_bytes_never_crash_and_are_shown_printable) {
  cg_test_reseed(0xb17e5);
  char text[160];
  for (int round = 0; round < 3000; round++) {
    cg_param_t param = (cg_param_t)cg_test_below(CG_PARAM_COUNT);
    size_t n = 1 + cg_test_below(cg_test_below(8) ? 12 : sizeof text - 1);
    for (size_t i = 0; i < n; i++) {
      unsigned c = cg_test_below(4) ? (unsigned char)"0123456789kKmMgGbBiI.eE-+ nevroNfyst"[cg_test_below(36)]
                                    : (unsigned)(1 + cg_test_below(255));
      text[i] = (char)c;
    }
    text[n] = '\0';
    int taken = param_parse_as_kind(param, text); /* checks the detail word for word */
    if (!taken) {
      for (const char *c = cg_error_last(); *c; c++) ck_assert_msg(isprint((unsigned char)*c), "unprintable detail");
      ck_assert_uint_le(strlen(cg_error_last()), 400);
    }
  }
}
END_TEST

void param_add_random_tests(TCase *tc) {
  tcase_add_test(tc, param__random_good_values_of_every_kind);
  tcase_add_test(tc, param__random_bad_values_of_every_kind);
  tcase_add_test(tc, param__random_bytes_never_crash_and_are_shown_printable);
}
