/* Element types and reductions MPI lacks: float16 and bfloat16 travel as two
 * opaque bytes and are reduced by our own MPI operations (in float, rounded back
 * to nearest even). Average is a sum here; the step divides afterwards. */
#include "error.h"
#include "host_reduce.h"
#include "mpi_backend.h"

static void reduce_half(void *in, void *inout, int *len, cg_dtype_t dtype, cg_redop_t op) {
  cg_host_reduce(inout, in, (size_t)*len, dtype, op);
}

/* MPI calls these with its own signature; one per (type, operation). */
static void fp16_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_half(in, inout, len, CG_FLOAT16, CG_SUM);
}
static void fp16_prod(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_half(in, inout, len, CG_FLOAT16, CG_PROD);
}
static void fp16_min(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_half(in, inout, len, CG_FLOAT16, CG_MIN);
}
static void fp16_max(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_half(in, inout, len, CG_FLOAT16, CG_MAX);
}
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_half(in, inout, len, CG_BFLOAT16, CG_SUM);
}
static void bf16_prod(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_half(in, inout, len, CG_BFLOAT16, CG_PROD);
}
static void bf16_min(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_half(in, inout, len, CG_BFLOAT16, CG_MIN);
}
static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)t;
  reduce_half(in, inout, len, CG_BFLOAT16, CG_MAX);
}

static MPI_User_function *const half_functions[2][4] = {{fp16_sum, fp16_prod, fp16_min, fp16_max},
                                                         {bf16_sum, bf16_prod, bf16_min, bf16_max}};

cg_status_t cg_mpi_fail(int mpi_error, const char *call) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(mpi_error, text, &len);
  return cg_fail(CG_ERR_BACKEND, "%s: %s", call, text);
}

cg_status_t cg_mpi_types_create(cg_mpi_comm_t *m) {
  int err = MPI_Type_contiguous(2, MPI_BYTE, &m->half);
  if (err == MPI_SUCCESS) err = MPI_Type_commit(&m->half);
  if (err != MPI_SUCCESS) {
    m->half = MPI_DATATYPE_NULL;
    return cg_mpi_fail(err, "MPI_Type_contiguous");
  }
  for (int t = 0; t < 2; t++)
    for (int o = 0; o < 4; o++) m->half_ops[t][o] = MPI_OP_NULL;
  for (int t = 0; t < 2; t++)
    for (int o = 0; o < 4; o++) {
      err = MPI_Op_create(half_functions[t][o], 1, &m->half_ops[t][o]);
      if (err != MPI_SUCCESS) {
        m->half_ops[t][o] = MPI_OP_NULL;
        cg_mpi_types_free(m);
        return cg_mpi_fail(err, "MPI_Op_create");
      }
    }
  return CG_SUCCESS;
}

void cg_mpi_types_free(cg_mpi_comm_t *m) {
  for (int t = 0; t < 2; t++)
    for (int o = 0; o < 4; o++)
      if (m->half_ops[t][o] != MPI_OP_NULL) MPI_Op_free(&m->half_ops[t][o]);
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
  if (dtype == CG_FLOAT16) return m->half_ops[0][index];
  if (dtype == CG_BFLOAT16) return m->half_ops[1][index];
  switch (index) {
    case 1: return MPI_PROD;
    case 2: return MPI_MIN;
    case 3: return MPI_MAX;
    default: return MPI_SUM;
  }
}
