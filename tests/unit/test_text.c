/* core/text.c: copies of names, and decimal numbers written and read with
 * '.' whatever the program's LC_NUMERIC (CTest runs this suite once more
 * under a locale whose decimal point is a comma: with-comma-locale). */
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"
#include "text.h"

START_TEST(text__copies_cut_before_a_partial_utf8_sequence) {
  char *a = cg_copy_text("layer\xc2\xb5", 6); /* the cut falls inside the 2-byte sequence */
  ck_assert_str_eq(a, "layer");
  free(a);
  char *b = cg_copy_text("short", 255);
  ck_assert_str_eq(b, "short");
  free(b);
}
END_TEST

START_TEST(text__numbers_are_written_with_a_point) {
  char buf[64];
  cg_text_format_double(buf, sizeof buf, 0.25, 17, 0);
  ck_assert_str_eq(buf, "0.25");
  cg_text_format_double(buf, sizeof buf, 1.5, 3, 1);
  ck_assert_str_eq(buf, "1.500");
  cg_text_format_double(buf, sizeof buf, -12345.0625, 17, 0);
  ck_assert_str_eq(buf, "-12345.0625");
  cg_text_format_double(buf, sizeof buf, 1e-300, 3, 0);
  ck_assert_str_eq(buf, "1e-300");
  cg_text_format_double(buf, 4, 3.14159, 17, 0); /* cut to the buffer, terminated */
  ck_assert_str_eq(buf, "3.1");
}
END_TEST

START_TEST(text__numbers_are_read_with_a_point) {
  static const struct {
    const char *text;
    double want;
    size_t used;
  } cases[] = {{"0.25", 0.25, 4},     {"1.5e3 x", 1500.0, 5}, {"12", 12.0, 2},      {"-0.5,", -0.5, 4},
               {".5", 0.5, 2},        {"7.", 7.0, 2},         {"1e-3", 0.001, 4},   {"3.25.1", 3.25, 4},
               {"abc", 0.0, 0},       {"2.5e", 2.5, 3}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *end = NULL;
    double v = cg_text_to_double(cases[i].text, &end);
    ck_assert_msg(v == cases[i].want, "'%s' read as %.17g", cases[i].text, v);
    ck_assert_msg((size_t)(end - cases[i].text) == cases[i].used, "'%s': %zu characters read, not %zu",
                  cases[i].text, (size_t)(end - cases[i].text), cases[i].used);
  }
}
END_TEST

/* Random values survive writing and reading back exactly (17 digits). */
START_TEST(text__random_numbers_round_trip) {
  uint64_t x = cg_test_seed() * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < 2000; i++) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    double v = ldexp((double)(x >> 11), (int)(x % 120) - 80) * ((x & 1) ? -1 : 1);
    char buf[64];
    cg_text_format_double(buf, sizeof buf, v, 17, 0);
    ck_assert_msg(!strchr(buf, ','), "%s", buf);
    const char *end = NULL;
    double back = cg_text_to_double(buf, &end);
    ck_assert_msg(back == v && *end == '\0', "%.17g written as %s, read as %.17g", v, buf, back);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("text");
  TCase *tc = tcase_create("text");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, text__copies_cut_before_a_partial_utf8_sequence);
  tcase_add_test(tc, text__numbers_are_written_with_a_point);
  tcase_add_test(tc, text__numbers_are_read_with_a_point);
  tcase_add_test(tc, text__random_numbers_round_trip);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cg_test_main(suite()); }
