/* alltoall on device buffers, LL (ll.c, kernels.h: weft_ck_ll_args): every rank stores its block p into rank p, which
 * copies it into its place in the output, in one launch with no barrier and no staging. Pieces up to the LL area's
 * share of a sender; rules.conf says up to which size it beats the others. */
#include "coll/cuda/cuda_coll.h"

static int issue(weft_gpu_op_t *op)
{
    weft_ck_ll_args_t l;
    size_t block = op->a.count * weft_gpu_esize(&op->a);
    weft_gpu_ll_init(op, &l, block);
    for (int p = 0; p < op->st->n; p++)
        l.dst[p] = (char *)op->a.recvbuf + (size_t)p * block;
    return weft_gpu_ll_launch(op, &l, 0);
}

WEFT_GPU_ALG(alltoall, ll, WEFT_COLL_ALLTOALL,
             "LL: every rank stores its block p in 8-byte lines with the call's sequence number into rank p's LL area, "
             "which copies it into the output",
             weft_gpu_ll_takes, issue)
