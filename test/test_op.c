/* Reduction operators (src/op.c): every op on every datatype against a
 * scalar reference, in place and out of place, aligned or not, and the
 * strided fold against the binary calls it folds; AVG's final
 * division; bad (op, dtype) pairs; float16 / bfloat16 conversions
 * (exhaustive over the 16-bit patterns, against the compiler's _Float16 and
 * an independent reference); the F16C path against the portable one; and
 * the accuracy of 16-bit sums against float64.
 *
 * Random data come from a fresh seed per run; every failure prints it, and
 * WEFT_TEST_SEED=<seed> replays the run. */
#include "op.h"
#include "weft.h"
#include "weft_internal.h"

#include <criterion/criterion.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__FLT16_MAX__)
#define HAVE_FLOAT16 1 /* GCC >= 12 on x86-64 (SSE2), clang, aarch64 */
#else
#define HAVE_FLOAT16 0
#endif

/* ------------------------------------------------------------------ */
/* Random numbers with a reported seed                                  */
/* ------------------------------------------------------------------ */
static unsigned long long seed;
static uint64_t rng;

static void seed_init(void)
{
    const char *s = getenv("WEFT_TEST_SEED");
    if (s && *s) {
        seed = strtoull(s, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = ((unsigned long long)ts.tv_sec << 24) ^ (unsigned long long)ts.tv_nsec ^
               ((unsigned long long)getpid() << 44);
    }
    rng = seed;
}

static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define SEED_FMT      " [seed %llu: WEFT_TEST_SEED=%llu replays it]"
#define SEED_ARGS     seed, seed
#define TEST_OP(name) Test(op, name, .init = seed_init, .timeout = 60)

/* ------------------------------------------------------------------ */
/* Bits of elements                                                     */
/* ------------------------------------------------------------------ */
static uint64_t get_bits(const void *buf, weft_dtype_t dt, size_t i)
{
    size_t es = weft_dtype_size(dt);
    uint64_t v = 0;
    switch (es) {
    case 1: v = ((const uint8_t *)buf)[i]; break;
    case 2: v = ((const uint16_t *)buf)[i]; break;
    case 4: v = ((const uint32_t *)buf)[i]; break;
    default: v = ((const uint64_t *)buf)[i]; break;
    }
    return v;
}

static void set_bits(void *buf, weft_dtype_t dt, size_t i, uint64_t v)
{
    switch (weft_dtype_size(dt)) {
    case 1: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case 2: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    default: ((uint64_t *)buf)[i] = v; break;
    }
}

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static double f64_of(uint64_t u)
{
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static uint64_t bits_f64(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static int is_float(weft_dtype_t dt)
{
    return dt == WEFT_FLOAT16 || dt == WEFT_BFLOAT16 || dt == WEFT_FLOAT32 || dt == WEFT_FLOAT64;
}

static int is_signed_int(weft_dtype_t dt)
{
    return dt == WEFT_INT8 || dt == WEFT_INT16 || dt == WEFT_INT32 || dt == WEFT_INT64;
}

static int nan_bits(weft_dtype_t dt, uint64_t v)
{
    switch (dt) {
    case WEFT_FLOAT16: return (v & 0x7fff) > 0x7c00;
    case WEFT_BFLOAT16: return (v & 0x7fff) > 0x7f80;
    case WEFT_FLOAT32: return (v & 0x7fffffffu) > 0x7f800000u;
    case WEFT_FLOAT64: return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default: return 0;
    }
}

/* ------------------------------------------------------------------ */
/* Independent 16-bit float reference: exact decoding with ldexp, and   */
/* rounding of a double with nearbyint (round to nearest even) on the   */
/* value scaled so that the format's quantum is 1.                      */
/* ------------------------------------------------------------------ */
typedef struct {
    int p;    /* significand bits, the implicit one included */
    int emin; /* exponent of the smallest normal */
    int emax;
    int bias;
    uint16_t inf;
} fmt16_t;
static const fmt16_t FP16 = {11, -14, 15, 15, 0x7c00};
static const fmt16_t BF16 = {8, -126, 127, 127, 0x7f80};

static double ref16_to_double(uint16_t h, const fmt16_t *f)
{
    int mbits = f->p - 1;
    int e = (h & 0x7fff) >> mbits;
    int m = h & ((1 << mbits) - 1);
    double v;
    if (e == (f->inf >> mbits))
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, f->emin - mbits);
    else
        v = ldexp(m + (1 << mbits), e - f->bias - mbits);
    return (h & 0x8000) ? -v : v;
}

/* Correctly rounded (nearest even) 16-bit value of x; NaN gives a NaN. */
static uint16_t ref16_round(double x, const fmt16_t *f)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (isnan(x)) return (uint16_t)(f->inf | (f->inf >> 1 & ~f->inf)) | sign; /* some quiet NaN */
    double ax = fabs(x);
    if (isinf(ax)) return sign | f->inf;
    if (ax == 0) return sign;
    int e = ilogb(ax);
    if (e < f->emin) e = f->emin;
    double m = nearbyint(ldexp(ax, f->p - 1 - e)); /* quantum 2^(e-p+1) scaled to 1 */
    if (m == ldexp(1, f->p)) {                     /* rounded up into the next binade */
        m /= 2;
        e++;
    }
    if (e > f->emax) return sign | f->inf;
    if (m < ldexp(1, f->p - 1)) return sign | (uint16_t)m; /* subnormal */
    return sign | (uint16_t)(((unsigned)(e + f->bias) << (f->p - 1)) | ((unsigned)m - (1u << (f->p - 1))));
}

/* bfloat16 from float by integer rounding, written out case by case. */
static uint16_t ref_bf16_int(uint32_t x)
{
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    uint32_t upper = x >> 16, lower = x & 0xffff;
    if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) upper++;
    return (uint16_t)upper;
}

#if HAVE_FLOAT16
static uint16_t f16_bits(_Float16 h)
{
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static _Float16 f16_of(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, 2);
    return h;
}
#endif

/* The value of an element as a double (exact for every datatype but
 * 64-bit integers, which the reference never converts). */
static double value_of(weft_dtype_t dt, uint64_t v)
{
    switch (dt) {
    case WEFT_FLOAT16: return ref16_to_double((uint16_t)v, &FP16);
    case WEFT_BFLOAT16: return ref16_to_double((uint16_t)v, &BF16);
    case WEFT_FLOAT32: return f32_of((uint32_t)v);
    default: return f64_of(v);
    }
}

/* ------------------------------------------------------------------ */
/* Scalar reference of a op b, on bits                                  */
/* ------------------------------------------------------------------ */
/* The documented MIN / MAX: NaN propagates (two NaNs: OR of the bits),
 * -0 < +0, otherwise the smaller / larger operand. */
static uint64_t ref_minmax(int is_max, double a, double b, uint64_t A, uint64_t B)
{
    if (isnan(a) && isnan(b)) return A | B;
    if (isnan(a)) return A;
    if (isnan(b)) return B;
    if (a == b) return is_max ? (A & B) : (A | B);
    return (is_max ? a > b : a < b) ? A : B;
}

static uint64_t ref_op(weft_op_t op, weft_dtype_t dt, uint64_t A, uint64_t B)
{
    if (!is_float(dt)) {
        int bits = (int)weft_dtype_size(dt) * 8;
        uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
        int64_t sa = (int64_t)(A << (64 - bits)) >> (64 - bits), sb = (int64_t)(B << (64 - bits)) >> (64 - bits);
        int lt = is_signed_int(dt) ? sa < sb : A < B;
        switch (op) {
        case WEFT_SUM:
        case WEFT_AVG: return (A + B) & mask;
        case WEFT_PROD: return (A * B) & mask;
        case WEFT_MIN: return lt ? A : B;
        case WEFT_MAX: return lt ? B : A;
        case WEFT_BAND: return A & B;
        case WEFT_BOR: return A | B;
        case WEFT_BXOR: return A ^ B;
        default: return 0;
        }
    }
    double a = value_of(dt, A), b = value_of(dt, B);
    if (op == WEFT_MIN || op == WEFT_MAX) return ref_minmax(op == WEFT_MAX, a, b, A, B);
    int prod = op == WEFT_PROD;
    switch (dt) {
    case WEFT_FLOAT32: {
        float x = f32_of((uint32_t)A), y = f32_of((uint32_t)B);
        return bits_f32(prod ? x * y : x + y);
    }
    case WEFT_FLOAT64: {
        double x = f64_of(A), y = f64_of(B);
        return bits_f64(prod ? x * y : x + y);
    }
    /* 16-bit: the product is exact in double; so is an fp16 sum; a bf16
     * sum is rounded to 53 bits first, which cannot change its rounding
     * to 8 bits (53 >= 2*8 + 2). So this is the correctly rounded result. */
    case WEFT_FLOAT16: return ref16_round(prod ? a * b : a + b, &FP16);
    default: return ref16_round(prod ? a * b : a + b, &BF16);
    }
}

