/* gatherv, linear: as gather_linear with per-rank counts and
 * displacements at the root. No extra memory. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize;
    if (r != a->root) {
        if ((rc = weft_sched_send(s, a->sendbuf, a->count * es, a->root))) return rc;
        return weft_sched_end_round(s);
    }
    for (int p = 0; p < n; p++) {
        char *dst = (char *)a->recvbuf + (size_t)a->rdispls[p] * es;
        size_t bytes = (size_t)a->rcounts[p] * es;
        rc = p == r ? weft_sched_copy(s, dst, a->sendbuf, bytes) : weft_sched_recv(s, dst, bytes, p);
        if (rc) return rc;
    }
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_gatherv_linear = {
    .name = "linear",
    .kind = WEFT_COLL_GATHERV,
    .description = "every rank sends to the root at once, per-rank counts, no scratch",
    .build = build,
};
