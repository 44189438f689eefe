/* allgatherv, ring: as allgather_ring with per-rank counts and
 * displacements. No extra memory. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize;
#define BLOCK(i) ((char *)a->recvbuf + (size_t)a->rdispls[(i)] * es)
#define BYTES(i) ((size_t)a->rcounts[(i)] * es)
    if ((rc = weft_sched_copy(s, BLOCK(r), a->sendbuf, BYTES(r))) || (rc = weft_sched_end_round(s))) return rc;
    for (int k = 0; k < n - 1; k++) {
        int rb = weft_mod(r - k - 1, n), sb = weft_mod(r - k, n);
        if ((rc = weft_sched_recv(s, BLOCK(rb), BYTES(rb), weft_mod(r - 1, n))) ||
            (rc = weft_sched_send(s, BLOCK(sb), BYTES(sb), (r + 1) % n)) || (rc = weft_sched_end_round(s)))
            return rc;
    }
#undef BLOCK
#undef BYTES
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_allgatherv_ring = {
    .name = "ring",
    .kind = WEFT_COLL_ALLGATHERV,
    .description = "ring with per-rank counts, n-1 steps, no scratch",
    .build = build,
};