/* NaN results of arithmetic may differ in payload; MIN / MAX are exact. */
static int same_result(weft_op_t op, weft_dtype_t dt, uint64_t got, uint64_t want)
{
    if (is_float(dt) && op != WEFT_MIN && op != WEFT_MAX && nan_bits(dt, want)) return nan_bits(dt, got);
    return got == want;
}

/* ------------------------------------------------------------------ */
/* Random data: integers are random bits; floats are a mix of random    */
/* bits, special values and moderate numbers (so sums and products stay */
/* mostly finite).                                                      */
/* ------------------------------------------------------------------ */
static uint64_t random_float_bits(weft_dtype_t dt)
{
    static const uint16_t sp16[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe37,
                                    0x7bff, 0xfbff, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00};
    static const uint16_t spbf[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc5,
                                    0x7f7f, 0xff7f, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80};
    static const uint32_t sp32[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
                                    0xffc12345, 0x7f7fffff, 0x00000001, 0x807fffff, 0x00800000, 0x3f800000};
    static const uint64_t sp64[] = {0,
                                    0x8000000000000000ull,
                                    0x7ff0000000000000ull,
                                    0xfff0000000000000ull,
                                    0x7ff8000000000000ull,
                                    0x7ff0000000000001ull,
                                    0xfff8000000abcdefull,
                                    0x7fefffffffffffffull,
                                    1,
                                    0x800fffffffffffffull,
                                    0x0010000000000000ull,
                                    0x3ff0000000000000ull};
    uint64_t r = rnd();
    int kind = (int)(r % 8);
    uint64_t sign = (r >> 8) & 1, m = r >> 20;
    int e = (int)((r >> 9) % 21) - 10; /* 2^-10 .. 2^10 */
    switch (dt) {
    case WEFT_FLOAT16:
        if (kind == 0) return m & 0xffff;
        if (kind == 1) return sp16[m % (sizeof sp16 / sizeof *sp16)];
        return sign << 15 | (uint64_t)(e + 15) << 10 | (m & 0x3ff);
    case WEFT_BFLOAT16:
        if (kind == 0) return m & 0xffff;
        if (kind == 1) return spbf[m % (sizeof spbf / sizeof *spbf)];
        return sign << 15 | (uint64_t)(e + 127) << 7 | (m & 0x7f);
    case WEFT_FLOAT32:
        if (kind == 0) return m & 0xffffffffu;
        if (kind == 1) return sp32[m % (sizeof sp32 / sizeof *sp32)];
        return sign << 31 | (uint64_t)(e + 127) << 23 | (m & 0x7fffff);
    default:
        if (kind == 0) return rnd();
        if (kind == 1) return sp64[m % (sizeof sp64 / sizeof *sp64)];
        return sign << 63 | (uint64_t)(e + 1023) << 52 | (rnd() & 0xfffffffffffffull);
    }
}

static void fill_random(weft_dtype_t dt, void *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        set_bits(buf, dt, i, is_float(dt) ? random_float_bits(dt) : rnd());
}

/* ------------------------------------------------------------------ */
/* Every op on one datatype                                             */
/* ------------------------------------------------------------------ */
#define GUARD 8
static const unsigned char GUARD_BYTE = 0xa5;

/* A buffer of n elements with GUARD guard elements on each side. */
static unsigned char *guarded(size_t n, size_t es)
{
    unsigned char *g = malloc((n + 2 * GUARD) * es);
    cr_assert(g);
    memset(g, GUARD_BYTE, (n + 2 * GUARD) * es);
    return g;
}

/* Every byte of the guarded buffer g (room for n + 1 elements) outside
 * the n elements written at element offset off is still GUARD_BYTE. */
static void check_guards(const unsigned char *g, size_t n, size_t off, size_t es, const char *what, weft_op_t op,
                         weft_dtype_t dt)
{
    size_t lo = (GUARD + off) * es, hi = (GUARD + off + n) * es, total = (n + 1 + 2 * GUARD) * es;
    for (size_t i = 0; i < total; i++) {
        if (i >= lo && i < hi) continue;
        if (g[i] != GUARD_BYTE)
            cr_assert_fail("%s %s/%s n=%zu: wrote byte %zd outside the buffer" SEED_FMT, what, weft_op_name(op),
                           weft_dtype_name(dt), n, (ssize_t)i - (ssize_t)lo, SEED_ARGS);
    }
}

static void expect(const void *got, const uint64_t *want, size_t n, weft_op_t op, weft_dtype_t dt, const char *what,
                   const void *a, const void *b)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t g = get_bits(got, dt, i);
        if (!same_result(op, dt, g, want[i]))
            cr_assert_fail("%s: %s on %s, n=%zu, element %zu: 0x%llx op 0x%llx gave 0x%llx, want 0x%llx" SEED_FMT, what,
                           weft_op_name(op), weft_dtype_name(dt), n, i, (unsigned long long)get_bits(a, dt, i),
                           (unsigned long long)get_bits(b, dt, i), (unsigned long long)g, (unsigned long long)want[i],
                           SEED_ARGS);
    }
}

