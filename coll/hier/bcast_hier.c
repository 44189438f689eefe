/* Hierarchical bcast: the root hands the data to its node's leader (when
 * it is not the leader itself), the leaders broadcast across nodes, and
 * each leader broadcasts inside its node. Any ranks per node. */
#include "coll/hier/hier.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    const weft_comm_topo_t *t;
    int rc = weft_hier_shape(a, 0, "bcast hier", &t);
    if (rc) return rc;
    int me = a->comm->rank, root_node = t->node_of[a->root], root_leader = t->leader_of[root_node];
    size_t bytes = a->count * a->esize;
    if (a->root != root_leader) {
        if (me == a->root) rc = weft_sched_send(s, a->recvbuf, bytes, root_leader);
        if (me == root_leader) rc = weft_sched_recv(s, a->recvbuf, bytes, a->root);
        if (rc || (rc = weft_sched_end_round(s))) return rc;
    }
    weft_hier_child_t c = {.kind = WEFT_COLL_BCAST, .recvbuf = a->recvbuf, .count = a->count, .dtype = a->dtype};
    if (t->my_local == 0) { /* leader comm rank = node index */
        c.sub = WEFT_SUB_LEADER;
        c.idx = 0;
        c.root = root_node;
        if ((rc = weft_hier_child(s, &c)) || (rc = weft_sched_end_round(s))) return rc;
    }
    c.sub = WEFT_SUB_NODE;
    c.idx = 1;
    c.root = 0;
    return weft_hier_child(s, &c);
}

const weft_coll_alg_t weft_alg_bcast_hier = {
    .name = "hier",
    .kind = WEFT_COLL_BCAST,
    .description = "root to its node leader, bcast among leaders, bcast in each node (multi-node)",
    .build = build,
};
