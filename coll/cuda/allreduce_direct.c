/* allreduce on device buffers across nodes with the vector never on the
 * host (direct.c): a reduce-scatter ring, then an allgather ring, 2 (n - 1)
 * / n of the vector sent per rank (the minimum), its blocks moved in
 * device memory and folded on the GPU. Takes an allreduce that no kernel
 * algorithm takes (the rail step of hier_rail, or a whole communicator
 * across nodes). Where the UCX in use carries CUDA memory, UCX moves the
 * blocks itself (rules.conf's xport=cuda rows); elsewhere point-to-point
 * moves them through its pinned chunks as pipelines of host messages
 * (xport=host; pt2pt/pipe.c). */
#include "coll/cuda/cuda_coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    static const char name[] = "allreduce direct";
    int n = a->comm->size, me = a->comm->rank, rc;
    if (a->count < (size_t)n) return weft_coll_decline("%s: fewer elements than ranks", name);
    size_t es = weft_gpu_esize(a), *off = weft_sched_scratch(s, 2 * sizeof(size_t) * (size_t)n), *cnt = off + n;
    if (!off) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", name);
    for (int b = 0; b < n; b++)
        weft_coll_block(a->count, n, b, &off[b], &cnt[b]);
    const char *apart = weft_gpu_input_apart(a), *in = apart ? apart : (const char *)a->recvbuf;
    weft_gpu_direct_t *d;
    if ((rc = weft_gpu_direct_open(s, a, name, apart, n > 1 ? 2 * cnt[0] * es : 0, &d))) return rc;
    char *out = a->recvbuf;
    if (n == 1) return apart ? weft_sched_copy(s, out, apart, a->count * es) : WEFT_SUCCESS;
    if ((rc = weft_gpu_direct_reduce_scatter(s, d, in, out + off[me] * es, off, cnt))) return rc;
    /* allgather: step k sends block me - k, receives block me - k - 1 in place */
    int right = (me + 1) % n, left = (me - 1 + n) % n;
    for (int k = 0; k < n - 1 && !rc; k++) {
        int sb = ((me - k) % n + n) % n, rb = ((me - k - 1) % n + n) % n;
        rc = weft_sched_recv(s, out + off[rb] * es, cnt[rb] * es, left);
        if (!rc) rc = weft_sched_send(s, out + off[sb] * es, cnt[sb] * es, right);
        if (!rc) rc = weft_sched_end_round(s);
    }
    return rc;
}

const weft_coll_alg_t weft_alg_allreduce_direct = {
    "direct", WEFT_COLL_ALLREDUCE,
    "device buffers across nodes, the vector never on the host: a reduce-scatter ring, then an allgather ring, "
    "whose messages UCX moves in device memory (cuda_ipc, GPUDirect RDMA) or point-to-point through its pinned "
    "chunks, and whose reductions run on the GPU",
    build, 0};
