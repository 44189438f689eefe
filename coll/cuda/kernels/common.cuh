/* The device primitives every protocol's kernels use (one .cu per
 * protocol, coll/cuda/kernels/<protocol>.cu, each compiled by nvcc into a
 * fatbin of its own that libweft embeds and cuda.c loads through the
 * driver). The argument blocks and their meaning are in
 * coll/cuda/kernels.h; every entry point is extern "C" (unmangled names
 * for cuModuleGetFunction) and takes its block by value.
 *
 * Memory ordering. A collective is stage -> barrier -> reduce / copy, three
 * kernels in one stream. Kernel boundaries order each kernel's memory
 * operations before the next one's (stream order); across ranks, the
 * barrier's release store (system scope) of flag seq and the peer's acquire
 * load that sees it carry the order from "this rank's stage of call seq is
 * done and its reduce of call seq - 1 has finished reading" to "the peer's
 * next kernel may read this rank's slot and reuse its own". Reads of peer
 * slots are plain loads: they run in a later kernel than the acquire.
 *
 * Launched with programmatic dependent launch (sm_90 and newer: cuda.c,
 * WEFT_CUDA_COLL_PDL), a kernel may be resident before the one ahead of it
 * in the stream has finished: every entry point's first statement,
 * stream_order(), waits for that kernel's completion and memory flush
 * (griddepcontrol.wait) before touching memory, so stream order holds as
 * above and only the launch overlaps. The next kernel may launch once every
 * block of this one has exited, or, in the LL kernel, has passed its last
 * wait (next_may_launch()): never earlier, since a waiting block's peers
 * (other processes' blocks, on a shared GPU) may still need the SM room a
 * launched-early kernel would hold (nothing bounds the room it takes
 * while the kernel before still waits). */
#ifndef WEFT_COLL_CUDA_KERNELS_COMMON_CUH
#define WEFT_COLL_CUDA_KERNELS_COMMON_CUH

#include <stddef.h>
#include <stdint.h>

#include "coll/cuda/kernels.h"

#define MAXR WEFT_CK_MAX_RANKS

namespace {

/* ------------------------------------------------------------------ */
/* Small helpers                                                        */
/* ------------------------------------------------------------------ */
__device__ __forceinline__ size_t grid_tid()
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ size_t grid_threads()
{
    return (size_t)gridDim.x * blockDim.x;
}

/* Every kernel's first statement (see the top): wait until the kernels ahead of this one in the stream have
 * finished and their writes are visible. Without the launch attribute, or before sm_90, a no-op. */
__device__ __forceinline__ void stream_order()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* This block waits for nothing more: the next kernel in the stream may launch once every block has said so (or
 * exited). Before sm_90 a no-op. */
__device__ __forceinline__ void next_may_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The slot of the given parity in a scratch region. */
__device__ __forceinline__ const char *slot_of(const char *scratch, unsigned long long parity, size_t slot_bytes)
{
    return scratch + WEFT_CK_HDR + (size_t)parity * slot_bytes;
}

/* ------------------------------------------------------------------ */
/* Barrier: release / acquire at system scope                           */
/* ------------------------------------------------------------------ */
__device__ __forceinline__ void st_release_sys(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_acquire_sys(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* Entry [parity][p] of the input descriptors in a region's header (WEFT_CK_DESC). */
__device__ __forceinline__ volatile unsigned long long *desc_at(const void *region, unsigned long long parity, int p)
{
    return reinterpret_cast<volatile unsigned long long *>(const_cast<char *>(static_cast<const char *>(region)) +
                                                           WEFT_CK_DESC) +
           parity * MAXR + p;
}

/* The offset a rank's barrier announced for its input, from this rank's
 * header (mine) at the counter's parity. */
__device__ __forceinline__ size_t desc_off(const char *mine, unsigned long long parity, int p)
{
    return (size_t)WEFT_CK_DESC_OFF(*desc_at(mine, parity, p));
}

} // namespace

#endif
