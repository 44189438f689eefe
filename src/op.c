/* Reduction operators: one vectorised loop per (op, datatype), chosen
 * through a table, so no per-element switch. Semantics are in op.h.
 *
 * How the loops vectorise. GCC 12 vectorises at -O2 only under its
 * "very-cheap" cost model, which refuses a loop whose trip count is unknown
 * (it would need a scalar epilogue). Every kernel therefore runs blocks of
 * BLOCK elements through an inner loop of constant trip count (a multiple
 * of every vector width up to 64 lanes), which -O2 vectorises fully, then
 * a scalar tail of fewer than BLOCK elements. No optimize attributes or
 * pragmas are needed, and -O3 / clang produce the same shape.
 *
 * Aliasing. out may equal a or b (out == a is the in-place reduction), so
 * the pointers cannot be restrict-qualified: that would make the in-place
 * call undefined. Instead each loop carries an ivdep pragma, which tells
 * the compiler exactly what holds: no dependence between iterations (an
 * element is read, then written, at the same index). GCC then vectorises
 * without runtime alias checks, as it would with restrict. */
#include "op.h"

#include "weft_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_F16C_PATH 1
#else
#define HAVE_F16C_PATH 0
#endif

#define BLOCK 64

#if defined(__clang__)
#define IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define IVDEP _Pragma("GCC ivdep")
#else
#define IVDEP
#endif

typedef void (*binary_fn)(void *out, const void *a, const void *b, size_t n);
typedef void (*avg_fn)(void *buf, size_t n, int nranks);

/* ------------------------------------------------------------------ */
/* Bit casts and the 16-bit float conversions (branch-free, so they     */
/* vectorise inside the loops below: selects, shifts, int<->float).     */
/* ------------------------------------------------------------------ */
static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline double f64_from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static inline uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* c ? a : b as a mask, where a or b comes from float arithmetic: GCC does
 * not if-convert a float operation that it has sunk into one arm of a
 * ternary (it might trap), which would leave a branch in the loop and no
 * vectorisation. */
static inline uint32_t select32(int c, uint32_t a, uint32_t b)
{
    uint32_t m = (uint32_t)0 - (uint32_t)(c != 0);
    return (a & m) | (b & ~m);
}

static inline float fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    int32_t em = h & 0x7fff; /* exponent and mantissa */
    /* normal: rebias the exponent from 15 to 127 */
    uint32_t normal = ((uint32_t)em << 13) + ((uint32_t)(127 - 15) << 23);
    /* Inf / NaN: all-ones exponent; a NaN is quieted (as F16C does) */
    uint32_t infnan = ((uint32_t)em << 13) | 0x7f800000u | (em > 0x7c00 ? 0x00400000u : 0);
    /* subnormal or zero: mantissa * 2^-24, exact and a normal float (no
     * float subnormal is touched, so DAZ could not change it) */
    uint32_t sub = f32_bits((float)em * 0x1p-24f);
    uint32_t r = select32(em >= 0x7c00, infnan, select32(em >= 0x0400, normal, sub));
    return f32_from_bits(r | sign);
}

static inline uint16_t f32_to_fp16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t ax = (int32_t)(x & 0x7fffffff);
    /* normal result: rebias (-112 << 23 == 0xc8000000 mod 2^32), add just
     * under half an ulp plus the kept lsb (round to nearest even); a carry
     * runs into the exponent, up to 0x7c00 = Inf for 65520 <= |f| < 65536 */
    uint32_t normal = ((uint32_t)ax + 0xc8000fffu + (((uint32_t)ax >> 13) & 1)) >> 13;
    /* |f| < 2^-14, subnormal (or zero) result: adding 0.5 puts the 2^-24
     * quantum at the float's last mantissa bit, and the FPU rounds to
     * nearest even; 0.5 + 2^-14 carries into 0x400, the smallest normal */
    uint32_t sub = f32_bits(f32_from_bits((uint32_t)ax) + 0.5f) - 0x3f000000u;
    /* |f| >= 65536, Inf, NaN (quieted, the payload's top bits kept) */
    uint32_t big = ax > 0x7f800000 ? 0x7e00u | (((uint32_t)ax >> 13) & 0x3ff) : 0x7c00u;
    uint32_t r = select32(ax >= 0x47800000, big, select32(ax < 0x38800000, sub, normal));
    return (uint16_t)(r | sign);
}

