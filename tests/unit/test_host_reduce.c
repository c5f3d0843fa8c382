/* Host reductions (backends/mpi/host_reduce.c): float16 and bfloat16 conversions,
 * cg_host_reduce for every type and reduction, and cg_host_divide. Each is
 * compared with a reference written here from the formats' definitions
 * (frexp/ldexp/nearbyint on doubles, wrapping integer arithmetic in uint64_t),
 * not with the library's bit manipulations. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/host_reduce.h"
#include "test_support.h"

/* ---- the two 16-bit formats, from their definitions */

typedef struct format16 {
  const char *name;
  int exp_bits, mant_bits;  /* bfloat16: 8 and 7; float16: 5 and 10 */
  float (*to_float)(uint16_t);
  uint16_t (*from_float)(float);
} format16_t;

static const format16_t half_format = {"float16", 5, 10, cg_half_to_float, cg_float_to_half};
static const format16_t bf16_format = {"bfloat16", 8, 7, cg_bfloat16_to_float, cg_float_to_bfloat16};

static int fmt_bias(const format16_t *f) { return (1 << (f->exp_bits - 1)) - 1; }
/* Exponent of the spacing of subnormals (and of the smallest normals). */
static int fmt_min_quantum(const format16_t *f) { return 1 - fmt_bias(f) - f->mant_bits; }
static double fmt_max(const format16_t *f) {
  int top = (1 << f->exp_bits) - 2 - fmt_bias(f);
  return ldexp((double)((2 << f->mant_bits) - 1), top - f->mant_bits);
}
static int fmt_is_nan(const format16_t *f, uint16_t bits) {
  unsigned e = (bits >> f->mant_bits) & ((1u << f->exp_bits) - 1u), m = bits & ((1u << f->mant_bits) - 1u);
  return e == (1u << f->exp_bits) - 1u && m != 0;
}

/* The value a bit pattern stands for: sign, biased exponent, implicit bit. */
static double fmt_decode(const format16_t *f, uint16_t bits) {
  unsigned e = (bits >> f->mant_bits) & ((1u << f->exp_bits) - 1u), m = bits & ((1u << f->mant_bits) - 1u);
  double sign = (bits & 0x8000u) ? -1.0 : 1.0, v;
  if (e == (1u << f->exp_bits) - 1u)
    v = m ? NAN : INFINITY;
  else if (e == 0)
    v = ldexp((double)m, fmt_min_quantum(f));
  else
    v = ldexp((double)((1u << f->mant_bits) | m), (int)e + fmt_min_quantum(f) - 1);
  return copysign(v, sign);
}

/* `x` rounded to the format, to nearest, ties to even (nearbyint in the default
 * rounding mode), overflowing to infinity: a value with exponent e keeps
 * mant_bits + 1 significant bits, never finer than the subnormal spacing. */
static double fmt_round(const format16_t *f, double x) {
  if (isnan(x) || isinf(x) || x == 0) return x;
  int e;
  frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  int q = e - 1 - f->mant_bits;
  if (q < fmt_min_quantum(f)) q = fmt_min_quantum(f);
  double r = ldexp(nearbyint(ldexp(x, -q)), q);
  if (fabs(r) > fmt_max(f)) r = INFINITY;
  return copysign(r, x);
}

/* got and want are the same value, or both NaN; zeros must agree in sign
 * unless `value_only`. */
static int same_value(double got, double want, int value_only) {
  if (isnan(want)) return isnan(got);
  return got == want && (value_only || signbit(got) == signbit(want));
}

