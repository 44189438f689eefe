/* allreduce, k-nomial tree (radix 4): a reduce to rank 0 up the tree, then
 * a broadcast down the same tree. At level i (step k^i) a rank whose base-k
 * digit i is nonzero sends its partial result to the rank with that digit
 * cleared and leaves; the others receive from up to k - 1 children at once
 * and add them in rank order. The result is computed once, at rank 0, in
 * an order fixed by n, and then only copied, so every rank holds the same
 * bits, run after run. 2 ceil(log4 n) steps with whole-vector messages:
 * fewer steps than a binomial tree, for small messages and many ranks.
 * Extra memory: one message-sized buffer per child received at once (up to
 * k - 1 = 3) on ranks with children; none on leaves. */
#include "coll/coll.h"

enum { RADIX = 4 };

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t bytes = a->count * a->esize;
    char *acc = a->recvbuf, *tmp[RADIX - 1] = {NULL};
    if (a->count == 0) return WEFT_SUCCESS;
    /* Children received in one round: the most at any level below this rank's. */
    int nbuf = 0;
    long step;
    for (step = 1; step < n && (r / step) % RADIX == 0; step *= RADIX) {
        int kids = 0;
        for (int j = 1; j < RADIX && r + j * step < n; j++)
            kids++;
        if (kids > nbuf) nbuf = kids;
    }
    for (int j = 0; j < nbuf; j++)
        if (!(tmp[j] = weft_sched_scratch(s, bytes)))
            return weft_error(WEFT_ERR_NO_MEMORY, "allreduce_knomial: out of memory (%zu bytes)", bytes);
    /* Reduce towards rank 0. src is what this rank holds: its input until it
     * has added a child's contribution into acc. */
    const char *src = a->sendbuf;
    long top = step; /* the level this rank leaves at (or, at rank 0, one past the top level) */
    for (step = 1; step < top; step *= RADIX) {
        int kids = 0;
        for (int j = 1; j < RADIX && r + j * step < n; j++, kids++)
            if ((rc = weft_sched_recv(s, tmp[j - 1], bytes, (int)(r + j * step)))) return rc;
        if (!kids) continue;
        if ((rc = weft_sched_copy(s, acc, src, bytes))) return rc;
        for (int j = 0; j < kids; j++)
            if ((rc = weft_sched_reduce(s, a->op, a->dtype, acc, tmp[j], a->count))) return rc;
        if ((rc = weft_sched_end_round(s))) return rc;
        src = acc;
    }
    if (r != 0) {
        int parent = (int)(r - ((r / top) % RADIX) * top);
        if ((rc = weft_sched_send(s, src, bytes, parent)) || (rc = weft_sched_end_round(s)) ||
            (rc = weft_sched_recv(s, acc, bytes, parent)) || (rc = weft_sched_end_round(s)))
            return rc;
    } else {
        if ((rc = weft_sched_copy(s, acc, src, bytes)) ||
            (rc = weft_sched_op_finalize(s, a->op, a->dtype, acc, a->count, n)) || (rc = weft_sched_end_round(s)))
            return rc;
    }
    /* Broadcast down the same tree, the highest level first. */
    for (step = top / RADIX; step >= 1; step /= RADIX) {
        for (int j = 1; j < RADIX && r + j * step < n; j++)
            if ((rc = weft_sched_send(s, acc, bytes, (int)(r + j * step)))) return rc;
        if ((rc = weft_sched_end_round(s))) return rc;
    }
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_allreduce_knomial = {
    .name = "knomial",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "radix-4 tree reduce to rank 0 + tree bcast, 2ceil(log4 n) steps; small messages, many ranks",
    .build = build,
};
