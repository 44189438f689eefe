/* reduce, shared memory: every rank writes its input to its slot; the root
 * reduces in rank order (below 2 KiB or < 4 ranks), or each rank reduces 1/n of the
 * vector and the root copies the chunks out (from 2 KiB). No messages. Up
 * to one slot (16 KiB); larger vectors decline. */
#include "coll/shm/segment.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    return weft_shm_reduce_build(s, a, a->root, "reduce_shm");
}

const weft_coll_alg_t weft_alg_reduce_shm = {
    .name = "shm",
    .kind = WEFT_COLL_REDUCE,
    .description = "one node, up to 16 KiB: slots in a shared segment; the root (or every rank, a chunk each) reduces",
    .build = build,
};
