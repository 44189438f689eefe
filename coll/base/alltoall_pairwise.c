/* alltoall, pairwise exchange: in step k every rank sends to rank + k and
 * receives from rank - k, so each step is a permutation and no rank is
 * flooded. n - 1 steps, no extra memory (except for the in-place form:
 * a copy of the buffer). */
#include "coll/coll.h"

#include <string.h>

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t block = a->count * a->esize;
    const char *send = a->sendbuf;
    char *recv = a->recvbuf;
    if (a->sendbuf == WEFT_IN_PLACE) {
        /* The data to send is in recv, which receives: send from a copy made now. */
        char *copy = weft_sched_scratch(s, block * (size_t)n);
        if (!copy) return weft_error(WEFT_ERR_NO_MEMORY, "alltoall_pairwise: out of memory for the in-place copy");
        if (block) memcpy(copy, recv, block * (size_t)n);
        send = copy;
    }
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
