/* barrier on device buffers' streams: a barrier kernel (staging.c, kernels.h: weft_ck_barrier), each rank
 * release-storing its sequence number into every peer's flags at system scope and acquire-waiting for theirs; in
 * the fused kernel's one block where WEFT_CUDA_COLL_FUSED is above 0. Stream-ordered with the device work. */
#include "coll/cuda/cuda_coll.h"

static int steps(weft_gpu_op_t *op)
{
    return weft_gpu_barrier(op);
}

WEFT_GPU_ONE_SHOT_ALG(barrier, flags, WEFT_COLL_BARRIER,
                      "a barrier kernel: release/acquire flags at system scope over CUDA IPC (stream-ordered)", steps)
