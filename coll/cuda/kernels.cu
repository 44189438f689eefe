/* coll/cuda's kernels: compiled by nvcc into a fatbin (Makefile.am), embedded
 * in libweft as coll/cuda/kernels_fatbin.inc and loaded by cuda.c through the
 * driver (cuModuleLoadData). The argument blocks and their meaning are in
 * kernels.h; every entry point is extern "C" (unmangled names for
 * cuModuleGetFunction) and takes its block by value.
 *
 * Memory ordering. A collective is stage -> barrier -> reduce / copy, three
 * kernels in one stream. Kernel boundaries order each kernel's memory
 * operations before the next one's (stream order); across ranks, the
 * barrier's release store (system scope) of flag seq and the peer's acquire
 * load that sees it carry the order from "this rank's stage of call seq is
 * done and its reduce of call seq - 1 has finished reading" to "the peer's
 * next kernel may read this rank's slot and reuse its own". Reads of peer
 * slots are plain loads: they run in a later kernel than the acquire.
 *
 * Launched with programmatic dependent launch (sm_90 and newer: cuda.c,
 * WEFT_CUDA_COLL_PDL), a kernel may be resident before the one ahead of it
 * in the stream has finished: every entry point's first statement,
 * stream_order(), waits for that kernel's completion and memory flush
 * (griddepcontrol.wait) before touching memory, so stream order holds as
 * above and only the launch overlaps. The next kernel may launch once every
 * block of this one has exited, or, in the LL kernel, has passed its last
 * wait (next_may_launch()): never earlier, since a waiting block's peers
 * (other processes' blocks, on a shared GPU) may still need the SM room a
 * launched-early kernel would hold (a release at the start measured 0.48
 * against 0.63 us a kernel in a graph of one-block kernels, but nothing
 * bounds the room it takes while the kernel before still waits).
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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "coll/cuda/kernels.h"

#ifndef WEFT_CK_HALF_ROUND_EACH_STEP
#define WEFT_CK_HALF_ROUND_EACH_STEP 0
#endif

#define MAXR WEFT_CK_MAX_RANKS

namespace {

/* ------------------------------------------------------------------ */
/* Small helpers                                                        */
/* ------------------------------------------------------------------ */
__device__ __forceinline__ size_t grid_tid()
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ size_t grid_threads()
{
    return (size_t)gridDim.x * blockDim.x;
}

/* Every kernel's first statement (see the top): wait until the kernels ahead of this one in the stream have
 * finished and their writes are visible. Without the launch attribute, or before sm_90, a no-op. */
__device__ __forceinline__ void stream_order()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* This block waits for nothing more: the next kernel in the stream may launch once every block has said so (or
 * exited). Before sm_90 a no-op. */
__device__ __forceinline__ void next_may_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The slot of the given parity in a scratch region. */
__device__ __forceinline__ const char *slot_of(const char *scratch, unsigned long long parity, size_t slot_bytes)
{
    return scratch + WEFT_CK_HDR + (size_t)parity * slot_bytes;
}

/* ------------------------------------------------------------------ */
/* Byte copies (stage, copy)                                            */
/* ------------------------------------------------------------------ */
/* dst and src congruent modulo sizeof(V): head bytes up to V alignment,
 * a body of V words (4 per thread per iteration, for memory-level
 * parallelism over NVLink), tail bytes. */
template <typename V>
__device__ __forceinline__ void copy_congruent(char *dst, const char *src, size_t n, size_t tid, size_t nth)
{
    const size_t W = sizeof(V);
    size_t head = (W - ((uintptr_t)dst & (W - 1))) & (W - 1);
    if (head > n)
        head = n;
    size_t nv = (n - head) / W;
    size_t tail = head + nv * W;
    for (size_t j = tid; j < head; j += nth)
        dst[j] = src[j];
    for (size_t j = tail + tid; j < n; j += nth)
        dst[j] = src[j];
    V *vd = reinterpret_cast<V *>(dst + head);
    const V *vs = reinterpret_cast<const V *>(src + head);
    size_t i = tid;
    for (; i + 3 * nth < nv; i += 4 * nth) {
        V a = vs[i], b = vs[i + nth], c = vs[i + 2 * nth], d = vs[i + 3 * nth];
        vd[i] = a;
        vd[i + nth] = b;
        vd[i + 2 * nth] = c;
        vd[i + 3 * nth] = d;
    }
    for (; i < nv; i += nth)
        vd[i] = vs[i];
}

/* dst and src not congruent modulo 4: bytes up to dst's 4-byte alignment,
 * then 32-bit stores, each made from two aligned 32-bit source words by a
 * funnel shift (the source words are aligned words that each hold at least
 * one byte of the source range: nothing outside it is touched beyond its
 * own aligned words), then tail bytes. */
__device__ __forceinline__ void copy_shifted(char *dst, const char *src, size_t n, size_t tid, size_t nth)
{
    size_t head = (4 - ((uintptr_t)dst & 3)) & 3;
    if (head > n)
        head = n;
    size_t nw = (n - head) / 4;
    /* word j reads source words j and j + 1; the last body word would read
     * past the range's last aligned word, so it goes to the tail */
    nw = nw > 0 ? nw - 1 : 0;
    size_t tail = head + nw * 4;
    for (size_t j = tid; j < head; j += nth)
        dst[j] = src[j];
    for (size_t j = tail + tid; j < n; j += nth)
        dst[j] = src[j];
    if (nw == 0)
        return;
    const char *s = src + head;
    unsigned k = (unsigned)((uintptr_t)s & 3); /* 1..3: dst + head is aligned, src is not congruent */
    const unsigned *ws = reinterpret_cast<const unsigned *>(s - k);
    unsigned *wd = reinterpret_cast<unsigned *>(dst + head);
    for (size_t i = tid; i < nw; i += nth)
        wd[i] = __funnelshift_r(ws[i], ws[i + 1], 8 * k); /* little-endian: bytes k..k+3 of ws[i]:ws[i+1] */
}

__device__ __forceinline__ void copy_any(char *dst, const char *src, size_t n, size_t tid, size_t nth)
{
    uintptr_t mis = (uintptr_t)dst ^ (uintptr_t)src;
    if ((mis & 15) == 0)
        copy_congruent<uint4>(dst, src, n, tid, nth);
    else if ((mis & 7) == 0)
        copy_congruent<uint2>(dst, src, n, tid, nth);
    else if ((mis & 3) == 0)
        copy_congruent<unsigned>(dst, src, n, tid, nth);
    else
        copy_shifted(dst, src, n, tid, nth);
}

