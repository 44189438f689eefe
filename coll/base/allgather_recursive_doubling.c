/* allgather, recursive doubling: in round k a rank swaps everything it has
 * gathered so far (2^k blocks) with the partner at distance 2^k, so log2 n
 * rounds when n is a power of two. Any other n is handled, not declined:
 * with p the largest power of two <= n and rem = n - p, the first 2 * rem
 * ranks pair up (the even one hands its block to the odd one and sits
 * out), the p remaining ranks run recursive doubling on groups of one or
 * two blocks, which stay contiguous in rank order, and each odd rank hands
 * the whole result back to its even partner: log2 p + 2 steps.
 * Extra memory: p + 1 offsets for the contiguous output (every message
 * lands in place, one message per step); the list output gathers into n
 * blocks of scratch, copied out at the end. Small messages. */
#include "coll/base/builders.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t block = a->count * a->esize;
    weft_coll_fold_t f;
    weft_coll_fold_init(&f, n, r, 0, 1);
    char *w = a->recvbuf;
    if (a->recvbufs && !(w = weft_sched_scratch(s, (size_t)n * block)))
        return weft_error(WEFT_ERR_NO_MEMORY, "allgather_recursive_doubling: out of memory for %d x %zu bytes", n,
                          block);
    /* Survivor i's segment: the blocks of the ranks it stands for. */
    size_t *seg = f.newrank < 0 ? NULL : weft_coll_fold_segments(s, &f, NULL, a->count, "allgather_recursive_doubling");
    if (f.newrank >= 0 && !seg) return WEFT_ERR_NO_MEMORY;
    if ((rc = weft_sched_copy(s, w + (size_t)r * block, a->sendbuf, block)) || (rc = weft_sched_end_round(s)))
        return rc;
    /* A survivor takes its partner's block, and hands it the whole result at the end. */
    if (f.partner >= 0 && (rc = weft_coll_fold_in(s, &f, a->sendbuf, w + (size_t)f.partner * block, block))) return rc;
    if (f.newrank >= 0 && (rc = weft_coll_allgather_doubling_build(s, &f, seg, a->esize, w))) return rc;
    if ((rc = weft_coll_fold_out(s, &f, w, (size_t)n * block))) return rc;
    /* Copies after the last round's messages. */
    if (a->recvbufs)
        for (int i = 0; i < n; i++)
            if ((rc = weft_sched_copy(s, a->recvbufs[i], w + (size_t)i * block, block))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_allgather_recursive_doubling = {
    .name = "recursive_doubling",
    .kind = WEFT_COLL_ALLGATHER,
    .description = "recursive doubling, log2 n rounds (log2 p + 2 for other n), a table of p + 1 offsets as scratch "
                   "(list: n blocks); "
                   "small messages",
    .build = build,
};
