/* The reductions through the slots (reduce_tree.h): their state, the
 * pieces, and the flag tree's way up that reduce_shm and allreduce_shm
 * share. What the root does with the reduced partials is its algorithm's
 * (reduce_shm.c: straight into the result; allreduce_shm.c: into its slot,
 * then every rank reads it). */
#include "coll/shm/reduce_tree.h"

#include <string.h>

int weft_shm_reduce_build(weft_sched_t *s, const weft_coll_args_t *a, int root, weft_sched_poll_fn step,
                          const char *alg)
{
    size_t per;
    weft_shm_t *sh = a->count ? weft_shm_get(a->comm, 0) : NULL;
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    uint64_t nk = weft_shm_pieces(a->count, a->esize, &per);
    weft_shm_reduce_t *x = weft_shm_op_alloc(s, sh, sizeof(*x), (size_t)sh->n, alg);
    if (!x) return WEFT_ERR_NO_MEMORY;
    x->got = weft_shm_op_extra(x, sizeof(*x));
    memset(x->got, 0, (size_t)sh->n);
    x->op.nk = nk;
    x->send0 = a->sendbuf;
    x->recv0 = a->recvbuf;
    x->total = a->count;
    x->per = per;
    x->esize = a->esize;
    x->dtype = (int)a->dtype;
    x->rop = (int)a->op;
    x->root = root;
    x->alg = alg;
    x->sig = weft_shm_sig(a, (uint64_t)a->count * a->esize);
    return weft_sched_poll(s, step, x);
}

void weft_shm_reduce_set_piece(weft_shm_reduce_t *x)
{
    weft_shm_op_t *op = &x->op;
    size_t first = (size_t)x->piece * x->per;
    op->k = x->k0 + x->piece;
    op->phase = 1;
    x->count = x->total - first < x->per ? x->total - first : x->per;
    x->send = x->send0 + first * x->esize;
    x->recv = x->recv0 ? x->recv0 + first * x->esize : NULL;
}

void weft_shm_reduce_children(weft_shm_reduce_t *x, void *dst, int v, int root)
{
    weft_shm_op_t *op = &x->op;
    weft_shm_t *sh = op->sh;
    size_t bytes = x->count * x->esize;
    const void *acc = x->send;
    if (bytes > WEFT_SHM_INLINE)
        WEFT_SHM_FOR_CHILDREN(sh, v, root, c, { weft_shm_prefetch(weft_shm_buf(op, c, bytes), bytes); });
    WEFT_SHM_FOR_CHILDREN(sh, v, root, c, {
        weft_op_reduce3((weft_op_t)x->rop, (weft_dtype_t)x->dtype, dst, acc, weft_shm_buf(op, c, bytes), x->count);
        acc = dst;
    });
    if (acc != dst) memcpy(dst, acc, bytes); /* a leaf */
}

int weft_shm_tree_up(weft_sched_t *s, weft_shm_reduce_t *x, int root)
{
    weft_shm_op_t *op = &x->op;
    weft_shm_t *sh = op->sh;
    int v = weft_shm_vrank(sh, root);
    size_t bytes = x->count * x->esize;
    if (!weft_shm_wait_children(s, op, root, "partial flag")) return 0;
    if (x->piece == 0) /* the first piece checks the children's signatures (the call goes on: nobody waits) */
        WEFT_SHM_FOR_CHILDREN(sh, v, root, c, {
            if (!x->rc) x->rc = weft_shm_sig_mismatch(op, c, root, x->sig, x->alg);
        });
    if (v == 0) return 1;
    if (!weft_shm_claim(s, op, WEFT_SHM_READ_PARENT, root)) return 0;
    weft_shm_reduce_children(x, weft_shm_buf(op, sh->me, bytes), v, root);
    weft_shm_head_publish_msg(op, WEFT_SHM_PARTIAL, x->rc ? WEFT_SHM_SIG_BAD : x->sig);
    return 1;
}
