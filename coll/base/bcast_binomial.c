/* bcast, binomial tree rooted at root: a rank receives once from its
 * parent, then sends to its children, farthest subtree first; ceil(log2 n)
 * steps, any n. No extra memory; the buffer moves whole (UCX pipelines
 * large messages itself). */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, vr = weft_mod(a->comm->rank - a->root, n), rc, mask = 1;
    size_t bytes = a->count * a->esize;
    if (n == 1) return WEFT_SUCCESS;
    while (mask < n) {
        if (vr & mask) {
            if ((rc = weft_sched_recv(s, a->recvbuf, bytes, (vr - mask + a->root) % n)) ||
                (rc = weft_sched_end_round(s)))
                return rc;
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < n && (rc = weft_sched_send(s, a->recvbuf, bytes, (vr + mask + a->root) % n))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_bcast_binomial = {
    .name = "binomial",
    .kind = WEFT_COLL_BCAST,
    .description = "binomial tree from the root, ceil(log2 n) steps",
    .build = build,
};
