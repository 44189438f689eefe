/* alltoall, shared memory: every rank writes its whole send buffer (one
 * block per rank) to its slot and, once all arrived, copies its own block
 * of every slot into its result. Send buffers up to one slot (64 KiB: at
 * 16 ranks blocks of up to 4 KiB); larger ones decline. In place, the
 * send buffer is the result buffer, copied into the slot before any of it
 * is overwritten. */
#include "coll/shm/segment.h"

#include <string.h>

typedef struct {
    weft_shm_op_t op;
    const char *send;
    char *recv;
    size_t block;
    uint64_t sig;
} alltoall_t;

static int step(weft_sched_t *s, void *arg)
{
    alltoall_t *g = arg;
    weft_shm_op_t *op = &g->op;
    int n = op->sh->n, me = op->sh->me, rc;
    switch (op->phase) {
    case 0:
    case 1:
        if ((rc = weft_shm_contribute(s, op, g->send, g->block * (size_t)n, g->sig)) <= 0) return rc;
        /* fall through */
    case 2:
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, arrived), op->k + 1, -1, "arrival flag")) return 0;
        rc = weft_shm_check_sigs(op, g->sig, "alltoall_shm");
        for (int r = 0; !rc && r < n; r++)
            memcpy(g->recv + (size_t)r * g->block, weft_shm_slot(op, r) + (size_t)me * g->block, g->block);
        weft_shm_op_end(op);
        return rc ? rc : 1;
    }
    return WEFT_ERR_INTERNAL;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t block = a->count * a->esize, bytes = block * (size_t)a->comm->size;
    weft_shm_t *sh = bytes ? weft_shm_get(a->comm, bytes) : NULL;
    if (!sh) return weft_coll_decline("alltoall shm: %zu bytes a rank (at most one slot, one node)", bytes);
    alltoall_t *g = weft_shm_op_alloc(s, sh, sizeof(*g), 0, "alltoall_shm");
    if (!g) return WEFT_ERR_NO_MEMORY;
    g->send = a->sendbuf == WEFT_IN_PLACE ? (const char *)a->recvbuf : (const char *)a->sendbuf;
    g->recv = a->recvbuf;
    g->block = block;
    g->sig = weft_shm_sig(a, bytes);
    return weft_sched_poll(s, step, g);
}

const weft_coll_alg_t weft_alg_alltoall_shm = {
    .name = "shm",
    .kind = WEFT_COLL_ALLTOALL,
    .description = "one node, send buffers up to a slot (64 KiB): each rank writes its send buffer to its slot of a "
                   "shared segment, all copy their block of every slot",
    .build = build,
};
