/* allgather on device buffers through the pipelined kernel (pipelined.c, kernels.h: weft_ck_pipe_args), the peers
 * reading: its form, which the pushed and ring forms start from. */
#include "coll/cuda/cuda_coll.h"

/* Copies of bytes: every rank's block to its place in the output. */
void weft_gpu_allgather_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    p->mode = 2;
    p->esize = 1;
    p->count = a->count * weft_gpu_esize(a);
    p->copy_self = 1;
    for (int r = 0; r < st->n; r++)
        p->dst[r] = weft_coll_rblock(a, r);
}

WEFT_GPU_PIPE_ALG(allgather, pipelined, WEFT_COLL_ALLGATHER,
                  "pipelined: each block stages units of the block and copies every peer's out as their flags arrive",
                  weft_gpu_allgather_pipe)
