/* bcast on device buffers in two steps through the scratch slots (staging.c), 3 or more ranks: per slot chunk the
 * root stages, a barrier, each rank copies its part of the root's slot into its own other slot (a one-source
 * reduce of words: the same bits), a barrier, every other rank copies every part out of its owner's. The root's
 * NVLink egress carries the chunk about twice instead of n - 1 times. */
#include "coll/cuda/cuda_coll.h"

/* This rank's part of the root's chunk, relayed into its other slot. */
static int relay_part(weft_gpu_op_t *op, size_t off, size_t elems)
{
    return weft_gpu_relay(op, op->a.root, off, elems * weft_gpu_esize(&op->a));
}

static int issue(weft_gpu_op_t *op)
{
    int root = op->st->me == op->a.root;
    return weft_gpu_two_step(op, op->a.recvbuf, root, !root, relay_part);
}

WEFT_GPU_ALG(bcast, two_step, WEFT_COLL_BCAST,
             "two steps (3+ ranks): the root stages, a barrier, each rank relays its n-th part of the root's slot "
             "through its own, a barrier, every other rank copies every part: the root's NVLink egress carries the "
             "buffer about twice instead of n - 1 times",
             weft_gpu_two_step_takes, issue)
