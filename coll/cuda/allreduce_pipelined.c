/* allreduce on device buffers through the pipelined kernel (pipelined.c, kernels.h: weft_ck_pipe_args), the peers
 * reading: its form, which the pushed and ring forms start from. */
#include "coll/cuda/cuda_coll.h"

/* Every rank produces and reduces the whole vector, a unit at a time. */
void weft_gpu_allreduce_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    (void)a;
    (void)st;
    p->mode = 1;
}

WEFT_GPU_PIPE_ALG(
    allreduce, pipelined, WEFT_COLL_ALLREDUCE,
    "pipelined: a barrier, then one launch of many blocks; each stages its units of the vector into its positions of "
    "the slots and reduces every peer's as their flags arrive (staging, NVLink reads and reductions overlap)",
    weft_gpu_allreduce_pipe)