static inline float bf16_to_f32(uint16_t b)
{
    return f32_from_bits((uint32_t)b << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    /* round to nearest even on the dropped 16 bits; a carry into the
     * exponent gives the next binade or Inf, which is right */
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
    uint32_t nan = (x >> 16) | 0x0040; /* quiet bit: never turns into Inf */
    return (uint16_t)((int32_t)(x & 0x7fffffff) > 0x7f800000 ? nan : rounded);
}

/* ------------------------------------------------------------------ */
/* MIN / MAX on floats: NaN-propagating, -0 < +0, commutative bit for   */
/* bit (see op.h). Results are always one operand's bits (or the OR of  */
/* two NaNs / two zeros), so 16-bit floats need no rounding.            */
/* ------------------------------------------------------------------ */
/* a CMP b ? a : b is exactly minps / maxps (b when equal or unordered),
 * so only ties and a NaN a need fixing: a tie takes a TIE b (equal values
 * differ in bits only as +-0), a NaN a is returned unless b is a NaN too.
 * The selects stay on float / double values: SSE2 has no 64-bit integer
 * select on a double compare, so integer-typed code would not vectorise;
 * selects never change bits. */
#define FLOAT_MINMAX(name, F, U, from_bits, bits, CMP, TIE)                                                            \
    static inline F name(F a, F b)                                                                                     \
    {                                                                                                                  \
        F r = a CMP b ? a : b;                                                                                         \
        r = a == b ? from_bits((U)(bits(a) TIE bits(b))) : r;                                                          \
        F nan = b != b ? from_bits((U)(bits(a) | bits(b))) : a;                                                        \
        return a != a ? nan : r;                                                                                       \
    }
FLOAT_MINMAX(min_f32, float, uint32_t, f32_from_bits, f32_bits, <, |)
FLOAT_MINMAX(max_f32, float, uint32_t, f32_from_bits, f32_bits, >, &)
FLOAT_MINMAX(min_f64, double, uint64_t, f64_from_bits, f64_bits, <, |)
FLOAT_MINMAX(max_f64, double, uint64_t, f64_from_bits, f64_bits, >, &)

/* 16-bit floats in the integer domain: sign-magnitude to a signed key
 * (-0 and +0 both 0) orders them as their values; NaN is a magnitude above
 * Inf's. Same results as converting to float, in 8-lane int16 vectors. */
#define HALF_MINMAX(name, INF, CMP, TIE)                                                                               \
    static inline uint16_t name(uint16_t A, uint16_t B)                                                                \
    {                                                                                                                  \
        int16_t va = (int16_t)(A & 0x7fff), vb = (int16_t)(B & 0x7fff);                                                \
        int16_t sa = (int16_t)(0 - (A >> 15)), sb = (int16_t)(0 - (B >> 15)); /* 0 or -1 */                            \
        int16_t ka = (int16_t)((va ^ sa) - sa), kb = (int16_t)((vb ^ sb) - sb);                                        \
        uint16_t r = ka CMP kb ? A : B;                                                                                \
        r = ka == kb ? (uint16_t)(A TIE B) : r;                                                                        \
        uint16_t na = va > (INF) ? A : 0, nb = vb > (INF) ? B : 0;                                                     \
        return va > (INF) || vb > (INF) ? (uint16_t)(na | nb) : r;                                                     \
    }
HALF_MINMAX(min_fp16, 0x7c00, <, |)
HALF_MINMAX(max_fp16, 0x7c00, >, &)
HALF_MINMAX(min_bf16, 0x7f80, <, |)
HALF_MINMAX(max_bf16, 0x7f80, >, &)

/* ------------------------------------------------------------------ */
/* Kernels                                                              */
/* ------------------------------------------------------------------ */
/* out[i] = expr(x = a[i], y = b[i]) over blocks of BLOCK, then a tail;
 * and name_n, its left fold over nsrc strided sources (STRIDED_KERNEL). */
#define BINARY_KERNEL(name, T, expr)                                                                                   \
    STRIDED_KERNEL(name, T, expr)                                                                                      \
    static void name(void *out, const void *a, const void *b, size_t n)                                                \
    {                                                                                                                  \
        T *o = out;                                                                                                    \
        const T *p = a, *q = b;                                                                                        \
        size_t i = 0;                                                                                                  \
        for (; n - i >= BLOCK; i += BLOCK) {                                                                           \
            T *ob = o + i;                                                                                             \
            const T *pb = p + i, *qb = q + i;                                                                          \
            IVDEP for (size_t j = 0; j < BLOCK; j++)                                                                   \
            {                                                                                                          \
                T x = pb[j], y = qb[j];                                                                                \
                ob[j] = (T)(expr);                                                                                     \
            }                                                                                                          \
        }                                                                                                              \
        IVDEP for (; i < n; i++)                                                                                       \
        {                                                                                                              \
            T x = p[i], y = q[i];                                                                                      \
            o[i] = (T)(expr);                                                                                          \
        }                                                                                                              \
    }

/* out = src_0 op src_1 op ... op src_{nsrc-1}, left to right, src_r at
 * first + r * stride bytes: the same expression in the same order as
 * nsrc - 1 calls of the binary kernel, without a call per source (shm_ll
 * reduces 56-byte lines of 8-32 ranks). */
#define STRIDED_KERNEL(name, T, expr)                                                                                  \
    static void name##_n(void *out, const void *first, size_t stride, int nsrc, size_t n)                              \
    {                                                                                                                  \
        T *o = out;                                                                                                    \
        const char *src = first;                                                                                       \
        memcpy(o, src, n * sizeof(T));                                                                                 \
        for (int r = 1; r < nsrc; r++) {                                                                               \
            const T *q = (const T *)(const void *)(src + (size_t)r * stride);                                          \
            IVDEP for (size_t i = 0; i < n; i++)                                                                       \
            {                                                                                                          \
                T x = o[i], y = q[i];                                                                                  \
                o[i] = (T)(expr);                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
    }

/* Wrapping arithmetic and bitwise ops are the same bits for signed and
 * unsigned types of one width: one kernel per width, on the unsigned type
 * (no signed overflow). 1u * promotes 8/16-bit operands to unsigned int,
 * never int, so their product cannot overflow either. */
#define UINT_KERNELS(bits)                                                                                             \
    BINARY_KERNEL(sum_u##bits, uint##bits##_t, x + y)                                                                  \
    BINARY_KERNEL(prod_u##bits, uint##bits##_t, 1u * x * y)                                                            \
    BINARY_KERNEL(band_u##bits, uint##bits##_t, x &y)                                                                  \
    BINARY_KERNEL(bor_u##bits, uint##bits##_t, x | y)                                                                  \
    BINARY_KERNEL(bxor_u##bits, uint##bits##_t, x ^ y)
#define MINMAX_KERNELS(bits)                                                                                           \
    BINARY_KERNEL(min_u##bits, uint##bits##_t, x < y ? x : y)                                                          \
    BINARY_KERNEL(max_u##bits, uint##bits##_t, x > y ? x : y)                                                          \
    BINARY_KERNEL(min_i##bits, int##bits##_t, x < y ? x : y)                                                           \
    BINARY_KERNEL(max_i##bits, int##bits##_t, x > y ? x : y)
UINT_KERNELS(8)
UINT_KERNELS(16)
UINT_KERNELS(32)
UINT_KERNELS(64)
MINMAX_KERNELS(8)
MINMAX_KERNELS(16)
MINMAX_KERNELS(32)

/* 64-bit MIN / MAX: SSE2 has no 64-bit compare (pcmpgtq is SSE4.2), so a
 * plain x < y ? x : y stays scalar. The signed comparison from its sign
 * bit (Hacker's Delight 2-12: x - y, corrected for overflow) and a mask
 * select use only 64-bit add / and / xor / shift, which SSE2 has. Unsigned
 * values compare as signed ones with the top bit flipped. */
static inline uint64_t lt_mask_i64(uint64_t x, uint64_t y)
{
    uint64_t d = x - y;
    return (uint64_t)0 - ((d ^ ((x ^ y) & (d ^ x))) >> 63);
}
#define SELECT64(m, x, y) (((x) & (m)) | ((y) & ~(m)))
#define TOP64             ((uint64_t)1 << 63)
BINARY_KERNEL(min_i64, uint64_t, SELECT64(lt_mask_i64(x, y), x, y))
BINARY_KERNEL(max_i64, uint64_t, SELECT64(lt_mask_i64(y, x), x, y))
BINARY_KERNEL(min_u64, uint64_t, SELECT64(lt_mask_i64(x ^ TOP64, y ^ TOP64), x, y))
BINARY_KERNEL(max_u64, uint64_t, SELECT64(lt_mask_i64(y ^ TOP64, x ^ TOP64), x, y))

BINARY_KERNEL(sum_f32, float, x + y)
BINARY_KERNEL(prod_f32, float, x *y)
BINARY_KERNEL(sum_f64, double, x + y)
BINARY_KERNEL(prod_f64, double, x *y)
BINARY_KERNEL(min_f32k, float, min_f32(x, y))
BINARY_KERNEL(max_f32k, float, max_f32(x, y))
BINARY_KERNEL(min_f64k, double, min_f64(x, y))
BINARY_KERNEL(max_f64k, double, max_f64(x, y))

BINARY_KERNEL(sum_bf16, uint16_t, f32_to_bf16(bf16_to_f32(x) + bf16_to_f32(y)))
BINARY_KERNEL(prod_bf16, uint16_t, f32_to_bf16(bf16_to_f32(x) * bf16_to_f32(y)))
BINARY_KERNEL(min_bf16k, uint16_t, min_bf16(x, y))
BINARY_KERNEL(max_bf16k, uint16_t, max_bf16(x, y))

BINARY_KERNEL(sum_fp16_portable, uint16_t, f32_to_fp16(fp16_to_f32(x) + fp16_to_f32(y)))
BINARY_KERNEL(prod_fp16_portable, uint16_t, f32_to_fp16(fp16_to_f32(x) * fp16_to_f32(y)))
BINARY_KERNEL(min_fp16k, uint16_t, min_fp16(x, y))
BINARY_KERNEL(max_fp16k, uint16_t, max_fp16(x, y))

/* ------------------------------------------------------------------ */
/* float16 on F16C + AVX2: the conversions are single instructions      */
/* there (the portable ones take ~20). x86-64's baseline is SSE2, so    */
/* this path is compiled for its target only and chosen at run time;    */
/* both paths give the same bits (test/test_op.c checks).               */
/* ------------------------------------------------------------------ */
static atomic_int fp16_hw_mode = -1; /* -1: not yet decided */

/* CPUID rather than __builtin_cpu_supports, which clang < 15 lacks for
 * "f16c": F16C and AVX (leaf 1 ECX bits 29, 28), the OS saving the YMM
 * registers (OSXSAVE, bit 27, then XCR0 bits 1-2), AVX2 (leaf 7 EBX bit 5). */
static int fp16_hw_detect(void)
{
#if HAVE_F16C_PATH
    unsigned a, b, c, d, xcr0_lo, xcr0_hi;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 29 & 1) || !(c >> 28 & 1) || !(c >> 27 & 1)) return 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 6) != 6 || __get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return b >> 5 & 1;
#else
    return 0;
#endif
}

static int fp16_hw_on(void)
{
    int m = atomic_load_explicit(&fp16_hw_mode, memory_order_relaxed);
    if (WEFT_UNLIKELY(m < 0)) {
        m = fp16_hw_detect();
        atomic_store_explicit(&fp16_hw_mode, m, memory_order_relaxed);
    }
    return m;
}

int weft_op_fp16_hw(int mode)
{
    if (mode == 0) atomic_store_explicit(&fp16_hw_mode, 0, memory_order_relaxed);
    if (mode == 1) atomic_store_explicit(&fp16_hw_mode, fp16_hw_detect(), memory_order_relaxed);
    return fp16_hw_on();
}

#if HAVE_F16C_PATH
/* Round to nearest even whatever MXCSR says, like the portable code. */
#define F16C_RNE _MM_FROUND_TO_NEAREST_INT

#define F16C_BINARY(name, vop)                                                                                         \
    __attribute__((target("avx2,f16c"))) static void name(void *out, const void *a, const void *b, size_t n)           \
    {                                                                                                                  \
        uint16_t *o = out;                                                                                             \
        const uint16_t *p = a, *q = b;                                                                                 \
        size_t i = 0;                                                                                                  \
        for (; n - i >= 8; i += 8) {                                                                                   \
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + i)));                                     \
            __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(q + i)));                                     \
            _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(vop(x, y), F16C_RNE));                                \
        }                                                                                                              \
        if (i < n) { /* the last < 8 elements through a padded vector */                                               \
            uint16_t tp[8] = {0}, tq[8] = {0}, to[8];                                                                  \
            memcpy(tp, p + i, (n - i) * sizeof *p);                                                                    \
            memcpy(tq, q + i, (n - i) * sizeof *q);                                                                    \
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tp));                                          \
            __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tq));                                          \
            _mm_storeu_si128((__m128i *)to, _mm256_cvtps_ph(vop(x, y), F16C_RNE));                                     \
            memcpy(o + i, to, (n - i) * sizeof *o);                                                                    \
        }                                                                                                              \
    }
