/* reduce_scatter and reduce_scatter_block, shared memory: every rank
 * writes its whole input vector to its slot and, once all arrived, reduces
 * its own block across the slots in rank order. Vectors up to one slot
 * (64 KiB); larger ones decline. */
#include "coll/shm/segment.h"

#include <string.h>

typedef struct {
    weft_shm_op_t op;
    const void *send;
    void *recv;
    size_t total, off, len, esize; /* elements: the vector, this rank's block */
    int dtype, rop;
    uint64_t sig; /* the call's (weft_shm_sig of the vector) */
} reduce_scatter_t;

static int step(weft_sched_t *s, void *arg)
{
    reduce_scatter_t *x = arg;
    weft_shm_op_t *op = &x->op;
    int rc, n = op->sh->n;
    switch (op->phase) {
    case 0:
    case 1:
        if ((rc = weft_shm_contribute(s, op, x->send, x->total * x->esize, x->sig)) <= 0) return rc;
        /* fall through */
    case 2:
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, arrived), op->k + 1, -1, "arrival flag")) return 0;
        if ((rc = weft_shm_check_sigs(op, x->sig, "reduce_scatter_shm"))) {
            weft_shm_op_end(op); /* nothing read: every rank finds the mismatch and nobody waits */
            return rc;
        }
        if (x->len) {
            size_t at = x->off * x->esize;
            weft_op_reduce3((weft_op_t)x->rop, (weft_dtype_t)x->dtype, x->recv, weft_shm_slot(op, 0) + at,
                            weft_shm_slot(op, 1) + at, x->len);
            for (int r = 2; r < n; r++)
                weft_op_reduce((weft_op_t)x->rop, (weft_dtype_t)x->dtype, x->recv, weft_shm_slot(op, r) + at, x->len);
            weft_op_finalize((weft_op_t)x->rop, (weft_dtype_t)x->dtype, x->recv, x->len, n);
        }
        weft_shm_op_end(op);
        return 1;
    }
    return WEFT_ERR_INTERNAL;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t off, len, total = weft_coll_rs_block(a, &off, &len);
    weft_shm_t *sh = total ? weft_shm_get(a->comm, total * a->esize) : NULL;
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    reduce_scatter_t *x = weft_shm_op_alloc(s, sh, sizeof(*x), 0, "reduce_scatter_shm");
    if (!x) return WEFT_ERR_NO_MEMORY;
    x->send = a->sendbuf;
    x->recv = a->recvbuf;
    x->total = total;
    x->off = off;
    x->len = len;
    x->esize = a->esize;
    x->dtype = (int)a->dtype;
    x->rop = (int)a->op;
    x->sig = weft_shm_sig(a, (uint64_t)total * a->esize);
    return weft_sched_poll(s, step, x);
}

const weft_coll_alg_t weft_alg_reduce_scatter_shm = {
    .name = "shm",
    .kind = WEFT_COLL_REDUCE_SCATTER,
    .description =
        "one node, vectors up to a slot (64 KiB): slots in a shared segment, each rank reduces its block in rank order",
    .build = build,
};
const weft_coll_alg_t weft_alg_reduce_scatter_block_shm = {
    .name = "shm",
    .kind = WEFT_COLL_REDUCE_SCATTER_BLOCK,
    .description =
        "one node, vectors up to a slot (64 KiB): slots in a shared segment, each rank reduces its block in rank order",
    .build = build,
};
