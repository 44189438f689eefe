/* scatter, linear: the root sends every rank its block at once. One step,
 * no extra memory. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t block = a->count * a->esize;
    if (r != a->root) {
        if ((rc = weft_sched_recv(s, a->recvbuf, block, a->root))) return rc;
        return weft_sched_end_round(s);
    }
    for (int p = 0; p < n; p++)
        if (p != r && (rc = weft_sched_send(s, (const char *)a->sendbuf + (size_t)p * block, block, p))) return rc;
    if ((rc = weft_sched_copy(s, a->recvbuf, (const char *)a->sendbuf + (size_t)r * block, block))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_scatter_linear = {
    .name = "linear",
    .kind = WEFT_COLL_SCATTER,
    .description = "the root sends every block at once, one step, no scratch",
    .build = build,
};
