/* The slot protocol's reduce kernels (kernels.h: weft_ck_reduce_args,
 * weft_ck_fused_args): weft_ck_reduce_<type>_<op> and
 * weft_ck_fused_reduce_<type>_<op> (a small call's stage, barrier and reduce
 * in one launch of one block). */
#include "coll/cuda/kernels/barrier.cuh"
#include "coll/cuda/kernels/reduce.cuh"

namespace {

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

} // namespace

#define WEFT_CK_REDUCE(t, o)                                                                                           \
    extern "C" __global__ void weft_ck_reduce_##t##_##o(weft_ck_reduce_args_t a)                                      \
    {                                                                                                                  \
        stream_order();                                                                                                \
        reduce_run<ck_op_##o<ck_type_##t>>(a);                                                                         \
    }                                                                                                                  \
    extern "C" __global__ void weft_ck_fused_reduce_##t##_##o(weft_ck_fused_args_t a)                                 \
    {                                                                                                                  \
        stream_order();                                                                                                \
        stage_block(a);                                                                                                \
        if (barrier_block(a.bar) && a.mode == 1)                                                                       \
            reduce_run<ck_op_##o<ck_type_##t>>(a.red);                                                                 \
    }
WEFT_CK_INSTANTIATE(WEFT_CK_REDUCE)
