/* reduce_scatter (uneven blocks) and reduce_scatter_block on device
 * buffers across nodes with the vector never on the host (direct.c): a
 * reduce-scatter ring, (n - 1) / n of the vector sent per rank, its blocks
 * moved in device memory (by UCX where it carries CUDA memory, else by
 * point-to-point's pinned chunks) and folded on the GPU into this rank's
 * block. */
#include "coll/cuda/cuda_coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    const char *name = a->kind == WEFT_COLL_REDUCE_SCATTER ? "reduce_scatter direct" : "reduce_scatter_block direct";
    int n = a->comm->size, me = a->comm->rank, rc;
    const char *in = weft_gpu_input_apart(a);
    if (!in) return weft_coll_decline("%s: in place", name);
    size_t es = weft_gpu_esize(a), *off = weft_sched_scratch(s, 2 * sizeof(size_t) * (size_t)n), *cnt = off + n;
    if (!off) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", name);
    size_t at = 0, most = 0;
    for (int b = 0; b < n; b++) {
        off[b] = at;
        cnt[b] = a->kind == WEFT_COLL_REDUCE_SCATTER ? (size_t)a->rcounts[b] : a->count;
        at += cnt[b];
        if (cnt[b] > most) most = cnt[b];
    }
    if (!most) return WEFT_SUCCESS; /* nothing anywhere */
    weft_gpu_direct_t *d;
    if ((rc = weft_gpu_direct_open(s, a, name, in, n > 1 ? 2 * most * es : 0, &d))) return rc;
    if (n == 1) return weft_sched_copy(s, a->recvbuf, in + off[me] * es, cnt[me] * es);
    return weft_gpu_direct_reduce_scatter(s, d, in, a->recvbuf, off, cnt);
}

const weft_coll_alg_t weft_alg_reduce_scatter_direct = {
    "direct", WEFT_COLL_REDUCE_SCATTER,
    "device buffers across nodes, the vector never on the host: a reduce-scatter ring whose messages UCX moves in "
    "device memory (cuda_ipc, GPUDirect RDMA) or point-to-point through its pinned chunks, and whose reductions run "
    "on the GPU",
    build, 0};

const weft_coll_alg_t weft_alg_reduce_scatter_block_direct = {
    "direct", WEFT_COLL_REDUCE_SCATTER_BLOCK,
    "device buffers across nodes, the vector never on the host: a reduce-scatter ring whose messages UCX moves in "
    "device memory (cuda_ipc, GPUDirect RDMA) or point-to-point through its pinned chunks, and whose reductions run "
    "on the GPU",
    build, 0};
