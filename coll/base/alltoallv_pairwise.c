/* alltoallv, pairwise exchange: as alltoall_pairwise with per-rank counts
 * and displacements. n - 1 steps, no extra memory. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize;
    const char *send = a->sendbuf;
    char *recv = a->recvbuf;
    if ((rc = weft_sched_copy(s, recv + (size_t)a->rdispls[r] * es, send + (size_t)a->sdispls[r] * es,
                              (size_t)a->scounts[r] * es)) ||
        (rc = weft_sched_end_round(s)))
        return rc;
    for (int k = 1; k < n; k++) {
        int to = (r + k) % n, from = weft_mod(r - k, n);
        if ((rc = weft_sched_recv(s, recv + (size_t)a->rdispls[from] * es, (size_t)a->rcounts[from] * es, from)) ||
            (rc = weft_sched_send(s, send + (size_t)a->sdispls[to] * es, (size_t)a->scounts[to] * es, to)) ||
            (rc = weft_sched_end_round(s)))
            return rc;
    }
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_alltoallv_pairwise = {
    .name = "pairwise",
    .kind = WEFT_COLL_ALLTOALLV,
    .description = "pairwise exchange with per-rank counts, n-1 steps, no scratch",
    .build = build,
};
