#include "mpi_test.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <unistd.h>

static int world_rank, world_size;

int cg_mpi_rank(void) { return world_rank; }
int cg_mpi_size(void) { return world_size; }

int cg_mpi_all(int ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

static int limit_seconds = CG_MPI_TEST_TIMEOUT;

void cg_mpi_test_adopt(int rank, int size) {
  world_rank = rank;
  world_size = size;
}

static void on_alarm(int sig) {
  (void)sig;
  char text[512];
  int n = snprintf(text, sizeof text,
                   "rank %d: a test ran past %d s and was stopped (set CK_LOG_FILE_NAME to log each test as it "
                   "ends: the one after the last logged hung)\n", world_rank, limit_seconds);
  if (n > 0) {
    ssize_t written = write(STDERR_FILENO, text, (size_t)n); /* nothing to do if it fails: we exit anyway */
    (void)written;
  }
  _exit(124);
}

/* Check installs its own SIGALRM handler when the runner starts, so ours goes
 * in before each test. */
static void arm_timer(void) {
  signal(SIGALRM, on_alarm);
  alarm((unsigned)limit_seconds);
}
static void disarm_timer(void) { alarm(0); }

TCase *cg_mpi_tcase(const char *name) { return cg_mpi_tcase_limit(name, CG_MPI_TEST_TIMEOUT); }

TCase *cg_mpi_tcase_limit(const char *name, int seconds) {
  limit_seconds = seconds;
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, arm_timer, disarm_timer);
  tcase_set_timeout(tc, 0); /* no fork: the alarm above is the limit */
  return tc;
}

