/* The LL kernels (kernels.h: weft_ck_ll_args): weft_ck_ll_copy,
 * weft_ck_ll_reduce_<type> and weft_ck_ll_reduce_<type>_<op> (hot pairs), a
 * small collective in one launch. */
#include "coll/cuda/kernels/types.cuh"

namespace {

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

/* One line's fold: op over the n ranks' lines w[0..n) in rank order, element by element. */
template <class Op> __device__ __forceinline__ uint2 ll_fold(const uint2 (&w)[MAXR], int n)
{
    typedef typename Op::S S;
    const int E = 8 / (int)sizeof(S);
    union Line {
        uint2 u;
        S e[8 / sizeof(S)];
    };
    Line v[MAXR], r;
#pragma unroll
    for (int p = 0; p < MAXR; p++)
        if (p < n)
            v[p].u = w[p];
#pragma unroll
    for (int j = 0; j < E; j++) {
        typename Op::A acc = Op::init(v[0].e[j]);
#pragma unroll
        for (int p = 1; p < MAXR; p++)
            if (p < n)
                acc = Op::step(acc, v[p].e[j]);
        r.e[j] = Op::fin(acc, n);
    }
    return r.u;
}

/* ll_fold with Op inlined (a pair's kernel), or with the call's op, through that op's own compiled copy (a
 * type's kernel: types.cuh, ck_each_op). */
template <class Op> struct LLFold {
    __device__ __forceinline__ uint2 operator()(const uint2 (&w)[MAXR], int n) const { return ll_fold<Op>(w, n); }
};

template <class Op> __device__ __noinline__ uint2 ll_fold_call(const uint2 (&w)[MAXR], int n)
{
    return ll_fold<Op>(w, n);
}

template <class N> struct LLFoldOp {
    int op;
    __device__ __forceinline__ uint2 operator()(const uint2 (&w)[MAXR], int n) const
    {
        uint2 r = make_uint2(0, 0);
        ck_each_op<N>(op, [&](auto t) { r = ll_fold_call<typename decltype(t)::type>(w, n); });
        return r;
    }
};

template <bool REDUCE, class F> __device__ __forceinline__ void ll_run(const weft_ck_ll_args_t &a, F fold)
{
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
        uint2 w[MAXR];
#pragma unroll
        for (int p = 0; p < MAXR; p++) {
            if (p >= n)
                continue;
            if (p == me) {
                if (REDUCE)
                    w[p] = ll_load8(own, l, bytes);
                else if (self_copy)
                    ll_store8(own_dst, l, bytes, ll_load8(own, l, bytes));
                continue;
            }
            if (!(recv >> p & 1))
                continue;
            if (!ll_wait(a, reinterpret_cast<const uint4 *>(mine + WEFT_CK_LL_OFF + (lane + p) * slot) + l,
                         f, p, abort_s, &x[p]))
                goto done;
            w[p] = make_uint2(x[p].x, x[p].z);
            if (!REDUCE)
                ll_store8(static_cast<char *>(a.dst[p]), l, bytes, w[p]);
        }
        if (REDUCE)
            ll_store8(static_cast<char *>(a.dst[0]), l, bytes, fold(w, n));
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

} // namespace

/* The LL kernels launch 512 threads a block (cuda.c): registers within that */
extern "C" __global__ void __launch_bounds__(512) weft_ck_ll_copy(weft_ck_ll_args_t a)
{
    stream_order();
    ll_run<false>(a, LLFold<OpSum<IntType<uint8_t>>>());
}

#define WEFT_CK_LL_REDUCE_TYPE(t, ...)                                                                                 \
    extern "C" __global__ void __launch_bounds__(512) weft_ck_ll_reduce_##t(weft_ck_ll_args_t a)                      \
    {                                                                                                                  \
        stream_order();                                                                                                \
        ll_run<true>(a, LLFoldOp<ck_type_##t>{a.op});                                                                  \
    }
WEFT_CK_INSTANTIATE_TYPES(WEFT_CK_LL_REDUCE_TYPE)

#define WEFT_CK_LL_REDUCE(t, o)                                                                                        \
    extern "C" __global__ void __launch_bounds__(512) weft_ck_ll_reduce_##t##_##o(weft_ck_ll_args_t a)                \
    {                                                                                                                  \
        stream_order();                                                                                                \
        ll_run<true>(a, LLFold<ck_op_##o<ck_type_##t>>());                                                             \
    }
WEFT_CK_INSTANTIATE(WEFT_CK_LL_REDUCE)
