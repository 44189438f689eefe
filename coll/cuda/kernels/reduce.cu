/* The slot protocol's reduce kernels (kernels.h: weft_ck_reduce_args,
 * weft_ck_fused_args): weft_ck_reduce_<type>_<op> and
 * weft_ck_fused_reduce_<type>_<op> (a small call's stage, barrier and reduce
 * in one launch of one block) for the hot pairs, and weft_ck_reduce_<type>
 * and weft_ck_fused_reduce_<type> for every type. */
#include "coll/cuda/kernels/barrier.cuh"
#include "coll/cuda/kernels/reduce.cuh"

namespace {

/* The fold of reduce_run: reduce_range with Op inlined (a pair's kernel), or with the call's op, through that
 * op's own compiled copy (a type's kernel: types.cuh, ck_each_op). */
template <class Op> struct FoldWith {
    __device__ __forceinline__ void operator()(const char *const (&base)[MAXR], int nsrc, void *out, size_t count,
                                               size_t tid, size_t nth) const
    {
        reduce_range<Op>(base, nsrc, out, count, tid, nth);
    }
};

template <class Op>
__device__ __noinline__ void reduce_range_call(const char *const (&base)[MAXR], int nsrc, void *out, size_t count,
                                               size_t tid, size_t nth)
{
    reduce_range<Op>(base, nsrc, out, count, tid, nth);
}

template <class N> struct FoldOp {
    int op;
    __device__ __forceinline__ void operator()(const char *const (&base)[MAXR], int nsrc, void *out, size_t count,
                                               size_t tid, size_t nth) const
    {
        ck_each_op<N>(op, [&](auto t) {
            reduce_range_call<typename decltype(t)::type>(base, nsrc, out, count, tid, nth);
        });
    }
};

template <class F> __device__ __forceinline__ void reduce_run(const weft_ck_reduce_args_t &a, F fold)
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
    fold(base, nsrc, out, a.count, grid_tid(), grid_threads());
}

template <class F> __device__ __forceinline__ void fused_reduce_run(const weft_ck_fused_args_t &a, F fold)
{
    stage_block(a);
    if (barrier_block(a.bar) && a.mode == 1)
        reduce_run(a.red, fold);
}

} // namespace

#define WEFT_CK_REDUCE_TYPE(t, ...)                                                                                    \
    extern "C" __global__ void weft_ck_reduce_##t(weft_ck_reduce_args_t a)                                            \
    {                                                                                                                  \
        stream_order();                                                                                                \
        reduce_run(a, FoldOp<ck_type_##t>{a.op});                                                                      \
    }                                                                                                                  \
    extern "C" __global__ void weft_ck_fused_reduce_##t(weft_ck_fused_args_t a)                                       \
    {                                                                                                                  \
        stream_order();                                                                                                \
        fused_reduce_run(a, FoldOp<ck_type_##t>{a.red.op});                                                            \
    }
WEFT_CK_INSTANTIATE_TYPES(WEFT_CK_REDUCE_TYPE)

#define WEFT_CK_REDUCE(t, o)                                                                                           \
    extern "C" __global__ void weft_ck_reduce_##t##_##o(weft_ck_reduce_args_t a)                                      \
    {                                                                                                                  \
        stream_order();                                                                                                \
        reduce_run(a, FoldWith<ck_op_##o<ck_type_##t>>());                                                             \
    }                                                                                                                  \
    extern "C" __global__ void weft_ck_fused_reduce_##t##_##o(weft_ck_fused_args_t a)                                 \
    {                                                                                                                  \
        stream_order();                                                                                                \
        fused_reduce_run(a, FoldWith<ck_op_##o<ck_type_##t>>());                                                       \
    }
WEFT_CK_INSTANTIATE(WEFT_CK_REDUCE)
