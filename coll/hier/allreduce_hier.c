/* Hierarchical allreduce for small messages: reduce to each node's leader,
 * allreduce among the leaders, broadcast inside each node. Three latency
 * terms, only one of them across nodes. Any ranks per node. */
#include "coll/hier/hier.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    const weft_comm_topo_t *t;
    int rc = weft_hier_shape(a, 0, "allreduce hier", &t);
    if (rc) return rc;
    int leader = t->my_local == 0, inplace = a->sendbuf == a->recvbuf;
    weft_op_t op = weft_hier_sub_op(a->op);
    weft_hier_child_t c = {.kind = WEFT_COLL_REDUCE,
                           .sub = WEFT_SUB_NODE,
                           .idx = 0,
                           .count = a->count,
                           .dtype = a->dtype,
                           .op = op,
                           .root = 0};
    c.sendbuf = leader && inplace ? WEFT_IN_PLACE : a->sendbuf;
    c.recvbuf = a->recvbuf;
    if ((rc = weft_hier_child(s, &c)) || (rc = weft_sched_end_round(s))) return rc;
    if (leader) {
        c = (weft_hier_child_t){.kind = WEFT_COLL_ALLREDUCE,
                                .sub = WEFT_SUB_LEADER,
                                .idx = 1,
                                .sendbuf = WEFT_IN_PLACE,
                                .recvbuf = a->recvbuf,
                                .count = a->count,
                                .dtype = a->dtype,
                                .op = op};
        if ((rc = weft_hier_child(s, &c)) ||
            (rc = weft_sched_op_finalize(s, a->op, a->dtype, a->recvbuf, a->count, a->comm->size)) ||
            (rc = weft_sched_end_round(s)))
            return rc;
    }
    c = (weft_hier_child_t){.kind = WEFT_COLL_BCAST,
                            .sub = WEFT_SUB_NODE,
                            .idx = 2,
                            .recvbuf = a->recvbuf,
                            .count = a->count,
                            .dtype = a->dtype,
                            .root = 0};
    return weft_hier_child(s, &c);
}

const weft_coll_alg_t weft_alg_allreduce_hier = {
    .name = "hier",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "reduce to node leaders, allreduce among leaders, bcast in each node (multi-node, small)",
    .build = build,
};
