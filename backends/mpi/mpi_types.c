/* Element types and reductions MPI lacks: float16 and bfloat16 travel as two
 * opaque bytes and are reduced by our own MPI operations (in float, rounded back
 * to nearest even). Average is a sum here; the step divides afterwards.
 *
 * Unsigned min and max use our own operations too: MPICH 4.0.2 (Debian 12)
 * compares MPI_UINT8_T, MPI_UINT32_T and MPI_UINT64_T as signed, so
 * max(168, 40) comes out as 40 (found by the random differential test). */
#include "error.h"
#include "host_reduce.h"
#include "mpi_backend.h"

static void reduce_own(void *in, void *inout, int *len, cg_dtype_t dtype, cg_redop_t op) {
  cg_host_reduce(inout, in, (size_t)*len, dtype, op);
}

/* MPI calls these with its own signature; one per (type, operation). */
static void fp16_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_FLOAT16, CG_SUM);
}
static void fp16_prod(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_FLOAT16, CG_PROD);
}
static void fp16_min(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_FLOAT16, CG_MIN);
}
static void fp16_max(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_FLOAT16, CG_MAX);
}
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_BFLOAT16, CG_SUM);
}
static void bf16_prod(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_BFLOAT16, CG_PROD);
}
static void bf16_min(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_BFLOAT16, CG_MIN);
}
static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_BFLOAT16, CG_MAX);
}

static void u8_min(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_UINT8, CG_MIN);
}
static void u8_max(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_UINT8, CG_MAX);
}
static void u32_min(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_UINT32, CG_MIN);
}
static void u32_max(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_UINT32, CG_MAX);
}
static void u64_min(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_UINT64, CG_MIN);
}
static void u64_max(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_own(in, inout, len, CG_UINT64, CG_MAX);
}

/* [dtype][sum, prod, min, max]: our own operation, or NULL for MPI's */
static MPI_User_function *const own_functions[CG_DTYPE_COUNT][4] = {
    [CG_UINT8] = {NULL, NULL, u8_min, u8_max},
    [CG_UINT32] = {NULL, NULL, u32_min, u32_max},
    [CG_UINT64] = {NULL, NULL, u64_min, u64_max},
    [CG_FLOAT16] = {fp16_sum, fp16_prod, fp16_min, fp16_max},
    [CG_BFLOAT16] = {bf16_sum, bf16_prod, bf16_min, bf16_max},
};

cg_status_t cg_mpi_types_create(cg_mpi_comm_t *m) {
  int err = MPI_Type_contiguous(2, MPI_BYTE, &m->half);
  if (err == MPI_SUCCESS) err = MPI_Type_commit(&m->half);
  if (err != MPI_SUCCESS) {
    m->half = MPI_DATATYPE_NULL;
    return cg_mpi_fail(err, "MPI_Type_contiguous");
  }
  for (int t = 0; t < CG_DTYPE_COUNT; t++)
    for (int o = 0; o < 4; o++) m->own_ops[t][o] = MPI_OP_NULL;
  for (int t = 0; t < CG_DTYPE_COUNT; t++)
    for (int o = 0; o < 4; o++) {
      if (!own_functions[t][o]) continue;
      err = MPI_Op_create(own_functions[t][o], 1, &m->own_ops[t][o]);
      if (err != MPI_SUCCESS) {
        m->own_ops[t][o] = MPI_OP_NULL;
        cg_mpi_types_free(m);
        return cg_mpi_fail(err, "MPI_Op_create");
      }
    }
  return CG_SUCCESS;
}

void cg_mpi_types_free(cg_mpi_comm_t *m) {
  for (int t = 0; t < CG_DTYPE_COUNT; t++)
    for (int o = 0; o < 4; o++)
      if (m->own_ops[t][o] != MPI_OP_NULL) MPI_Op_free(&m->own_ops[t][o]);
  if (m->half != MPI_DATATYPE_NULL) MPI_Type_free(&m->half);
}

MPI_Datatype cg_mpi_datatype(const cg_mpi_comm_t *m, cg_dtype_t dtype) {
  switch (dtype) {
    case CG_INT8: return MPI_INT8_T;
    case CG_UINT8: return MPI_UINT8_T;
    case CG_INT32: return MPI_INT32_T;
    case CG_UINT32: return MPI_UINT32_T;
    case CG_INT64: return MPI_INT64_T;
    case CG_UINT64: return MPI_UINT64_T;
    case CG_FLOAT16: return m->half;
    case CG_BFLOAT16: return m->half;
    case CG_FLOAT32: return MPI_FLOAT;
    case CG_FLOAT64: return MPI_DOUBLE;
    case CG_DTYPE_COUNT: break;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op cg_mpi_op(const cg_mpi_comm_t *m, cg_dtype_t dtype, cg_redop_t op) {
  int index = op == CG_PROD ? 1 : op == CG_MIN ? 2 : op == CG_MAX ? 3 : 0;
  if (dtype >= 0 && dtype < CG_DTYPE_COUNT && m->own_ops[dtype][index] != MPI_OP_NULL) return m->own_ops[dtype][index];
  switch (index) {
    case 1: return MPI_PROD;
    case 2: return MPI_MIN;
    case 3: return MPI_MAX;
    default: return MPI_SUM;
  }
}

int cg_mpi_op_is_own(const cg_mpi_comm_t *m, cg_dtype_t dtype, cg_redop_t op) {
  int index = op == CG_PROD ? 1 : op == CG_MIN ? 2 : op == CG_MAX ? 3 : 0;
  return dtype >= 0 && dtype < CG_DTYPE_COUNT && m->own_ops[dtype][index] != MPI_OP_NULL;
}
