/* reduce, shared memory: up the flag tree (radix WEFT_SHM_RADIX), each
 * rank reduces its input and its children's partials into its slot in a
 * fixed order and publishes it; non-roots leave at once, the root reduces
 * its children's into the result. No messages. A vector over a slot goes
 * in 64 KiB pieces, pipelined (segment.c: weft_shm_reduce_build). */
#include "coll/shm/segment.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    return weft_shm_reduce_build(s, a, a->root, 0, "reduce_shm");
}

const weft_coll_alg_t weft_alg_reduce_shm = {
    .name = "shm",
    .kind = WEFT_COLL_REDUCE,
    .description = "one node: up a flag tree through slots of a shared segment, non-roots leave at once; 64 KiB pieces "
                   "over a slot",
    .build = build,
};
