/* bcast on device buffers, LL (ll.c, kernels.h: weft_ck_ll_args): the root stores its buffer into every other rank,
 * which copies it out; every other rank sends the root a token, in one launch with no barrier and no staging. Pieces up
 * to the LL area's share of a sender; rules.conf says up to which size it beats the others. */
#include "coll/cuda/cuda_coll.h"

static int issue(weft_gpu_op_t *op)
{
    weft_ck_ll_args_t l;
    int me = op->st->me, root = op->a.root;
    weft_gpu_ll_init(op, &l, 0);
    l.send_mask = me == root ? weft_gpu_others(op->st->n, me) : 0;
    l.recv_mask = me == root ? 0 : 1u << root;
    l.dst[root] = me == root ? NULL : op->a.recvbuf;
    return weft_gpu_ll_launch(op, &l, 0);
}

WEFT_GPU_ALG(bcast, ll, WEFT_COLL_BCAST,
             "LL: the root stores its buffer in 8-byte lines with the call's sequence number into every other rank's "
             "LL area, which copies it out",
             weft_gpu_ll_takes, issue)
