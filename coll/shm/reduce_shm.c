/* reduce, shared memory: up the flag tree (radix WEFT_SHM_RADIX,
 * reduce_tree.h), each rank reduces its input and its children's partials
 * into its slot in a fixed order and publishes it; non-roots leave right
 * there (nothing waits for the root), the root reduces its children's
 * partials straight into the result. No messages. A vector over a slot
 * goes in 64 KiB pieces, pipelined (reduce_tree.h). The chunked shape
 * (allreduce's) measured 2-4x slower here at 2-32 KiB: its non-roots
 * cannot leave at once. */
#include "coll/shm/reduce_tree.h"

/* One piece, from its phase 1. */
static int piece_step(weft_sched_t *s, weft_shm_reduce_t *x)
{
    weft_shm_op_t *op = &x->op;
    if (!weft_shm_tree_up(s, x, x->root)) return 0;
    if (op->sh->me == x->root) { /* the root: straight into the result */
        weft_shm_reduce_children(x, x->recv, 0, x->root);
        weft_op_finalize((weft_op_t)x->rop, (weft_dtype_t)x->dtype, x->recv, x->count, op->sh->n);
    }
    weft_shm_op_end(op);
    return 1;
}

static int step(weft_sched_t *s, void *arg)
{
    return weft_shm_reduce_pieces(s, arg, piece_step, weft_shm_reduce_set_piece);
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    return weft_shm_reduce_build(s, a, a->root, step, "reduce_shm");
}

const weft_coll_alg_t weft_alg_reduce_shm = {
    .name = "shm",
    .kind = WEFT_COLL_REDUCE,
    .description = "one node: up a flag tree through slots of a shared segment, non-roots leave at once; 64 KiB pieces "
                   "over a slot",
    .build = build,
};
