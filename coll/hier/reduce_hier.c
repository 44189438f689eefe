/* Hierarchical reduce: reduce to each node's leader, reduce among the
 * leaders to the root's node leader, which hands the result to the root
 * (when it is not the leader itself). Any ranks per node. */
#include "coll/hier/hier.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    const weft_comm_topo_t *t;
    int rc = weft_hier_shape(a, 0, "reduce hier", &t);
    if (rc) return rc;
    int me = a->comm->rank, root_node = t->node_of[a->root], root_leader = t->leader_of[root_node];
    int leader = t->my_local == 0;
    size_t bytes = a->count * a->esize;
    weft_op_t op = weft_hier_sub_op(a->op);
    /* A leader's partial result: the root's buffer where the leader is the root. */
    char *acc = NULL;
    if (leader) {
        acc = me == a->root ? a->recvbuf : weft_sched_scratch(s, bytes);
        if (!acc) return weft_error(WEFT_ERR_NO_MEMORY, "reduce hier: out of memory for %zu bytes", bytes);
    }
    weft_hier_child_t c = {.kind = WEFT_COLL_REDUCE,
                           .sub = WEFT_SUB_NODE,
                           .idx = 0,
                           .count = a->count,
                           .dtype = a->dtype,
                           .op = op,
                           .root = 0};
    c.sendbuf = leader && a->sendbuf == acc ? WEFT_IN_PLACE : a->sendbuf;
    c.recvbuf = acc;
    if ((rc = weft_hier_child(s, &c)) || (rc = weft_sched_end_round(s))) return rc;
    if (leader) {
        c = (weft_hier_child_t){.kind = WEFT_COLL_REDUCE,
                                .sub = WEFT_SUB_LEADER,
                                .idx = 1,
                                .count = a->count,
                                .dtype = a->dtype,
                                .op = op,
                                .root = root_node};
        c.sendbuf = t->my_node == root_node ? WEFT_IN_PLACE : acc;
        c.recvbuf = acc;
        if ((rc = weft_hier_child(s, &c)) || (rc = weft_sched_end_round(s))) return rc;
    }
    if (me == root_leader && me != a->root) rc = weft_sched_send(s, acc, bytes, a->root);
    if (me == a->root && me != root_leader) rc = weft_sched_recv(s, a->recvbuf, bytes, root_leader);
    if (!rc && me == a->root) rc = weft_sched_op_finalize(s, a->op, a->dtype, a->recvbuf, a->count, a->comm->size);
    return rc;
}

const weft_coll_alg_t weft_alg_reduce_hier = {
    .name = "hier",
    .kind = WEFT_COLL_REDUCE,
    .description = "reduce to node leaders, reduce among leaders, leader to root (multi-node)",
    .build = build,
};
