/* allreduce, recursive doubling: with p the largest power of two <= n, the
 * first 2(n - p) ranks pair up and the even one hands its data to the odd
 * one; the p remaining ranks exchange whole vectors with partners at
 * distance 1, 2, 4, ...; the odd ranks hand the result back. log2(p) + 2
 * steps. Every pairwise step computes x op y on both sides, which is
 * bit-identical for commutative ops, so all ranks hold the same bits.
 * Extra memory: one message-sized buffer (none on the ranks that hand their
 * data over in the pre-step). Best for small messages. */
#include "coll/base/builders.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, rc;
    size_t bytes = a->count * a->esize;
    weft_coll_fold_t f;
    weft_coll_fold_init(&f, n, a->comm->rank, 0, 1);
    /* A rank that hands its data over only sends and receives in place: no scratch. */
    char *acc = a->recvbuf, *tmp = f.newrank < 0 ? NULL : weft_sched_scratch(s, bytes);
    if (f.newrank >= 0 && !tmp)
        return weft_error(WEFT_ERR_NO_MEMORY, "allreduce_recursive_doubling: out of memory (%zu bytes)", bytes);
    if ((rc = weft_sched_copy(s, acc, a->sendbuf, bytes)) || (rc = weft_sched_end_round(s)) ||
        (rc = weft_coll_fold_in_reduce(s, &f, a, acc, acc, tmp, a->count)))
        return rc;
    if (f.newrank >= 0) {
        for (int mask = 1; mask < f.p; mask <<= 1) {
            int partner = weft_coll_fold_rank(&f, f.newrank ^ mask);
            /* The reduction runs once the round's messages are done. */
            if ((rc = weft_sched_recv(s, tmp, bytes, partner)) || (rc = weft_sched_send(s, acc, bytes, partner)) ||
                (rc = weft_sched_reduce(s, a->op, a->dtype, acc, tmp, a->count)) || (rc = weft_sched_end_round(s)))
                return rc;
        }
        if ((rc = weft_sched_op_finalize(s, a->op, a->dtype, acc, a->count, n)) || (rc = weft_sched_end_round(s)))
            return rc;
    }
    if ((rc = weft_coll_fold_out(s, &f, acc, bytes))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_allreduce_recursive_doubling = {
    .name = "recursive_doubling",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "whole-vector exchanges at distance 1, 2, 4...; log2(n)+2 steps; small messages",
    .build = build,
};