F16C_BINARY(sum_fp16_f16c, _mm256_add_ps)
F16C_BINARY(prod_fp16_f16c, _mm256_mul_ps)

__attribute__((target("avx2,f16c"))) static void fp16_to_f32_f16c(float *out, const uint16_t *in, size_t n)
{
    size_t i = 0;
    for (; n - i >= 8; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    for (; i < n; i++)
        out[i] = _cvtsh_ss(in[i]);
}

__attribute__((target("avx2,f16c"))) static void f32_to_fp16_f16c(uint16_t *out, const float *in, size_t n)
{
    size_t i = 0;
    for (; n - i >= 8; i += 8)
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), F16C_RNE));
    for (; i < n; i++)
        out[i] = (uint16_t)_cvtss_sh(in[i], F16C_RNE);
}
#endif

static void sum_fp16(void *out, const void *a, const void *b, size_t n)
{
#if HAVE_F16C_PATH
    if (fp16_hw_on()) {
        sum_fp16_f16c(out, a, b, n);
        return;
    }
#endif
    sum_fp16_portable(out, a, b, n);
}

static void prod_fp16(void *out, const void *a, const void *b, size_t n)
{
#if HAVE_F16C_PATH
    if (fp16_hw_on()) {
        prod_fp16_f16c(out, a, b, n);
        return;
    }
#endif
    prod_fp16_portable(out, a, b, n);
}