/* ------------------------------------------------------------------ */
/* Barrier: release / acquire at system scope                           */
/* ------------------------------------------------------------------ */
__device__ __forceinline__ void st_release_sys(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_acquire_sys(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

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
    static const bool is_int = true;
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
    static const bool is_int = false;
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
    static const bool is_int = false;
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
    static const bool is_int = false;
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
/* Bitwise ops (integer kernels only; not in kernels.h's list, free to use). */
template <class N> struct OpBand {
    typedef typename N::S S;
    typedef S A;
    static __device__ __forceinline__ A init(S x) { return x; }
    static __device__ __forceinline__ A step(A a, S x) { return (S)(a & x); }
    static __device__ __forceinline__ S fin(A a, int) { return a; }
};
template <class N> struct OpBor {
    typedef typename N::S S;
    typedef S A;
    static __device__ __forceinline__ A init(S x) { return x; }
    static __device__ __forceinline__ A step(A a, S x) { return (S)(a | x); }
    static __device__ __forceinline__ S fin(A a, int) { return a; }
};
template <class N> struct OpBxor {
    typedef typename N::S S;
    typedef S A;
    static __device__ __forceinline__ A init(S x) { return x; }
    static __device__ __forceinline__ A step(A a, S x) { return (S)(a ^ x); }
    static __device__ __forceinline__ S fin(A a, int) { return a; }
};

/* ------------------------------------------------------------------ */
/* The reduction loop                                                   */
/* ------------------------------------------------------------------ */
/* One element: all loads first (independent, in flight together), then
 * the fold in source order. src is indexed only with constants (fully
 * unrolled), so it stays in registers. */
template <class Op>
__device__ __forceinline__ typename Op::S reduce_one(const typename Op::S *const (&src)[MAXR], int nsrc, size_t i,
                                                     int fin_n)
{
    typedef typename Op::S S;
    S v[MAXR];
#pragma unroll
    for (int p = 0; p < MAXR; p++)
        if (p < nsrc)
            v[p] = src[p][i];
    typename Op::A acc = Op::init(v[0]);
#pragma unroll
    for (int p = 1; p < MAXR; p++)
        if (p < nsrc)
            acc = Op::step(acc, v[p]);
    return Op::fin(acc, fin_n);
}

/* 16 bytes as one word or as elements of S (the reduction loops' vector). */
template <class S> union Vec16 {
    uint4 u;
    S e[16 / sizeof(S)];
};

/* The elements of out before its first 16-byte boundary (at most count): the loops' scalar head. */
template <class S> __device__ __forceinline__ size_t head_of(const S *out, size_t count)
{
    size_t head = ((16 - ((uintptr_t)out & 15)) & 15) / sizeof(S);
    return head > count ? count : head;
}

/* base's first NS regions as element pointers, the others repeating the first (indexed by constants only). */
template <class S, int NS>
__device__ __forceinline__ void srcs_of(const char *const (&base)[MAXR], const S *(&src)[MAXR])
{
#pragma unroll
    for (int p = 0; p < MAXR; p++)
        src[p] = reinterpret_cast<const S *>(base[p < NS ? p : 0]);
}

/* out[i] = op over src[0..nsrc) of element i, i < count, threads tid of nth. fin_n (0: nsrc): the count the
 * op's result step is told (an average's divisor; the ring's last step folds 2 sources of n ranks' sum). */
template <class Op>
__device__ __forceinline__ void reduce_range(const char *const (&base)[MAXR], int nsrc, void *out_, size_t count, size_t tid,
                                             size_t nth, int fin_n = 0)
{
    if (fin_n <= 0)
        fin_n = nsrc;
    typedef typename Op::S S;
    const int V = 16 / sizeof(S); /* elements per 16-byte vector */
    typedef Vec16<S> Vec;
    S *out = static_cast<S *>(out_);
    const S *src[MAXR];
    uintptr_t mis = 0; /* bits where some source's address differs from out's */
#pragma unroll
    for (int p = 0; p < MAXR; p++) {
        /* base[p] with a constant p; unused entries repeat src[0] */
        const S *s = reinterpret_cast<const S *>(base[p]);
        src[p] = p < nsrc ? s : src[0];
        mis |= (uintptr_t)src[p] ^ (uintptr_t)out;
    }

    /* every source congruent with out modulo 16: a scalar head up to
     * out's 16-byte alignment, a body of 16-byte vectors, a scalar tail;
     * otherwise all scalar (head = nv = 0) */
    size_t head = 0, nv = 0;
    if ((mis & 15) == 0) {
        head = head_of(out, count);
        nv = (count - head) / V;
        const uint4 *vsrc[MAXR];
#pragma unroll
        for (int p = 0; p < MAXR; p++)
            vsrc[p] = reinterpret_cast<const uint4 *>(src[p] + head);
        uint4 *vout = reinterpret_cast<uint4 *>(out + head);
        for (size_t i = tid; i < nv; i += nth) {
            Vec v[MAXR];
#pragma unroll
            for (int p = 0; p < MAXR; p++)
                if (p < nsrc)
                    v[p].u = vsrc[p][i];
            typename Op::A acc[V];
#pragma unroll
            for (int j = 0; j < V; j++)
                acc[j] = Op::init(v[0].e[j]);
#pragma unroll
            for (int p = 1; p < MAXR; p++)
                if (p < nsrc) {
#pragma unroll
                    for (int j = 0; j < V; j++)
                        acc[j] = Op::step(acc[j], v[p].e[j]);
                }
            Vec r;
#pragma unroll
            for (int j = 0; j < V; j++)
                r.e[j] = Op::fin(acc[j], fin_n);
            vout[i] = r.u;
        }
    }
    /* head and tail in one loop (one copy of the scalar code) */
    size_t done = head + nv * V, nscalar = head + (count - done);
    for (size_t k = tid; k < nscalar; k += nth) {
        size_t i = k < head ? k : done + (k - head);
        out[i] = reduce_one<Op>(src, nsrc, i, fin_n);
    }
}

/* The fold of one 16-byte vector of each of NS sources, in source order. */
template <class Op, int NS, class Vec>
__device__ __forceinline__ Vec fold_vec(const Vec (&v)[NS], int fin_n)
{
    Vec r;
#pragma unroll
    for (int j = 0; j < (int)(16 / sizeof(typename Op::S)); j++) {
        typename Op::A acc = Op::init(v[0].e[j]);
#pragma unroll
        for (int p = 1; p < NS; p++)
            acc = Op::step(acc, v[p].e[j]);
        r.e[j] = Op::fin(acc, fin_n);
    }
    return r;
}

/* The elements before out's first 16-byte word (head of them) and from done on, one at a time. */
template <class Op, int NS>
__device__ __forceinline__ void reduce_ends(const typename Op::S *const (&src)[MAXR], typename Op::S *out, size_t head,
                                            size_t done, size_t count, size_t tid, size_t nth, int fin_n)
{
    size_t nscalar = head + (count - done);
    for (size_t k = tid; k < nscalar; k += nth) {
        size_t e = k < head ? k : done + (k - head);
        out[e] = reduce_one<Op>(src, NS, e, fin_n);
    }
}

/* reduce_range with NS sources known at compile time where some source
 * (bit p of odd) is not congruent with out modulo 16 (a ring's own input
 * on 3 ranks: blocks of 2^k / 3 bytes): 16-byte stores into out, 16-byte
 * loads from the congruent sources, element loads from the others; the
 * same fold in the same order. */
template <class Op, int NS>
__device__ __forceinline__ void reduce_range_mixed(const char *const (&base)[MAXR], void *out_, size_t count, size_t tid,
                                                   size_t nth, int fin_n, unsigned odd)
{
    typedef typename Op::S S;
    const int V = 16 / sizeof(S);
    typedef Vec16<S> Vec;
    S *out = static_cast<S *>(out_);
    size_t head = head_of(out, count), nv = (count - head) / V;
    const S *src[MAXR];
    srcs_of<S, NS>(base, src);
    uint4 *vout = reinterpret_cast<uint4 *>(out + head);
    for (size_t i = tid; i < nv; i += nth) {
        Vec v[NS];
#pragma unroll
        for (int p = 0; p < NS; p++) {
            const S *e = src[p] + head + i * V;
            if (odd >> p & 1) {
#pragma unroll
                for (int j = 0; j < V; j++)
                    v[p].e[j] = e[j];
            } else {
                v[p].u = *reinterpret_cast<const uint4 *>(e);
            }
        }
        vout[i] = fold_vec<Op, NS>(v, fin_n).u;
    }
    reduce_ends<Op, NS>(src, out, head, head + nv * V, count, tid, nth, fin_n);
}

/* reduce_range with NS sources known at compile time and U vectors per
 * thread in flight (NS * U loads issued before any arithmetic: latency
 * over NVLink is hidden by loads in flight, not by more threads); the
 * same fold in the same order, so the same bits. reduce_range_mixed
 * when a source is not congruent with out modulo 16. */
template <class Op, int NS, int U>
__device__ __forceinline__ void reduce_range_n(const char *const (&base)[MAXR], void *out_, size_t count, size_t tid,
                                               size_t nth, int fin_n = NS)
{
    typedef typename Op::S S;
    const int V = 16 / sizeof(S);
    typedef Vec16<S> Vec;
    S *out = static_cast<S *>(out_);
    unsigned odd = 0;
#pragma unroll
    for (int p = 0; p < NS; p++)
        odd |= (((uintptr_t)base[p] ^ (uintptr_t)out) & 15 ? 1u : 0u) << p;
    if (odd) {
        reduce_range_mixed<Op, NS>(base, out_, count, tid, nth, fin_n, odd);
        return;
    }
    size_t head = head_of(out, count), nv = (count - head) / V;
    const uint4 *vsrc[NS];
#pragma unroll
    for (int p = 0; p < NS; p++)
        vsrc[p] = reinterpret_cast<const uint4 *>(reinterpret_cast<const S *>(base[p]) + head);
    uint4 *vout = reinterpret_cast<uint4 *>(out + head);
    size_t i = tid;
    for (; i + (U - 1) * nth < nv; i += U * nth) {
        Vec v[U][NS];
#pragma unroll
        for (int k = 0; k < U; k++)
#pragma unroll
            for (int p = 0; p < NS; p++)
                v[k][p].u = vsrc[p][i + k * nth];
#pragma unroll
        for (int k = 0; k < U; k++) {
            vout[i + k * nth] = fold_vec<Op, NS>(v[k], fin_n).u;
        }
    }
    for (; i < nv; i += nth) {
        Vec v[NS];
#pragma unroll
        for (int p = 0; p < NS; p++)
            v[p].u = vsrc[p][i];
        vout[i] = fold_vec<Op, NS>(v, fin_n).u;
    }
    const S *src[MAXR];
    srcs_of<S, NS>(base, src);
    reduce_ends<Op, NS>(src, out, head, head + nv * V, count, tid, nth, fin_n);
}

/* Entry [parity][p] of the input descriptors in a region's header (WEFT_CK_DESC). */
__device__ __forceinline__ volatile unsigned long long *desc_at(const void *region, unsigned long long parity, int p)
{
    return reinterpret_cast<volatile unsigned long long *>(const_cast<char *>(static_cast<const char *>(region)) +
                                                           WEFT_CK_DESC) +
           parity * MAXR + p;
}

/* The offset a rank's barrier announced for its input, from this rank's
 * header (mine) at the counter's parity. */
__device__ __forceinline__ size_t desc_off(const char *mine, unsigned long long parity, int p)
{
    return (size_t)WEFT_CK_DESC_OFF(*desc_at(mine, parity, p));
}

template <class Op> __device__ __forceinline__ void reduce_run(const weft_ck_reduce_args_t &a)
{
    int nsrc = a.nsrc < 1 ? 1 : a.nsrc > MAXR ? MAXR : a.nsrc;
    const unsigned long long c = *a.ctl.counter;
    if (c & WEFT_CK_POISON) /* the barrier before was aborted or found a mismatch */
        return;
    unsigned long long parity = c & 1;
    const char *base[MAXR];
#pragma unroll
    for (int p = 0; p < MAXR; p++)
        base[p] = a.reg ? a.win[p] + desc_off(a.mine, parity, p) + a.src_off
                        : slot_of(a.scratch[p], parity, a.slot_bytes) + a.src_off;
    void *out = a.out_slot ? const_cast<char *>(a.mine) + WEFT_CK_HDR + (size_t)((c + 1) & 1) * a.slot_bytes +
                                 (size_t)(uintptr_t)a.out
                           : a.out;
    reduce_range<Op>(base, nsrc, out, a.count, grid_tid(), grid_threads());
}

/* op is uniform across the grid: one switch, outside the loops. Unknown
 * ops (and bitwise ops on floats) do nothing: the host checks first. */
template <class N> __device__ __forceinline__ void reduce_dispatch(const weft_ck_reduce_args_t &a)
{
    switch (a.op) {
    case 0: reduce_run<OpSum<N>>(a); break;
    case 1: reduce_run<OpProd<N>>(a); break;
    case 2: reduce_run<OpMin<N>>(a); break;
    case 3: reduce_run<OpMax<N>>(a); break;
    case 4: reduce_run<OpAvg<N>>(a); break;
    default:
        if constexpr (N::is_int) {
            switch (a.op) {
            case 5: reduce_run<OpBand<N>>(a); break;
            case 6: reduce_run<OpBor<N>>(a); break;
            case 7: reduce_run<OpBxor<N>>(a); break;
            default: break;
            }
        }
        break;
    }
}

} // namespace

/* ------------------------------------------------------------------ */
/* Entry points                                                         */
/* ------------------------------------------------------------------ */
extern "C" __global__ void weft_ck_stage(weft_ck_stage_args_t a)
{
    stream_order();
    const int y = blockIdx.y;
    if (y >= a.n || y >= MAXR)
        return;
    const unsigned long long c = *a.ctl.counter;
    if (c & WEFT_CK_POISON) /* an earlier barrier was aborted: its slot may still be read by a late peer */
        return;
    /* piece y, picked with constant indices (as weft_ck_copy's descriptors) */
    const void *in = nullptr;
    size_t off = 0, bytes = 0;
#pragma unroll
    for (int j = 0; j < MAXR; j++)
        if (j == y) {
            in = a.piece[j].in;
            off = a.piece[j].off;
            bytes = a.piece[j].bytes;
        }
    unsigned long long parity = (c + 1) & 1;
    char *dst = a.scratch + WEFT_CK_HDR + (size_t)parity * a.slot_bytes + off;
    copy_any(dst, static_cast<const char *>(in), bytes, grid_tid(), grid_threads());
}

namespace {
/* The barrier, in one block: thread p (< nranks, != rank) announces to peer
 * p and waits for it. All threads agree on the outcome through a shared
 * flag: the counter moves only when no wait was ended by an abort. Returns
 * 1 when passed (the counter is then seq, visible to the whole block), 0
 * when aborted. */
__device__ __forceinline__ int barrier_block(const weft_ck_barrier_args_t &a)
{
    __shared__ unsigned long long seq_s;
    __shared__ int aborted_s, poisoned_s;
    const int p = threadIdx.x;
    if (p == 0) {
        const unsigned long long c = *a.ctl.counter;
        seq_s = c + 1;
        aborted_s = 0;
        poisoned_s = (c & WEFT_CK_POISON) != 0; /* an earlier barrier was aborted or found a mismatch */
    }
    __syncthreads(); /* the counter is read before thread 0 may write it below */
    /* poisoned_s, unlike aborted_s, is not written again: every thread takes the same branch */
    if (poisoned_s)
        return 0; /* poisoned: no flag is touched, the counter stays */
    const unsigned long long seq = seq_s;
    const int nranks = a.nranks < MAXR ? a.nranks : MAXR;
    /* peer p's flag array, picked with constant indices (as in weft_ck_copy) */
    unsigned long long *peer = nullptr;
#pragma unroll
    for (int j = 0; j < MAXR; j++)
        if (j == p)
            peer = a.peer_flags[j];
    const unsigned long long parity = seq & 1;
    if (p == a.rank && blockIdx.x == 0) /* this rank's own entry: what its reduce / copy reads for it */
        *desc_at(a.my_flags, parity, p) = a.desc;
    if (p < nranks && p != a.rank && blockIdx.x == 0) {
        /* the input's descriptor, then the flag: the release orders the two */
        *desc_at(peer, parity, a.rank) = a.desc;
        /* release: this rank's earlier work (its stage of call seq, its
         * reads of call seq - 1's slots) happens before the peer sees seq */
        st_release_sys(peer + a.rank, seq);
        unsigned spins = 0;
        /* acquire: what peer p did before announcing seq happens before
         * everything after this */
        while (ld_acquire_sys(a.my_flags + p) < seq) {
            if ((++spins & 255) == 0 && *a.ctl.abort) {
                *a.ctl.error = 1 + p;
                __threadfence_system();
                aborted_s = 1;
                break;
            }
            __nanosleep(100);
        }
        /* the peer's input descriptor (written before its flag, so seen now) against this call's */
        if (a.check && !aborted_s) {
            const unsigned long long d = *desc_at(a.my_flags, parity, p);
            unsigned long long len = 0;
#pragma unroll
            for (int j = 0; j < MAXR; j++)
                if (j == p)
                    len = a.winlen[j];
            if (((d ^ a.desc) & 0xffff) != 0 || ((a.desc & 1) && WEFT_CK_DESC_OFF(d) + a.need > len)) {
                *a.ctl.error = -(1 + p);
                __threadfence_system();
                aborted_s = 1;
            }
        }
    }
    __syncthreads();
    const int passed = !aborted_s;
    if (p == 0 && blockIdx.x == 0)
        *a.ctl.counter = passed ? seq : *a.ctl.counter | WEFT_CK_POISON;
    __syncthreads(); /* the new counter is what the block reads next */
    return passed;
}

/* Copy descriptor y of a (its source slot: the counter's parity). */
__device__ __forceinline__ void copy_desc(const weft_ck_copy_args_t &a, int y, size_t tid, size_t nth)
{
    /* pick descriptor y with constant indices (no dynamic indexing of the
     * parameter block, which would copy it to local memory) */
    int src = 0;
    size_t src_off = 0, len = 0;
    char *dst = nullptr;
#pragma unroll
    for (int j = 0; j < MAXR; j++)
        if (j == y) {
            src = a.d[j].src;
            src_off = a.d[j].src_off;
            len = a.d[j].len;
            dst = a.d[j].dst;
        }
    if (src < 0 || src >= MAXR)
        return;
    const unsigned long long c = *a.ctl.counter;
    if (c & WEFT_CK_POISON) /* the barrier before was aborted or found a mismatch */
        return;
    const char *scratch = a.scratch[0], *win = a.win[0];
#pragma unroll
    for (int j = 1; j < MAXR; j++)
        if (j == src) {
            scratch = a.scratch[j];
            win = a.win[j];
        }
    unsigned long long parity = c & 1;
    const char *from = a.reg ? win + desc_off(a.mine, parity, src) : slot_of(scratch, parity, a.slot_bytes);
    copy_any(dst, from + src_off, len, tid, nth);
}

/* The fused call's stage: every piece into this rank's next slot, then a
 * system-scope fence per thread, so the barrier's release covers the
 * writes of every thread of the block. */
__device__ __forceinline__ void stage_block(const weft_ck_fused_args_t &a)
{
    const unsigned long long c = *a.bar.ctl.counter;
    unsigned long long parity = (c + 1) & 1;
    char *slot = a.scratch + WEFT_CK_HDR + (size_t)parity * a.slot_bytes;
#pragma unroll
    for (int j = 0; j < MAXR; j++)
        if (j < a.nstage && !(c & WEFT_CK_POISON)) /* poisoned: as weft_ck_stage; the barrier ends the kernel */
            copy_any(slot + a.stage[j].off, static_cast<const char *>(a.stage[j].in), a.stage[j].bytes, threadIdx.x,
                     blockDim.x);
    __threadfence_system();
    __syncthreads();
}

/* ---- the pipelined kernels (kernels.h: weft_ck_pipe_args) ---------------- */
__device__ __forceinline__ unsigned long long *pipe_flag(char *region, size_t off, int pos, int q)
{
    return reinterpret_cast<unsigned long long *>(region + off) + (size_t)pos * MAXR + q;
}

/* Entry p of a kernel argument's per-rank array, read with constant indices only (a runtime index would copy
 * the array into local memory). */
__device__ __forceinline__ char *pick(char *const (&arr)[MAXR], int p)
{
    char *r = arr[0];
#pragma unroll
    for (int j = 1; j < MAXR; j++)
        if (j == p)
            r = arr[j];
    return r;
}

__device__ __forceinline__ char *pick_region(const weft_ck_pipe_args_t &a, int p)
{
    return pick(a.scratch, p);
}

/* Thread 0: waits until flag q of every rank in mask (at off, position pos,
 * in this rank's region) reaches v; 0 when the abort word ended the wait. */
__device__ __forceinline__ int pipe_wait(const weft_ck_pipe_args_t &a, char *mine, size_t off, int pos, unsigned mask,
                                         unsigned long long v)
{
    for (int q = 0; q < MAXR; q++) {
        if (!(mask >> q & 1))
            continue;
        const unsigned long long *f = pipe_flag(mine, off, pos, q);
        unsigned spins = 0;
        while (ld_acquire_sys(f) < v) {
            if ((++spins & 1023) == 0 && *a.ctl.abort) {
                *a.ctl.error = 1 + q;
                __threadfence_system();
                return 0;
            }
        }
    }
    return 1;
}

/* Thread 0: release-stores v into flag `rank` of position pos (at off) in the region of every rank in mask. */
__device__ __forceinline__ void pipe_post(const weft_ck_pipe_args_t &a, size_t off, int pos, unsigned mask,
                                          unsigned long long v)
{
#pragma unroll
    for (int q = 0; q < MAXR; q++)
        if (mask >> q & 1)
            st_release_sys(pipe_flag(pick_region(a, q), off, pos, a.rank), v);
}

/* Thread 0, at a block's end: waits until every rank in mask has posted done for the block's last units (its
 * j units, the last `depth` of them still in their positions), so the next call may stage or push at once. */
__device__ __forceinline__ void pipe_drain(const weft_ck_pipe_args_t &a, char *mine, unsigned mask,
                                           unsigned long long seq, size_t j, int depth)
{
    const size_t G = gridDim.x, b = blockIdx.x;
    for (size_t k = j > (size_t)depth ? j - (size_t)depth : 0; k < j; k++)
        if (!pipe_wait(a, mine, WEFT_CK_PIPE_DN, (int)(b + (k % (size_t)depth) * G), mask,
                       (seq << 24) | (unsigned long long)(b + k * G + 1)))
            break;
}

/* Elements of piece k of unit-start e0 (a unit's share of a piece of cnt elements). */
__device__ __forceinline__ size_t pipe_span(size_t cnt, size_t e0, size_t unit)
{
    return e0 >= cnt ? 0 : (cnt - e0 < unit ? cnt - e0 : unit);
}

/* Elements of piece k in the whole call (mode 3: the vector's parts; else all count). */
__device__ __forceinline__ size_t pipe_piece_count(const weft_ck_pipe_args_t &a, int k)
{
    if (!a.total)
        return a.count;
    size_t lo = (size_t)k * a.count;
    return lo >= a.total ? 0 : (a.total - lo < a.count ? a.total - lo : a.count);
}

/* The reduce of one unit: out[i] = op over the sources in rank order. */
template <class Op>
__device__ __forceinline__ void pipe_reduce(const char *const (&base)[MAXR], int nranks, void *o, size_t ne,
                                            size_t tid, size_t nth)
{
    if (nranks == 2)
        reduce_range_n<Op, 2, 4>(base, o, ne, tid, nth);
    else if (nranks == 4)
        reduce_range_n<Op, 4, 2>(base, o, ne, tid, nth);
    else
        reduce_range<Op>(base, nranks, o, ne, tid, nth);
}

/* Unit j of this block: its number, first element, position and flag value. */
struct pipe_unit_t {
    size_t u, e0;
    int pos;
    unsigned long long v;
};

__device__ __forceinline__ pipe_unit_t pipe_unit(const weft_ck_pipe_args_t &a, unsigned long long seq, size_t j,
                                                 int depth)
{
    pipe_unit_t t;
    t.u = blockIdx.x + j * gridDim.x;
    t.e0 = t.u * a.unit_elems;
    t.pos = (int)(blockIdx.x + (j % (size_t)depth) * gridDim.x);
    t.v = (seq << 24) | (unsigned long long)(t.u + 1);
    return t;
}

/* The threads of a block that run one side of the pipelined loop: the whole block (both sides in turn), or,
 * split (weft_ck_pipe_args.split), the producing warps or the consuming ones, each side with a named
 * barrier of its own and its own outcome word in shared memory. */
struct pipe_grp_t {
    unsigned tid, nth; /* this thread's index in the group, the group's threads */
    unsigned bar;      /* 0: the whole block (__syncthreads); else a named barrier of nth threads */
    int *ok;           /* the group's outcome: 0 once a wait met the abort word */
    __device__ __forceinline__ void sync() const
    {
        if (bar == 0)
            __syncthreads();
        else
            asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(nth) : "memory");
    }
};

/* The group's first thread waits (pipe_wait) unless skip; every thread of the group then learns the outcome
 * (1: go on). */
__device__ __forceinline__ int pipe_wait_all(const weft_ck_pipe_args_t &a, const pipe_grp_t &g, bool skip,
                                             char *mine, size_t off, int pos, unsigned mask, unsigned long long v)
{
    if (!skip && g.tid == 0 && !pipe_wait(a, mine, off, pos, mask, v))
        *g.ok = 0;
    g.sync();
    return *g.ok;
}

/* A block's units in order: produce(j, g) (wait until unit j's position is free, fill it, announce), then
 * consume(j - ahead, g) (wait for its producers, use it, tell them), so a block fills the next positions while
 * its peers' flags for an earlier unit are on their way. ahead < depth, so the two units never share a
 * position. Deadlock-free: step s of a rank waits only for what its peers post in steps before s, or earlier
 * in step s (mode 3's rdy2 before its wait). split (warps, fewer than the block's): the first split warps
 * produce every unit and the others consume every unit, side by side (a side waits only for the other
 * ranks' other side, and the producers at most depth units ahead of the consumers they wait for; pipe_push's
 * consumers of unit j also wait for their own block's producers of unit j, which wait only for units before
 * j). ok: two
 * shared words. Returns the block's unit count, or -1 when a wait met the abort word (the kernel then
 * ends). */
template <class P, class C>
__device__ __forceinline__ long long pipe_loop(const weft_ck_pipe_args_t &a, int depth, int split, int *ok,
                                               P produce, C consume)
{
    const size_t G = gridDim.x, b = blockIdx.x;
    const size_t J = a.units > b ? (a.units - b + G - 1) / G : 0;
    const unsigned sp = split > 0 ? (unsigned)split * 32u : 0u, tid = threadIdx.x, nth = blockDim.x;
    if (tid == 0)
        ok[0] = ok[1] = 1;
    __syncthreads();
    if (sp && sp < nth) {
        const bool producing = tid < sp;
        const pipe_grp_t g = producing ? pipe_grp_t{tid, sp, 1, &ok[0]} : pipe_grp_t{tid - sp, nth - sp, 2, &ok[1]};
        for (size_t j = 0; j < J; j++)
            if (!(producing ? produce(j, g) : consume(j, g)))
                return -1;
        return (long long)J;
    }
    const pipe_grp_t g{tid, nth, 0, &ok[0]};
    const size_t L = a.ahead <= 0 ? 0 : a.ahead < depth ? (size_t)a.ahead : (size_t)depth - 1;
    for (size_t s = 0; s < J + L; s++) {
        if (s < J && !produce(s, g))
            return -1;
        if (s >= L && !consume(s - L, g))
            return -1;
    }
    return (long long)J;
}

template <class Op, bool REDUCE> __device__ __forceinline__ void pipe_run(const weft_ck_pipe_args_t &a)
{
    __shared__ int ok_s[2];
    /* the barrier before ended by the abort word (it poisoned the counter):
     * nothing to do. Device memory: the abort word itself is host memory,
     * and a read of it from every warp of every block costs a PCIe round
     * trip each, serialised (about 9 us a block, measured). */
    const unsigned long long seq = *a.ctl.counter;
    if (seq & WEFT_CK_POISON)
        return;
    const unsigned G = gridDim.x, tid = threadIdx.x;
    const int nranks = a.nranks < MAXR ? a.nranks : MAXR, depth = a.depth < 1 ? 1 : a.depth;
    char *mine = pick_region(a, a.rank);
    const size_t piece = a.unit_elems * a.esize, posbytes = piece * (size_t)a.npieces;
    /* 1. the position is free: its consumers read its previous unit; 2. stage and announce */
    auto produce = [&](size_t j, const pipe_grp_t &g) -> bool {
        if (!a.stage_on)
            return true;
        const pipe_unit_t t = pipe_unit(a, seq, j, depth);
        const size_t ne = a.count - t.e0 < a.unit_elems ? a.count - t.e0 : a.unit_elems;
        if (!pipe_wait_all(a, g, j < (size_t)depth, mine, WEFT_CK_PIPE_DN, t.pos, a.cons_mask,
                           t.v - (unsigned long long)depth * G))
            return false;
        char *dst = mine + WEFT_CK_HDR + (size_t)t.pos * posbytes;
        for (int k = 0; k < a.npieces; k++)
            copy_any(dst + (size_t)k * piece, a.in + (size_t)k * a.in_stride + t.e0 * a.esize, ne * a.esize, g.tid,
                     g.nth);
        __threadfence_system();
        g.sync();
        if (g.tid == 0)
            pipe_post(a, WEFT_CK_PIPE_RDY, t.pos, a.cons_mask, t.v);
        return true;
    };
    /* 3. wait for the producers, consume, tell them */
    auto consume = [&](size_t j, const pipe_grp_t &g) -> bool {
        if (!a.consume_on)
            return true;
        const pipe_unit_t t = pipe_unit(a, seq, j, depth);
        const size_t ne = a.count - t.e0 < a.unit_elems ? a.count - t.e0 : a.unit_elems;
        if (!pipe_wait_all(a, g, false, mine, WEFT_CK_PIPE_RDY, t.pos, a.read_mask, t.v))
            return false;
        if (REDUCE) {
            const char *base[MAXR];
#pragma unroll
            for (int p = 0; p < MAXR; p++)
                base[p] = pick_region(a, p < nranks ? p : 0) + WEFT_CK_HDR + (size_t)t.pos * posbytes +
                          (size_t)a.red_piece * piece;
            pipe_reduce<Op>(base, nranks, static_cast<char *>(a.out) + t.e0 * a.esize, ne, g.tid, g.nth);
        } else {
#pragma unroll
            for (int p = 0; p < MAXR; p++) {
                if (p >= nranks || !((a.read_mask >> p & 1) || (p == a.rank && a.copy_self)))
                    continue;
                copy_any(a.dst[p] + t.e0 * a.esize,
                         pick_region(a, p) + WEFT_CK_HDR + (size_t)t.pos * posbytes + (size_t)a.copy_piece * piece,
                         ne * a.esize, g.tid, g.nth);
            }
        }
        g.sync();
        if (g.tid == 0)
            pipe_post(a, WEFT_CK_PIPE_DN, t.pos, a.read_mask, t.v);
        return true;
    };
    const long long units = pipe_loop(a, depth, 0, ok_s, produce, consume);
    /* every position this block used: its last unit was read */
    if (units >= 0 && a.stage_on && tid == 0)
        pipe_drain(a, mine, a.cons_mask, seq, (size_t)units, depth);
}

/* The pushed form (kernels.h: weft_ck_pipe_args, push; MODE 1 reduce, 2 copy, 3 allreduce). Same
 * positions, flags and waits as pipe_run; only where the bytes go differs. */
template <class Op, int MODE> __device__ __forceinline__ void pipe_push(const weft_ck_pipe_args_t &a)
{
    __shared__ int ok_s[2];
    /* split: the units this block's producers have pushed; its consumers never pass them (in place, an
     * alltoall's or reduce_scatter's output range of unit j is input the producers read for unit j) */
    __shared__ unsigned long long made_s;
    const unsigned long long seq = *a.ctl.counter;
    if (seq & WEFT_CK_POISON)
        return;
    const unsigned G = gridDim.x, tid = threadIdx.x;
    const int nranks = a.nranks < MAXR ? a.nranks : MAXR, depth = a.depth < 1 ? 1 : a.depth;
    const int places = a.pos_pieces < 1 ? 1 : a.pos_pieces;
    char *mine = pick_region(a, a.rank);
    const size_t es = a.esize, piece = a.unit_elems * es, posbytes = piece * (size_t)places;
    /* 1. the position is free in every consumer's region: each read this rank's previous unit there;
     * 2. push each consumer its piece, at this rank's place, and announce */
    auto produce = [&](size_t j, const pipe_grp_t &g) -> bool {
        if (!a.stage_on)
            return true;
        const pipe_unit_t t = pipe_unit(a, seq, j, depth);
        if (!pipe_wait_all(a, g, j < (size_t)depth, mine, WEFT_CK_PIPE_DN, t.pos, a.cons_mask,
                           t.v - (unsigned long long)depth * G))
            return false;
        for (int c = 0; c < nranks; c++) {
            if (!(a.cons_mask >> c & 1))
                continue;
            const int k = a.npieces == 1 ? 0 : c;
            copy_any(pick_region(a, c) + WEFT_CK_HDR + (size_t)t.pos * posbytes + (size_t)(a.rank % places) * piece,
                     a.in + (size_t)k * a.in_stride + t.e0 * es,
                     pipe_span(pipe_piece_count(a, k), t.e0, a.unit_elems) * es, g.tid, g.nth);
        }
        __threadfence_system();
        g.sync();
        if (g.tid == 0) {
            pipe_post(a, WEFT_CK_PIPE_RDY, t.pos, a.cons_mask, t.v);
            *(volatile unsigned long long *)&made_s = j + 1;
        }
        return true;
    };
    /* 3. wait for the producers; consume out of this rank's own memory */
    auto consume = [&](size_t j, const pipe_grp_t &g) -> bool {
        if (!a.consume_on)
            return true;
        const pipe_unit_t t = pipe_unit(a, seq, j, depth);
        const size_t e0 = t.e0;
        char *here = mine + WEFT_CK_HDR + (size_t)t.pos * posbytes; /* this rank's position */
        if (a.split > 0 && g.tid == 0) /* this block's producers pushed unit j, or stopped at the abort word */
            while (*(volatile unsigned long long *)&made_s <= j)
                if (!*(volatile int *)&ok_s[0]) {
                    *g.ok = 0;
                    break;
                }
        if (!pipe_wait_all(a, g, false, mine, WEFT_CK_PIPE_RDY, t.pos, a.read_mask, t.v))
            return false;
        if (MODE != 2) {
            const size_t ne = pipe_span(pipe_piece_count(a, a.red_piece), e0, a.unit_elems);
            const size_t at = (MODE == 3 ? (size_t)a.red_piece * a.in_stride : 0) + e0 * es;
            const char *base[MAXR];
#pragma unroll
            for (int p = 0; p < MAXR; p++)
                base[p] = p == a.rank ? a.in + (size_t)a.red_piece * a.in_stride + e0 * es
                                      : here + (size_t)((p < nranks ? p : 0) % places) * piece;
            char *o = static_cast<char *>(a.out) + at;
            pipe_reduce<Op>(base, nranks, o, ne, g.tid, g.nth);
            if (MODE == 3) {
                /* the block's result (visible to the block after the barrier) into every peer's position; split,
                 * once the position is free there (unsplit, this block's produce of unit j waited for it) */
                if (a.split > 0 && g.tid == 0 && j >= (size_t)depth &&
                    !pipe_wait(a, mine, WEFT_CK_PIPE_DN, t.pos, a.cons_mask, t.v - (unsigned long long)depth * G))
                    *g.ok = 0;
                g.sync();
                if (!*g.ok)
                    return false;
                for (int c = 0; c < nranks; c++)
                    if (a.cons_mask >> c & 1)
                        copy_any(pick_region(a, c) + WEFT_CK_HDR + (size_t)t.pos * posbytes +
                                     (size_t)((nranks + a.rank) % places) * piece,
                                 o, ne * es, g.tid, g.nth);
                __threadfence_system();
                g.sync();
                if (g.tid == 0) {
                    pipe_post(a, WEFT_CK_PIPE_RDY2, t.pos, a.cons_mask, t.v);
                    if (!pipe_wait(a, mine, WEFT_CK_PIPE_RDY2, t.pos, a.read_mask, t.v))
                        *g.ok = 0;
                }
                g.sync();
                if (!*g.ok)
                    return false;
                for (int p = 0; p < nranks; p++)
                    if (a.read_mask >> p & 1)
                        copy_any(static_cast<char *>(a.out) + (size_t)p * a.in_stride + e0 * es,
                                 here + (size_t)((nranks + p) % places) * piece,
                                 pipe_span(pipe_piece_count(a, p), e0, a.unit_elems) * es, g.tid, g.nth);
            }
        } else {
            const size_t ne = pipe_span(a.count, e0, a.unit_elems);
#pragma unroll
            for (int p = 0; p < MAXR; p++) {
                if (p >= nranks)
                    continue;
                if (a.read_mask >> p & 1)
                    copy_any(a.dst[p] + e0 * es, here + (size_t)(p % places) * piece, ne * es, g.tid, g.nth);
                else if (p == a.rank && a.copy_self)
                    copy_any(a.dst[p] + e0 * es, a.in + (size_t)a.copy_piece * a.in_stride + e0 * es, ne * es, g.tid,
                             g.nth);
            }
        }
        g.sync();
        if (g.tid == 0)
            pipe_post(a, WEFT_CK_PIPE_DN, t.pos, a.read_mask, t.v);
        return true;
    };
    if (tid == 0)
        made_s = 0; /* published by pipe_loop's first barrier */
    const long long units = pipe_loop(a, depth, a.split, ok_s, produce, consume);
    /* every consumer read this block's last units (the next call may push at once) */
    if (units >= 0 && a.stage_on && tid == 0)
        pipe_drain(a, mine, a.cons_mask, seq, (size_t)units, depth);
}

/* The pushed bcast (kernels.h: weft_ck_pipe_args, mode 4): the root scatters each unit's parts, each other
 * rank pushes its part on to the rest. Same positions, flags and waits as pipe_push. */
__device__ __forceinline__ void pipe_bcast_push(const weft_ck_pipe_args_t &a)
{
    __shared__ int ok_s[2];
    const unsigned long long seq = *a.ctl.counter;
    if (seq & WEFT_CK_POISON)
        return;
    const unsigned G = gridDim.x, tid = threadIdx.x;
    const int nranks = a.nranks < MAXR ? a.nranks : MAXR, depth = a.depth < 1 ? 1 : a.depth;
    const int me = a.rank, root = a.root, places = a.pos_pieces < 1 ? 1 : a.pos_pieces;
    const unsigned all = (1u << nranks) - 1, others = all & ~(1u << me) & ~(1u << root);
    const unsigned writes_to = me == root ? all & ~(1u << root) : others; /* whose positions this rank fills */
    const int k = me < root ? me : me - 1;                                  /* this rank's part (not root) */
    char *mine = pick_region(a, me), *out = static_cast<char *>(a.out);
    const size_t piece = a.unit_elems, posbytes = piece * (size_t)places;
    /* every rank: the position is free where this rank writes; the root: scatter part kc to its owner c */
    auto produce = [&](size_t j, const pipe_grp_t &g) -> bool {
        const pipe_unit_t t = pipe_unit(a, seq, j, depth);
        const size_t at = (size_t)t.pos * posbytes + WEFT_CK_HDR;
        if (!pipe_wait_all(a, g, j < (size_t)depth, mine, WEFT_CK_PIPE_DN, t.pos, writes_to,
                           t.v - (unsigned long long)depth * G))
            return false;
        if (me != root)
            return true;
        for (int c = 0; c < nranks; c++) {
            if (c == root)
                continue;
            const int kc = c < root ? c : c - 1;
            copy_any(pick_region(a, c) + at, a.in + (size_t)kc * a.in_stride + t.e0,
                     pipe_span(pipe_piece_count(a, kc), t.e0, a.unit_elems), g.tid, g.nth);
        }
        __threadfence_system();
        g.sync();
        if (g.tid == 0)
            pipe_post(a, WEFT_CK_PIPE_RDY, t.pos, writes_to, t.v);
        return true;
    };
    /* every other rank: its part to its output and on to every other non-root rank, then theirs */
    auto consume = [&](size_t j, const pipe_grp_t &g) -> bool {
        if (me == root)
            return true;
        const pipe_unit_t t = pipe_unit(a, seq, j, depth);
        const size_t e0 = t.e0, at = (size_t)t.pos * posbytes + WEFT_CK_HDR;
        char *here = mine + at;
        const size_t ne = pipe_span(pipe_piece_count(a, k), e0, a.unit_elems);
        if (!pipe_wait_all(a, g, false, mine, WEFT_CK_PIPE_RDY, t.pos, 1u << root, t.v))
            return false;
        copy_any(out + (size_t)k * a.in_stride + e0, here, ne, g.tid, g.nth);
        for (int q = 0; q < nranks; q++)
            if (others >> q & 1)
                copy_any(pick_region(a, q) + at + (size_t)(1 + k) * piece, here, ne, g.tid, g.nth);
        __threadfence_system();
        g.sync();
        if (g.tid == 0) {
            pipe_post(a, WEFT_CK_PIPE_RDY2, t.pos, others, t.v);
            if (!pipe_wait(a, mine, WEFT_CK_PIPE_RDY2, t.pos, others, t.v))
                *g.ok = 0;
        }
        g.sync();
        if (!*g.ok)
            return false;
        for (int q = 0; q < nranks; q++) {
            if (!(others >> q & 1))
                continue;
            const int kq = q < root ? q : q - 1;
            copy_any(out + (size_t)kq * a.in_stride + e0, here + (size_t)(1 + kq) * piece,
                     pipe_span(pipe_piece_count(a, kq), e0, a.unit_elems), g.tid, g.nth);
        }
        g.sync();
        if (g.tid == 0)
            pipe_post(a, WEFT_CK_PIPE_DN, t.pos, others | 1u << root, t.v);
        return true;
    };
    const long long units = pipe_loop(a, depth, 0, ok_s, produce, consume);
    /* every rank this one wrote into read its last units */
    if (units >= 0 && tid == 0)
        pipe_drain(a, mine, writes_to, seq, (size_t)units, depth);
}

/* A ring's partial results (modes 7 and 8): an average folds plain sums until its last step divides. */
template <class Op> struct RingPart {
    typedef Op T;
};
template <class N> struct RingPart<OpAvg<N>> {
    typedef OpSum<N> T;
};

/* The ring (kernels.h: weft_ck_pipe_args, modes 5-8): a block's units go round the ranks in steps, each step
 * of each unit one item: take the previous rank's piece out of this rank's position (rdy), use it, store what
 * goes on into the next rank's position (once free there: dn), announce. So every store crosses one link, to
 * the next rank. A block runs its units `ahead` at a time, step by step (a step's item waits for what the
 * previous rank stored one step earlier, `ahead` items before). */
template <class Op, int MODE> __device__ __forceinline__ void pipe_ring(const weft_ck_pipe_args_t &a)
{
    __shared__ int ok_s;
    const unsigned long long seq = *a.ctl.counter;
    if (seq & WEFT_CK_POISON)
        return;
    typedef typename RingPart<Op>::T Part;
    const size_t G = gridDim.x, b = blockIdx.x;
    const unsigned tid = threadIdx.x, nth = blockDim.x;
    const int n = a.nranks < MAXR ? a.nranks : MAXR, me = a.rank, depth = a.depth < 1 ? 1 : a.depth;
    const int next = me + 1 < n ? me + 1 : 0, prev = me > 0 ? me - 1 : n - 1;
    const int c = (me - a.root + n) % n; /* mode 6: this rank's place in the chain from the root */
    const int S = MODE == 6 ? 1 : MODE == 8 ? 2 * n - 1 : n;
    const size_t K = a.ahead > 0 ? (size_t)a.ahead : 1;
    const size_t J = a.units > b ? (a.units - b + G - 1) / G : 0;
    const size_t es = a.esize, piece = a.unit_elems * es;
    char *mine = pick_region(a, me), *nxt = pick_region(a, next), *out = static_cast<char *>(a.out);
    const bool self = MODE == 5 && a.copy_self;
    if (tid == 0)
        ok_s = 1;
    __syncthreads();
    size_t si = 0, ri = 0; /* the items this block sent to the next rank, took from the previous one */
    auto pos_of = [&](size_t i) -> int { return (int)(b + (i % (size_t)depth) * G); };
    auto val = [&](size_t i) -> unsigned long long { return (seq << 24) | (unsigned long long)(i + 1); };
    for (size_t j0 = 0; j0 < J; j0 += K) {
        const size_t kk = J - j0 < K ? J - j0 : K;
        for (int s = 0; s < S; s++)
            for (size_t k = 0; k < kk; k++) {
                const size_t e0 = (b + (j0 + k) * G) * a.unit_elems;
                const bool recv = MODE == 6 ? c > 0 : s > 0, send = MODE == 6 ? c < n - 1 : s < S - 1;
                const int rpos = pos_of(ri), spos = pos_of(si);
                if (tid == 0 &&
                    ((recv && !pipe_wait(a, mine, WEFT_CK_PIPE_RDY, rpos, 1u << prev, val(ri))) ||
                     (send && si >= (size_t)depth &&
                      !pipe_wait(a, mine, WEFT_CK_PIPE_DN, spos, 1u << next, val(si - (size_t)depth)))))
                    ok_s = 0;
                __syncthreads();
                if (!ok_s)
                    return;
                const char *from = mine + WEFT_CK_HDR + (size_t)rpos * piece; /* what the previous rank stored */
                char *to = nxt + WEFT_CK_HDR + (size_t)spos * piece;           /* where the next rank takes it */
                if (MODE == 5 || MODE == 6) { /* allgather: the block of rank me - s; bcast: the root's */
                    const size_t ne = pipe_span(a.count, e0, a.unit_elems);
                    const char *src = recv ? from : a.in + e0;
                    char *dst = MODE == 5 ? pick(a.dst, (me - s + n) % n) + e0 : out + e0;
                    if (send)
                        copy_any(to, src, ne, tid, nth);
                    if (recv || self)
                        copy_any(dst, src, ne, tid, nth);
                } else if (s < n) { /* reduce_scatter (and allreduce's first n steps): block me - s - 1 */
                    const int blk = (me - s - 1 + 2 * n) % n;
                    const size_t ne = pipe_span(MODE == 8 ? pipe_piece_count(a, blk) : a.count, e0, a.unit_elems);
                    const char *base[MAXR];
#pragma unroll
                    for (int p = 0; p < MAXR; p++)
                        base[p] = p == 1 ? a.in + (size_t)blk * a.in_stride + e0 * es : from;
                    if (s == 0) {
                        copy_any(to, base[1], ne * es, tid, nth);
                    } else if (s < n - 1) { /* the previous ranks' partial, then this rank's input */
                        reduce_range_n<Part, 2, 4>(base, to, ne, tid, nth);
                    } else { /* the last: this rank's own block, every rank folded in */
                        char *o = out + (MODE == 8 ? (size_t)me * a.in_stride : 0) + e0 * es;
                        reduce_range_n<Op, 2, 4>(base, o, ne, tid, nth, n);
                        if (send) {
                            __syncthreads();
                            copy_any(to, o, ne * es, tid, nth);
                        }
                    }
                } else { /* allreduce's last n - 1 steps: the reduced part of rank me - t goes round */
                    const int o = (me - (s - n + 1) + n) % n;
                    const size_t ne = pipe_span(pipe_piece_count(a, o), e0, a.unit_elems) * es;
                    if (send)
                        copy_any(to, from, ne, tid, nth);
                    copy_any(out + (size_t)o * a.in_stride + e0 * es, from, ne, tid, nth);
                }
                /* the block's stores, ordered before thread 0's fence by the barrier (cumulative: one fence
                 * covers them; measured on four H200s, 1.01-1.04x faster than a fence in every thread) */
                __syncthreads();
                if (tid == 0) {
                    if (send) {
                        __threadfence_system();
                        pipe_post(a, WEFT_CK_PIPE_RDY, spos, 1u << next, val(si));
                    }
                    if (recv)
                        pipe_post(a, WEFT_CK_PIPE_DN, rpos, 1u << prev, val(ri));
                }
                si += send;
                ri += recv;
            }
    }
    /* the next rank took this block's last items (the next call may store at once) */
    if (tid == 0)
        for (size_t x = si > (size_t)depth ? si - (size_t)depth : 0; x < si; x++)
            if (!pipe_wait(a, mine, WEFT_CK_PIPE_DN, pos_of(x), 1u << next, val(x)))
                break;
}

template <class Op> __device__ __forceinline__ void pipe_any(const weft_ck_pipe_args_t &a)
{
    if (a.mode == 7)
        pipe_ring<Op, 7>(a);
    else if (a.mode == 8)
        pipe_ring<Op, 8>(a);
    else if (!a.push)
        pipe_run<Op, true>(a);
    else if (a.mode == 3)
        pipe_push<Op, 3>(a);
    else
        pipe_push<Op, 1>(a);
}

template <class N> __device__ __forceinline__ void pipe_dispatch(const weft_ck_pipe_args_t &a)
{
    switch (a.op) {
    case 0: pipe_any<OpSum<N>>(a); break;
    case 1: pipe_any<OpProd<N>>(a); break;
    case 2: pipe_any<OpMin<N>>(a); break;
    case 3: pipe_any<OpMax<N>>(a); break;
    case 4: pipe_any<OpAvg<N>>(a); break;
    default: break;
    }
}

/* ---- the LL kernel (kernels.h: weft_ck_ll_args) ----------------------------- */
__device__ __forceinline__ void st_ll(uint4 *p, unsigned d0, unsigned d1, unsigned f)
{
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d0), "r"(f), "r"(d1), "r"(f)
                 : "memory");
}

