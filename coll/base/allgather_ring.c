/* allgather, ring: in n - 1 steps every rank passes the block it received
 * last to its right neighbour, receiving straight into the output (or into
 * the caller's list of buffers). No extra memory; (n-1)/n of the result
 * crosses each link. Large messages. */
#include "coll/coll.h"

int weft_coll_allgather_ring_build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t block = a->count * a->esize;
    if ((rc = weft_sched_copy(s, weft_coll_rblock(a, r), a->sendbuf, block)) || (rc = weft_sched_end_round(s)))
        return rc;
    for (int k = 0; k < n - 1; k++)
        if ((rc = weft_sched_recv(s, weft_coll_rblock(a, weft_mod(r - k - 1, n)), block, weft_mod(r - 1, n))) ||
            (rc = weft_sched_send(s, weft_coll_rblock(a, weft_mod(r - k, n)), block, (r + 1) % n)) ||
            (rc = weft_sched_end_round(s)))
            return rc;
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_allgather_ring = {
    .name = "ring",
    .kind = WEFT_COLL_ALLGATHER,
    .description = "ring, n-1 steps, no scratch, writes straight into the output; large messages",
    .build = weft_coll_allgather_ring_build,
};
