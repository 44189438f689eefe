/* barrier, dissemination (Hensgen, Finkel, Manber): in round k every rank
 * signals rank + 2^k and waits for rank - 2^k; ceil(log2 n) rounds, any n.
 * No extra memory. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    for (int k = 1; k < n; k <<= 1)
        if ((rc = weft_sched_recv(s, NULL, 0, weft_mod(r - k, n))) || (rc = weft_sched_send(s, NULL, 0, (r + k) % n)) ||
            (rc = weft_sched_end_round(s)))
            return rc;
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_barrier_dissemination = {
    .name = "dissemination",
    .kind = WEFT_COLL_BARRIER,
    .description = "ceil(log2 n) rounds of zero-byte messages to rank + 2^k",
    .build = build,
};