static void check_combo(weft_op_t op, weft_dtype_t dt, size_t n)
{
    size_t es = weft_dtype_size(dt);
    /* inputs and the references a op b, a op a */
    unsigned char *a = malloc((n + 1) * es), *b = malloc((n + 1) * es);
    uint64_t *want = malloc((n + 1) * sizeof *want), *want_aa = malloc((n + 1) * sizeof *want_aa);
    cr_assert(a && b && want && want_aa);
    /* the large count runs the main variants only: the small ones already
     * cover whole blocks and tails in every variant */
    int all_variants = n < 100000;
    fill_random(dt, a, n);
    fill_random(dt, b, n);
    for (size_t i = 0; i < n; i++) {
        want[i] = ref_op(op, dt, get_bits(a, dt, i), get_bits(b, dt, i));
        if (all_variants) want_aa[i] = ref_op(op, dt, get_bits(a, dt, i), get_bits(a, dt, i));
    }
    /* two guarded work buffers; +1 element offsets make them misaligned */
    unsigned char *g1 = guarded(n + 1, es), *g2 = guarded(n + 1, es);
    unsigned char *w1 = g1 + GUARD * es, *w2 = g2 + GUARD * es;

    /* reduce: inout = inout op in (aligned; then inout and in misaligned) */
    memcpy(w1, a, n * es);
    weft_op_reduce(op, dt, w1, b, n);
    expect(w1, want, n, op, dt, "reduce", a, b);
    check_guards(g1, n, 0, es, "reduce", op, dt);

    if (all_variants) {
        memset(g1, GUARD_BYTE, (n + 1 + 2 * GUARD) * es);
        memcpy(w1 + es, a, n * es);
        memcpy(w2 + es, b, n * es);
        weft_op_reduce(op, dt, w1 + es, w2 + es, n);
        expect(w1 + es, want, n, op, dt, "reduce misaligned", a, b);
        check_guards(g1, n, 1, es, "reduce misaligned", op, dt);
    }

    /* reduce3 into a separate buffer (aligned, then misaligned output) */
    memset(g1, GUARD_BYTE, (n + 1 + 2 * GUARD) * es);
    weft_op_reduce3(op, dt, w1, a, b, n);
    expect(w1, want, n, op, dt, "reduce3", a, b);
    check_guards(g1, n, 0, es, "reduce3", op, dt);

    if (all_variants) {
        memset(g1, GUARD_BYTE, (n + 1 + 2 * GUARD) * es);
        weft_op_reduce3(op, dt, w1 + es, a, b, n);
        expect(w1 + es, want, n, op, dt, "reduce3 misaligned out", a, b);
        check_guards(g1, n, 1, es, "reduce3 misaligned out", op, dt);
    }

    /* reduce3 in place: out == a, out == b, out == a == b */
    memset(g1, GUARD_BYTE, (n + 1 + 2 * GUARD) * es);
    memcpy(w1, a, n * es);
    weft_op_reduce3(op, dt, w1, w1, b, n);
    expect(w1, want, n, op, dt, "reduce3 out==a", a, b);
    check_guards(g1, n, 0, es, "reduce3 out==a", op, dt);

    memset(g1, GUARD_BYTE, (n + 1 + 2 * GUARD) * es);
    memcpy(w1, b, n * es);
    weft_op_reduce3(op, dt, w1, a, w1, n);
    expect(w1, want, n, op, dt, "reduce3 out==b", a, b);
    check_guards(g1, n, 0, es, "reduce3 out==b", op, dt);

    if (all_variants) {
        memset(g1, GUARD_BYTE, (n + 1 + 2 * GUARD) * es);
        memcpy(w1, a, n * es);
        weft_op_reduce3(op, dt, w1, w1, w1, n);
        expect(w1, want_aa, n, op, dt, "reduce3 out==a==b", a, a);
        check_guards(g1, n, 0, es, "reduce3 out==a==b", op, dt);

        /* the inputs of an out-of-place call are untouched */
        unsigned char *a2 = malloc((n + 1) * es), *b2 = malloc((n + 1) * es);
        cr_assert(a2 && b2);
        memcpy(a2, a, n * es);
        memcpy(b2, b, n * es);
        weft_op_reduce3(op, dt, w1, a, b, n);
        cr_assert(memcmp(a, a2, n * es) == 0 && memcmp(b, b2, n * es) == 0, "reduce3 %s/%s wrote an input" SEED_FMT,
                  weft_op_name(op), weft_dtype_name(dt), SEED_ARGS);
        free(a2);
        free(b2);
    }

    free(g1);
    free(g2);
    free(a);
    free(b);
    free(want);
    free(want_aa);
}

/* The strided fold (shm_ll's line reduction) against the chain of binary
 * calls it replaces: the same results (a NaN sum's or product's payload
 * is the compiler's choice of operand order in both) for 1..33 sources of
 * counts around a line and the kernel blocks, never writing outside out. */
static void check_strided(weft_op_t op, weft_dtype_t dt)
{
    static const size_t counts[] = {0, 1, 7, 14, 28, 63, 64, 65, 129};
    static const int nsrcs[] = {1, 2, 3, 16, 33};
    size_t es = weft_dtype_size(dt);
    weft_op_strided_fn fold = weft_op_strided_kernel(op, dt);
    cr_assert(fold, "no strided fold for %s on %s", weft_op_name(op), weft_dtype_name(dt));
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
        for (size_t k = 0; k < sizeof nsrcs / sizeof *nsrcs; k++) {
            size_t n = counts[c], stride = (n + 3) * es; /* a gap between sources, never read */
            int nsrc = nsrcs[k];
            unsigned char *src = malloc((size_t)nsrc * stride + es), *want = malloc(n * es + es);
            unsigned char *g = guarded(n + 1, es), *out = g + GUARD * es;
            cr_assert(src && want);
            fill_random(dt, src, (size_t)nsrc * (n + 3));
            memcpy(want, src, n * es);
            if (nsrc > 1) weft_op_reduce3(op, dt, want, src, src + stride, n);
            for (int r = 2; r < nsrc; r++)
                weft_op_reduce(op, dt, want, src + (size_t)r * stride, n);
            fold(out, src, stride, nsrc, n);
            for (size_t i = 0; i < n; i++)
                if (!same_result(op, dt, get_bits(out, dt, i), get_bits(want, dt, i)))
                    cr_assert_fail("strided fold %s on %s, %d sources of %zu: element %zu is 0x%llx, the chain gave "
                                   "0x%llx" SEED_FMT,
                                   weft_op_name(op), weft_dtype_name(dt), nsrc, n, i,
                                   (unsigned long long)get_bits(out, dt, i), (unsigned long long)get_bits(want, dt, i),
                                   SEED_ARGS);
            check_guards(g, n, 0, es, "strided fold", op, dt);
            free(src);
            free(want);
            free(g);
        }
}

static int expect_valid(weft_op_t op, weft_dtype_t dt)
{
    if (dt == WEFT_BYTE) return op == WEFT_BAND || op == WEFT_BOR || op == WEFT_BXOR;
    if (is_float(dt)) return op != WEFT_BAND && op != WEFT_BOR && op != WEFT_BXOR;
    return 1;
}

static void check_dtype(weft_dtype_t dt)
{
    /* 0, 1, odd, around the kernels' 64-element blocks, and a large prime */
    static const size_t counts[] = {0, 1, 7, 63, 64, 65, 129, 1000003};
    for (int op = 0; op < WEFT_OP_COUNT; op++) {
        int valid = weft_op_check((weft_op_t)op, dt, "test") == WEFT_SUCCESS;
        cr_assert_eq(valid, expect_valid((weft_op_t)op, dt), "validity of %s on %s", weft_op_name((weft_op_t)op),
                     weft_dtype_name(dt));
        if (!valid) continue;
        /* count 0 touches nothing, not even NULL pointers */
        weft_op_reduce((weft_op_t)op, dt, NULL, NULL, 0);
        weft_op_reduce3((weft_op_t)op, dt, NULL, NULL, NULL, 0);
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
            check_combo((weft_op_t)op, dt, counts[c]);
        check_strided((weft_op_t)op, dt);
    }
}

TEST_OP(reduce_int8)
{
    check_dtype(WEFT_INT8);
}
TEST_OP(reduce_uint8)
{
    check_dtype(WEFT_UINT8);
}
TEST_OP(reduce_int16)
{
    check_dtype(WEFT_INT16);
}
TEST_OP(reduce_uint16)
{
    check_dtype(WEFT_UINT16);
}
TEST_OP(reduce_int32)
{
    check_dtype(WEFT_INT32);
}
TEST_OP(reduce_uint32)
{
    check_dtype(WEFT_UINT32);
}
TEST_OP(reduce_int64)
{
    check_dtype(WEFT_INT64);
}
TEST_OP(reduce_uint64)
{
    check_dtype(WEFT_UINT64);
}
TEST_OP(reduce_bfloat16)
{
    check_dtype(WEFT_BFLOAT16);
}
TEST_OP(reduce_float32)
{
    check_dtype(WEFT_FLOAT32);
}
TEST_OP(reduce_float64)
{
    check_dtype(WEFT_FLOAT64);
}
TEST_OP(reduce_byte)
{
    check_dtype(WEFT_BYTE);
}

/* float16 on both code paths (F16C where the CPU has it, and portable). */
TEST_OP(reduce_float16)
{
    int hw = weft_op_fp16_hw(1);
    check_dtype(WEFT_FLOAT16);
    if (hw) {
        cr_assert_eq(weft_op_fp16_hw(0), 0);
        check_dtype(WEFT_FLOAT16);
        weft_op_fp16_hw(1);
    } else {
        cr_log_info("no F16C + AVX2 on this CPU: only the portable float16 path was tested");
    }
}

