/* Byte copies of any alignment, grid- or block-strided (the stage, copy and
 * pipelined kernels). */
#ifndef WEFT_COLL_CUDA_KERNELS_COPY_CUH
#define WEFT_COLL_CUDA_KERNELS_COPY_CUH

#include "coll/cuda/kernels/common.cuh"

namespace {

/* ------------------------------------------------------------------ */
/* Byte copies (stage, copy)                                            */
/* ------------------------------------------------------------------ */
/* dst and src congruent modulo sizeof(V): head bytes up to V alignment,
 * a body of V words (4 per thread per iteration, for memory-level
 * parallelism over NVLink), tail bytes. */
template <typename V>
__device__ __forceinline__ void copy_congruent(char *dst, const char *src, size_t n, size_t tid, size_t nth)
{
    const size_t W = sizeof(V);
    size_t head = (W - ((uintptr_t)dst & (W - 1))) & (W - 1);
    if (head > n)
        head = n;
    size_t nv = (n - head) / W;
    size_t tail = head + nv * W;
    for (size_t j = tid; j < head; j += nth)
        dst[j] = src[j];
    for (size_t j = tail + tid; j < n; j += nth)
        dst[j] = src[j];
    V *vd = reinterpret_cast<V *>(dst + head);
    const V *vs = reinterpret_cast<const V *>(src + head);
    size_t i = tid;
    for (; i + 3 * nth < nv; i += 4 * nth) {
        V a = vs[i], b = vs[i + nth], c = vs[i + 2 * nth], d = vs[i + 3 * nth];
        vd[i] = a;
        vd[i + nth] = b;
        vd[i + 2 * nth] = c;
        vd[i + 3 * nth] = d;
    }
    for (; i < nv; i += nth)
        vd[i] = vs[i];
}

/* dst and src not congruent modulo 4: bytes up to dst's 4-byte alignment,
 * then 32-bit stores, each made from two aligned 32-bit source words by a
 * funnel shift (the source words are aligned words that each hold at least
 * one byte of the source range: nothing outside it is touched beyond its
 * own aligned words), then tail bytes. */
__device__ __forceinline__ void copy_shifted(char *dst, const char *src, size_t n, size_t tid, size_t nth)
{
    size_t head = (4 - ((uintptr_t)dst & 3)) & 3;
    if (head > n)
        head = n;
    size_t nw = (n - head) / 4;
    /* word j reads source words j and j + 1; the last body word would read
     * past the range's last aligned word, so it goes to the tail */
    nw = nw > 0 ? nw - 1 : 0;
    size_t tail = head + nw * 4;
    for (size_t j = tid; j < head; j += nth)
        dst[j] = src[j];
    for (size_t j = tail + tid; j < n; j += nth)
        dst[j] = src[j];
    if (nw == 0)
        return;
    const char *s = src + head;
    unsigned k = (unsigned)((uintptr_t)s & 3); /* 1..3: dst + head is aligned, src is not congruent */
    const unsigned *ws = reinterpret_cast<const unsigned *>(s - k);
    unsigned *wd = reinterpret_cast<unsigned *>(dst + head);
    for (size_t i = tid; i < nw; i += nth)
        wd[i] = __funnelshift_r(ws[i], ws[i + 1], 8 * k); /* little-endian: bytes k..k+3 of ws[i]:ws[i+1] */
}

/* Not inlined: every kernel of a protocol calls it, often at several places,
 * and one compiled copy per .cu instead of one per call site is most of
 * the build time it would take; a call per piece is nothing next to the
 * bytes it moves. */
__device__ __noinline__ void copy_any(char *dst, const char *src, size_t n, size_t tid, size_t nth)
{
    uintptr_t mis = (uintptr_t)dst ^ (uintptr_t)src;
    if ((mis & 15) == 0)
        copy_congruent<uint4>(dst, src, n, tid, nth);
    else if ((mis & 7) == 0)
        copy_congruent<uint2>(dst, src, n, tid, nth);
    else if ((mis & 3) == 0)
        copy_congruent<unsigned>(dst, src, n, tid, nth);
    else
        copy_shifted(dst, src, n, tid, nth);
}

} // namespace

#endif
