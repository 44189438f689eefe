/* allgather, shared memory, single copy: every rank lends its block (its
 * pid, address and length in its flag line, then its arrival flag; in
 * place the block already in its receive buffer) and, once all arrived,
 * copies every peer's block straight from the peer's memory into its
 * result with process_vm_readv (cross-memory attach): one copy per block
 * and reader, no staging. A rank returns only when every member's done
 * flag says it finished reading (its block must stay valid until then).
 * Blocks from a full slot on (the slot algorithm "shm" serves the smaller ones);
 * declines where CMA does not work. */
#include "coll/shm/allgather.h"

static int step(weft_sched_t *s, void *arg)
{
    weft_shm_allgather_t *g = arg;
    weft_shm_op_t *op = &g->op;
    int rc, n, me;
    switch (op->phase) {
    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        weft_shm_cma_lend(op, g->send, g->sig);
        op->phase = 1;
        /* fall through */
    case 1:
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, arrived), op->k + 1, -1, "arrival flag")) return 0;
        n = op->sh->n;
        me = op->sh->me;
        if (g->dst[me] != g->send) memcpy(g->dst[me], g->send, g->bytes);
        for (int i = 1; i < n && !g->rc; i++) { /* from the next rank on: readers spread over the owners */
            int r = (me + i) % n;
            const weft_shm_ctrl_t *c = &op->sh->ctrl[r];
            g->rc = c->cma_sig != g->sig
                        ? weft_shm_sig_differs(r, -1, c->cma_sig, g->sig, "allgather_shm_cma")
                        : weft_shm_cma_read(g->dst[r], c->cma_pid, c->cma_addr, g->bytes, "allgather_shm_cma");
        }
        weft_shm_publish(op, offsetof(weft_shm_ctrl_t, done)); /* even after a failed read */
        op->phase = 2;
        /* fall through */
    case 2: /* this rank's block stays valid until every reader is done */
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, done), op->k + 1, -1, "done flag")) return 0;
        op->sh->completed = op->k + 1;
        return g->rc ? g->rc : 1;
    }
    return WEFT_ERR_INTERNAL;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t bytes = a->count * a->esize;
    return weft_shm_allgather_build(s, a, bytes >= WEFT_SHM_CMA_MIN ? weft_shm_get_cma(a->comm) : NULL, step,
                                    "allgather_shm_cma");
}

const weft_coll_alg_t weft_alg_allgather_shm_cma = {
    .name = "shm_cma",
    .kind = WEFT_COLL_ALLGATHER,
    .description = "one node, blocks over 16 KiB, CMA: each rank copies every block straight from its owner's buffer",
    .build = build,
};
