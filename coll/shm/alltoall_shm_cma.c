/* alltoall, shared memory, single copy: every rank lends its send buffer
 * (pid, address and the call's signature in its flag line, then its
 * arrival flag) and, once all arrived, copies its own block of every
 * peer's send buffer straight into its result with process_vm_readv,
 * from the next rank on (at each step every owner has one reader). One
 * copy per block, every block in flight at once where pairwise exchange
 * over UCX has one message in flight per rank. A rank returns only when
 * every member's done flag says it finished reading (its send buffer must
 * stay valid until then). In place, a rank lends a copy of its buffer
 * made at post time (its result overwrites blocks its peers still read).
 * Declines where CMA does not work. */
#include "coll/shm/segment.h"

#include <string.h>

typedef struct {
    weft_shm_op_t op;
    const char *send;
    char *recv;
    size_t block;
    uint64_t sig; /* the call's (weft_shm_sig of the send buffer) */
    int rc;       /* the first failed read or signature mismatch */
} alltoall_t;

/* This rank's block of every peer's send buffer, from the next rank on. */
static int read_blocks(weft_shm_op_t *op, void *arg)
{
    alltoall_t *g = arg;
    int n = op->sh->n, me = op->sh->me, rc = 0;
    memcpy(g->recv + (size_t)me * g->block, g->send + (size_t)me * g->block, g->block);
    for (int i = 1; i < n && !rc; i++) {
        int r = (me + i) % n;
        rc = weft_shm_cma_read_lent(op->sh, r, g->sig, (size_t)me * g->block, g->recv + (size_t)r * g->block, g->block,
                                    "alltoall_shm_cma");
    }
    return rc;
}

static int step(weft_sched_t *s, void *arg)
{
    alltoall_t *g = arg;
    return weft_shm_cma_run(s, &g->op, g->send, g->sig, &g->rc, read_blocks, g);
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t block = a->count * a->esize;
    weft_shm_t *sh = block ? weft_shm_get_cma(a->comm) : NULL;
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    alltoall_t *g = weft_shm_op_alloc(s, sh, sizeof(*g), 0, "alltoall_shm_cma");
    if (!g) return WEFT_ERR_NO_MEMORY;
    if (!(g->send = weft_coll_send_source(s, a, block * (size_t)sh->n, "alltoall_shm_cma"))) return WEFT_ERR_NO_MEMORY;
    g->recv = a->recvbuf;
    g->block = block;
    g->sig = weft_shm_sig(a, block * (size_t)sh->n);
    return weft_sched_poll(s, step, g);
}

const weft_coll_alg_t weft_alg_alltoall_shm_cma = {
    .name = "shm_cma",
    .kind = WEFT_COLL_ALLTOALL,
    .description = "one node, CMA: each rank copies its block of every send buffer straight from its owner "
                   "(process_vm_readv), all blocks in flight",
    .build = build,
};
