/* The pipelined kernels, pushed (kernels.h: weft_ck_pipe_args, push,
 * modes 1-4): weft_ck_push_copy (mode 2), weft_ck_push_bcast (mode 4),
 * weft_ck_push_reduce_<type>[_<op>] (mode 1) and
 * weft_ck_push_allreduce_<type>[_<op>] (mode 3). */
#include "coll/cuda/kernels/pipe.cuh"

namespace {

/* The pushed form (kernels.h: weft_ck_pipe_args, push; MODE 1 reduce, 2 copy, 3 allreduce). Same
 * positions, flags and waits as pipe_run; only where the bytes go differs. */
template <int MODE, class F> __device__ __forceinline__ void pipe_push(const weft_ck_pipe_args_t &a, F fold)
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
            fold(base, nranks, o, ne, g.tid, g.nth);
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

} // namespace

extern "C" __global__ void weft_ck_push_copy(weft_ck_pipe_args_t a)
{
    stream_order();
    pipe_push<2>(a, PipeFold<OpSum<IntType<uint8_t>>>());
}

extern "C" __global__ void weft_ck_push_bcast(weft_ck_pipe_args_t a)
{
    stream_order();
    pipe_bcast_push(a);
}

#define WEFT_CK_PUSH_REDUCE_TYPE(t, ...)                                                                               \
    extern "C" __global__ void weft_ck_push_reduce_##t(weft_ck_pipe_args_t a)                                         \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_push<1>(a, PipeFoldOp<ck_type_##t>{a.op});                                                                \
    }                                                                                                                  \
    extern "C" __global__ void weft_ck_push_allreduce_##t(weft_ck_pipe_args_t a)                                      \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_push<3>(a, PipeFoldOp<ck_type_##t>{a.op});                                                                \
    }
WEFT_CK_INSTANTIATE_TYPES(WEFT_CK_PUSH_REDUCE_TYPE)

#define WEFT_CK_PUSH_REDUCE(t, o)                                                                                      \
    extern "C" __global__ void weft_ck_push_reduce_##t##_##o(weft_ck_pipe_args_t a)                                   \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_push<1>(a, PipeFold<ck_op_##o<ck_type_##t>>());                                                           \
    }                                                                                                                  \
    extern "C" __global__ void weft_ck_push_allreduce_##t##_##o(weft_ck_pipe_args_t a)                                \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_push<3>(a, PipeFold<ck_op_##o<ck_type_##t>>());                                                           \
    }
WEFT_CK_INSTANTIATE(WEFT_CK_PUSH_REDUCE)