__device__ __forceinline__ uint4 ld_ll(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

/* Line l (8 bytes) of a buffer of `bytes` bytes; past the end: zeros. */
__device__ __forceinline__ uint2 ll_load8(const char *b, size_t l, size_t bytes)
{
    size_t off = l * 8;
    if (off + 8 <= bytes && ((uintptr_t)(b + off) & 7) == 0)
        return *reinterpret_cast<const uint2 *>(b + off);
    union {
        uint2 u;
        unsigned char c[8];
    } t;
    t.u = make_uint2(0, 0);
    for (int k = 0; k < 8 && off + k < bytes; k++)
        t.c[k] = (unsigned char)b[off + k];
    return t.u;
}

__device__ __forceinline__ void ll_store8(char *b, size_t l, size_t bytes, uint2 v)
{
    size_t off = l * 8;
    if (off + 8 <= bytes && ((uintptr_t)(b + off) & 7) == 0) {
        *reinterpret_cast<uint2 *>(b + off) = v;
        return;
    }
    union {
        uint2 u;
        unsigned char c[8];
    } t;
    t.u = v;
    for (int k = 0; k < 8 && off + k < bytes; k++)
        b[off + k] = (char)t.c[k];
}

/* Thread-local: *x holds a load of the line at src; spins until it carries flag f in both halves; false when the
 * abort word ended the wait (the first thread to see it names peer p in ctl.error). */
__device__ __forceinline__ bool ll_wait(const weft_ck_ll_args_t &a, const uint4 *src, unsigned f, int p,
                                        volatile int &abort_s, uint4 *x)
{
    unsigned spins = 0;
    while (x->y != f || x->w != f) {
        if ((++spins & 1023) == 0 && (abort_s || *a.ctl.abort)) {
            if (!abort_s) {
                *a.ctl.error = 1 + p;
                __threadfence_system();
            }
            abort_s = 1;
            return false;
        }
        *x = ld_ll(src);
    }
    return true;
}

template <class Op, bool REDUCE> __device__ __forceinline__ void ll_run(const weft_ck_ll_args_t &a)
{
    typedef typename Op::S S;
    const int E = 8 / (int)sizeof(S);
    union Line {
        uint2 u;
        S e[8 / sizeof(S)];
    };
    __shared__ volatile int abort_s; /* volatile: re-read in the polls */
    const int n = a.nranks < 1 ? 1 : a.nranks > MAXR ? MAXR : a.nranks, me = a.rank;
    const unsigned others = ((1u << n) - 1) & ~(1u << me), send = a.send_mask & others, recv = a.recv_mask & others;
    const size_t tid = threadIdx.x, gid = (size_t)blockIdx.x * blockDim.x + tid, nth = (size_t)gridDim.x * blockDim.x;
    const size_t bytes = a.count * a.esize, nl = (bytes + 7) / 8;
    /* this thread's first line of every piece it sends, loaded before the counter's value is known: the two
     * loads' latencies overlap instead of adding up (the whole of a small call's data) */
    uint2 first[MAXR];
    if (gid < nl) {
        const void *last = NULL;
#pragma unroll
        for (int p = 0; p < MAXR; p++) {
            if (p > 0)
                first[p] = first[p - 1];
            if ((send >> p & 1) && a.src[p] != last)
                first[p] = ll_load8(static_cast<const char *>(a.src[p]), gid, bytes), last = a.src[p];
        }
    }
    const unsigned long long c0 = *a.ctl.counter;
    if (c0 & WEFT_CK_POISON)
        return;
    const unsigned long long seq = c0 + 1;
    const unsigned f = (unsigned)seq;
    if (tid == 0)
        abort_s = 0;
    __syncthreads();
    const size_t lane = (size_t)(seq & 1) * (size_t)n, slot = a.slot; /* this parity's first sender; its lines */
    /* a token (line 0, no data) to every peer this rank sends no piece to: every peer hears from every other in
     * every call, which is what lets a sender overwrite its lines two calls later */
    if (gid == 0)
#pragma unroll
        for (int p = 0; p < MAXR; p++)
            if ((others & ~send) >> p & 1)
                st_ll(reinterpret_cast<uint4 *>(a.scratch[p] + WEFT_CK_LL_OFF + (lane + me) * slot), 0, 0,
                      f);
    /* push: every line of peer p's piece into p's region, at this rank's place */
    for (size_t l = gid; l < nl; l += nth) {
        const void *last = NULL;
        uint2 d = make_uint2(0, 0);
#pragma unroll
        for (int p = 0; p < MAXR; p++)
            if (send >> p & 1) {
                if (l == gid)
                    d = first[p];
                else if (a.src[p] != last)
                    d = ll_load8(static_cast<const char *>(a.src[p]), l, bytes), last = a.src[p];
                st_ll(reinterpret_cast<uint4 *>(a.scratch[p] + WEFT_CK_LL_OFF + (lane + me) * slot) + l,
                      d.x, d.y, f);
            }
    }
    char *mine = a.scratch[0];
    const char *own = static_cast<const char *>(a.src[0]);
    char *own_dst = static_cast<char *>(a.dst[0]);
#pragma unroll
    for (int p = 1; p < MAXR; p++)
        if (p == me)
            mine = a.scratch[p], own = static_cast<const char *>(a.src[p]), own_dst = static_cast<char *>(a.dst[p]);
    /* copy: this rank's own piece too, unless it is in place */
    const bool self_copy = !REDUCE && own_dst && own_dst != own;
    /* take the pieces: reduce every rank's, own included, in rank order, where this rank has a result (dst[0]);
     * or copy each out. A line's loads from all peers go out together (one round trip, not one per peer). */
    const bool take = REDUCE ? a.dst[0] != NULL : recv || self_copy;
    for (size_t l = gid; take && l < nl; l += nth) {
        uint4 x[MAXR];
#pragma unroll
        for (int p = 0; p < MAXR; p++)
            if (recv >> p & 1)
                x[p] = ld_ll(reinterpret_cast<const uint4 *>(mine + WEFT_CK_LL_OFF + (lane + p) * slot) + l);
        Line w[MAXR];
#pragma unroll
        for (int p = 0; p < MAXR; p++) {
            if (p >= n)
                continue;
            if (p == me) {
                if (REDUCE)
                    w[p].u = ll_load8(own, l, bytes);
                else if (self_copy)
                    ll_store8(own_dst, l, bytes, ll_load8(own, l, bytes));
                continue;
            }
            if (!(recv >> p & 1))
                continue;
            if (!ll_wait(a, reinterpret_cast<const uint4 *>(mine + WEFT_CK_LL_OFF + (lane + p) * slot) + l,
                         f, p, abort_s, &x[p]))
                goto done;
            w[p].u = make_uint2(x[p].x, x[p].z);
            if (!REDUCE)
                ll_store8(static_cast<char *>(a.dst[p]), l, bytes, w[p].u);
        }
        if (REDUCE) {
            Line r;
#pragma unroll
            for (int j = 0; j < E; j++) {
                typename Op::A acc = Op::init(w[0].e[j]);
#pragma unroll
                for (int p = 1; p < MAXR; p++)
                    if (p < n)
                        acc = Op::step(acc, w[p].e[j]);
                r.e[j] = Op::fin(acc, n);
            }
            ll_store8(static_cast<char *>(a.dst[0]), l, bytes, r.u);
        }
    }
    /* the tokens of the peers that send this rank no piece */
    if (gid == 0)
#pragma unroll
        for (int p = 0; p < MAXR; p++) {
            if (!((others & ~recv) >> p & 1))
                continue;
            const uint4 *t = reinterpret_cast<const uint4 *>(mine + WEFT_CK_LL_OFF + (lane + p) * slot);
            uint4 x = ld_ll(t);
            if (!ll_wait(a, t, f, p, abort_s, &x))
                break;
        }
done:
    /* the last block to finish moves the counter, poisoned if any block's wait was ended by the abort word; every
     * block has read the counter by then (its value decided a branch before the block's count went out, so no
     * fence: one block, the common case, pays nothing) */
    __syncthreads();
    next_may_launch(); /* every thread of the block is past its waits */
    if (tid == 0 && gridDim.x == 1)
        *a.ctl.counter = abort_s ? (c0 | WEFT_CK_POISON) : seq;
    else if (tid == 0) {
        unsigned long long *blocks_done = reinterpret_cast<unsigned long long *>(mine + WEFT_CK_LL_DONE);
        const unsigned long long was = atomicAdd(blocks_done, abort_s ? (1ull << 32) + 1 : 1ull);
        if ((was & 0xffffffffull) + 1 == gridDim.x) {
            *blocks_done = 0;
            *a.ctl.counter = abort_s || (was >> 32) ? (c0 | WEFT_CK_POISON) : seq;
        }
    }
}

template <class N> __device__ __forceinline__ void ll_dispatch(const weft_ck_ll_args_t &a)
{
    switch (a.op) {
    case 0: ll_run<OpSum<N>, true>(a); break;
    case 1: ll_run<OpProd<N>, true>(a); break;
    case 2: ll_run<OpMin<N>, true>(a); break;
    case 3: ll_run<OpMax<N>, true>(a); break;
    case 4: ll_run<OpAvg<N>, true>(a); break;
    default: break;
    }
}
} // namespace

