/* Hierarchical allreduce for large messages: reduce-scatter inside each
 * node (local rank i keeps block i), one allreduce per rail (the ranks of
 * local index i on every node) on block i, allgather inside each node.
 * Every rank moves 1/L of the data across nodes, and the L rails run at
 * once. Needs the same number of ranks L on every node (declines
 * otherwise).
 *
 * Device buffers: the node steps run in coll/cuda's kernels (equal blocks:
 * the count a multiple of L), the rail's allreduce on the host (coll/cuda's
 * staged algorithm on the rail), in pieces that overlap: while the rail
 * reduces piece k (host copies and the network), the node's GPUs
 * reduce-scatter piece k + 1 and all-gather piece k - 1. */
#include "coll/hier/hier.h"

#include <string.h>

/* Pieces of a device call: at least PIECE_MIN bytes each, at most
 * PIECES_MAX (three child steps each, within weft_hier_child's 16). */
enum { PIECES_MAX = 5 };
#define PIECE_MIN ((size_t)2 << 20)

static int build_device(weft_sched_t *s, const weft_coll_args_t *a, const weft_comm_topo_t *t)
{
    int L = t->node_size[t->my_node], me = t->my_local, rc;
    if (a->count % (size_t)L)
        return weft_coll_decline("allreduce hier_rail: device buffers of %zu elements, not a multiple of %d ranks "
                                 "per node",
                                 a->count, L);
    if (a->count == 0) return WEFT_SUCCESS; /* every rank passes the same count: nothing to do */
    weft_sched_device(s); /* the in-place form's copies */
    size_t es = a->esize, bytes = a->count * es, P = bytes / PIECE_MIN;
    if (P < 1) P = 1;
    if (P > PIECES_MAX) P = PIECES_MAX;
    /* elements a piece: a multiple of L, at least count / P (so at most P pieces) */
    size_t per = ((a->count + P - 1) / P + (size_t)L - 1) / (size_t)L * (size_t)L;
    P = (a->count + per - 1) / per;
    int inplace = a->sendbuf == a->recvbuf;
    weft_op_t op = weft_hier_sub_op(a->op);
    /* Round r: the node's reduce-scatter of piece r, the rail's allreduce of
     * piece r - 1, the node's allgather of piece r - 2. */
    for (size_t r = 0; r < P + 2; r++) {
        for (int step = 0; step < 3; step++) {
            size_t q = r - (size_t)step;
            if (r < (size_t)step || q >= P) continue;
            size_t off = q * per, n = a->count - off < per ? a->count - off : per, blk = n / (size_t)L;
            char *piece = (char *)a->recvbuf + off * es, *mine = piece + (size_t)me * blk * es;
            weft_hier_child_t c = {.sub = WEFT_SUB_NODE, .idx = (int)(3 * q) + step, .dtype = a->dtype, .op = op};
            if (step == 0) { /* in place, the block lands at the piece's start and moves to its place after */
                c.kind = WEFT_COLL_REDUCE_SCATTER_BLOCK;
                c.sendbuf = inplace ? WEFT_IN_PLACE : (const char *)a->sendbuf + off * es;
                c.recvbuf = inplace ? piece : mine;
                c.count = blk;
            } else if (step == 1) {
                c.kind = WEFT_COLL_ALLREDUCE;
                c.sub = WEFT_SUB_RAIL;
                c.sendbuf = WEFT_IN_PLACE;
                c.recvbuf = mine;
                c.count = blk;
            } else {
                c.kind = WEFT_COLL_ALLGATHER;
                c.sendbuf = WEFT_IN_PLACE;
                c.recvbuf = piece;
                c.count = blk;
            }
            if ((rc = weft_hier_child(s, &c))) return rc;
            if (step == 0 && inplace && (rc = weft_sched_copy(s, mine, piece, blk * es))) return rc;
        }
        if ((rc = weft_sched_end_round(s))) return rc;
    }
    return WEFT_SUCCESS;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    const weft_comm_topo_t *t;
    int rc = weft_hier_shape(a, 1, "allreduce hier_rail", &t);
    if (rc) return rc;
    if (a->mem != WEFT_MEM_HOST) return build_device(s, a, t);
    int L = t->node_size[t->my_node], me = t->my_local;
    weft_op_t op = weft_hier_sub_op(a->op);
    int64_t *counts = weft_sched_scratch(s, sizeof(int64_t) * 2 * (size_t)L), *displs = counts + L;
    if (!counts) return weft_error(WEFT_ERR_NO_MEMORY, "allreduce hier_rail: out of memory");
    for (int i = 0; i < L; i++) {
        size_t off, len;
        weft_coll_block(a->count, L, i, &off, &len);
        counts[i] = (int64_t)len;
        displs[i] = (int64_t)off;
    }
    char *mine = (char *)a->recvbuf + (size_t)displs[me] * a->esize;
    size_t mybytes = (size_t)counts[me] * a->esize;
    /* In place, the reduce-scatter's own in-place form leaves block `me`
     * at the start of recvbuf; it moves to its place after. */
    int inplace = a->sendbuf == a->recvbuf;
    weft_hier_child_t c = {.kind = WEFT_COLL_REDUCE_SCATTER,
                           .sub = WEFT_SUB_NODE,
                           .idx = 0,
                           .sendbuf = inplace ? WEFT_IN_PLACE : a->sendbuf,
                           .recvbuf = inplace ? a->recvbuf : mine,
                           .dtype = a->dtype,
                           .op = op,
                           .rcounts = counts};
    if ((rc = weft_hier_child(s, &c)) || (inplace && (rc = weft_sched_copy(s, mine, a->recvbuf, mybytes))) ||
        (rc = weft_sched_end_round(s)))
        return rc;
    c = (weft_hier_child_t){.kind = WEFT_COLL_ALLREDUCE,
                            .sub = WEFT_SUB_RAIL,
                            .idx = 1,
                            .sendbuf = WEFT_IN_PLACE,
                            .recvbuf = mine,
                            .count = (size_t)counts[me],
                            .dtype = a->dtype,
                            .op = op};
    if ((rc = weft_hier_child(s, &c)) ||
        (rc = weft_sched_op_finalize(s, a->op, a->dtype, mine, (size_t)counts[me], a->comm->size)) ||
        (rc = weft_sched_end_round(s)))
        return rc;
    c = (weft_hier_child_t){.kind = WEFT_COLL_ALLGATHERV,
                            .sub = WEFT_SUB_NODE,
                            .idx = 2,
                            .sendbuf = WEFT_IN_PLACE,
                            .recvbuf = a->recvbuf,
                            .count = (size_t)counts[me],
                            .dtype = a->dtype,
                            .rcounts = counts,
                            .displs = displs};
    return weft_hier_child(s, &c);
}

const weft_coll_alg_t weft_alg_allreduce_hier_rail = {
    .name = "hier_rail",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "node reduce-scatter, allreduce per rail, node allgather (multi-node, equal ranks per node)",
    .build = build,
};
