#include "host_reduce.h"

#include <math.h>
#include <string.h>

float cg_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13); /* inf, nan */
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else { /* subnormal half: a normal float */
    int shift = 0;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      shift++;
    }
    mantissa &= 0x3ffu;
    bits = sign | ((uint32_t)(113 - shift) << 23) | (mantissa << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t cg_float_to_half(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) /* inf stays inf; nan stays a quiet nan */
    return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504 */
  if (abs < 0x38800000u) {                                     /* half subnormal or zero */
    if (abs < 0x33000000u) return sign;                        /* below half of the smallest subnormal */
    uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(abs >> 23); /* 14 .. 24 */
    uint32_t value = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (value & 1u))) value++;
    return (uint16_t)(sign | value);
  }
  uint32_t value = ((abs >> 13) - (112u << 10));
  uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (value & 1u))) value++;
  return (uint16_t)(sign | value);
}

float cg_bfloat16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t cg_float_to_bfloat16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u); /* quiet nan */
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)((bits + rounding) >> 16);
}

#define CG_COMBINE(op, a, b)                              \
  ((op) == CG_PROD  ? (a) * (b)                           \
   : (op) == CG_MIN ? ((b) < (a) ? (b) : (a))             \
   : (op) == CG_MAX ? ((b) > (a) ? (b) : (a))             \
                    : (a) + (b))

/* Integer sums and products wrap like the hardware does, without signed
 * overflow: compute in the unsigned type of the same width. */
#define CG_REDUCE_INT(type, utype)                                             \
  do {                                                                         \
    type *x = inout;                                                           \
    const type *y = in;                                                        \
    for (size_t i = 0; i < n; i++) {                                           \
      if (op == CG_MIN || op == CG_MAX)                                        \
        x[i] = CG_COMBINE(op, x[i], y[i]);                                     \
      else                                                                     \
        x[i] = (type)CG_COMBINE(op, (utype)x[i], (utype)y[i]);                 \
    }                                                                          \
  } while (0)

#define CG_REDUCE_FLOAT(type)                                                  \
  do {                                                                         \
    type *x = inout;                                                           \
    const type *y = in;                                                        \
    for (size_t i = 0; i < n; i++) x[i] = CG_COMBINE(op, x[i], y[i]);          \
  } while (0)

#define CG_REDUCE_HALF(to_float, from_float)                                   \
  do {                                                                         \
    uint16_t *x = inout;                                                       \
    const uint16_t *y = in;                                                    \
    for (size_t i = 0; i < n; i++) {                                           \
      float a = to_float(x[i]), b = to_float(y[i]);                            \
      x[i] = from_float(CG_COMBINE(op, a, b));                                 \
    }                                                                          \
  } while (0)

void cg_host_reduce(void *inout, const void *in, size_t n, cg_dtype_t dtype, cg_redop_t op) {
  switch (dtype) {
    case CG_INT8: CG_REDUCE_INT(int8_t, uint8_t); break;
    case CG_UINT8: CG_REDUCE_INT(uint8_t, uint8_t); break;
    case CG_INT32: CG_REDUCE_INT(int32_t, uint32_t); break;
    case CG_UINT32: CG_REDUCE_INT(uint32_t, uint32_t); break;
    case CG_INT64: CG_REDUCE_INT(int64_t, uint64_t); break;
    case CG_UINT64: CG_REDUCE_INT(uint64_t, uint64_t); break;
    case CG_FLOAT16: CG_REDUCE_HALF(cg_half_to_float, cg_float_to_half); break;
    case CG_BFLOAT16: CG_REDUCE_HALF(cg_bfloat16_to_float, cg_float_to_bfloat16); break;
    case CG_FLOAT32: CG_REDUCE_FLOAT(float); break;
    case CG_FLOAT64: CG_REDUCE_FLOAT(double); break;
    case CG_DTYPE_COUNT: break;
  }
}

#define CG_DIVIDE(type, divide_as)                                             \
  do {                                                                         \
    type *x = buf;                                                             \
    for (size_t i = 0; i < n; i++) x[i] = (type)((divide_as)x[i] / (divide_as)divisor); \
  } while (0)

void cg_host_divide(void *buf, size_t n, cg_dtype_t dtype, int divisor) {
  switch (dtype) {
    case CG_INT8: CG_DIVIDE(int8_t, int); break;
    case CG_UINT8: CG_DIVIDE(uint8_t, int); break;
    case CG_INT32: CG_DIVIDE(int32_t, int64_t); break;
    case CG_UINT32: CG_DIVIDE(uint32_t, uint64_t); break;
    case CG_INT64: CG_DIVIDE(int64_t, int64_t); break;
    case CG_UINT64: CG_DIVIDE(uint64_t, uint64_t); break;
    case CG_FLOAT32: CG_DIVIDE(float, float); break;
    case CG_FLOAT64: CG_DIVIDE(double, double); break;
    case CG_FLOAT16: {
      uint16_t *x = buf;
      for (size_t i = 0; i < n; i++) x[i] = cg_float_to_half(cg_half_to_float(x[i]) / (float)divisor);
      break;
    }
    case CG_BFLOAT16: {
      uint16_t *x = buf;
      for (size_t i = 0; i < n; i++) x[i] = cg_float_to_bfloat16(cg_bfloat16_to_float(x[i]) / (float)divisor);
      break;
    }
    case CG_DTYPE_COUNT: break;
  }
}
