/* bcast on device buffers through the pipelined kernel as a ring (pipelined.c, kernels.h: weft_ck_pipe_args
 * modes 5-8; 3 or more ranks): every rank stores only into the next rank's positions and takes out of its own what
 * the previous one stored, as NCCL's rings do: the root's buffer along the chain root, root + 1, ..., each rank copying
 * what it takes and storing it on. */
#include "coll/cuda/cuda_coll.h"

static void form(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    weft_gpu_bcast_pipe(a, st, p);
    weft_gpu_pipe_ring(p, 6);
    p->root = a->root;
}

WEFT_GPU_PIPE_ALG(bcast, ring, WEFT_COLL_BCAST,
                  "ring (3+ ranks): the root's buffer along the chain root, root + 1, ..., each rank storing only into "
                  "the next one's positions",
                  form)
