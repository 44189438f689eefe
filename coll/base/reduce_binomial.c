/* reduce, binomial tree towards root, pipelined in segments: a rank at
 * distance v from the root has children v + 1, v + 2, v + 4, ... (below
 * v's lowest set bit) and parent v - lowbit(v). The message moves in
 * segments of WEFT_COLL_SEG_BYTES: for each segment a rank adds its
 * children's partial results, one child per round in the same order as
 * before (own data, then child v + 1, v + 2, ...), and sends the segment
 * to its parent in the round that receives the next segment's first child,
 * so every level of the tree works on a different segment at once. The
 * order of additions for every element is fixed by n and root, so results
 * are reproducible run to run. ceil(log2 n) levels; (children x segments)
 * rounds on a rank. Extra memory: none on leaves, one segment at the root
 * (the output accumulates in place), two on inner ranks (the partial sum
 * and a receive buffer), whatever the message size. */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, vr = weft_mod(a->comm->rank - a->root, n), rc;
    size_t es = a->esize, count = a->count, seg = weft_coll_seg_elems(es), nsegs = weft_coll_nsegs(count, seg);
    const char *mine = a->sendbuf;
    if (n == 1) {
        if ((rc = weft_sched_copy(s, a->recvbuf, mine, count * es)) || (rc = weft_sched_end_round(s)) ||
            (rc = weft_sched_op_finalize(s, a->op, a->dtype, a->recvbuf, count, 1)))
            return rc;
        return weft_sched_end_round(s);
    }
    /* Children in the order their contributions are added. */
    int kids[32], nkids = 0, low = vr & -vr;
    for (int mask = 1; mask < n && (vr == 0 || mask < low); mask <<= 1)
        if (vr + mask < n) kids[nkids++] = (vr + mask + a->root) % n;
    int parent = vr ? (vr - low + a->root) % n : -1;
    size_t sbytes = (count < seg ? count : seg) * es;
    if (nkids == 0) {
        /* A leaf sends its input a segment per round; the parent's receives pace it. */
        for (size_t j = 0; j < nsegs; j++) {
            size_t off, len;
            weft_coll_seg(count, seg, j, &off, &len);
            if ((rc = weft_sched_send(s, mine + off * es, len * es, parent)) || (rc = weft_sched_end_round(s)))
                return rc;
        }
        return WEFT_SUCCESS;
    }
    /* The root accumulates each segment in its output; inner ranks in one
     * segment of scratch, sent on (and so free again) in the next round. */
    char *tmp = weft_sched_scratch(s, sbytes), *part = vr == 0 ? NULL : weft_sched_scratch(s, sbytes);
    if (!tmp || (vr != 0 && !part))
        return weft_error(WEFT_ERR_NO_MEMORY, "reduce_binomial: out of memory (%zu bytes)", 2 * sbytes);
    size_t prev_len = 0;
    for (size_t j = 0; j < nsegs; j++) {
        size_t off, len;
        weft_coll_seg(count, seg, j, &off, &len);
        char *acc = vr == 0 ? (char *)a->recvbuf + off * es : part;
        for (int k = 0; k < nkids; k++) {
            if ((rc = weft_sched_recv(s, tmp, len * es, kids[k]))) return rc;
            if (k == 0) {
                /* The previous segment goes up in this round; the local
                 * steps that overwrite part run after that send is done. */
                if (j > 0 && vr != 0 && (rc = weft_sched_send(s, part, prev_len * es, parent))) return rc;
                if ((rc = weft_sched_copy(s, acc, mine + off * es, len * es))) return rc;
            }
            if ((rc = weft_sched_reduce(s, a->op, a->dtype, acc, tmp, len))) return rc;
            if (k == nkids - 1 && vr == 0 && (rc = weft_sched_op_finalize(s, a->op, a->dtype, acc, len, n))) return rc;
            if ((rc = weft_sched_end_round(s))) return rc;
        }
        prev_len = len;
    }
    if (vr != 0 && nsegs > 0 &&
        ((rc = weft_sched_send(s, part, prev_len * es, parent)) || (rc = weft_sched_end_round(s))))
        return rc;
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_reduce_binomial = {
    .name = "binomial",
    .kind = WEFT_COLL_REDUCE,
    .description = "binomial tree to the root, pipelined in segments, ceil(log2 n) levels, <= 2 segments of scratch",
    .build = build,
};
