/* scan and exscan, linear chain, pipelined in segments: rank r receives
 * the prefix over ranks 0..r-1 from r - 1, combines it with its own data
 * (prefix op mine, in rank order) and passes the result to r + 1. The
 * message moves in segments of WEFT_COLL_SEG_BYTES and a rank forwards
 * segment j in the round that receives segment j + 1, so the ranks of the
 * chain work on different segments at once: about (segments + n - 2)
 * rounds instead of n - 1 whole-message steps. The reduction order is rank
 * order, so results are reproducible. Extra memory: two segments on ranks
 * 1..n-1 (the segment received and the prefix passed on), none on rank 0,
 * whatever the message size. Own data is read for a segment before that
 * segment's output is written, so the in-place form needs no copy. */
#include "coll/coll.h"

static int build_chain(weft_sched_t *s, const weft_coll_args_t *a, int exclusive)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize, count = a->count, seg = weft_coll_seg_elems(es), nsegs = weft_coll_nsegs(count, seg);
    const char *mine = a->sendbuf;
    char *out = a->recvbuf;
    if (r == 0) {
        /* The prefix over rank 0 is its input: send it as it is. */
        if (!exclusive && ((rc = weft_sched_copy(s, out, mine, count * es)) || (rc = weft_sched_end_round(s))))
            return rc;
        for (size_t j = 0; n > 1 && j < nsegs; j++) {
            size_t off, len;
            weft_coll_seg(count, seg, j, &off, &len);
            if ((rc = weft_sched_send(s, mine + off * es, len * es, 1)) || (rc = weft_sched_end_round(s))) return rc;
        }
        return WEFT_SUCCESS;
    }
    size_t sbytes = (count < seg ? count : seg) * es;
    char *buf[2] = {weft_sched_scratch(s, sbytes), weft_sched_scratch(s, sbytes)};
    if (!buf[0] || !buf[1]) return weft_error(WEFT_ERR_NO_MEMORY, "scan_linear: out of memory (%zu bytes)", 2 * sbytes);
    int last = r == n - 1;
    size_t prev_len = 0;
    char *prev = NULL;
    for (size_t j = 0; j < nsegs; j++) {
        size_t off, len;
        weft_coll_seg(count, seg, j, &off, &len);
        /* Receive segment j while the prefix of segment j - 1 goes on. scan
         * passes on the buffer it received into, so it alternates the two;
         * exscan receives into one and builds the prefix in the other (its
         * send has completed when the round's local steps run). */
        char *in = exclusive ? buf[0] : buf[j % 2], *fwd = exclusive ? buf[1] : in;
        if ((rc = weft_sched_recv(s, in, len * es, r - 1)) ||
            (prev && (rc = weft_sched_send(s, prev, prev_len * es, r + 1))))
            return rc;
        if (exclusive) {
            /* out = prefix over 0..r-1 (averaged over r ranks for AVG); the
             * prefix passed on is in op mine. */
            if (!last && ((rc = weft_sched_copy(s, fwd, in, len * es)) ||
                          (rc = weft_sched_reduce(s, a->op, a->dtype, fwd, mine + off * es, len))))
                return rc;
            if ((rc = weft_sched_copy(s, out + off * es, in, len * es)) ||
                (rc = weft_sched_op_finalize(s, a->op, a->dtype, out + off * es, len, r)))
                return rc;
        } else {
            /* in := in op mine, in rank order; out = that, averaged over r + 1. */
            if ((rc = weft_sched_reduce(s, a->op, a->dtype, in, mine + off * es, len)) ||
                (rc = weft_sched_copy(s, out + off * es, in, len * es)) ||
                (rc = weft_sched_op_finalize(s, a->op, a->dtype, out + off * es, len, r + 1)))
                return rc;
        }
        if ((rc = weft_sched_end_round(s))) return rc;
        prev = last ? NULL : fwd;
        prev_len = len;
    }
    if (prev && ((rc = weft_sched_send(s, prev, prev_len * es, r + 1)) || (rc = weft_sched_end_round(s)))) return rc;
    return WEFT_SUCCESS;
}

static int build_scan(weft_sched_t *s, const weft_coll_args_t *a)
{
    return build_chain(s, a, 0);
}

static int build_exscan(weft_sched_t *s, const weft_coll_args_t *a)
{
    return build_chain(s, a, 1);
}

const weft_coll_alg_t weft_alg_scan_linear = {
    .name = "linear",
    .kind = WEFT_COLL_SCAN,
    .description = "chain from rank 0 upwards pipelined in segments, reduction in rank order, 2 segments of scratch",
    .build = build_scan,
};

const weft_coll_alg_t weft_alg_exscan_linear = {
    .name = "linear",
    .kind = WEFT_COLL_EXSCAN,
    .description = "chain from rank 0 upwards pipelined in segments, rank 0's output untouched, 2 segments of scratch",
    .build = build_exscan,
};
