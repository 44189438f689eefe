/* allreduce on device buffers, LL (ll.c, kernels.h: weft_ck_ll_args): every rank stores its vector into every peer and
 * reduces the lines that arrive with its own, in rank order, in one launch with no barrier and no staging. Pieces up to
 * the LL area's share of a sender; rules.conf says up to which size it beats the others. */
#include "coll/cuda/cuda_coll.h"

static int issue(weft_gpu_op_t *op)
{
    weft_ck_ll_args_t l;
    weft_gpu_ll_init(op, &l, 0);
    l.dst[0] = op->a.recvbuf;
    return weft_gpu_ll_launch(op, &l, 1);
}

WEFT_GPU_ALG(allreduce, ll, WEFT_COLL_ALLREDUCE,
             "LL: one launch, no barrier, no staging: the vector in 8-byte lines with the call's sequence number "
             "beside them, stored into every peer's LL area; each rank reduces what arrives in rank order",
             weft_gpu_ll_takes, issue)
