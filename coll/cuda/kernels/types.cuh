/* Element types and reduction ops (kernels.h: WEFT_CK_DTYPES, WEFT_CK_OPS),
 * and the reduce kernels each protocol has: one per type (the op at run
 * time) and one per hot pair (WEFT_CK_HOT).
 *
 * Reductions are strictly left to right over the sources (p = 0 .. nsrc - 1)
 * on every rank, so every rank computes the same bits. Semantics follow
 * src/op.h where the two agree (MIN / MAX bit for bit, including -0 < +0 and
 * NaN payloads: the same integer-domain code as the host); float16 /
 * bfloat16 SUM / PROD / AVG accumulate in float32 and round once at the end
 * (kernels.h), unless WEFT_CK_HALF_ROUND_EACH_STEP is 1, which rounds to 16
 * bits after every step as src/op.c's binary kernels do (then the GPU and
 * host paths agree bit for bit for any nsrc, NaN payloads aside: GPU float
 * arithmetic returns the canonical NaN). */
#ifndef WEFT_COLL_CUDA_KERNELS_TYPES_CUH
#define WEFT_COLL_CUDA_KERNELS_TYPES_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "coll/cuda/kernels/common.cuh"

#ifndef WEFT_CK_HALF_ROUND_EACH_STEP
#define WEFT_CK_HALF_ROUND_EACH_STEP 0
#endif

