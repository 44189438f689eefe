/* The barrier of the slot protocol (kernels.h: weft_ck_barrier_args) and the
 * fused kernels' stage, each in one block. */
#ifndef WEFT_COLL_CUDA_KERNELS_BARRIER_CUH
#define WEFT_COLL_CUDA_KERNELS_BARRIER_CUH

#include "coll/cuda/kernels/copy.cuh"

namespace {

/* The barrier, in one block: thread p (< nranks, != rank) announces to peer
 * p and waits for it. All threads agree on the outcome through a shared
 * flag: the counter moves only when no wait was ended by an abort. Returns
 * 1 when passed (the counter is then seq, visible to the whole block), 0
 * when aborted. */
__device__ __forceinline__ int barrier_block(const weft_ck_barrier_args_t &a)
{
    __shared__ unsigned long long seq_s;
    __shared__ int aborted_s, poisoned_s;
    const int p = threadIdx.x;
    if (p == 0) {
        const unsigned long long c = *a.ctl.counter;
        seq_s = c + 1;
        aborted_s = 0;
        poisoned_s = (c & WEFT_CK_POISON) != 0; /* an earlier barrier was aborted or found a mismatch */
    }
    __syncthreads(); /* the counter is read before thread 0 may write it below */
    /* poisoned_s, unlike aborted_s, is not written again: every thread takes the same branch */
    if (poisoned_s)
        return 0; /* poisoned: no flag is touched, the counter stays */
    const unsigned long long seq = seq_s;
    const int nranks = a.nranks < MAXR ? a.nranks : MAXR;
    /* peer p's flag array, picked with constant indices (as in weft_ck_copy) */
    unsigned long long *peer = nullptr;
#pragma unroll
    for (int j = 0; j < MAXR; j++)
        if (j == p)
            peer = a.peer_flags[j];
    const unsigned long long parity = seq & 1;
    if (p == a.rank && blockIdx.x == 0) /* this rank's own entry: what its reduce / copy reads for it */
        *desc_at(a.my_flags, parity, p) = a.desc;
    if (p < nranks && p != a.rank && blockIdx.x == 0) {
        /* the input's descriptor, then the flag: the release orders the two */
        *desc_at(peer, parity, a.rank) = a.desc;
        /* release: this rank's earlier work (its stage of call seq, its
         * reads of call seq - 1's slots) happens before the peer sees seq */
        st_release_sys(peer + a.rank, seq);
        unsigned spins = 0;
        /* acquire: what peer p did before announcing seq happens before
         * everything after this */
        while (ld_acquire_sys(a.my_flags + p) < seq) {
            if ((++spins & 255) == 0 && *a.ctl.abort) {
                *a.ctl.error = 1 + p;
                __threadfence_system();
                aborted_s = 1;
                break;
            }
            __nanosleep(100);
        }
        /* the peer's input descriptor (written before its flag, so seen now) against this call's */
        if (a.check && !aborted_s) {
            const unsigned long long d = *desc_at(a.my_flags, parity, p);
            unsigned long long len = 0;
#pragma unroll
            for (int j = 0; j < MAXR; j++)
                if (j == p)
                    len = a.winlen[j];
            if (((d ^ a.desc) & 0xffff) != 0 || ((a.desc & 1) && WEFT_CK_DESC_OFF(d) + a.need > len)) {
                *a.ctl.error = -(1 + p);
                __threadfence_system();
                aborted_s = 1;
            }
        }
    }
    __syncthreads();
    const int passed = !aborted_s;
    if (p == 0 && blockIdx.x == 0)
        *a.ctl.counter = passed ? seq : *a.ctl.counter | WEFT_CK_POISON;
    __syncthreads(); /* the new counter is what the block reads next */
    return passed;
}

/* The fused call's stage: every piece into this rank's next slot, then a
 * system-scope fence per thread, so the barrier's release covers the
 * writes of every thread of the block. The pieces in a loop, each picked
 * with constant indices (as in weft_ck_copy): one copy loop in the code,
 * not one per piece. */
__device__ __forceinline__ void stage_block(const weft_ck_fused_args_t &a)
{
    const unsigned long long c = *a.bar.ctl.counter;
    unsigned long long parity = (c + 1) & 1;
    char *slot = a.scratch + WEFT_CK_HDR + (size_t)parity * a.slot_bytes;
    /* poisoned: as weft_ck_stage; the barrier ends the kernel */
    const int n = (c & WEFT_CK_POISON) ? 0 : a.nstage < MAXR ? a.nstage : MAXR;
#pragma unroll 1
    for (int y = 0; y < n; y++) {
        const void *in = nullptr;
        size_t off = 0, bytes = 0;
#pragma unroll
        for (int j = 0; j < MAXR; j++)
            if (j == y) {
                in = a.stage[j].in;
                off = a.stage[j].off;
                bytes = a.stage[j].bytes;
            }
        copy_any(slot + off, static_cast<const char *>(in), bytes, threadIdx.x, blockDim.x);
    }
    __threadfence_system();
    __syncthreads();
}

} // namespace

#endif