static float float_of_bits(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint32_t bits_of_float(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

/* Every pattern: decodes to the value its fields say, and converts back to
 * itself (NaN to a NaN of the same sign). */
static void check_all_patterns(const format16_t *f) {
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    float v = f->to_float(h);
    double want = fmt_decode(f, h);
    REQUIRE(same_value(v, want, 0), "%s 0x%04x: to float gives %a, expected %a", f->name, i, (double)v, want);
    uint16_t back = f->from_float(v);
    if (fmt_is_nan(f, h))
      REQUIRE(fmt_is_nan(f, back) && (back & 0x8000u) == (h & 0x8000u), "%s NaN 0x%04x came back as 0x%04x",
              f->name, i, back);
    else
      REQUIRE(back == h, "%s 0x%04x -> %a -> 0x%04x", f->name, i, (double)v, back);
  }
}

static void check_conversion(const format16_t *f, float x) {
  uint16_t got = f->from_float(x);
  if (isnan(x)) {
    REQUIRE(fmt_is_nan(f, got), "%s of NaN 0x%08x gave 0x%04x", f->name, bits_of_float(x), got);
    return;
  }
  double want = fmt_round(f, x), value = fmt_decode(f, got);
  REQUIRE(same_value(value, want, 0), "%s of %a (0x%08x) gave 0x%04x = %a, expected %a", f->name, (double)x,
          bits_of_float(x), got, value, want);
}

/* A float with a random sign and mantissa and an exponent in [lo, hi]. */
static float random_float_in(int lo, int hi) {
  int e = lo + (int)cg_test_below((uint64_t)(hi - lo + 1));
  uint32_t bits = (uint32_t)(cg_test_rand() >> 40) & 0x7fffffu;
  bits |= (uint32_t)(e + 127) << 23;
  if (cg_test_rand() & 1) bits |= 0x80000000u;
  return float_of_bits(bits);
}

static void check_random_conversions(const format16_t *f) {
  int min_exp = fmt_min_quantum(f), max_exp = (1 << f->exp_bits) - 2 - fmt_bias(f);
  for (int i = 0; i < 300000; i++) {
    /* any pattern: every exponent, float subnormals, infinities, NaNs */
    check_conversion(f, float_of_bits((uint32_t)cg_test_rand()));
    /* the format's range and a little beyond, where rounding decides */
    int lo = min_exp - 3 > -126 ? min_exp - 3 : -126, hi = max_exp + 1 < 127 ? max_exp + 1 : 127;
    check_conversion(f, random_float_in(lo, hi));
    /* float subnormals */
    check_conversion(f, float_of_bits((uint32_t)(cg_test_rand() & 0x807fffffu)));
  }
}

/* Exactly between two neighbours the even one wins; a float step to either side
 * picks the nearer. Every such midpoint is a float: it needs one bit more than
 * the format holds. */
static void check_ties(const format16_t *f) {
  uint16_t inf = (uint16_t)(((1u << f->exp_bits) - 1u) << f->mant_bits);
  int up = 0, down = 0;
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t lo = (uint16_t)i;
    if ((lo & 0x7fffu) >= inf) continue;  /* no larger neighbour */
    uint16_t hi = (uint16_t)(lo + 1);      /* next larger magnitude, same sign (inf after the largest) */
    double a = fmt_decode(f, lo), b = fmt_decode(f, hi);
    double mid = isinf(b) ? copysign(fmt_max(f) + ldexp(1.0, (1 << f->exp_bits) - 3 - fmt_bias(f) - f->mant_bits), a)
                          : (a + b) / 2;
    float m = (float)mid;
    REQUIRE((double)m == mid, "%s midpoint of 0x%04x and 0x%04x is not a float", f->name, lo, hi);
    uint16_t even = (lo & 1u) ? hi : lo, got = f->from_float(m);
    REQUIRE(got == even, "%s of the midpoint %a of 0x%04x and 0x%04x gave 0x%04x, expected 0x%04x", f->name, mid, lo,
            hi, got, even);
    up += even == hi;
    down += even == lo;
    float toward_hi = nextafterf(m, copysignf(INFINITY, m)), toward_lo = nextafterf(m, 0.0f);
    REQUIRE(f->from_float(toward_hi) == hi, "%s of %a (just past the midpoint) gave 0x%04x, expected 0x%04x",
            f->name, (double)toward_hi, f->from_float(toward_hi), hi);
    REQUIRE(f->from_float(toward_lo) == lo, "%s of %a (just short of the midpoint) gave 0x%04x, expected 0x%04x",
            f->name, (double)toward_lo, f->from_float(toward_lo), lo);
  }
  ck_assert_int_gt(up, 1000);
  ck_assert_int_gt(down, 1000);
}

START_TEST(host_reduce__half_patterns_round_trip) { check_all_patterns(&half_format); }
END_TEST

START_TEST(host_reduce__bfloat16_patterns_round_trip) { check_all_patterns(&bf16_format); }
END_TEST

