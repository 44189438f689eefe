/* reduce_scatter_block on device buffers through the pipelined kernel as a ring (pipelined.c, kernels.h:
 * weft_ck_pipe_args modes 5-8; 3 or more ranks): every rank stores only into the next rank's positions and takes out of
 * its own what the previous one stored, as NCCL's rings do: each block folded round the ring, starting after its owner
 * (the partial taken, then the rank's own input), in ring order, rounding each partial to the element type. */
#include "coll/cuda/cuda_coll.h"

static void form(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    weft_gpu_reduce_scatter_pipe(a, st, p);
    weft_gpu_pipe_ring(p, 7);
}

WEFT_GPU_PIPE_ALG(reduce_scatter, ring, WEFT_COLL_REDUCE_SCATTER_BLOCK,
                  "ring (3+ ranks): every rank stores only into the next rank's positions; each block folded round the "
                  "ring to its owner, in ring order",
                  form)
