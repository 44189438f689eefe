/* The reduction loops: out = op over the sources, element by element, in
 * source order (every rank computes the same bits), 16-byte vectors where
 * the addresses allow. */
#ifndef WEFT_COLL_CUDA_KERNELS_REDUCE_CUH
#define WEFT_COLL_CUDA_KERNELS_REDUCE_CUH

#include "coll/cuda/kernels/types.cuh"

namespace {

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

} // namespace

#endif
