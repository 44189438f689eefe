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
#include "coll/coll.h"

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
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    int rem = n - p, newrank;
    /* Segment i (of p) starts at the block of the first rank it stands for. */
#define SEG(i) ((i) >= p ? total : off[(i) < rem ? 2 * (i) : (i) + rem])
    if (r < 2 * rem && r % 2 == 0) {
        /* Hand the vector to r + 1, which sends this rank's block back. */
        if ((rc = weft_sched_send(s, a->sendbuf, total * es, r + 1)) || (rc = weft_sched_end_round(s)) ||
            (rc = weft_sched_recv(s, a->recvbuf, mine * es, r + 1)))
            return rc;
        return weft_sched_end_round(s);
    }
    size_t half = SEG(p / 2), tmp_elems = half > total - half ? half : total - half;
    char *acc = weft_sched_scratch(s, total * es), *tmp = weft_sched_scratch(s, tmp_elems * es);
    if (!acc || !tmp)
        return weft_error(WEFT_ERR_NO_MEMORY, "reduce_scatter_recursive_halving: out of memory (%zu bytes)",
                          (total + tmp_elems) * es);
    /* src: where this rank's partial vector is (its input until the first reduction). */
    const char *src = a->sendbuf;
    if (r < 2 * rem) {
        if ((rc = weft_sched_recv(s, acc, total * es, r - 1)) ||
            (rc = weft_sched_reduce(s, a->op, a->dtype, acc, a->sendbuf, total)) || (rc = weft_sched_end_round(s)))
            return rc;
        src = acc;
        newrank = r / 2;
    } else {
        newrank = r - rem;
    }
    int lo = 0, hi = p;
    for (int mask = p / 2; mask >= 1; mask >>= 1) {
        int pn = newrank ^ mask, partner = pn < rem ? pn * 2 + 1 : pn + rem, mid = lo + mask;
        int klo = newrank & mask ? mid : lo, khi = newrank & mask ? hi : mid;
        int slo = newrank & mask ? lo : mid, shi = newrank & mask ? mid : hi;
        size_t koff = SEG(klo), klen = SEG(khi) - koff, soff = SEG(slo), slen = SEG(shi) - soff;
        if ((rc = weft_sched_recv(s, tmp, klen * es, partner)) ||
            (rc = weft_sched_send(s, src + soff * es, slen * es, partner)) ||
            (rc = weft_sched_copy(s, acc + koff * es, src + koff * es, klen * es)) ||
            (rc = weft_sched_reduce(s, a->op, a->dtype, acc + koff * es, tmp, klen)) || (rc = weft_sched_end_round(s)))
            return rc;
        src = acc;
        lo = klo;
        hi = khi;
    }
    size_t soff = SEG(newrank), slen = SEG(newrank + 1) - soff;
#undef SEG
    if ((rc = weft_sched_op_finalize(s, a->op, a->dtype, acc + soff * es, slen, n)) || (rc = weft_sched_end_round(s)))
        return rc;
    if (r < 2 * rem && (rc = weft_sched_send(s, acc + off[r - 1] * es, block_count(a, r - 1) * es, r - 1))) return rc;
    if ((rc = weft_sched_copy(s, a->recvbuf, acc + off[r] * es, mine * es))) return rc;
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