/* The strided folds of the two: F16C one binary call per source (its
 * conversions are single instructions), else the portable fold. */
#define FP16_STRIDED(name)                                                                                             \
    static void name##_n(void *out, const void *first, size_t stride, int nsrc, size_t n)                              \
    {                                                                                                                  \
        if (!HAVE_F16C_PATH || !fp16_hw_on()) {                                                                        \
            name##_portable_n(out, first, stride, nsrc, n);                                                            \
            return;                                                                                                    \
        }                                                                                                              \
        const char *src = first;                                                                                       \
        memcpy(out, src, n * sizeof(uint16_t));                                                                        \
        for (int r = 1; r < nsrc; r++)                                                                                 \
            name(out, out, src + (size_t)r * stride, n);                                                               \
    }
FP16_STRIDED(sum_fp16)
FP16_STRIDED(prod_fp16)

/* ------------------------------------------------------------------ */
/* AVG: the final division                                              */
/* ------------------------------------------------------------------ */
#define UNARY_KERNEL(name, T, expr)                                                                                    \
    static void name(void *buf, size_t n, int nranks)                                                                  \
    {                                                                                                                  \
        T *o = buf;                                                                                                    \
        size_t i = 0;                                                                                                  \
        (void)nranks;                                                                                                  \
        for (; n - i >= BLOCK; i += BLOCK) {                                                                           \
            T *ob = o + i;                                                                                             \
            IVDEP for (size_t j = 0; j < BLOCK; j++)                                                                   \
            {                                                                                                          \
                T x = ob[j];                                                                                           \
                ob[j] = (T)(expr);                                                                                     \
            }                                                                                                          \
        }                                                                                                              \
        IVDEP for (; i < n; i++)                                                                                       \
        {                                                                                                              \
            T x = o[i];                                                                                                \
            o[i] = (T)(expr);                                                                                          \
        }                                                                                                              \
    }

