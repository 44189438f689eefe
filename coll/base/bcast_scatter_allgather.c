/* bcast, van de Geijn: the buffer is cut into n pieces (piece v belongs to
 * the rank at distance v from the root); a binomial scatter gives every
 * rank its piece (an inner rank receives its whole subtree's pieces, which
 * are contiguous, and passes them on), then a ring allgather of the pieces
 * completes the buffer. A ring transfer is skipped where the receiver
 * already holds that piece from the scatter (the root holds all of them).
 * ceil(log2 n) + n - 1 steps; no rank sends more than about 2 buffers'
 * worth (a binomial tree's root sends log2 n whole buffers): large
 * messages. No extra memory: everything lands in place. A count smaller
 * than n leaves some pieces empty; their messages are skipped. */
#include "coll/coll.h"

/* Pieces [v, v + subtree) are what the scatter hands to virtual rank v. */
static int subtree(int v, int n)
{
    int low = v & -v;
    return v == 0 ? n : low < n - v ? low : n - v;
}

/* Byte range of pieces [lo, hi). */
static void pieces(const weft_coll_args_t *a, int n, int lo, int hi, size_t *off, size_t *len)
{
    size_t o1, o2, l;
    weft_coll_block(a->count, n, lo, &o1, &l);
    weft_coll_block(a->count, n, hi, &o2, &l);
    *off = o1 * a->esize;
    *len = (o2 - o1) * a->esize;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, root = a->root, vr = weft_mod(a->comm->rank - root, n), rc;
    char *buf = a->recvbuf;
    size_t off, len;
    if (n == 1) return WEFT_SUCCESS;
    int sub = subtree(vr, n);
    /* Scatter: receive my subtree's pieces, then hand on the children's, farthest first. */
    if (vr != 0) {
        pieces(a, n, vr, vr + sub, &off, &len);
        if (len &&
            ((rc = weft_sched_recv(s, buf + off, len, (vr - (vr & -vr) + root) % n)) || (rc = weft_sched_end_round(s))))
            return rc;
    }
    int mask = 1;
    while (mask * 2 < sub)
        mask *= 2;
    for (; mask > 0; mask >>= 1) {
        int child = vr + mask;
        if (mask >= sub) continue;
        pieces(a, n, child, child + subtree(child, n), &off, &len);
        if (len && (rc = weft_sched_send(s, buf + off, len, (child + root) % n))) return rc;
    }
    if ((rc = weft_sched_end_round(s))) return rc;
    /* Ring over virtual ranks: in step k pass on piece vr - k, take piece vr - k - 1. */
    int left = weft_mod(vr - 1, n), right = (vr + 1) % n;
    for (int k = 0; k < n - 1; k++) {
        int rp = weft_mod(vr - k - 1, n), sp = weft_mod(vr - k, n);
        if (!(rp >= vr && rp < vr + sub)) {
            pieces(a, n, rp, rp + 1, &off, &len);
            if (len && (rc = weft_sched_recv(s, buf + off, len, (left + root) % n))) return rc;
        }
        if (!(sp >= right && sp < right + subtree(right, n))) {
            pieces(a, n, sp, sp + 1, &off, &len);
            if (len && (rc = weft_sched_send(s, buf + off, len, (right + root) % n))) return rc;
        }
        if ((rc = weft_sched_end_round(s))) return rc;
    }
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_bcast_scatter_allgather = {
    .name = "scatter_allgather",
    .kind = WEFT_COLL_BCAST,
    .description = "binomial scatter of n pieces, then a ring allgather (van de Geijn), no scratch; large messages",
    .build = build,
};
