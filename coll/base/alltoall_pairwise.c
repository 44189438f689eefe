/* alltoall, pairwise exchange: in step k every rank sends to rank + k and
 * receives from rank - k, so each step is a permutation and no rank is
 * flooded. n - 1 steps, no extra memory (except for the in-place form:
 * a copy of the buffer). */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t block = a->count * a->esize;
    const char *send = weft_coll_send_source(s, a, block * (size_t)n, "alltoall_pairwise");
    char *recv = a->recvbuf;
    if (!send) return WEFT_ERR_NO_MEMORY;
    if ((rc = weft_sched_copy(s, recv + (size_t)r * block, send + (size_t)r * block, block)) ||
        (rc = weft_sched_end_round(s)))
        return rc;
    for (int k = 1; k < n; k++) {
        int to = (r + k) % n, from = weft_mod(r - k, n);
        if ((rc = weft_sched_recv(s, recv + (size_t)from * block, block, from)) ||
            (rc = weft_sched_send(s, send + (size_t)to * block, block, to)) || (rc = weft_sched_end_round(s)))
            return rc;
    }
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_alltoall_pairwise = {
    .name = "pairwise",
    .kind = WEFT_COLL_ALLTOALL,
    .description = "pairwise exchange, n-1 steps, no scratch",
    .build = build,
};