/* Semantics spelled out on special values, in both operand orders. */
TEST_OP(minmax_nan_and_signed_zero)
{
    const uint32_t qnan = 0x7fc00001, snan = 0x7f800002, nnan = 0xffc00004;
    const uint32_t pz = 0x00000000, nz = 0x80000000, one = 0x3f800000, ninf = 0xff800000;
    struct {
        uint32_t a, b, min, max;
    } cases[] = {
        {qnan, one, qnan, qnan},  {snan, one, snan, snan},
        {one, nnan, nnan, nnan},  {qnan, nnan, qnan | nnan, qnan | nnan},
        {pz, nz, nz, pz},         {nz, nz, nz, nz},
        {pz, pz, pz, pz},         {ninf, one, ninf, one},
        {qnan, ninf, qnan, qnan},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        for (int swap = 0; swap < 2; swap++) {
            uint32_t a = swap ? cases[i].b : cases[i].a, b = swap ? cases[i].a : cases[i].b, r;
            weft_op_reduce3(WEFT_MIN, WEFT_FLOAT32, &r, &a, &b, 1);
            cr_assert_eq(r, cases[i].min, "min(0x%x, 0x%x) = 0x%x, want 0x%x", a, b, r, cases[i].min);
            weft_op_reduce3(WEFT_MAX, WEFT_FLOAT32, &r, &a, &b, 1);
            cr_assert_eq(r, cases[i].max, "max(0x%x, 0x%x) = 0x%x, want 0x%x", a, b, r, cases[i].max);
            /* the same through float64, float16 and bfloat16 encodings */
            uint64_t a64 = bits_f64(f32_of(a)), b64 = bits_f64(f32_of(b)), r64;
            if (!nan_bits(WEFT_FLOAT32, a) && !nan_bits(WEFT_FLOAT32, b)) {
                weft_op_reduce3(WEFT_MIN, WEFT_FLOAT64, &r64, &a64, &b64, 1);
                cr_assert_eq(r64, bits_f64(f32_of(cases[i].min)));
                weft_op_reduce3(WEFT_MAX, WEFT_FLOAT64, &r64, &a64, &b64, 1);
                cr_assert_eq(r64, bits_f64(f32_of(cases[i].max)));
            }
            uint16_t a16 = (uint16_t)(a >> 16), b16 = (uint16_t)(b >> 16), r16;
            if ((a & 0xffff) == 0 && (b & 0xffff) == 0) { /* exact as bfloat16 */
                weft_op_reduce3(WEFT_MIN, WEFT_BFLOAT16, &r16, &a16, &b16, 1);
                cr_assert_eq(r16, cases[i].min >> 16);
                weft_op_reduce3(WEFT_MAX, WEFT_BFLOAT16, &r16, &a16, &b16, 1);
                cr_assert_eq(r16, cases[i].max >> 16);
            }
        }
    }
    /* commutative bit for bit on random data, every float type */
    static const weft_dtype_t fl[] = {WEFT_FLOAT16, WEFT_BFLOAT16, WEFT_FLOAT32, WEFT_FLOAT64};
    enum { N = 4099 };
    static uint64_t x[N], y[N], r1[N], r2[N];
    for (int t = 0; t < 4; t++) {
        fill_random(fl[t], x, N);
        fill_random(fl[t], y, N);
        for (int op = WEFT_MIN; op <= WEFT_MAX; op++) {
            weft_op_reduce3((weft_op_t)op, fl[t], r1, x, y, N);
            weft_op_reduce3((weft_op_t)op, fl[t], r2, y, x, N);
            cr_assert(memcmp(r1, r2, N * weft_dtype_size(fl[t])) == 0, "%s on %s is not commutative" SEED_FMT,
                      weft_op_name((weft_op_t)op), weft_dtype_name(fl[t]), SEED_ARGS);
        }
    }
}

/* ------------------------------------------------------------------ */
/* Invalid (op, dtype) and names                                        */
/* ------------------------------------------------------------------ */
static void expect_bad(weft_op_t op, weft_dtype_t dt, const char *must1, const char *must2)
{
    cr_assert_eq(weft_op_check(op, dt, "weft_allreduce"), WEFT_ERR_ARG, "op %d dtype %d accepted", (int)op, (int)dt);
    const char *msg = weft_last_error();
    cr_assert(strstr(msg, "weft_allreduce"), "message without the function: %s", msg);
    cr_assert(strstr(msg, must1), "message without '%s': %s", must1, msg);
    cr_assert(strstr(msg, must2), "message without '%s': %s", must2, msg);
    /* the kernels do nothing for it */
    uint64_t io[4] = {1, 2, 3, 4}, in[4] = {5, 6, 7, 8};
    weft_op_reduce(op, dt, io, in, 4);
    weft_op_reduce3(op, dt, io, in, in, 4);
    cr_assert(io[0] == 1 && io[1] == 2 && io[2] == 3 && io[3] == 4);
    cr_assert_null(weft_op_strided_kernel(op, dt), "a strided fold for op %d dtype %d", (int)op, (int)dt);
}

TEST_OP(invalid_combinations)
{
    static const weft_dtype_t fl[] = {WEFT_FLOAT16, WEFT_BFLOAT16, WEFT_FLOAT32, WEFT_FLOAT64};
    static const weft_op_t bitwise[] = {WEFT_BAND, WEFT_BOR, WEFT_BXOR};
    for (int t = 0; t < 4; t++)
        for (int o = 0; o < 3; o++)
            expect_bad(bitwise[o], fl[t], weft_op_name(bitwise[o]), weft_dtype_name(fl[t]));
    static const weft_op_t arith[] = {WEFT_SUM, WEFT_PROD, WEFT_MIN, WEFT_MAX, WEFT_AVG};
    for (int o = 0; o < 5; o++)
        expect_bad(arith[o], WEFT_BYTE, weft_op_name(arith[o]), "byte");
    for (int o = 0; o < 3; o++)
        cr_assert_eq(weft_op_check(bitwise[o], WEFT_BYTE, "t"), WEFT_SUCCESS);

    expect_bad((weft_op_t)8, WEFT_FLOAT32, "unknown op 8", "float32");
    expect_bad((weft_op_t)-1, WEFT_INT32, "unknown op -1", "int32");
    expect_bad((weft_op_t)1000, WEFT_INT32, "unknown op 1000", "int32");
    expect_bad(WEFT_SUM, (weft_dtype_t)13, "unknown dtype 13", "sum");
    expect_bad(WEFT_MAX, (weft_dtype_t)-1, "unknown dtype -1", "max");
    expect_bad(WEFT_BXOR, (weft_dtype_t)77, "unknown dtype 77", "bxor");
    /* no fn given: still a message */
    cr_assert_eq(weft_op_check(WEFT_BXOR, WEFT_FLOAT32, NULL), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "bxor") && strstr(weft_last_error(), "float32"));
}

