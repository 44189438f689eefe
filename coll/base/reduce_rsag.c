/* reduce, reduce-scatter + gather (Rabenseifner's reduce): ranks are
 * numbered from the root (v = rank - root mod n); with p the largest power
 * of two <= n, the first 2(n - p) of them pair up and the odd one hands its
 * whole vector to the even one, leaving p ranks, the root among them. The
 * vector is cut into p segments and reduce-scattered by recursive halving
 * (step k: exchange half of the current range with the partner at distance
 * p / 2^k, reduce the half kept), then a binomial gather runs the same
 * pairs backwards and brings the segments to the root, which accumulates
 * straight into its output. The order of additions is fixed by n and root
 * (reproducible). 2 log2(p) steps (+1 when n is not a power of two); the
 * root receives only (p-1)/p of the vector and no rank reduces more than
 * one vector: large messages. Extra memory: half the vector, plus a
 * message-sized accumulator off the root (the whole vector for a root that
 * absorbs a partner in place). */
#include "coll/base/builders.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, rc;
    size_t es = a->esize, count = a->count, bytes = count * es;
    if (count == 0) return WEFT_SUCCESS;
    /* Pairs counted from the root, the even rank survives: the root is survivor 0. */
    weft_coll_fold_t f;
    weft_coll_fold_init(&f, n, a->comm->rank, a->root, 0);
    if (f.newrank < 0) return weft_coll_fold_in_reduce(s, &f, a, a->sendbuf, NULL, NULL, count); /* and leave */
    int newrank = f.newrank, p = f.p;
    size_t *seg = weft_coll_even_segments(s, p, count, "reduce_rsag");
    if (!seg) return WEFT_ERR_NO_MEMORY;
    /* The root accumulates in its output; the first segment is the largest. */
    int absorbs = f.partner >= 0;
    char *acc = newrank == 0 ? a->recvbuf : weft_sched_scratch(s, bytes);
    int in_place = acc == a->sendbuf;
    size_t tmp_elems = absorbs && in_place ? count : seg[p / 2];
    char *tmp = weft_sched_scratch(s, tmp_elems * es);
    if (!acc || !tmp) return weft_error(WEFT_ERR_NO_MEMORY, "reduce_rsag: out of memory (%zu bytes)", bytes);
    /* Unless acc is the input (the root in place), the partner's vector lands straight in acc. */
    if ((rc = weft_coll_fold_in_reduce(s, &f, a, a->sendbuf, acc, tmp, count)) ||
        (rc = weft_coll_reduce_scatter_halving_build(s, a, &f, seg, absorbs ? acc : a->sendbuf, acc, tmp)))
        return rc;
    /* Binomial gather to survivor 0: the range [newrank, hi) grows towards the root. */
    int hi = newrank + 1;
    for (int mask = 1; mask < p; mask <<= 1) {
        size_t off = seg[newrank], end = seg[hi];
        if (newrank & mask) {
            if ((rc = weft_sched_send(s, acc + off * es, (end - off) * es, weft_coll_fold_rank(&f, newrank - mask))))
                return rc;
            return weft_sched_end_round(s);
        }
        size_t rend = seg[hi + mask];
        if ((rc = weft_sched_recv(s, acc + end * es, (rend - end) * es, weft_coll_fold_rank(&f, newrank + mask))) ||
            (rc = weft_sched_end_round(s)))
            return rc;
        hi += mask;
    }
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_reduce_reduce_scatter_gather = {
    .name = "reduce_scatter_gather",
    .kind = WEFT_COLL_REDUCE,
    .description = "recursive-halving reduce-scatter + binomial gather, 2log2(n)(+1) steps; large messages",
    .build = build,
};