namespace {

/* ------------------------------------------------------------------ */
/* Element types: storage S (what memory holds), accumulator A, and the */
/* arithmetic the ops need. 16-bit floats are stored as their bits.     */
/* ------------------------------------------------------------------ */
/* Integers: wrapping SUM / PROD in the unsigned type of at least 32
 * bits (8 / 16-bit operands never promote to int, so no signed overflow
 * and no UB); conversion back to T is modular. */
template <typename T> struct IntType {
    typedef T S;
    typedef T A;
    typedef typename std::conditional<sizeof(T) <= 4, unsigned, unsigned long long>::type W;
    static __device__ __forceinline__ A to(S x) { return x; }
    static __device__ __forceinline__ S from(A a) { return a; }
    static __device__ __forceinline__ A add(A a, A b) { return (T)((W)a + (W)b); }
    static __device__ __forceinline__ A mul(A a, A b) { return (T)((W)a * (W)b); }
    /* C division: truncation toward zero (the wrapped sum, as src/op.c) */
    static __device__ __forceinline__ S avg(A a, int n) { return (T)(a / (T)n); }
    static __device__ __forceinline__ S min(S a, S b) { return a < b ? a : b; }
    static __device__ __forceinline__ S max(S a, S b) { return a > b ? a : b; }
};

/* MIN / MAX on floats, as src/op.c's FLOAT_MINMAX: NaN-propagating (one
 * NaN operand: that NaN's bits; two: their OR), -0 < +0 (ties take the
 * OR of the bits for min, the AND for max), so commutative bit for bit. */
__device__ __forceinline__ float min_f32(float a, float b)
{
    float r = a < b ? a : b;
    r = a == b ? __uint_as_float(__float_as_uint(a) | __float_as_uint(b)) : r;
    float nan = b != b ? __uint_as_float(__float_as_uint(a) | __float_as_uint(b)) : a;
    return a != a ? nan : r;
}
__device__ __forceinline__ float max_f32(float a, float b)
{
    float r = a > b ? a : b;
    r = a == b ? __uint_as_float(__float_as_uint(a) & __float_as_uint(b)) : r;
    float nan = b != b ? __uint_as_float(__float_as_uint(a) | __float_as_uint(b)) : a;
    return a != a ? nan : r;
}
__device__ __forceinline__ double min_f64(double a, double b)
{
    double r = a < b ? a : b;
    r = a == b ? __longlong_as_double(__double_as_longlong(a) | __double_as_longlong(b)) : r;
    double nan = b != b ? __longlong_as_double(__double_as_longlong(a) | __double_as_longlong(b)) : a;
    return a != a ? nan : r;
}
__device__ __forceinline__ double max_f64(double a, double b)
{
    double r = a > b ? a : b;
    r = a == b ? __longlong_as_double(__double_as_longlong(a) & __double_as_longlong(b)) : r;
    double nan = b != b ? __longlong_as_double(__double_as_longlong(a) | __double_as_longlong(b)) : a;
    return a != a ? nan : r;
}

/* float / double: IEEE operations through the _rn intrinsics, which nvcc
 * never contracts into FMAs. AVG: the correctly rounded quotient. */
struct F32Type {
    typedef float S;
    typedef float A;
    static __device__ __forceinline__ A to(S x) { return x; }
    static __device__ __forceinline__ S from(A a) { return a; }
    static __device__ __forceinline__ A add(A a, A b) { return __fadd_rn(a, b); }
    static __device__ __forceinline__ A mul(A a, A b) { return __fmul_rn(a, b); }
    static __device__ __forceinline__ S avg(A a, int n) { return __fdiv_rn(a, (float)n); }
    static __device__ __forceinline__ S min(S a, S b) { return min_f32(a, b); }
    static __device__ __forceinline__ S max(S a, S b) { return max_f32(a, b); }
};

struct F64Type {
    typedef double S;
    typedef double A;
    static __device__ __forceinline__ A to(S x) { return x; }
    static __device__ __forceinline__ S from(A a) { return a; }
    static __device__ __forceinline__ A add(A a, A b) { return __dadd_rn(a, b); }
    static __device__ __forceinline__ A mul(A a, A b) { return __dmul_rn(a, b); }
    static __device__ __forceinline__ S avg(A a, int n) { return __ddiv_rn(a, (double)n); }
    static __device__ __forceinline__ S min(S a, S b) { return min_f64(a, b); }
    static __device__ __forceinline__ S max(S a, S b) { return max_f64(a, b); }
};

/* 16-bit floats in the integer domain, as src/op.c's HALF_MINMAX: a
 * sign-magnitude key orders values (-0 and +0 both 0; NaN magnitudes lie
 * above Inf's), ties take the OR (min) / AND (max) of the bits, NaNs
 * propagate (two: their OR). INF: 0x7c00 (float16) or 0x7f80 (bfloat16). */
template <unsigned short INF, bool IS_MIN>
__device__ __forceinline__ unsigned short half_minmax(unsigned short A, unsigned short B)
{
    short va = (short)(A & 0x7fff), vb = (short)(B & 0x7fff);
    short sa = (short)(0 - (A >> 15)), sb = (short)(0 - (B >> 15)); /* 0 or -1 */
    short ka = (short)((va ^ sa) - sa), kb = (short)((vb ^ sb) - sb);
    unsigned short r = (IS_MIN ? ka < kb : ka > kb) ? A : B;
    r = ka == kb ? (unsigned short)(IS_MIN ? (A | B) : (A & B)) : r;
    unsigned short na = va > (short)INF ? A : 0, nb = vb > (short)INF ? B : 0;
    return va > (short)INF || vb > (short)INF ? (unsigned short)(na | nb) : r;
}

/* float16 / bfloat16: SUM / PROD / AVG in float32, rounded to nearest
 * even once at the end (or after every step: WEFT_CK_HALF_ROUND_EACH_STEP). */
template <class H> struct HalfType {
    typedef unsigned short S;
    typedef float A;
    static __device__ __forceinline__ A to(S x) { return H::to_float(x); }
    static __device__ __forceinline__ S from(A a) { return H::from_float(a); }
    static __device__ __forceinline__ A step(A r) { return WEFT_CK_HALF_ROUND_EACH_STEP ? to(from(r)) : r; }
    static __device__ __forceinline__ A add(A a, A b) { return step(__fadd_rn(a, b)); }
    static __device__ __forceinline__ A mul(A a, A b) { return step(__fmul_rn(a, b)); }
    static __device__ __forceinline__ S avg(A a, int n) { return from(__fdiv_rn(a, (float)n)); }
    static __device__ __forceinline__ S min(S a, S b) { return half_minmax<H::INF, true>(a, b); }
    static __device__ __forceinline__ S max(S a, S b) { return half_minmax<H::INF, false>(a, b); }
};
struct Fp16Bits {
    static const unsigned short INF = 0x7c00;
    static __device__ __forceinline__ float to_float(unsigned short x) { return __half2float(__ushort_as_half(x)); }
    static __device__ __forceinline__ unsigned short from_float(float a) { return __half_as_ushort(__float2half_rn(a)); }
};
struct Bf16Bits {
    static const unsigned short INF = 0x7f80;
    static __device__ __forceinline__ float to_float(unsigned short x) { return __uint_as_float((unsigned)x << 16); }
    static __device__ __forceinline__ unsigned short from_float(float a)
    {
        return __bfloat16_as_ushort(__float2bfloat16_rn(a));
    }
};
typedef HalfType<Fp16Bits> F16Type;
typedef HalfType<Bf16Bits> BF16Type;

/* ------------------------------------------------------------------ */
/* Ops: init (first source), step (each next one), fin (the result)     */
/* ------------------------------------------------------------------ */
template <class N> struct OpSum {
    typedef typename N::S S;
    typedef typename N::A A;
    static __device__ __forceinline__ A init(S x) { return N::to(x); }
    static __device__ __forceinline__ A step(A a, S x) { return N::add(a, N::to(x)); }
    static __device__ __forceinline__ S fin(A a, int) { return N::from(a); }
};
template <class N> struct OpProd {
    typedef typename N::S S;
    typedef typename N::A A;
    static __device__ __forceinline__ A init(S x) { return N::to(x); }
    static __device__ __forceinline__ A step(A a, S x) { return N::mul(a, N::to(x)); }
    static __device__ __forceinline__ S fin(A a, int) { return N::from(a); }
};
template <class N> struct OpAvg {
    typedef typename N::S S;
    typedef typename N::A A;
    static __device__ __forceinline__ A init(S x) { return N::to(x); }
    static __device__ __forceinline__ A step(A a, S x) { return N::add(a, N::to(x)); }
    static __device__ __forceinline__ S fin(A a, int n) { return N::avg(a, n); }
};
template <class N> struct OpMin {
    typedef typename N::S S;
    typedef S A;
    static __device__ __forceinline__ A init(S x) { return x; }
    static __device__ __forceinline__ A step(A a, S x) { return N::min(a, x); }
    static __device__ __forceinline__ S fin(A a, int) { return a; }
};
template <class N> struct OpMax {
    typedef typename N::S S;
    typedef S A;
    static __device__ __forceinline__ A init(S x) { return x; }
    static __device__ __forceinline__ A step(A a, S x) { return N::max(a, x); }
    static __device__ __forceinline__ S fin(A a, int) { return a; }
};

/* The device type and op behind each name of kernels.h's lists. */
typedef IntType<int8_t> ck_type_i8;
typedef IntType<uint8_t> ck_type_u8;
typedef IntType<int16_t> ck_type_i16;
typedef IntType<uint16_t> ck_type_u16;
typedef IntType<int32_t> ck_type_i32;
typedef IntType<uint32_t> ck_type_u32;
typedef IntType<int64_t> ck_type_i64;
typedef IntType<uint64_t> ck_type_u64;
typedef F16Type ck_type_f16;
typedef BF16Type ck_type_bf16;
typedef F32Type ck_type_f32;
typedef F64Type ck_type_f64;
template <class N> using ck_op_sum = OpSum<N>;
template <class N> using ck_op_prod = OpProd<N>;
template <class N> using ck_op_min = OpMin<N>;
template <class N> using ck_op_max = OpMax<N>;
template <class N> using ck_op_avg = OpAvg<N>;
/* The ops' places in kernels.h's list: weft_op_t values */
#define WEFT_CK_ENUM(name, ...) ck_o_##name,
enum { WEFT_CK_OPS(WEFT_CK_ENUM, 0) ck_nops };
#undef WEFT_CK_ENUM

/* ------------------------------------------------------------------ */
/* The kernels of a type: the op at run time (kernels.h)                */
/* ------------------------------------------------------------------ */
template <class Op> struct ck_tag {
    typedef Op type;
};

/* f(ck_tag<Op>()) with the Op of type N and a call's op (weft_op_t; others: nothing). f calls the op's
 * reduction through a function of its own, not inlined: a type's kernel is its protocol's body plus five
 * calls, each loop compiled once (inlined in a switch, ptxas takes many times longer). */
template <class N, class F> __device__ __forceinline__ void ck_each_op(int op, F &&f)
{
    switch (op) {
#define WEFT_CK_OP_CASE(o, ...)                                                                                        \
    case ck_o_##o:                                                                                                     \
        f(ck_tag<ck_op_##o<N>>());                                                                                     \
        break;
        WEFT_CK_OPS(WEFT_CK_OP_CASE, 0)
#undef WEFT_CK_OP_CASE
    default:
        break;
    }
}

} // namespace

/* K(t, o) once for every hot pair (kernels.h: WEFT_CK_HOT), K(t) once for every type: a protocol's reduce
 * kernels, one __global__ each; K names its kernel weft_ck_<protocol>_reduce_##t##_##o and folds with
 * ck_op_##o<ck_type_##t>, or weft_ck_<protocol>_reduce_##t and folds with ck_each_op<ck_type_##t>. */
#define WEFT_CK_INSTANTIATE(K) WEFT_CK_HOT(K)
#define WEFT_CK_INSTANTIATE_TYPES(K) WEFT_CK_DTYPES(K, 0)

#endif
