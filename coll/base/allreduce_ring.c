/* allreduce, ring (reduce-scatter then allgather, as in Patarasuk & Yuan):
 * the vector is cut into n blocks. The reduce-scatter phase is
 * reduce_scatter ring's (weft_coll_reduce_scatter_ring_build): blocks are
 * cut into segments of WEFT_COLL_SEG_BYTES and the ring runs once per
 * segment position, in n - 1 steps each rank adding the segment its left
 * neighbour sends to its own input and passing the sum on; this rank's
 * fully reduced block lands straight in recvbuf (AVG divided once, per
 * finished segment). n - 1 more steps circulate the reduced blocks into
 * recvbuf. Each element is reduced in one fixed order along the ring and
 * then copied, so every rank holds the same bits. Bandwidth-optimal:
 * 2(n-1)/n of the vector crosses each link. Extra memory: two segments
 * (or two blocks, if smaller), whatever the vector size. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize;
    char *acc = a->recvbuf;
    size_t *off = weft_sched_scratch(s, 2 * sizeof(size_t) * (size_t)n), *len = off ? off + n : NULL;
    if (!off) return weft_error(WEFT_ERR_NO_MEMORY, "allreduce_ring: out of memory");
    for (int i = 0; i < n; i++)
        weft_coll_block(a->count, n, i, &off[i], &len[i]);
    /* In place the input is recvbuf, and this rank's block of it is read only where its result is written. */
    if ((rc = weft_coll_reduce_scatter_ring_build(s, a, a->sendbuf, acc + off[r] * es, off, len, "allreduce_ring")))
        return rc;
    int right = (r + 1) % n, left = weft_mod(r - 1, n);
    /* Allgather of the reduced blocks, straight into place. */
    for (int k = 0; k < n - 1; k++) {
        int sb = weft_mod(r - k, n), rb = weft_mod(r - k - 1, n);
        if ((rc = weft_sched_recv(s, acc + off[rb] * es, len[rb] * es, left)) ||
            (rc = weft_sched_send(s, acc + off[sb] * es, len[sb] * es, right)) || (rc = weft_sched_end_round(s)))
            return rc;
    }
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_allreduce_ring = {
    .name = "ring",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "ring reduce-scatter in segments + ring allgather, 2 segments of scratch; large messages",
    .build = build,
};
