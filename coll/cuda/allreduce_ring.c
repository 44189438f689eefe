/* allreduce on device buffers through the pipelined kernel as a ring (pipelined.c, kernels.h: weft_ck_pipe_args
 * modes 5-8; 3 or more ranks): every rank stores only into the next rank's positions and takes out of its own what
 * the previous one stored, as NCCL's rings do: a reduce_scatter over the vector's n parts round the ring, then their
 * allgather, 2n - 2 steps; each part is reduced once, by its owner, in ring order (rounding each partial to the element
 * type), so every rank still gets the same bits. */
#include "coll/cuda/cuda_coll.h"

static void form(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    weft_gpu_allreduce_pipe(a, st, p);
    weft_gpu_pipe_ring(p, 8);
    weft_gpu_pipe_parts(a, st->n, p);
}

WEFT_GPU_PIPE_ALG(allreduce, ring, WEFT_COLL_ALLREDUCE,
                  "ring (3+ ranks): every rank stores only into the next rank's positions; the vector's n parts "
                  "reduced round the ring, then passed round (2n - 2 steps); reduced in ring order",
                  form)
