/* reduce_scatter_block on device buffers, LL (ll.c, kernels.h: weft_ck_ll_args): every rank stores block p of its
 * vector into rank p and reduces the blocks that arrive with its own, in one launch with no barrier and no staging.
 * Pieces up to the LL area's share of a sender; rules.conf says up to which size it beats the others. */
#include "coll/cuda/cuda_coll.h"

static int issue(weft_gpu_op_t *op)
{
    weft_ck_ll_args_t l;
    weft_gpu_ll_init(op, &l, op->a.count * weft_gpu_esize(&op->a));
    l.dst[0] = op->a.recvbuf;
    return weft_gpu_ll_launch(op, &l, 1);
}

WEFT_GPU_ALG(reduce_scatter, ll, WEFT_COLL_REDUCE_SCATTER_BLOCK,
             "LL: every rank stores block p of its vector into rank p's LL area and reduces what arrives in rank order",
             weft_gpu_ll_takes, issue)
