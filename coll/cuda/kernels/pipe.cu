/* The pipelined kernels, staged (kernels.h: weft_ck_pipe_args, modes 1
 * and 2 without push): weft_ck_pipe_copy, weft_ck_pipe_reduce_<type> and
 * weft_ck_pipe_reduce_<type>_<op> (hot pairs). */
#include "coll/cuda/kernels/pipe.cuh"

namespace {

template <bool REDUCE, class F> __device__ __forceinline__ void pipe_run(const weft_ck_pipe_args_t &a, F fold)
{
    __shared__ int ok_s[2];
    /* the barrier before ended by the abort word (it poisoned the counter):
     * nothing to do. Device memory: the abort word itself is host memory,
     * and a read of it from every warp of every block costs a PCIe round
     * trip each, serialised. */
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
            fold(base, nranks, static_cast<char *>(a.out) + t.e0 * a.esize, ne, g.tid, g.nth);
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

} // namespace

extern "C" __global__ void weft_ck_pipe_copy(weft_ck_pipe_args_t a)
{
    stream_order();
    pipe_run<false>(a, PipeFold<OpSum<IntType<uint8_t>>>());
}

#define WEFT_CK_PIPE_REDUCE_TYPE(t, ...)                                                                               \
    extern "C" __global__ void weft_ck_pipe_reduce_##t(weft_ck_pipe_args_t a)                                         \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_run<true>(a, PipeFoldOp<ck_type_##t>{a.op});                                                              \
    }
WEFT_CK_INSTANTIATE_TYPES(WEFT_CK_PIPE_REDUCE_TYPE)

#define WEFT_CK_PIPE_REDUCE(t, o)                                                                                      \
    extern "C" __global__ void weft_ck_pipe_reduce_##t##_##o(weft_ck_pipe_args_t a)                                   \
    {                                                                                                                  \
        stream_order();                                                                                                \
        pipe_run<true>(a, PipeFold<ck_op_##o<ck_type_##t>>());                                                         \
    }
WEFT_CK_INSTANTIATE(WEFT_CK_PIPE_REDUCE)
