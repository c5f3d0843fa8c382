/* Reductions on the CPU for every data type, for backends that reduce on the
 * host (MPI has no float16, bfloat16 or average). Half types are reduced in
 * float and rounded back to nearest even, as NCCL does on the GPU. */
#ifndef CG_SCHED_HOST_REDUCE_H
#define CG_SCHED_HOST_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "commgraph/types.h"

float cg_half_to_float(uint16_t h);
uint16_t cg_float_to_half(float f);
float cg_bfloat16_to_float(uint16_t b);
uint16_t cg_float_to_bfloat16(float f);

/* inout[i] = inout[i] op in[i] for n elements. CG_AVG reduces as CG_SUM; the
 * division by the rank count is cg_host_divide's. */
void cg_host_reduce(void *inout, const void *in, size_t n, cg_dtype_t dtype, cg_redop_t op);

/* buf[i] /= divisor for n elements: integers truncate toward zero, floating
 * types round the quotient to nearest even in their own precision. */
void cg_host_divide(void *buf, size_t n, cg_dtype_t dtype, int divisor);

#endif
