/* scatterv, linear: as scatter_linear with per-rank counts and
 * displacements at the root. No extra memory. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize;
    if (r != a->root) {
        if ((rc = weft_sched_recv(s, a->recvbuf, a->count * es, a->root))) return rc;
        return weft_sched_end_round(s);
    }
    for (int p = 0; p < n; p++) {
        const char *src = (const char *)a->sendbuf + (size_t)a->sdispls[p] * es;
        size_t bytes = (size_t)a->scounts[p] * es;
        rc = p == r ? weft_sched_copy(s, a->recvbuf, src, bytes) : weft_sched_send(s, src, bytes, p);
        if (rc) return rc;
    }
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_scatterv_linear = {
    .name = "linear",
    .kind = WEFT_COLL_SCATTERV,
    .description = "the root sends every block at once, per-rank counts, no scratch",
    .build = build,
};
