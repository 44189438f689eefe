/* Reduce-scatter by recursive halving and its mirror, allgather by
 * recursive doubling, over the p ranks of a fold (builders.h): shared by
 * reduce_scatter recursive_halving, allreduce Rabenseifner, reduce
 * reduce_scatter_gather and allgather recursive_doubling. Messages of empty
 * segments are still sent: the partner posts the matching receive. */
#include "coll/base/builders.h"

size_t *weft_coll_even_segments(weft_sched_t *s, int p, size_t count, const char *alg)
{
    size_t *seg = weft_sched_scratch(s, sizeof(size_t) * (size_t)(p + 1)), len;
    if (!seg) {
        weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", alg);
        return NULL;
    }
    for (int i = 0; i <= p; i++)
        weft_coll_block(count, p, i, &seg[i], &len);
    return seg;
}

size_t *weft_coll_fold_segments(weft_sched_t *s, const weft_coll_fold_t *f, const size_t *rank_off, size_t count,
                                const char *alg)
{
    size_t *seg = weft_sched_scratch(s, sizeof(size_t) * (size_t)(f->p + 1));
    if (!seg) {
        weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", alg);
        return NULL;
    }
    for (int i = 0; i <= f->p; i++) {
        int first = weft_coll_fold_first(f, i);
        seg[i] = rank_off ? rank_off[first] : (size_t)first * count;
    }
    return seg;
}

int weft_coll_reduce_scatter_halving_build(weft_sched_t *s, const weft_coll_args_t *a, const weft_coll_fold_t *f,
                                           const size_t *seg, const char *src, char *acc, char *tmp)
{
    size_t es = a->esize;
    int v = f->newrank, lo = 0, hi = f->p, rc;
    for (int mask = f->p / 2; mask >= 1; mask >>= 1) {
        int partner = weft_coll_fold_rank(f, v ^ mask), mid = lo + mask;
        int klo = v & mask ? mid : lo, khi = v & mask ? hi : mid;
        int slo = v & mask ? lo : mid, shi = v & mask ? mid : hi;
        size_t koff = seg[klo], klen = seg[khi] - koff, soff = seg[slo], slen = seg[shi] - soff;
        /* The copy is a no-op once src is acc (Rabenseifner: from the start). */
        if ((rc = weft_sched_recv(s, tmp, klen * es, partner)) ||
            (rc = weft_sched_send(s, src + soff * es, slen * es, partner)) ||
            (rc = weft_sched_copy(s, acc + koff * es, src + koff * es, klen * es)) ||
            (rc = weft_sched_reduce(s, a->op, a->dtype, acc + koff * es, tmp, klen)) || (rc = weft_sched_end_round(s)))
            return rc;
        src = acc;
        lo = klo;
        hi = khi;
    }
    /* With p == 1 there was no step: the segment is still in src. */
    size_t off = seg[v], len = seg[v + 1] - off;
    if ((rc = weft_sched_copy(s, acc + off * es, src + off * es, len * es)) ||
        (rc = weft_sched_op_finalize(s, a->op, a->dtype, acc + off * es, len, f->n)))
        return rc;
    return weft_sched_end_round(s);
}

int weft_coll_allgather_doubling_build(weft_sched_t *s, const weft_coll_fold_t *f, const size_t *seg, size_t esize,
                                       char *buf)
{
    int v = f->newrank, rc;
    for (int mask = 1; mask < f->p; mask <<= 1) {
        /* This rank has segments [mine, mine + mask), the partner [theirs, theirs + mask). */
        int pv = v ^ mask, mine = v & ~(mask - 1), theirs = pv & ~(mask - 1);
        int peer = weft_coll_fold_rank(f, pv);
        if ((rc = weft_sched_recv(s, buf + seg[theirs] * esize, (seg[theirs + mask] - seg[theirs]) * esize, peer)) ||
            (rc = weft_sched_send(s, buf + seg[mine] * esize, (seg[mine + mask] - seg[mine]) * esize, peer)))
            return rc;
        if (mask * 2 < f->p && (rc = weft_sched_end_round(s))) return rc;
    }
    return WEFT_SUCCESS;
}
