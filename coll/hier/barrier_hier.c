/* Hierarchical barrier: a barrier inside each node (its leader then knows
 * the node arrived), a barrier among the leaders, a barrier inside each
 * node again (nobody leaves before its leader came back). */
#include "coll/hier/hier.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    const weft_comm_topo_t *t;
    int rc = weft_hier_shape(a, 0, "barrier hier", &t);
    if (rc) return rc;
    weft_hier_child_t c = {.kind = WEFT_COLL_BARRIER, .sub = WEFT_SUB_NODE, .idx = 0};
    if ((rc = weft_hier_child(s, &c)) || (rc = weft_sched_end_round(s))) return rc;
    if (t->my_local == 0) {
        c = (weft_hier_child_t){.kind = WEFT_COLL_BARRIER, .sub = WEFT_SUB_LEADER, .idx = 1};
        if ((rc = weft_hier_child(s, &c)) || (rc = weft_sched_end_round(s))) return rc;
    }
    c = (weft_hier_child_t){.kind = WEFT_COLL_BARRIER, .sub = WEFT_SUB_NODE, .idx = 2};
    return weft_hier_child(s, &c);
}

const weft_coll_alg_t weft_alg_barrier_hier = {
    .name = "hier",
    .kind = WEFT_COLL_BARRIER,
    .description = "barrier in each node, among leaders, in each node again (multi-node)",
    .build = build,
};
