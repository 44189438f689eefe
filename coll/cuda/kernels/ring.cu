/* The ring (kernels.h: weft_ck_pipe_args, modes 5-8), the pipelined
 * kernels' form for the largest calls: weft_ck_ring_allgather (mode 5),
 * weft_ck_ring_bcast (6), weft_ck_ring_reduce_scatter_<type>[_<op>] (7) and
 * weft_ck_ring_allreduce_<type>[_<op>] (8). */
#include "coll/cuda/kernels/pipe.cuh"

namespace {

/* A ring's partial results (modes 7 and 8): an average folds plain sums until its last step divides. */
template <class Op> struct RingPart {
    typedef Op T;
};
template <class N> struct RingPart<OpAvg<N>> {
    typedef OpSum<N> T;
};

/* A reduce step's fold (modes 7 and 8): the partial of the previous ranks and this rank's input into o; the
 * last step folds with Op (an average divides by n), the others with its partial's op. */
template <class Op>
__device__ __forceinline__ void ring_fold(bool last, const char *const (&base)[MAXR], void *o, size_t ne,
                                          size_t tid, size_t nth, int n)
{
    typedef typename RingPart<Op>::T Part;
    if constexpr (std::is_same<Part, Op>::value) /* one fold in the code: fin_n matters to avg only */
        reduce_range_n<Op, 2, 4>(base, o, ne, tid, nth, n);
    else if (last)
        reduce_range_n<Op, 2, 4>(base, o, ne, tid, nth, n);
    else
        reduce_range_n<Part, 2, 4>(base, o, ne, tid, nth);
}

/* ring_fold with Op inlined (a pair's kernel), or with the call's op, through that op's own compiled copy (a
 * type's kernel: types.cuh, ck_each_op). */
template <class Op> struct RingFold {
    __device__ __forceinline__ void operator()(bool last, const char *const (&base)[MAXR], void *o, size_t ne,
                                               size_t tid, size_t nth, int n) const
    {
        ring_fold<Op>(last, base, o, ne, tid, nth, n);
    }
};

template <class Op>
__device__ __noinline__ void ring_fold_call(bool last, const char *const (&base)[MAXR], void *o, size_t ne,
                                            size_t tid, size_t nth, int n)
{
    ring_fold<Op>(last, base, o, ne, tid, nth, n);
}

template <class N> struct RingFoldOp {
    int op;
    __device__ __forceinline__ void operator()(bool last, const char *const (&base)[MAXR], void *o, size_t ne,
                                               size_t tid, size_t nth, int n) const
    {
        ck_each_op<N>(op, [&](auto t) { ring_fold_call<typename decltype(t)::type>(last, base, o, ne, tid, nth, n); });
    }
};

/* The ring (kernels.h: weft_ck_pipe_args, modes 5-8): a block's units go round the ranks in steps, each step
 * of each unit one item: take the previous rank's piece out of this rank's position (rdy), use it, store what
 * goes on into the next rank's position (once free there: dn), announce. So every store crosses one link, to
 * the next rank. A block runs its units `ahead` at a time, step by step (a step's item waits for what the
 * previous rank stored one step earlier, `ahead` items before). */
template <int MODE, class F> __device__ __forceinline__ void pipe_ring(const weft_ck_pipe_args_t &a, F fold)
{
    __shared__ int ok_s;
    const unsigned long long seq = *a.ctl.counter;
    if (seq & WEFT_CK_POISON)
        return;
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
                    /* the last step: this rank's own block, every rank folded in */
                    const bool last = s == n - 1;
                    char *o = last ? out + (MODE == 8 ? (size_t)me * a.in_stride : 0) + e0 * es : to;
                    if (s == 0)
                        copy_any(to, base[1], ne * es, tid, nth);
                    else /* the previous ranks' partial, then this rank's input */
                        fold(last, base, o, ne, tid, nth, n);
                    if (s > 0 && last && send) {
                        __syncthreads();
                        copy_any(to, o, ne * es, tid, nth);
                    }
                } else { /* allreduce's last n - 1 steps: the reduced part of rank me - t goes round */
                    const int o = (me - (s - n + 1) + n) % n;
                    const size_t ne = pipe_span(pipe_piece_count(a, o), e0, a.unit_elems) * es;
                    if (send)
                        copy_any(to, from, ne, tid, nth);
                    copy_any(out + (size_t)o * a.in_stride + e0 * es, from, ne, tid, nth);
                }
                /* the block's stores, ordered before thread 0's fence by the barrier (cumulative: one fence
                 * covers them, cheaper than a fence in every thread) */
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

} // namespace

extern "C" __global__ void weft_ck_ring_allgather(weft_ck_pipe_args_t a)
{
    stream_order();
    pipe_ring<5>(a, RingFold<OpSum<IntType<uint8_t>>>());
}

extern "C" __global__ void weft_ck_ring_bcast(weft_ck_pipe_args_t a)
{
    stream_order();
    pipe_ring<6>(a, RingFold<OpSum<IntType<uint8_t>>>());
}

#define WEFT_CK_RING_REDUCE_TYPE(t, ...)                                                                               \
    extern "C" __global__ void weft_ck_ring_reduce_scatter_##t(weft_ck_pipe_args_t a)                                 \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_ring<7>(a, RingFoldOp<ck_type_##t>{a.op});                                                                \
    }                                                                                                                  \
    extern "C" __global__ void weft_ck_ring_allreduce_##t(weft_ck_pipe_args_t a)                                      \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_ring<8>(a, RingFoldOp<ck_type_##t>{a.op});                                                                \
    }
WEFT_CK_INSTANTIATE_TYPES(WEFT_CK_RING_REDUCE_TYPE)

#define WEFT_CK_RING_REDUCE(t, o)                                                                                      \
    extern "C" __global__ void weft_ck_ring_reduce_scatter_##t##_##o(weft_ck_pipe_args_t a)                           \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_ring<7>(a, RingFold<ck_op_##o<ck_type_##t>>());                                                           \
    }                                                                                                                  \
    extern "C" __global__ void weft_ck_ring_allreduce_##t##_##o(weft_ck_pipe_args_t a)                                \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_ring<8>(a, RingFold<ck_op_##o<ck_type_##t>>());                                                           \
    }
WEFT_CK_INSTANTIATE(WEFT_CK_RING_REDUCE)
