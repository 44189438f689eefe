/* Node-aware alltoallv: the alltoall_hier schedule with per-peer counts
 * and displacements (see alltoall_hier.c). */
#include "coll/hier/hier.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    return weft_hier_alltoall_build(s, a, "alltoallv hier");
}

const weft_coll_alg_t weft_alg_alltoallv_hier = {
    .name = "hier",
    .kind = WEFT_COLL_ALLTOALLV,
    .description = "alltoall_hier's node-ordered rounds with per-peer counts (multi-node)",
    .build = build,
};
