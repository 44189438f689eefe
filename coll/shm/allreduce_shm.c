/* allreduce, shared memory, through the slots of the communicator's
 * segment: below WEFT_SHM_CHUNK_MIN (2 KiB) up the flag tree to rank 0,
 * whose result every rank reads (from its slot, or down the tree over
 * WEFT_SHM_FLAT_MAX); from it, on 4 or more ranks, every rank writes its
 * input, reduces 1/n of it across all slots in rank order, and all copy
 * the chunks out. No messages; every rank gets the same bits. A vector
 * over a slot goes in 64 KiB pieces (segment.c: weft_shm_reduce_build). */
#include "coll/shm/segment.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    return weft_shm_reduce_build(s, a, -1, "allreduce_shm");
}

const weft_coll_alg_t weft_alg_allreduce_shm = {
    .name = "shm",
    .kind = WEFT_COLL_ALLREDUCE,
    .description =
        "one node: slots in a shared segment, up a flag tree (chunked from 2 KiB on 4+ ranks), 64 KiB pieces over "
        "a slot",
    .build = build,
};
