/* allreduce on device buffers in one shot through the scratch slots (staging.c): every rank stages its vector into its
 * slot, passes a barrier, then reduces every rank's slot in rank order (the same bits everywhere); in slot-sized
 * chunks, one barrier each, or one launch of one block for a small call (fused). Takes every call the kernels can
 * run: the last of the forms rules.conf tries. */
#include "coll/cuda/cuda_coll.h"

static int steps(weft_gpu_op_t *op)
{
    return weft_gpu_one_shot_vector(op, 1);
}

WEFT_GPU_ONE_SHOT_ALG(allreduce, one_shot, WEFT_COLL_ALLREDUCE,
                      "one shot: every rank stages its vector (in slot-sized chunks), passes a barrier kernel, then "
                      "reduces every peer's slot in rank order; one launch of one block up to WEFT_CUDA_COLL_FUSED",
                      steps)
