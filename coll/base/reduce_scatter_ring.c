/* reduce_scatter and reduce_scatter_block, ring, in segments: the input
 * vector is cut into the ranks' blocks and each block into segments of
 * WEFT_COLL_SEG_BYTES. Segment j of every block forms a column that one
 * pass of the classic ring reduces: in n - 1 steps each rank adds the
 * segment its left neighbour sends to its own input and passes the sum on
 * in the next step, ending with segment j of its own block fully reduced,
 * which goes straight to the output. Columns run back to back, so every
 * link carries a segment in every round. A rank holds only the segment it
 * received and the one it passes on, so extra memory is two segments
 * whatever the vector size. Each element is reduced in one fixed order
 * along the ring (own input op what came from the left), so results are
 * reproducible. (n - 1) x (segments of the largest block) rounds; blocks
 * of unequal size skip their missing segments on both sides. In place the
 * result first lands where this rank's own input block was (the rest of
 * the input is still being read) and moves to the front at the end.
 * allreduce ring runs the same phase (weft_coll_reduce_scatter_ring_build). */
#include "coll/coll.h"

int weft_coll_reduce_scatter_ring_build(weft_sched_t *s, const weft_coll_args_t *a, const char *in, char *out,
                                        const size_t *off, const size_t *len, const char *alg)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize, maxblock = 0, seg = weft_coll_seg_elems(es);
    for (int i = 0; i < n; i++)
        if (len[i] > maxblock) maxblock = len[i];
    if (n == 1) {
        if ((rc = weft_sched_copy(s, out, in + off[r] * es, len[r] * es)) || (rc = weft_sched_end_round(s)) ||
            (rc = weft_sched_op_finalize(s, a->op, a->dtype, out, len[r], 1)))
            return rc;
        return weft_sched_end_round(s);
    }
    size_t sbytes = (maxblock < seg ? maxblock : seg) * es;
    char *tmp = weft_sched_scratch(s, sbytes), *part = weft_sched_scratch(s, sbytes);
    if (!tmp || !part) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory (%zu bytes)", alg, 2 * sbytes);
    int left = weft_mod(r - 1, n), right = (r + 1) % n;
    size_t nsegs = weft_coll_nsegs(maxblock, seg);
    for (size_t j = 0; j < nsegs; j++)
        for (int k = 0; k < n - 1; k++) {
            /* Step k of column j: pass on block r - k - 1, take block r - k - 2. */
            int sb = weft_mod(r - k - 1, n), rb = weft_mod(r - k - 2, n);
            size_t soff, slen, roff, rlen;
            weft_coll_seg(len[sb], seg, j, &soff, &slen);
            weft_coll_seg(len[rb], seg, j, &roff, &rlen);
            /* Step 0 sends this rank's own input; later steps the sum made in the step before. */
            const char *src = k == 0 ? in + (off[sb] + soff) * es : part;
            const char *own = in + (off[rb] + roff) * es;
            char *acc = rb == r ? out + roff * es : part;
            if ((rlen && (rc = weft_sched_recv(s, tmp, rlen * es, left))) ||
                (slen && (rc = weft_sched_send(s, src, slen * es, right))) ||
                (rc = weft_sched_copy(s, acc, own, rlen * es)) ||
                (rc = weft_sched_reduce(s, a->op, a->dtype, acc, tmp, rlen)) ||
                (rb == r && (rc = weft_sched_op_finalize(s, a->op, a->dtype, acc, rlen, n))) ||
                (rc = weft_sched_end_round(s)))
                return rc;
        }
    return WEFT_SUCCESS;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize, total = 0;
    size_t *off = weft_sched_scratch(s, 2 * sizeof(size_t) * (size_t)n), *len = off ? off + n : NULL;
    if (!off) return weft_error(WEFT_ERR_NO_MEMORY, "reduce_scatter_ring: out of memory");
    for (int i = 0; i < n; i++) {
        off[i] = total;
        len[i] = a->rcounts ? (size_t)a->rcounts[i] : a->count;
        total += len[i];
    }
    /* In place, the output's front overlaps other ranks' input blocks. */
    char *out = a->sendbuf == a->recvbuf ? (char *)a->recvbuf + off[r] * es : a->recvbuf;
    if ((rc = weft_coll_reduce_scatter_ring_build(s, a, a->sendbuf, out, off, len, "reduce_scatter_ring")) ||
        (rc = weft_sched_copy(s, a->recvbuf, out, len[r] * es)))
        return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_reduce_scatter_ring = {
    .name = "ring",
    .kind = WEFT_COLL_REDUCE_SCATTER,
    .description = "ring in segments, n-1 steps per segment, 2 segments of scratch",
    .build = build,
};

const weft_coll_alg_t weft_alg_reduce_scatter_block_ring = {
    .name = "ring",
    .kind = WEFT_COLL_REDUCE_SCATTER_BLOCK,
    .description = "ring in segments, n-1 steps per segment, 2 segments of scratch",
    .build = build,
};
