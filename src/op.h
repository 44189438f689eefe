/* Reduction operators for the collectives: validity of (op, dtype), the
 * element-wise kernels (one vectorised loop per op and datatype), AVG's
 * final division, and IEEE binary16 / bfloat16 conversions.
 *
 * Semantics, the same on every rank and on every code path (portable or
 * F16C), bit for bit, with one exception noted below:
 *   - integers wrap (computed in the unsigned type of the same width);
 *   - float16 / bfloat16: each element is computed in float32 and rounded
 *     to nearest even back to 16 bits; since float32 has 24 >= 2p+2 bits
 *     (p = 11, 8), this equals the correctly rounded 16-bit sum / product;
 *   - SUM / PROD / AVG on floats are IEEE operations; a NaN operand gives
 *     that NaN, quieted. The exception: when BOTH operands are NaN the
 *     result is one of them, the hardware's and the compiler's choice, so
 *     its payload may differ between ranks or code paths (it is a NaN
 *     everywhere). Payloads are not worth a compare in these loops;
 *   - MIN / MAX on floats propagate NaN (as torch.minimum / maximum): if
 *     exactly one operand is NaN the result is that NaN, bit for bit; if
 *     both are, the bitwise OR of the two (a NaN; commutative). -0 < +0:
 *     min(-0, +0) = -0 and max(-0, +0) = +0 in either order. So MIN / MAX
 *     are commutative bit for bit and the result does not depend on which
 *     rank holds which operand;
 *   - AVG reduces as SUM; weft_op_finalize then divides by the number of
 *     contributions: integers truncate toward zero (as NCCL's ncclAvg),
 *     floats are correctly rounded quotients x / n (never x * (1/n)).
 * Floating point assumes the default environment (round to nearest, no
 * flush-to-zero / denormals-are-zero). */
#ifndef WEFT_OP_H
#define WEFT_OP_H

#include "weft.h"

#include <stddef.h>
#include <stdint.h>

/* weft_op_t and its values are public: include/weft.h. */

/* WEFT_SUCCESS, or WEFT_ERR_ARG through weft_error() with a message naming
 * fn, the op and the dtype: unknown op or dtype, bitwise ops on float16 /
 * bfloat16 / float32 / float64, any op on WEFT_BYTE but BAND / BOR / BXOR. */
int weft_op_check(weft_op_t op, weft_dtype_t dtype, const char *fn);

/* inout[i] = inout[i] op in[i] for i < count. AVG reduces as SUM here.
 * inout and in are either the same buffer or disjoint. An invalid
 * (op, dtype) does nothing: check it first with weft_op_check. */
void weft_op_reduce(weft_op_t op, weft_dtype_t dtype, void *inout, const void *in, size_t count);

/* out[i] = a[i] op b[i]. out may be a, b, or both (the same pointer);
 * otherwise the three buffers must not overlap. */
void weft_op_reduce3(weft_op_t op, weft_dtype_t dtype, void *out, const void *a, const void *b, size_t count);

/* A strided fold: out = v_0 op v_1 op ... op v_{nsrc-1}, left to right,
 * each v_r count elements at (const char *)first + r * stride (nsrc >= 1;
 * out must not overlap them): weft_op_reduce3 on the first two and
 * weft_op_reduce with each next one, in one call (the same results; a
 * NaN from arithmetic may carry another payload). Looked up once
 * (NULL for an invalid pair) by callers that reduce many short vectors of
 * many ranks (shm_ll's lines). */
typedef void (*weft_op_strided_fn)(void *out, const void *first, size_t stride, int nsrc, size_t count);
weft_op_strided_fn weft_op_strided_kernel(weft_op_t op, weft_dtype_t dtype);

/* After a reduction of nranks contributions: AVG divides every element by
 * nranks (integers: truncation toward zero; floats: correctly rounded
 * division); every other op, and nranks <= 1, does nothing. */
void weft_op_finalize(weft_op_t op, weft_dtype_t dtype, void *buf, size_t count, int nranks);

/* "sum", "prod", "min", "max", "avg", "band", "bor", "bxor"; "unknown" otherwise. */
const char *weft_op_name(weft_op_t op);

/* IEEE binary16 and bfloat16 <-> float32. To float: exact (a signaling
 * NaN comes back quiet, payload kept, as F16C's vcvtph2ps does; bfloat16
 * is a plain shift). From float: round to nearest even, overflow to
 * +-Inf, subnormals exact, NaN stays NaN (quieted, the payload's top bits kept). */
float weft_fp16_to_float(uint16_t h);
uint16_t weft_float_to_fp16(float f);
float weft_bf16_to_float(uint16_t b);
uint16_t weft_float_to_bf16(float f);

/* The same conversions over arrays (F16C when the CPU has it, bit-exact
 * with the scalar functions). */
void weft_fp16_to_float_n(float *out, const uint16_t *in, size_t count);
void weft_float_to_fp16_n(uint16_t *out, const float *in, size_t count);

/* Which float16 path the kernels and array conversions use, for tests and
 * diagnostics: mode 0 forces the portable code, 1 selects F16C + AVX2 when
 * the CPU has them, -1 only asks. Returns 1 when the F16C path is in use. */
int weft_op_fp16_hw(int mode);

#endif
