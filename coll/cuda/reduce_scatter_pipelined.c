/* reduce_scatter_block on device buffers through the pipelined kernel (pipelined.c, kernels.h: weft_ck_pipe_args), the
 * peers reading: its form, which the pushed and ring forms start from. */
#include "coll/cuda/cuda_coll.h"

/* A unit is n pieces, one of each rank's block; each rank reduces its own piece. */
void weft_gpu_reduce_scatter_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    p->mode = 1;
    p->npieces = st->n;
    p->in_stride = a->count * weft_gpu_esize(a);
    p->red_piece = st->me;
}

WEFT_GPU_PIPE_ALG(reduce_scatter, pipelined, WEFT_COLL_REDUCE_SCATTER_BLOCK,
                  "pipelined: each block stages units of every rank's block and reduces this rank's piece of every "
                  "peer's as their flags arrive",
                  weft_gpu_reduce_scatter_pipe)
