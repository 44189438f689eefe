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

/* Every peer's block, from the next rank on: readers spread over the owners. */
static int read_blocks(weft_shm_op_t *op, void *arg)
{
    weft_shm_allgather_t *g = arg;
    int n = op->sh->n, me = op->sh->me, rc = 0;
    if (g->dst[me] != g->send) memcpy(g->dst[me], g->send, g->bytes);
    for (int i = 1; i < n && !rc; i++) {
        int r = (me + i) % n;
        rc = weft_shm_cma_read_lent(op->sh, r, g->sig, 0, g->dst[r], g->bytes, "allgather_shm_cma");
    }
    return rc;
}

static int step(weft_sched_t *s, void *arg)
{
    weft_shm_allgather_t *g = arg;
    return weft_shm_cma_run(s, &g->op, g->send, g->sig, &g->rc, read_blocks, g);
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