/* Integers truncate toward zero. x86 has no vector integer division, so
 * 8/16-bit values divide in float and 32-bit ones in double, which is
 * exact: for |x| < 2^p (p = 24, 53) the rounded quotient is within
 * |x|/n * 2^-p < 1/n of x/n, and a non-integer x/n is at least 1/n away
 * from every integer, so truncating gives trunc(x/n). (float)n is exact
 * up to 2^24; beyond that |x| < n and both quotients truncate to 0.
 * 64-bit integers use the integer division. */
UNARY_KERNEL(avg_i8, int8_t, (float)x / (float)nranks)
UNARY_KERNEL(avg_u8, uint8_t, (float)x / (float)nranks)
UNARY_KERNEL(avg_i16, int16_t, (float)x / (float)nranks)
UNARY_KERNEL(avg_u16, uint16_t, (float)x / (float)nranks)
UNARY_KERNEL(avg_i32, int32_t, (double)x / (double)nranks)
UNARY_KERNEL(avg_u32, uint32_t, (double)x / (double)nranks)
UNARY_KERNEL(avg_i64, int64_t, x / (int64_t)nranks)
UNARY_KERNEL(avg_u64, uint64_t, x / (uint64_t)nranks)

/* Floats: the correctly rounded quotient x / n.
 * - float64: n is exact in a double, one IEEE division.
 * - float32, n <= 2^24: n is exact in a float, one IEEE division.
 * - float16 (bfloat16), n < 2^13 (2^16): the float32 quotient rounded
 *   again to 16 bits. Double rounding is harmless here: x/n differs from
 *   a 16-bit rounding boundary m inside a binade by a multiple of
 *   2^(f-1)/n (2^f: the result's quantum) unless it equals m, so
 *   |x/n - m| > 2^(f-14) (2^(f-17)), float32's largest error there. (The
 *   first float16 value that the float32 path gets wrong is at n = 8195.)
 * - larger n: a scalar loop divides in double with round-to-odd, which any
 *   later rounding to <= 51 bits does not spoil. */
