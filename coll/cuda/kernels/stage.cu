/* The slot protocol's kernels without arithmetic (kernels.h): stage,
 * barrier, copy, and the fused copy (a small call's stage, barrier and
 * copy in one launch of one block). */
#include "coll/cuda/kernels/barrier.cuh"

namespace {

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

} // namespace

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

extern "C" __global__ void weft_ck_fused_copy(weft_ck_fused_args_t a)
{
    stream_order();
    stage_block(a);
    if (!barrier_block(a.bar) || a.mode != 2)
        return;
#pragma unroll 1
    for (int y = 0; y < a.cp.n && y < MAXR; y++) /* one copy loop in the code (copy_desc picks y's) */
        copy_desc(a.cp, y, threadIdx.x, blockDim.x);
}
