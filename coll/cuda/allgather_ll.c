/* allgather on device buffers, LL (ll.c, kernels.h: weft_ck_ll_args): every rank stores its block into every peer,
 * which copies it into its place in the output, in one launch with no barrier and no staging. Pieces up to the LL
 * area's share of a sender; rules.conf says up to which size it beats the others. */
#include "coll/cuda/cuda_coll.h"

static int issue(weft_gpu_op_t *op)
{
    weft_ck_ll_args_t l;
    weft_gpu_ll_init(op, &l, 0);
    for (int p = 0; p < op->st->n; p++)
        l.dst[p] = weft_coll_rblock(&op->a, p);
    return weft_gpu_ll_launch(op, &l, 0);
}

WEFT_GPU_ALG(allgather, ll, WEFT_COLL_ALLGATHER,
             "LL: every rank stores its block in 8-byte lines with the call's sequence number into every peer's LL "
             "area, which copies it into the output",
             weft_gpu_ll_takes, issue)