UNARY_KERNEL(avg_f64, double, x / (double)nranks)
UNARY_KERNEL(avg_f32_small, float, x / (float)nranks)
UNARY_KERNEL(avg_fp16_small, uint16_t, f32_to_fp16(fp16_to_f32(x) / (float)nranks))
UNARY_KERNEL(avg_bf16_small, uint16_t, f32_to_bf16(bf16_to_f32(x) / (float)nranks))

/* x / n rounded to odd in double: the IEEE quotient, and when it is
 * inexact (the fma residual x - q*n is exact and nonzero) with an even
 * last bit, its neighbour toward x / n. No under/overflow is possible for
 * x a float32 value and 1 <= n < 2^31. */
static double div_round_odd(double x, double n)
{
    double q = x / n, r = fma(-q, n, x);
    if ((r > 0 || r < 0) && q != 0 && !(f64_bits(q) & 1))
        q = f64_from_bits(f64_bits(q) + ((r > 0) == (q > 0) ? 1 : (uint64_t)-1));
    return q;
}

/* Rounds to odd from double to float (the quotient above is already
 * odd-rounded at 53 bits, and odd rounding composes). */
static float f32_round_odd(double d)
{
    float f = (float)d;
    if ((double)f != d && d == d && !(f32_bits(f) & 1))
        f = f32_from_bits(f32_bits(f) + (fabs(d) > fabs((double)f) ? 1 : (uint32_t)-1));
    return f;
}

static void avg_f32(void *buf, size_t n, int nranks)
{
    float *o = buf;
    if (nranks <= (1 << 24)) {
        avg_f32_small(buf, n, nranks);
        return;
    }
    for (size_t i = 0; i < n; i++)
        o[i] = (float)div_round_odd(o[i], nranks);
}

static void avg_fp16(void *buf, size_t n, int nranks)
{
    uint16_t *o = buf;
    if (nranks < (1 << 13)) {
        avg_fp16_small(buf, n, nranks);
        return;
    }
    for (size_t i = 0; i < n; i++)
        o[i] = f32_to_fp16(f32_round_odd(div_round_odd(fp16_to_f32(o[i]), nranks)));
}

static void avg_bf16(void *buf, size_t n, int nranks)
{
    uint16_t *o = buf;
    if (nranks < (1 << 16)) {
        avg_bf16_small(buf, n, nranks);
        return;
    }
    for (size_t i = 0; i < n; i++)
        o[i] = f32_to_bf16(f32_round_odd(div_round_odd(bf16_to_f32(o[i]), nranks)));
}

/* ------------------------------------------------------------------ */
/* Tables                                                               */
/* ------------------------------------------------------------------ */
/* One table per kernel form: KERNELS() the binary kernels, KERNELS(_n)
 * their strided folds (X pasted to every name). */
