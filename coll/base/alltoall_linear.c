/* alltoall, linear: every rank posts all n - 1 receives and sends in one
 * round (to rank + 1, rank + 2, ... so no rank is everyone's first target).
 * One step of latency instead of n - 1; the cost is n - 1 messages in
 * flight per rank, so it suits small blocks. No extra memory (except for
 * the in-place form: a copy of the buffer). */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t block = a->count * a->esize;
    const char *send = weft_coll_send_source(s, a, block * (size_t)n, "alltoall_linear");
    char *recv = a->recvbuf;
    if (!send) return WEFT_ERR_NO_MEMORY;
    for (int k = 1; k < n; k++) {
        int to = (r + k) % n, from = weft_mod(r - k, n);
        if ((rc = weft_sched_recv(s, recv + (size_t)from * block, block, from)) ||
            (rc = weft_sched_send(s, send + (size_t)to * block, block, to)))
            return rc;
    }
    /* The own block is copied once the exchanges are done (local steps end a round). */
    if ((rc = weft_sched_copy(s, recv + (size_t)r * block, send + (size_t)r * block, block))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_alltoall_linear = {
    .name = "linear",
    .kind = WEFT_COLL_ALLTOALL,
    .description = "every exchange posted at once, one step, no scratch; small blocks",
    .build = build,
};
