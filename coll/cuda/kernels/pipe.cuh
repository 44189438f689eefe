/* The pipelined kernels' flags and loop (kernels.h: weft_ck_pipe_args),
 * shared by their staged (pipe.cu), pushed (push.cu) and ring (ring.cu)
 * forms. */
#ifndef WEFT_COLL_CUDA_KERNELS_PIPE_CUH
#define WEFT_COLL_CUDA_KERNELS_PIPE_CUH

#include "coll/cuda/kernels/copy.cuh"
#include "coll/cuda/kernels/reduce.cuh"

namespace {

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

/* The fold of the pipelined kernels (pipe.cu, push.cu): pipe_reduce with Op inlined (a pair's kernel), or with
 * the call's op, through that op's own compiled copy (a type's kernel: types.cuh, ck_each_op). */
template <class Op> struct PipeFold {
    __device__ __forceinline__ void operator()(const char *const (&base)[MAXR], int nranks, void *o, size_t ne,
                                               size_t tid, size_t nth) const
    {
        pipe_reduce<Op>(base, nranks, o, ne, tid, nth);
    }
};

template <class Op>
__device__ __noinline__ void pipe_reduce_call(const char *const (&base)[MAXR], int nranks, void *o, size_t ne,
                                              size_t tid, size_t nth)
{
    pipe_reduce<Op>(base, nranks, o, ne, tid, nth);
}

template <class N> struct PipeFoldOp {
    int op;
    __device__ __forceinline__ void operator()(const char *const (&base)[MAXR], int nranks, void *o, size_t ne,
                                               size_t tid, size_t nth) const
    {
        ck_each_op<N>(op, [&](auto t) { pipe_reduce_call<typename decltype(t)::type>(base, nranks, o, ne, tid, nth); });
    }
};

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
    /* one call site of each side for both forms: produce and consume are each inlined once */
    const bool split_on = sp && sp < nth, producing = !split_on || tid < sp, consuming = !split_on || tid >= sp;
    const pipe_grp_t g = !split_on  ? pipe_grp_t{tid, nth, 0, &ok[0]}
                         : tid < sp ? pipe_grp_t{tid, sp, 1, &ok[0]}
                                    : pipe_grp_t{tid - sp, nth - sp, 2, &ok[1]};
    const size_t L = split_on || a.ahead <= 0 ? 0 : a.ahead < depth ? (size_t)a.ahead : (size_t)depth - 1;
    for (size_t s = 0; s < J + L; s++) {
        if (producing && s < J && !produce(s, g))
            return -1;
        if (consuming && s >= L && !consume(s - L, g))
            return -1;
    }
    return (long long)J;
}

} // namespace

#endif