#define INT_ROW(s, u, X)                                                                                               \
    {                                                                                                                  \
        [WEFT_SUM] = sum_##u##X, [WEFT_PROD] = prod_##u##X, [WEFT_MIN] = min_##s##X, [WEFT_MAX] = max_##s##X,          \
        [WEFT_AVG] = sum_##u##X, [WEFT_BAND] = band_##u##X, [WEFT_BOR] = bor_##u##X, [WEFT_BXOR] = bxor_##u##X         \
    }
#define FLOAT_ROW(X, sum, prod, min, max)                                                                              \
    {                                                                                                                  \
        [WEFT_SUM] = sum##X, [WEFT_PROD] = prod##X, [WEFT_MIN] = min##X, [WEFT_MAX] = max##X, [WEFT_AVG] = sum##X      \
    }
#define KERNELS(X)                                                                                                     \
    {                                                                                                                  \
        [WEFT_INT8] = INT_ROW(i8, u8, X), [WEFT_UINT8] = INT_ROW(u8, u8, X), [WEFT_INT16] = INT_ROW(i16, u16, X),      \
        [WEFT_UINT16] = INT_ROW(u16, u16, X), [WEFT_INT32] = INT_ROW(i32, u32, X),                                     \
        [WEFT_UINT32] = INT_ROW(u32, u32, X), [WEFT_INT64] = INT_ROW(i64, u64, X),                                     \
        [WEFT_UINT64] = INT_ROW(u64, u64, X),                                                                          \
        [WEFT_FLOAT16] = FLOAT_ROW(X, sum_fp16, prod_fp16, min_fp16k, max_fp16k),                                      \
        [WEFT_BFLOAT16] = FLOAT_ROW(X, sum_bf16, prod_bf16, min_bf16k, max_bf16k),                                     \
        [WEFT_FLOAT32] = FLOAT_ROW(X, sum_f32, prod_f32, min_f32k, max_f32k),                                          \
        [WEFT_FLOAT64] = FLOAT_ROW(X, sum_f64, prod_f64, min_f64k, max_f64k),                                          \
        [WEFT_BYTE] = {[WEFT_BAND] = band_u8##X, [WEFT_BOR] = bor_u8##X, [WEFT_BXOR] = bxor_u8##X},                    \
    }

/* NULL: the op is not defined on the datatype (weft_op_check's source). */
static const binary_fn kernels[WEFT_DTYPE_COUNT][WEFT_OP_COUNT] = KERNELS();
static const weft_op_strided_fn strided_kernels[WEFT_DTYPE_COUNT][WEFT_OP_COUNT] = KERNELS(_n);

static const avg_fn avg_kernels[WEFT_DTYPE_COUNT] = {
    [WEFT_INT8] = avg_i8,      [WEFT_UINT8] = avg_u8,      [WEFT_INT16] = avg_i16,   [WEFT_UINT16] = avg_u16,
    [WEFT_INT32] = avg_i32,    [WEFT_UINT32] = avg_u32,    [WEFT_INT64] = avg_i64,   [WEFT_UINT64] = avg_u64,
    [WEFT_FLOAT16] = avg_fp16, [WEFT_BFLOAT16] = avg_bf16, [WEFT_FLOAT32] = avg_f32, [WEFT_FLOAT64] = avg_f64,
};

static const char *const op_names[WEFT_OP_COUNT] = {
    [WEFT_SUM] = "sum", [WEFT_PROD] = "prod", [WEFT_MIN] = "min", [WEFT_MAX] = "max",
    [WEFT_AVG] = "avg", [WEFT_BAND] = "band", [WEFT_BOR] = "bor", [WEFT_BXOR] = "bxor",
};

static int op_known(weft_op_t op)
{
    return (int)op >= 0 && (int)op < WEFT_OP_COUNT;
}

static int dtype_known(weft_dtype_t dtype)
{
    return (int)dtype >= 0 && (int)dtype < WEFT_DTYPE_COUNT;
}

static binary_fn kernel_of(weft_op_t op, weft_dtype_t dtype)
{
    return op_known(op) && dtype_known(dtype) ? kernels[dtype][op] : NULL;
}

const char *weft_op_name(weft_op_t op)
{
    return op_known(op) ? op_names[op] : "unknown";
}

int weft_op_check(weft_op_t op, weft_dtype_t dtype, const char *fn)
{
    if (!fn) fn = "weft";
    if (!op_known(op))
        return weft_error(WEFT_ERR_ARG, "%s: unknown op %d (dtype %s)", fn, (int)op, weft_dtype_name(dtype));
    if (!dtype_known(dtype))
        return weft_error(WEFT_ERR_ARG, "%s: unknown dtype %d (op %s)", fn, (int)dtype, weft_op_name(op));
    if (!kernels[dtype][op]) {
        const char *why = dtype == WEFT_BYTE ? "byte takes only band, bor, bxor" : "bitwise ops need an integer type";
        return weft_error(WEFT_ERR_ARG, "%s: op %s is not defined on dtype %s (%s)", fn, weft_op_name(op),
                          weft_dtype_name(dtype), why);
    }
    return WEFT_SUCCESS;
}

void weft_op_reduce(weft_op_t op, weft_dtype_t dtype, void *inout, const void *in, size_t count)
{
    binary_fn k = kernel_of(op, dtype);
    if (k && count) k(inout, inout, in, count);
}

void weft_op_reduce3(weft_op_t op, weft_dtype_t dtype, void *out, const void *a, const void *b, size_t count)
{
    binary_fn k = kernel_of(op, dtype);
    if (k && count) k(out, a, b, count);
}

weft_op_strided_fn weft_op_strided_kernel(weft_op_t op, weft_dtype_t dtype)
{
    return op_known(op) && dtype_known(dtype) ? strided_kernels[dtype][op] : NULL;
}

void weft_op_finalize(weft_op_t op, weft_dtype_t dtype, void *buf, size_t count, int nranks)
{
    if (op != WEFT_AVG || !dtype_known(dtype) || !avg_kernels[dtype] || nranks <= 1 || !count) return;
    avg_kernels[dtype](buf, count, nranks);
}

/* ------------------------------------------------------------------ */
/* Conversions                                                          */
/* ------------------------------------------------------------------ */
float weft_fp16_to_float(uint16_t h)
{
    return fp16_to_f32(h);
}

uint16_t weft_float_to_fp16(float f)
{
    return f32_to_fp16(f);
}

float weft_bf16_to_float(uint16_t b)
{
    return bf16_to_f32(b);
}

uint16_t weft_float_to_bf16(float f)
{
    return f32_to_bf16(f);
}

void weft_fp16_to_float_n(float *out, const uint16_t *in, size_t count)
{
#if HAVE_F16C_PATH
    if (fp16_hw_on()) {
        fp16_to_f32_f16c(out, in, count);
        return;
    }
#endif
    size_t i = 0;
    for (; count - i >= BLOCK; i += BLOCK) {
        float *ob = out + i;
        const uint16_t *ib = in + i;
        for (size_t j = 0; j < BLOCK; j++)
            ob[j] = fp16_to_f32(ib[j]);
    }
    for (; i < count; i++)
        out[i] = fp16_to_f32(in[i]);
}

void weft_float_to_fp16_n(uint16_t *out, const float *in, size_t count)
{
#if HAVE_F16C_PATH
    if (fp16_hw_on()) {
        f32_to_fp16_f16c(out, in, count);
        return;
    }
#endif
    size_t i = 0;
    for (; count - i >= BLOCK; i += BLOCK) {
        uint16_t *ob = out + i;
        const float *ib = in + i;
        for (size_t j = 0; j < BLOCK; j++)
            ob[j] = f32_to_fp16(ib[j]);
    }
    for (; i < count; i++)
        out[i] = f32_to_fp16(in[i]);
}

WEFT_API int weft_reduce_local(const void *in, void *inout, int64_t count, weft_dtype_t dtype, weft_op_t op)
{
    uint64_t bytes;
    int rc = weft_op_check(op, dtype, "weft_reduce_local");
    if (rc) return rc;
    if (count < 0 || weft_mul_bytes((uint64_t)count, weft_dtype_size(dtype), &bytes))
        return weft_error(WEFT_ERR_ARG, "weft_reduce_local: count %lld", (long long)count);
    if (count > 0 && (!in || !inout))
        return weft_error(WEFT_ERR_ARG, "weft_reduce_local: NULL %s buffer", in ? "inout" : "in");
    if (count > 0) weft_op_reduce(op, dtype, inout, in, (size_t)count);
    return WEFT_SUCCESS;
}