extern "C" __global__ void weft_ck_barrier(weft_ck_barrier_args_t a)
{
    stream_order();
    barrier_block(a);
}

extern "C" __global__ void weft_ck_copy(weft_ck_copy_args_t a)
{
    stream_order();
    const int y = blockIdx.y;
    if (y >= a.n || y >= MAXR)
        return;
    copy_desc(a, y, grid_tid(), grid_threads());
}

extern "C" __global__ void weft_ck_pipe_copy(weft_ck_pipe_args_t a)
{
    stream_order();
    if (a.mode == 5)
        pipe_ring<OpSum<IntType<uint8_t>>, 5>(a);
    else if (a.mode == 6)
        pipe_ring<OpSum<IntType<uint8_t>>, 6>(a);
    else if (a.push && a.mode == 4)
        pipe_bcast_push(a);
    else if (a.push)
        pipe_push<OpSum<IntType<uint8_t>>, 2>(a);
    else
        pipe_run<OpSum<IntType<uint8_t>>, false>(a);
}

/* The LL kernels launch 512 threads a block (cuda.c): registers within that */
extern "C" __global__ void __launch_bounds__(512) weft_ck_ll_copy(weft_ck_ll_args_t a)
{
    stream_order();
    ll_run<OpSum<IntType<uint8_t>>, false>(a);
}