TEST_OP(op_names)
{
    static const char *const names[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
    cr_assert_eq(WEFT_OP_COUNT, 8);
    cr_assert_eq(WEFT_SUM, 0);
    cr_assert_eq(WEFT_AVG, 4);
    cr_assert_eq(WEFT_BXOR, 7);
    for (int op = 0; op < WEFT_OP_COUNT; op++)
        cr_assert_str_eq(weft_op_name((weft_op_t)op), names[op]);
    cr_assert_str_eq(weft_op_name(WEFT_OP_COUNT), "unknown");
    cr_assert_str_eq(weft_op_name((weft_op_t)-1), "unknown");
}

/* ------------------------------------------------------------------ */
/* AVG                                                                  */
/* ------------------------------------------------------------------ */
/* around the kernels' switch from float32 to double division (float16 at
 * 2^13, bfloat16 at 2^16, float32 at 2^24), and 8195, the first count at
 * which float32 division would round a float16 average wrongly */
static const int avg_ns[] = {
    2,    3,    5,     7,     10,    127,   128,    1000,    4097,          8191,          8192,
    8193, 8195, 12345, 65535, 65536, 65537, 100003, 1 << 24, (1 << 24) + 1, (1 << 29) + 3, INT_MAX};
#define N_AVG_NS (sizeof avg_ns / sizeof *avg_ns)

static int64_t int_value(weft_dtype_t dt, uint64_t v)
{
    int bits = (int)weft_dtype_size(dt) * 8;
    if (is_signed_int(dt)) return (int64_t)(v << (64 - bits)) >> (64 - bits);
    return (int64_t)v; /* unsigned below 64 bits; uint64 handled apart */
}

static void check_int_avg(weft_dtype_t dt, const void *in, size_t n)
{
    size_t es = weft_dtype_size(dt);
    void *buf = malloc(n * es);
    cr_assert(buf);
    for (size_t k = 0; k < N_AVG_NS; k++) {
        int nr = avg_ns[k];
        memcpy(buf, in, n * es);
        weft_op_finalize(WEFT_AVG, dt, buf, n, nr);
        for (size_t i = 0; i < n; i++) {
            uint64_t x = get_bits(in, dt, i), got = get_bits(buf, dt, i), want;
            if (dt == WEFT_UINT64)
                want = x / (uint64_t)nr;
            else
                want = (uint64_t)(int_value(dt, x) / nr); /* C division truncates toward zero */
            want &= es == 8 ? ~0ull : (1ull << (es * 8)) - 1;
            if (got != want)
                cr_assert_fail("avg %s: 0x%llx / %d gave 0x%llx, want 0x%llx" SEED_FMT, weft_dtype_name(dt),
                               (unsigned long long)x, nr, (unsigned long long)got, (unsigned long long)want, SEED_ARGS);
        }
    }
    free(buf);
}

TEST_OP(avg_integers)
{
    /* 8 and 16 bits: every value */
    static uint16_t all[65536];
    for (int i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    check_int_avg(WEFT_UINT16, all, 65536);
    check_int_avg(WEFT_INT16, all, 65536);
    static uint8_t all8[256];
    for (int i = 0; i < 256; i++)
        all8[i] = (uint8_t)i;
    check_int_avg(WEFT_UINT8, all8, 256);
    check_int_avg(WEFT_INT8, all8, 256);
    /* 32 and 64 bits: extremes, small values, random bits */
    enum { N = 20000 };
    static uint64_t r[N];
    static const uint64_t edge[] = {0,
                                    1,
                                    2,
                                    3,
                                    5,
                                    7,
                                    ~0ull,
                                    ~0ull - 1,
                                    ~0ull - 6,
                                    0x7fffffff,
                                    0x80000000,
                                    0x80000001,
                                    0xffffffff,
                                    0x7fffffffffffffffull,
                                    0x8000000000000000ull,
                                    0x8000000000000001ull};
    static const weft_dtype_t wide[] = {WEFT_INT32, WEFT_UINT32, WEFT_INT64, WEFT_UINT64};
    for (int t = 0; t < 4; t++) {
        for (size_t i = 0; i < N; i++) {
            uint64_t v = i < sizeof edge / sizeof *edge ? edge[i] : rnd();
            if (i % 3 == 1) v = (uint64_t)((int64_t)(v % 2001) - 1000); /* small, half negative */
            set_bits(r, wide[t], i, v);
        }
        check_int_avg(wide[t], r, N);
    }
    /* spelled out: truncation toward zero, not floor */
    int32_t v[] = {-7, 7, -1, -8, INT32_MIN, INT32_MAX, -6};
    weft_op_finalize(WEFT_AVG, WEFT_INT32, v, 7, 2);
    int32_t want[] = {-3, 3, 0, -4, INT32_MIN / 2, INT32_MAX / 2, -3};
    for (int i = 0; i < 7; i++)
        cr_assert_eq(v[i], want[i], "element %d: %d, want %d", i, v[i], want[i]);
    int8_t w[] = {-128, -127, 127, -3};
    weft_op_finalize(WEFT_AVG, WEFT_INT8, w, 4, 3);
    cr_assert(w[0] == -42 && w[1] == -42 && w[2] == 42 && w[3] == -1);
}

/* The correctly rounded 16-bit x / n: the double quotient is rounded once
 * more, harmlessly: x / n lies at least 2^(f-1)/n from any 16-bit rounding
 * boundary (2^f the result's quantum) unless it is one, and the double's
 * error is below 2^(f-41) < 2^(f-1)/n for n < 2^31. */
static void check_avg16(weft_dtype_t dt, const fmt16_t *f)
{
    static uint16_t in[65536], buf[65536];
    for (int i = 0; i < 65536; i++)
        in[i] = (uint16_t)i;
    for (size_t k = 0; k < N_AVG_NS; k++) {
        int nr = avg_ns[k];
        memcpy(buf, in, sizeof in);
        weft_op_finalize(WEFT_AVG, dt, buf, 65536, nr);
        for (int i = 0; i < 65536; i++) {
            uint16_t want = ref16_round(ref16_to_double(in[i], f) / nr, f);
            int ok = nan_bits(dt, want) ? nan_bits(dt, buf[i]) : buf[i] == want;
            if (!ok)
                cr_assert_fail("avg %s: 0x%04x / %d gave 0x%04x, want 0x%04x", weft_dtype_name(dt), in[i], nr, buf[i],
                               want);
        }
    }
}

TEST_OP(avg_float16)
{
    check_avg16(WEFT_FLOAT16, &FP16);
}
TEST_OP(avg_bfloat16)
{
    check_avg16(WEFT_BFLOAT16, &BF16);
}

TEST_OP(avg_float32_float64)
{
    enum { N = 50000 };
    static float x[N], y[N];
    static double dx[N], dy[N];
    for (size_t i = 0; i < N; i++) {
        x[i] = f32_of((uint32_t)random_float_bits(WEFT_FLOAT32));
        dx[i] = f64_of(random_float_bits(WEFT_FLOAT64));
    }
    for (size_t k = 0; k < N_AVG_NS; k++) {
        int nr = avg_ns[k];
        memcpy(y, x, sizeof x);
        memcpy(dy, dx, sizeof dx);
        weft_op_finalize(WEFT_AVG, WEFT_FLOAT32, y, N, nr);
        weft_op_finalize(WEFT_AVG, WEFT_FLOAT64, dy, N, nr);
        for (size_t i = 0; i < N; i++) {
#if LDBL_MANT_DIG >= 64
            /* 64-bit long double: rounding it again to 24 bits is harmless
             * for n < 2^39 (the argument of check_avg16) */
            float want = (float)((long double)x[i] / nr);
#else
            float want = (float)((double)x[i] / nr); /* harmless for n < 2^29 */
            if (nr >= (1 << 29)) continue;
#endif
            int ok = isnan(want) ? isnan(y[i]) : bits_f32(y[i]) == bits_f32(want);
            if (!ok) cr_assert_fail("avg float32: %a / %d gave %a, want %a" SEED_FMT, x[i], nr, y[i], want, SEED_ARGS);
            double dwant = dx[i] / nr; /* an IEEE division is correctly rounded */
            ok = isnan(dwant) ? isnan(dy[i]) : bits_f64(dy[i]) == bits_f64(dwant);
            if (!ok)
                cr_assert_fail("avg float64: %a / %d gave %a, want %a" SEED_FMT, dx[i], nr, dy[i], dwant, SEED_ARGS);
        }
    }
}

TEST_OP(avg_end_to_end_and_other_ops_untouched)
{
    /* three ranks' int32 contributions, AVG = SUM then divide */
    int32_t r0[] = {-5, 10, -1, 7}, r1[] = {-5, -20, 0, 7}, r2[] = {1, 4, 0, -8};
    int32_t acc[4];
    memcpy(acc, r0, sizeof acc);
    weft_op_reduce(WEFT_AVG, WEFT_INT32, acc, r1, 4);
    weft_op_reduce(WEFT_AVG, WEFT_INT32, acc, r2, 4);
    weft_op_finalize(WEFT_AVG, WEFT_INT32, acc, 4, 3);
    cr_assert(acc[0] == -3 && acc[1] == -2 && acc[2] == 0 && acc[3] == 2, "%d %d %d %d", acc[0], acc[1], acc[2],
              acc[3]);
    /* float32: (0.1 + 0.2 + 0.3) / 3 with one rounding for the division */
    float f0[] = {0.1f}, f1[] = {0.2f}, f2[] = {0.3f}, fa[1];
    weft_op_reduce3(WEFT_AVG, WEFT_FLOAT32, fa, f0, f1, 1);
    weft_op_reduce(WEFT_AVG, WEFT_FLOAT32, fa, f2, 1);
    float sum = (0.1f + 0.2f) + 0.3f;
    weft_op_finalize(WEFT_AVG, WEFT_FLOAT32, fa, 1, 3);
    cr_assert_eq(bits_f32(fa[0]), bits_f32(sum / 3.0f));
    /* every other op, and nranks <= 1, leaves the buffer alone */
    for (int op = 0; op < WEFT_OP_COUNT; op++) {
        int32_t v[] = {9, -9, 5};
        weft_op_finalize((weft_op_t)op, WEFT_INT32, v, 3, op == WEFT_AVG ? 1 : 3);
        cr_assert(v[0] == 9 && v[1] == -9 && v[2] == 5, "%s changed the buffer", weft_op_name((weft_op_t)op));
    }
    float nan1[] = {NAN};
    weft_op_finalize(WEFT_AVG, WEFT_FLOAT32, nan1, 1, 0);
    weft_op_finalize(WEFT_AVG, WEFT_FLOAT32, nan1, 1, -4);
    weft_op_finalize(WEFT_AVG, WEFT_FLOAT32, NULL, 0, 3);
    weft_op_finalize(WEFT_AVG, (weft_dtype_t)99, nan1, 1, 3);
    cr_assert(isnan(nan1[0]));
    /* specials through the division */
    float s[] = {INFINITY, -INFINITY, -0.0f, NAN, 0x1p-149f};
    weft_op_finalize(WEFT_AVG, WEFT_FLOAT32, s, 5, 7);
    cr_assert(isinf(s[0]) && s[0] > 0 && isinf(s[1]) && s[1] < 0);
    cr_assert(s[2] == 0 && signbit(s[2]) && isnan(s[3]) && s[4] == 0 && !signbit(s[4]));
}

/* ------------------------------------------------------------------ */
/* Conversions                                                          */
/* ------------------------------------------------------------------ */
TEST_OP(fp16_all_patterns_round_trip)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = weft_fp16_to_float(h);
        uint16_t back = weft_float_to_fp16(f);
        if (nan_bits(WEFT_FLOAT16, h)) {
            /* quiet NaN, sign and payload kept (a signaling one is quieted) */
            cr_assert(isnan(f), "0x%04x", h);
            cr_assert_eq(bits_f32(f), (uint32_t)(h & 0x8000) << 16 | 0x7fc00000u | (uint32_t)(h & 0x3ff) << 13,
                         "0x%04x -> 0x%08x", h, bits_f32(f));
            cr_assert_eq(back, h | 0x0200, "0x%04x -> 0x%04x", h, back);
        } else {
            cr_assert_eq(back, h, "0x%04x -> %a -> 0x%04x", h, f, back);
            double want = ref16_to_double(h, &FP16);
            cr_assert((double)f == want && !signbit(f) == !signbit(want), "0x%04x -> %a, want %a", h, f, want);
        }
#if HAVE_FLOAT16
        cr_assert_eq(bits_f32(f), bits_f32((float)f16_of(h)), "0x%04x: %a, _Float16 gives %a", h, f, (float)f16_of(h));
#endif
    }
}

