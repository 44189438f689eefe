/* The local reduce of two device buffers (kernels.h: weft_ck_local_args):
 * weft_ck_local_reduce_<type>_<op> for the hot pairs and
 * weft_ck_local_reduce_<type>, which reads the op from its arguments, for
 * every type. The reduction loop is the slot protocol's (reduce.cuh). */
#include "coll/cuda/kernels/reduce.cuh"

namespace
{

/* a and b as the loop's first two sources (the others repeat a: never read with nsrc 2). */
__device__ __forceinline__ void local_sources(const weft_ck_local_args_t &a, const char *(&base)[MAXR])
{
#pragma unroll
    for (int p = 0; p < MAXR; p++)
        base[p] = static_cast<const char *>(p == 1 ? a.b : a.a);
}

template <class Op> __device__ __forceinline__ void local_run(const weft_ck_local_args_t &a)
{
    const char *base[MAXR];
    local_sources(a, base);
    reduce_range<Op>(base, 2, a.out, a.count, grid_tid(), grid_threads(), a.fin_n);
}

template <class Op> __device__ __noinline__ void local_run_call(const weft_ck_local_args_t &a)
{
    local_run<Op>(a);
}

} // namespace

#define WEFT_CK_LOCAL_TYPE(t, ...)                                                                                     \
    extern "C" __global__ void weft_ck_local_reduce_##t(weft_ck_local_args_t a)                                        \
    {                                                                                                                  \
        stream_order();                                                                                                \
        ck_each_op<ck_type_##t>(a.op, [&](auto o) { local_run_call<typename decltype(o)::type>(a); });                 \
    }
WEFT_CK_INSTANTIATE_TYPES(WEFT_CK_LOCAL_TYPE)

#define WEFT_CK_LOCAL(t, o)                                                                                            \
    extern "C" __global__ void weft_ck_local_reduce_##t##_##o(weft_ck_local_args_t a)                                  \
    {                                                                                                                  \
        stream_order();                                                                                                \
        local_run<ck_op_##o<ck_type_##t>>(a);                                                                          \
    }
WEFT_CK_INSTANTIATE(WEFT_CK_LOCAL)
