/* allgather, shared memory: every rank writes its block to its slot and,
 * once all arrived, copies every slot into its result. Blocks up to one
 * slot (64 KiB); larger ones decline. */
#include "coll/shm/segment.h"

#include <string.h>

typedef struct {
    weft_shm_op_t op;
    const void *send;
    size_t bytes;
    char **dst; /* where rank r's block goes (resolved at post time) */
    int rc;     /* blocks of another length on some rank */
} allgather_t;

static int step(weft_sched_t *s, void *arg)
{
    allgather_t *g = arg;
    weft_shm_op_t *op = &g->op;
    int rc;
    switch (op->phase) {
    case 0:
    case 1:
        if ((rc = weft_shm_contribute(s, op, g->send, g->bytes, g->bytes)) <= 0) return rc;
        /* fall through */
    case 2:
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, arrived), op->k + 1, -1, "arrival flag")) return 0;
        g->rc = weft_shm_check_lens(op, g->bytes, "allgather_shm");
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
    weft_shm_t *sh = bytes ? weft_shm_get(a->comm, bytes) : NULL;
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    allgather_t *g = weft_shm_op_alloc(s, sh, sizeof(*g), sizeof(char *) * (size_t)sh->n, "allgather_shm");
    if (!g) return WEFT_ERR_NO_MEMORY;
    g->send = a->sendbuf;
    g->bytes = bytes;
    g->dst = (char **)((char *)g + ((sizeof(*g) + 63) & ~(size_t)63));
    for (int r = 0; r < sh->n; r++)
        g->dst[r] = weft_coll_rblock(a, r);
    return weft_sched_poll(s, step, g);
}

const weft_coll_alg_t weft_alg_allgather_shm = {
    .name = "shm",
    .kind = WEFT_COLL_ALLGATHER,
    .description =
        "one node, blocks up to a slot (64 KiB): each rank writes its slot of a shared segment, all copy every slot",
    .build = build,
};
