/* scan and exscan, linear chain: rank r waits for the prefix over ranks
 * 0..r-1 from r - 1, combines it with its own data (prefix op mine, in
 * rank order) and passes the result to r + 1. n - 1 steps of latency, one
 * message-sized buffer; the reduction order is rank order, so results are
 * reproducible. */
#include "coll/coll.h"

static int build_chain(weft_sched_t *s, const weft_coll_args_t *a, int exclusive)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t bytes = a->count * a->esize;
    char *prefix = weft_sched_scratch(s, bytes), *mine = weft_sched_scratch(s, bytes);
    if (!prefix || !mine) return weft_error(WEFT_ERR_NO_MEMORY, "scan_linear: out of memory (%zu bytes)", bytes);
    /* Keep this rank's contribution: recvbuf may be sendbuf (in place). */
    if ((rc = weft_sched_copy(s, mine, a->sendbuf, bytes)) || (rc = weft_sched_end_round(s))) return rc;
    if (r > 0) {
        if ((rc = weft_sched_recv(s, prefix, bytes, r - 1))) return rc;
        if (exclusive) {
            /* recvbuf = prefix over 0..r-1 (averaged over r ranks for AVG). */
            if ((rc = weft_sched_copy(s, a->recvbuf, prefix, bytes)) ||
                (rc = weft_sched_op_finalize(s, a->op, a->dtype, a->recvbuf, a->count, r)))
                return rc;
        }
        /* prefix := prefix op mine, in rank order. */
        if ((rc = weft_sched_reduce(s, a->op, a->dtype, prefix, mine, a->count)) || (rc = weft_sched_end_round(s)))
            return rc;
    } else if ((rc = weft_sched_copy(s, prefix, mine, bytes)) || (rc = weft_sched_end_round(s))) {
        return rc;
    }
    if (r + 1 < n && (rc = weft_sched_send(s, prefix, bytes, r + 1))) return rc;
    if (!exclusive && ((rc = weft_sched_copy(s, a->recvbuf, prefix, bytes)) ||
                       (rc = weft_sched_op_finalize(s, a->op, a->dtype, a->recvbuf, a->count, r + 1))))
        return rc;
    return weft_sched_end_round(s);
}

static int build_scan(weft_sched_t *s, const weft_coll_args_t *a)
{
    return build_chain(s, a, 0);
}

static int build_exscan(weft_sched_t *s, const weft_coll_args_t *a)
{
    return build_chain(s, a, 1);
}

const weft_coll_alg_t weft_alg_scan_linear = {
    .name = "linear",
    .kind = WEFT_COLL_SCAN,
    .description = "chain from rank 0 upwards, n-1 steps, reduction in rank order",
    .build = build_scan,
};

const weft_coll_alg_t weft_alg_exscan_linear = {
    .name = "linear",
    .kind = WEFT_COLL_EXSCAN,
    .description = "chain from rank 0 upwards, n-1 steps, rank 0's output untouched",
    .build = build_exscan,
};
