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
#include "coll/coll.h"

/* Offset of block i of p (block p starts at count). */
static size_t block_off(size_t count, int p, int i)
{
    size_t off, len;
    if (i >= p) return count;
    weft_coll_block(count, p, i, &off, &len);
    return off;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize, count = a->count;
    char *acc = a->recvbuf;
    if (count == 0) return WEFT_SUCCESS;
    if ((rc = weft_sched_copy(s, acc, a->sendbuf, count * es)) || (rc = weft_sched_end_round(s))) return rc;
    if (n == 1) return weft_sched_op_finalize(s, a->op, a->dtype, acc, count, 1);
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    int rem = n - p, newrank;
    /* The first half is the larger one (weft_coll_block puts the remainder
     * first); an even rank of the pre-step only sends and receives in place. */
    size_t tmp_elems = r < 2 * rem ? (r % 2 ? count : 0) : block_off(count, p, p / 2);
    char *tmp = weft_sched_scratch(s, tmp_elems * es);
    if (!tmp)
        return weft_error(WEFT_ERR_NO_MEMORY, "allreduce_rabenseifner: out of memory (%zu bytes)", tmp_elems * es);
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            /* Hand the vector to r + 1; the result comes back at the end. */
            if ((rc = weft_sched_send(s, acc, count * es, r + 1)) || (rc = weft_sched_end_round(s)) ||
                (rc = weft_sched_recv(s, acc, count * es, r + 1)))
                return rc;
            return weft_sched_end_round(s);
        }
        if ((rc = weft_sched_recv(s, tmp, count * es, r - 1)) ||
            (rc = weft_sched_reduce(s, a->op, a->dtype, acc, tmp, count)) || (rc = weft_sched_end_round(s)))
            return rc;
        newrank = r / 2;
    } else {
        newrank = r - rem;
    }
    /* Reduce-scatter: the range [lo, hi) of blocks shrinks to block newrank. */
    int lo = 0, hi = p;
    for (int mask = p / 2; mask >= 1; mask >>= 1) {
        int pn = newrank ^ mask, partner = pn < rem ? pn * 2 + 1 : pn + rem, mid = lo + mask;
        int klo = newrank & mask ? mid : lo, khi = newrank & mask ? hi : mid;
        int slo = newrank & mask ? lo : mid, shi = newrank & mask ? mid : hi;
        size_t koff = block_off(count, p, klo), klen = block_off(count, p, khi) - koff;
        size_t soff = block_off(count, p, slo), slen = block_off(count, p, shi) - soff;
        if ((rc = weft_sched_recv(s, tmp, klen * es, partner)) ||
            (rc = weft_sched_send(s, acc + soff * es, slen * es, partner)) ||
            (rc = weft_sched_reduce(s, a->op, a->dtype, acc + koff * es, tmp, klen)) || (rc = weft_sched_end_round(s)))
            return rc;
        lo = klo;
        hi = khi;
    }
    size_t moff = block_off(count, p, newrank), mlen = block_off(count, p, newrank + 1) - moff;
    if ((rc = weft_sched_op_finalize(s, a->op, a->dtype, acc + moff * es, mlen, n)) || (rc = weft_sched_end_round(s)))
        return rc;
    /* Allgather: the same partners in reverse order; the range doubles. */
    for (int mask = 1; mask < p; mask <<= 1) {
        int pn = newrank ^ mask, partner = pn < rem ? pn * 2 + 1 : pn + rem;
        int plo = lo ^ mask, phi = plo + mask;
        size_t off = block_off(count, p, lo), len = block_off(count, p, hi) - off;
        size_t poff = block_off(count, p, plo), plen = block_off(count, p, phi) - poff;
        if ((rc = weft_sched_recv(s, acc + poff * es, plen * es, partner)) ||
            (rc = weft_sched_send(s, acc + off * es, len * es, partner)) || (rc = weft_sched_end_round(s)))
            return rc;
        if (plo < lo) lo = plo;
        hi = lo + 2 * mask;
    }
    if (r < 2 * rem && (rc = weft_sched_send(s, acc, count * es, r - 1))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_allreduce_rabenseifner = {
    .name = "rabenseifner",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "recursive-halving reduce-scatter + recursive-doubling allgather, 2log2(n)(+2) steps; large",
    .build = build,
};