START_TEST(host_reduce__float_to_half_rounds_to_nearest_even) {
  cg_test_reseed(101);
  check_random_conversions(&half_format);
  check_ties(&half_format);
  /* the edges, by hand */
  ck_assert_uint_eq(cg_float_to_half(65504.0f), 0x7bffu);
  ck_assert_uint_eq(cg_float_to_half(65519.99f), 0x7bffu);
  ck_assert_uint_eq(cg_float_to_half(65520.0f), 0x7c00u);
  ck_assert_uint_eq(cg_float_to_half(-1e10f), 0xfc00u);
  ck_assert_uint_eq(cg_float_to_half(-INFINITY), 0xfc00u);
  ck_assert_uint_eq(cg_float_to_half(0x1p-24f), 0x0001u);
  ck_assert_uint_eq(cg_float_to_half(0x1p-25f), 0x0000u);   /* tie with zero: even */
  ck_assert_uint_eq(cg_float_to_half(0x1.8p-24f), 0x0002u); /* tie between 1 and 2 subnormal steps */
  ck_assert_uint_eq(cg_float_to_half(-0x1p-26f), 0x8000u);
  ck_assert_uint_eq(cg_float_to_half(-0.0f), 0x8000u);
  ck_assert_uint_eq(cg_float_to_half(0x1.ffcp-15f), 0x0400u); /* rounds up into the normals */
  ck_assert_uint_eq(cg_float_to_half(1.0f + 0x1p-11f), 0x3c00u);
  ck_assert_uint_eq(cg_float_to_half(1.0f + 0x3p-11f), 0x3c02u);
}
END_TEST

START_TEST(host_reduce__float_to_bfloat16_rounds_to_nearest_even) {
  cg_test_reseed(102);
  check_random_conversions(&bf16_format);
  check_ties(&bf16_format);
  ck_assert_uint_eq(cg_float_to_bfloat16(FLT_MAX), 0x7f80u);
  ck_assert_uint_eq(cg_float_to_bfloat16(float_of_bits(0x7f7f7fffu)), 0x7f7fu);
  ck_assert_uint_eq(cg_float_to_bfloat16(float_of_bits(0x7f7f8000u)), 0x7f80u);
  ck_assert_uint_eq(cg_float_to_bfloat16(1.0f + 0x1p-8f), 0x3f80u);
  ck_assert_uint_eq(cg_float_to_bfloat16(1.0f + 0x3p-8f), 0x3f82u);
  ck_assert_uint_eq(cg_float_to_bfloat16(float_of_bits(0x00008000u)), 0x0000u); /* subnormal tie with zero */
  ck_assert_uint_eq(cg_float_to_bfloat16(float_of_bits(0x80018000u)), 0x8002u);
  ck_assert(fmt_is_nan(&bf16_format, cg_float_to_bfloat16(float_of_bits(0x7f800001u)))); /* payload only in low bits */
  ck_assert(fmt_is_nan(&bf16_format, cg_float_to_bfloat16(float_of_bits(0xffffffffu))));
}
END_TEST

/* ---- cg_host_reduce and cg_host_divide against element-wise references */

enum { GUARD = 4 }; /* elements past n that must stay untouched */

static const cg_dtype_t all_dtypes[] = {CG_INT8,    CG_UINT8,    CG_INT32,   CG_UINT32,  CG_INT64,
                                        CG_UINT64,  CG_FLOAT16,  CG_BFLOAT16, CG_FLOAT32, CG_FLOAT64};
#define N_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

static int is_integer(cg_dtype_t t) { return t <= CG_UINT64; }
static int is_signed(cg_dtype_t t) { return t == CG_INT8 || t == CG_INT32 || t == CG_INT64; }
static unsigned width_of(cg_dtype_t t) { return 8u * (unsigned)cg_dtype_size(t); }
static uint64_t mask_of(cg_dtype_t t) { return width_of(t) == 64 ? ~0ull : (1ull << width_of(t)) - 1u; }

/* Element i of a buffer as raw bits in the low bytes. */
static uint64_t load(const void *buf, size_t i, cg_dtype_t t) {
  const unsigned char *p = (const unsigned char *)buf + i * cg_dtype_size(t);
  uint8_t b8;
  uint16_t b16;
  uint32_t b32;
  uint64_t b64;
  switch (cg_dtype_size(t)) {
    case 1: memcpy(&b8, p, 1); return b8;
    case 2: memcpy(&b16, p, 2); return b16;
    case 4: memcpy(&b32, p, 4); return b32;
    default: memcpy(&b64, p, 8); return b64;
  }
}

