/* allgather on device buffers through the pipelined kernel as a ring (pipelined.c, kernels.h: weft_ck_pipe_args
 * modes 5-8; 3 or more ranks): every rank stores only into the next rank's positions and takes out of its own what
 * the previous one stored, as NCCL's rings do: each rank's block passed round in n - 1 steps, each rank copying what it
 * takes into its output and storing it on. */
#include "coll/cuda/cuda_coll.h"

static void form(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    weft_gpu_allgather_pipe(a, st, p);
    weft_gpu_pipe_ring(p, 5);
    p->copy_self = p->in != p->dst[st->me];
}

WEFT_GPU_PIPE_ALG(
    allgather, ring, WEFT_COLL_ALLGATHER,
    "ring (3+ ranks): every rank stores only into the next rank's positions; each block passed round in n - 1 steps",
    form)
