/* allreduce, shared memory: every rank writes its input to its slot of the
 * communicator's segment and, once all arrived, reduces in rank order (the
 * whole vector below 2 KiB; from 2 KiB each rank reduces 1/n of it and all
 * copy the chunks out). No messages; every rank gets the same bits. Up to
 * one slot (16 KiB); larger vectors decline. */
#include "coll/shm/segment.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    return weft_shm_reduce_build(s, a, -1, "allreduce_shm");
}

const weft_coll_alg_t weft_alg_allreduce_shm = {
    .name = "shm",
    .kind = WEFT_COLL_ALLREDUCE,
    .description =
        "one node, up to 16 KiB: slots in a shared segment, reduced in rank order (chunked from 2 KiB on 4+ ranks)",
    .build = build,
};