int cg_mpi_test_main(Suite *suite) {
  int provided = 0;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  unsigned long long seed = cg_test_seed();
  MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  cg_test_set_seed(seed);
  if (world_rank == 0) {
    printf("%d ranks, seed: CG_TEST_SEED=%llu\n", world_size, seed);
    fflush(stdout);
  }
  SRunner *runner = srunner_create(suite);
  srunner_set_fork_status(runner, CK_NOFORK);
  /* every rank prints failures; rank 0 also prints each passing test so a
   * timeout message can say where the run was */
  srunner_run_all(runner, world_rank == 0 ? CK_VERBOSE : CK_NORMAL);
  int failed = srunner_ntests_failed(runner);
  srunner_free(runner);
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* ---- test data */

void cg_mpi_test_value(void *dst, cg_dtype_t dtype, int64_t v) { cg_ref_store(dst, 0, dtype, (double)v); }

static int is_unsigned(cg_dtype_t d) { return d == CG_UINT8 || d == CG_UINT32 || d == CG_UINT64; }

/* The inclusive range of test values for a type and reduction. */
static void small_range(cg_dtype_t dtype, cg_redop_t op, int64_t *lo, int64_t *hi) {
  if (op == CG_PROD) {
    *lo = is_unsigned(dtype) ? 0 : -2;
    *hi = is_unsigned(dtype) ? 3 : 2;
  } else if (op == CG_MIN || op == CG_MAX) {
    /* unsigned values past the signed range: MPICH 4.0.2 compares them as signed */
    *lo = is_unsigned(dtype) ? 0 : -100;
    *hi = dtype == CG_UINT8 ? 255 : dtype == CG_UINT32 ? 4000000000ll : dtype == CG_UINT64 ? (1ll << 52) : 100;
  } else { /* sums over up to 8 ranks stay inside int8 */
    *lo = is_unsigned(dtype) ? 0 : -15;
    *hi = 15;
  }
}

int64_t cg_mpi_test_small_value(cg_dtype_t dtype, cg_redop_t op, int ranks, uint64_t random) {
  (void)ranks;
  int64_t lo, hi;
  small_range(dtype, op, &lo, &hi);
  return lo + (int64_t)(random % (uint64_t)(hi - lo + 1));
}

/* Element i's random bits: a counter-based generator (the splitmix64
 * finalizer over the stream's key and i), so elements depend on nothing
 * before them and a fill of millions vectorizes. */
static inline uint64_t element_bits(uint64_t key, uint64_t i) {
  uint64_t z = key + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void cg_mpi_test_fill(void *buf, size_t n, cg_dtype_t dtype, cg_redop_t op, int ranks, uint64_t seed,
                      uint64_t salt) {
  (void)ranks;
  int64_t lo, hi;
  small_range(dtype, op, &lo, &hi); /* once, not per element: fills of millions of elements are most of a GPU suite */
  uint64_t span = (uint64_t)(hi - lo + 1);
  uint64_t key = seed ^ (salt * 0x9E3779B97F4A7C15ull) ^ 0xD1B54A32D192ED03ull;
  if (span <= UINT32_MAX) {
    /* the high 32 bits scaled to the span: a multiply, not a division */
    for (size_t i = 0; i < n; i++)
      cg_ref_store(buf, i, dtype, (double)(lo + (int64_t)(((element_bits(key, i) >> 32) * span) >> 32)));
  } else {
    for (size_t i = 0; i < n; i++) cg_ref_store(buf, i, dtype, (double)(lo + (int64_t)((element_bits(key, i) >> 11) % span)));
  }
}

/* ---- independent conversions: scale to an integer number of quanta, round
 * with nearbyint (to nearest even), scale back */

static double round_to_format(double v, int mantissa_bits, int min_exponent, double max_finite) {
  if (v == 0 || isnan(v) || isinf(v)) return v;
  double a = fabs(v);
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): leading bit has weight 2^(e-1) */
  int lead = e - 1;
  if (lead < min_exponent) lead = min_exponent; /* subnormal: fixed quantum */
  double quantum = ldexp(1.0, lead - mantissa_bits);
  double r = nearbyint(a / quantum) * quantum;
  if (r > max_finite) r = INFINITY;
  return v < 0 ? -r : r;
}

static uint16_t encode(double v, int mantissa_bits, int exponent_bits) {
  int bias = (1 << (exponent_bits - 1)) - 1;
  uint16_t sign = signbit(v) ? (uint16_t)(1u << 15) : 0;
  double a = fabs(v);
  if (isnan(v)) return (uint16_t)(sign | (((1u << exponent_bits) - 1u) << mantissa_bits) | (1u << (mantissa_bits - 1)));
  if (isinf(a)) return (uint16_t)(sign | (((1u << exponent_bits) - 1u) << mantissa_bits));
  if (a == 0) return sign;
  int e;
  frexp(a, &e);
  int exponent = e - 1 + bias;
  if (exponent <= 0) /* subnormal */
    return (uint16_t)(sign | (uint16_t)ldexp(a, bias - 1 + mantissa_bits));
  double m = ldexp(a, -(e - 1)) - 1.0;
  return (uint16_t)(sign | ((unsigned)exponent << mantissa_bits) | (uint16_t)ldexp(m, mantissa_bits));
}

static double decode(uint16_t h, int mantissa_bits, int exponent_bits) {
  int bias = (1 << (exponent_bits - 1)) - 1;
  unsigned exponent = (h >> mantissa_bits) & ((1u << exponent_bits) - 1u);
  unsigned m = h & ((1u << mantissa_bits) - 1u);
  double s = (h >> 15) ? -1.0 : 1.0;
  if (exponent == (1u << exponent_bits) - 1u) return m ? NAN : s * INFINITY;
  if (exponent == 0) return s * ldexp((double)m, 1 - bias - mantissa_bits);
  return s * ldexp(1.0 + ldexp((double)m, -mantissa_bits), (int)exponent - bias);
}

/* Tables of the conversions above, filled once by the same code: decoding
 * every 16-bit pattern, and encoding the integers in [-SMALL, SMALL] (the
 * values tests reduce). They only make the reference fast; every other value
 * still takes the slow path. */
enum { SMALL = 4096 };
static struct {
  double half[1 << 16], bf16[1 << 16];
  uint16_t small_half[2 * SMALL + 1], small_bf16[2 * SMALL + 1];
} tables;
static once_flag tables_once = ONCE_FLAG_INIT;

static uint16_t half_slow(double v) { return encode(round_to_format(v, 10, -14, 65504.0), 10, 5); }
static uint16_t bf16_slow(double v) { return encode(round_to_format(v, 7, -126, 3.3895313892515355e38), 7, 8); }

static void fill_tables(void) {
  for (unsigned h = 0; h < 1u << 16; h++) {
    tables.half[h] = decode((uint16_t)h, 10, 5);
    tables.bf16[h] = decode((uint16_t)h, 7, 8);
  }
  for (int v = -SMALL; v <= SMALL; v++) {
    tables.small_half[v + SMALL] = half_slow(v);
    tables.small_bf16[v + SMALL] = bf16_slow(v);
  }
}

/* The index of v in the small tables, or -1 when v is not a small integer
 * (negative zero included: its sign must survive). */
static int small_index(double v) {
  if (!(v >= -SMALL && v <= SMALL) || v != (double)(int)v || (v == 0 && signbit(v))) return -1;
  return (int)v + SMALL;
}

double cg_ref_half_to_double(uint16_t h) {
  call_once(&tables_once, fill_tables);
  return tables.half[h];
}
uint16_t cg_ref_double_to_half(double v) {
  call_once(&tables_once, fill_tables);
  int i = small_index(v);
  return i >= 0 ? tables.small_half[i] : half_slow(v);
}
double cg_ref_bf16_to_double(uint16_t b) {
  call_once(&tables_once, fill_tables);
  return tables.bf16[b];
}
uint16_t cg_ref_double_to_bf16(double v) {
  call_once(&tables_once, fill_tables);
  int i = small_index(v);
  return i >= 0 ? tables.small_bf16[i] : bf16_slow(v);
}

double cg_ref_load(const void *buf, size_t i, cg_dtype_t d) {
  switch (d) {
    case CG_INT8: return ((const int8_t *)buf)[i];
    case CG_UINT8: return ((const uint8_t *)buf)[i];
    case CG_INT32: return ((const int32_t *)buf)[i];
    case CG_UINT32: return ((const uint32_t *)buf)[i];
    case CG_INT64: return (double)((const int64_t *)buf)[i];
    case CG_UINT64: return (double)((const uint64_t *)buf)[i];
    case CG_FLOAT16: return cg_ref_half_to_double(((const uint16_t *)buf)[i]);
    case CG_BFLOAT16: return cg_ref_bf16_to_double(((const uint16_t *)buf)[i]);
    case CG_FLOAT32: return ((const float *)buf)[i];
    case CG_FLOAT64: return ((const double *)buf)[i];
    default: return 0;
  }
}

void cg_ref_store(void *buf, size_t i, cg_dtype_t d, double v) {
  switch (d) {
    case CG_INT8: ((int8_t *)buf)[i] = (int8_t)trunc(v); break;
    case CG_UINT8: ((uint8_t *)buf)[i] = (uint8_t)trunc(v); break;
    case CG_INT32: ((int32_t *)buf)[i] = (int32_t)trunc(v); break;
    case CG_UINT32: ((uint32_t *)buf)[i] = (uint32_t)trunc(v); break;
    case CG_INT64: ((int64_t *)buf)[i] = (int64_t)trunc(v); break;
    case CG_UINT64: ((uint64_t *)buf)[i] = (uint64_t)trunc(v); break;
    case CG_FLOAT16: ((uint16_t *)buf)[i] = cg_ref_double_to_half(v); break;
    case CG_BFLOAT16: ((uint16_t *)buf)[i] = cg_ref_double_to_bf16(v); break;
    case CG_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case CG_FLOAT64: ((double *)buf)[i] = v; break;
    default: break;
  }
}

void cg_ref_reduce(void *dst, const void *inputs, int ranks, size_t count, cg_dtype_t dtype, cg_redop_t op) {
  size_t es = cg_dtype_size(dtype);
  for (size_t i = 0; i < count; i++) {
    double acc = cg_ref_load(inputs, i, dtype);
    for (int r = 1; r < ranks; r++) {
      double x = cg_ref_load((const char *)inputs + (size_t)r * count * es, i, dtype);
      switch (op) {
        case CG_PROD: acc *= x; break;
        case CG_MIN: acc = x < acc ? x : acc; break;
        case CG_MAX: acc = x > acc ? x : acc; break;
        default: acc += x; break;
      }
    }
    if (op == CG_AVG) acc /= ranks;
    cg_ref_store(dst, i, dtype, acc);
  }
}
