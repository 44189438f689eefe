/* allreduce, recursive doubling: with p the largest power of two <= n, the
 * first 2(n - p) ranks pair up and the even one hands its data to the odd
 * one; the p remaining ranks exchange whole vectors with partners at
 * distance 1, 2, 4, ...; the odd ranks hand the result back. log2(p) + 2
 * steps. Every pairwise step computes x op y on both sides, which is
 * bit-identical for commutative ops, so all ranks hold the same bits.
 * Extra memory: one message-sized buffer (none on the ranks that hand their
 * data over in the pre-step). Best for small messages. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t bytes = a->count * a->esize;
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    int rem = n - p;
    /* An even rank of the pre-step only sends and receives in place: no scratch. */
    int hands_over = r < 2 * rem && r % 2 == 0;
    char *acc = a->recvbuf, *tmp = hands_over ? NULL : weft_sched_scratch(s, bytes);
    if (!hands_over && !tmp)
        return weft_error(WEFT_ERR_NO_MEMORY, "allreduce_recursive_doubling: out of memory (%zu bytes)", bytes);
    if ((rc = weft_sched_copy(s, acc, a->sendbuf, bytes)) || (rc = weft_sched_end_round(s))) return rc;
    int newrank;
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            /* Hand the data to r + 1, get the result back at the end. */
            if ((rc = weft_sched_send(s, acc, bytes, r + 1)) || (rc = weft_sched_end_round(s)) ||
                (rc = weft_sched_recv(s, acc, bytes, r + 1)))
                return rc;
            return weft_sched_end_round(s);
        }
        if ((rc = weft_sched_recv(s, tmp, bytes, r - 1)) ||
            (rc = weft_sched_reduce(s, a->op, a->dtype, acc, tmp, a->count)) || (rc = weft_sched_end_round(s)))
            return rc;
        newrank = r / 2;
    } else {
        newrank = r - rem;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
        int pn = newrank ^ mask;
        int partner = pn < rem ? pn * 2 + 1 : pn + rem;
        /* The reduction runs once the round's messages are done. */
        if ((rc = weft_sched_recv(s, tmp, bytes, partner)) || (rc = weft_sched_send(s, acc, bytes, partner)) ||
            (rc = weft_sched_reduce(s, a->op, a->dtype, acc, tmp, a->count)) || (rc = weft_sched_end_round(s)))
            return rc;
    }
    if ((rc = weft_sched_op_finalize(s, a->op, a->dtype, acc, a->count, n)) || (rc = weft_sched_end_round(s)))
        return rc;
    if (r < 2 * rem && (rc = weft_sched_send(s, acc, bytes, r - 1))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_allreduce_recursive_doubling = {
    .name = "recursive_doubling",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "whole-vector exchanges at distance 1, 2, 4...; log2(n)+2 steps; small messages",
    .build = build,
};
