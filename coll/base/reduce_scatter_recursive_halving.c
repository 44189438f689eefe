/* reduce_scatter and reduce_scatter_block, recursive halving: with p the
 * largest power of two <= n, the first 2(n - p) ranks pair up and the even
 * one hands its whole vector to the odd one, which then stands for both
 * (their blocks are adjacent in the vector). The p remaining ranks each
 * own a segment: the blocks of the ranks they stand for. In step k a rank
 * sends the half of its current range of segments its partner at distance
 * p / 2^k keeps and reduces the half it keeps, ending with its own segment
 * fully reduced; an odd rank of the pre-step then passes its partner its
 * block. Unequal counts only make the halves unequal. Each block is
 * reduced in one order fixed by n (reproducible). log2(p) steps (+ 2 when
 * n is not a power of two); (p-1)/p of the vector leaves each rank, in
 * log-many messages. Extra memory: a copy of the input vector plus the
 * larger half of it. */
#include "coll/base/builders.h"

static size_t block_count(const weft_coll_args_t *a, int i)
{
    return a->rcounts ? (size_t)a->rcounts[i] : a->count;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize, total = 0;
    size_t *off = weft_sched_scratch(s, sizeof(size_t) * (size_t)(n + 1));
    if (!off) return weft_error(WEFT_ERR_NO_MEMORY, "reduce_scatter_recursive_halving: out of memory");
    for (int i = 0; i < n; i++) {
        off[i] = total;
        total += block_count(a, i);
    }
    off[n] = total;
    size_t mine = block_count(a, r);
    if (total == 0) return WEFT_SUCCESS;
    if (n == 1) {
        if ((rc = weft_sched_copy(s, a->recvbuf, a->sendbuf, mine * es)) || (rc = weft_sched_end_round(s))) return rc;
        return weft_sched_op_finalize(s, a->op, a->dtype, a->recvbuf, mine, 1);
    }
    weft_coll_fold_t f;
    weft_coll_fold_init(&f, n, r, 0, 1);
    if (f.newrank < 0) {
        /* Hand the vector over; the partner sends this rank's block back. */
        if ((rc = weft_coll_fold_in_reduce(s, &f, a, a->sendbuf, NULL, NULL, total)) ||
            (rc = weft_coll_fold_out(s, &f, a->recvbuf, mine * es)))
            return rc;
        return weft_sched_end_round(s);
    }
    /* Survivor i's segment: the blocks of the ranks it stands for (adjacent in the vector). */
    size_t *seg = weft_coll_fold_segments(s, &f, off, 0, "reduce_scatter_recursive_halving");
    if (!seg) return WEFT_ERR_NO_MEMORY;
    size_t half = seg[f.p / 2], tmp_elems = half > total - half ? half : total - half;
    char *acc = weft_sched_scratch(s, total * es), *tmp = weft_sched_scratch(s, tmp_elems * es);
    if (!acc || !tmp)
        return weft_error(WEFT_ERR_NO_MEMORY, "reduce_scatter_recursive_halving: out of memory (%zu bytes)",
                          (total + tmp_elems) * es);
    /* The input is the partial vector until the pairs' step reduces into acc. */
    const char *src = f.partner >= 0 ? acc : a->sendbuf;
    if ((rc = weft_coll_fold_in_reduce(s, &f, a, a->sendbuf, acc, tmp, total)) ||
        (rc = weft_coll_reduce_scatter_halving_build(s, a, &f, seg, src, acc, tmp)) ||
        (f.partner >= 0 &&
         (rc = weft_coll_fold_out(s, &f, acc + off[f.partner] * es, block_count(a, f.partner) * es))) ||
        (rc = weft_sched_copy(s, a->recvbuf, acc + off[r] * es, mine * es)))
        return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_reduce_scatter_recursive_halving = {
    .name = "recursive_halving",
    .kind = WEFT_COLL_REDUCE_SCATTER,
    .description = "recursive halving, log2(n)(+2) steps, a copy of the input as scratch; large vectors",
    .build = build,
};

const weft_coll_alg_t weft_alg_reduce_scatter_block_recursive_halving = {
    .name = "recursive_halving",
    .kind = WEFT_COLL_REDUCE_SCATTER_BLOCK,
    .description = "recursive halving, log2(n)(+2) steps, a copy of the input as scratch; large vectors",
    .build = build,
};
