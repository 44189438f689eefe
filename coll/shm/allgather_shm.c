/* allgather, shared memory: every rank writes its block to its slot and,
 * once all arrived, copies every slot into its result. Blocks up to one
 * slot (64 KiB); larger ones decline. */
#include "coll/shm/allgather.h"

#include <string.h>

static int step(weft_sched_t *s, void *arg)
{
    weft_shm_allgather_t *g = arg;
    weft_shm_op_t *op = &g->op;
    int rc;
    switch (op->phase) {
    case 0:
    case 1:
        if ((rc = weft_shm_contribute(s, op, g->send, g->bytes, g->sig)) <= 0) return rc;
        /* fall through */
    case 2:
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, arrived), op->k + 1, -1, "arrival flag")) return 0;
        g->rc = weft_shm_check_sigs(op, g->sig, "allgather_shm");
        for (int r = 0; !g->rc && r < op->sh->n; r++)
            if (g->dst[r] != g->send) memcpy(g->dst[r], weft_shm_slot(op, r), g->bytes);
        weft_shm_op_end(op);
        return g->rc ? g->rc : 1;
    }
    return WEFT_ERR_INTERNAL;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t bytes = a->count * a->esize;
    return weft_shm_allgather_build(s, a, bytes ? weft_shm_get(a->comm, bytes) : NULL, step, "allgather_shm");
}

const weft_coll_alg_t weft_alg_allgather_shm = {
    .name = "shm",
    .kind = WEFT_COLL_ALLGATHER,
    .description =
        "one node, blocks up to a slot (64 KiB): each rank writes its slot of a shared segment, all copy every slot",
    .build = build,
};
