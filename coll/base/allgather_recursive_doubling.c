/* allgather, recursive doubling: in round k a rank swaps everything it has
 * gathered so far (2^k blocks) with the partner at distance 2^k, so log2 n
 * rounds when n is a power of two. Any other n is handled, not declined:
 * with p the largest power of two <= n and rem = n - p, the first 2 * rem
 * ranks pair up (the even one hands its block to the odd one and sits
 * out), the p remaining ranks run recursive doubling on groups of one or
 * two blocks, which stay contiguous in rank order, and each odd rank hands
 * the whole result back to its even partner: log2 p + 2 steps.
 * Extra memory: none for the contiguous output (every message lands in
 * place, one message per step); the list output gathers into n blocks of
 * scratch, copied out at the end. Small messages. */
#include "coll/coll.h"

/* The first rank of virtual rank v's group (v == p gives n). */
static int group_lo(int v, int rem)
{
    return v < rem ? 2 * v : v + rem;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t block = a->count * a->esize;
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    int rem = n - p;
    char *w = a->recvbuf;
    if (a->recvbufs && !(w = weft_sched_scratch(s, (size_t)n * block)))
        return weft_error(WEFT_ERR_NO_MEMORY, "allgather_recursive_doubling: out of memory for %d x %zu bytes", n,
                          block);
    if ((rc = weft_sched_copy(s, w + (size_t)r * block, a->sendbuf, block)) || (rc = weft_sched_end_round(s)))
        return rc;
    if (r < 2 * rem && r % 2 == 0) {
        /* Hand the block to r + 1 and get the whole result back. */
        if ((rc = weft_sched_send(s, a->sendbuf, block, r + 1)) || (rc = weft_sched_end_round(s)) ||
            (rc = weft_sched_recv(s, w, (size_t)n * block, r + 1)))
            return rc;
    } else {
        int v = r - rem;
        if (r < 2 * rem) {
            v = r / 2;
            if ((rc = weft_sched_recv(s, w + (size_t)(r - 1) * block, block, r - 1)) || (rc = weft_sched_end_round(s)))
                return rc;
        }
        for (int mask = 1; mask < p; mask <<= 1) {
            int pv = v ^ mask, mine = v & ~(mask - 1), theirs = pv & ~(mask - 1);
            int peer = pv < rem ? 2 * pv + 1 : pv + rem;
            int mlo = group_lo(mine, rem), mhi = group_lo(mine + mask, rem);
            int tlo = group_lo(theirs, rem), thi = group_lo(theirs + mask, rem);
            if ((rc = weft_sched_recv(s, w + (size_t)tlo * block, (size_t)(thi - tlo) * block, peer)) ||
                (rc = weft_sched_send(s, w + (size_t)mlo * block, (size_t)(mhi - mlo) * block, peer)))
                return rc;
            if (mask * 2 < p && (rc = weft_sched_end_round(s))) return rc;
        }
        if (r < 2 * rem && ((rc = weft_sched_end_round(s)) || (rc = weft_sched_send(s, w, (size_t)n * block, r - 1))))
            return rc;
    }
    /* Copies after the last round's messages. */
    if (a->recvbufs)
        for (int i = 0; i < n; i++)
            if ((rc = weft_sched_copy(s, a->recvbufs[i], w + (size_t)i * block, block))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_allgather_recursive_doubling = {
    .name = "recursive_doubling",
    .kind = WEFT_COLL_ALLGATHER,
    .description = "recursive doubling, log2 n rounds (log2 p + 2 for other n), no scratch (list: n blocks); "
                   "small messages",
    .build = build,
};
