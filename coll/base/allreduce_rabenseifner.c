/* allreduce, Rabenseifner: reduce-scatter by recursive halving, then
 * allgather by recursive doubling. With p the largest power of two <= n,
 * the first 2(n - p) ranks pair up first and the even one hands its whole
 * vector to the odd one (and gets the result back at the end), leaving p
 * ranks. The vector is cut into p blocks; in step k a rank exchanges half
 * of its current range with the partner at distance p / 2^k and reduces
 * the half it keeps, ending with one fully reduced block; the allgather
 * runs the same exchanges backwards. Each block is reduced by exactly one
 * rank, in an order fixed by n, and only copied afterwards, so every rank
 * holds the same bits, run after run. 2 log2(p) steps (+ 2 when n is not a
 * power of two); about 2 (p-1)/p of the vector crosses each link, in
 * log-many messages: large messages on any number of ranks.
 * Extra memory: half the vector (the whole vector on the n - p ranks of the
 * pre-step that absorb a partner, none on the n - p that hand theirs over). */
#include "coll/base/builders.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, rc;
    size_t es = a->esize, count = a->count;
    char *acc = a->recvbuf;
    if (count == 0) return WEFT_SUCCESS;
    if ((rc = weft_sched_copy(s, acc, a->sendbuf, count * es)) || (rc = weft_sched_end_round(s))) return rc;
    if (n == 1) return weft_sched_op_finalize(s, a->op, a->dtype, acc, count, 1);
    weft_coll_fold_t f;
    weft_coll_fold_init(&f, n, a->comm->rank, 0, 1);
    /* The first half is the larger one (weft_coll_block puts the remainder
     * first); a rank that hands its vector over only sends and receives in
     * place. tmp first: a small one takes the schedule's kept buffer. */
    size_t half, len;
    weft_coll_block(count, f.p, f.p / 2, &half, &len);
    size_t tmp_elems = f.partner >= 0 ? (f.newrank >= 0 ? count : 0) : half;
    char *tmp = weft_sched_scratch(s, tmp_elems * es);
    if (!tmp)
        return weft_error(WEFT_ERR_NO_MEMORY, "allreduce_rabenseifner: out of memory (%zu bytes)", tmp_elems * es);
    size_t *seg = weft_coll_even_segments(s, f.p, count, "allreduce_rabenseifner");
    if (!seg) return WEFT_ERR_NO_MEMORY;
    if ((rc = weft_coll_fold_in_reduce(s, &f, a, acc, acc, tmp, count))) return rc;
    if (f.newrank >= 0 && ((rc = weft_coll_reduce_scatter_halving_build(s, a, &f, seg, acc, acc, tmp)) ||
                           (rc = weft_coll_allgather_doubling_build(s, &f, seg, es, acc))))
        return rc;
    if ((rc = weft_coll_fold_out(s, &f, acc, count * es))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_allreduce_rabenseifner = {
    .name = "rabenseifner",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "recursive-halving reduce-scatter + recursive-doubling allgather, 2log2(n)(+2) steps; large",
    .build = build,
};