extern "C" __global__ void weft_ck_fused_copy(weft_ck_fused_args_t a)
{
    stream_order();
    stage_block(a);
    if (!barrier_block(a.bar) || a.mode != 2)
        return;
#pragma unroll
    for (int y = 0; y < MAXR; y++)
        if (y < a.cp.n)
            copy_desc(a.cp, y, threadIdx.x, blockDim.x);
}

#define WEFT_CK_REDUCE(name, N)                                                                                        \
    extern "C" __global__ void weft_ck_reduce_##name(weft_ck_reduce_args_t a)                                          \
    {                                                                                                                  \
        stream_order();                                                                                                \
        reduce_dispatch<N>(a);                                                                                         \
    }                                                                                                                  \
    extern "C" __global__ void weft_ck_fused_reduce_##name(weft_ck_fused_args_t a)                                     \
    {                                                                                                                  \
        stream_order();                                                                                                \
        stage_block(a);                                                                                                \
        if (barrier_block(a.bar) && a.mode == 1)                                                                       \
            reduce_dispatch<N>(a.red);                                                                                 \
    }                                                                                                                  \
    extern "C" __global__ void weft_ck_pipe_reduce_##name(weft_ck_pipe_args_t a)                                       \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_dispatch<N>(a);                                                                                           \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(512) weft_ck_ll_##name(weft_ck_ll_args_t a)                           \
    {                                                                                                                  \
        stream_order();                                                                                                \
        ll_dispatch<N>(a);                                                                                             \
    }
WEFT_CK_REDUCE(i8, IntType<int8_t>)
WEFT_CK_REDUCE(u8, IntType<uint8_t>)
WEFT_CK_REDUCE(i16, IntType<int16_t>)
WEFT_CK_REDUCE(u16, IntType<uint16_t>)
WEFT_CK_REDUCE(i32, IntType<int32_t>)
WEFT_CK_REDUCE(u32, IntType<uint32_t>)
WEFT_CK_REDUCE(i64, IntType<int64_t>)
WEFT_CK_REDUCE(u64, IntType<uint64_t>)
WEFT_CK_REDUCE(f16, F16Type)
WEFT_CK_REDUCE(bf16, BF16Type)
WEFT_CK_REDUCE(f32, F32Type)
WEFT_CK_REDUCE(f64, F64Type)
