/* reduce on device buffers in one shot through the scratch slots (staging.c): every rank stages its vector into its
 * slot, passes a barrier, then the root reduces every rank's slot; in slot-sized chunks, one barrier each, or one
 * launch of one block for a small call (fused). Takes every call the kernels can run: the last of the forms rules.conf
 * tries. */
#include "coll/cuda/cuda_coll.h"

static int steps(weft_gpu_op_t *op)
{
    return weft_gpu_one_shot_vector(op, op->st->me == op->a.root);
}

WEFT_GPU_ONE_SHOT_ALG(reduce, one_shot, WEFT_COLL_REDUCE, "one shot, as allreduce's, the root alone reducing", steps)
