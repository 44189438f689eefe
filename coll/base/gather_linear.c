/* gather, linear: every rank sends its block to the root, which posts all
 * receives at once, straight into place. One step; the root takes n - 1
 * messages. No extra memory. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t block = a->count * a->esize;
    if (r != a->root) {
        if ((rc = weft_sched_send(s, a->sendbuf, block, a->root))) return rc;
        return weft_sched_end_round(s);
    }
    for (int p = 0; p < n; p++)
        if (p != r && (rc = weft_sched_recv(s, weft_coll_rblock(a, p), block, p))) return rc;
    if ((rc = weft_sched_copy(s, weft_coll_rblock(a, r), a->sendbuf, block))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_gather_linear = {
    .name = "linear",
    .kind = WEFT_COLL_GATHER,
    .description = "every rank sends to the root at once, one step, no scratch",
    .build = build,
};
