/* reduce_scatter and reduce_scatter_block, shared memory, single copy:
 * every rank lends its input vector (pid, address and the call's
 * signature in its flag line, then its arrival flag) and reduces its own
 * block straight from the members' inputs with process_vm_readv, from
 * its own on, piece by piece (weft_shm_cma_reduce). Each byte a rank needs
 * crosses between processes once, and the ranks meet twice: at the
 * arrivals and at the end, when a rank returns only after every member is
 * done reading its input (the base ring over UCX copies each byte twice
 * per hop and steps n - 1 times). In place, a rank reduces its block
 * where it lies in its own input (no other rank reads that block) and
 * moves it to the start of its buffer once every reader is done. Vectors
 * from WEFT_SHM_CMA_MIN; declines where CMA does not work. */
#include "coll/shm/segment.h"

#include <string.h>

typedef struct {
    weft_shm_op_t op;
    const char *send;
    char *recv, *dst; /* dst: where this rank's block is reduced (in place: its place in the input) */
    size_t off, len, esize; /* elements: this rank's block */
    int dtype, rop;
    uint64_t sig; /* the call's (weft_shm_sig of the vector) */
    int rc;       /* the first failed read or signature mismatch */
    char *tmp; /* a peer's piece */
} reduce_scatter_t;

static int reduce_block(weft_shm_op_t *op, void *arg)
{
    reduce_scatter_t *x = arg;
    return x->len ? weft_shm_cma_reduce(op, x->send, x->sig, x->off, x->len, x->esize, x->dtype, x->rop, x->tmp,
                                        x->dst, "reduce_scatter_shm_cma")
                  : 0;
}

static int step(weft_sched_t *s, void *arg)
{
    reduce_scatter_t *x = arg;
    int r = weft_shm_cma_run(s, &x->op, x->send, x->sig, &x->rc, reduce_block, x);
    /* every reader is done with this rank's input: in place, its block moves to the start */
    if (r == 1 && x->dst != x->recv) memmove(x->recv, x->dst, x->len * x->esize);
    return r;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t off, len, total = weft_coll_rs_block(a, &off, &len), bytes = total * a->esize;
    weft_shm_t *sh = bytes >= WEFT_SHM_CMA_MIN ? weft_shm_get_cma(a->comm) : NULL;
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    reduce_scatter_t *x = weft_shm_op_alloc(s, sh, sizeof(*x), WEFT_SHM_CMA_PIECE, "reduce_scatter_shm_cma");
    if (!x) return WEFT_ERR_NO_MEMORY;
    x->send = a->sendbuf;
    x->recv = a->recvbuf;
    x->dst = a->sendbuf == a->recvbuf ? x->recv + off * a->esize : x->recv;
    x->off = off;
    x->len = len;
    x->esize = a->esize;
    x->dtype = (int)a->dtype;
    x->rop = (int)a->op;
    x->sig = weft_shm_sig(a, bytes);
    x->tmp = weft_shm_op_extra(x, sizeof(*x));
    return weft_sched_poll(s, step, x);
}

#define DESCRIPTION                                                                                                    \
    "one node, CMA: each rank reduces its block straight from every rank's input (process_vm_readv), "  \
    "one copy a byte"
const weft_coll_alg_t weft_alg_reduce_scatter_shm_cma = {
    .name = "shm_cma",
    .kind = WEFT_COLL_REDUCE_SCATTER,
    .description = DESCRIPTION,
    .build = build,
};
const weft_coll_alg_t weft_alg_reduce_scatter_block_shm_cma = {
    .name = "shm_cma",
    .kind = WEFT_COLL_REDUCE_SCATTER_BLOCK,
    .description = DESCRIPTION,
    .build = build,
};
