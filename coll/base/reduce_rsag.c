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
#include "coll/coll.h"

static size_t seg_off(size_t count, int p, int i)
{
    size_t off, len;
    if (i >= p) return count;
    weft_coll_block(count, p, i, &off, &len);
    return off;
}

/* Reduce-scatter by recursive halving among the p ranks newrank 0..p-1
 * (real rank: real[newrank]): src holds this rank's partial vector (it may
 * be the input), acc receives the reduced half kept at each step; at the
 * end acc holds segment newrank reduced over all n ranks (finalized). */
static int reduce_scatter_halving(weft_sched_t *s, const weft_coll_args_t *a, const int *real, int p, int newrank,
                                  const char *src, char *acc, char *tmp)
{
    size_t es = a->esize, count = a->count;
    int lo = 0, hi = p, rc;
    for (int mask = p / 2; mask >= 1; mask >>= 1) {
        int partner = real[newrank ^ mask], mid = lo + mask;
        int klo = newrank & mask ? mid : lo, khi = newrank & mask ? hi : mid;
        int slo = newrank & mask ? lo : mid, shi = newrank & mask ? mid : hi;
        size_t koff = seg_off(count, p, klo), klen = seg_off(count, p, khi) - koff;
        size_t soff = seg_off(count, p, slo), slen = seg_off(count, p, shi) - soff;
        if ((rc = weft_sched_recv(s, tmp, klen * es, partner)) ||
            (rc = weft_sched_send(s, src + soff * es, slen * es, partner)) ||
            (rc = weft_sched_copy(s, acc + koff * es, src + koff * es, klen * es)) ||
            (rc = weft_sched_reduce(s, a->op, a->dtype, acc + koff * es, tmp, klen)) || (rc = weft_sched_end_round(s)))
            return rc;
        src = acc;
        lo = klo;
        hi = khi;
    }
    size_t off = seg_off(count, p, newrank), len = seg_off(count, p, newrank + 1) - off;
    if ((rc = weft_sched_copy(s, acc + off * es, src + off * es, len * es)) ||
        (rc = weft_sched_op_finalize(s, a->op, a->dtype, acc + off * es, len, a->comm->size)))
        return rc;
    return weft_sched_end_round(s);
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, root = a->root, v = weft_mod(a->comm->rank - root, n), rc;
    size_t es = a->esize, count = a->count, bytes = count * es;
    if (count == 0) return WEFT_SUCCESS;
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    int rem = n - p, newrank;
    if (v < 2 * rem && v % 2 == 1) {
        /* Hand the vector to v - 1 and leave. */
        if ((rc = weft_sched_send(s, a->sendbuf, bytes, weft_mod(v - 1 + root, n)))) return rc;
        return weft_sched_end_round(s);
    }
    newrank = v < 2 * rem ? v / 2 : v - rem;
    int *real = weft_sched_scratch(s, sizeof(int) * (size_t)p);
    if (!real) return weft_error(WEFT_ERR_NO_MEMORY, "reduce_rsag: out of memory");
    for (int i = 0; i < p; i++)
        real[i] = ((i < rem ? 2 * i : i + rem) + root) % n;
    /* The root accumulates in its output; the first segment is the largest. */
    int absorbs = v < 2 * rem, is_root = v == 0;
    char *acc = is_root ? a->recvbuf : weft_sched_scratch(s, bytes);
    int in_place = acc == a->sendbuf;
    size_t tmp_elems = absorbs && in_place ? count : seg_off(count, p, p / 2);
    char *tmp = weft_sched_scratch(s, tmp_elems * es);
    if (!acc || !tmp) return weft_error(WEFT_ERR_NO_MEMORY, "reduce_rsag: out of memory (%zu bytes)", bytes);
    const char *src = a->sendbuf;
    if (absorbs) {
        int from = weft_mod(v + 1 + root, n);
        if (in_place) {
            if ((rc = weft_sched_recv(s, tmp, bytes, from)) ||
                (rc = weft_sched_reduce(s, a->op, a->dtype, acc, tmp, count)))
                return rc;
        } else {
            /* Receive straight into acc and add this rank's input there. */
            if ((rc = weft_sched_recv(s, acc, bytes, from)) ||
                (rc = weft_sched_reduce(s, a->op, a->dtype, acc, a->sendbuf, count)))
                return rc;
        }
        if ((rc = weft_sched_end_round(s))) return rc;
        src = acc;
    }
    if ((rc = reduce_scatter_halving(s, a, real, p, newrank, src, acc, tmp))) return rc;
    /* Binomial gather to newrank 0: the range [newrank, hi) grows towards the root. */
    int hi = newrank + 1;
    for (int mask = 1; mask < p; mask <<= 1) {
        size_t off = seg_off(count, p, newrank), end = seg_off(count, p, hi);
        if (newrank & mask) {
            if ((rc = weft_sched_send(s, acc + off * es, (end - off) * es, real[newrank - mask]))) return rc;
            return weft_sched_end_round(s);
        }
        size_t rend = seg_off(count, p, hi + mask);
        if ((rc = weft_sched_recv(s, acc + end * es, (rend - end) * es, real[newrank + mask])) ||
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