TEST_OP(bf16_all_patterns_round_trip)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t b = (uint16_t)i;
        float f = weft_bf16_to_float(b);
        uint16_t back = weft_float_to_bf16(f);
        cr_assert_eq(bits_f32(f), (uint32_t)b << 16, "0x%04x", b);
        if (nan_bits(WEFT_BFLOAT16, b)) {
            cr_assert(isnan(f));
            cr_assert_eq(back, b | 0x0040, "0x%04x -> 0x%04x", b, back);
        } else {
            cr_assert_eq(back, b, "0x%04x -> %a -> 0x%04x", b, f, back);
            cr_assert((double)f == ref16_to_double(b, &BF16));
        }
    }
}

/* float -> float16 on crafted values (expected bits worked out by hand). */
TEST_OP(fp16_rounding_crafted)
{
    static const struct {
        uint32_t f;
        uint16_t h;
        const char *what;
    } cases[] = {
        {0x3f800000, 0x3c00, "1.0"},
        {0x3f801000, 0x3c00, "1 + 2^-11: tie, to even (down)"},
        {0x3f803000, 0x3c02, "1 + 3*2^-11: tie, to even (up)"},
        {0x3f801001, 0x3c01, "just above a tie"},
        {0x3f800fff, 0x3c00, "just below a tie"},
        {0xbfc00000, 0xbe00, "-1.5"},
        {0x477fe000, 0x7bff, "65504, largest finite"},
        {0x477fefff, 0x7bff, "just below 65520"},
        {0x477ff000, 0x7c00, "65520: tie between 65504 and 2^16, to even: overflow to Inf"},
        {0xc77ff000, 0xfc00, "-65520 to -Inf"},
        {0x47800000, 0x7c00, "65536"},
        {0x501502f9, 0x7c00, "1e10"},
        {0x7f7fffff, 0x7c00, "FLT_MAX"},
        {0x7f800000, 0x7c00, "Inf"},
        {0xff800000, 0xfc00, "-Inf"},
        {0x38800000, 0x0400, "2^-14, smallest normal"},
        {0x387fc000, 0x03ff, "largest subnormal"},
        {0x387fe000, 0x0400, "tie between the largest subnormal and 2^-14, to even (up)"},
        {0x33800000, 0x0001, "2^-24, smallest subnormal"},
        {0x33000000, 0x0000, "2^-25: tie between 0 and 2^-24, to even (0)"},
        {0x33000001, 0x0001, "just above 2^-25"},
        {0xb3000000, 0x8000, "-2^-25 to -0"},
        {0x33c00000, 0x0002, "3*2^-25: tie, to even (2)"},
        {0x34200000, 0x0002, "5*2^-25: tie, to even (2)"},
        {0x34300000, 0x0003, "5.5*2^-25"},
        {0x00000000, 0x0000, "+0"},
        {0x80000000, 0x8000, "-0"},
        {0x00000001, 0x0000, "smallest float subnormal"},
        {0x807fffff, 0x8000, "largest negative float subnormal"},
        {0x7fc00000, 0x7e00, "quiet NaN"},
        {0xffc00000, 0xfe00, "negative quiet NaN"},
        {0x7f800001, 0x7e00, "signaling NaN, payload below fp16's bits: quieted"},
        {0x7fbfe000, 0x7fff, "signaling NaN with a payload: quieted, payload kept"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = weft_float_to_fp16(f32_of(cases[i].f));
        cr_assert_eq(got, cases[i].h, "%s (0x%08x): 0x%04x, want 0x%04x", cases[i].what, cases[i].f, got, cases[i].h);
        uint16_t got_n;
        float in = f32_of(cases[i].f);
        for (int hw = 0; hw < 2; hw++) {
            weft_op_fp16_hw(hw);
            weft_float_to_fp16_n(&got_n, &in, 1);
            cr_assert_eq(got_n, cases[i].h, "%s, array conversion (F16C %d): 0x%04x", cases[i].what, hw, got_n);
        }
        if (!nan_bits(WEFT_FLOAT32, cases[i].f))
            cr_assert_eq(ref16_round(f32_of(cases[i].f), &FP16), cases[i].h, "reference: %s", cases[i].what);
#if HAVE_FLOAT16
        cr_assert_eq(f16_bits((_Float16)f32_of(cases[i].f)), cases[i].h, "_Float16: %s", cases[i].what);
#endif
    }
}

TEST_OP(bf16_rounding_crafted)
{
    static const struct {
        uint32_t f;
        uint16_t b;
        const char *what;
    } cases[] = {
        {0x3f800000, 0x3f80, "1.0"},
        {0x3f808000, 0x3f80, "tie, to even (down)"},
        {0x3f818000, 0x3f82, "tie, to even (up)"},
        {0x3f808001, 0x3f81, "just above a tie"},
        {0x3f807fff, 0x3f80, "just below a tie"},
        {0x7f7f7fff, 0x7f7f, "just below the tie above the largest finite"},
        {0x7f7f8000, 0x7f80, "tie above the largest finite, to even: Inf"},
        {0x7f7fffff, 0x7f80, "FLT_MAX to Inf"},
        {0xff7fffff, 0xff80, "-FLT_MAX to -Inf"},
        {0x00008000, 0x0000, "subnormal tie, to even (0)"},
        {0x00018000, 0x0002, "subnormal tie, to even (up)"},
        {0x00008001, 0x0001, "just above a subnormal tie"},
        {0x007fffff, 0x0080, "largest float subnormal rounds to the smallest normal"},
        {0x00000001, 0x0000, "smallest float subnormal"},
        {0x80000000, 0x8000, "-0"},
        {0x7f800000, 0x7f80, "Inf"},
        {0x7f800001, 0x7fc0, "signaling NaN, low payload: quieted"},
        {0xff810000, 0xffc1, "negative signaling NaN: quieted, payload kept"},
        {0x7fc00000, 0x7fc0, "quiet NaN"},
        {0x7fffffff, 0x7fff, "NaN with all payload bits: never rounds into the sign"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = weft_float_to_bf16(f32_of(cases[i].f));
        cr_assert_eq(got, cases[i].b, "%s (0x%08x): 0x%04x, want 0x%04x", cases[i].what, cases[i].f, got, cases[i].b);
        cr_assert_eq(ref_bf16_int(cases[i].f), cases[i].b, "integer reference: %s", cases[i].what);
    }
}

/* Many floats, concentrated where rounding happens: every exponent, with
 * the bits below the 16-bit format's last one just under, at and above
 * half, and random bits. */
static uint32_t boundary_float(uint64_t r, int dropped_bits)
{
    uint32_t sign = (uint32_t)(r & 1) << 31, e = (uint32_t)(r >> 1) & 0xff;
    uint32_t half = 1u << (dropped_bits - 1), low;
    switch ((r >> 9) % 6) {
    case 0: low = half - 1; break;
    case 1: low = half; break;
    case 2: low = half + 1; break;
    case 3: low = 0; break;
    default: low = (uint32_t)(r >> 32) & ((1u << dropped_bits) - 1); break;
    }
    uint32_t kept = (uint32_t)(r >> 12) & ((1u << (23 - dropped_bits)) - 1);
    return sign | e << 23 | kept << dropped_bits | low;
}

TEST_OP(fp16_from_float_many)
{
    enum { N = 1 << 21 };
    float *in = malloc(N * sizeof *in);
    uint16_t *sw = malloc(N * sizeof *sw), *hw = malloc(N * sizeof *hw);
    cr_assert(in && sw && hw);
    for (size_t i = 0; i < N; i++) {
        uint64_t r = rnd();
        uint32_t x;
        if (i % 4 == 0)
            x = (uint32_t)r;
        else if (i % 4 == 1) /* exponents around fp16's range: 2^-26 .. 2^17 */
            x = (uint32_t)(r & 0x807fffff) | (uint32_t)(101 + (r >> 40) % 43) << 23;
        else
            x = boundary_float(r, 13);
        /* fp16's subnormal range cuts more bits: ties there too */
        if (i % 16 == 7) {
            int e = 102 + (int)((r >> 50) % 11); /* 2^-25 .. 2^-15 */
            int drop = 13 + (113 - e);
            if (drop > 23) drop = 23;
            x = (x & 0x80000000u) | (uint32_t)e << 23 | (boundary_float(r, drop) & 0x7fffff);
        }
        in[i] = f32_of(x);
    }
    for (size_t i = 0; i < N; i++) {
        uint32_t x = bits_f32(in[i]);
        sw[i] = weft_float_to_fp16(in[i]);
        if (nan_bits(WEFT_FLOAT32, x)) {
            cr_assert_eq(sw[i], (uint16_t)((x >> 16 & 0x8000) | 0x7e00 | (x >> 13 & 0x3ff)), "NaN 0x%08x" SEED_FMT, x,
                         SEED_ARGS);
        } else {
            uint16_t want = ref16_round(in[i], &FP16);
            if (sw[i] != want)
                cr_assert_fail("0x%08x (%a) -> 0x%04x, want 0x%04x" SEED_FMT, x, in[i], sw[i], want, SEED_ARGS);
        }
#if HAVE_FLOAT16
        uint16_t c = f16_bits((_Float16)in[i]);
        if (sw[i] != c)
            cr_assert_fail("0x%08x (%a) -> 0x%04x, _Float16 gives 0x%04x" SEED_FMT, x, in[i], sw[i], c, SEED_ARGS);
#endif
    }
    /* the array conversion, portable and F16C, gives the same bits */
    for (int mode = 0; mode < 2; mode++) {
        int on = weft_op_fp16_hw(mode);
        memset(hw, 0, N * sizeof *hw);
        weft_float_to_fp16_n(hw, in, N);
        for (size_t i = 0; i < N; i++)
            if (hw[i] != sw[i])
                cr_assert_fail("array conversion (F16C %d) of 0x%08x: 0x%04x, scalar 0x%04x" SEED_FMT, on,
                               bits_f32(in[i]), hw[i], sw[i], SEED_ARGS);
        /* and every tail length */
        for (size_t n = 0; n < 20; n++) {
            memset(hw, 0, 32 * sizeof *hw);
            weft_float_to_fp16_n(hw, in + 3, n);
            for (size_t i = 0; i < 32; i++)
                cr_assert_eq(hw[i], i < n ? sw[i + 3] : 0);
        }
    }
    /* float16 -> float arrays: every pattern, both paths */
    static uint16_t all[65536];
    static float f[65536];
    for (int i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    for (int mode = 0; mode < 2; mode++) {
        int on = weft_op_fp16_hw(mode);
        weft_fp16_to_float_n(f, all, 65536);
        for (int i = 0; i < 65536; i++)
            cr_assert_eq(bits_f32(f[i]), bits_f32(weft_fp16_to_float(all[i])), "F16C %d: 0x%04x", on, all[i]);
    }
    free(in);
    free(sw);
    free(hw);
}

TEST_OP(bf16_from_float_many)
{
    enum { N = 1 << 21 };
    for (size_t i = 0; i < N; i++) {
        uint64_t r = rnd();
        uint32_t x = i % 2 ? (uint32_t)r : boundary_float(r, 16);
        uint16_t got = weft_float_to_bf16(f32_of(x)), want = ref_bf16_int(x);
        if (got != want) cr_assert_fail("0x%08x -> 0x%04x, want 0x%04x" SEED_FMT, x, got, want, SEED_ARGS);
        if (!nan_bits(WEFT_FLOAT32, x) && ref16_round(f32_of(x), &BF16) != want)
            cr_assert_fail("references disagree on 0x%08x" SEED_FMT, x, SEED_ARGS);
    }
}

/* ------------------------------------------------------------------ */
/* F16C and portable float16 kernels: the same bits                     */
/* ------------------------------------------------------------------ */
TEST_OP(fp16_kernels_hw_equals_portable)
{
    if (!weft_op_fp16_hw(1)) {
        cr_log_info("no F16C + AVX2 on this CPU: nothing to compare");
        return;
    }
    enum { N = 1000003 };
    uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *hw = malloc(N * 2), *sw = malloc(N * 2);
    cr_assert(a && b && hw && sw);
    for (size_t i = 0; i < N; i++) {
        a[i] = (uint16_t)(i % 3 ? rnd() : random_float_bits(WEFT_FLOAT16));
        b[i] = (uint16_t)(i % 5 ? rnd() : random_float_bits(WEFT_FLOAT16));
    }
    static const weft_op_t ops[] = {WEFT_SUM, WEFT_PROD, WEFT_MIN, WEFT_MAX, WEFT_AVG};
    for (int o = 0; o < 5; o++) {
        for (size_t c = 0; c < 41; c++) {
            size_t n = c < 40 ? c + 1 : N; /* every tail length, then a large prime */
            weft_op_fp16_hw(1);
            weft_op_reduce3(ops[o], WEFT_FLOAT16, hw, a, b, n);
            weft_op_fp16_hw(0);
            weft_op_reduce3(ops[o], WEFT_FLOAT16, sw, a, b, n);
            for (size_t i = 0; i < n; i++) {
                /* two NaN operands: the hardware returns one of them, which
                 * one is not specified (op.h); still a NaN on both paths */
                if (nan_bits(WEFT_FLOAT16, a[i]) && nan_bits(WEFT_FLOAT16, b[i]) && ops[o] != WEFT_MIN &&
                    ops[o] != WEFT_MAX && nan_bits(WEFT_FLOAT16, hw[i]) && nan_bits(WEFT_FLOAT16, sw[i]))
                    continue;
                if (hw[i] != sw[i])
                    cr_assert_fail("%s n=%zu: 0x%04x op 0x%04x: F16C 0x%04x, portable 0x%04x" SEED_FMT,
                                   weft_op_name(ops[o]), n, a[i], b[i], hw[i], sw[i], SEED_ARGS);
            }
        }
    }
    weft_op_fp16_hw(1);
    free(a);
    free(b);
    free(hw);
    free(sw);
}

/* ------------------------------------------------------------------ */
/* Accuracy of 16-bit sums against float64                              */
/* ------------------------------------------------------------------ */
/* Each 16-bit addition is the correctly rounded sum (computed in float32,
 * 24 >= 2p + 2 bits), so it has relative error at most u = 2^-p: 2^-11
 * for float16, 2^-8 for bfloat16 (no underflow error: sums of subnormals
 * are exact). Summing k exact 16-bit inputs x_i:
 *   - one after another (a ring), k - 1 additions:
 *       |sum - s| <= gamma(k - 1) * sum |x_i|,
 *   - as a binary tree (recursive doubling), depth d = ceil(log2 k):
 *       |sum - s| <= gamma(d) * sum |x_i|,
 * with gamma(m) = m u / (1 - m u) (Higham, Accuracy and Stability of
 * Numerical Algorithms, 4.2 and 4.3). s and sum |x_i| are computed in
 * double, whose own error (below k 2^-53 sum |x_i|) is added as slack. */
static double gamma_m(int m, double u)
{
    return m * u / (1 - m * u);
}

static void check_sum_accuracy(weft_dtype_t dt, const fmt16_t *f, int k, int positive)
{
    enum { LANES = 2048 };
    double u = ldexp(1, -(f->p));
    uint16_t *x = malloc((size_t)k * LANES * 2), *ring = malloc(LANES * 2), *tree = malloc((size_t)k * LANES * 2);
    cr_assert(x && ring && tree);
    for (size_t i = 0; i < (size_t)k * LANES; i++) {
        double v = (double)(rnd() >> 11) * 0x1p-53; /* [0, 1) */
        if (!positive) v = 2 * v - 1;
        x[i] = ref16_round(v, f);
    }
    /* ring order: acc = x_0 + x_1 + ... */
    memcpy(ring, x, LANES * 2);
    for (int j = 1; j < k; j++)
        weft_op_reduce(WEFT_SUM, dt, ring, x + (size_t)j * LANES, LANES);
    /* tree order: pairs, then pairs of pairs (out == a, as in place) */
    memcpy(tree, x, (size_t)k * LANES * 2);
    int depth = 0;
    for (int step = 1; step < k; step *= 2, depth++)
        for (int j = 0; j + step < k; j += 2 * step)
            weft_op_reduce3(WEFT_SUM, dt, tree + (size_t)j * LANES, tree + (size_t)j * LANES,
                            tree + (size_t)(j + step) * LANES, LANES);
    double worst_ring = 0, worst_tree = 0;
    for (int l = 0; l < LANES; l++) {
        double s = 0, abs_sum = 0;
        for (int j = 0; j < k; j++) {
            double v = ref16_to_double(x[(size_t)j * LANES + l], f);
            s += v;
            abs_sum += fabs(v);
        }
        double slack = k * 0x1p-53 * abs_sum;
        double bound_ring = gamma_m(k - 1, u) * abs_sum + slack, bound_tree = gamma_m(depth, u) * abs_sum + slack;
        double err_ring = fabs(ref16_to_double(ring[l], f) - s), err_tree = fabs(ref16_to_double(tree[l], f) - s);
        cr_assert(err_ring <= bound_ring, "%s ring sum of %d, lane %d: error %g > bound %g" SEED_FMT,
                  weft_dtype_name(dt), k, l, err_ring, bound_ring, SEED_ARGS);
        cr_assert(err_tree <= bound_tree, "%s tree sum of %d, lane %d: error %g > bound %g" SEED_FMT,
                  weft_dtype_name(dt), k, l, err_tree, bound_tree, SEED_ARGS);
        if (abs_sum > 0) {
            worst_ring = fmax(worst_ring, err_ring / bound_ring);
            worst_tree = fmax(worst_tree, err_tree / bound_tree);
        }
    }
    cr_log_info("%s, %d %s terms: worst error / bound: ring %.3f, tree %.3f", weft_dtype_name(dt), k,
                positive ? "positive" : "mixed-sign", worst_ring, worst_tree);
    free(x);
    free(ring);
    free(tree);
}

TEST_OP(fp16_sum_accuracy)
{
    int hw = weft_op_fp16_hw(1);
    for (int mode = hw; mode >= 0; mode--) {
        weft_op_fp16_hw(mode);
        check_sum_accuracy(WEFT_FLOAT16, &FP16, 64, 0);
        check_sum_accuracy(WEFT_FLOAT16, &FP16, 64, 1);
        check_sum_accuracy(WEFT_FLOAT16, &FP16, 37, 0);
    }
}

TEST_OP(bf16_sum_accuracy)
{
    check_sum_accuracy(WEFT_BFLOAT16, &BF16, 64, 0);
    check_sum_accuracy(WEFT_BFLOAT16, &BF16, 64, 1);
    check_sum_accuracy(WEFT_BFLOAT16, &BF16, 37, 0);
}

/* The public form (weft.h), which the layers over weft.h use: the same
 * arithmetic as the collectives', and its argument checks. */
TEST_OP(reduce_local_is_the_collectives_arithmetic)
{
    uint16_t a[37], b[37], want[37];
    for (int i = 0; i < 37; i++) {
        a[i] = weft_float_to_fp16(0.1f * (float)i - 1.3f);
        b[i] = want[i] = weft_float_to_fp16(3.7f - 0.2f * (float)i);
    }
    weft_op_reduce(WEFT_PROD, WEFT_FLOAT16, want, a, 37);
    cr_assert_eq(weft_reduce_local(a, b, 37, WEFT_FLOAT16, WEFT_PROD), WEFT_SUCCESS);
    cr_assert(!memcmp(b, want, sizeof(b)));
    int64_t x[3] = {1, 2, 3}, y[3] = {10, 20, 30};
    cr_assert_eq(weft_reduce_local(x, y, 3, WEFT_INT64, WEFT_SUM), WEFT_SUCCESS);
    cr_assert(y[0] == 11 && y[1] == 22 && y[2] == 33);
    cr_assert_eq(weft_reduce_local(x, x, 3, WEFT_INT64, WEFT_PROD), WEFT_SUCCESS);
    cr_assert(x[0] == 1 && x[1] == 4 && x[2] == 9);
    cr_assert_eq(weft_reduce_local(x, y, 0, WEFT_INT64, WEFT_SUM), WEFT_SUCCESS);
    cr_assert_eq(weft_reduce_local(NULL, y, 0, WEFT_INT64, WEFT_SUM), WEFT_SUCCESS);
    cr_assert_eq(weft_reduce_local(NULL, y, 3, WEFT_INT64, WEFT_SUM), WEFT_ERR_ARG);
    cr_assert_eq(weft_reduce_local(x, y, -1, WEFT_INT64, WEFT_SUM), WEFT_ERR_ARG);
    cr_assert_eq(weft_reduce_local(x, y, INT64_MAX, WEFT_INT64, WEFT_SUM), WEFT_ERR_ARG);
    cr_assert_eq(weft_reduce_local(x, y, 3, WEFT_FLOAT32, WEFT_BAND), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "weft_reduce_local"), "%s", weft_last_error());
    cr_assert_eq(weft_reduce_local(x, y, 3, (weft_dtype_t)99, WEFT_SUM), WEFT_ERR_ARG);
}