static void store(void *buf, size_t i, cg_dtype_t t, uint64_t bits) {
  unsigned char *p = (unsigned char *)buf + i * cg_dtype_size(t);
  uint8_t b8 = (uint8_t)bits;
  uint16_t b16 = (uint16_t)bits;
  uint32_t b32 = (uint32_t)bits;
  switch (cg_dtype_size(t)) {
    case 1: memcpy(p, &b8, 1); break;
    case 2: memcpy(p, &b16, 2); break;
    case 4: memcpy(p, &b32, 4); break;
    default: memcpy(p, &bits, 8); break;
  }
}

static double double_of_bits(uint64_t bits) {
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

/* The value of a floating element. */
static double value_of(cg_dtype_t t, uint64_t bits) {
  switch (t) {
    case CG_FLOAT16: return fmt_decode(&half_format, (uint16_t)bits);
    case CG_BFLOAT16: return fmt_decode(&bf16_format, (uint16_t)bits);
    case CG_FLOAT32: return float_of_bits((uint32_t)bits);
    default: return double_of_bits(bits);
  }
}

/* Random bits for an element: any non-NaN pattern, or for integers now and
 * then one of the edges (0, 1, all ones, the smallest and largest signed). */
static uint64_t random_elem(cg_dtype_t t) {
  uint64_t m = mask_of(t), sign = (m >> 1) + 1;
  if (is_integer(t)) {
    const uint64_t edges[] = {0, 1, m, sign, sign - 1};
    if (cg_test_below(6) == 0) return edges[cg_test_below(5)];
    return cg_test_rand() & m;
  }
  for (;;) {
    uint64_t bits = cg_test_rand() & m;
    if (t == CG_FLOAT32 && cg_test_rand() & 1) bits = bits_of_float(random_float_in(-20, 20));
    if (t == CG_FLOAT64 && cg_test_rand() & 1) {
      double d = ldexp((double)(cg_test_rand() >> 11), (int)cg_test_below(60) - 83);
      memcpy(&bits, &d, sizeof bits);
      if (cg_test_rand() & 1) bits |= 1ull << 63;
    }
    if (!isnan(value_of(t, bits))) return bits;
  }
}

/* a op b on integers of t's width, wrapping; min and max compare as signed or
 * unsigned (flipping the sign bit turns the signed order into the unsigned). */
static uint64_t reference_int(cg_dtype_t t, cg_redop_t op, uint64_t a, uint64_t b) {
  uint64_t m = mask_of(t), flip = is_signed(t) ? (m >> 1) + 1 : 0;
  switch (op) {
    case CG_PROD: return (a * b) & m;
    case CG_MIN: return (b ^ flip) < (a ^ flip) ? b : a;
    case CG_MAX: return (b ^ flip) > (a ^ flip) ? b : a;
    default: return (a + b) & m; /* sum, and avg before its division */
  }
}

/* a op b on floating values. The 16-bit types are reduced in float, then
 * rounded to their format (the header's rule); float32 goes through double,
 * where a sum or product of two floats rounds once more without harm
 * (53 >= 2 * 24 + 2 bits). */
static double reference_float(cg_dtype_t t, cg_redop_t op, double a, double b) {
  double r;
  switch (op) {
    case CG_PROD: r = a * b; break;
    case CG_MIN: r = fmin(a, b); break;
    case CG_MAX: r = fmax(a, b); break;
    default: r = a + b; break;
  }
  if (t == CG_FLOAT64) return r;
  float f = (float)r;
  if (t == CG_FLOAT16) return fmt_round(&half_format, f);
  if (t == CG_BFLOAT16) return fmt_round(&bf16_format, f);
  return f;
}

/* The i-th result of reducing a with b is right. */
static void check_reduced(cg_dtype_t t, cg_redop_t op, size_t i, uint64_t a, uint64_t b, uint64_t got) {
  if (is_integer(t)) {
    uint64_t want = reference_int(t, op, a, b);
    REQUIRE(got == want, "%s %s element %zu: 0x%llx op 0x%llx gave 0x%llx, expected 0x%llx", cg_dtype_name(t),
            cg_redop_name(op), i, (unsigned long long)a, (unsigned long long)b, (unsigned long long)got,
            (unsigned long long)want);
    return;
  }
  double want = reference_float(t, op, value_of(t, a), value_of(t, b)), value = value_of(t, got);
  /* which zero min and max return for -0 and +0 is not specified */
  REQUIRE(same_value(value, want, op == CG_MIN || op == CG_MAX),
          "%s %s element %zu: %a op %a gave %a, expected %a", cg_dtype_name(t), cg_redop_name(op), i,
          value_of(t, a), value_of(t, b), value, want);
}

/* Reduces random buffers of n elements and checks every element, that `in`
 * is unchanged and that nothing past n was written. */
static void reduce_and_check(cg_dtype_t t, cg_redop_t op, size_t n) {
  size_t total = n + GUARD, es = cg_dtype_size(t);
  unsigned char *inout = malloc(total * es), *in = malloc(total * es), *before = malloc(total * es),
                *in_copy = malloc(total * es);
  ck_assert(inout && in && before && in_copy);
  for (size_t i = 0; i < total; i++) {
    store(inout, i, t, random_elem(t));
    store(in, i, t, random_elem(t));
  }
  memcpy(before, inout, total * es);
  memcpy(in_copy, in, total * es);
  cg_host_reduce(inout, in, n, t, op);
  for (size_t i = 0; i < n; i++) check_reduced(t, op, i, load(before, i, t), load(in, i, t), load(inout, i, t));
  REQUIRE(memcmp(in, in_copy, total * es) == 0, "%s %s changed its input", cg_dtype_name(t), cg_redop_name(op));
  REQUIRE(memcmp(inout + n * es, before + n * es, GUARD * es) == 0, "%s %s wrote past %zu elements",
          cg_dtype_name(t), cg_redop_name(op), n);
  free(inout);
  free(in);
  free(before);
  free(in_copy);
}

START_TEST(host_reduce__every_dtype_and_op_matches_reference) {
  cg_test_reseed(103);
  for (size_t d = 0; d < N_DTYPES; d++)
    for (int op = 0; op < CG_REDOP_COUNT; op++)
      for (int round = 0; round < 20; round++)
        reduce_and_check(all_dtypes[d], (cg_redop_t)op, round == 0 ? 1 : (size_t)cg_test_below(2000));
}
END_TEST

START_TEST(host_reduce__avg_reduces_as_sum) {
  cg_test_reseed(104);
  for (size_t d = 0; d < N_DTYPES; d++) {
    cg_dtype_t t = all_dtypes[d];
    size_t n = 1 + (size_t)cg_test_below(500), es = cg_dtype_size(t);
    unsigned char *a = malloc(n * es), *b = malloc(n * es), *in = malloc(n * es);
    ck_assert(a && b && in);
    for (size_t i = 0; i < n; i++) {
      store(a, i, t, random_elem(t));
      store(in, i, t, random_elem(t));
    }
    memcpy(b, a, n * es);
    cg_host_reduce(a, in, n, t, CG_AVG);
    cg_host_reduce(b, in, n, t, CG_SUM);
    ck_assert_msg(memcmp(a, b, n * es) == 0, "%s: avg and sum differ", cg_dtype_name(t));
    free(a);
    free(b);
    free(in);
  }
}
END_TEST

/* The sanitizer build makes signed overflow fatal, so these pass only if the
 * library wraps without it. */
START_TEST(host_reduce__integer_overflow_wraps) {
  int8_t i8[] = {127, -128, -128, 100}, i8_in[] = {1, -1, -1, 3};
  cg_host_reduce(i8, i8_in, 2, CG_INT8, CG_SUM);
  cg_host_reduce(i8 + 2, i8_in + 2, 2, CG_INT8, CG_PROD);
  ck_assert_int_eq(i8[0], -128);
  ck_assert_int_eq(i8[1], 127);
  ck_assert_int_eq(i8[2], -128); /* -128 * -1 */
  ck_assert_int_eq(i8[3], 44);   /* 300 - 256 */
  uint8_t u8[] = {255, 16}, u8_in[] = {1, 16};
  cg_host_reduce(u8, u8_in, 1, CG_UINT8, CG_SUM);
  cg_host_reduce(u8 + 1, u8_in + 1, 1, CG_UINT8, CG_PROD);
  ck_assert_uint_eq(u8[0], 0);
  ck_assert_uint_eq(u8[1], 0);
  int32_t i32[] = {INT32_MAX, INT32_MIN, INT32_MIN, 65536}, i32_in[] = {1, -1, -1, 65536};
  cg_host_reduce(i32, i32_in, 2, CG_INT32, CG_SUM);
  cg_host_reduce(i32 + 2, i32_in + 2, 2, CG_INT32, CG_PROD);
  ck_assert_int_eq(i32[0], INT32_MIN);
  ck_assert_int_eq(i32[1], INT32_MAX);
  ck_assert_int_eq(i32[2], INT32_MIN);
  ck_assert_int_eq(i32[3], 0);
  uint32_t u32[] = {UINT32_MAX, UINT32_MAX}, u32_in[] = {2, UINT32_MAX};
  cg_host_reduce(u32, u32_in, 1, CG_UINT32, CG_SUM);
  cg_host_reduce(u32 + 1, u32_in + 1, 1, CG_UINT32, CG_PROD);
  ck_assert_uint_eq(u32[0], 1);
  ck_assert_uint_eq(u32[1], 1);
  int64_t i64[] = {INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN}, i64_in[] = {1, -1, 2, -1};
  cg_host_reduce(i64, i64_in, 2, CG_INT64, CG_SUM);
  cg_host_reduce(i64 + 2, i64_in + 2, 2, CG_INT64, CG_PROD);
  ck_assert(i64[0] == INT64_MIN);
  ck_assert(i64[1] == INT64_MAX);
  ck_assert(i64[2] == -2);
  ck_assert(i64[3] == INT64_MIN);
  uint64_t u64[] = {UINT64_MAX, UINT64_MAX}, u64_in[] = {1, UINT64_MAX};
  cg_host_reduce(u64, u64_in, 1, CG_UINT64, CG_SUM);
  cg_host_reduce(u64 + 1, u64_in + 1, 1, CG_UINT64, CG_PROD);
  ck_assert(u64[0] == 0);
  ck_assert(u64[1] == 1);
  /* min and max compare with the type's signedness */
  int8_t smin[] = {-1}, smin_in[] = {1};
  uint8_t umin[] = {0xff}, umin_in[] = {1};
  cg_host_reduce(smin, smin_in, 1, CG_INT8, CG_MIN);
  cg_host_reduce(umin, umin_in, 1, CG_UINT8, CG_MIN);
  ck_assert_int_eq(smin[0], -1);
  ck_assert_uint_eq(umin[0], 1);
  int64_t lmax[] = {INT64_MIN}, lmax_in[] = {-1};
  cg_host_reduce(lmax, lmax_in, 1, CG_INT64, CG_MAX);
  ck_assert(lmax[0] == -1);
}
END_TEST

START_TEST(host_reduce__nan_and_infinity_propagate) {
  const cg_dtype_t floats[] = {CG_FLOAT16, CG_BFLOAT16, CG_FLOAT32, CG_FLOAT64};
  for (int k = 0; k < 4; k++) {
    cg_dtype_t t = floats[k];
    unsigned char a[4 * 8], b[4 * 8];
    /* NaN + 1, inf + 1, inf + -inf, inf * 0 */
    double av[] = {NAN, INFINITY, INFINITY, INFINITY}, bv[] = {1, 1, -INFINITY, 0};
    for (size_t i = 0; i < 4; i++) {
      uint64_t x, y;
      if (t == CG_FLOAT64) {
        memcpy(&x, &av[i], 8);
        memcpy(&y, &bv[i], 8);
      } else if (t == CG_FLOAT32) {
        x = bits_of_float((float)av[i]);
        y = bits_of_float((float)bv[i]);
      } else {
        const format16_t *f = t == CG_FLOAT16 ? &half_format : &bf16_format;
        x = f->from_float((float)av[i]);
        y = f->from_float((float)bv[i]);
      }
      store(a, i, t, x);
      store(b, i, t, y);
    }
    cg_host_reduce(a, b, 3, t, CG_SUM);
    cg_host_reduce(a + 3 * cg_dtype_size(t), b + 3 * cg_dtype_size(t), 1, t, CG_PROD);
    ck_assert_msg(isnan(value_of(t, load(a, 0, t))), "%s: NaN + 1", cg_dtype_name(t));
    ck_assert_msg(value_of(t, load(a, 1, t)) == INFINITY, "%s: inf + 1", cg_dtype_name(t));
    ck_assert_msg(isnan(value_of(t, load(a, 2, t))), "%s: inf + -inf", cg_dtype_name(t));
    ck_assert_msg(isnan(value_of(t, load(a, 3, t))), "%s: inf * 0", cg_dtype_name(t));
  }
}
END_TEST

START_TEST(host_reduce__zero_elements_touch_nothing) {
  for (size_t d = 0; d < N_DTYPES; d++)
    for (int op = 0; op < CG_REDOP_COUNT; op++) {
      unsigned char a[8], b[8], a0[8];
      memset(a, 0x5a, sizeof a);
      memset(b, 0x33, sizeof b);
      memcpy(a0, a, sizeof a);
      cg_host_reduce(a, b, 0, all_dtypes[d], (cg_redop_t)op);
      cg_host_divide(a, 0, all_dtypes[d], 3);
      ck_assert(memcmp(a, a0, sizeof a) == 0);
    }
}
END_TEST

/* x / d truncated toward zero on t's width: the magnitude divided, the sign put
 * back. */
static uint64_t reference_int_divide(cg_dtype_t t, uint64_t x, int d) {
  uint64_t m = mask_of(t), sign = (m >> 1) + 1;
  int negative = is_signed(t) && (x & sign);
  uint64_t magnitude = negative ? (~x + 1) & m : x;
  uint64_t q = magnitude / (uint64_t)d;
  return negative ? (~q + 1) & m : q;
}

/* The correctly rounded quotient. float and the 16-bit types divide through
 * double, which rounds once more harmlessly (53 >= 2 * 24 + 2 bits). */
static double reference_float_divide(cg_dtype_t t, double x, int d) {
  double q = x / d;
  switch (t) {
    case CG_FLOAT16: return fmt_round(&half_format, q);
    case CG_BFLOAT16: return fmt_round(&bf16_format, q);
    case CG_FLOAT32: return (float)q;
    default: return q;
  }
}

static void divide_and_check(cg_dtype_t t, size_t n, int d) {
  size_t total = n + GUARD, es = cg_dtype_size(t);
  unsigned char *buf = malloc(total * es), *before = malloc(total * es);
  ck_assert(buf && before);
  for (size_t i = 0; i < total; i++) store(buf, i, t, random_elem(t));
  memcpy(before, buf, total * es);
  cg_host_divide(buf, n, t, d);
  for (size_t i = 0; i < n; i++) {
    uint64_t x = load(before, i, t), got = load(buf, i, t);
    if (is_integer(t)) {
      uint64_t want = reference_int_divide(t, x, d);
      REQUIRE(got == want, "%s 0x%llx / %d gave 0x%llx, expected 0x%llx", cg_dtype_name(t), (unsigned long long)x,
              d, (unsigned long long)got, (unsigned long long)want);
    } else {
      double want = reference_float_divide(t, value_of(t, x), d), value = value_of(t, got);
      REQUIRE(same_value(value, want, 0), "%s %a / %d gave %a, expected %a", cg_dtype_name(t), value_of(t, x), d,
              value, want);
    }
  }
  REQUIRE(memcmp(buf + n * es, before + n * es, GUARD * es) == 0, "%s: divide wrote past %zu elements",
          cg_dtype_name(t), n);
  free(buf);
  free(before);
}

START_TEST(host_divide__random_values_match_reference) {
  cg_test_reseed(105);
  for (size_t k = 0; k < N_DTYPES; k++)
    for (int round = 0; round < 40; round++) {
      /* rank counts: small ones often, up to 1024 */
      int d = round < 8 ? round + 1 : 1 + (int)cg_test_below(1024);
      divide_and_check(all_dtypes[k], 1 + (size_t)cg_test_below(2000), d);
    }
}
END_TEST

START_TEST(host_divide__integers_truncate_toward_zero) {
  int8_t i8[] = {-7, 7, -1, -128, 127, -128};
  cg_host_divide(i8, 5, CG_INT8, 2);
  cg_host_divide(i8 + 5, 1, CG_INT8, 3);
  const int8_t i8_want[] = {-3, 3, 0, -64, 63, -42};
  for (int i = 0; i < 6; i++) ck_assert_int_eq(i8[i], i8_want[i]);
  uint8_t u8[] = {255, 7};
  cg_host_divide(u8, 2, CG_UINT8, 4);
  ck_assert_uint_eq(u8[0], 63);
  ck_assert_uint_eq(u8[1], 1);
  int32_t i32[] = {-9, 9, INT32_MIN, INT32_MAX, -2};
  cg_host_divide(i32, 5, CG_INT32, 4);
  ck_assert_int_eq(i32[0], -2);
  ck_assert_int_eq(i32[1], 2);
  ck_assert_int_eq(i32[2], INT32_MIN / 4);
  ck_assert_int_eq(i32[3], INT32_MAX / 4);
  ck_assert_int_eq(i32[4], 0);
  uint32_t u32[] = {UINT32_MAX};
  cg_host_divide(u32, 1, CG_UINT32, 3);
  ck_assert_uint_eq(u32[0], UINT32_MAX / 3);
  int64_t i64[] = {INT64_MIN, -5, INT64_MAX};
  cg_host_divide(i64, 3, CG_INT64, 1000);
  ck_assert(i64[0] == INT64_MIN / 1000);
  ck_assert(i64[1] == 0);
  ck_assert(i64[2] == INT64_MAX / 1000);
  int64_t one[] = {INT64_MIN};
  cg_host_divide(one, 1, CG_INT64, 1);
  ck_assert(one[0] == INT64_MIN);
  uint64_t u64[] = {UINT64_MAX};
  cg_host_divide(u64, 1, CG_UINT64, 7);
  ck_assert(u64[0] == UINT64_MAX / 7);
}
END_TEST

START_TEST(host_divide__floats_round_to_nearest) {
  float f32[] = {1.0f, -1.0f, 0x1p-149f, -0.0f};
  cg_host_divide(f32, 4, CG_FLOAT32, 3);
  ck_assert(f32[0] == (float)(1.0 / 3));
  ck_assert(f32[1] == (float)(-1.0 / 3));
  ck_assert(f32[2] == 0.0f); /* a third of the smallest subnormal */
  ck_assert(f32[3] == 0.0f && signbit(f32[3]));
  double f64[] = {1.0, 7.0};
  cg_host_divide(f64, 2, CG_FLOAT64, 3);
  ck_assert(f64[0] == 1.0 / 3 && f64[1] == 7.0 / 3);
  /* A quotient by a rank count is a tie only where a power of two divides into
   * the subnormals: 3 * 2^-24 / 2 goes to the even 2 * 2^-24, 2^-24 / 2 to 0. */
  uint16_t h[] = {0x3c00u, 0x0003u, 0x0001u, 0x8001u, 0x7c00u, 0xfbffu};
  cg_host_divide(h, 6, CG_FLOAT16, 2);
  const uint16_t h_want[] = {0x3800u, 0x0002u, 0x0000u, 0x8000u, 0x7c00u, 0xf7ffu};
  for (int i = 0; i < 6; i++) ck_assert_uint_eq(h[i], h_want[i]);
  uint16_t third[] = {0x3c00u, 0xbc00u};
  cg_host_divide(third, 2, CG_FLOAT16, 3);
  ck_assert_uint_eq(third[0], 0x3555u);
  ck_assert_uint_eq(third[1], 0xb555u);
  uint16_t b[] = {0x3f80u, 0x0003u, 0x3f80u};
  cg_host_divide(b, 2, CG_BFLOAT16, 2);
  cg_host_divide(b + 2, 1, CG_BFLOAT16, 3);
  ck_assert_uint_eq(b[0], 0x3f00u);
  ck_assert_uint_eq(b[1], 0x0002u);
  ck_assert_uint_eq(b[2], 0x3eabu); /* 1/3 = 0x3eaaaaab in float */
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("host_reduce");
  TCase *conv = tcase_create("conversions");
  tcase_set_timeout(conv, 120);
  tcase_add_test(conv, host_reduce__half_patterns_round_trip);
  tcase_add_test(conv, host_reduce__bfloat16_patterns_round_trip);
  tcase_add_test(conv, host_reduce__float_to_half_rounds_to_nearest_even);
  tcase_add_test(conv, host_reduce__float_to_bfloat16_rounds_to_nearest_even);
  suite_add_tcase(s, conv);
  TCase *red = tcase_create("reduce");
  tcase_set_timeout(red, 120);
  tcase_add_test(red, host_reduce__every_dtype_and_op_matches_reference);
  tcase_add_test(red, host_reduce__avg_reduces_as_sum);
  tcase_add_test(red, host_reduce__integer_overflow_wraps);
  tcase_add_test(red, host_reduce__nan_and_infinity_propagate);
  tcase_add_test(red, host_reduce__zero_elements_touch_nothing);
  suite_add_tcase(s, red);
  TCase *div = tcase_create("divide");
  tcase_set_timeout(div, 120);
  tcase_add_test(div, host_divide__random_values_match_reference);
  tcase_add_test(div, host_divide__integers_truncate_toward_zero);
  tcase_add_test(div, host_divide__floats_round_to_nearest);
  suite_add_tcase(s, div);
  return s;
}

int main(void) { return cg_test_main(suite()); }
