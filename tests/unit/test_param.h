/* What the two files of the param suite share: test_param.c (the table, the
 * parsing helpers below, the values written out by hand, the refusals,
 * cg_compile, the suite and main) and test_param_random.c (the "random" test
 * case: random good and bad strings for every kind). */
#ifndef CG_TEST_PARAM_H
#define CG_TEST_PARAM_H

#include <stddef.h>

#include "param.h"
#include "test_support.h"

/* The caller every parser is told it reads for. */
#define WHERE "cg_test"

/* Set the variable, parse, unset (test_param.c): 1 when the value was taken, 0
 * when it was refused, checking on the way what every parser promises.
 * param_seconds_of reads CG_TIMEOUT, param_ordinal_of CG_DEVICE;
 * param_parse_as_kind takes any parameter through its kind's parser. */
int param_seconds_of(const char *text, double *out);
int param_switch_of(cg_param_t param, const char *text, int *out);
int param_bytes_of(cg_param_t param, const char *text, size_t *out);
int param_ordinal_of(const char *text, int *out);
int param_parse_as_kind(cg_param_t param, const char *text);

/* Adds the tests of the "random" test case to `tc` (test_param_random.c). */
void param_add_random_tests(TCase *tc);

#endif
