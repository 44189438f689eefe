/* reduce on device buffers, LL (ll.c, kernels.h: weft_ck_ll_args): every rank but the root stores its vector into the
 * root, which reduces; the root sends the others a token, so every rank hears from every peer in every call, in one
 * launch with no barrier and no staging. Pieces up to the LL area's share of a sender; rules.conf says up to which size
 * it beats the others. */
#include "coll/cuda/cuda_coll.h"

static int issue(weft_gpu_op_t *op)
{
    weft_ck_ll_args_t l;
    int me = op->st->me, root = op->a.root;
    weft_gpu_ll_init(op, &l, 0);
    l.send_mask = me == root ? 0 : 1u << root;
    l.recv_mask = me == root ? weft_gpu_others(op->st->n, me) : 0;
    l.dst[0] = me == root ? op->a.recvbuf : NULL;
    return weft_gpu_ll_launch(op, &l, 1);
}

WEFT_GPU_ALG(reduce, ll, WEFT_COLL_REDUCE,
             "LL as allreduce's, every rank's vector stored into the root alone, which reduces", weft_gpu_ll_takes,
             issue)
