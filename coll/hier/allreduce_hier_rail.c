/* Hierarchical allreduce for large messages: reduce-scatter inside each
 * node (local rank i keeps block i), one allreduce per rail (the ranks of
 * local index i on every node) on block i, allgather inside each node.
 * Every rank moves 1/L of the data across nodes, and the L rails run at
 * once. Needs the same number of ranks L on every node (declines
 * otherwise). Device buffers: the node steps run in coll/cuda's kernels
 * (equal blocks: the count a multiple of L), the rail's allreduce through
 * host copies (coll/cuda's staged algorithm on the rail). */
#include "coll/hier/hier.h"

#include <string.h>

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    const weft_comm_topo_t *t;
    int rc = weft_hier_shape(a, 1, "allreduce hier_rail", &t);
    if (rc) return rc;
    int L = t->node_size[t->my_node], me = t->my_local;
    /* Device buffers: the node steps in coll/cuda's kernels, which take equal
     * blocks (reduce_scatter_block, allgather); the rail step staged. */
    int device = a->mem != WEFT_MEM_HOST;
    if (device && a->count % (size_t)L)
        return weft_coll_decline("allreduce hier_rail: device buffers of %zu elements, not a multiple of %d ranks "
                                 "per node",
                                 a->count, L);
    if (device) weft_sched_device(s); /* the in-place form's copy */
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
    if (device) {
        c.kind = WEFT_COLL_REDUCE_SCATTER_BLOCK;
        c.count = (size_t)counts[me];
    }
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
    if (device) c.kind = WEFT_COLL_ALLGATHER;
    return weft_hier_child(s, &c);
}

const weft_coll_alg_t weft_alg_allreduce_hier_rail = {
    .name = "hier_rail",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "node reduce-scatter, allreduce per rail, node allgather (multi-node, equal ranks per node)",
    .build = build,
};
