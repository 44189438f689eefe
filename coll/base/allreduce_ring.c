/* allreduce, ring (reduce-scatter then allgather, as in Patarasuk & Yuan):
 * the vector is cut into n blocks; in n - 1 steps each rank adds the block
 * its left neighbour sends and passes it on, ending with one fully reduced
 * block; n - 1 more steps circulate the reduced blocks. Each block is
 * reduced in one fixed order along the ring and then copied, so every rank
 * holds the same bits. Bandwidth-optimal: 2(n-1)/n of the vector crosses
 * each link. Extra memory: one block, ceil(count / n) elements. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize, off, len;
    char *acc = a->recvbuf;
    if ((rc = weft_sched_copy(s, acc, a->sendbuf, a->count * es)) || (rc = weft_sched_end_round(s))) return rc;
    if (n == 1) return weft_sched_op_finalize(s, a->op, a->dtype, acc, a->count, 1);
    int right = (r + 1) % n, left = weft_mod(r - 1, n);
    weft_coll_block(a->count, n, 0, &off, &len); /* block 0 is the largest */
    char *tmp = weft_sched_scratch(s, len * es);
    if (!tmp) return weft_error(WEFT_ERR_NO_MEMORY, "allreduce_ring: out of memory (%zu bytes)", len * es);
    /* Reduce-scatter: after step k = n - 2 this rank owns block r. */
    for (int k = 0; k < n - 1; k++) {
        size_t soff, slen, roff, rlen;
        weft_coll_block(a->count, n, weft_mod(r - k - 1, n), &soff, &slen);
        weft_coll_block(a->count, n, weft_mod(r - k - 2, n), &roff, &rlen);
        if ((rc = weft_sched_recv(s, tmp, rlen * es, left)) ||
            (rc = weft_sched_send(s, acc + soff * es, slen * es, right)) ||
            (rc = weft_sched_reduce(s, a->op, a->dtype, acc + roff * es, tmp, rlen)) || (rc = weft_sched_end_round(s)))
            return rc;
    }
    weft_coll_block(a->count, n, r, &off, &len);
    if ((rc = weft_sched_op_finalize(s, a->op, a->dtype, acc + off * es, len, n)) || (rc = weft_sched_end_round(s)))
        return rc;
    /* Allgather of the reduced blocks, straight into place. */
    for (int k = 0; k < n - 1; k++) {
        size_t soff, slen, roff, rlen;
        weft_coll_block(a->count, n, weft_mod(r - k, n), &soff, &slen);
        weft_coll_block(a->count, n, weft_mod(r - k - 1, n), &roff, &rlen);
        if ((rc = weft_sched_recv(s, acc + roff * es, rlen * es, left)) ||
            (rc = weft_sched_send(s, acc + soff * es, slen * es, right)) || (rc = weft_sched_end_round(s)))
            return rc;
    }
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_allreduce_ring = {
    .name = "ring",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "ring reduce-scatter + ring allgather, 2(n-1) steps, one block of scratch; large messages",
    .build = build,
};
