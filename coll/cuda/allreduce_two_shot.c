/* allreduce on device buffers in two shots through the scratch slots (staging.c), 3 or more ranks: per slot
 * chunk every rank stages its vector, a barrier, each rank reduces its part (a vector-aligned n-th of the chunk)
 * of every rank's slot into its other slot, a barrier, every rank copies every part out of its owner's. A rank
 * reads about twice its vector instead of n times, for one barrier more. */
#include "coll/cuda/cuda_coll.h"

/* This rank's part of the chunk, reduced into its other slot at the part's place. */
static int reduce_part(weft_gpu_op_t *op, size_t off, size_t elems)
{
    return weft_gpu_reduce_as(op, off, (void *)(uintptr_t)off, elems, 1);
}

static int issue(weft_gpu_op_t *op)
{
    return weft_gpu_two_step(op, weft_gpu_input(&op->a), 1, 1, reduce_part);
}

WEFT_GPU_ALG(allreduce, two_shot, WEFT_COLL_ALLREDUCE,
             "two shots (3+ ranks): every rank stages its vector, a barrier, each reduces its n-th part of every "
             "rank's slot into its other slot, a barrier, every rank copies every part: about 2 x the vector read "
             "per rank instead of n x",
             weft_gpu_two_step_takes, issue)
